"""Where a run's wall time goes, part by part: recorded by every run, read by the estimate.

    sizes = RunSizes.of(cfg, data)                     # the item counts that set the cost
    times = PhaseTimes.start()                         # load average and cores at the start
    with times.part("load"): lm = load_model(...)
    times.add_evaluation(step=0, kind="full", items=sizes.evaluation_items("full"), seconds=1.2)
    run.update_status(timings=times.to_dict())         # status.json `timings`

Model load, the frozen-layer fill and the evaluations can take most of a run, so every run
records each part's wall seconds with the item counts that drive it, and the load average
and cores it started under; the estimate (calm_core/estimate/rates.py) learns idle-machine
rates from these records. The record covers the run's last (re)start: a resumed run loads
and fills again, and says so here.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Sequence

# Parts timed once per (re)start; steps and evaluations add up. `cross_fit` (the post-hoc
# calibrators' fits and the recommendation's cross-fitting) runs inside `final`.
SCALAR_PARTS = ("load", "fill", "final", "cross_fit")


@dataclass(frozen=True)
class RunSizes:
    """The item counts that set a run's cost, known before it starts (from the datasets'
    counts and the config) and recorded with its timings. `fill`: items whose frozen layers the
    run caches before step 1 (0 when it caches none); `probe`: the calibrated stop's S_T
    items, read at every evaluation (0 when the stop is off); `final_variants`: the
    variants the final evaluation runs forwards for on each evaluation set; `step_work`:
    a step's work in SFT-step items (the batch size times the method's `step_cost`);
    `cross_fit`: the post-hoc calibrators' fits and the recommendation's cross-fitting, in
    item-fits (calibration.recommend.cross_fit_work; 0 for a task that recommends nothing)."""

    heldout: int
    evals: int  # all evaluation sets together
    probe: int
    fill: int
    final_variants: int
    step_work: float = 1.0
    cross_fit: float = 0.0

    def evaluation_items(self, kind: str) -> int:
        """Items one evaluation forwards: S_V and the probe, plus every evaluation set when
        `kind` is "full" (selection.EvalSchedule.kind)."""
        if kind not in ("full", "heldout"):
            raise ValueError(f"Expected `kind` to be 'full' or 'heldout', but got {kind!r}")
        return self.heldout + self.probe + (self.evals if kind == "full" else 0)

    def final_items(self) -> int:
        """Items the final evaluation forwards: S_V once (the post-hoc fits) and each
        evaluation set once per variant with its own forward pass."""
        return self.heldout + self.evals * self.final_variants

    @classmethod
    def of(
        cls, cfg: Any, data: Any, *, fills: bool, uses_head: bool, selects: bool, recommends: bool = False
    ) -> "RunSizes":
        """The sizes of a run of `cfg` on `data` (training/batches.Data, or anything with
        sized `train`, `heldout` and `evals`); `fills`: whether it caches frozen layers;
        `uses_head`: the method's; `selects`: the task's (the calibrated stop's probe);
        `recommends`: the task's (its final evaluation cross-fits the post-hoc calibrators)."""
        from calm_core.training.batches import LOWER_PROBE_ITEMS, drawn_positions

        n_train, heldout = len(data.train), len(data.heldout)
        evals = sum(len(items) for items in data.evals.values())
        probe = min(LOWER_PROBE_ITEMS, n_train) if selects else 0
        drawn = len(drawn_positions(n_train, cfg.batch_size, cfg.steps, cfg.seed)) if fills else 0
        variants = (1 if cfg.eval_baselines else 0) + 1 + (1 if uses_head else 0)  # base, the model, theta alone
        return cls(
            heldout=heldout,
            evals=evals,
            probe=probe,
            fill=drawn + heldout + evals if fills else 0,
            final_variants=variants,
            step_work=cfg.batch_size * step_cost(cfg),
            cross_fit=calibrator_work(cfg, n_train, heldout) if recommends else 0.0,
        )


def calibrator_work(cfg: Any, n_train: int, heldout: int) -> float:
    """The final evaluation's post-hoc work in item-fits: every calibrator fitted once on the
    fit set (S_V, or S_T + S_V with calibrate_on = all), then cross-fitted on it for the
    recommendation; 0 without baselines. The fit set's features are captured, so ATS counts."""
    from calm_core.calibration.posthoc import for_task
    from calm_core.calibration.recommend import ALL_LABELLED, cross_fit_work

    if not cfg.eval_baselines or not heldout:
        return 0.0
    n = heldout + (n_train if cfg.calibrate_on == ALL_LABELLED else 0)
    classes = {
        name: c for name, c in for_task("mcqa", defaults_only=False, with_features=True).items() if n >= c.min_items
    }
    return sum(c.fit_work(n) for c in classes.values()) + cross_fit_work(n, classes)


def step_cost(cfg: Any) -> float:
    """A training step of `cfg`'s method in SFT steps (a forward and a backward pass per
    batch item): the method's own `step_cost(cfg)` where it declares one, else 1."""
    from calm_core.training.methods import get_method

    declared = get_method(cfg.method).step_cost
    return float(declared(cfg)) if declared is not None else 1.0


@dataclass
class Evaluation:
    step: int
    kind: str  # "full" or "heldout"
    items: int
    seconds: float


@dataclass
class PhaseTimes:
    """One (re)start of a run, part by part, in wall seconds (see the module docstring).
    `steps_s`: the training steps' wall time outside evaluations (the method's step,
    batches, metrics, heartbeats and checkpoints); `total_s`: from the start of
    `train` to the end, so total_s minus the parts is what no part names."""

    load_average: float  # 1-minute load average when the run started (other processes' demand)
    cpus: int
    sizes: RunSizes | None = None
    load_s: float | None = None
    fill_s: float | None = None
    steps: int = 0
    steps_s: float = 0.0
    evaluations: list[Evaluation] = field(default_factory=list)
    final_s: float | None = None  # the whole final evaluation, `cross_fit_s` included
    cross_fit_s: float | None = None
    total_s: float | None = None
    started: float = field(default_factory=time.perf_counter, repr=False)

    @classmethod
    def start(cls) -> "PhaseTimes":
        return cls(load_average=round(os.getloadavg()[0], 2), cpus=os.cpu_count() or 1)

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the block as part `name` (one of SCALAR_PARTS), added to what it had."""
        if name not in SCALAR_PARTS:
            raise ValueError(f"Expected a part in {list(SCALAR_PARTS)}, but got {name!r}")
        began = time.perf_counter()
        try:
            yield
        finally:
            before = getattr(self, f"{name}_s") or 0.0
            setattr(self, f"{name}_s", before + time.perf_counter() - began)

    def since_start(self) -> float:
        return time.perf_counter() - self.started

    def add_step(self, seconds: float) -> None:
        self.steps += 1
        self.steps_s += seconds

    def add_evaluation(self, step: int, kind: str, items: int, seconds: float) -> None:
        self.evaluations.append(Evaluation(step, kind, items, seconds))

    def final_forward_s(self) -> float | None:
        """The final evaluation less its cross-fitting: its forwards and what goes with them."""
        return None if self.final_s is None else max(0.0, self.final_s - (self.cross_fit_s or 0.0))

    def evaluation_seconds(self) -> float:
        return sum(e.seconds for e in self.evaluations)

    def finish(self) -> None:
        self.total_s = self.since_start()

    def to_dict(self) -> dict[str, Any]:
        """status.json's `timings`: seconds rounded to milliseconds, no clock readings."""
        record = {key: value for key, value in asdict(self).items() if key != "started"}
        for key in ("load_s", "fill_s", "steps_s", "final_s", "cross_fit_s", "total_s"):
            if record[key] is not None:
                record[key] = round(record[key], 3)
        for evaluation in record["evaluations"]:
            evaluation["seconds"] = round(evaluation["seconds"], 3)
        return record

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PhaseTimes":
        """A recorded `timings`; KeyError or TypeError when it is not one (callers skip it)."""
        fields = {
            key: data[key]
            for key in ("load_average", "cpus", "load_s", "fill_s", "steps", "steps_s", "final_s", "total_s")
        }
        fields["cross_fit_s"] = data.get("cross_fit_s")  # absent from records before it was timed
        sizes = RunSizes(**data["sizes"]) if data.get("sizes") else None
        evaluations: Sequence[dict[str, Any]] = data.get("evaluations") or []
        return cls(**fields, sizes=sizes, evaluations=[Evaluation(**e) for e in evaluations])
