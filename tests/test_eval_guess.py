"""`calm eval --data FILE` reads a file as the Data page does (issue 49): a file whose
columns the default names miss is read with the page's mapping guess
(`guess_column_mapping`), and one stderr line names what was guessed. Its table is
followed by the rows' 90% intervals, as Compare shows them ("0.257 [0.101, 0.405]").

    .venv/bin/python -m pytest tests/test_eval_guess.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.data.encoding import likely_encoding
from calm_core.data.guess import guess_column_mapping
from calm_core.data.readers import peek_records
from tests.test_cli import run_cli
from tests.test_dead_ends import _csv
from tests.test_eval_run_files import PRIVATE

HEADER = "question,A,B,C,answer"


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_a_file_of_lettered_columns_is_read_with_the_pages_guess(
    tiny_model_dir: Path, tmp_path: Path, encoding: str
) -> None:
    path = _csv(tmp_path / f"questions-{encoding}.csv", encoding, PRIVATE, header=HEADER)
    out = tmp_path / "out.json"
    extra = [] if encoding == "utf-8" else ["--encoding", encoding]
    argv = ["eval", "--model", str(tiny_model_dir), "--device", "cpu", "--data", str(path), "--quiet", "--json",
            str(out), *extra]
    rc, stdout, err = run_cli(argv)
    assert rc == 0, err
    page = guess_column_mapping(HEADER.split(","), peek_records(_csv(tmp_path / "u.csv", "utf-8", PRIVATE, HEADER)))
    notes = [line for line in err.splitlines() if "guesses them" in line]
    assert notes == [
        f"calm: note: {path}: no --mapping given, so its columns are read as the Data page guesses them "
        f"({page.to_text()}); --mapping replaces it"
    ]
    assert "answer_form=letter" in notes[0]  # the answer form read off the rows
    rows = json.loads(out.read_text())["results"]
    assert rows and all(row["n"] == len(PRIVATE) for row in rows)
    assert "rejected" not in err
    shown = stdout.split("90% bootstrap intervals", 1)[1]
    for row in rows:
        lo, hi = row["ci90"]["ece"]
        assert f"{row['ece']:.3f} [{lo:.3f}, {hi:.3f}]" in shown and lo <= row["ece"] <= hi


def test_a_latin1_file_needs_neither_encoding_nor_mapping(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A file a Windows spreadsheet saved is read in the encoding it looks like, as the Data
    page reads it in one click, and one stderr line names it; read as UTF-8, the accented
    rows were rejected."""
    path = _csv(tmp_path / "latin.csv", "latin-1", PRIVATE, header=HEADER)
    out = tmp_path / "out.json"
    rc, _, err = run_cli(["eval", "--model", str(tiny_model_dir), "--device", "cpu", "--data", str(path), "--quiet",
                          "--json", str(out)])
    assert rc == 0, err
    guess = likely_encoding(path.read_bytes())
    assert guess is not None and guess.encoding == "cp1252"
    notes = [line for line in err.splitlines() if "not UTF-8" in line]
    assert notes == [
        f"calm: note: {path}: not UTF-8 text, so it is read as {guess.label}, the encoding it looks like "
        "(as the Data page's Read it as button reads it); --encoding replaces it"
    ]
    assert sum("guesses them" in line for line in err.splitlines()) == 1  # the mapping's note, as before
    assert "rejected" not in err
    assert all(row["n"] == len(PRIVATE) for row in json.loads(out.read_text())["results"])
