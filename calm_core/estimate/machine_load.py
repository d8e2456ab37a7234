"""How busy the machine is now, and how many times an idle machine's time a job takes at that load.

Other processes' demand is their threads ready to run, sampled over a moment
(`sample_running`, /proc/loadavg), else the 1-minute load average, which lags: a minute
after a busy process stops it still counts most of it. A job on `threads` threads beside
that demand gets its fair share of the cores, so it takes `(demand + threads) / cores`
times as long, at least 1: a job on one thread of two cores is not slowed by one other busy
process (bench/threads.py). The estimate scales idle rates up by this factor, and the rates
learned from past runs are scaled down by the factor of the load each ran under.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSY_LOAD = 0.5  # other processes' demand under this many cores is an idle machine
SAMPLES, SAMPLE_GAP_S = 12, 0.025  # how the demand is sampled: a moment, not a minute
LOADAVG = Path("/proc/loadavg")


def sample_running(samples: int = SAMPLES, gap_s: float = SAMPLE_GAP_S) -> float | None:
    """Other processes' threads ready to run, averaged over `samples` readings `gap_s`
    apart (the reader itself left out); None where /proc/loadavg cannot be read."""
    counts = []
    for i in range(samples):
        try:
            running = LOADAVG.read_text(encoding="ascii").split()[3].split("/")[0]
            counts.append(max(0, int(running) - 1))
        except (OSError, IndexError, ValueError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    return sum(counts) / len(counts)


@dataclass(frozen=True)
class MachineLoad:
    """Other processes' demand for the CPU and the cores: how much of it a run would get.
    `running`: their threads ready to run now (`sample_running`), None where unknown."""

    load_average: float
    cpus: int
    running: float | None = None

    @classmethod
    def now(cls) -> "MachineLoad":
        return cls(round(os.getloadavg()[0], 2), os.cpu_count() or 1, sample_running())

    @property
    def demand(self) -> float:
        """Cores other processes want now: the sampled threads, else the load average."""
        return self.running if self.running is not None else self.load_average

    @property
    def busy(self) -> bool:
        return self.demand >= BUSY_LOAD

    def factor(self, threads: int) -> float:
        """How many times an idle machine's time a job with `threads` threads takes at
        this demand (its fair share of the cores; 1 on an idle machine)."""
        if not self.busy:
            return 1.0
        return max(1.0, (self.demand + max(1, threads)) / max(1, self.cpus))

    def note(self, threads: int) -> str | None:
        """What the page says on a busy machine, in plain words (None when idle): how busy
        other programs keep the cores, what that does to a job on `threads` threads, and
        that the estimate assumes it goes on."""
        if not self.busy:
            return None
        job = f"a job on {threads} thread{'s' if threads > 1 else ''}"
        factor = self.factor(threads)
        effect = (
            f"{job} gets its share of them and takes about {factor:.1f}x as long as on an idle machine"
            if factor > 1
            else f"{job} still has a core to itself and is not slowed, if the load stays as it is"
        )
        return (
            f"{self._who()}: {effect}. The estimate assumes the load goes on, and its range is the one "
            "measured for runs beside other programs."
        )

    def _who(self) -> str:
        """Other programs' demand against the cores, in words."""
        cores = f"{self.cpus} core{'s' if self.cpus != 1 else ''}"
        average = f"load average {self.load_average:.1f}"
        if self.demand >= self.cpus:
            times = self.demand / max(1, self.cpus)
            return (
                f"Other programs are keeping this machine's {cores} busy (they ask for about {self.demand:.1f} "
                f"cores, {times:.1f}x what it has; {average})"
            )
        return f"Other programs are using about {self.demand:.1f} of this machine's {cores} ({average})"

    def to_record(self) -> dict[str, float | int | None]:
        """The launch record's fields (Estimate.to_record)."""
        return {"load_average": self.load_average, "cpus": self.cpus, "running": self.running}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "MachineLoad | None":
        """The load a launch recorded, None when it recorded none."""
        try:
            running = record.get("running")
            return cls(float(record["load_average"]), int(record["cpus"]), None if running is None else float(running))
        except (KeyError, TypeError, ValueError):
            return None
