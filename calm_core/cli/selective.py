"""`calm selective RUN`: above which confidence a finished run's variant may answer alone,
chosen on S_V with a guarantee, and what that does on every evaluation set.

    calm selective RUN --target-error 0.1 [--variant calm] [--rule crc|ltt] [--delta 0.1]
                       [--coverage 0.9] [--by subject] [--json out.json] [--save]

The work is results/selective.py's (the choice: calibration/selective_answerer.py's
`SelectiveAnswerer` over calibration/selective.py's maths); this module
reads flags and prints. `--by subject` adds a threshold per subject (results/by_group.py).
`--save` stores the threshold in the run's selective.json, which
`calm export` reads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from calm_core.calibration.selective import DEFAULT_DELTA, DEFAULT_RULE, DEFAULT_TARGET, RULES
from calm_core.paths import ensure_writable
from calm_core.runs.rundir import RunDir


def add_parsers(sub: Any) -> None:
    """`calm selective` under the `calm` subcommands `sub`."""
    from calm_core.results.by_group import GROUP_KEYS

    sel = sub.add_parser(
        "selective", help="a confidence threshold to answer alone, chosen on S_V with a guarantee, and option sets"
    )
    sel.add_argument("run_id", metavar="RUN")
    sel.add_argument(
        "--target-error",
        type=float,
        default=DEFAULT_TARGET,
        help="the error rate to stay under, in (0, 1) (default %(default)s)",
    )
    sel.add_argument("--variant", help="the variant to threshold (default: the run's recommendation)")
    rules = "; ".join(f"{name}: {text}" for name, text in RULES.items()).replace("%", "%%")
    sel.add_argument("--rule", choices=list(RULES), default=DEFAULT_RULE, help=f"{rules} (default %(default)s)")
    sel.add_argument(
        "--delta", type=float, default=DEFAULT_DELTA, help="ltt: the chance that S_V misleads (default %(default)s)"
    )
    sel.add_argument(
        "--coverage", type=float, help="option sets holding the right answer this often (default 1 - target error)"
    )
    sel.add_argument(
        "--by", choices=GROUP_KEYS, help="also a threshold per group (Mondrian), fitted on each group's S_V items"
    )
    sel.add_argument("--json", type=Path, help="also write the report as JSON")
    sel.add_argument("--save", action="store_true", help="store the threshold with the run (selective.json) for export")
    sel.add_argument("--runs-root", type=Path)


def cmd_selective(args: argparse.Namespace) -> int:
    from calm_core.results import selective as sel

    if args.json:
        args.json = ensure_writable(args.json, "file")
    run = RunDir.at(args.run_id, args.runs_root)
    variant = args.variant or sel.default_variant(run)
    request = sel.SelectiveRequest(variant, args.target_error, args.rule, args.delta, args.coverage)
    report = sel.selective_report(run, request)
    print(f"run: {run.run_id}  rule: {request.rule} ({RULES[request.rule]})")
    print(f"guarantee: {sel.guarantee_text(request)}")
    print(f"assumption: {sel.ASSUMPTION}")
    for choice in report.choices.values():
        print(f"S_V: {sel.choice_line(choice)}")
    way_out = sel.crc_way_out(report)
    if way_out:
        print(f"way out: {way_out}")
    rows = sel.table_rows(report)
    if rows:
        print(text_table(rows))
    for note in (sel.above_target_note(report), sel.coverage_note(report), sel.sv_only_note(report)):
        if note:
            print(f"note: {note}")
    if args.by:
        print_by_group(run, request, args.by)
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=2, default=float))
    if args.save:
        record = sel.save_choice(run, report)
        print(f"saved: {run.path / 'selective.json'} (threshold {record['threshold']}, read by `calm export`)")
    return 0


def print_by_group(run: Any, request: Any, by: str) -> None:
    """The variant's threshold per group on S_V, and which groups are too small."""
    from calm_core.results import by_group

    choice = by_group.choose_by_group(run, request, by)
    print(f"by {by}:")
    for fit in choice.fits:
        print(f"  {by_group.group_line(fit)}")
    print(by_group.summary_line(choice))


def text_table(rows: list[dict[str, str]]) -> str:
    """Fixed-width columns, the header first."""
    columns = list(rows[0])
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(r[c].ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)


COMMANDS = {"selective": cmd_selective}
