"""`calm datasets` and `calm data ...`: what datasets there are, and splitting one.

    calm datasets [--kind mc|open] [--json FILE]
    calm data split upload/quiz --seed 0 --sizes 0.6,0.2,0.2 [--name quiz] [--no-stratify] [--overwrite]
    calm data split quiz.csv --mapping 'question=q, choices=A|B|C|D, answer=label' --encoding cp1252

The work is the library's (data/entries.py lists, data/split.py plans and saves a split);
this module only reads flags and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from calm_core.data import entries as data_entries
from calm_core.data.catalog import load_dataset
from calm_core.data.schema import DataError
from calm_core.paths import ensure_writable


def add_parsers(sub: Any) -> None:
    """`calm datasets` and `calm data split` under the `calm` subcommands `sub`."""
    from calm_core.data.split import DEFAULT_SIZES

    ds = sub.add_parser("datasets", help="list every dataset the studio can name")
    ds.add_argument("--kind", choices=["mc", "open"], help="only multiple-choice or open-answer sets")
    ds.add_argument("--json", type=Path, help="also write the list as JSON")
    data = sub.add_parser("data", help="work on datasets: split one into train / held-out / test")
    commands = data.add_subparsers(dest="data_command", required=True)
    sp = commands.add_parser("split", help="split a dataset into train / heldout / test parts (split/<name>/<part>)")
    sp.add_argument("dataset", metavar="NAME", help="a catalog name (upload/quiz, builtin/capitals/train) or a file")
    sp.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="train,heldout,test: fractions adding up to 1 (0.6,0.2,0.2) or item counts (300,100,100)",
    )
    sp.add_argument("--seed", type=int, default=0, help="the same seed gives the same parts")
    sp.add_argument("--name", help="the split's name: parts are split/NAME/train|heldout|test (default: from NAME)")
    sp.add_argument(
        "--no-stratify",
        dest="stratify",
        action="store_false",
        help="do not spread each answer position over the parts in proportion",
    )
    sp.add_argument("--overwrite", action="store_true", help="replace a different split saved under the same name")
    sp.add_argument(
        "--mapping", help="column mapping when NAME is a file, e.g. 'question=q, choices=A|B|C|D, answer=label'"
    )
    sp.add_argument(
        "--encoding", help="text encoding when NAME is a CSV / JSON file (default utf-8), e.g. cp1252 or latin-1"
    )
    sp.set_defaults(data_func=cmd_split)


def cmd_datasets(args: argparse.Namespace) -> int:
    if args.json:
        args.json = ensure_writable(args.json, "file")
    entries = data_entries.list_datasets(kind=args.kind)
    width = max(len(e.name) for e in entries) if entries else 10
    for e in entries:
        size = "?" if e.n_items is None else str(e.n_items)
        print(f"{e.name.ljust(width)}  {e.kind:5} {e.source:8} {size:>6}  {e.description}")
    if args.json:
        args.json.write_text(
            json.dumps([{**e.__dict__, "path": str(e.path) if e.path else None} for e in entries], indent=2)
        )
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """`calm data <command>`: each data command's parser names its function."""
    code: int = args.data_func(args)
    return code


def cmd_split(args: argparse.Namespace) -> int:
    """`calm data split`: plan, advise as the Data page does, save, print the parts."""
    from calm_core.data.split import parse_sizes, plan_split, save_split
    from calm_core.data.split_sizes import advise_split

    sizes = parse_sizes(args.sizes)  # before loading anything: a typo fails at once
    report = load_dataset(args.dataset, mapping=args.mapping, encoding=args.encoding)
    plan = plan_split(report.items, sizes, args.seed, args.stratify, source=args.dataset.strip())
    advice = advise_split(plan.sizes, sizes)  # as the Data page: S_V too small for TS and the calibrated stop
    if advice.refused:
        raise DataError(advice.message)
    if advice.message:
        print(f"{'warning' if advice.warned else 'note'}: {advice.message}", file=sys.stderr)
    record = save_split(plan, args.name, args.overwrite)
    how = "stratified by answer position" if record.stratify else "not stratified"
    unused = f", {record.n_unused} left out" if record.n_unused else ""
    print(f"split of {record.source}: {record.n_source} items{unused}, seed {record.seed}, {how}")
    width = max(len(n) for n in record.names.values())
    for part, dataset in record.names.items():
        print(f"  {dataset.ljust(width)}  {record.sizes[part]:>6} items")
    print(f"record: {record.path}")
    return 0


COMMANDS = {"datasets": cmd_datasets, "data": cmd_data}
