"""The time estimate (calm_core/estimate/): every part of a run from recorded
rates at the fair share of the machine; one likely figure and a range learned from past
runs' recorded error; the words the Train page shows; and what a real run records so that
later estimates can learn from it. No assertion here depends on how fast anything ran."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest

from calm_core.estimate import text as estimate_text
from calm_core.estimate.error import (
    COVER,
    MAX_WIDTH,
    PRIOR_WEIGHT,
    ErrorPrior,
    learn_spread,
    prior_for,
    recorded_ratio,
    track_record,
)
from calm_core.estimate.machine_load import MachineLoad
from calm_core.estimate.arithmetic import earliest_stop, estimate_run, likely_steps
from calm_core.estimate.predict import estimate_for, launch_estimate, planned_sizes
from calm_core.estimate.rates import PastRun, Rates, default_rates, rates_from, read_past_run
from calm_core.io import atomic_write_json
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.timings import Evaluation, PhaseTimes, RunSizes

SIZES = RunSizes(heldout=100, evals=300, probe=64, fill=500, final_variants=3, step_work=20.0)
RATES = Rates(startup_s=3.0, load_s=2.0, fill_per_item=0.05, step_per_work=0.05, eval_fixed_s=1.0,
              eval_per_item=0.01, final_per_item=0.02, source="test")
IDLE = MachineLoad(0.1, 2)
FLAT = ErrorPrior(1.0, 0.25)


# ---------------------------------------------------------------------------- the machine's load


def test_the_load_slows_a_job_by_the_fair_share_of_its_threads_and_the_page_says_so() -> None:
    """A job on one thread of two cores is not slowed by one other busy process; beyond
    the cores, every thread gets its share."""
    assert IDLE.factor(1) == 1.0 and IDLE.note(1) is None
    assert MachineLoad(1.0, 2).factor(1) == 1.0  # one busy process, one core left for the job
    assert MachineLoad(3.0, 2).factor(1) == pytest.approx(2.0)  # 4 threads want 2 cores
    assert MachineLoad(3.0, 2).factor(2) == pytest.approx(2.5)
    busy = MachineLoad(3.0, 2).note(1)
    assert busy == (
        "Other programs are keeping this machine's 2 cores busy (they ask for about 3.0 cores, 1.5x what it has; "
        "load average 3.0): a job on 1 thread gets its share of them and takes about 2.0x as long as on an idle "
        "machine. The estimate assumes the load goes on, and its range is the one measured for runs beside other "
        "programs."
    )
    assert MachineLoad(1.0, 2).note(1).startswith("Other programs are using about 1.0 of this machine's 2 cores")
    assert "not slowed" in MachineLoad(1.0, 2).note(1) and "cores," not in MachineLoad(1.0, 2).note(1)
    lagging = MachineLoad(5.5, 2, running=0.2)  # a busy process stopped a moment ago: the load average still counts it
    assert not lagging.busy and lagging.factor(1) == 1.0
    sudden = MachineLoad(0.2, 2, running=3.0)  # one started a moment ago: the load average has not seen it yet
    assert sudden.busy and sudden.factor(1) == pytest.approx(2.0)
    assert MachineLoad.from_record(sudden.to_record()) == sudden and MachineLoad.from_record({}) is None
    cfg = TrainConfig.preset("quick", method="calm", threads=1)
    idle, loaded = (estimate_run(cfg, SIZES, RATES, m, selects=True, spread=learn_spread([], FLAT))
                    for m in (IDLE, MachineLoad(3.0, 2)))
    assert loaded.figure == pytest.approx(2 * idle.figure) and loaded.likely == pytest.approx(2 * idle.likely)


def test_the_demand_is_sampled_from_the_threads_ready_to_run(tmp_path: Path, monkeypatch) -> None:
    from calm_core.estimate import machine_load

    fake = tmp_path / "loadavg"
    fake.write_text("5.50 4.00 3.00 3/120 4242\n")
    monkeypatch.setattr(machine_load, "LOADAVG", fake)
    assert machine_load.sample_running(samples=3, gap_s=0.0) == 2.0  # the reader itself left out
    monkeypatch.setattr(machine_load, "LOADAVG", tmp_path / "none")
    assert machine_load.sample_running(samples=3, gap_s=0.0) is None
    assert MachineLoad(1.5, 2, None).demand == 1.5  # unknown: the load average stands in


# ---------------------------------------------------------------------------- the parts


def test_every_part_is_its_rate_times_its_count() -> None:
    cfg = TrainConfig.preset("quick", method="calm", select="last")  # no early stop: every step counts
    estimate = estimate_run(cfg, SIZES, RATES, IDLE, selects=True)
    assert [p.name for p in estimate.parts] == ["start-up", "model load", "frozen-layer fill", "steps", "evaluations",
                                                "final evaluation", "cross-fitting"]
    assert estimate.part("start-up").seconds == pytest.approx(3.0)
    assert estimate.part("model load").seconds == pytest.approx(2.0)
    assert estimate.part("frozen-layer fill").seconds == pytest.approx(500 * 0.05)
    assert estimate.part("steps").seconds == pytest.approx(40 * 20 * 0.05)
    kinds = ["full"] + [cfg.eval_schedule.kind(s) for s in cfg.eval_schedule.steps_evaluated()]  # step 0 too
    assert estimate.part("evaluations").seconds == pytest.approx(sum(1.0 + 0.01 * SIZES.evaluation_items(k)
                                                                     for k in kinds))
    assert estimate.part("final evaluation").seconds == pytest.approx((100 + 300 * 3) * 0.02)
    assert estimate.figure == pytest.approx(sum(p.seconds for p in estimate.parts))
    assert estimate.early_figure == pytest.approx(estimate.figure)  # it cannot stop early


def test_the_calibrated_stop_counts_a_likely_step_between_the_earliest_and_the_last() -> None:
    cfg = TrainConfig.preset("quick", method="calm")  # patience 4: evaluations at 1, 2, 4, 6 without a better step
    assert earliest_stop(cfg, selects=True) == 6 and likely_steps(cfg, selects=True) == round(math.sqrt(6 * 40))
    assert earliest_stop(cfg, selects=False) == 40 and likely_steps(cfg, selects=False) == 40
    estimate = estimate_run(cfg, SIZES, RATES, IDLE, selects=True)
    assert estimate.part("steps").seconds == pytest.approx(15 * 20 * 0.05)
    assert estimate.early < estimate.likely
    assert "about 15 of up to 40 steps" in estimate.steps_note() and "from step 6" in estimate.steps_note()


def test_the_counts_come_without_loading_and_a_size_only_loading_tells_gives_no_estimate(tmp_path: Path) -> None:
    """A built-in set is counted by its generator; a hub set has no known size until the run
    loads it: no estimate then (the launch records none) unless a limit bounds it."""
    cfg = TrainConfig.preset("quick", method="sft", train_limit=30, eval_data=("builtin/units/test",))
    from calm_core.data.catalog import load_dataset

    sizes = planned_sizes(cfg)
    loaded = (len(load_dataset(name, limit=100).items) for name in ("builtin/capitals/validation", "builtin/units/test"))
    assert (sizes.heldout, sizes.evals) == tuple(loaded)
    hub = TrainConfig.preset("quick", method="sft", heldout_data="hf:someone/quiz:validation", heldout_limit=None)
    assert launch_estimate(hub, tmp_path) is None
    bounded = launch_estimate(dataclasses.replace(hub, heldout_limit=40), tmp_path)
    assert bounded is not None and bounded.figure > 0


# ---------------------------------------------------------------------------- the learned error


def _lognormal(rng: random.Random, center: float, sigma: float, n: int) -> list[float]:
    return [center * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def test_the_range_learned_from_past_runs_holds_the_stated_share_of_new_ones() -> None:
    """Past runs whose real time was a known log-normal multiple of the estimate's figure:
    the likely value finds their median, and the range holds COVER of new runs drawn the
    same way, within a few points."""
    rng = random.Random(0)
    past, future = _lognormal(rng, 1.3, 0.3, 200), _lognormal(rng, 1.3, 0.3, 4000)
    spread = learn_spread(past, FLAT)
    assert spread.center == pytest.approx(1.3, rel=0.08)
    share = sum(spread.low <= r <= spread.high for r in future) / len(future)
    assert abs(share - COVER) < 0.03, share
    assert spread.high / spread.low <= MAX_WIDTH and not spread.limited
    assert spread.runs == 200 and spread.covered / spread.runs == pytest.approx(COVER, abs=0.05)


def test_runs_that_varied_more_than_four_times_get_a_range_cut_to_four_and_say_what_it_holds() -> None:
    rng = random.Random(1)
    past = _lognormal(rng, 1.0, 0.8, 100)
    spread = learn_spread(past, FLAT)
    assert spread.limited and spread.high / spread.low == pytest.approx(MAX_WIDTH)
    assert spread.covered == sum(spread.low <= r <= spread.high for r in past) < 0.8 * len(past)


def test_a_few_runs_move_the_prior_and_many_replace_it() -> None:
    """Five runs that all took twice the figure: the likely value moves toward 2 by their
    weight against the prior's; two hundred make it 2."""
    assert learn_spread([], FLAT).center == 1.0 and learn_spread([], FLAT).runs == 0
    few = learn_spread([2.0] * 5, FLAT)
    assert few.center == pytest.approx(2 ** (5 / (5 + PRIOR_WEIGHT)))
    assert learn_spread([2.0] * 200, FLAT).center == pytest.approx(2.0, rel=0.02)
    assert few.high / few.low < learn_spread([], FLAT).high / learn_spread([], FLAT).low  # agreeing runs narrow it


def test_an_unmeasured_model_starts_from_the_widest_range() -> None:
    measured, unmeasured = learn_spread([], prior_for(False, True)), learn_spread([], prior_for(False, False))
    assert measured.high / measured.low < MAX_WIDTH
    assert unmeasured.high / unmeasured.low == pytest.approx(MAX_WIDTH, rel=0.01)
    assert prior_for(True, True).sigma >= prior_for(False, True).sigma  # busy runs vary at least as much


def _record(figure: float, busy: bool, low: float | None = None, high: float | None = None,
            rates: str = "learned") -> dict:
    return {"version": 1, "figure_s": figure, "likely_s": figure, "low_s": low or figure / 2,
            "high_s": high or figure * 2, "busy": busy, "rates": rates}


def _past(wall: float | None, record: dict | None) -> PastRun:
    return PastRun(train={}, timings=None, wall_s=wall, record=record, threads=1)


def test_past_runs_are_judged_against_what_their_launch_showed() -> None:
    runs = [_past(150.0, _record(100.0, False, 60.0, 140.0)), _past(80.0, _record(100.0, True)),
            _past(None, _record(100.0, False)), _past(90.0, None)]
    assert recorded_ratio(runs[0], busy=False) == pytest.approx(1.5)
    assert recorded_ratio(runs[0], busy=True) is None and recorded_ratio(runs[1], busy=True) == pytest.approx(0.8)
    assert recorded_ratio(runs[2]) is None and recorded_ratio(runs[3]) is None  # no wall time, no record
    assert recorded_ratio(runs[0], rates="learned") == pytest.approx(1.5) and not recorded_ratio(runs[0], rates="defaults")
    track = track_record(runs)
    assert (track.inside, track.runs) == (1, 2)  # 150 s was outside 60-140 s; 80 s inside 50-200 s
    assert track_record([_past(90.0, None)]) is None


# ---------------------------------------------------------------------------- rates


def _timings(load_average: float, step_s: float, evaluations: list[tuple[int, float]]) -> PhaseTimes:
    times = PhaseTimes(load_average=load_average, cpus=2, sizes=SIZES, load_s=3.0, fill_s=25.0, steps=10,
                       steps_s=10 * step_s, final_s=40.0, total_s=100.0)
    times.evaluations = [Evaluation(i, "full", items, seconds) for i, (items, seconds) in enumerate(evaluations)]
    return times


def test_rates_are_learned_as_idle_machine_seconds() -> None:
    """A one-thread run under load 3 on 2 cores took twice an idle run's time: its rates
    are halved; evaluations of two sizes give the fixed and the per-item cost; the start-up
    is the wall time less the run's own clock."""
    busy = PastRun(train={}, timings=_timings(3.0, step_s=2.0, evaluations=[(100, 4.0), (300, 8.0)]), wall_s=108.0,
                   record=None, threads=1)
    rates = rates_from([busy], "past")
    assert rates.learned and rates.step_per_work == pytest.approx(1.0 / SIZES.step_work)
    assert rates.eval_fixed_s == pytest.approx(1.0) and rates.eval_per_item == pytest.approx(0.01)
    assert rates.load_s == pytest.approx(1.5) and rates.fill_per_item == pytest.approx(12.5 / 500)
    assert rates.final_per_item == pytest.approx(20.0 / SIZES.final_items())
    assert rates.startup_s == pytest.approx(4.0)
    assert rates_from([], "none") is None
    launched_idle = PastRun(train={}, timings=busy.timings, wall_s=108.0, threads=1,
                            record={"load_average": 3.0, "cpus": 2, "running": 0.0})  # sampled idle at launch
    assert rates_from([launched_idle], "past").step_per_work == pytest.approx(2.0 / SIZES.step_work)


def test_timings_survive_status_json() -> None:
    times = _timings(0.3, step_s=1.0, evaluations=[(164, 2.5)])
    again = PhaseTimes.from_dict(times.to_dict())
    assert again.sizes == SIZES and again.evaluations == times.evaluations and again.steps_s == times.steps_s


def test_defaults_follow_the_model_size() -> None:
    small, large, unknown = default_rates(3_219_776), default_rates(134_515_008), default_rates(None)
    assert small.load_s < large.load_s and small.measured_model and large.measured_model
    assert default_rates(1_350_000_000).step_per_work > large.step_per_work  # 10x the parameters: slower
    assert not default_rates(1_350_000_000).measured_model
    assert not unknown.measured_model and "unknown" in unknown.source


def test_open_answers_start_from_a_costlier_evaluation(tmp_path: Path) -> None:
    """Open answers generate 1 + n answers per item: before their first run, the
    multiple-choice defaults would be far short, so their evaluation counts that many."""
    mc = estimate_for(TrainConfig.preset("quick", method="calm"), tmp_path, IDLE)
    open_cfg = TrainConfig.preset("quick", method="calm", task="openqa", train_data="builtin/capitals_open/train",
                                  heldout_data="builtin/capitals_open/validation",
                                  eval_data=("builtin/capitals_open/test",))
    estimate = estimate_for(open_cfg, tmp_path, IDLE)
    assert f"{1 + open_cfg.generation.n_samples:g} multiple-choice items" in estimate.source
    assert estimate.part("final evaluation").seconds > mc.part("final evaluation").seconds
    assert estimate.high / estimate.low == pytest.approx(MAX_WIDTH, rel=0.01)  # unmeasured: the widest range


def test_the_default_runs_recorded_idle_times_fall_in_the_defaults_range(tmp_path: Path) -> None:
    """bench/quick_run.py timed the Train page's default run end to end on an idle machine
    (bench/results/quick_run.json), with the calibrated stop and without: both fall within
    0.5x-2x of the embedded model's default likely figure, made with no history, and inside
    its range. Recorded figures, not a timing taken here: it checks the parts, the schedule
    and the likely stop."""
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
        assert 0.5 <= row["seconds"] / estimate.likely <= 2.0, (row, estimate.likely)
        assert estimate.low <= row["seconds"] <= estimate.high, (row, estimate.low, estimate.high)


# ---------------------------------------------------------------------------- learning from this machine's runs


def _finished_run(root: Path, name: str, cfg: TrainConfig, record: dict | None, wall: float,
                  created: float) -> RunDir:
    """A finished run as a job leaves it: config.json with the launch's estimate, status.json
    with its timings and the job's start and end stamps."""
    config = {"train": cfg.to_dict(), "method": cfg.method, **({"estimate": record} if record else {})}
    run = RunDir.create(root, name, config)
    atomic_write_json(run.path / "results.json", {"results": []})
    run.write_status("finished", created=created, started=created + 1.0, ended=created + 1.0 + wall,
                     timings=_timings(0.0, step_s=0.5, evaluations=[(100, 2.0), (300, 4.0)]).to_dict())
    return run


def test_the_estimate_learns_its_rates_and_its_error_from_this_machines_runs(tmp_path: Path) -> None:
    cfg = TrainConfig.preset("quick", method="calm")
    first = estimate_for(cfg, tmp_path, IDLE)
    assert "defaults" in first.source and first.spread.runs == 0 and first.track is None
    for i in range(6):  # idle runs that each took 1.5x the figure shown at their launch
        _finished_run(tmp_path, f"idle-{i}", cfg, _record(100.0, False, 80.0, 160.0), 150.0, 1000.0 + i)
    _finished_run(tmp_path, "busy", cfg, _record(100.0, True), 400.0, 2000.0)  # another condition
    _finished_run(tmp_path, "old", cfg, None, 999.0, 500.0)  # launched before estimates were recorded
    learned = estimate_for(cfg, tmp_path, IDLE)
    assert "recent finished runs" in learned.source and learned.spread.runs == 6
    prior = prior_for(False, True).center
    assert learned.spread.center == pytest.approx(math.exp((PRIOR_WEIGHT * math.log(prior) + 6 * math.log(1.5))
                                                           / (PRIOR_WEIGHT + 6)))
    assert learned.high / learned.low <= MAX_WIDTH
    assert (learned.track.inside, learned.track.runs) == (6, 7)  # the busy run's 400 s was outside 50-200 s
    busy = estimate_for(cfg, tmp_path, MachineLoad(3.0, 2))
    assert busy.spread.runs == 1  # a busy machine learns from the busy run only
    other = estimate_for(TrainConfig.preset("quick", method="calm", scoring="letter"), tmp_path, IDLE)
    assert "defaults" in other.source and other.spread.runs == 0  # estimates from defaults err apart
    _finished_run(tmp_path, "first-letter", cfg, _record(100.0, False, rates="defaults"), 90.0, 3000.0)
    assert estimate_for(TrainConfig.preset("quick", method="calm", scoring="letter"), tmp_path, IDLE).spread.runs == 1


def test_a_run_records_what_later_estimates_learn_from(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A launched run keeps the estimate shown at its launch in config.json, and a finished
    one the job's start and end and each part's time in status.json: read back, it gives
    the ratio the error is learned from and the rates. One real tiny-model run, trained
    the way `calm train` trains in its own process."""
    from calm_core.cli.train import run_in_process
    from calm_core.estimate.predict import launch_estimate
    from calm_core.launch import create_run

    cfg = TrainConfig.preset("quick", method="calm", model=str(tiny_model_dir), steps=4, eval_every=2,
                             train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation",
                             eval_data=("builtin/capitals/test",), train_limit=16, heldout_limit=12, eval_limit=12,
                             lora={"r": 4, "alpha": 8, "layers": 1})
    run = create_run(cfg, tmp_path, estimate=launch_estimate(cfg, tmp_path))  # as `calm train` launches it
    record = run.config.estimate
    for key in ("figure_s", "likely_s", "low_s", "high_s", "load_average", "cpus", "threads", "busy", "rates"):
        assert key in record, key
    assert record["low_s"] <= record["likely_s"] <= record["high_s"] and record["rates"] == "defaults"
    assert run_in_process(run, show_progress=False) == 0
    past = read_past_run(RunDir(run.path))
    assert past.wall_s is not None and past.timings.sizes is not None and past.startup_s is not None
    assert recorded_ratio(past) == pytest.approx(past.wall_s / record["figure_s"])
    assert past.threads == run.status.threads["threads"]
    later = estimate_for(cfg, tmp_path)
    assert later.rates_learned and later.spread.runs + later.track.runs >= 1


# ---------------------------------------------------------------------------- the words


def test_the_words_lead_with_one_figure_and_say_where_the_range_comes_from() -> None:
    cfg = TrainConfig.preset("quick", method="calm")
    fresh = estimate_run(cfg, SIZES, RATES, IDLE, selects=True)
    assert " to " not in estimate_text.headline(fresh)
    sentence = estimate_text.range_sentence(fresh)
    assert sentence.startswith(f"Likely **{estimate_text.headline(fresh)}**") and "9 in 10 runs" in sentence
    assert "No finished run here has recorded its estimate yet" in estimate_text.basis_sentence(fresh)
    assert "from step 6" in estimate_text.early_sentence(fresh)
    rows = estimate_text.part_rows(fresh)
    assert [r["part"] for r in rows] == [p.name for p in fresh.parts] and all(r["likely"] for r in rows)
    wild = estimate_run(cfg, SIZES, RATES, IDLE, selects=True, spread=learn_spread([0.3, 3.0, 0.4, 2.5, 1.0], FLAT),
                        track=track_record([_past(150.0, _record(100.0, False, 60.0, 140.0))]))
    basis = estimate_text.basis_sentence(wild)
    assert "learned from 5 past runs on an idle machine" in basis
    assert "varied more than 4x" in basis and "of 5 past runs fall inside it" in basis
    assert "0 of your 1 latest runs finished inside the range shown at their launch" in basis


def test_the_train_page_leads_with_one_likely_figure_and_keeps_the_parts(open_page, tiny_everywhere,
                                                                           monkeypatch) -> None:
    """The default run's estimate: one figure in the metric, the range under it, the parts in
    an expander; with other processes on the CPU, the page says the estimate assumes that load."""
    import os

    import streamlit as st

    from calm_core.estimate import machine_load

    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(machine_load, "sample_running", lambda: 0.0)
    st.cache_data.clear()
    at = open_page("../pages/train/train.py")
    assert not at.exception, at.exception
    metric = next(m for m in at.metric if m.label == "Estimated time")
    assert " to " not in metric.value and ("s" in metric.value or "min" in metric.value)
    text = " ".join(m.value for m in at.markdown)
    assert f"Likely **{metric.value}**" in text and "9 in 10 runs like this one should take" in text
    expander = next(e for e in at.expander if e.label == "Where the time goes")
    table = expander.dataframe[0].value
    assert list(table["part"]) == ["start-up", "model load", "frozen-layer fill", "steps", "evaluations",
                                   "final evaluation", "cross-fitting"]
    assert "up to 40 steps" in " ".join(c.value for c in expander.caption)
    assert not any("Other programs" in w.value for w in at.warning)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    monkeypatch.setattr(machine_load, "sample_running", lambda: 5.0)
    st.cache_data.clear()
    at.run()
    assert any("Other programs are keeping" in w.value and "assumes the load goes on" in w.value
               for w in at.warning)
    busy = next(m for m in at.metric if m.label == "Estimated time")
    assert busy.value != metric.value  # the fair share of a loaded machine
