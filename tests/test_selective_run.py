"""Selective answering on a run directory (results/selective.py, `calm selective`): the
threshold is chosen on S_V's stored probabilities and never on an evaluation set, refusals
carry their reason, and the saved choice is what the export will read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calm_core.calibration.selective import crc_threshold, lac_quantile
from calm_core.cli.commands import main
from calm_core.io import atomic_write_json
from calm_core.runs.layout import heldout_path, write_heldout, write_predictions
from calm_core.runs.rundir import RunDir
from calm_core.results import selective as sel

SETS = ("builtin/capitals/test", "builtin/units/test")
VARIANTS = ("base", "ts", "calm")


def _probs(n: int, rng: np.random.Generator, sharp: float) -> tuple[np.ndarray, np.ndarray]:
    """n items of 3 or 4 options (ragged), gold drawn from the probabilities themselves."""
    z = rng.normal(0.0, sharp, size=(n, 4))
    z[::4, 3] = -np.inf  # every fourth item has three options
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return p, np.array([rng.choice(4, p=row) for row in p])


def make_run(root: Path | None, n_heldout: int = 60, n_test: int = 80) -> RunDir:
    """A finished calm run's files by hand: results rows, predictions and S_V probabilities."""
    run = RunDir.create(root, "20260101-000000-calm-0001", {"train": {"method": "calm", "task": "mcqa"}})
    rng = np.random.default_rng(0)
    rows = []
    for i, variant in enumerate(VARIANTS):
        p, y = _probs(n_heldout, rng, 1.0 + i)
        write_heldout(run.path, variant, p, y, (p > 0).sum(axis=1), "out of fold")
        for dataset in SETS:
            p, y = _probs(n_test, rng, 1.0 + i)
            counts = (p > 0).sum(axis=1)
            frame = pd.DataFrame(
                {
                    "probs": [row[:k].tolist() for row, k in zip(p, counts, strict=True)],
                    "gold": y,
                    "prediction": p.argmax(axis=1),
                    "confidence": p.max(axis=1),
                }
            )
            write_predictions(run.path, variant, dataset, frame)
            rows.append({"dataset": dataset, "variant": variant})
    atomic_write_json(run.path / "results.json", {"results": rows, "recommendation": {"variant": "ts"}})
    run.write_status("finished")
    return run


def add_selective_files(run: RunDir, n_heldout: int = 60) -> RunDir:
    """Give a hand-written finished run (tests/test_verdict.py) what selective answering
    reads: S_V probabilities per variant and option probabilities in its predictions."""
    rng = np.random.default_rng(1)
    for row in run.results().rows:
        p, y = _probs(n_heldout, rng, 2.0)
        write_heldout(run.path, row["variant"], p, y, (p > 0).sum(axis=1), "out of fold")
        p, y = _probs(row.get("n", 24), rng, 2.0)
        frame = pd.DataFrame(
            {
                "probs": [r[r > 0].tolist() for r in p],
                "gold": y,
                "prediction": p.argmax(axis=1),
                "confidence": p.max(axis=1),
            }
        )
        write_predictions(run.path, row["variant"], row["dataset"], frame)
    return run


def test_the_threshold_is_chosen_on_heldout_probabilities_alone(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    report = sel.selective_report(run, sel.SelectiveRequest("calm", target_error=0.2, rule="crc"))
    probs, gold, fit = sel.heldout_probs(run, "calm")
    conf, correct = np.nanmax(probs, axis=1), (np.nanargmax(probs, axis=1) == gold).astype(float)
    assert report.choices["calm"].threshold == crc_threshold(conf, correct, 0.2)
    assert report.choices["calm"].qhat == lac_quantile(probs, gold, 0.8)
    assert fit == "out of fold" and np.isnan(probs[0, 3])  # the ragged item keeps three options
    assert [(r["dataset"], r["variant"]) for r in report.rows] == [(d, v) for d in SETS for v in ("calm", "base")]
    # an evaluation set's labels cannot move the threshold: scramble them, same choice
    for dataset in SETS:
        path = run.path / "eval" / "calm" / f"{dataset.replace('/', '__')}.parquet"
        frame = pd.read_parquet(path)
        frame["gold"] = frame["gold"].sample(frac=1.0, random_state=1).to_numpy()
        frame.to_parquet(path)
    again = sel.selective_report(run, sel.SelectiveRequest("calm", target_error=0.2, rule="crc"))
    assert again.choices == report.choices


def test_sets_added_after_training_get_rows_too(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    frame = pd.read_parquet(run.path / "eval" / "calm" / "builtin__units__test.parquet")
    for variant in ("calm", "base"):
        write_predictions(run.added_dir, variant, "arc/easy_test", frame)
    run.add_results([{"dataset": "arc/easy_test", "variant": v, "added_after_training": True} for v in ("calm", "base")])
    report = sel.selective_report(run, sel.SelectiveRequest("calm", rule="crc"))
    added = [row for row in report.rows if row["dataset"] == "arc/easy_test (added)"]
    assert [row["variant"] for row in added] == ["calm", "base"] and added[0]["summary"].n == len(frame)


def test_a_small_heldout_set_is_refused_with_the_count_needed(tmp_path: Path) -> None:
    run = make_run(tmp_path, n_heldout=14)
    report = sel.selective_report(run, sel.SelectiveRequest("calm", target_error=0.05, rule="crc"))
    choice = report.choices["calm"]
    assert choice.threshold is None and "at least 19 held-out items" in choice.refusal and "got 14" in choice.refusal
    assert report.rows == [] and "no threshold" in sel.choice_line(choice)
    assert sel.selective_report(run, sel.SelectiveRequest("calm", 0.1, rule="crc")).choices["calm"].threshold
    default = sel.selective_report(run, sel.SelectiveRequest("calm", 0.1)).choices["calm"]  # ltt: 29 at 10%
    assert "at least 29 held-out items for an error among all of 10% with 95% probability" in default.refusal
    assert "on average (conformal risk control: 9 items)" in default.refusal  # the way out


def test_a_run_without_heldout_probabilities_says_why(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    heldout_path(run.path, "calm").unlink()
    with pytest.raises(ValueError, match="Expected S_V probabilities of `calm`.*stored: base, ts"):
        sel.selective_report(run, sel.SelectiveRequest("calm"))


def test_bad_requests_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"Expected `target_error` to be in \(0, 1\), but got 10"):
        sel.SelectiveRequest("calm", target_error=10)
    with pytest.raises(ValueError, match="Expected `rule` to be one of crc, ltt"):
        sel.SelectiveRequest("calm", rule="strict")


def test_calm_selective_prints_saves_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_run(tmp_path / "runs")
    out = tmp_path / "sel.json"
    code = main(["selective", run.run_id, "--runs-root", str(tmp_path / "runs"), "--json", str(out), "--save"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "variant" in printed and "error among answered" in printed and "temperature scaling" in printed
    assert "exchangeable" in printed and "at most 10%" in printed  # the guarantee and its assumption
    data = json.loads(out.read_text(), parse_constant=lambda word: pytest.fail(f"{word} is not JSON"))
    assert data["request"]["variant"] == "ts"  # the run's recommendation by default
    saved = run.selective()
    assert saved["variant"] == "ts" and saved["rule"] == "ltt" and saved["target_error"] == 0.1
    threshold = data["choices"]["ts"]["threshold"]["threshold"]
    assert saved["threshold"] == threshold and (threshold is None or 0.0 <= threshold <= 1.0)


def test_calm_selective_refusal_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    make_run(tmp_path / "runs")
    code = main(["selective", "20260101-000000-calm-0001", "--runs-root", str(tmp_path / "runs"), "--delta", "2"])
    assert code == 2 and "calm: error: Expected `delta` to be in (0, 1), but got 2.0" in capsys.readouterr().err


def test_cells_and_threshold_words() -> None:
    from calm_core.calibration.selective_summary import Estimate

    assert sel.cell(Estimate(0.4231, 0.35, 0.49, 10)) == "42% (35%-49%)"
    assert sel.cell(Estimate(1.8, 1.6, 2.0, 10), percent=False) == "1.80 (1.60-2.00)"
    assert sel.cell(Estimate(math.nan, math.nan, math.nan, 0)) == "-"


@pytest.mark.parametrize("calibrate_on", ["heldout", "all"])
def test_a_trained_run_stores_heldout_probabilities_and_calm_selective_reads_them(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture, calibrate_on: str
) -> None:
    """A tiny run's final evaluation writes every compared variant's S_V probabilities (the
    post-hoc ones out of fold); `calm selective` chooses on its 6 S_V items at 20% (4 needed)
    and refuses 10% (9 needed) with the count."""
    from tests.test_cli_train import TINY, only_run

    argv = ["train", "--model", str(tiny_model_dir), "--steps", "1", "--runs-root", str(tmp_path)]
    assert main([*argv, "--calibrate-on", calibrate_on, *TINY]) == 0
    run = only_run(tmp_path)
    stored = sel.heldout_variants(run)
    assert {"base", "calm"} <= set(stored)
    for variant in stored:
        probs, gold, fit = sel.heldout_probs(run, variant)
        assert probs.shape[0] == len(gold) == 6 and np.allclose(np.nansum(probs, axis=1), 1.0)
        expected = {"calm": "step selected on S_V", "base": "no S_V label"}
        assert fit == expected[variant] if variant in expected else fit not in expected.values()
    capsys.readouterr()
    root = ["--runs-root", str(tmp_path)]
    root += ["--variant", "calm", "--rule", "crc"]
    assert main(["selective", run.run_id, "--target-error", "0.2", *root]) == 0
    assert "builtin/capitals/test" in capsys.readouterr().out
    assert main(["selective", run.run_id, "--target-error", "0.1", *root]) == 0
    assert "at least 9 held-out items for a target error of 10% on average, but got 6" in capsys.readouterr().out


def test_compare_shows_the_threshold_its_guarantee_and_a_refusal(open_page) -> None:
    """Compare's section: a target error of 10% gives the threshold, the answered fraction and
    the error among answered with intervals beside the model as it is, the guarantee and its
    assumption; 5% on 30 S_V items is refused with the reason (59 needed); the threshold saves for export."""
    from tests.test_verdict import finished_run

    run = add_selective_files(finished_run(), n_heldout=30)
    compare = open_page("../pages/compare/compare.py")
    assert not compare.exception and not compare.error, (compare.exception, [e.value for e in compare.error])
    assert compare.number_input(key="selective_target").value == 10
    text = "\n".join(m.value for m in compare.markdown)
    assert "at most 10%" in text and "threshold" in text
    assert any("exchangeable" in c.value for c in compare.caption)
    table = next(t.value for t in compare.table if "error among answered" in t.value.columns)
    assert {"threshold", "answered", "error among all", "coverage", "set size"} <= set(table.columns)
    assert "the model as it is" in set(table["variant"]) and table["answered"].str.contains("%").all()
    compare.number_input(key="selective_target").set_value(5).run()
    assert not compare.exception
    warned = [w.value.replace("\\", "") for w in compare.warning]  # escaped Markdown, as the page shows it
    assert any("at least 59 held-out items" in w and "got 30" in w for w in warned), warned
    assert compare.number_input(key="selective_coverage").value is None  # 1 - target, as `calm selective`
    compare.number_input(key="selective_target").set_value(20).run()
    compare.button(key="selective_save").click().run()
    saved = run.selective()
    assert not compare.exception and saved["target_error"] == 0.2 and saved["coverage"] == 0.8
    assert any("Saved with the run" in s.value for s in compare.success)


def test_the_glossary_states_the_default_delta() -> None:
    """The glossary cannot import the rules (it is layer 1): its probability is checked here."""
    from calm_core import glossary
    from calm_core.calibration.selective import DEFAULT_DELTA

    assert sel.DEFAULT_RULE == "ltt"
    assert f"{1 - DEFAULT_DELTA:.0%} probability" in glossary.define("Learn then Test")
    assert f"{1 - DEFAULT_DELTA:.0%} probability" in glossary.define("target error")


def test_a_saved_threshold_goes_into_the_export_and_its_card(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`calm selective --save` for the trained variant: the folder and the merged export
    carry the threshold, its guarantee and assumption in calm_export.json and the card;
    exporting another variant (base) carries none, since the threshold was not chosen for it."""
    import json

    from calm_core.export.folder import export_run
    from tests.test_cli_train import TINY, only_run

    assert main(["train", "--model", str(tiny_model_dir), "--steps", "1", "--runs-root", str(tmp_path), *TINY]) == 0
    run = only_run(tmp_path)
    args = ["--runs-root", str(tmp_path), "--variant", "calm", "--rule", "crc", "--target-error", "0.3"]
    assert main(["selective", run.run_id, *args, "--save"]) == 0
    saved = run.selective()
    for target, merged in ((tmp_path / "folder", False), (tmp_path / "merged", True)):
        export_run(run, target, merged=merged)
        record = json.loads((target / "calm_export.json").read_text())["selective"]
        assert record["threshold"] == saved["threshold"] and record["guarantee"] == saved["guarantee"]
        card = (target / "README.md").read_text()
        assert "## Selective answering" in card and saved["assumption"] in card
    export_run(run, tmp_path / "base", variant="base")
    assert json.loads((tmp_path / "base" / "calm_export.json").read_text())["selective"] is None
    assert "## Selective answering" not in (tmp_path / "base" / "README.md").read_text()


def _report_with_errors(errors: dict[str, float], rule: str = sel.CRC) -> sel.SelectiveReport:
    """A report of one variant whose guaranteed error on each set is `errors[set]`."""
    from calm_core.calibration.selective import Threshold
    from calm_core.calibration.selective_summary import Estimate, SelectiveSummary

    def rate(value: float) -> Estimate:
        return Estimate(value, max(0.0, value - 0.1), min(1.0, value + 0.2), 14)

    request = sel.SelectiveRequest("calm", 0.10, rule)
    threshold = Threshold(rule, 0.10, None, 0.5, 28, 27, 1)
    choice = sel.Choice("calm", 28, "step selected on S_V", threshold, None)
    rows = [
        {"dataset": name, "variant": "calm", "summary": SelectiveSummary(14, rate(0.9), rate(e), rate(e), None, None)}
        for name, e in errors.items()
    ]
    return sel.SelectiveReport("r", request, {"calm": choice}, rows)


def test_a_set_above_the_target_is_named_with_why() -> None:
    note = sel.above_target_note(_report_with_errors({"small/test": 0.21, "big/test": 0.05}))
    assert note is not None and "small/test (21%" in note and "big/test" not in note
    assert "10% target" in note and "not on every set" in note
    assert sel.above_target_note(_report_with_errors({"a": 0.10, "b": 0.02})) is None  # at the target is within it


def test_fit_words_read_as_a_clause() -> None:
    assert sel.fit_words("no S_V label") == "its S_V probabilities used no S_V label"
    assert sel.fit_words("step selected on S_V") == "its S_V probabilities: step selected on S_V"
