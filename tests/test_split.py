"""Splitting one dataset into train / held-out / test (issue 14, item 2): calm_core.data.split.

Properties of a split (disjoint parts, sizes that add up, each answer position spread
within one item of its share, the same parts for the same seed), the parts as catalog
datasets with their split.json, and `calm data split`.

    .venv/bin/python -m pytest tests/test_split.py -q
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from calm_core.cli import main
from calm_core.data.catalog import load_dataset
from calm_core.data.entries import SPLIT_PARTS, find_dataset, list_datasets, splits_dir
from calm_core.data.schema import DataError, LoadReport, MCItem, OpenItem
from calm_core.data.split import (
    _allocate,
    default_split_name,
    delete_split,
    parse_sizes,
    part_sizes,
    plan_split,
    read_split,
    save_split,
    split_dataset,
    split_record_of,
)
from calm_core.data.uploads import save_upload

SOURCE = "builtin/capitals/train"


def _items(n: int, k: int = 4, skew: float = 0.0, seed: int = 0) -> list[MCItem]:
    """n items with k options, sorted by answer; `skew` of them answer A (the rest spread)."""
    rng = random.Random(seed)
    answers = sorted(0 if rng.random() < skew else rng.randrange(k) for _ in range(n))
    return [MCItem(f"q{i:04d}", f"Q{i}?", tuple(f"o{j}" for j in range(k)), a) for i, a in enumerate(answers)]


def _check_plan(items: list[MCItem], plan, counts: tuple[int, ...]) -> None:
    """Disjoint, the requested sizes, and per answer position within 1 of the proportional share."""
    ids = [[it.id for it in plan.parts[p]] for p in SPLIT_PARTS]
    flat = [i for part in ids for i in part]
    assert len(flat) == len(set(flat)), "an item in two parts"
    assert set(flat) <= {it.id for it in items}
    assert tuple(len(part) for part in ids) == counts
    per_position = Counter(it.answer for it in items)
    for part, size in zip(SPLIT_PARTS, counts):
        got = Counter(it.answer for it in plan.parts[part])
        for position, total in per_position.items():
            share = total * size / len(items)
            assert abs(got[position] - share) < 1, (part, position, got[position], share)


# ----------------------------------------------------------------------------- sizes and allocation


def test_parse_sizes() -> None:
    assert parse_sizes("0.6,0.2,0.2") == (0.6, 0.2, 0.2)
    assert parse_sizes(" 300, 100,100 ") == (300, 100, 100)
    for bad in ("0.5,x,0.5", "0.6,0.4", "", "1,2,3,4"):
        with pytest.raises(DataError, match="Expected three sizes train,heldout,test"):
            parse_sizes(bad)


def test_part_sizes_from_fractions_add_up_and_counts_may_leave_items_out() -> None:
    assert part_sizes(103, (0.6, 0.2, 0.2)) == (62, 21, 20)
    assert part_sizes(10, (1 / 3, 1 / 3, 1 / 3)) == (4, 3, 3)
    assert sum(part_sizes(997, (0.7, 0.15, 0.15))) == 997
    assert part_sizes(103, (50, 20, 20)) == (50, 20, 20)
    with pytest.raises(DataError, match="adding up to 1"):
        part_sizes(100, (0.6, 0.3, 0.3))
    with pytest.raises(DataError, match="at most the 10 items"):
        part_sizes(10, (5, 5, 5))
    with pytest.raises(DataError, match="at least one item in every part"):
        part_sizes(4, (0.9, 0.05, 0.05))
    with pytest.raises(DataError, match="three sizes"):
        part_sizes(10, (0.5, 0.5))
    with pytest.raises(DataError, match="between 0 and 1"):
        part_sizes(10, parse_sizes("-1,1.5,0.5"))


def test_allocation_rows_columns_and_shares_against_a_naive_check() -> None:
    """Many random strata x part sizes: exact row and column sums, every count the floor or
    the ceiling of its share (Ryser's greedy never gets stuck)."""
    rng = random.Random(0)
    for _ in range(2000):
        strata = [rng.randrange(0, 30) for _ in range(rng.randrange(1, 7))]
        total = sum(strata)
        if total == 0:
            continue
        cuts = sorted(rng.randrange(total + 1) for _ in range(rng.randrange(1, 4)))
        targets = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
        counts = _allocate(strata, targets)
        assert [sum(row) for row in counts] == strata
        assert [sum(col) for col in zip(*counts)] == targets
        for size, row in zip(strata, counts):
            for target, count in zip(targets, row):
                assert size * target // total <= count <= -(-size * target // total)


# ----------------------------------------------------------------------------- plans


@pytest.mark.parametrize("n, skew", [(10, 0.0), (103, 0.0), (250, 0.7), (37, 1.0)])
def test_plan_is_disjoint_sized_and_stratified(n: int, skew: float) -> None:
    items = _items(n, skew=skew, seed=n)
    plan = plan_split(items, (0.6, 0.2, 0.2), seed=3)
    _check_plan(items, plan, part_sizes(n, (0.6, 0.2, 0.2)))


def test_counts_leave_the_rest_out_and_stay_stratified() -> None:
    items = _items(200, skew=0.5)
    plan = plan_split(items, (60, 20, 20), seed=1)
    ideal = Counter(it.answer for it in items)
    for part, size in zip(SPLIT_PARTS, (60, 20, 20)):
        got = Counter(it.answer for it in plan.parts[part])
        assert all(abs(got[k] - ideal[k] * size / 200) < 1 for k in ideal)
    assert sum(plan.sizes.values()) == 100


def test_same_seed_same_parts_whatever_the_source_order() -> None:
    items = _items(120, skew=0.3)
    first = plan_split(items, seed=7)
    again = plan_split(list(reversed(items)), seed=7)
    assert {p: [it.id for it in v] for p, v in first.parts.items()} == {p: [it.id for it in v] for p, v in again.parts.items()}
    other = plan_split(items, seed=8)
    assert [it.id for it in other.parts["test"]] != [it.id for it in first.parts["test"]]


def test_parts_are_shuffled_not_grouped_by_answer() -> None:
    """A `limit` on a part must take a fair sample, not all the A answers first."""
    part = plan_split(_items(300), seed=0).parts["train"]
    assert len({it.answer for it in part[:20]}) > 1


def test_unstratified_and_open_answer_plans() -> None:
    items = _items(50, skew=0.9)
    plan = plan_split(items, (0.5, 0.3, 0.2), seed=0, stratify=False)
    assert not plan.stratify and plan.sizes == {"train": 25, "heldout": 15, "test": 10}
    open_items = [OpenItem(f"o{i}", f"Q{i}?", ("x",)) for i in range(20)]
    plan = plan_split(open_items, seed=0)
    assert plan.kind == "open" and not plan.stratify and plan.positions() == {}
    assert plan.table("t")[0] == {"part": "train", "dataset": "split/t/train", "items": 12}


def test_plan_refuses_duplicate_ids_and_empty_sets() -> None:
    with pytest.raises(DataError, match="unique item ids"):
        plan_split([MCItem("same", "Q?", ("a", "b"), 0)] * 5)
    with pytest.raises(DataError, match="items to split"):
        plan_split([])


def test_preview_table_counts_per_answer_position() -> None:
    items = _items(40)
    rows = plan_split(items, seed=0).table("quiz")
    assert [r["part"] for r in rows] == list(SPLIT_PARTS)
    assert [r["dataset"] for r in rows] == ["split/quiz/train", "split/quiz/heldout", "split/quiz/test"]
    assert sum(r["items"] for r in rows) == 40
    assert all(r["items"] == sum(r[k] for k in "ABCD") for r in rows)


# ----------------------------------------------------------------------------- saved splits in the catalog


def test_split_dataset_saves_catalog_parts_and_a_record() -> None:
    record = split_dataset(SOURCE, seed=0)
    items = load_dataset(SOURCE).items
    assert record.names == {p: f"split/capitals-train/{p}" for p in SPLIT_PARTS}
    assert record.sizes == dict(zip(SPLIT_PARTS, part_sizes(len(items), (0.6, 0.2, 0.2))))
    assert record.n_source == len(items) and record.n_unused == 0 and record.stratify and record.seed == 0
    on_disk = json.loads(record.path.read_text())
    assert on_disk["source"] == SOURCE and on_disk["ids"] == record.ids and on_disk["sizes"] == record.sizes
    by_id = {it.id: it for it in items}
    for part, name in record.names.items():
        loaded = load_dataset(name)
        assert [it.id for it in loaded.items] == record.ids[part]
        assert [it for it in loaded.items] == [by_id[i] for i in record.ids[part]]  # the same items, unchanged
        assert find_dataset(name).n_items == record.sizes[part]
    listed = {e.name: e for e in list_datasets(kind="mc")}
    assert all(listed[name].source == "split" and "seed 0" in listed[name].description for name in record.names.values())
    assert len(load_dataset("split/capitals-train/train[0:5]").items) == 5  # slices work as for any name


def test_the_same_split_again_is_a_no_op_and_another_needs_overwrite() -> None:
    first = split_dataset(SOURCE, seed=0, out="caps")
    assert split_dataset(SOURCE, seed=0, out="caps").created == first.created
    with pytest.raises(DataError, match="split/caps already holds another split .*of builtin/capitals/train, seed 0"):
        split_dataset(SOURCE, seed=1, out="caps")
    changed = split_dataset(SOURCE, seed=1, out="caps", overwrite=True)
    assert changed.seed == 1 and read_split("split/caps/test").ids == changed.ids


def test_split_of_an_upload_and_record_lookup(tmp_path: Path) -> None:
    items = [MCItem(f"u{i}", f"Q{i}?", ("a", "b", "c"), i % 3) for i in range(30)]
    save_upload("quiz", LoadReport("quiz.csv", "mc", items), "quiz.csv")
    record = split_dataset("upload/quiz", (20, 5, 5), seed=2)
    assert record.name == "quiz" and record.sizes == {"train": 20, "heldout": 5, "test": 5}
    assert split_record_of("split/quiz/heldout[0:3]") == record
    assert split_record_of("upload/quiz") is None and split_record_of("split/nothing/train") is None
    delete_split("split/quiz")
    assert not (splits_dir() / "quiz").exists()
    with pytest.raises(DataError, match="Expected a dataset name, but got 'split/quiz/train'.*splits in"):
        load_dataset("split/quiz/train")


def test_split_names_cannot_leave_the_workspace() -> None:
    plan = plan_split(_items(10), seed=0)
    for name in ("../escape", "a/b", "/abs"):
        with pytest.raises(DataError, match="without path separators"):
            save_split(plan, name)
    assert not any(p.name == "escape" for p in splits_dir().parent.rglob("escape"))


def test_an_unreadable_record_is_listed_as_unknown_and_only_overwrite_replaces_it() -> None:
    split_dataset(SOURCE, seed=0, out="bad")
    (splits_dir() / "bad" / "split.json").write_text("{not json")
    entries = [e for e in list_datasets() if e.name.startswith("split/bad/")]
    assert [e.kind for e in entries] == ["unknown"] * 3
    with pytest.raises(DataError, match="already holds another split"):
        split_dataset(SOURCE, seed=0, out="bad")
    assert split_dataset(SOURCE, seed=0, out="bad", overwrite=True).n_source > 0


@pytest.mark.parametrize("source, name", [
    ("upload/quiz", "quiz"), ("builtin/capitals/train", "capitals-train"), ("/tmp/x/data set.csv", "data_set"),
    ("hf:allenai/ai2_arc:ARC-Easy:test", "allenai-ai2_arc-ARC-Easy-test"), ("arc/easy_test[0:100]", "arc-easy_test_0-100"),
])
def test_default_split_names(source: str, name: str) -> None:
    assert default_split_name(source) == name


# ----------------------------------------------------------------------------- `calm data split`


def test_cli_split_prints_the_three_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "split", SOURCE, "--seed", "0", "--sizes", "0.6,0.2,0.2", "--name", "cli"]) == 0
    out = capsys.readouterr().out
    for part, size in zip(SPLIT_PARTS, (62, 21, 20)):
        assert f"split/cli/{part}" in out and f"{size} items" in out
    assert read_split("cli").sizes == {"train": 62, "heldout": 21, "test": 20}
    assert main(["datasets", "--kind", "mc"]) == 0
    assert "split/cli/heldout" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "0.6,0.2"], "Expected three sizes train,heldout,test"),
    (["--sizes", "0.6,0.3,0.3"], "adding up to 1"),
    (["--sizes", "500,1,1"], "at most the 103 items"),
])
def test_cli_split_bad_sizes_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "split", SOURCE, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("calm: error: ") and message in err[0]
    assert not splits_dir().exists()


def test_cli_split_of_an_unknown_dataset_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "split", "upload/nothing"]) == 2
    assert "calm: error: Expected a dataset name" in capsys.readouterr().err


# ----------------------------------------------------------------------------- S_V big enough for a comparison (issue 23)


def test_a_heldout_part_under_min_items_is_refused_under_choose_warned_with_a_split_that_fits() -> None:
    from calm_core.data.split_sizes import (
        CHOOSE_HELDOUT,
        MIN_HELDOUT,
        NOTE,
        REFUSE,
        WARN,
        advise_split,
        heldout_support,
        suggest_percent,
    )

    assert MIN_HELDOUT == 10
    assert advise_split({"train": 300, "heldout": CHOOSE_HELDOUT, "test": 100}).level == "ok"
    small = advise_split({"train": 36, "heldout": 8, "test": 8}, requested=(0.7, 0.15, 0.15))
    assert small.level == REFUSE and small.refused and small.warned
    assert small.message.startswith("8 held-out items: too few to fit even one temperature (at least 10 needed)")
    assert "TS and the calibrated stop need held-out labels" in small.message
    assert small.suggestion == (45, 40, 15) and "Try 45 / 40 / 15 %" in small.message
    assert part_sizes(52, [p / 100 for p in small.suggestion])[1] >= MIN_HELDOUT  # the suggestion is savable
    warned = advise_split({"train": 62, "heldout": 21, "test": 20})
    assert warned.level == WARN and not warned.refused
    assert warned.message.startswith(heldout_support(21))
    assert part_sizes(103, [p / 100 for p in warned.suggestion])[1] > 21
    # The smallest heldout share that gives CHOOSE_HELDOUT items, test as asked, train the rest.
    big = suggest_percent(10 * CHOOSE_HELDOUT)
    assert big == (70, 10, 20) and part_sizes(10 * CHOOSE_HELDOUT, [p / 100 for p in big])[1] == CHOOSE_HELDOUT
    tiny = advise_split({"train": 12, "heldout": 4, "test": 4})
    assert tiny.refused and tiny.suggestion is None and "too small" in tiny.message
    best = advise_split({"train": 19, "heldout": 29, "test": 12}, (0.32, 0.48, 0.2))  # the most 60 items allow
    assert best.level == NOTE and not best.warned and best.suggestion is None


@pytest.mark.parametrize("n", range(12, 200, 7))
def test_a_suggestion_always_holds_more_heldout_items_than_the_split_it_replaces(n: int) -> None:
    from calm_core.data.split_sizes import MIN_HELDOUT, advise_split

    sizes = dict(zip(SPLIT_PARTS, part_sizes(n, (0.8, 0.1, 0.1))))
    advice = advise_split(sizes, (0.8, 0.1, 0.1))
    if advice.suggestion is not None:
        better = part_sizes(n, [p / 100 for p in advice.suggestion])
        assert sum(advice.suggestion) == 100 and better[1] > sizes["heldout"] and better[1] >= MIN_HELDOUT


def test_cli_split_refuses_a_tiny_heldout_part_and_warns_on_a_small_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "split", SOURCE, "--sizes", "0.9,0.05,0.05", "--name", "thin"]) == 2
    err = capsys.readouterr().err
    assert "5 held-out items: too few to fit even one temperature" in err and "Try " in err
    assert not splits_dir().exists()
    assert main(["data", "split", SOURCE, "--sizes", "0.6,0.2,0.2", "--name", "warned"]) == 0
    assert "warning: 21 held-out items: enough to fit one temperature, not to choose" in capsys.readouterr().err
