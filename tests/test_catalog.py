"""Tests for the catalog (calm_core.data.catalog, .entries, .uploads): listing, name resolution, uploads, built-ins.

Every test gets its own workspace and data folder (CALM_WORKSPACE / CALM_DATA_DIR under
tmp_path) and a small fake `calm_core.data.builtin`, so nothing here depends on the
machine; the tests marked "shared" read /work/shared/data and skip where it is absent,
and the "real built-in" tests exercise the real generator module.
Run: pytest tests/test_catalog.py -q
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from calm_core.data.catalog import load_dataset
from calm_core.data.entries import find_dataset, list_datasets, uploads_dir
from calm_core.data.loaders import load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.schema import DataError, LoadReport, MCItem, OpenItem, RowError
from calm_core.data.uploads import MAX_REJECTED_KEPT, delete_upload, save_upload
from calm_core.paths import PROJECT_ROOT, data_dir

SHARED = Path("/work/shared/data")
needs_shared = pytest.mark.skipif(
    not (SHARED / "arc" / "easy_test.jsonl").is_file(), reason="shared data not on this machine"
)


def _fake_builtin_module() -> types.ModuleType:
    """A stand-in for calm_core.data.builtin: one MC set whose items depend on the seed."""

    def builtin_names() -> list[str]:
        return ["builtin/toy/test"]

    def load_builtin(domain: str, split: str, seed: int = 0) -> LoadReport:
        if (domain, split) != ("toy", "test"):
            raise DataError(f"Expected a built-in set, but got {domain}/{split}")
        items = [MCItem(f"toy-{seed}-{i}", f"Q{i}?", ("a", "b"), (i + seed) % 2) for i in range(6)]
        return LoadReport("toy/test", "mc", items)

    module = types.ModuleType("calm_core.data.builtin")
    module.builtin_names = builtin_names  # type: ignore[attr-defined]
    module.load_builtin = load_builtin  # type: ignore[attr-defined]
    module.DOMAINS = {"toy": "Toy questions with two options."}  # type: ignore[attr-defined]
    return module


@pytest.fixture(autouse=True)
def isolated(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Private workspace + data folder; the fake built-in module unless the test asks for the real one."""
    data = tmp_path / "data"
    (data / "quiz").mkdir(parents=True)
    (data / "quiz" / "SOURCE.md").write_text("# quiz: a tiny test set\n\nmore text\n")
    mc = [{"id": f"m{i}", "question": f"Q{i}?", "choices": ["a", "b", "c"], "answer": i % 3} for i in range(4)]
    (data / "quiz" / "mc_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mc))
    (data / "quiz" / "open_dev.jsonl").write_text(json.dumps({"id": "o1", "question": "Q?", "answers": ["x"]}) + "\n")
    (data / ".hidden").mkdir()
    (data / ".hidden" / "x.jsonl").write_text(json.dumps(mc[0]) + "\n")
    monkeypatch.setenv("CALM_DATA_DIR", str(data))
    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path / "workspace"))
    if "real_builtin" not in request.fixturenames:
        monkeypatch.setitem(sys.modules, "calm_core.data.builtin", _fake_builtin_module())
    return tmp_path


@pytest.fixture
def real_builtin() -> types.ModuleType:
    return importlib.import_module("calm_core.data.builtin")


@pytest.fixture
def csv_report(tmp_path: Path) -> LoadReport:
    text = "qid,q,A,B,C,label\n1,Pick b,a,b,c,B\n2,Pick c,a,b,c,c\n3,broken,a,a,c,A\n4,Élan?,éa,üb,,üb\n"
    path = tmp_path / "my quiz.csv"
    path.write_text(text, encoding="utf-8")
    return load_file(path, mapping="question=q, choices=A|B|C, answer=label, id=qid")


# ----------------------------------------------------------------------------- listing


def test_lists_shared_folders_with_kind_count_and_title() -> None:
    entries = {e.name: e for e in list_datasets()}
    assert entries["quiz/mc_test"].kind == "mc" and entries["quiz/mc_test"].n_items == 4
    assert entries["quiz/open_dev"].kind == "open" and entries["quiz/open_dev"].source == "shared"
    assert entries["quiz/mc_test"].description == "quiz: a tiny test set"
    assert not any(name.startswith(".hidden") for name in entries)
    assert [e.name for e in list_datasets(kind="open")] == ["quiz/open_dev"]


def test_listing_without_a_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALM_DATA_DIR", str(tmp_path / "absent"))
    assert [e.source for e in list_datasets()] == ["builtin"]


@needs_shared
def test_lists_real_shared_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALM_DATA_DIR", str(SHARED))
    entries = {e.name: e for e in list_datasets()}
    assert (entries["arc/easy_test"].kind, entries["arc/easy_test"].n_items) == ("mc", 2376)
    trivia = entries["triviaqa/unfiltered_dev_sub3000"]
    assert (trivia.kind, trivia.n_items) == ("open", 3000)
    assert "popqa/longtail_test" in {e.name for e in list_datasets(kind="open")}
    assert "popqa/longtail_test" not in {e.name for e in list_datasets(kind="mc")}


@needs_shared
def test_arc_easy_test_loads_all_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALM_DATA_DIR", str(SHARED))
    report = load_dataset("arc/easy_test")
    assert report.kind == "mc" and len(report.items) == 2376 and report.rejected == []
    assert report.name == "arc/easy_test" and report.items[0].id == "ARC-Easy-test-0000"


# ----------------------------------------------------------------------------- resolving


def test_load_shared_with_limit() -> None:
    report = load_dataset("quiz/mc_test", limit=2)
    assert [i.id for i in report.items] == ["m0", "m1"] and report.name == "quiz/mc_test"


def test_load_plain_file_path_with_mapping(tmp_path: Path) -> None:
    path = tmp_path / "o.csv"
    path.write_text("question,aliases\nWho?,Ann|Anne\n")
    report = load_dataset(str(path), mapping=ColumnMapping(answers="aliases"))
    assert report.items == [OpenItem("o.csv-1", "Who?", ("Ann", "Anne"))]
    assert find_dataset(str(path)).source == "file"


def test_missing_file_path_says_so(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(str(tmp_path / "gone.parquet"))


def test_unknown_name_lists_close_matches_and_places() -> None:
    with pytest.raises(DataError) as info:
        load_dataset("quiz/mc_tset")
    message = str(info.value)
    assert "Close matches: quiz/mc_test" in message
    assert "built-in sets" in message and str(data_dir()) in message and "uploads in" in message


def test_unknown_name_without_close_matches() -> None:
    with pytest.raises(DataError, match="Expected a dataset name, but got 'zzzzzz'") as info:
        load_dataset("zzzzzz")
    assert "Close matches" not in str(info.value)


def test_hf_prefix_loads_a_saved_folder(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    columns = {"question": ["A?", "B?"], "choices": [["x", "y"], ["x", "y"]], "answer": [0, 1]}
    part = datasets.Dataset.from_dict(columns)
    datasets.DatasetDict({"test": part}).save_to_disk(str(tmp_path / "saved"))
    assert len(load_dataset(f"hf:{tmp_path / 'saved'}").items) == 2
    assert load_dataset(str(tmp_path / "saved"), limit=1).items[0].question == "A?"
    with pytest.raises(DataError, match="hf:<name>"):
        load_dataset("hf:a:b:c:d")


# ----------------------------------------------------------------------------- built-ins


def test_fake_builtin_listed_and_loaded_with_seed_and_limit() -> None:
    entry = find_dataset("builtin/toy/test")
    assert (entry.kind, entry.source, entry.n_items, entry.path) == ("mc", "builtin", 6, None)
    assert "Toy questions with two options." in entry.description
    report = load_dataset("builtin/toy/test", limit=3, seed=1)
    assert report.name == "builtin/toy/test" and [i.id for i in report.items] == ["toy-1-0", "toy-1-1", "toy-1-2"]
    with pytest.raises(DataError, match="Close matches: builtin/toy/test"):
        load_dataset("builtin/toy/tset")
    with pytest.raises(DataError, match="limit"):
        load_dataset("builtin/toy/test", limit=0)


def test_every_real_builtin_is_listed_and_loads(real_builtin: types.ModuleType) -> None:
    names = real_builtin.builtin_names()
    assert names and all(n.startswith("builtin/") and n.count("/") == 2 for n in names)
    listed = {e.name: e for e in list_datasets() if e.source == "builtin"}
    assert sorted(listed) == sorted(names)
    first = listed[names[0]]
    assert first.kind in ("mc", "open") and first.n_items and first.n_items > 0
    report = load_dataset(names[0], limit=3, seed=1)
    assert len(report.items) == min(3, first.n_items) and report.kind == first.kind
    assert load_dataset(names[0], limit=3, seed=1).items == report.items  # same seed, same items


def test_unknown_real_builtin(real_builtin: types.ModuleType) -> None:
    with pytest.raises(DataError):
        load_dataset("builtin/no_such_domain/test")


# ----------------------------------------------------------------------------- uploads


def test_upload_round_trip_and_meta(csv_report: LoadReport, isolated: Path) -> None:
    mapping = "question=q, choices=A|B|C, answer=label, id=qid"
    entry = save_upload("quiz one", csv_report, "my quiz.csv", mapping=mapping)
    assert (entry.name, entry.kind, entry.source, entry.n_items) == ("upload/quiz_one", "mc", "upload", 3)
    assert entry.path == isolated / "workspace" / "datasets" / "quiz_one"
    assert load_dataset("upload/quiz_one").items == csv_report.items
    meta = json.loads((entry.path / "meta.json").read_text())
    assert meta["original_filename"] == "my quiz.csv" and meta["kind"] == "mc"
    assert (meta["n_items"], meta["n_rejected"]) == (3, 1)
    assert meta["rejected"][0]["row"] == 3 and meta["rejected"][0]["field"] == "A|B|C"
    assert meta["mapping"]["choices"] == ["A", "B", "C"] and meta["created"]
    assert "upload/quiz_one" in {e.name for e in list_datasets(kind="mc")}


def test_upload_survives_a_restart(csv_report: LoadReport, isolated: Path) -> None:
    save_upload("persist", csv_report, "my quiz.csv")
    code = (
        "import json, dataclasses; from calm_core.data.catalog import load_dataset; "
        "print(json.dumps([dataclasses.asdict(i) for i in load_dataset('upload/persist').items]))"
    )
    env = {"CALM_WORKSPACE": str(isolated / "workspace"), "CALM_DATA_DIR": str(isolated / "data"), "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=True
    )
    reloaded = [MCItem(**{**d, "choices": tuple(d["choices"])}) for d in json.loads(out.stdout)]
    assert reloaded == csv_report.items


def test_open_upload_round_trip() -> None:
    report = LoadReport("x", "open", [OpenItem("a", "Q?", ("x", "y"), "s"), OpenItem("b", "R?", ("z",))])
    save_upload("upload/opens", report, "o.jsonl")
    assert load_dataset("upload/opens").items == report.items


def test_upload_refuses_overwrite_unless_asked(csv_report: LoadReport) -> None:
    save_upload("same", csv_report, "a.csv")
    with pytest.raises(DataError, match="already exists"):
        save_upload("same", csv_report, "b.csv")
    smaller = LoadReport("s", "mc", csv_report.items[:1])
    assert save_upload("same", smaller, "b.csv", overwrite=True).n_items == 1
    assert len(load_dataset("upload/same").items) == 1
    assert [p.name for p in uploads_dir().iterdir()] == ["same"]  # no staging or old folders left


@pytest.mark.parametrize("name", ["../evil", "/abs", "a/../../b", "upload/../evil", "..", "a\\b", "   "])
def test_upload_names_that_escape_are_refused(csv_report: LoadReport, isolated: Path, name: str) -> None:
    with pytest.raises(DataError):
        save_upload(name, csv_report, "x.csv")
    with pytest.raises(DataError):
        delete_upload(name)
    workspace = isolated / "workspace"
    assert not (isolated / "evil").exists() and not Path("/abs").exists() and not (isolated / "b").exists()
    assert not workspace.exists() or not any((workspace / "datasets").glob("*"))


def test_empty_report_is_not_saved() -> None:
    with pytest.raises(DataError, match="at least one valid item"):
        save_upload("nothing", LoadReport("n", "mc", [], [RowError("f", 1, "", "bad")]), "f.csv")


def test_delete_upload(csv_report: LoadReport) -> None:
    save_upload("gone", csv_report, "a.csv")
    delete_upload("upload/gone")
    assert "upload/gone" not in {e.name for e in list_datasets()}
    with pytest.raises(DataError, match="upload/gone"):
        delete_upload("gone")
    with pytest.raises(DataError, match="upload/gone"):
        load_dataset("upload/gone")


def test_half_written_uploads_are_not_listed(csv_report: LoadReport) -> None:
    save_upload("real", csv_report, "a.csv")
    (uploads_dir() / ".tmp-real-123").mkdir()
    (uploads_dir() / "no_meta").mkdir()
    assert [e.name for e in list_datasets() if e.source == "upload"] == ["upload/real"]


def test_upload_reloads_with_the_rows_it_rejected(csv_report: LoadReport) -> None:
    """items.jsonl holds only kept rows: the rejects come back from meta.json, so training
    or evaluating on an upload still says that part of the file was left out, and why."""
    save_upload("quiz", csv_report, "my quiz.csv")
    report = load_dataset("upload/quiz")
    assert report.items == csv_report.items
    assert report.rejected == csv_report.rejected and report.n_rejected == 1
    assert report.rejection_lines() == [
        "1 of 4 rows read from upload/quiz were rejected",
        "my quiz.csv, row 3, field `A|B|C`: Expected the correct choice 'a' once, but it appears 2 times"]
    assert load_dataset("upload/quiz[0:1]").n_rejected == 1  # a slice keeps the file's rejects


def test_upload_rejected_count_stays_exact_past_the_listed_rows() -> None:
    rejected = [RowError("big.csv", row, "answer", "Expected an index in 0..1, but got 7") for row in range(2, 1207)]
    report = LoadReport("big.csv", "mc", [MCItem("a", "Q?", ("x", "y"), 0)], rejected)
    save_upload("big", report, "big.csv")
    again = load_dataset("upload/big")
    assert len(again.rejected) == MAX_REJECTED_KEPT and again.n_rejected == 1205
    assert again.n_rows == 1206 and again.rejection_lines(2)[-1] == "... and 1203 more"
    assert again.rejected_record(3)["n_rejected"] == 1205 and len(again.rejected_record(3)["rejected"]) == 3


def test_upload_with_an_unreadable_meta_still_loads_its_items(csv_report: LoadReport) -> None:
    entry = save_upload("meta", csv_report, "my quiz.csv")
    (entry.path / "meta.json").write_text('{"kind": "mc", "rejected": [{"row": 1}]}')
    report = load_dataset("upload/meta")
    assert report.items == csv_report.items and report.n_rejected == 0
