"""`calm eval --run RUN --data ...`: a finished run scored on more sets, stored with the
run as added rows (workspace/added.py)."""

from __future__ import annotations

import argparse

from calm_core.cli.usage import UsageError
from calm_core.paths import ensure_writable

RUN_OWNS = {
    "model": "--model",
    "scoring": "--scoring",
    "chat": "--chat",
    "fit_ts_on": "--fit-ts-on",
    "fit_limit": "--fit-limit",
    "ts_file": "--ts-file",
    "save_ts": "--save-ts",
    "mapping": "--mapping",
    "save_preds": "--save-preds",
    "features": "--features",
}  # what a run fixed itself (its model, rule, S_V fit) or stores itself


def eval_run(args: argparse.Namespace) -> int:
    """`calm eval --run RUN --data ...`: the run's table on more sets (workspace/added.py),
    stored with the run and printed; its model, scoring rule, task and calibrators are its own."""
    from calm_core.io import atomic_write_json
    from calm_core.provenance import environment_record
    from calm_core.runs.layout import ADDED_RESULTS
    from calm_core.runs.rundir import RunDir
    from calm_core.scoring.evaluate import format_table
    from calm_core.workspace.added import check_finished, evaluate_run, run_eval_limit
    from calm_core.workspace.view import result_columns

    given = [flag for name, flag in RUN_OWNS.items() if getattr(args, name)]
    if given:
        raise UsageError(
            f"{', '.join(given)} cannot go with --run: a run's model, scoring rule and calibrators are "
            "its own (data files load as training loads them), and its predictions are stored with it"
        )
    if args.json:
        args.json = ensure_writable(args.json, "file")
    run = RunDir.at(args.run, args.runs_root)
    check_finished(run)  # before any data or model is loaded
    limit = args.limit if args.limit is not None else run_eval_limit(run)
    datasets = [name for group in args.data for name in group]
    rows = evaluate_run(run, datasets, limit, device=args.device)
    print(
        f"run: {run.run_id} (step {rows[0]['step']})  added after training: {', '.join(dict.fromkeys(datasets))}"
        f"  limit: {limit}"
    )
    print(format_table(rows, result_columns(rows)))
    print(
        f"stored with the run ({run.path / ADDED_RESULTS}): Compare, `calm compare` and `calm report` "
        "show these rows as `<set> (added)`"
    )
    if args.json:
        atomic_write_json(
            args.json, {"results": rows, "run": run.run_id, "limit": limit, "environment": environment_record()}
        )
    return 0
