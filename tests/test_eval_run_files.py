"""`calm eval --run RUN --data FILE`: a person's own file on a finished run (issue 40, item 5).

The issue's user uploaded 70 questions on the Data page, trained, and kept 30 more in a
CSV of the same columns; `calm eval --run RUN --data private.csv` then refused with
`--mapping` ("cannot go with --run") and without it ("Expected multiple-choice columns").
Here a tiny run is evaluated on such a file, saved by a Windows spreadsheet (cp1252):
with `--mapping` and `--encoding`; with the mapping saved with the upload of the same
columns; and every refusal on the way names the flag or command that gets past it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.cli.commands import main
from calm_core.runs.rundir import RunDir
from calm_core.training.loop import train
from calm_core.launch import run_config_record
from tests.test_dead_ends import MAPPING, _csv
from tests.test_trainer import fresh_lm, small_config

PRIVATE = [  # 12 questions the run never saw, two with accents
    ("Capital of Peru?", "Lima", "Quito", "Bogotá", "A"),
    ("Capital of Switzerland?", "Zürich", "Bern", "Genève", "B"),
    *[(f"Which number is {n}?", str(n - 1), str(n + 1), str(n), "C") for n in range(10)],
]


@pytest.fixture(scope="module")
def finished(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        cfg = small_config(model=str(tiny_model_dir), scope="options", heldout_limit=10, steps=2)
        run = RunDir.create(root, "tiny-files", run_config_record(cfg))
        train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    return run


def _eval(run: RunDir, *extra: str) -> int:
    return main(["eval", "--run", run.run_id, "--runs-root", str(run.path.parent), "--device", "cpu", *extra])


def test_a_latin1_file_is_evaluated_with_mapping_and_encoding(finished: RunDir, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    private = _csv(tmp_path / "private.csv", "latin-1", PRIVATE)
    out = tmp_path / "added.json"
    assert _eval(finished, "--data", str(private), "--mapping", MAPPING, "--encoding", "latin-1",
                 "--limit", "50", "--json", str(out)) == 0
    rows = json.loads(out.read_text())["results"]
    assert {r["variant"] for r in rows} == {r["variant"] for r in finished.results().rows}
    assert {r["n"] for r in rows} == {len(PRIVATE)} and all(r["added_after_training"] for r in rows)
    assert "rejected" not in capsys.readouterr().err  # every row read, accents and all


def test_without_the_encoding_it_is_read_in_the_one_it_looks_like(finished: RunDir, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    every_row_accented = _csv(tmp_path / "accents.csv", "latin-1", PRIVATE[:2])
    assert _eval(finished, "--data", str(every_row_accented), "--mapping", MAPPING) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "not UTF-8" in line]
    assert len(notes) == 1 and "read as cp1252" in notes[0] and "rejected" not in err
    assert _eval(finished, "--data", str(every_row_accented), "--mapping", MAPPING, "--encoding", "utf-8") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "looks like cp1252" in err and "--encoding cp1252" in err


def test_without_mapping_the_refusal_gives_a_mapping_to_pass(finished: RunDir, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    private = _csv(tmp_path / "private.csv", "utf-8", PRIVATE)
    assert _eval(finished, "--data", str(private)) == 2
    err = capsys.readouterr().err
    assert "Expected multiple-choice columns (choices)" in err
    assert "--mapping 'question=?, choices=a|b|c, answer=?' (a guess: put a column's name for each ?)" in err
    assert "upload the file on the Data page" in err
    known = _csv(tmp_path / "known.csv", "utf-8", PRIVATE, header="question,A,B,C,label")
    assert _eval(finished, "--data", str(known), "--limit", "4") == 0  # a guess naming only its columns is used
    assert "as the Data page guesses them (question=question, choices=A|B|C, answer=label, answer_form=letter)" in (
        capsys.readouterr().err
    )


def test_the_mapping_saved_with_an_upload_of_the_same_columns_is_reused(finished: RunDir, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    from calm_core.data.uploads import save_upload

    uploaded = _csv(tmp_path / "mine.csv", "utf-8", [(f"Is {n} even?", "yes", "no", "maybe", "AB"[n % 2])
                                                     for n in range(20)])
    from calm_core.data.loaders import load_file

    save_upload("mine", load_file(uploaded, mapping=MAPPING), "mine.csv", MAPPING)
    private = _csv(tmp_path / "private.csv", "utf-8", PRIVATE)
    assert _eval(finished, "--data", str(private), "--limit", "4") == 0
    captured = capsys.readouterr()
    assert f"reading its columns with the mapping saved with upload/mine ({MAPPING})" in captured.err
    assert "--mapping replaces it" in captured.err and "added after training" in captured.out
    # Two uploads of these columns with different mappings: the choice is the person's, named.
    other = "question=frage, choices=c|b|a, answer=richtig"
    save_upload("theirs", load_file(uploaded, mapping=other), "mine.csv", other)
    assert _eval(finished, "--data", str(private)) == 2
    err = capsys.readouterr().err
    assert "saved with different mappings" in err and f"--mapping '{MAPPING}'" in err and f"--mapping '{other}'" in err


def test_flags_the_run_fixed_name_the_way_out(finished: RunDir, capsys: pytest.CaptureFixture) -> None:
    assert _eval(finished, "--data", "builtin/units/test", "--model", "embedded") == 2
    err = capsys.readouterr().err
    assert "--model cannot go with --run" in err and "Drop them" in err and "drop --run" in err


def test_an_unknown_run_names_calm_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--run", "no-such-run", "--runs-root", str(tmp_path), "--data", "builtin/units/test"]) == 2
    assert "`calm runs` lists the run ids" in capsys.readouterr().err


def test_an_unfinished_run_names_what_finishes_it(tiny_model_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    run = RunDir.create(tmp_path, "queued-run", run_config_record(small_config(model=str(tiny_model_dir))))
    assert main(["eval", "--run", run.run_id, "--runs-root", str(tmp_path), "--data", "builtin/units/test"]) == 2
    assert "wait for it: `calm runs` shows its state" in capsys.readouterr().err
    run.write_status("failed", error="killed")
    assert main(["eval", "--run", run.run_id, "--runs-root", str(tmp_path), "--data", "builtin/units/test"]) == 2
    assert "`calm resume queued-run` continues it" in capsys.readouterr().err
