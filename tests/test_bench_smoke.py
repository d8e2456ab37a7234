"""Every bench in bench/ run as docs/performance.md names it, on the fewest items it takes,
so a refactor cannot break a command the docs print (bench/scoring.py --one-side once
crashed on json.dumps of an enum, and nothing ran it).

Each `SMOKES` entry is one subprocess: `PYTHONPATH=<checkout> python bench/<name>.py ...`
with the bench's own smallest options, its JSON written under tmp_path. The test checks
that it exits 0 and that its JSON (or, for a bench that prints only a table, its text)
holds what the docs read from it. Nothing is timed: a smoke run's figures mean nothing.
`test_every_bench_has_a_smoke_entry` fails when a script in bench/ has no entry, so a new
bench cannot be added without one, and `test_ci_smokes_every_bench` when a bench's entries
are all `long` (left out of CI): a bench whose documented command trains or loads a real
model has a second entry, named after what makes it cheap (`--tiny`: the tests' random tiny
Llama, or their tiny GGUF; `--smoke`: a few steps and items; `--seconds 2`: the shortest
windows), that runs the same script through its argument parsing, measuring loop and
output on the cheapest input it takes, with one torch thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = "{tmp}/out.json"  # where a bench's --json goes; {tmp} is the test's tmp_path


@dataclass(frozen=True)
class Smoke:
    """One bench command: the script, its arguments, and what its output must hold.

    `output` says where the JSON is: "file" (the OUT path the arguments name), "stdout"
    (the whole of stdout), "last-line" (stdout's last line) or "text" (no JSON: `keys`
    are phrases stdout must contain). For JSON that is a list, `keys` are its rows' keys.
    `skip` is the reason a bench cannot run here at all."""

    script: str
    args: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    output: str = "file"
    module: bool = False  # run as `python -m bench.<name>` (as its docstring names it)
    marks: tuple[Any, ...] = ()
    timeout: int = 900  # a safety net, not a figure: a loaded shared machine runs a smoke 5-10x slower
    skip: str = ""
    env: tuple[tuple[str, str], ...] = ()  # set for the bench's process (and so its children)


SLOW = (pytest.mark.slow,)  # child processes or many steps: 50 s and more under the fast loop's load
EMBEDDED = (pytest.mark.embedded,)
HEAVY = (pytest.mark.embedded, pytest.mark.slow)  # trains the embedded model: minutes on 2 cores
# A smoke that took 40 s or more on the 2 cores even at its smallest options (it trains or
# loads a real model, or measures a matmul peak): `bash scripts/test.sh --long` runs these,
# the whole-suite command (CI) leaves them out, so that CI ends inside its time limit.
LONG = (pytest.mark.long,)
# One torch thread for a CI smoke on a tiny model: its ops are so small that a second thread
# descheduled by another process on the shared cores stalls each of them (bench/threads.py
# measures that), and the smoke's time would be the machine's load rather than its own work.
ONE_THREAD = (("OMP_NUM_THREADS", "1"),)
NO_CUDA = "" if torch.cuda.is_available() else "needs a CUDA GPU (the CPU smoke: tests/test_gpu_script.py)"

SMOKES: dict[str, Smoke] = {
    "arena": Smoke("arena.py", ("--sizes", "40", "--fsync-sizes", "40", "--dir", "{tmp}/arena", "--json", OUT),
                   ("command", "rows", "machine"), marks=SLOW),
    "bilevel_toy_tables": Smoke("bilevel_toy_tables.py", ("--steps", "40"), ("ShiftToy", "TemperatureToy"),
                                output="text", module=True, marks=SLOW),
    "bilevel_toys": Smoke("bilevel_toys.py", (), (), output="text", module=True),  # a library: it imports
    "by_group_guarantee": Smoke("by_group_guarantee.py", ("--trials", "2", "--heldout", "40"),
                                ("pooled", "mondrian"), output="text"),
    "convert_gguf": Smoke("convert_gguf.py", ("--model", "embedded"), ("byte-identical",), output="text",
                          marks=EMBEDDED + LONG),
    "convert_gguf --tiny": Smoke("convert_gguf.py", ("--model", "tiny"), ("byte-identical",), output="text",
                                 env=ONE_THREAD),
    "cross_fit_cost": Smoke("cross_fit_cost.py", ("--width", "16", "--items", "48", "--json", OUT),
                            ("command", "width", "rows")),
    "door_under_attack": Smoke("door_under_attack.py", ("--tries", "1", "--rate", "5", "--flood-mb", "1",
                                                        "--json", OUT),
                               ("conditions", "tries", "upload_flood"), marks=SLOW, timeout=1200),
    "estimate_accuracy": Smoke("estimate_accuracy.py", ("--idle", "1", "--busy", "0", "--after", "0",
                                                        "--settle", "0", "--fresh", "--timeout", "900",
                                                        "--json", OUT),
                               ("rows", "summary"), marks=HEAVY + LONG, timeout=1200),
    "estimate_accuracy --tiny": Smoke("estimate_accuracy.py", ("--idle", "1", "--busy", "0", "--after", "0",
                                                               "--settle", "0", "--fresh", "--timeout", "900",
                                                               "--model", "tiny", "--smoke", "--json", OUT),
                                      ("rows", "summary"), marks=SLOW, env=ONE_THREAD),
    "estimate_side_by_side": Smoke("estimate_side_by_side.py", (), ("history", "config", "load", "likely"),
                                   output="stdout"),
    "first_chart": Smoke("first_chart.py", ("--repeat", "1", "--timeout", "600", "--json", OUT),
                         ("first_chart_s", "longest_silent_s"),
                         marks=(pytest.mark.browser, pytest.mark.embedded), timeout=900),
    "flops": Smoke("flops.py", ("--threads", "1"), ("peak_gflops", "threads"), output="last-line"),
    "gpu_quick": Smoke("gpu_quick.py", ("--steps", "2", "--eval-limit", "8", "--json", OUT),
                       ("variants", "versions", "complete"), marks=EMBEDDED, timeout=600, skip=NO_CUDA),
    "noise_ece": Smoke("noise_ece.py", ("--draws", "20", "--json", OUT), ("rows", "rule", "limit"), marks=EMBEDDED),
    "precision": Smoke("precision.py", ("--models", "embedded", "--limit", "2", "--sets", "builtin/capitals/test",
                                        "--json", OUT),
                       ("models",), marks=EMBEDDED + LONG),
    "precision --tiny": Smoke("precision.py", ("--models", "tiny", "--limit", "2", "--sets", "builtin/capitals/test",
                                               "--threads", "1", "--peak-sizes", "64", "--json", OUT),
                              ("models",), marks=SLOW, env=ONE_THREAD),
    "prefill": Smoke("prefill.py", ("--items", "8", "--prefill-batches", "4", "--json", OUT), ("rows", "args"),
                     marks=EMBEDDED),
    "quick_run": Smoke("quick_run.py", ("--repeats", "1", "--smoke", "--json", OUT), ("rows", "variants"),
                       marks=HEAVY + LONG, timeout=1200),
    "quick_run --tiny": Smoke("quick_run.py", ("--repeats", "1", "--smoke", "--model", "tiny", "--json", OUT),
                              ("rows", "variants"), marks=SLOW, env=ONE_THREAD),
    "run_parts": Smoke("run_parts.py", ("--model", "tiny", "--json", OUT), ("model", "timings", "idle_rates"),
                       marks=SLOW + LONG, timeout=1200),
    "run_parts --smoke": Smoke("run_parts.py", ("--model", "tiny", "--smoke", "--json", OUT),
                               ("model", "timings", "idle_rates"), marks=SLOW, env=ONE_THREAD),
    "scoring": Smoke("scoring.py", ("--limit", "2", "--repeats", "1", "--threads", "1", "--models", "embedded",
                                    "--json", OUT),
                     ("data", "limit", "rows"), marks=EMBEDDED + LONG, timeout=1200),
    "scoring --tiny": Smoke("scoring.py", ("--limit", "2", "--repeats", "1", "--threads", "1", "--models", "tiny",
                                           "--peak-sizes", "64", "--json", OUT),
                            ("data", "limit", "rows"), marks=SLOW, env=ONE_THREAD),
    "scoring --harness": Smoke("scoring.py", ("--harness", "--limit", "2", "--batch-size", "2", "--repeats", "1",
                                              "--json", OUT),
                               ("agree", "ratio", "rows"), marks=EMBEDDED, timeout=1200),
    "selective_guarantee": Smoke("selective_guarantee.py", ("--sets", "builtin/capitals", "--splits", "2",
                                                            "--limit", "40", "--preds", "{tmp}/preds",
                                                            "--json", OUT),
                                 ("results", "splits", "target"), marks=EMBEDDED + LONG),
    "selective_guarantee --tiny": Smoke("selective_guarantee.py", ("--sets", "builtin/capitals", "--splits", "2",
                                                                   "--limit", "40", "--preds", "{tmp}/preds",
                                                                   "--model", "tiny", "--json", OUT),
                                        ("results", "splits", "target"), marks=SLOW, env=ONE_THREAD),
    "streaming": Smoke("streaming.py", ("--rows", "200", "--dir", "{tmp}/stream", "--json", OUT,
                                        "--md", "{tmp}/out.md"),
                       ("results", "rows"), marks=SLOW),
    "studio_load": Smoke("studio_load.py", ("--sessions", "1", "--seconds", "5", "--chart-seconds", "3",
                                            "--model", "tiny", "--json", OUT),
                         ("rows", "metrics_read_per_poll"), marks=(pytest.mark.browser, pytest.mark.slow) + LONG,
                         timeout=1200),
    "studio_load --seconds 2": Smoke("studio_load.py", ("--sessions", "1", "--seconds", "2", "--chart-seconds", "3",
                                                        "--model", "tiny", "--json", OUT),
                                     ("rows", "metrics_read_per_poll"), marks=(pytest.mark.browser, pytest.mark.slow),
                                     timeout=1200, env=ONE_THREAD),
    "studio_silence": Smoke("studio_silence.py", skip="a fresh clone's set-up: minutes of pip installs, "
                            "network; tests/test_ticker.py checks the tickers it times"),
    "sv_agreement": Smoke("sv_agreement.py", ("--sets", "builtin/arithmetic", "--sizes", "4", "8",
                                              "--resamples", "2", "--limit", "40", "--preds", "{tmp}/preds",
                                              "--json", OUT),
                          ("curve", "choose_threshold", "sizes"), marks=EMBEDDED + LONG),
    "sv_agreement --tiny": Smoke("sv_agreement.py", ("--sets", "builtin/arithmetic", "--sizes", "4", "8",
                                                     "--resamples", "2", "--limit", "40", "--preds", "{tmp}/preds",
                                                     "--model", "tiny", "--json", OUT),
                                 ("curve", "choose_threshold", "sizes"), marks=SLOW, env=ONE_THREAD),
    "tau_budget": Smoke("tau_budget.py", ("--steps", "1", "--constraints", "theta", "--json", OUT),
                        ("rows", "steps"), marks=HEAVY + LONG, timeout=1200),
    "tau_budget --tiny": Smoke("tau_budget.py", ("--steps", "1", "--constraints", "theta", "--model", "tiny",
                                                 "--json", OUT),
                               ("rows", "steps"), marks=SLOW, env=ONE_THREAD),
    "threads": Smoke("threads.py", ("--steps", "1", "--json", OUT), ("rows", "cores"), marks=HEAVY + LONG, timeout=1200),
    "threads --tiny": Smoke("threads.py", ("--steps", "1", "--model", "tiny", "--json", OUT), ("rows", "cores"),
                            marks=SLOW, env=ONE_THREAD),
    "train_step": Smoke("train_step.py", ("--models", "embedded", "--configs", "sft", "--steps", "1",
                                          "--json", OUT),
                        ("rows", "args"), marks=EMBEDDED + LONG, timeout=1200),
    "train_step --tiny": Smoke("train_step.py", ("--models", "tiny", "--configs", "sft", "--steps", "1",
                                                 "--lora-layers", "1", "--json", OUT),
                               ("rows", "args"), marks=SLOW, env=ONE_THREAD),
}


def command(smoke: Smoke, tmp: Path) -> list[str]:
    """The bench's command line as its docstring names it, `{tmp}` filled in."""
    head = ["-m", f"bench.{smoke.script.removesuffix('.py')}"] if smoke.module else [f"bench/{smoke.script}"]
    return [sys.executable, *head, *(arg.replace("{tmp}", str(tmp)) for arg in smoke.args)]


def parsed_output(smoke: Smoke, done: subprocess.CompletedProcess[str], tmp: Path) -> Any:
    """The bench's JSON, read from where `smoke.output` says it is."""
    if smoke.output == "file":
        return json.loads(Path(OUT.replace("{tmp}", str(tmp))).read_text())
    if smoke.output == "stdout":
        return json.loads(done.stdout)
    return json.loads(done.stdout.strip().splitlines()[-1])


def missing_keys(smoke: Smoke, result: Any) -> set[str]:
    """The expected keys the output lacks (a list's keys are its first row's)."""
    row = result[0] if isinstance(result, list) else result
    return set(smoke.keys) - set(row)


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=list(smoke.marks), id=name) for name, smoke in SMOKES.items()]
)
def test_bench_runs_as_the_docs_name_it(name: str, tmp_path: Path) -> None:
    smoke = SMOKES[name]
    if smoke.skip:
        pytest.skip(smoke.skip)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **dict(smoke.env)}
    done = subprocess.run(command(smoke, tmp_path), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=smoke.timeout)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if smoke.output == "text":
        assert all(phrase in done.stdout for phrase in smoke.keys), done.stdout[-3000:]
        return
    result = parsed_output(smoke, done, tmp_path)
    assert result, f"{name} wrote empty JSON"
    assert not missing_keys(smoke, result), f"{name}'s JSON lacks {missing_keys(smoke, result)}"


def bench_scripts() -> set[str]:
    """The scripts in bench/ (their file names)."""
    return {path.name for path in (ROOT / "bench").glob("*.py") if path.name != "__init__.py"}


def test_every_bench_has_a_smoke_entry() -> None:
    """A new bench/*.py without an entry in SMOKES fails here (and an entry for a script
    that is gone fails too)."""
    scripts = bench_scripts()
    named = {smoke.script for smoke in SMOKES.values()}
    assert scripts - named == set(), f"benches without a smoke entry in {Path(__file__).name}: {scripts - named}"
    assert named - scripts == set(), f"smoke entries for benches that are gone: {named - scripts}"


def test_ci_smokes_every_bench() -> None:
    """Every bench has an entry that is not `long`, so CI runs it and a refactor that breaks
    a bench's command fails there, not only under `--long`. An entry skipped for a reason it
    states (studio_silence; gpu_quick without a GPU) counts: CI lists the reason."""
    in_ci = {smoke.script for smoke in SMOKES.values() if LONG[0] not in smoke.marks}
    only_long = bench_scripts() - in_ci
    assert only_long == set(), f"benches whose every smoke entry is long (CI runs none): {only_long}"


def test_the_long_smokes_are_left_to_a_command_that_runs_them() -> None:
    """The whole suite leaves the `long` smokes out (CI's time limit) and
    `scripts/test.sh --long` runs them: dropping either line fails here."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert '-m "not long"' in script
    assert 'pytest -m long "$@"' in script
    long = {name for name, smoke in SMOKES.items() if LONG[0] in smoke.marks}
    assert long and long != set(SMOKES), "some smokes, not none and not all, are long"
