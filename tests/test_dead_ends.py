"""No dead ends between the Data page and the command line (issue 40, item 5).

A file a Windows spreadsheet saved (cp1252, Latin-1's superset) is read in its encoding
(`--encoding`, `load_file(encoding=...)`) and, read as UTF-8, refused or noted with the
encoding it looks like and the way to read it; `calm eval --run RUN --data FILE` takes
`--mapping` and `--encoding`, or reuses the mapping saved with an upload of the file's
columns, and each refusal on that path names the flag or command that gets past it; a
repeated column name is refused with its positions, in CSV and Parquet alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.cli.commands import main
from calm_core.data.encoding import codec_name, likely_encoding, to_utf8
from calm_core.data.loaders import load_file
from calm_core.data.schema import DataError
from calm_core.runs.rundir import RunDir

MAPPING = "question=frage, choices=a|b|c, answer=richtig"
QUESTIONS = [  # accented text in every row but the last: read as UTF-8, those rows are undecodable
    ("Où est né Molière ?", "Paris", "Genève", "Zürich", "A"),
    ("Quelle ville est en Suisse ?", "Lyon", "Genève", "Nîmes", "B"),
    ("Wo liegt München?", "Österreich", "Schweiz", "Deutschland", "C"),
    ("Qui a écrit « Candide » ?", "Voltaire", "Zola", "Hugo", "A"),
    ("¿Dónde está Córdoba?", "España", "Francia", "Italia", "A"),
    ("Largest ocean?", "Atlantic", "Pacific", "Indian", "B"),
]


def _csv(path: Path, encoding: str, rows: list[tuple[str, ...]] = QUESTIONS, header: str = "frage,a,b,c,richtig") -> Path:
    lines = [header] + [",".join(f'"{cell}"' for cell in row) for row in rows]
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return path


# ----------------------------------------------------------------------------- the encoding


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_a_western_file_is_named_cp1252_and_utf8_is_not_guessed_at(encoding: str) -> None:
    text = "\n".join(",".join(row) for row in QUESTIONS * 5)
    assert likely_encoding(text.encode(encoding)).encoding == "cp1252"  # never cp1250, which reads "où" as "oů"
    assert likely_encoding(text.encode("utf-8")) is None
    assert to_utf8(text.encode(encoding), "cp1252").decode("utf-8") == text


def test_other_scripts_are_named_by_the_encoding_their_spreadsheets_write() -> None:
    russian = "\n".join(f"Столица России {i}?,Москва,Киев,A" for i in range(30)).encode("cp1251")
    japanese = "\n".join(f"日本の首都は{i}?,東京,大阪,A" for i in range(30)).encode("shift_jis")
    assert likely_encoding(russian).encoding == "cp1251"  # not Mac Cyrillic, which reads a little cleaner
    assert likely_encoding(japanese).encoding in ("cp932", "shift_jis")


def test_an_unknown_encoding_is_refused_with_known_ones() -> None:
    assert codec_name("Latin-1") == "iso8859-1" and codec_name("windows-1252") == "cp1252"
    with pytest.raises(DataError, match=r"Expected a text encoding Python knows \(utf-8, cp1252, .*but got 'latin9x'"):
        codec_name("latin9x")


def test_a_latin1_csv_read_as_utf8_names_its_encoding_and_the_way_to_read_it(tmp_path: Path) -> None:
    report = load_file(_csv(tmp_path / "quiz.csv", "latin-1"), mapping=MAPPING)
    assert len(report.items) == 1 and report.n_rejected == 5
    lines = report.rejection_lines()
    assert lines[0] == "5 of 6 rows read from quiz.csv were rejected"
    assert "looks like cp1252" in lines[1] and "`--encoding cp1252`" in lines[1] and "Read it as cp1252" in lines[1]
    assert all(line.endswith("Expected UTF-8 text, but got undecodable bytes") for line in lines[2:])
    every_row_bad = _csv(tmp_path / "all.csv", "latin-1", QUESTIONS[:-1])
    with pytest.raises(DataError, match=r"(?s)but all 5 were rejected.*looks like cp1252.*--encoding cp1252"):
        load_file(every_row_bad, mapping=MAPPING)


@pytest.mark.parametrize("stream", [False, True])
def test_a_latin1_csv_read_in_its_encoding_keeps_every_row_whole_and_streamed(tmp_path: Path, stream: bool) -> None:
    path = _csv(tmp_path / "quiz.csv", "latin-1")
    report = load_file(path, mapping=MAPPING, encoding="latin-1", stream=stream)
    assert report.n_rejected == 0 and not report.note
    assert [item.question for item in report.items] == [row[0] for row in QUESTIONS]
    assert report.items[2].choices == ("Österreich", "Schweiz", "Deutschland") and report.items[2].answer == 2
    assert report.items[0].id == "quiz.csv-1"  # named by the file, never by the temporary UTF-8 copy


def test_bytes_the_chosen_encoding_cannot_read_stay_rejected_one_by_one(tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_bytes(b"frage,a,b,c,richtig\nCaf\xe9?,x,y,z,A\nBad \x81 byte?,x,y,z,A\n")  # 0x81: no cp1252 letter
    report = load_file(path, mapping=MAPPING, encoding="cp1252")
    assert [item.question for item in report.items] == ["Café?"]
    assert [str(e) for e in report.rejected] == ["odd.csv, row 2, field `frage`: Expected UTF-8 text, but got "
                                                 "undecodable bytes"]


def test_a_cp1252_header_is_read_in_its_encoding_and_named_when_not(tmp_path: Path) -> None:
    path = _csv(tmp_path / "q.csv", "cp1252", header="frage,a,b,c,réponse")
    with pytest.raises(DataError, match=r"(?s)Expected a UTF-8 header row .*looks like cp1252"):
        load_file(path)
    report = load_file(path, mapping="question=frage, choices=a|b|c, answer=réponse", encoding="cp1252")
    assert len(report.items) == len(QUESTIONS)


# ----------------------------------------------------------------------------- repeated column names


def test_a_repeated_column_is_refused_with_its_positions_and_the_fix_in_csv_and_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_path = tmp_path / "twice.csv"
    csv_path.write_text("question,B,A,answer,B\nQ?,x,y,A,z\n")
    expected = r"Expected distinct column names in .*twice\.{}, but B is at columns 2 and 5: rename {}"
    with pytest.raises(DataError, match=expected.format("csv", "all but one")):
        load_file(csv_path)
    parquet_path = tmp_path / "twice.parquet"
    arrays = [pa.array(["Q?"]), pa.array(["x"]), pa.array(["y"]), pa.array(["A"]), pa.array(["z"])]
    pq.write_table(pa.table(arrays, names=["question", "B", "A", "answer", "B"]), parquet_path)
    with pytest.raises(DataError, match=expected.format("parquet", "all but one")):
        load_file(parquet_path)  # pyarrow would keep the last B silently


# ----------------------------------------------------------------------------- the command line, without a run


def test_calm_data_split_reads_a_latin1_file_with_encoding(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = [(f"Où est la ville {i} ?", "Genève", "Zürich", "Nîmes", "ABC"[i % 3]) for i in range(60)]
    path = _csv(tmp_path / "villes.csv", "latin-1", rows)
    assert main(["data", "split", str(path), "--mapping", MAPPING, "--sizes", "0.5,0.25,0.25"]) == 2
    assert "--encoding cp1252" in capsys.readouterr().err
    assert main(["data", "split", str(path), "--mapping", MAPPING, "--sizes", "0.5,0.25,0.25",
                 "--encoding", "latin-1", "--name", "villes"]) == 0
    from calm_core.data.catalog import load_dataset

    assert load_dataset("split/villes/heldout").items[0].choices == ("Genève", "Zürich", "Nîmes")


def test_calm_eval_names_the_encoding_before_loading_a_model(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every --data set is read before the model loads: a file that is not UTF-8 is read in
    the encoding it looks like (as the Data page's one click reads it), named in one note."""
    import calm_core.cli.eval_io as eval_io
    from calm_core.cli.usage import UsageError

    def loaded(args):
        raise UsageError("the model would load now")

    monkeypatch.setattr(eval_io, "load_lm", loaded)
    path = _csv(tmp_path / "quiz.csv", "latin-1", QUESTIONS[:-1])
    assert main(["eval", "--data", str(path), "--mapping", MAPPING]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "read as cp1252" in err[0] and "--encoding replaces it" in err[0]
    assert err[1].endswith("the model would load now")  # every row read, none rejected, before the model
    assert main(["eval", "--data", str(path), "--mapping", MAPPING, "--encoding", "utf-8"]) == 2  # as asked
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "looks like cp1252" in err and "`--encoding cp1252`" in err
    assert main(["eval", "--data", str(path)]) == 2  # no mapping either: the columns' refusal gives one to pass
    assert "--mapping 'question=?, choices=a|b|c, answer=?'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the Data page


def _shown(at) -> str:
    return "\n".join(str(e.value) for e in [*at.markdown, *at.caption, *at.warning, *at.error, *at.success])


def test_a_latin1_csv_uploads_after_one_click(open_page, tiny_everywhere) -> None:
    """Every row holds an accent: read as UTF-8 none can be read, the page names the file's
    encoding and its button; one click, and the mapping is guessed and every row kept."""
    rows = [(f"Où est {town} ?", "Genève", "Zürich", "Nîmes", "ABC"[i % 3]) for i, town in
            enumerate(["Molière", "Gruyère", "Besançon", "Köln", "Málaga", "Hôtel-Dieu"])]
    lines = ["question,A,B,C,answer"] + [",".join(row) for row in rows]
    at = open_page("../pages/data/data.py")
    at.get("file_uploader")[0].set_value(("villes.csv", ("\n".join(lines) + "\n").encode("latin-1"), "text/csv")).run()
    assert not at.exception, at.exception
    assert [w.value for w in at.warning][0].startswith("villes\\.csv is not UTF-8 text: it looks like **cp1252")
    assert at.error and "Expected UTF-8 text, but got undecodable bytes" in at.error[0].value  # what UTF-8 gives
    at.button(key="data_encoding_use").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert "Read in cp1252 (Windows Western European" in _shown(at)
    assert not any("not UTF-8" in w.value for w in at.warning)  # the offer is taken
    assert [(m.label, m.value) for m in at.metric] == [("Rows", "6"), ("Kept", "6"), ("Rejected", "0")]
    assert list(at.table[0].value["question"])[0] == "Où est Molière ?"
    assert "--encoding cp1252" in _shown(at)  # the mapping's caption gives the flag for `calm eval`
    at.text_input(key="data_name").set_value("villes").run()
    at.button(key="data_save").click().run()
    assert "Saved as `upload/villes` (6 items)" in _shown(at)
    from calm_core.data.catalog import load_dataset
    from calm_core.data.entries import META_FILE, upload_folder

    assert load_dataset("upload/villes").items[3].question == "Où est Köln ?"
    assert json.loads((upload_folder("villes")[1] / META_FILE).read_text())["encoding"] == "cp1252"
    at.button(key="data_encoding_utf8").click().run()  # the way back: UTF-8 again, and the offer again
    assert at.button(key="data_encoding_use").label == "Read it as cp1252"


def test_a_utf8_upload_gets_no_encoding_offer(open_page, tiny_everywhere) -> None:
    lines = ["question,A,B,C,answer"] + [",".join(row) for row in QUESTIONS]
    at = open_page("../pages/data/data.py")
    at.get("file_uploader")[0].set_value(("ok.csv", ("\n".join(lines) + "\n").encode("utf-8"), "text/csv")).run()
    assert not at.exception and not at.error and not any("UTF-8" in w.value for w in at.warning)
    assert [(m.label, m.value) for m in at.metric][1] == ("Kept", str(len(QUESTIONS)))
    assert not any(b.key in ("data_encoding_use", "data_encoding_utf8") for b in at.button)
