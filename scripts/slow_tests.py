"""Which tests the fast loop leaves out, by measurement: read pytest's `--durations=0`
report of the fast loop and write tests/slow_tests.txt, which tests/conftest.py turns into
the `slow` marker.

    nice -n 5 .venv/bin/python -m pytest -m "not embedded and not gemma and not browser and not slow and not long" \\
        -q --durations=0 -p no:cacheprovider > /tmp/fast-durations.txt
    .venv/bin/python scripts/slow_tests.py /tmp/fast-durations.txt [--over 1.5] [--load "$(uptime)"]

A test function's phases (setup, call, teardown) are summed over all its parametrizations,
so a slow parametrized test is marked whole; a function whose total is `--over` seconds or
more is listed (unless KEEP holds it for coverage), and a file whose every measured function
is listed is listed as the file. A test whose *setup* alone is `--setup-over` seconds or more is
paying a module-scoped fixture (a trained run, a server), which would move onto the file's
next test if only that one were listed: its whole file is listed.
Entries already in tests/slow_tests.txt stay (the fast run no longer measures them). Why a
list and not decorators: the figures move with the machine, and one command redraws the
line from a new measurement instead of an edit in fifty files.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "tests" / "slow_tests.txt"
# Kept in the fast loop whatever they measure: the fast loop's only import of a module (every
# calm_core module stays imported by some fast test), or a whole-tree guard against the
# commonest slip of an edit, which the inner loop should catch before CI does.
KEEP = {
    "tests/test_thermometer.py::test_the_build_commands_table_compares_thermometer_with_ts_carried_over_and_the_oracle":
        "calm_core/training/thermometer_build.py",
    "tests/test_imports_at_top.py::test_imports_inside_functions_only_for_heavy_modules": "an import put in a function",
    "tests/test_dependencies.py::test_every_runtime_dependency_is_imported": "a dependency added or dropped",
    "tests/test_habits.py::test_modules_and_pages_stay_short": "a module grown past the line cap",
}
LINE = re.compile(r"^\s*([\d.]+)s\s+(setup|call|teardown)\s+(\S+)")


def function_seconds(report: str) -> dict[str, float]:
    """Seconds per `file::function`, every phase and parametrization summed."""
    totals: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        match = LINE.match(line)
        if match:
            totals[match.group(3).split("[")[0]] += float(match.group(1))
    return dict(totals)


def heavy_setup_files(report: str, over: float) -> set[str]:
    """The files where some test's setup alone took `over` seconds or more: a module-scoped
    fixture that the file's next test would pay if that test left the fast loop."""
    return {
        match.group(3).split("::")[0]
        for match in map(LINE.match, report.splitlines())
        if match and match.group(2) == "setup" and float(match.group(1)) >= over
    }


def listed(seconds: dict[str, float], over: float, whole_files: set[str] | None = None) -> dict[str, float]:
    """The functions at or over `over` seconds, a file's whole set folded into the file, and
    every function of `whole_files` (heavy_setup_files) folded into its file."""
    slow = {name: s for name, s in seconds.items() if (s >= over or name.split("::")[0] in (whole_files or set()))}
    slow = {name: s for name, s in slow.items() if name not in KEEP}
    by_file: dict[str, list[str]] = defaultdict(list)
    for name in seconds:
        by_file[name.split("::")[0]].append(name)
    for file, names in by_file.items():
        if len(names) > 1 and all(name in slow for name in names):
            slow = {k: v for k, v in slow.items() if k not in names} | {file: sum(seconds[n] for n in names)}
    return slow


def read_list(path: Path) -> dict[str, float]:
    """tests/slow_tests.txt as {entry: measured seconds}."""
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        if line.strip() and not line.startswith("#"):
            seconds, entry = line.split(maxsplit=1)
            entries[entry.strip()] = float(seconds)
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest --durations=0 output of the fast loop")
    parser.add_argument("--over", type=float, default=1.5, help="a function at or over this many seconds is slow")
    parser.add_argument("--setup-over", type=float, default=5.0,
                        help="a test whose setup alone takes this many seconds lists its whole file")
    parser.add_argument("--load", default="", help="the machine's load during the measurement (uptime), recorded")
    args = parser.parse_args()
    report = args.report.read_text(encoding="utf-8")
    seconds = function_seconds(report)
    slow = read_list(LIST) | listed(seconds, args.over, heavy_setup_files(report, args.setup_over))
    kept = sum(s for name, s in seconds.items() if name not in slow and name.split("::")[0] not in slow)
    header = [
        "# Tests the fast loop (`bash scripts/test.sh --fast`) leaves out, marked `slow` by tests/conftest.py.",
        f"# Measured, not guessed: scripts/slow_tests.py --over {args.over} --setup-over {args.setup_over}"
        " on the fast loop's --durations=0.",
        f"# Load during the measurement: {args.load.strip() or 'not recorded'}",
        f"# The functions left in the fast loop summed to {kept:.0f} s there. Seconds, then file[::function].",
    ]
    body = [f"{s:7.1f}  {name}" for name, s in sorted(slow.items(), key=lambda kv: (-kv[1], kv[0]))]
    LIST.write_text("\n".join(header + body) + "\n", encoding="utf-8")
    print(f"{len(slow)} entries in {LIST.relative_to(ROOT)}; the fast loop keeps {kept:.0f} s of the measured tests")


if __name__ == "__main__":
    main()
