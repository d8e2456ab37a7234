"""Result tables: the paper-shaped wide table puts each variant on one line."""

from __future__ import annotations

from calm_core.scoring.evaluate import wide_table


def test_wide_table_orders_datasets_and_variants_as_seen_and_marks_gaps() -> None:
    rows = [
        {"dataset": "id", "variant": "base", "acc": 0.5, "ece": 0.31, "ece_10": 0.3},
        {"dataset": "id", "variant": "calm", "acc": 0.49, "ece": 0.1, "ece_10": 0.09},
        {"dataset": "ood", "variant": "base", "acc": 0.25, "ece": 0.5, "ece_10": 0.49},
    ]
    lines = wide_table(rows).splitlines()
    assert lines[0] == "| variant | id acc | id ece | id ece_10 | ood acc | ood ece | ood ece_10 |"
    assert lines[2] == "| base | 0.500 | 0.310 | 0.300 | 0.250 | 0.500 | 0.490 |"
    assert lines[3] == "| calm | 0.490 | 0.100 | 0.090 | - | - | - |"
    assert wide_table(rows, ("acc",)).splitlines()[2] == "| base | 0.500 | 0.250 |"


def test_wide_table_ood_mean_averages_every_set_but_the_first() -> None:
    rows = [{"dataset": d, "variant": "v", "ece": e} for d, e in (("id", 0.9), ("a", 0.1), ("b", 0.3))]
    rows.append({"dataset": "id", "variant": "w", "ece": 0.5})
    lines = wide_table(rows, ("ece",), ood_mean=True).splitlines()
    assert lines[0].endswith("| OOD mean ece |")
    assert lines[2] == "| v | 0.900 | 0.100 | 0.300 | 0.200 |"
    assert lines[3] == "| w | 0.500 | - | - | - |"


def test_load_report_keeps_rejected_rows_and_checks_the_kind(tmp_path) -> None:
    import json

    import pytest

    from calm_core.data.schema import DataError
    from calm_core.scoring.evaluate import load_items, load_report

    rows = [{"id": "a", "question": f"Q{i}?", "choices": ["x", "y"], "answer": 0} for i in range(3)]
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = load_report(str(path), "mc")
    assert len(report.items) == 1 and [e.row for e in report.rejected] == [2, 3]
    assert load_items(str(path), "mc") == report.items
    with pytest.raises(DataError, match="Expected an open-answer dataset"):
        load_report(str(path), "open")
