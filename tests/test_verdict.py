"""What a finished run says (calm_core.results.verdict): the selected step and why, the
recommended calibrator, why a baseline is missing, the evidence with 90% intervals.

`selection()`, `results()` and `finished_run()` build a run's files by hand (as the
trainer writes them, without training) for the page, CLI and report tests too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from calm_core.io import atomic_write_json
from calm_core.runs.layout import write_predictions
from calm_core.runs.rundir import RunDir
from calm_core.results import verdict
from calm_core.results import advice

DATASET = "builtin/capitals/test"
VARIANTS = {"base": (0.50, 0.20, 0.70, 0.72), "ts": (0.50, 0.08, 0.70, 0.55), "vs": (0.52, 0.07, 0.71, 0.56),
            "calm": (0.50, 0.06, 0.69, 0.52), "calm_theta_only": (0.50, 0.15, 0.68, 0.66)}  # acc, ece, auroc, conf



def _results(data):
    """A hand-written results.json as the record the readers take (rows default to none)."""
    from calm_core.runs.records import RunResults

    return data if isinstance(data, RunResults) else RunResults.from_json({"results": [], **data})


def selection(step: int = 4, stopped_early: int | None = 12, rule: str = "best") -> dict[str, Any]:
    """results.json's `selection` (status.json's adds reason and state)."""
    return {"rule": rule, "rule_text": f"{rule}: lowest S_V NLL ...", "selected_step": step,
            "selected": {"step": step, "score": 0.8123, "ece": 0.0712, "acc": 0.625, "n": 24, "lower": 1.05},
            "reference": {"step": 0, "score": 0.9876, "ece": 0.2, "acc": 0.625, "n": 24, "lower": 1.0},
            "stopped_early": stopped_early, "patience": 4, "lower_tolerance": 0.1}


def results(recommended: str = "calm", with_ts: bool = True) -> dict[str, Any]:
    """A results.json of an mcqa calm run: rows with 90% intervals, the selection and
    the recommendation (`with_ts=False`: ts missing, with the note the trainer writes)."""
    rows = []
    for variant, (acc, ece, auroc, conf) in VARIANTS.items():
        if variant == "ts" and not with_ts:
            continue
        rows.append({"dataset": DATASET, "variant": variant, "task": "mcqa", "n": 24, "chance": 0.25, "acc": acc, "ece": ece,
                     "ece_10": ece, "brier": 0.4, "nll": 0.9, "auroc": auroc, "aurc": 0.3, "confidence": conf,
                     "ci90": {"acc": [acc - 0.1, acc + 0.1], "ece": [ece / 2, ece * 2], "auroc": [auroc - 0.1, 0.9],
                              "confidence": [conf - 0.05, conf + 0.05]}})
    heldout = {v: {"nll": 0.9 - 0.1 * (v == recommended), "acc": 0.6, "ece": 0.1, "confidence": 0.6,
                   "kept_accuracy": True, "evidence": True} for v in ("base", "ts", "vs", "calm")}
    data = {"results": rows, "selection": selection(),
            "recommendation": {"variant": recommended, "reason": f"{recommended}: S_V NLL 0.8000 against base 0.9000",
                               "heldout": heldout, "rule": "lowest S_V NLL keeping base's accuracy",
                               "decision": "keep" if recommended == "base" else "change",
                               "comparison": comparison(recommended)}}
    data["ts"] = {"kind": "ts", "temperature": 1.5, "fit_on": "S_V"} if with_ts else \
        {"note": "no `ts` variant: S_V has 8 items, fewer than 10"}
    return data


def comparison(recommended: str) -> dict[str, Any]:
    """The recommendation's paired evidence as calibration/recommend.py writes it: 24 S_V
    items, the recommended variant's NLL lower than base's for sure, every other one tied."""
    def interval(mean: float, lo: float, hi: float) -> dict[str, float]:
        return {"mean": mean, "lo": lo, "hi": hi, "n": 24, "level": 0.9}
    others = ("ts", "vs", "calm")
    return {"score": "per-item NLL on S_V", "n": 24, "level": 0.9, "reference": "base",
            "candidates": ["base", *others],
            "against_reference": {v: interval(-0.1, -0.18, -0.03) if v == recommended else interval(0.0, -0.05, 0.05)
                                  for v in others},
            "runner_up": "base", "against_runner_up": interval(-0.1, -0.18, -0.03), "simpler": "base"}


def finished_run(root: Path | None = None, run_id: str = "20260101-000000-calm-0001", recommended: str = "calm",
                 with_ts: bool = True) -> RunDir:
    """A finished calm run's files, written by hand: config, status with `selection`,
    metrics from step 0 (eval keys only) with the lower-level probe, results.json with
    selection and recommendation, and predictions for every variant."""
    run = RunDir.create(root, run_id, {"train": {"method": "calm", "task": "mcqa", "model": "tiny", "steps": 12,
                                                 "train_data": "builtin/capitals/train", "scope": "options"}})
    rng = np.random.default_rng(0)
    steps = [0, 1, 2, 4, 6, 8, 10, 12]
    for i, step in enumerate(steps):
        record: dict[str, Any] = {"step": step, "elapsed": float(step)}
        if step:
            record.update({"train/lower_loss": 1.0 - 0.02 * step, "train/upper_loss": -1.0 - 0.01 * step})
        for name in ("heldout", DATASET):
            record.update({f"eval/{name}/acc": 0.6, f"eval/{name}/ece": 0.2 - 0.01 * i, f"eval/{name}/nll": 1.0 - 0.01 * i,
                           f"eval/{name}/entropy": 1.0, f"eval/{name}/confidence": 0.7, f"eval/{name}/auroc": 0.7,
                           f"eval/{name}/aurc": 0.3})
        record.update({"lower/st_nll": 1.0 + 0.01 * step, "select/selected_step": min(step, 4),
                       "select/eligible": step <= 10})
        run.append_metrics(record)
    data = results(recommended, with_ts)
    for row in data["results"]:
        confidence = rng.uniform(0.3, 1.0, 24)
        write_predictions(run.path, row["variant"], DATASET, pd.DataFrame(
            {"confidence": confidence, "prediction": rng.integers(0, 4, 24), "gold": rng.integers(0, 4, 24)}))
    atomic_write_json(run.path / "results.json", data)
    run.write_status("finished", step=12, total_steps=12, name="calm", method="calm",
                     selection={**selection(), "reason": "no better step for 4 evaluations", "state": {}})
    return run


def test_selection_and_recommendation_lines_say_which_step_and_which_calibrator() -> None:
    data = results()
    line = advice.selection_line(_results(data))
    assert line.startswith("The model is from step 4, selected on S_V: NLL 0.8123, ECE 0.0712, accuracy 0.625")
    assert "stopped early at step 12 (4 evaluations without a better step)" in line
    assert advice.recommendation_line(_results(data), "calm") == (
        "Use CALM: on 24 held-out items it lowers the NLL (NLL change -0.10, 90% interval -0.18 to -0.03).")
    assert advice.method_recommended(_results(data), "calm") is True
    lost = results(recommended="ts")
    assert advice.method_recommended(_results(lost), "calm") is False
    assert advice.recommendation_line(_results(lost), "calm").startswith("Use temperature scaling: on 24 held-out items")
    assert "--variant recommended" in advice.recommendation_line(_results(lost), "calm")  # it exports as a folder
    assert advice.method_recommended(_results({"results": []}), "calm") is None
    assert advice.selection_line(_results({"results": []})) is None and advice.recommendation_line(_results({"results": []}), "calm") is None


def test_the_live_selection_line_marks_and_tolerance_come_from_status() -> None:
    from calm_core.runs.selection_record import SelectionSummary

    def typed(data: dict) -> SelectionSummary:  # as status.json's record reads it
        return SelectionSummary.from_json(data)

    chosen = typed(selection())
    assert advice.selection_status_line(chosen) == ("Selected step 4 (rule `best`): S_V NLL 0.8123, ECE 0.0712, "
                                                     "accuracy 0.625; stopped early at step 12.")
    assert advice.selection_status_line(typed(selection(stopped_early=None))).endswith("accuracy 0.625.")
    assert advice.selection_status_line(None) is None
    assert advice.selection_status_line(typed({"rule": "best", "selected_step": None})) is None
    assert advice.selected_step(chosen) == 4 and advice.selected_step(None) is None
    assert advice.selected_step(typed({"selected_step": 0})) == 0  # the untouched model is a selection too
    assert advice.lower_threshold(chosen) == 1.0 * 1.1
    assert advice.lower_threshold(typed({**selection(), "reference": {"lower": None}})) is None
    assert advice.lower_threshold(None) is None


def test_evidence_rows_and_missing_variant_notes() -> None:
    data = results(with_ts=False)
    assert advice.missing_variant_notes(_results(data)) == {"ts": "no `ts` variant: S_V has 8 items, fewer than 10"}
    rows = advice.evidence_rows(_results(data), "calm")
    assert [r["variant"] for r in rows] == ["base", "vs", "calm"]  # no theta-only ablation in the evidence
    calm = rows[-1]
    assert calm["recommended"] and calm["ece"] == "0.060 [0.030, 0.120]"
    lines = advice.verdict_lines(_results(data), "calm")
    assert "No ts: no `ts` variant: S_V has 8 items, fewer than 10" in lines
    assert any(line.split()[:2] == [DATASET, "calm"] and line.split()[2] == "*" for line in lines)


def test_a_hand_written_finished_run_reads_back(tmp_path: Path) -> None:
    run = finished_run(tmp_path)
    assert run.state().state == "finished"
    assert run.results().recommended == "calm"
    assert run.read_metrics()[0]["step"] == 0 and "train/lower_loss" not in run.read_metrics()[0]


def test_an_in_sample_recommendation_says_so() -> None:
    """With too few S_V items to cross-fit, TS is fitted and scored on the same items: the
    line says so, since that flatters TS against the trained model."""
    how = "fitted and scored on the same 12 S_V items (too few to cross-fit): optimistic"
    results = {"recommendation": {"variant": "ts", "reason": "ts: S_V NLL 0.01 against calm 0.02", "posthoc_fit": how}}
    line = advice.recommendation_line(_results(results), "calm")  # a run before the paired evidence: said so
    assert line.startswith("Use temperature scaling: it has the lowest S_V NLL (ts: S_V NLL 0.01 against calm 0.02); "
                           "this run recorded no interval.") and how in line
    cross = {"recommendation": {**results["recommendation"], "posthoc_fit": "5-fold cross-fitted on S_V"}}
    assert "5-fold" not in advice.recommendation_line(_results(cross), "calm")


# ----------------------------------------------------------------------------- the verdict row (issue 23)

def _row(variant: str, acc: float, ece: float, auroc: float, confidence: float, dataset: str = DATASET) -> dict:
    return {"dataset": dataset, "variant": variant, "task": "mcqa", "n": 24, "chance": 0.25, "acc": acc, "ece": ece,
            "auroc": auroc, "confidence": confidence}


def test_the_verdict_row_names_the_best_calibrated_variant_that_keeps_accuracy_and_auroc() -> None:
    rows = verdict.verdict_rows(_results(results()))
    assert [r.dataset for r in rows] == [DATASET]
    row = rows[0]
    assert (row.best, row.best_ece, row.flags, row.recommended) == ("calm", 0.06, {}, "calm")
    assert row.cells() == {"evaluation set": DATASET, "best calibrated": "CALM (ECE 0.060)", "flags": "none",
                           "recommended on S_V": "Use CALM"}
    assert f"{DATASET}: best calibrated CALM (ECE 0.060); flags none; recommended on S_V: Use CALM" in \
        advice.verdict_lines(_results(results()), "calm")


def test_the_verdict_row_passes_over_lost_accuracy_lost_auroc_and_near_uniform_forecasts() -> None:
    base = {**_row("base", 0.50, 0.20, 0.70, 0.72), "ci90": {"auroc": [0.60, 0.80]}}
    data = {"results": [base,
                        _row("ts", 0.50, 0.08, 0.70, 0.55),
                        _row("lost", 0.45, 0.01, 0.70, 0.45),  # 0.05 below base: more than one item of 24
                        _row("kept", 0.46, 0.07, 0.70, 0.50),  # 0.04 below: one item, within the slack
                        _row("unranked", 0.50, 0.01, 0.55, 0.50),  # AUROC under base's interval
                        _row("flat", 0.50, 0.02, 0.70, 0.29)]}  # confidence ~ 1/K while acc is 0.5
    row = verdict.verdict_rows(_results(data))[0]
    assert row.best == "kept" and row.best_ece == 0.07
    assert row.flags == {"lost": (verdict.ACCURACY_LOST,), "flat": (verdict.NEAR_UNIFORM,)}
    assert row.cells()["flags"] == "lost: accuracy lost; flat: near-uniform"  # near-uniform says under-confident too
    assert row.recommended is None and row.cells()["recommended on S_V"] == "-"
    # Near chance, a low confidence is honest: no near-uniform flag when accuracy is near 1/K too.
    honest = {"results": [_row("base", 0.30, 0.02, 0.55, 0.28)]}
    assert verdict.verdict_rows(_results(honest))[0].flags == {} and verdict.verdict_rows(_results(honest))[0].best == "base"
    # Without base's interval, base's own AUROC is the floor.
    plain = {"results": [_row("base", 0.5, 0.2, 0.70, 0.7), _row("ts", 0.5, 0.1, 0.69, 0.6)]}
    assert verdict.verdict_rows(_results(plain))[0].best == "base"


def test_the_verdict_row_without_a_base_row_or_chance_says_less_not_wrong() -> None:
    data = {"results": [_row("calm", 0.5, 0.1, 0.7, 0.6, dataset="a")], "recommendation": {"variant": "calm"}}
    row = verdict.verdict_rows(_results(data))[0]
    assert (row.best, row.recommended) == (None, "calm") and row.cells()["best calibrated"] == "-"
    old = {"results": [{k: v for k, v in _row("base", 0.5, 0.01, 0.7, 0.26).items() if k != "chance"}]}
    # Runs before `chance` was recorded: no near-uniform guess; confidence 0.26 at accuracy 0.5 is under-confident.
    assert verdict.verdict_rows(_results(old))[0].flags == {"base": (verdict.UNDER_CONFIDENT,)}
    openqa = {"results": [{**_row("base", 0.9, 0.1, 0.7, 0.8), "task": "openqa", "sem_acc": 0.5},
                          {**_row("calm", 0.9, 0.05, 0.7, 0.6), "task": "openqa", "sem_acc": 0.4}]}
    assert verdict.verdict_rows(_results(openqa))[0].flags == {"calm": (verdict.ACCURACY_LOST,)}  # Sem1's accuracy counts


def test_result_rows_record_chance_for_the_near_uniform_flag() -> None:
    from calm_core.scoring.evaluate import result_row
    from calm_core.scoring.options import OptionScores

    logits = np.array([[1.0, 0.0, -np.inf, -np.inf], [0.5, 0.2, 0.1, 0.0]])  # K = 2 and K = 4
    row = result_row(OptionScores(["a", "b"], logits, np.array([0, 1]), {"rule": "cloze"}), "set", "base")
    assert row["chance"] == (0.5 + 0.25) / 2


# ----------------------------------------------------------------------------- uncertainty in words (issue 30)

def _tied_rows(against_ts: list[float], n: int = 24) -> dict[str, Any]:
    """Three variants of one set; CALM has the lowest ECE, and its `paired` record holds the
    per-item top-label Brier difference to base (clearly lower) and to TS (`against_ts`)."""
    rows = [_row("base", 0.50, 0.20, 0.70, 0.72), _row("ts", 0.50, 0.08, 0.70, 0.55),
            _row("calm", 0.50, 0.06, 0.70, 0.52)]
    for row in rows:
        row["n"] = n
    rows[2]["paired"] = {"score": "top-label Brier", "n": n, "level": 0.9,
                         "against": {"base": [-0.05, -0.08, -0.02], "ts": against_ts}}
    return {"results": rows}


def test_a_best_calibrated_variant_inside_the_noise_is_shown_as_a_tie_with_the_item_count() -> None:
    row = verdict.verdict_rows(_results(_tied_rows([-0.01, -0.03, 0.01])))[0]
    assert (row.best, [(t.variant, t.ece) for t in row.tied], row.n) == ("calm", [("ts", 0.08)], 24)
    assert row.cells()["best calibrated"].startswith(
        "tie on 24 items between CALM (ECE 0.060) and temperature scaling (ECE 0.080): ")
    clear = verdict.verdict_rows(_results(_tied_rows([-0.02, -0.04, -0.01])))[0]  # the whole interval below zero
    assert clear.tied == () and clear.cells()["best calibrated"] == "CALM (ECE 0.060)"
    few = verdict.verdict_rows(_results(_tied_rows([-0.02, -0.04, -0.01], n=8)))[0]  # too few items to call it
    assert few.cells()["best calibrated"].startswith("tie on 8 items between CALM (ECE 0.060), temperature scaling "
                                                     "(ECE 0.080) and the model as it is (ECE 0.200): ")


def test_a_tie_names_the_quantity_compared_its_difference_and_why_it_is_a_tie() -> None:
    """Issue 49: "tie on 38 items between temperature scaling (ECE 0.147) and the model as it
    is (ECE 0.400)" read as if a 0.25 ECE gap were noise; the cell now says what was tested
    (the per-item top-label Brier score, paired), the difference with its interval, and why
    that is a tie: the interval holds 0, or the items are too few to call one."""
    cell = verdict.verdict_rows(_results(_tied_rows([-0.01, -0.03, 0.01])))[0].cells()["best calibrated"]
    assert cell.endswith(": compared by per-item top-label Brier score (90% paired intervals), CALM minus "
                         "temperature scaling -0.010 [-0.030, +0.010], which holds 0; an ECE gap is not tested "
                         "itself (a binned ECE has no per-item difference)")
    few = verdict.verdict_rows(_results(_tied_rows([-0.02, -0.04, -0.01], n=8)))[0].cells()["best calibrated"]
    assert "CALM minus temperature scaling -0.020 [-0.040, -0.010]; CALM minus the model as it is -0.050 " in few
    assert few.endswith("; 8 items are too few to call any difference (under 10)")
    closer = verdict.verdict_rows(_results(_tied_rows([0.01, 0.005, 0.02])))[0].cells()["best calibrated"]
    assert "+0.010 [+0.005, +0.020], wholly above 0: by this score temperature scaling is the closer" in closer


def test_the_under_confident_flag_and_its_threshold() -> None:
    gap = verdict.UNDER_CONFIDENT_GAP
    data = {"results": [_row("base", 0.667, 0.21, 0.70, 0.80),
                        _row("calm", 0.667, 0.31, 0.70, 0.354),  # the CALM: 0.354 sure at 0.667 right
                        _row("ts", 0.667, 0.10, 0.70, 0.667 - gap + 0.01)]}  # inside the threshold
    row = verdict.verdict_rows(_results(data))[0]
    assert row.flags == {"calm": (verdict.UNDER_CONFIDENT,)}
    assert row.cells()["flags"] == "CALM: under-confident"
    assert f"more than {gap} below accuracy" in verdict.VERDICT_HELP["flags"]
    assert f"confidence more than {gap} below accuracy" in verdict.VERDICT_CAPTION


def _sentence(pick) -> str:
    return advice.recommendation_sentence(_results({"recommendation": pick.to_json()}))


def test_the_sentence_says_keep_change_tie_and_too_few_in_plain_words() -> None:
    from calm_core.calibration import metrics
    from calm_core.calibration.recommend import recommend
    from tests.test_recommend import _overconfident, _recommend_ts

    keep = _recommend_ts(24, 0)
    gain = keep.comparison.against_reference["ts"]
    assert _sentence(keep) == (
        f"Keep the model as it is: on 24 held-out items, temperature scaling's gain cannot be told from noise "
        f"(NLL change {gain.mean:+.2f}, 90% interval {gain.lo:+.2f} to {gain.hi:+.2f}).")
    worse = _recommend_ts(24, 1)
    assert _sentence(worse).startswith("Keep the model as it is: on 24 held-out items, nothing lowers its NLL "
                                       "(the closest, temperature scaling: NLL change +")
    change = _recommend_ts(400, 0)
    assert _sentence(change).startswith("Use temperature scaling: on 400 held-out items it lowers the NLL "
                                        "(NLL change -")
    logits, gold = _overconfident(n=200)
    probs = {"base": metrics.softmax(logits), "ts": metrics.softmax(logits / 4.0),
             "calm": metrics.softmax(logits / 3.7)}
    tied = _sentence(recommend(probs, gold))
    assert tied.startswith("Use temperature scaling: on 200 held-out items it lowers the NLL")
    assert tied.endswith("; it is tied with CALM (difference +0.001, 90% interval -0.005 to +0.008), and it is "
                         "the simpler of the two.")
    few = recommend({"base": probs["base"][:8], "calm": probs["calm"][:8]}, gold[:8])
    assert _sentence(few).startswith("Keep the model as it is: 8 held-out items are too few to tell any change from "
                                     "noise (CALM: NLL change -")
    alone = recommend({"base": probs["base"], "flat": np.full_like(probs["base"], 0.25)}, gold)
    assert _sentence(alone) == "Keep the model as it is: on 200 held-out items, no other variant keeps its accuracy."
    data = {"results": [_row("base", 0.5, 0.2, 0.7, 0.7)], "recommendation": keep.to_json()}
    assert verdict.verdict_rows(_results(data))[0].cells()["recommended on S_V"] == "Keep the model as it is"
    assert advice.recommendation_line(_results(data), "calm").startswith(_sentence(keep))


def test_variants_are_named_in_full() -> None:
    assert [verdict.variant_label(v) for v in ("base", "ts", "vs", "calm", "calm_theta_only", "sft", "mystery")] == [
        "the model as it is", "temperature scaling", "vector scaling", "CALM", "CALM, adapter only",
        "supervised fine-tuning", "mystery"]


def test_every_consumer_says_the_same_sentence(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """A tiny real run (`calm train` on the tiny model): its closing lines, the HTML report,
    the export's model card and the Compare / Monitor box (recommendation_line) carry the
    one sentence, word for word; the verdict row's cell is its opening words."""
    from html import escape

    from calm_core.cli import main
    from calm_core.export.folder import export_run
    from calm_core.results.report import run_report_html
    from tests.test_cli_train import TINY, only_run

    argv = ["train", "--model", str(tiny_model_dir), "--method", "calm", "--steps", "2", "--runs-root",
            str(tmp_path / "runs"), *TINY, "--heldout-limit", "12", "--set", "eval_every=2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    run = only_run(tmp_path / "runs")
    results = run.results()
    sentence = advice.recommendation_sentence(_results(results))
    assert sentence and sentence.startswith(("Keep the model as it is: ", "Use "))
    assert results.recommendation and results.recommendation.comparison and results.recommendation.comparison.n == 12  # the item count is recorded
    assert sentence in printed.splitlines()[2]  # `calm train`'s closing lines
    assert escape(sentence) in run_report_html(run)
    assert f"\n{sentence}\n" in (export_run(run, tmp_path / "export") / "README.md").read_text()
    assert advice.recommendation_line(_results(results), "calm").startswith(sentence)  # the Compare and Monitor box
    decision = verdict.recommendation_decision(_results(results))
    assert sentence.startswith(decision + ": ")
    assert {r["recommended on S_V"] for r in verdict.verdict_table(_results(results))} == {decision}
    assert all("paired" in row and row["paired"]["n"] == row["n"] for row in results.rows)


def test_a_pooled_recommendation_names_its_items_as_labelled_out_of_fold() -> None:
    """calibrate_on = all: the comparison ran on every labelled item, out of fold, and the
    sentence says so instead of "held-out items"."""
    import numpy as np

    from calm_core.calibration import metrics
    from calm_core.calibration.recommend import LABELLED_ITEMS, recommend

    rng = np.random.default_rng(0)
    gold = rng.integers(0, 4, 200)
    logits = rng.normal(size=(200, 4))
    logits[np.arange(200), gold] += 1.0
    sharp, calibrated = metrics.softmax(4 * logits), metrics.softmax(logits)  # base: four times too sharp
    rec = recommend({"base": sharp, "ts": calibrated}, gold, items=LABELLED_ITEMS).to_json()
    sentence = advice.recommendation_sentence(_results({"recommendation": rec}))
    assert sentence.startswith("Use temperature scaling: on 200 labelled items (S_T + S_V, out of fold) it lowers")


def test_keep_says_nothing_needs_exporting_and_offers_no_export_of_the_untouched_model() -> None:
    keep = results(recommended="base")
    line = advice.recommendation_line(_results(keep), "calm")
    assert line.startswith("Keep the model as it is") and verdict.keeps_model(_results(keep))
    assert "--variant recommended" not in line  # exporting the untouched model would only copy it
    assert line.endswith(advice.KEEP_NEXT) and "Nothing needs exporting" in line
    change = results(recommended="ts")
    assert not verdict.keeps_model(_results(change)) and "--variant recommended" in advice.recommendation_line(_results(change), "calm")
    assert not verdict.keeps_model(_results({"results": []}))


@pytest.mark.parametrize("recommended", ["base", "ts"])
def test_the_compare_page_offers_no_recommended_download_for_keep(open_page, tmp_path: Path, monkeypatch,
                                                                   recommended: str) -> None:
    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path))
    finished_run(None, recommended=recommended)
    at = open_page("../pages/compare/compare.py")
    assert not at.exception, at.exception
    box = " ".join(w.value for w in at.warning)
    labels = [b.proto.label for b in at.get("download_button")]
    if recommended == "base":
        assert "Nothing needs exporting" in box and "--variant recommended" not in box
        assert not [label for label in labels if label.startswith("Recommended model")], labels
    else:
        assert "--variant recommended" in box and "Recommended model: temperature scaling (zip)" in labels


def test_evidence_decided_on_all_labelled_items_says_so() -> None:
    """calibrate_on = all: the evidence's figures are every labelled item's out-of-fold
    prediction, so the table's columns and caption say that, not "S_V" (issue 30)."""
    on_sv = results(recommended="base")
    assert list(advice.heldout_rows(_results(on_sv))[0]) == list(advice.HELDOUT_COLUMNS)
    assert advice.evidence_caption(_results(on_sv)) == advice.HELDOUT_CAPTION
    pooled = _pooled(results(recommended="base"))
    rows = advice.heldout_rows(_results(pooled))
    assert list(rows[0]) == list(advice.POOLED_COLUMNS)
    assert rows[0][advice.SCORED_ON] == advice.POOLED_ITEMS == "S_T + S_V, out of fold"
    assert advice.evidence_caption(_results(pooled)).endswith(advice.POOLED_NOTE)
    assert "S_T + S_V, out of fold" in "\n".join(advice.verdict_lines(_results(pooled), "calm"))


def _pooled(data: dict[str, Any]) -> dict[str, Any]:
    """`data` as a calibrate_on = all run writes it (training/tasks/mcqa.py
    _pooled_recommendation): the decision on all labelled items, out of fold, without the
    trained model (it saw S_T), and the S_V stage with it beside base and the calibrators."""
    from calm_core.calibration.recommend import LABELLED_ITEMS

    rec = data["recommendation"]
    on_heldout = {**rec, "comparison": dict(rec["comparison"])}
    pooled_figures = {v: {**f, "nll": f["nll"] - 0.05} for v, f in rec["heldout"].items() if v != "calm"}
    against = {v: d for v, d in rec["comparison"]["against_reference"].items() if v != "calm"}
    rec.update(heldout=pooled_figures, calibrate_on="all", stages={"all labelled": {}, "S_V": on_heldout},
               comparison={**rec["comparison"], "items": LABELLED_ITEMS, "n": 70, "against_reference": against})
    return data


def test_every_trained_variant_is_in_the_evidence_under_every_calibrate_on() -> None:
    """Issue 40: with calibrate_on = all the evidence table had no CALM row. The trained
    model is compared on S_V alone; its row follows the pooled ones, with base on S_V."""
    for data in (results(recommended="base"), _pooled(results(recommended="base"))):
        labels = [row["variant"] for row in advice.heldout_rows(_results(data))]
        assert "CALM" in labels and "the model as it is" in labels, labels
    rows = advice.heldout_rows(_results(_pooled(results(recommended="base"))))
    scored = [(row["variant"], row[advice.SCORED_ON]) for row in rows]
    assert scored[-2:] == [("the model as it is", "S_V alone"), ("CALM", "S_V alone")]
    assert {label for label, on in scored if on == advice.POOLED_ITEMS} == {
        "the model as it is", "temperature scaling", "vector scaling"}
    calm = rows[-1]
    assert calm["NLL"] == "0.900" and calm[advice.HELDOUT_COLUMNS[2]] == "+0.000 [-0.050, +0.050]"
    assert calm["counted"] == "yes" and rows[0]["counted"] == "recommended"


def test_a_flagged_best_calibrated_variant_carries_its_flag_word() -> None:
    """Issue 40: Compare named the thermometer "best calibrated" on ARC-Easy while the flags
    beside it said "thermometer: under-confident"; the best cell now says the flag too."""
    data = {"results": [_row("base", 0.80, 0.20, 0.70, 0.95),
                        _row("thermometer", 0.80, 0.134, 0.70, 0.65),  # 0.15 below its accuracy
                        _row("ts", 0.80, 0.15, 0.70, 0.78)]}
    row = verdict.verdict_rows(_results(data))[0]
    assert row.best == "thermometer" and row.flags == {"thermometer": (verdict.UNDER_CONFIDENT,)}
    cells = row.cells()
    assert cells["best calibrated"] == "thermometer (ECE 0.134, under-confident)"
    assert cells["flags"] == "thermometer: under-confident"
    tied = _tied_rows([-0.01, -0.03, 0.01])
    tied["results"][1]["confidence"] = 0.35  # TS, tied with CALM, is under-confident
    assert verdict.verdict_rows(_results(tied))[0].cells()["best calibrated"].startswith(
        "tie on 24 items between CALM (ECE 0.060) and temperature scaling (ECE 0.080, under-confident): ")


def test_ats_is_spelled_out_with_its_abbreviation() -> None:
    assert verdict.variant_label("ats") == "adaptive temperature scaling (ATS)"
    assert verdict.variant_label("ts") == "temperature scaling"


def _interval(mean: float, lo: float, hi: float, n: int = 70) -> dict[str, float]:
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "level": 0.9}


def test_the_sentence_says_why_a_simpler_runner_up_was_passed_over() -> None:
    """Issue 40: "Use ATS ... tied with temperature scaling ..., and temperature scaling is
    simpler" argued against itself; the unstated reason was that TS's own interval against
    the model as it is reaches zero. The sentence now says it, after ATS's own gain."""
    comparison = {"n": 70, "level": 0.9, "reference": "base", "items": "held-out items",
                  "candidates": ["base", "ts", "ats"],
                  "against_reference": {"ats": _interval(-0.08, -0.14, -0.03), "ts": _interval(-0.06, -0.12, 0.0)},
                  "runner_up": "ts", "against_runner_up": _interval(-0.02, -0.05, 0.02), "simpler": "ts"}
    rec = {"variant": "ats", "decision": "change", "comparison": comparison}
    sentence = advice.recommendation_sentence(_results({"recommendation": rec}))
    assert sentence == (
        "Use adaptive temperature scaling (ATS): on 70 held-out items it lowers the NLL (NLL change -0.08, 90% "
        "interval -0.14 to -0.03); temperature scaling, though simpler, is not shown to lower it: its own NLL "
        "change -0.06, 90% interval -0.12 to +0.00, reaches zero; the two cannot be told apart (difference "
        "-0.02, 90% interval -0.05 to +0.02).")
    assert "is simpler." not in sentence
    # the order a reader checks: the chosen one's gain, then why the runner-up is out, then the tie
    assert sentence.index("-0.14 to -0.03") < sentence.index("reaches zero") < sentence.index("told apart")
    # a runner-up that is shown to help and tied: the old words, the chosen one being the simpler
    comparison["against_reference"]["ts"] = _interval(-0.06, -0.12, -0.01)
    rec.update(variant="ts", comparison={**comparison, "runner_up": "ats", "simpler": "ts"})
    assert advice.recommendation_sentence(_results({"recommendation": rec})).endswith(
        "; it is tied with adaptive temperature scaling (ATS) (difference -0.02, 90% interval -0.05 to +0.02), "
        "and it is the simpler of the two.")


def test_the_fitted_ats_line_spells_its_abbreviation_in_capitals() -> None:
    """Issue 40: "ats" was written as an abbreviation where a user reads it."""
    import numpy as np

    from calm_core.calibration.posthoc import calibrators
    from calm_core.results.tables import posthoc_lines

    rng = np.random.default_rng(0)
    gold, logits, features = rng.integers(0, 4, 200), rng.normal(size=(200, 4)), rng.normal(size=(200, 8))
    ats = calibrators()["ats"].fit(logits, gold, features)
    line = posthoc_lines(_results({"ats": {**ats.to_json(), "fit_on": "S"}}))[0]
    assert line.startswith("Adaptive temperature scaling (ATS): ") and "(ats)" not in line


def test_an_evaluated_calibrator_the_recommendation_could_not_compare_says_why() -> None:
    """ATS on 48 labelled items: five folds leave 38 to fit on, under its 40, so it has no
    out-of-fold figure; its row says so instead of the table dropping it in silence."""
    for data in (results(recommended="base"), _pooled(results(recommended="base"))):
        data["results"].append({**data["results"][0], "variant": "ats"})
        rows = {row["variant"]: row for row in advice.heldout_rows(_results(data))}
        assert rows["adaptive temperature scaling (ATS)"]["counted"] == advice.NOT_COMPARED
        assert rows["temperature scaling"]["counted"] == "yes"  # compared ones keep their own
    assert advice.heldout_rows(_results({"results": results()["results"]})) == []  # no recommendation: no table
