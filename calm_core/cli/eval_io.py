"""What `calm eval`'s paths share: the model and scoring flags, loading the model and the
datasets (rejected rows named on stderr), checking output paths before any work, and the
`--json` record, built here once for both tasks."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from calm_core.data.schema import REJECTED_SHOWN, LoadReport
from calm_core.paths import ensure_writable
from calm_core.scoring.prompts import RULES

JSON_REJECTED_KEPT = 100  # rejected rows listed per dataset in `--json`; `n_rejected` is always exact


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="'embedded' (default), 'gemma3-270m', a local model dir / .gguf, or a hub id")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    parser.add_argument("--trust-remote-code", action="store_true", help="run model code from the hub (off by default)")


def add_scoring_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scoring",
        choices=list(RULES),
        help="scoring rule, default cloze (recorded with every result); see calm_core/scoring/prompts.py",
    )
    parser.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per forward pass")
    parser.add_argument("--bins", type=int, default=15, help="ECE bins (equal width); ece_10 is always added")


def load_lm(args: argparse.Namespace) -> Any:
    from calm_core.scoring.models import ModelSpec, load_model

    spec = ModelSpec(
        name=args.model or "embedded", device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code
    )
    return load_model(spec)


def check_outputs(args: argparse.Namespace) -> None:
    """Every output `calm eval` will write, checked before any data or model is loaded."""
    for attribute, kind in (("json", "file"), ("save_ts", "file"), ("save_preds", "directory")):
        if getattr(args, attribute) is not None:
            setattr(args, attribute, ensure_writable(getattr(args, attribute), kind))


def load_reports(names: list[str], kind: str, limit: int | None, args: argparse.Namespace) -> dict[str, LoadReport]:
    """Reports of `names` (items + rejected rows); each rejection is noted on stderr now,
    before the model loads, so a person sees at once that part of a file was left out."""
    from calm_core.scoring.evaluate import load_report

    reports = {name: load_report(name, kind, limit, args.seed, args.mapping) for name in names}
    for report in reports.values():
        note_rejected(report)
    return reports


def note_rejected(report: LoadReport) -> None:
    lines = report.rejection_lines(REJECTED_SHOWN)
    if lines:
        print(f"calm: note: {lines[0]}:", *(f"  {line}" for line in lines[1:]), sep="\n", file=sys.stderr)


def data_record(reports: dict[str, LoadReport], role: str) -> list[dict[str, Any]]:
    """`--json` entries: per dataset, how many rows were kept and rejected, and why."""
    return [
        {"dataset": name, "role": role, **report.rejected_record(JSON_REJECTED_KEPT)}
        for name, report in reports.items()
    ]


def posthoc_record(fits: list[Any], task: str) -> dict[str, list[dict[str, Any]]]:
    """`--json` entries per calibrator name (`ts`: one record per fit set, [] when none)."""
    from calm_core.calibration.posthoc import for_task

    names = list(dict.fromkeys([*for_task(task), *(f.calibrator.name for f in fits)]))
    return {name: [f.record for f in fits if f.calibrator.name == name] for name in names}


def print_posthoc(fits: list[Any], suffix: str = "") -> None:
    """`ts: T = 1.2345` per post-hoc variant, and the calibrator's note when its fit is degenerate."""
    for fit in fits:
        print(f"{fit.variant}: {fit.calibrator.describe()}{suffix}")
        warning = fit.calibrator.warning()
        if warning:
            print(f"  note: {warning}")


def eval_record(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    lm: Any,
    fits: list[Any],
    task: str,
    reports: dict[str, Any],
    fit_reports: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """`calm eval --json`'s record, one shape for both tasks: the rows, the model, the
    post-hoc fits, every dataset read (kept and rejected rows), the limits, the seed and the
    environment; `extra` holds what only one task has (scoring rule or generation settings)."""
    from calm_core.provenance import environment_record

    return {
        "results": rows,
        "model": lm.info,
        **extra,
        **posthoc_record(fits, task),
        "datasets": data_record(reports, "eval") + data_record(fit_reports, "fit"),
        "limit": args.limit,
        "seed": args.seed,
        "environment": environment_record(),
    }
