"""A run's time estimate as the pages and config.json hold it: its parts, the range the
learned error puts round them, and the words for a duration. A module of its own so the
estimate's error model (error.py) and its arithmetic (predict.py) both read it and
neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

from calm_core.estimate.error import RECORD_VERSION, Spread, TrackRecord, rates_kind
from calm_core.estimate.machine_load import MachineLoad


@dataclass(frozen=True)
class Part:
    """One part of a run (start-up, model load, fill, steps, evaluations, final evaluation):
    its seconds at this machine's load now, before the learned correction, and what it counts."""

    name: str
    seconds: float
    detail: str


@dataclass(frozen=True)
class Estimate:
    """A run's parts and the error learned for figures like theirs: `likely` leads, `low`
    and `high` bound it, `early` is the run ended at its earliest calibrated stop."""

    parts: tuple[Part, ...]
    machine: MachineLoad
    threads: int  # the job's torch threads (TrainConfig.job_threads)
    source: str  # where the rates come from
    rates_learned: bool
    steps: int
    earliest_stop: int  # the first step the calibrated stop can end the run at (= steps: it cannot stop early)
    likely_steps: int
    spread: Spread
    track: TrackRecord | None
    early_figure: float  # the parts' sum if the run ends at `earliest_stop`

    @property
    def figure(self) -> float:
        """The parts' sum: what the learned error is measured against."""
        return sum(p.seconds for p in self.parts)

    @property
    def likely(self) -> float:
        return self.figure * self.spread.center

    @property
    def low(self) -> float:
        return self.figure * self.spread.low

    @property
    def high(self) -> float:
        return self.figure * self.spread.high

    @property
    def early(self) -> float:
        """The likely duration if the calibrated stop ends the run at its earliest step."""
        return self.early_figure * self.spread.center

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def steps_note(self) -> str:
        """The step count is an upper bound: say so, and how early the run can end."""
        if self.earliest_stop >= self.steps:
            return f"all {self.steps} steps"
        return (
            f"about {self.likely_steps} of up to {self.steps} steps: the calibrated stop ends the run at a step "
            f"it cannot know in advance, from step {self.earliest_stop} on"
        )


def minutes(seconds: float) -> str:
    """`41 s` under two minutes, else `7.6 min`."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def span(low: float, high: float) -> str:
    return f"{minutes(low)} to {minutes(high)}"


def launch_record(estimate: Estimate) -> dict[str, object]:
    """config.json's `estimate`: what a run's launch showed, so that later estimates can
    learn their own error from it (`recorded_ratio`). `figure_s` is the parts' sum before
    the learned correction: the ratio is learned against it, not against itself."""
    return {
        "version": RECORD_VERSION,
        "figure_s": round(estimate.figure, 3),
        "likely_s": round(estimate.likely, 3),
        "low_s": round(estimate.low, 3),
        "high_s": round(estimate.high, 3),
        **estimate.machine.to_record(),
        "threads": estimate.threads,
        "busy": estimate.machine.busy,
        "rates": rates_kind(estimate.rates_learned),
        "spread_runs": estimate.spread.runs,
    }
