"""`calm eval --run RUN --data ...`: a finished run scored on more sets, stored with the
run as added rows (results/added.py).

    calm eval --run RUN --data arc/easy_test
    calm eval --run RUN --data private.csv --mapping 'question=q, choices=A|B|C|D, answer=label' --encoding cp1252

The run fixes its model, scoring rule and calibrators; the data are the person's own, so
`--mapping` and `--encoding` read a file as `calm eval` reads one (without `--mapping`, a
file with an upload's columns is read with the mapping saved with that upload, another
with the Data page's guess when it names only columns the file has; without `--encoding`,
a file that is not UTF-8 in the encoding it looks like, a note naming it). Every
refusal names the way out: the flag to drop or give, or the command to run first.
"""

from __future__ import annotations

import argparse
from typing import Any

from calm_core.cli import eval_io
from calm_core.cli.usage import UsageError
from calm_core.io import atomic_write_json
from calm_core.paths import ensure_writable
from calm_core.provenance import environment_record
from calm_core.runs.layout import ADDED_RESULTS
from calm_core.runs.rundir import RunDir
from calm_core.training.tasks import get_task

RUN_OWNS = {
    "model": "--model",
    "scoring": "--scoring",
    "chat": "--chat",
    "fit_ts_on": "--fit-ts-on",
    "fit_limit": "--fit-limit",
    "ts_file": "--ts-file",
    "save_ts": "--save-ts",
    "save_preds": "--save-preds",
    "features": "--features",
}  # what a run fixed itself (its model, rule, S_V fit) or stores itself


def eval_run(args: argparse.Namespace) -> int:
    """`calm eval --run RUN --data ...`: the run's table on more sets (results/added.py),
    stored with the run and printed; its model, scoring rule, task and calibrators are its own."""
    from calm_core.results.added import check_finished, evaluate_run, run_eval_limit
    from calm_core.results.tables import result_columns
    from calm_core.scoring.evaluate import format_table, interval_table

    _check_flags(args)
    if args.json:
        args.json = ensure_writable(args.json, "file")
    run = _open_run(args)
    check_finished(run)  # before any data or model is loaded
    limit = args.limit if args.limit is not None else run_eval_limit(run)
    datasets = list(dict.fromkeys(name for group in args.data for name in group))
    mappings = _mappings(run, datasets, args)  # every file read once, before the model loads
    encodings = {name: eval_io.set_encoding(name, args) for name in datasets}  # found while reading, above
    rows = evaluate_run(run, datasets, limit, device=args.device, mappings=mappings, encodings=encodings)
    print(f"run: {run.run_id} (step {rows[0]['step']})  added after training: {', '.join(datasets)}  limit: {limit}")
    print(format_table(rows, result_columns(rows)))
    print("90% bootstrap intervals (shifted by their bias, so each holds its figure):")
    print(interval_table(rows))
    print(
        f"stored with the run ({run.path / ADDED_RESULTS}): Compare, `calm compare` and `calm report` "
        "show these rows as `<set> (added)`"
    )
    if args.json:
        atomic_write_json(
            args.json, {"results": rows, "run": run.run_id, "limit": limit, "environment": environment_record()}
        )
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse what the run fixed itself, naming the flags to drop and the command that
    scores another model instead."""
    given = [flag for name, flag in RUN_OWNS.items() if getattr(args, name)]
    if given:
        raise UsageError(
            f"{', '.join(given)} cannot go with --run: a run's model, scoring rule and calibrators are its own, "
            "and its predictions are stored with it. Drop them to score the run, or drop --run to score a model "
            "of your choice (`calm eval --model M --data ...`)"
        )


def _open_run(args: argparse.Namespace) -> Any:
    """The run directory of --run; a missing one names where to find the run ids."""
    try:
        return RunDir.at(args.run, args.runs_root)
    except FileNotFoundError as exc:
        where = " (give --runs-root where it lives)" if args.runs_root is None else ""
        raise UsageError(f"{exc}: `calm runs` lists the run ids{where}") from None


def _mappings(run: Any, datasets: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The mapping each set is read with (`eval_io.read_set`: --mapping, or one saved with
    an upload of the file's columns); a set that cannot be read fails here, in a second."""
    from calm_core.training.config import TrainConfig

    kind = get_task(TrainConfig.from_dict(run.config.train).task).ITEM_KIND
    return {name: eval_io.read_set(name, kind, 1, args)[1] for name in datasets}
