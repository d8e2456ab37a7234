"""The Train page's time estimate against real runs: actual / likely for each, idle and beside a busy process.

    PYTHONPATH=$PWD .venv/bin/python bench/estimate_accuracy.py [--idle 4] [--busy 4] [--after 2] \
        [--fresh] [--model embedded] [--smoke] [--json bench/results/estimate_accuracy.json]

Each run is launched the way the Train page launches one: `estimate_for` on this machine
at its load now, then `launch_training` with that estimate's launch record (a background
`calm train` job), waited for until it finishes. All runs share one scratch workspace, so
each estimate learns from the runs before it (rates, then the error) as a user's would; the
first runs use the defaults (`--fresh`: every run has a workspace of its own, so every
estimate is made from the defaults, as on a machine's first run). The runs are short on
purpose: the embedded model, built-in chemical symbols, a few steps, small limits, and
configurations that differ (method, steps, evaluation sets, the calibrated stop) so that a
learned rate is not simply the last run's.

`idle`: nothing added by the bench (other processes on the machine still count, and the
load at each launch is recorded). `busy`: a process that keeps one core busy
(`python -c "while True: pass"`) starts `--settle` seconds before the first busy launch, so
the 1-minute load average has begun to see it, and runs until the last busy run ends.
`after`: that process runs `--settle` seconds and stops just before each launch, when the
load average still counts it (the estimate must not assume a slowdown that is over).

Per run: the likely figure and range shown at launch, the actual wall time (status.json:
the job's start to its end), actual / likely, and each part's estimate against its
recorded time. The summary: the share of runs within 0.5x-2x of the likely figure and
inside their range, and the ranges' widths (high / low). `--model tiny` (tests/conftest.py's
random tiny Llama) with `--smoke` (each run cut to bench/streaming.py's SMOKE_RUN, as
bench/quick_run.py's) is a smoke run: the same estimates, launches and records, whose
figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = {
    "train_data": "builtin/chemical_symbols/train",
    "heldout_data": "builtin/chemical_symbols/validation",
    "train_limit": 32,
    "heldout_limit": 48,  # all of it: enough for ATS, whose fits dominate the cross-fitting
    "eval_limit": 24,
}
CHEM, UNITS = "builtin/chemical_symbols/test", "builtin/units/test"
# (label, TrainConfig.preset("quick") overrides): cycled through, idle and busy alike.
# The first ends early: a large theta step soon spoils S_V, and the calibrated stop ends the
# run `select_patience` evaluations after its best step (`steps done` says where); the
# second fits its post-hoc calibrators on S_T + S_V (calibrate_on = all), where ATS is
# cross-fitted too.
CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("calm 20 steps, stop, lr_theta 1", {"method": "calm", "steps": 20, "eval_data": (CHEM,), "lr_theta": 1.0}),
    (
        "sft 12 steps, 2 sets, fits on S_T + S_V",
        {"method": "sft", "steps": 12, "eval_data": (CHEM, UNITS), "select": "last", "calibrate_on": "all"},
    ),
    ("calm 6 steps, 2 sets", {"method": "calm", "steps": 6, "eval_data": (CHEM, UNITS), "select": "last"}),
)
CONDITIONS = ("idle", "busy", "after")
PART_RECORDS = {  # the estimate's part -> how to read its actual seconds from a finished run
    "start-up": lambda run: run.startup_s,
    "model load": lambda run: run.timings.load_s,
    "frozen-layer fill": lambda run: run.timings.fill_s,
    "steps": lambda run: run.timings.steps_s,
    "evaluations": lambda run: run.timings.evaluation_seconds(),
    "final evaluation": lambda run: run.timings.final_forward_s(),  # less its cross-fitting, a part of its own
    "cross-fitting": lambda run: run.timings.cross_fit_s,
}


@contextmanager
def one_busy_core(active: bool, settle_s: float) -> Iterator[None]:
    """A process that wants one core for as long as the block runs, started `settle_s`
    before it (nothing if not `active`)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if active else None
    try:
        if hog is not None:
            time.sleep(settle_s)
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def wait_for(run: Any, timeout_s: float) -> str:
    """Poll the run until it ends and its process is gone (a job that has written its end
    is still exiting for a moment, and the next estimate would count it); its final state."""
    from calm_core.runs.process import process_alive

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = run.state().state
        if state in ("finished", "failed", "cancelled", "damaged") and not process_alive(run.status):
            return state
        time.sleep(0.5)
    return "timeout"


def one_run(
    label: str, overrides: dict[str, Any], condition: str, root: Path, timeout_s: float, model: str = "embedded"
) -> dict[str, Any]:
    """Estimate, launch, wait: the row of one run of `model` (a name or folder the job loads);
    `overrides` go over DATA."""
    from calm_core.estimate.predict import estimate_for
    from calm_core.estimate.rates import read_past_run
    from calm_core.launch import launch_training
    from calm_core.runs.rundir import RunDir
    from calm_core.training.config import TrainConfig

    cfg = TrainConfig.preset("quick", model=model, **{**DATA, **overrides})
    estimate = estimate_for(cfg, root)
    run, _ = launch_training(cfg, root=root, estimate=estimate)
    state = wait_for(run, timeout_s)
    if state != "finished":
        raise SystemExit(f"run {run.run_id} ended {state}: {RunDir(run.path).status.error}")
    past = read_past_run(RunDir(run.path))
    actual = past.wall_s
    center = estimate.spread.center
    parts = {p.name: [round(p.seconds * center, 2), _round(PART_RECORDS[p.name](past))] for p in estimate.parts}
    return {
        "condition": condition,
        "config": label,
        "run": run.run_id,
        "load_average": estimate.machine.load_average,
        "demand": estimate.machine.demand,
        "estimate_busy": estimate.machine.busy,
        "rates": estimate.to_record()["rates"],
        "spread_runs": estimate.spread.runs,
        "likely_s": round(estimate.likely, 1),
        "low_s": round(estimate.low, 1),
        "high_s": round(estimate.high, 1),
        "actual_s": round(actual, 1),
        "ratio": round(actual / estimate.likely, 3),
        "within_2x": 0.5 <= actual / estimate.likely <= 2.0,
        "in_range": estimate.low <= actual <= estimate.high,
        "width": round(estimate.high / estimate.low, 2),
        "steps_done": past.timings.steps,
        "steps_limit": cfg.steps,
        "parts": parts,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The shares and widths, over all runs and per condition."""

    def of(subset: list[dict[str, Any]]) -> dict[str, Any]:
        if not subset:
            return {}
        return {
            "runs": len(subset),
            "within_2x": sum(r["within_2x"] for r in subset) / len(subset),
            "in_range": sum(r["in_range"] for r in subset) / len(subset),
            "median_ratio": statistics.median(r["ratio"] for r in subset),
            "median_width": statistics.median(r["width"] for r in subset),
            "max_width": max(r["width"] for r in subset),
        }

    return {"all": of(rows), **{c: of([r for r in rows if r["condition"] == c]) for c in CONDITIONS}}


def table(rows: list[dict[str, Any]], totals: dict[str, Any]) -> str:
    """The markdown tables: one row per run, then the summary."""
    from calm_core.estimate.text import minutes

    lines = [
        "| # | condition | configuration | load avg | others' cores | rates | past runs | likely | range | width "
        "| actual | actual / likely | in range |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | {r['condition']} | {r['config']} | {r['load_average']:.1f} | {r['demand']:.1f} | {r['rates']} "
            f"| {r['spread_runs']} "
            f"| {minutes(r['likely_s'])} | {minutes(r['low_s'])}-{minutes(r['high_s'])} | {r['width']:.1f}x "
            f"| {minutes(r['actual_s'])} | {r['ratio']:.2f} | {'yes' if r['in_range'] else 'no'} |"
        )
    lines += [
        "",
        "| runs | n | within 0.5x-2x | inside the range | median actual / likely | median width | max width |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in totals.items():
        if s:
            lines.append(
                f"| {name} | {s['runs']} | {s['within_2x']:.0%} | {s['in_range']:.0%} | {s['median_ratio']:.2f} "
                f"| {s['median_width']:.1f}x | {s['max_width']:.1f}x |"
            )
    return "\n".join(lines)


def part_table(rows: list[dict[str, Any]]) -> str:
    """One row per run and part: the part's likely seconds at launch, what it took, and
    actual / likely (a part under a second on both sides is not judged: its ratio is noise)."""
    lines = [
        "| # | configuration | steps done | part | likely s | actual s | actual / likely |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        done = f"{r['steps_done']} of {r['steps_limit']}"
        for name, (likely, actual) in r["parts"].items():
            ratio = f"{actual / likely:.2f}" if actual is not None and likely and max(likely, actual) >= 1.0 else "-"
            lines.append(f"| {i} | {r['config']} | {done} | {name} | {likely:.1f} | {_shown(actual)} | {ratio} |")
    return "\n".join(lines)


def part_ratios(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each part's actual / likely over the runs, where either side reaches a second."""
    ratios: dict[str, list[float]] = {}
    for r in rows:
        for name, (likely, actual) in r["parts"].items():
            if actual is not None and likely and max(likely, actual) >= 1.0:
                ratios.setdefault(name, []).append(round(actual / likely, 3))
    return ratios


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=4, help="runs with nothing added by the bench")
    parser.add_argument("--busy", type=int, default=4, help="runs beside a process that keeps one core busy")
    parser.add_argument("--after", type=int, default=2, help="runs launched just after a busy process stopped")
    parser.add_argument("--settle", type=float, default=45.0, help="seconds the busy process runs before")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    parser.add_argument("--fresh", action="store_true", help="each run in a workspace of its own: no history")
    parser.add_argument("--model", default="embedded", help="embedded, a model directory, or tiny (a smoke run)")
    parser.add_argument("--smoke", action="store_true", help="each run cut to SMOKE_RUN: checks the script, times nothing")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "estimate_accuracy.json")
    args = parser.parse_args()
    from bench.streaming import SMOKE_RUN, model_or_tiny

    began, rows = time.time(), []
    with tempfile.TemporaryDirectory(prefix="calm-estimate-") as scratch:
        os.environ["CALM_WORKSPACE"] = scratch  # the jobs inherit it
        root = Path(scratch) / "runs"
        model = model_or_tiny(args.model, Path(scratch))
        counts = {"idle": args.idle, "busy": args.busy, "after": args.after}
        for condition in CONDITIONS:
            with one_busy_core(condition == "busy" and counts[condition] > 0, args.settle):
                for _ in range(counts[condition]):
                    if condition == "after":
                        with one_busy_core(True, args.settle):
                            pass  # stops as the block ends: the launch comes right after
                    label, overrides = CONFIGS[len(rows) % len(CONFIGS)]
                    where = root / f"fresh-{len(rows)}" if args.fresh else root
                    overrides = {**overrides, **(SMOKE_RUN if args.smoke else {})}
                    rows.append(one_run(label, overrides, condition, where, args.timeout, model))
                    print(json.dumps(rows[-1]), flush=True)
    totals = summary(rows)
    text = table(rows, totals) + "\n\n" + part_table(rows)
    print("\n" + text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["bench/estimate_accuracy.py", *sys.argv[1:]])
    record = {
        "command": command,
        "cores": os.cpu_count(),
        "seconds": round(time.time() - began),
        "rows": rows,
        "model": args.model,
    }
    record["part_ratios"] = part_ratios(rows)
    args.json.write_text(json.dumps({**record, "summary": totals}, indent=2) + "\n")
    args.json.with_suffix(".md").write_text(text + "\n")
    print(f"wrote {args.json} and {args.json.with_suffix('.md')}")


if __name__ == "__main__":
    main()
