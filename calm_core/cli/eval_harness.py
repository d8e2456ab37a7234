"""`calm eval --from-lm-eval DIR`: a model evaluated elsewhere by lm-evaluation-harness,
calibrated here from its `--log_samples` files (scoring/lm_eval_samples.py), no model loaded.

    lm_eval --model hf --model_args pretrained=BIG --tasks arc_easy,mmlu --log_samples --output_path DIR
    calm eval --from-lm-eval DIR --fit-ts-on arc_easy [--data mmlu_anatomy] [--lm-eval-metric acc_norm] \\
              [--json out.json] [--save-preds PREDS]

Each task of DIR is a dataset: base beside every post-hoc calibrator fitted on the
--fit-ts-on tasks (TS, vector scaling), the same rows, table and predictions files as
`calm eval --model`. A fit task is not also evaluated unless --data names it: a calibrator
scored on the items it was fitted on says little.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from calm_core.cli import eval_io
from calm_core.cli.usage import UsageError
from calm_core.io import atomic_write_json
from calm_core.provenance import environment_record
from calm_core.runs.layout import write_predictions

# Flags that need the model or its hidden states, which samples files do not hold.
MODEL_FLAGS = {
    "model": "--model",
    "run": "--run",
    "scoring": "--scoring",
    "chat": "--chat",
    "thermometer": "--thermometer",
    "features": "--features",
}


def add_args(parser: argparse.ArgumentParser) -> None:
    """--from-lm-eval and the form of the harness's scores it reads."""
    from calm_core.scoring.lm_eval_samples import FORMS

    parser.add_argument(
        "--from-lm-eval",
        metavar="DIR",
        help="instead of --model: lm-evaluation-harness --log_samples output (samples_<task>_<date>.jsonl below DIR); "
        "each task is a dataset, --data names some of them, --fit-ts-on the tasks to fit the calibrators on",
    )
    parser.add_argument(
        "--lm-eval-metric",
        choices=list(FORMS),
        default="acc",
        help="with --from-lm-eval: acc = summed log-likelihoods (our cloze rule); acc_norm = divided by each "
        "choice's length in characters, as the harness's acc_norm (recorded as scoring cloze_chars)",
    )


def _check_flags(args: argparse.Namespace) -> None:
    given = [flag for name, flag in MODEL_FLAGS.items() if getattr(args, name, None) not in (None, False)]
    if given:
        raise UsageError(f"--from-lm-eval reads scores computed elsewhere: drop {', '.join(given)}")
    if getattr(args, "task", "mcqa") != "mcqa":
        raise UsageError("--from-lm-eval reads multiple-choice samples: drop --task openqa")


def _pick(tasks: dict[str, Any], names: list[str], flag: str) -> list[str]:
    """`names` checked against the tasks found, or a UsageError listing them."""
    unknown = [n for n in names if n not in tasks]
    if unknown:
        raise UsageError(f"{flag} {', '.join(unknown)}: not a task of the samples; they hold {', '.join(tasks)}")
    return names


def eval_from_lm_eval(args: argparse.Namespace) -> int:
    """Read DIR's samples, fit the post-hoc calibrators on the --fit-ts-on tasks, and
    print (and with --json, --save-preds write) every task's rows."""
    from calm_core.scoring.lm_eval_samples import read_harness_folder

    _check_flags(args)
    eval_io.check_outputs(args)
    tasks = read_harness_folder(args.from_lm_eval)
    fit_names = _pick(tasks, [n for group in (args.fit_ts_on or []) for n in group], "--fit-ts-on")
    chosen = [n for group in (args.data or []) for n in group]
    names = _pick(tasks, chosen, "--data") if chosen else [n for n in tasks if n not in fit_names]
    for task in tasks.values():
        _note(task, args.lm_eval_metric)
    fits = _fits(args, {n: tasks[n].scores(args.lm_eval_metric, args.fit_limit) for n in fit_names})
    rows = []
    for name in names:
        rows += _task_rows(args, tasks[name], name, fits)
    _print(args, fits, rows)
    if args.json:
        _write_json(args, tasks, names, fits, rows)
    return 0


def _note(task: Any, metric: str) -> None:
    """Rejected rows and a disagreement with the harness's own accuracy, on stderr."""
    for error in task.rejected[:5]:
        print(f"calm: note: rejected {error}", file=sys.stderr)
    if len(task.rejected) > 5:
        print(f"calm: note: {task.task}: {len(task.rejected) - 5} more rows rejected", file=sys.stderr)
    why = task.disagreement(metric)
    if why:
        print(f"calm: warning: {why}", file=sys.stderr)


def _fits(args: argparse.Namespace, fit_sets: dict[str, Any]) -> list[Any]:
    """The post-hoc variants: --ts-file's, or every default calibrator fitted on each fit task."""
    from calm_core.calibration.posthoc import MIN_FIT_ITEMS, load_calibrator
    from calm_core.scoring.evaluate import PosthocFit, fit_posthoc

    if args.ts_file:
        if fit_sets:
            raise UsageError("use either --fit-ts-on or --ts-file, not both")
        calibrator = load_calibrator(args.ts_file)
        return [PosthocFit(calibrator.name, calibrator, {"file": str(args.ts_file)})]
    if args.save_ts and len(fit_sets) != 1:
        raise UsageError("--save-ts needs exactly one --fit-ts-on task")
    for name, scores in fit_sets.items():
        if len(scores) < MIN_FIT_ITEMS:
            raise UsageError(f"Expected at least {MIN_FIT_ITEMS} items to fit TS on `{name}`, but it has {len(scores)}")
    fits = fit_posthoc(fit_sets)
    if args.save_ts:
        next(f for f in fits if f.calibrator.name == "ts").calibrator.save(args.save_ts)
    return fits


def _task_rows(args: argparse.Namespace, task: Any, name: str, fits: list[Any]) -> list[dict[str, Any]]:
    """One task's result rows, base and each fit, and with --save-preds its predictions
    (each item's subject beside them, where the task has subjects)."""
    from calm_core.scoring.evaluate import predictions_frame, result_row

    scores = task.scores(args.lm_eval_metric, args.limit)
    rows = []
    for variant, calibrator in [("base", None)] + [(f.variant, f.calibrator) for f in fits]:
        rows.append(result_row(scores, name, variant, calibrator, n_bins=args.bins))
        if args.save_preds:
            frame = predictions_frame(scores, calibrator)
            if any(task.subjects):
                frame["subject"] = task.subjects[: len(scores)]
            write_predictions(args.save_preds, variant, name, frame)
    return rows


def _print(args: argparse.Namespace, fits: list[Any], rows: list[dict[str, Any]]) -> None:
    from calm_core.scoring.evaluate import format_table
    from calm_core.scoring.lm_eval_samples import FORMS

    form = FORMS[args.lm_eval_metric]
    print(f"lm-evaluation-harness samples: {args.from_lm_eval}  form: {form.metric} ({form.rule})  bins: {args.bins}")
    eval_io.print_posthoc(fits)
    if rows:
        print(format_table(rows))


def _write_json(
    args: argparse.Namespace, tasks: dict[str, Any], names: list[str], fits: list[Any], rows: list[dict[str, Any]]
) -> None:
    """`--json`: the rows, the fits, and per task what was read (files, kept and rejected rows,
    the harness's own accuracies)."""
    read = [
        {
            "task": name,
            "files": task.files,
            "n": len(task),
            "n_rejected": len(task.rejected),
            "rejected": [str(e) for e in task.rejected[: eval_io.JSON_REJECTED_KEPT]],
            "harness_reported": task.reported,
            "model": task.model,
            "role": "eval" if name in names else "fit",
        }
        for name, task in tasks.items()
    ]
    record = {
        "results": rows,
        "source": {"lm_eval": str(args.from_lm_eval), "metric": args.lm_eval_metric, "tasks": read},
        **eval_io.posthoc_record(fits, "mcqa"),
        "limit": args.limit,
        "fit_limit": args.fit_limit,
        "environment": environment_record(),
    }
    atomic_write_json(args.json, record)
