"""tests/slow_tests.txt, the fast loop's measured `slow` list: every entry still names a test
(a renamed test would silently rejoin the fast loop), and scripts/slow_tests.py reads a
--durations report as it claims (phases and parametrizations summed, whole files folded)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import LONG_LIST, SLOW_LIST, long_entries, slow_entries

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import slow_tests  # noqa: E402


@pytest.mark.parametrize(("listing", "entry"), [(SLOW_LIST, entry) for entry in sorted(slow_entries())]
                         + [(LONG_LIST, entry) for entry in sorted(long_entries())])
def test_every_listed_slow_test_exists(listing: Path, entry: str) -> None:
    file, _, function = entry.partition("::")
    path = ROOT / file
    assert path.is_file(), f"{listing.name} names {file}, which is gone"
    name = function.split("::")[-1]
    assert not name or re.search(rf"^\s*(async )?def {re.escape(name)}\(", path.read_text(), re.M), (
        f"{listing.name} names {entry}, which {file} no longer defines"
    )


def test_the_report_is_summed_per_function_and_folded_per_file() -> None:
    report = """
    4.00s call     suite/test_a.py::test_one[x]
    0.50s setup    suite/test_a.py::test_one[y]
    3.00s call     suite/test_a.py::test_one[y]
    0.20s call     suite/test_a.py::test_two
    5.00s call     suite/test_b.py::test_only
    6.00s call     suite/test_b.py::test_also
    (12 durations < 0.005s hidden.)
    """
    seconds = slow_tests.function_seconds(report)
    assert seconds == pytest.approx({"suite/test_a.py::test_one": 7.5, "suite/test_a.py::test_two": 0.2,
                                     "suite/test_b.py::test_only": 5.0, "suite/test_b.py::test_also": 6.0})
    assert slow_tests.listed(seconds, 3.0) == pytest.approx({"suite/test_a.py::test_one": 7.5,
                                                             "suite/test_b.py": 11.0})


def test_a_heavy_setup_lists_its_whole_file() -> None:
    """A module fixture paid in one test's setup would move onto the next test of the file
    if only that test were listed: the file goes whole, its light tests with it."""
    report = """
    9.00s setup    suite/test_fixture.py::test_first
    0.10s call     suite/test_fixture.py::test_first
    0.30s call     suite/test_fixture.py::test_second
    4.00s call     suite/test_plain.py::test_heavy_call
    0.20s call     suite/test_plain.py::test_light
    """
    whole = slow_tests.heavy_setup_files(report, 3.0)
    assert whole == {"suite/test_fixture.py"}
    assert slow_tests.listed(slow_tests.function_seconds(report), 3.0, whole) == pytest.approx(
        {"suite/test_fixture.py": 9.4, "suite/test_plain.py::test_heavy_call": 4.0}
    )
