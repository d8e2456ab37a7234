"""How busy the machine is now, and how many times an idle machine's time a run takes at that load.

The time estimate (workspace/estimate.py) scales idle-machine rates by this load, and
the rates learned from past runs (workspace/estimate_rates.py) are divided by the load
each run started under; both use this one rule.

The rule is the fair share of a job's threads: a job with `threads` threads beside other
processes whose demand is the 1-minute load average wants `load + threads` cores; past
the machine's cores every thread gets `cores / (load + threads)` of one, so the job takes
`(load + threads) / cores` times as long. A job on one thread of two cores is not slowed
by one other busy process (bench/threads.py measured the same step time alone and beside
one). How far real runs fall from this figure, idle and busy, is not assumed here: it is
learned from this machine's past runs (workspace/estimate_error.py), and before there are
any, taken from what bench/estimate_accuracy.py measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

BUSY_LOAD = 0.5  # a 1-minute load average under this is an idle machine (the studio's own page rendering)


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

    def factor(self, threads: int) -> float:
        """How many times an idle machine's time a job with `threads` threads takes at
        this load (its fair share of the cores; 1 on an idle machine)."""
        if not self.busy:
            return 1.0
        return max(1.0, (self.load_average + max(1, threads)) / max(1, self.cpus))

    def note(self, threads: int) -> str | None:
        """What the page says on a busy machine (None when idle)."""
        if not self.busy:
            return None
        factor = self.factor(threads)
        share = (
            f"{factor:.1f}x an idle machine's time for a job on {threads} thread{'s' if threads > 1 else ''}"
            if factor > 1
            else "a job on a thread of its own is not slowed by that much load, if it goes on as it is"
        )
        return (
            f"Another process is using the CPU (load average {self.load_average:.1f} on {self.cpus} cores): "
            f"the estimate assumes that load continues ({share}), and its range is the one measured for "
            "runs beside other processes"
        )
