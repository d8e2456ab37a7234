"""`calm train | runs | cancel | resume`: training runs from the command line.

    calm train --preset quick --method calm --train-data builtin/capitals/train   # foreground, progress bar
    calm train --config run.yaml --detach                                         # background job; prints the run id
    calm runs                                  # every run with its (liveness-checked) state
    calm cancel RUN_ID                         # graceful: checkpoint, then `cancelled`
    calm resume RUN_ID                         # failed / cancelled runs continue their curves

A background job is this same command in worker form (`calm train --run-dir DIR`),
started detached by calm_core.runs.queue. SIGINT / SIGTERM request a graceful cancel.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import yaml
from tqdm.auto import tqdm

from calm_core.calibration.metrics.columns import metric_names
from calm_core.data.schema import DataError
from calm_core.data.worker import LIMIT_ENV, WorkerLimits
from calm_core.io import atomic_write_json, atomic_write_text
from calm_core.paths import ensure_writable
from calm_core.results.curves import bome_line, bome_summary
from calm_core.runs.events import convert_run
from calm_core.runs.lifecycle import RunState
from calm_core.runs.listing import list_runs
from calm_core.runs.naming import runs_root
from calm_core.runs.queue import JobQueue, cancel, resume
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import ACTIVE_STATES, run_state
from calm_core.settings import allowed_words, declared_settings


def add_parsers(sub: Any) -> None:
    from calm_core.training.config import train_settings

    tr = sub.add_parser("train", help="train a model with CALM or a baseline (foreground, or --detach)")
    tr.add_argument("--config", type=Path, help="YAML or JSON file of TrainConfig fields")
    tr.add_argument("--preset", choices=["quick", "paper"], help="start from a preset, then apply the rest")
    for name, spec in train_settings().items():
        kind = spec.kind if spec.kind is not bool else json.loads
        tr.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, help=spec.help.replace("%", "%%"))
    tr.add_argument("--eval-data", nargs="+", help="evaluation sets (in-domain and out-of-domain)")
    tr.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any TrainConfig field (JSON value)"
    )
    tr.add_argument("--detach", action="store_true", help="run as a background job and print the run id")
    tr.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)  # worker mode, used by jobs
    tr.add_argument("--runs-root", type=Path, help="where runs live (default: workspace/runs)")
    rs = sub.add_parser("runs", help="list training runs")
    rs.add_argument("--runs-root", type=Path)
    rs.add_argument("--json", action="store_true")
    rs.add_argument(
        "--tensorboard",
        metavar="RUN",
        help="write RUN's TensorBoard event files (<run>/tensorboard/) from its metrics.jsonl, config and "
        "results.json, replacing any there: an older run, or one written without tensorboard installed",
    )
    cp = sub.add_parser("compare", help="variants of finished runs side by side (same schema as eval --json)")
    cp.add_argument("run_ids", nargs="*")
    cp.add_argument("--name-prefix", help="also every finished run whose name starts with this (the newest per name)")
    cp.add_argument("--runs-root", type=Path)
    cp.add_argument("--json", type=Path, help="write the rows as JSON")
    paper = metric_names("paper_mcqa")  # calibration.metrics.columns: the paper's metrics
    cp.add_argument(
        "--wide",
        action="store_true",
        help=f"one Markdown line per variant, columns dataset x ({', '.join(paper)}): the paper's shape",
    )
    cp.add_argument("--metrics", default=",".join(paper), help="--wide: the metric columns, comma-separated")
    cp.add_argument("--ood-mean", action="store_true", help="--wide: add the mean over every set but the first")
    rp = sub.add_parser("report", help="one self-contained HTML file: settings, metrics, reliability diagrams, alpha")
    rp.add_argument("run_id")
    rp.add_argument("--out", type=Path, help="the HTML file to write (default: <run id>.html here)")
    rp.add_argument("--runs-root", type=Path)
    sub.add_parser("settings", help="every training setting: its flag, default, bounds or choices, and help (Markdown)")
    for name, text in (
        ("cancel", "stop a run gracefully (checkpoint, then cancelled)"),
        ("resume", "continue a failed, cancelled or damaged run"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("run_id")
        p.add_argument("--runs-root", type=Path)
        if name == "resume":
            p.add_argument(
                "--fresh",
                action="store_true",
                help="ignore the run's checkpoints and start over from step 0 (its metrics are cut)",
            )


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"Expected a config file at {path}, but there is none")
    data = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"Expected a mapping of TrainConfig fields in {path}, but got {type(data).__name__}")
    return data


def resolve_config(args: argparse.Namespace) -> Any:
    """Preset, then config file, then --set, then explicit flags (later wins)."""
    from calm_core.training.config import TrainConfig, preset_settings, train_settings

    fields: dict[str, Any] = {}
    if args.config:
        fields.update(_read_config_file(args.config))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"Expected --set KEY=VALUE, but got {item!r}")
        try:
            fields[key.strip()] = json.loads(value)
        except ValueError:
            fields[key.strip()] = value
    fields.update({k: getattr(args, k) for k in train_settings() if getattr(args, k) is not None})
    if args.eval_data:
        fields["eval_data"] = args.eval_data
    return TrainConfig.from_dict(preset_settings(args.preset, fields) if args.preset else fields)


def _graceful(run: RunDir) -> None:
    """SIGINT / SIGTERM ask the loop to stop after the current step (checkpoint + cancelled)."""

    def handler(signum: int, frame: Any) -> None:
        run.request_cancel()
        print(f"calm: stopping after this step (signal {signum})", file=sys.stderr, flush=True)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _progress_bar(total: int) -> Any:
    bar = tqdm(total=total, desc="training", unit="step", file=sys.stderr)

    def update(step: int, _total: int, record: dict[str, Any]) -> None:
        bar.n = step
        loss = record.get("train/lower_loss")
        bar.set_postfix({"loss": f"{loss:.3f}"} if loss is not None else {})
        bar.refresh()

    return update


def _set_threads(run: RunDir, cfg: Any, main: bool) -> None:
    """Set the job's torch threads (TrainConfig.job_threads) and record them in status.json
    `threads`. run_in_process puts the count back afterwards, so a caller of `calm train`
    in its own process (the tests) keeps its setting; a caller of `train` (a notebook) is
    not touched at all."""
    import torch

    threads, why = cfg.job_threads(os.cpu_count())
    torch.set_num_threads(threads)
    if main:
        run.write_running(threads={"threads": threads, "why": why})


def run_in_process(run: RunDir, show_progress: bool) -> int:
    """Train (or resume) the run in this process; failures end as `failed` with the error."""
    from calm_core.training import distributed
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    main = distributed.is_main()
    _graceful(run)
    if main:
        run.write_running(pid=os.getpid())
    import torch

    threads_before = torch.get_num_threads()
    try:
        cfg = TrainConfig.from_dict(run.config.train)
        _set_threads(run, cfg, main)
        result = train(cfg, run=run, progress=_progress_bar(cfg.steps) if show_progress and main else None)
    except Exception as exc:  # the run records why; the queue moves on
        if main:
            run.write_status(
                RunState.FAILED, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-4000:]
            )
        print(f"calm: error: run {run.run_id} failed: {exc}", file=sys.stderr)
        return 1
    finally:
        torch.set_num_threads(threads_before)
        if main:
            JobQueue.of(run).schedule()
    if not main:
        return 0
    print(f"run {run.run_id}: {result.state} at step {result.step} ({run.path})")
    for line in _verdict(run):
        print(line)
    return 0


def _verdict(run: RunDir) -> list[str]:
    """The run's closing lines (results.advice.verdict_lines): the selected step and why, the
    calibrator to use, a missing baseline, the evidence with 90% intervals; [] without
    results.json, or with a damaged one (the run itself has finished either way)."""
    from calm_core.results.advice import verdict_lines

    if not run.has_results():
        return []
    try:
        return verdict_lines(run.results(), run.config.train_method)
    except (OSError, ValueError) as error:  # RunFileError is a ValueError: say it, keep the exit code
        return [f"calm: could not read the run's verdict: {error}"]


def cmd_train(args: argparse.Namespace) -> int:
    from calm_core.estimate.predict import launch_estimate
    from calm_core.launch import create_run, launch_training

    if args.run_dir:
        return run_in_process(RunDir.open(args.run_dir), show_progress=False)
    cfg = resolve_config(args)
    _say_support(cfg)
    if _joined_torchrun(args):  # every rank trains the one run that rank 0 creates
        from calm_core.training import distributed

        path = distributed.broadcast_text(
            str(create_run(cfg, args.runs_root, estimate=launch_estimate(cfg, args.runs_root)).path)
            if distributed.is_main()
            else None
        )
        return run_in_process(RunDir.open(path), show_progress=True)
    shown = launch_estimate(cfg, args.runs_root)  # as the Train page makes it: the run learns its error from it
    if args.detach:
        run, started = launch_training(cfg, root=args.runs_root, estimate=shown)
        print(run.run_id)
        if not started:
            print(f"calm: queued behind running jobs ({run.path})", file=sys.stderr)
        return 0
    return run_in_process(create_run(cfg, args.runs_root, estimate=shown), show_progress=True)


def _say_support(cfg: Any) -> None:
    """Before launch, what S_V supports (results/support.py, the Train page's words), on
    stderr so that `--detach` still prints only the run id; nothing when a dataset cannot
    be read (the run says why when it starts)."""
    from calm_core.results.support import support_sentence
    from calm_core.training import distributed

    if not distributed.is_main():
        return
    try:
        sentence = support_sentence(cfg)
    except (DataError, OSError, ValueError):
        return
    print(f"calm: note: {sentence}", file=sys.stderr, flush=True)


def _joined_torchrun(args: argparse.Namespace) -> bool:
    """Under torchrun / accelerate launch (WORLD_SIZE > 1): join the group (foreground only)."""
    import torch

    from calm_core.training import distributed

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if args.detach:
        raise ValueError("Expected no --detach under torchrun: the launcher already runs one process per rank")
    return distributed.init_from_env(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def _bome(run_path: Path) -> dict[str, Any]:
    """The run's BOME diagnostics (results.curves.bome_summary); {} when it has none or its
    files cannot be read (a damaged run still lists)."""
    from calm_core.training.config import recorded_bilevel

    try:
        run = RunDir.open(run_path)
        bilevel = recorded_bilevel(run.config.train)
        return bome_summary(run.read_metrics(), bilevel.eta if bilevel else None)
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _convert_to_tensorboard(run_id: str, root: Path | None) -> int:
    """`calm runs --tensorboard RUN`: the run's event files rebuilt from what it wrote. A
    running run is refused: its own writer is still adding to the folder."""
    run = RunDir.at(run_id, root)
    status = run.status_or_none()
    state = run_state(status).state if status else RunState.DAMAGED
    if state in ACTIVE_STATES:
        raise ValueError(f"Expected a run that is not running, but {run_id} is {state}")
    config = run.config
    results = run.results_or_none()
    folder = convert_run(
        run.path,
        run.read_metrics(),
        config.train or config.to_json(),
        list(results.rows) if results else [],
        created=status.created if status else None,
    )

    print(f"{run_id}: event files in {folder}")
    print(f'open every run with: tensorboard --logdir "{run.path.parent}"')
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    if args.tensorboard:
        return _convert_to_tensorboard(args.tensorboard, args.runs_root)
    runs = list_runs(args.runs_root)
    if args.json:
        print(json.dumps([{**r.__dict__, "path": str(r.path), "bome": _bome(r.path)} for r in runs], indent=2))
        return 0
    if not runs:
        print(f"no runs under {runs_root(args.runs_root)}")
    for r in runs:
        progress = f"{r.step or 0}/{r.total_steps or '?'}"
        bome = bome_line(_bome(r.path))
        print(
            f"{r.run_id}  {r.state:9} {progress:>9}  {r.method or '-':15} {r.reason}" + (f"  [{bome}]" if bome else "")
        )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    view = cancel(RunDir.at(args.run_id, args.runs_root))
    print(f"{args.run_id}: {view.state} ({view.reason})")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    run = RunDir.at(args.run_id, args.runs_root)
    resume(run, fresh=args.fresh)
    print(
        f"{args.run_id}: "
        + ("queued to resume" if run.status.queued else "resumed")
        + (" from step 0 (--fresh)" if args.fresh else "")
    )
    return 0


def runs_named(prefix: str, root: Path | None) -> list[str]:
    """Finished runs whose name starts with `prefix`, oldest first, the newest per name."""
    newest: dict[str, str] = {}
    for summary in list_runs(root):  # newest first
        if summary.state == RunState.FINISHED and summary.name and summary.name.startswith(prefix):
            newest.setdefault(summary.name, summary.run_id)
    return sorted(newest.values())


def cmd_compare(args: argparse.Namespace) -> int:
    from calm_core.results.tables import added_lines, compare_rows, result_columns
    from calm_core.scoring.evaluate import format_table, wide_table

    if args.json:
        args.json = ensure_writable(args.json, "file")  # before reading any run: fail in a second
    run_ids = list(args.run_ids) + (runs_named(args.name_prefix, args.runs_root) if args.name_prefix else [])
    if not run_ids:
        raise ValueError("Expected run ids or --name-prefix matching finished runs, but got none")
    rows = compare_rows([RunDir.at(run_id, args.runs_root) for run_id in run_ids])
    if args.wide:
        print(wide_table(rows, tuple(m.strip() for m in args.metrics.split(",")), ood_mean=args.ood_mean))
    else:
        print(format_table(rows, result_columns(rows)))
    for line in added_lines(rows):  # sets evaluated after training (`calm eval --run`): their data and step
        print(f"added after training: {line}")
    if args.json:
        atomic_write_json(args.json, {"results": rows, "runs": run_ids})
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from calm_core.results.report import run_report_html

    run = RunDir.at(args.run_id, args.runs_root)
    out = ensure_writable(args.out or Path(f"{run.run_id}.html"), "file")
    atomic_write_text(out, run_report_html(run))
    print(f"report of {run.run_id}: {out}")
    return 0


def settings_markdown() -> str:
    """Every declared training setting as one Markdown table (docs/settings.md is this
    text): the page, the flags and the docs all read the same declarations."""
    from calm_core.generative.sampling import GenerationConfig
    from calm_core.scoring.adapters import LoraSettings
    from calm_core.training.config import train_settings

    lines = [
        "# Training settings",
        "",
        "Generated by `calm settings > docs/settings.md` from the declarations (`setting(...)` lines); a value",
        "outside its bounds or choices is refused with one message by the Python API, `calm train` and the Train",
        "page alike (`tests/test_setting_bounds.py`).",
        "",
        "| setting | flag | default | allowed | what it does |",
        "|---|---|---|---|---|",
    ]
    rows = [(spec.name, f"`--{spec.name.replace('_', '-')}`", spec) for spec in train_settings().values()]
    rows += [
        (f"{part}.{spec.name}", f"`--set {part}=...`", spec)
        for part, kind in (("lora", LoraSettings), ("generation", GenerationConfig))
        for spec in declared_settings(kind)
    ]
    rows += [
        (f"upload.{spec.name}", f"env `{LIMIT_ENV}` (the studio)", spec) for spec in declared_settings(WorkerLimits)
    ]
    for name, flag, spec in rows:
        lines.append(
            f"| `{name}` | {flag} | `{spec.field.default!r}` | {allowed_words(spec)} | {spec.help.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def cmd_settings(args: argparse.Namespace) -> int:
    print(settings_markdown(), end="")
    return 0


COMMANDS = {
    "settings": cmd_settings,
    "report": cmd_report,
    "train": cmd_train,
    "runs": cmd_runs,
    "cancel": cmd_cancel,
    "resume": cmd_resume,
    "compare": cmd_compare,
}
