"""Calibration by subject on a run (results/by_group.py): Compare's per-subject table of ECE
with intervals, the subjects read from the set itself by item id, and `calm selective --by
subject` giving a threshold per subject or naming the subjects too small."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calm_core.calibration import metrics
from calm_core.cli.commands import main
from calm_core.io import atomic_write_json
from calm_core.results import by_group
from calm_core.results.verdict import variant_label
from calm_core.runs.layout import predictions_path, write_heldout, write_predictions
from calm_core.runs.rundir import RunDir

SUBJECTS = {"algebra": 14, "law *and* order": 10, "physics": 8}  # a Markdown sign in a subject's name
VARIANTS = ("base", "calm")


class Item:
    """What write_heldout reads of an S_V item."""

    def __init__(self, item_id: str, subject: str | None) -> None:
        self.id, self.subject = item_id, subject


def _subjects() -> list[str]:
    return [name for name, n in SUBJECTS.items() for _ in range(n)]


def subject_file(folder: Path) -> Path:
    """An MMLU-style JSONL set: ids, four options, a subject column."""
    path = folder / "mmlu_style.jsonl"
    lines = [
        {"id": f"q{i}", "question": f"Question {i}?", "choices": ["a", "b", "c", "d"], "answer": i % 4, "subject": s}
        for i, s in enumerate(_subjects())
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def _probs(n: int, rng: np.random.Generator, sharp: float) -> np.ndarray:
    z = rng.normal(0.0, sharp, size=(n, 4))
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def predictions(n: int, sharp: float, seed: int) -> pd.DataFrame:
    """Per-item predictions as the final evaluation writes them: ids, probs, no subject."""
    p = _probs(n, np.random.default_rng(seed), sharp)
    return pd.DataFrame(
        {
            "id": [f"q{i}" for i in range(n)],
            "gold": np.arange(n) % 4,
            "probs": [row.tolist() for row in p],
            "prediction": p.argmax(axis=1),
            "confidence": p.max(axis=1),
        }
    )


def subject_run(folder: Path) -> tuple[RunDir, str]:
    """A hand-written finished run (tests/test_verdict.py) evaluated on the subject file."""
    from tests.test_verdict import finished_run

    run, dataset = finished_run(), str(subject_file(folder))
    data = json.loads((run.path / "results.json").read_text())
    data["results"] = [{**row, "dataset": dataset, "n": len(_subjects())} for row in data["results"]]
    atomic_write_json(run.path / "results.json", data)
    for i, row in enumerate(data["results"]):
        write_predictions(run.path, row["variant"], dataset, predictions(len(_subjects()), 1.0 + i, i))
    return run, dataset


def expected(frame: pd.DataFrame, subject: str, n_bins: int = 15) -> tuple[int, float, float]:
    """(items, accuracy, ECE) of one subject, straight from the metrics on its rows."""
    mask = np.array(_subjects()) == subject
    p, y = np.array(list(frame["probs"]))[mask], frame["gold"].to_numpy()[mask]
    return int(mask.sum()), metrics.accuracy(p, y), metrics.ece(p, y, n_bins=n_bins)


def test_the_subject_table_reads_subjects_from_the_set_by_item_id(tmp_path: Path) -> None:
    run, dataset = subject_run(tmp_path)
    frame = pd.read_parquet(predictions_path(run.path, "calm", dataset))  # in id order, as written
    row = {"variant_raw": "calm", "dataset_raw": dataset}
    table = by_group.subject_table({"calm": (run, row)})
    assert [r.group for r in table.rows] == sorted(SUBJECTS) and table.has_subjects and not table.notes
    for r in table.rows:
        assert (r.n, r.acc, r.ece) == expected(frame, r.group)
        assert r.ece_low <= r.ece <= r.ece_high
    # shuffled rows: the subjects follow the ids, not the order
    write_predictions(run.path, "calm", dataset, frame.sample(frac=1.0, random_state=0))
    again = {r.group: (r.n, r.acc, r.ece) for r in by_group.subject_table({"calm": (run, row)}).rows}
    assert again == {r.group: (r.n, r.acc, r.ece) for r in table.rows}


def test_a_set_of_one_subject_has_no_table(tmp_path: Path) -> None:
    from tests.test_verdict import DATASET, finished_run

    run = finished_run()
    frame = predictions(24, 1.0, 0).drop(columns="id")  # builtin/capitals/test: one subject
    frame["id"] = [f"capitals-test-{i:04d}" for i in range(24)]
    write_predictions(run.path, "calm", DATASET, frame)
    table = by_group.subject_table({"calm": (run, {"variant_raw": "calm", "dataset_raw": DATASET})})
    assert not table.has_subjects and table.rows == []


def shown_table(compare) -> pd.DataFrame:
    """The page's table by subject, as it reads (escaped Markdown cells unescaped)."""
    from tests.test_app_pages import _shown

    tables = [t.value for t in compare.table if "ECE [90% interval]" in t.value.columns]
    assert len(tables) == 1, "no table by subject"
    assert "law \\*and\\* order" in set(tables[0]["subject"])  # the data's text escaped for the Markdown cell
    return _shown(tables[0])


def check_numbers(shown: pd.DataFrame, run: RunDir, variants: list[str]) -> None:
    """Each shown variant's cells equal the metrics on each subject's rows of its predictions."""
    for row in json.loads((run.path / "results.json").read_text())["results"]:
        if row["variant"] not in variants:
            continue
        frame = pd.read_parquet(predictions_path(run.path, row["variant"], row["dataset"]))  # in id order
        mine = shown[shown["variant"] == variant_label(row["variant"])]
        assert len(mine) == len(SUBJECTS)
        for _, cells in mine.iterrows():
            n, acc, ece = expected(frame, cells["subject"])
            assert cells["items"] == str(n) and cells["accuracy"] == f"{acc:.3f}"
            assert cells["ECE [90% interval]"].startswith(f"{ece:.3f} [")
    assert len(shown) == len(SUBJECTS) * len(variants)


def test_compare_shows_the_per_subject_table_with_the_right_numbers(open_page, tmp_path: Path) -> None:
    run, dataset = subject_run(tmp_path)
    compare = open_page("../pages/compare/compare.py")
    assert not compare.exception and not compare.error, (compare.exception, [e.value for e in compare.error])
    assert "Calibration by subject" in [s.value for s in compare.subheader]
    variants = compare.multiselect(key="compare_variants").value
    shown = shown_table(compare)
    assert set(shown["subject"]) == set(SUBJECTS)  # "law *and* order" whole, not read as Markdown
    check_numbers(shown, run, variants)
    # new predictions (a re-evaluation): the table follows them, not a cached copy
    write_predictions(run.path, "calm", dataset, predictions(len(_subjects()), 4.0, 99))
    compare.run()
    assert "calm" in variants
    check_numbers(shown_table(compare), run, variants)


def diagram_points(chart) -> tuple[str, dict[str, list[tuple[float, float, int]]]]:
    """A subject diagram's title and, per variant trace, its (mean confidence, accuracy,
    items) markers, as Plotly holds them."""
    spec = json.loads(chart.proto.spec)
    title = spec["layout"]["title"]["text"].replace("<br>", " ")
    traces = [t for t in spec["data"] if t.get("mode") == "markers" and "customdata" in t]
    return title, {t["name"]: list(zip(t["x"], t["y"], t["customdata"], strict=True)) for t in traces}


def expected_points(run: RunDir, dataset: str, variant: str, subject: str) -> list[tuple[float, float, int]]:
    """The subject's own diagram: equal-mass bins over its items alone of one variant."""
    frame = pd.read_parquet(predictions_path(run.path, variant, dataset))
    mask = np.array(_subjects()) == subject
    confidence = frame["confidence"].to_numpy()[mask]
    correct = (frame["prediction"].to_numpy() == frame["gold"].to_numpy())[mask].astype(float)
    records = metrics.prepare_reliability(confidence, correct).to_records()
    return [(r["mean_confidence"], r["accuracy"], r["count"]) for r in records if r["count"] > 0]


def test_compare_draws_each_subjects_reliability_diagram_largest_first(open_page, tmp_path: Path) -> None:
    run, dataset = subject_run(tmp_path)
    compare = open_page("../pages/compare/compare.py")
    picker = compare.multiselect(key="compare_group_diagrams")
    assert picker.value == ["algebra", "law *and* order", "physics"]  # most items first
    variants = compare.multiselect(key="compare_variants").value
    charts = [c for c in compare.get("plotly_chart") if c.proto.id and "compare_group_diagram" in c.proto.id]
    assert len(charts) == len(SUBJECTS)
    for chart, subject in zip(charts, picker.value, strict=True):
        title, points = diagram_points(chart)
        assert title == f"{subject}: {SUBJECTS[subject]} items"
        assert set(points) == {variant_label(v) for v in variants}
        for variant in variants:
            drawn, wanted = points[variant_label(variant)], expected_points(run, dataset, variant, subject)
            assert len(drawn) == len(wanted) and np.allclose(drawn, wanted)
    picker.set_value(["physics"]).run()
    charts = [c for c in compare.get("plotly_chart") if "compare_group_diagram" in c.proto.id]
    assert [diagram_points(c)[0] for c in charts] == ["physics: 8 items"]


def test_a_subjects_title_is_escaped_for_plotly() -> None:
    from app.pages.compare.group_view import subject_title

    assert subject_title("<b>law</b> & order", 3) == "&lt;b&gt;law&lt;/b&gt; &amp; order: 3 items"


def heldout_run(tmp_path: Path, sizes: dict[str, int]) -> RunDir:
    """A finished run whose S_V files keep each item's subject."""
    run = RunDir.create(tmp_path, "20260101-000000-calm-0001", {"train": {"method": "calm", "task": "mcqa"}})
    rng = np.random.default_rng(0)
    subjects = [s for s, n in sizes.items() for _ in range(n)]
    items = [Item(f"h{i}", s) for i, s in enumerate(subjects)]
    for variant in VARIANTS:
        p = _probs(len(items), rng, 3.0)
        gold = np.array([rng.choice(4, p=row) for row in p])
        write_heldout(run.path, variant, p, gold, np.full(len(items), 4), "out of fold", items)
    atomic_write_json(run.path / "results.json", {"results": [], "recommendation": {"variant": "calm"}})
    run.write_status("finished")
    return run


def test_calm_selective_by_subject_gives_a_threshold_per_subject(tmp_path: Path, capsys) -> None:
    run = heldout_run(tmp_path, {"biology": 40, "history": 30})
    argv = ["selective", run.run_id, "--variant", "calm", "--rule", "crc", "--target-error", "0.2"]
    assert main([*argv, "--by", "subject", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    from calm_core.calibration.selective import crc_threshold
    from calm_core.results.selective import heldout_probs

    probs, gold, _ = heldout_probs(run, "calm")
    confidence, correct = probs.max(axis=1), (probs.argmax(axis=1) == gold).astype(float)
    for name, part in (("biology", slice(0, 40)), ("history", slice(40, 70))):
        t = crc_threshold(confidence[part], correct[part], 0.2)
        assert f"  {name}: threshold {t.threshold:.3f}, answers {t.heldout_answered} of {len(correct[part])}" in out
    assert "Every subject has its own threshold (2 groups)." in out


def test_calm_selective_by_subject_names_the_subjects_too_small(tmp_path: Path, capsys) -> None:
    run = heldout_run(tmp_path, {"biology": 60, "history": 12, "art": 3})
    argv = ["selective", run.run_id, "--variant", "calm", "--target-error", "0.1", "--by", "subject"]
    assert main([*argv, "--runs-root", str(tmp_path)]) == 0  # ltt at 10%, 95%: 29 items per subject
    out = capsys.readouterr().out
    assert "  art: too small, 3 held-out items of the 29 it needs" in out
    assert "  history: too small, 12 held-out items of the 29 it needs" in out
    assert "  biology: threshold " in out
    assert (
        "2 of 3 groups by subject are too small for a threshold of their own: art (3 of 29), history (12 of 29)" in out
    )


def test_a_run_without_subjects_in_its_heldout_files_is_refused_with_the_way_out(tmp_path: Path) -> None:
    run = heldout_run(tmp_path, {"biology": 40})
    path = run.path / "heldout" / "calm.parquet"
    pd.read_parquet(path).drop(columns=["subject"]).to_parquet(path)
    from calm_core.results.selective import SelectiveRequest

    with pytest.raises(ValueError, match="keep no subjects; a new run of the same settings does"):
        by_group.choose_by_group(run, SelectiveRequest("calm"))


@pytest.mark.parametrize("calibrate_on", ["heldout", "all"])
def test_a_trained_run_keeps_its_heldout_subjects_and_selective_reads_them(
    tiny_model_dir: Path, tmp_path: Path, capsys, calibrate_on: str
) -> None:
    """A tiny run with an MMLU-style S_V: every variant's heldout/ file keeps each S_V item's
    id and subject in S_V's order, and `calm selective --by subject` fits each subject."""
    from tests.test_cli_train import only_run

    path, runs = subject_file(tmp_path), tmp_path / "runs"
    flags = ["--train-data", "builtin/capitals/train", "--heldout-data", str(path), "--eval-data"]
    flags += ["builtin/capitals/test", "--train-limit", "8", "--eval-limit", "6", "--scoring", "letter"]
    flags += ["--batch-size", "2", "--set", "heldout_batch_size=2"]  # S_V: the whole subject file
    argv = ["train", "--model", str(tiny_model_dir), "--steps", "1", "--runs-root", str(runs)]
    assert main([*argv, "--calibrate-on", calibrate_on, *flags]) == 0
    run = only_run(runs)
    for variant in ("base", "calm"):
        frame = pd.read_parquet(run.path / "heldout" / f"{variant}.parquet")
        assert list(frame["id"]) == [f"q{i}" for i in range(len(_subjects()))] and list(frame["subject"]) == _subjects()
    capsys.readouterr()
    argv = ["selective", run.run_id, "--variant", "calm", "--rule", "crc", "--target-error", "0.2", "--by", "subject"]
    assert main([*argv, "--runs-root", str(runs)]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name}: threshold " in out for name in SUBJECTS), out


def test_an_s_v_without_subjects_says_so_and_how_to_map_one(tmp_path: Path) -> None:
    from calm_core.results.selective import SelectiveRequest

    run = heldout_run(tmp_path, {"": 40})  # a blank subject: none
    choice = by_group.choose_by_group(run, SelectiveRequest("calm", rule="crc"))
    assert [fit.group for fit in choice.fits] == ["(none)"] and not choice.too_small
    assert by_group.summary_line(choice).startswith("S_V's items carry no subject: its one group is the threshold")


def test_predictions_that_carry_subjects_are_read_as_they_are(tmp_path: Path) -> None:
    run, dataset = subject_run(tmp_path)
    frame = predictions(len(_subjects()), 2.0, 5).drop(columns="id")
    frame["subject"] = ["one"] * 20 + ["two"] * 12  # not the set's subjects: the frame's own win
    write_predictions(run.path, "calm", dataset, frame)
    table = by_group.subject_table({"calm": (run, {"variant_raw": "calm", "dataset_raw": dataset})})
    assert [(r.group, r.n) for r in table.rows] == [("one", 20), ("two", 12)]


def test_a_variant_on_other_items_is_left_out_with_a_note(tmp_path: Path) -> None:
    run, dataset = subject_run(tmp_path)
    write_predictions(run.path, "ts", dataset, predictions(20, 1.0, 3).drop(columns="id"))  # 20 of 32, no ids
    rows = {name: (run, {"variant_raw": name, "dataset_raw": dataset}) for name in ("calm", "ts")}
    table = by_group.subject_table(rows)
    assert {r.variant for r in table.rows} == {"calm"} and table.notes == ["ts: evaluated on other items of this set"]


def region_file(folder: Path) -> Path:
    """A CSV of the user's own: no `subject` column, a `region` column to group by."""
    regions = ["north"] * 30 + ["south"] * 30 + ["east"] * 3
    frame = pd.DataFrame(
        {
            "q": [f"Question {i}?" for i in range(len(regions))],
            "A": "a",
            "B": "b",
            "C": "c",
            "D": "d",
            "label": ["ABCD"[i % 4] for i in range(len(regions))],
            "region": regions,
        }
    )
    path = folder / "regions.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_column_mapped_to_the_group_gives_figures_per_group(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """`region` mapped to the group (`--mapping subject=region`): the split keeps it, S_V's
    files keep it, `calm selective --by subject` fits each region or names it too small, and
    `calm eval --save-preds` stores it beside each prediction for Compare's table."""
    from tests.test_cli_train import only_run

    mapping = "question=q, choices=A|B|C|D, answer=label, subject=region"
    argv = ["data", "split", str(region_file(tmp_path)), "--mapping", mapping, "--name", "regions"]
    assert main([*argv, "--sizes", "3,57,3", "--no-stratify"]) == 0
    runs = tmp_path / "runs"
    flags = ["--train-data", "split/regions/train", "--heldout-data", "split/regions/heldout", "--eval-data"]
    flags += ["split/regions/test", "--eval-limit", "3", "--scoring", "letter", "--batch-size", "2"]
    argv = ["train", "--model", str(tiny_model_dir), "--steps", "1", "--runs-root", str(runs), *flags]
    assert main([*argv, "--set", "heldout_batch_size=2"]) == 0
    run = only_run(runs)
    heldout = pd.read_parquet(run.path / "heldout" / "calm.parquet")
    counts = heldout["subject"].value_counts().to_dict()
    assert set(counts) <= {"north", "south", "east"} and sum(counts.values()) == 57
    capsys.readouterr()
    argv = ["selective", run.run_id, "--variant", "calm", "--rule", "crc", "--target-error", "0.2", "--by", "subject"]
    assert main([*argv, "--runs-root", str(runs)]) == 0
    out = capsys.readouterr().out
    for region, n in counts.items():
        assert (f"  {region}: threshold " in out) != (f"  {region}: too small, {n} held-out items" in out), out
    assert any(f"  {region}: threshold " in out for region in counts), out
    preds = tmp_path / "preds"
    argv = ["eval", "--model", str(tiny_model_dir), "--data", str(region_file(tmp_path)), "--mapping", mapping]
    assert main([*argv, "--scoring", "letter", "--save-preds", str(preds), "--quiet"]) == 0
    frame = pd.read_parquet(next(preds.rglob("*.parquet")))
    assert list(frame["subject"]) == ["north"] * 30 + ["south"] * 30 + ["east"] * 3
