"""The time estimate (calm_core/workspace/estimate.py): every part of a run from recorded
rates, scaled by the machine's load; and one real tiny-model run whose every part falls
inside the range estimated before it started, with no history."""

from __future__ import annotations

from pathlib import Path

import pytest

from calm_core.io import atomic_write_json
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.timings import Evaluation, PhaseTimes, RunSizes
from calm_core.workspace.estimate import earliest_stop, estimate_for, estimate_run
from calm_core.workspace.estimate_rates import Rates, default_rates, rates_from
from calm_core.workspace.machine_load import CONTENTION, MachineLoad

SIZES = RunSizes(heldout=100, evals=300, probe=64, fill=500, final_variants=3, step_work=20.0)
RATES = Rates(load_s=2.0, fill_per_item=0.05, step_per_work=0.05, eval_fixed_s=1.0, eval_per_item=0.01,
              final_per_item=0.02, spread=(0.5, 2.0), source="test")
IDLE = MachineLoad(0.1, 2)


def test_a_busy_machine_scales_the_estimate_by_its_fair_share_and_says_so() -> None:
    busy = MachineLoad(2.0, 2)  # another job wants both cores: a run gets half the machine
    assert IDLE.factor == 1.0 and IDLE.note() is None
    assert busy.factor == 2.0 and "Another process is using the CPU" in busy.note()
    assert "assumes that load continues" in busy.note()
    cfg = TrainConfig.preset("quick", method="calm")
    idle, loaded = (estimate_run(cfg, SIZES, RATES, m, selects=True) for m in (IDLE, busy))
    assert loaded.likely == pytest.approx(2 * idle.likely)  # the fair share, if the load goes on
    assert loaded.high == pytest.approx(2 * CONTENTION * idle.high)  # threads contending, as issue 23 measured
    assert loaded.low == pytest.approx(idle.low)  # the other process may pause
    assert idle.low < idle.likely < idle.high


def test_every_part_is_its_rate_times_its_count() -> None:
    cfg = TrainConfig.preset("quick", method="calm", select="last")  # no early stop: low and high differ by the spread
    estimate = estimate_run(cfg, SIZES, RATES, IDLE, selects=True)
    assert [p.name for p in estimate.parts] == ["model load", "frozen-layer fill", "steps", "evaluations",
                                                "final evaluation"]
    assert estimate.part("model load").high == pytest.approx(2.0 * 2.0)
    assert estimate.part("frozen-layer fill").low == pytest.approx(500 * 0.05 * 0.5)
    assert estimate.part("steps").high == pytest.approx(40 * 20 * 0.05 * 2.0)
    kinds = ["full"] + [cfg.eval_schedule.kind(s) for s in cfg.eval_schedule.steps_evaluated()]  # step 0 too
    seconds = sum(1.0 + 0.01 * SIZES.evaluation_items(k) for k in kinds)
    assert estimate.part("evaluations").high == pytest.approx(seconds * 2.0)
    assert estimate.part("final evaluation").low == pytest.approx((100 + 300 * 3) * 0.02 * 0.5)
    assert estimate.low == pytest.approx(sum(p.low for p in estimate.parts))


def test_the_step_count_is_an_upper_bound_the_calibrated_stop_can_end_earlier() -> None:
    cfg = TrainConfig.preset("quick", method="calm")  # patience 4: evaluations at 1, 2, 4, 6 without a better step
    assert earliest_stop(cfg, selects=True) == 6
    assert earliest_stop(cfg, selects=False) == 40 and earliest_stop(TrainConfig.preset("quick", select="last"), True) == 40
    estimate = estimate_run(cfg, SIZES, RATES, IDLE, selects=True)
    assert estimate.part("steps").low == pytest.approx(6 * 20 * 0.05 * 0.5)
    assert "up to 40 steps" in estimate.steps_note() and "from step 6" in estimate.steps_note()


def test_a_stored_fill_may_cost_nothing() -> None:
    cfg = TrainConfig.preset("quick", method="calm")
    estimate = estimate_run(cfg, SIZES, RATES, IDLE, selects=True, fill_may_be_stored=True)
    assert estimate.part("frozen-layer fill").low == 0.0 and estimate.part("frozen-layer fill").high > 0


def _timings(load_average: float, step_s: float, evaluations: list[tuple[int, float]]) -> PhaseTimes:
    times = PhaseTimes(load_average=load_average, cpus=2, sizes=SIZES, load_s=3.0, fill_s=25.0, steps=10,
                       steps_s=10 * step_s, final_s=40.0, total_s=100.0)
    times.evaluations = [Evaluation(i, "full", items, seconds) for i, (items, seconds) in enumerate(evaluations)]
    return times


def test_rates_are_learned_as_idle_machine_seconds() -> None:
    """A run under load 2 on 2 cores took twice an idle run's time: its rates are halved;
    evaluations of two sizes give the fixed and the per-item cost."""
    busy = _timings(2.0, step_s=2.0, evaluations=[(100, 4.0), (300, 8.0)])  # idle: 1 + 0.01 * items
    rates = rates_from([busy], "past")
    assert rates.step_per_work == pytest.approx(1.0 / SIZES.step_work)
    assert rates.eval_fixed_s == pytest.approx(1.0) and rates.eval_per_item == pytest.approx(0.01)
    assert rates.load_s == pytest.approx(1.5) and rates.fill_per_item == pytest.approx(12.5 / 500)
    assert rates.final_per_item == pytest.approx(20.0 / SIZES.final_items())
    assert rates_from([], "none") is None


def test_timings_survive_status_json() -> None:
    times = _timings(0.3, step_s=1.0, evaluations=[(164, 2.5)])
    again = PhaseTimes.from_dict(times.to_dict())
    assert again.sizes == SIZES and again.evaluations == times.evaluations and again.steps_s == times.steps_s


def test_defaults_follow_the_model_size() -> None:
    small, large, unknown = default_rates(3_000_000), default_rates(135_000_000), default_rates(None)
    assert small.load_s < large.load_s  # between the two measured models: in between
    assert default_rates(1_350_000_000).step_per_work > large.step_per_work  # 10x the parameters: slower
    assert unknown.spread[1] > large.spread[1] and "unknown" in unknown.source


def test_open_answers_start_from_a_costlier_evaluation(tmp_path: Path) -> None:
    """Open answers generate 1 + n answers per item: before their first run, the
    multiple-choice defaults would be far short, so their evaluation counts that many."""
    mc = estimate_for(TrainConfig.preset("quick", method="calm"), tmp_path, IDLE)
    open_cfg = TrainConfig.preset("quick", method="calm", task="openqa", train_data="builtin/capitals_open/train",
                                  heldout_data="builtin/capitals_open/validation",
                                  eval_data=("builtin/capitals_open/test",))
    estimate = estimate_for(open_cfg, tmp_path, IDLE)
    assert f"{1 + open_cfg.generation.n_samples:g} multiple-choice items" in estimate.source
    assert estimate.part("final evaluation").high > mc.part("final evaluation").high


def test_the_default_runs_idle_estimate_holds_its_measured_idle_times(tmp_path: Path) -> None:
    """bench/quick_run.py timed the Train page's default run end to end on an idle
    machine (bench/results/quick_run.json): with the calibrated stop and without it, both
    times fall inside the embedded model's default estimate, made with no history. Not
    independent of the defaults (their evaluation rate comes from the difference of these
    two runs), it checks the arithmetic: the parts, the schedule and the earliest stop."""
    import json

    from calm_core.paths import PROJECT_ROOT

    bench = json.loads((PROJECT_ROOT / "bench/results/quick_run.json").read_text())
    data = dict(zip(["train_data", "heldout_data"], bench["command_data"][1:4:2]),
                eval_data=tuple(bench["command_data"][5:]))
    flags = {"stop": {}, "no stop": {"select": "last", "eval_dense_until": 0, "lr_theta": 1.0}}
    assert {row["variant"] for row in bench["rows"]} == set(flags) and bench["variants"]["no stop"][0] == "--select"
    for row in bench["rows"]:
        cfg = TrainConfig.preset("quick", method="calm", **data, **flags[row["variant"]])
        estimate = estimate_for(cfg, tmp_path, IDLE)
        assert estimate.low <= row["seconds"] <= estimate.high, (row, estimate.low, estimate.high)


def test_the_estimate_learns_from_a_finished_run_of_the_same_model(tmp_path: Path) -> None:
    cfg = TrainConfig.preset("quick", method="calm")
    first = estimate_for(cfg, tmp_path, IDLE)
    assert "defaults" in first.source
    run = RunDir.create(tmp_path, "done", {"train": cfg.to_dict(), "method": "calm"})
    run.write_status("running")
    atomic_write_json(run.path / "results.json", {"results": []})
    run.write_status("finished", timings=_timings(0.0, step_s=0.5, evaluations=[(100, 2.0), (300, 4.0)]).to_dict())
    learned = estimate_for(cfg, tmp_path, IDLE)
    assert "recent finished runs" in learned.source
    other = estimate_for(TrainConfig.preset("quick", method="calm", scoring="letter"), tmp_path, IDLE)
    assert "defaults" in other.source  # another scoring rule: another rate


def test_the_first_estimate_holds_a_real_tiny_runs_every_part(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Done-when of issue 23: the estimate made before a run, with no history, on this
    machine at its current load, holds the real wall time of each part and of the whole.
    The model is loaded inside the run (its load is a part) and LoRA on the top layer of
    two leaves one layer to cache (the fill is a part)."""
    from calm_core.training.loop import train

    cfg = TrainConfig.preset("quick", method="calm", model=str(tiny_model_dir), steps=6, eval_every=3,
                             train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation",
                             eval_data=("builtin/capitals/test",), train_limit=16, heldout_limit=12, eval_limit=12,
                             lora={"r": 4, "alpha": 8, "layers": 1})
    estimate = estimate_for(cfg, tmp_path / "no-history")
    assert "defaults" in estimate.source
    run = RunDir.create(tmp_path, "real", cfg.to_dict())
    train(cfg, run=run)
    real = PhaseTimes.from_dict(run.status["timings"])
    assert real.fill_s and real.sizes.fill > 0
    measured = {"model load": real.load_s, "frozen-layer fill": real.fill_s, "steps": real.steps_s,
                "evaluations": real.evaluation_seconds(), "final evaluation": real.final_s}
    print(f"load average {estimate.machine.load_average} on {estimate.machine.cpus} cores")
    for name, seconds in [*measured.items(), ("total", real.total_s)]:
        part = estimate.part(name) if name != "total" else estimate
        print(f"{name}: {seconds:.1f} s, estimated {part.low:.1f}-{part.high:.1f} s")
    for name, seconds in measured.items():
        part = estimate.part(name)
        assert part.low <= seconds <= part.high, f"{name}: {seconds:.2f} s outside {part.low:.2f}-{part.high:.2f} s"
    assert estimate.low <= real.total_s <= estimate.high


def test_the_train_page_shows_the_parts_and_a_busy_machine(open_page, tiny_everywhere, monkeypatch) -> None:
    """The default run's estimate: a range, every part, the step count as an upper bound;
    with another process on both cores, the page says the estimate assumes that load."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    at = open_page("views/train.py")
    assert not at.exception, at.exception
    metric = next(m for m in at.metric if m.label == "Estimated time")
    assert " to " in metric.value
    caption = " ".join(c.value for c in at.caption)
    for part in ("model load", "frozen-layer fill", "steps", "evaluations", "final evaluation", "up to 40 steps"):
        assert part in caption
    assert not any("another process" in w.value for w in at.warning)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    at.run()
    assert any("Another process is using the CPU" in w.value and "assumes that load continues" in w.value
               for w in at.warning)
    busy = next(m for m in at.metric if m.label == "Estimated time")
    assert busy.value != metric.value  # twice the idle figures
