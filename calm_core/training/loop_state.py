"""The training loop's state: `Loop`, what the loop carries from step to step (one typed
object its parts take, with what varies), and `TrainResult`, what a run hands back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from calm_core.runs.events import EventLog
from calm_core.runs.rundir import RunDir
from calm_core.training.batches import Data
from calm_core.training.config import TrainConfig
from calm_core.training.context import Method, StepContext
from calm_core.training.stopping import CalibratedStop
from calm_core.training.timings import PhaseTimes


@dataclass
class TrainResult:
    state: str  # finished | cancelled
    step: int
    run_dir: Path | None
    last_metrics: dict[str, Any] = field(default_factory=dict)
    prefill: dict[str, Any] | None = None  # the frozen-prefix fill before the first step (the task's prefill)


@dataclass
class Loop:
    """What the loop carries from step to step, so its parts take the loop and what varies.

    `writer` is the run directory on rank 0 and None on other ranks (and without a run):
    only rank 0 writes. `step` is the last step taken, `row` its metrics record."""

    cfg: TrainConfig
    ctx: StepContext
    method: Method
    data: Data
    writer: RunDir | None
    stop: CalibratedStop
    times: PhaseTimes
    progress: Callable[[int, int, dict[str, Any]], None] | None = None
    step: int = 0
    elapsed_before: float = 0.0  # training time of the run's earlier processes (a resumed run)
    row: dict[str, Any] = field(default_factory=dict)
    events: EventLog | None = None  # TensorBoard event files beside metrics.jsonl (runs/events.py)
