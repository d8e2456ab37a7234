"""How busy the machine is now, and how many times an idle machine's time a run takes at that load.

The time estimate (workspace/estimate.py) scales idle-machine rates by this load, and
the rates learned from past runs (workspace/estimate_rates.py) are divided by the load
each run started under; both use this one rule (a fair share of the CPU, and CONTENTION
for the high end).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

BUSY_LOAD = 0.5  # a 1-minute load average under this is an idle machine (the studio's own page rendering)
# On a busy machine a run takes longer than its fair share of the CPU says: the jobs'
# threads contend for the cores (a thread waits for its descheduled sibling). Measured:
# 11x the idle time with another job on both of the 2 cores (issue 23: 7.6 min against
# 41 s; a fair share says 2x), and a frozen-layer fill at load average 11 at 61x the idle
# rate (a fair share says 6.5x; DEFAULTS). The high end of a busy machine's range is the
# fair share times this.
CONTENTION = 10.0


@dataclass(frozen=True)
class MachineLoad:
    """The 1-minute load average and the cores: how much of the CPU a run would get."""

    load_average: float
    cpus: int

    @classmethod
    def now(cls) -> "MachineLoad":
        return cls(round(os.getloadavg()[0], 2), os.cpu_count() or 1)

    @property
    def busy(self) -> bool:
        return self.load_average >= BUSY_LOAD

    @property
    def factor(self) -> float:
        """How many times an idle machine's time the run takes at this load (fair share)."""
        return 1.0 + self.load_average / self.cpus if self.busy else 1.0

    @property
    def high_factor(self) -> float:
        """The high end: the fair share times CONTENTION on a busy machine."""
        return self.factor * CONTENTION if self.busy else 1.0

    def note(self) -> str | None:
        """What the page says on a busy machine (None when idle)."""
        if not self.busy:
            return None
        return (
            f"Another process is using the CPU (load average {self.load_average:.1f} on {self.cpus} cores): "
            f"the estimate assumes that load continues, {self.factor:.1f}x an idle machine's time with a fair "
            f"share of the CPU, up to {self.high_factor:.0f}x when the jobs' threads contend for the cores"
        )
