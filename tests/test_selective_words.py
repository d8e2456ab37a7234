"""What selective answering says is what happened (issue 49): a guarantee met by answering
(almost) nothing says so, a refusal that points to another rule says when that rule bounds
another error, the command line names `--rule crc`, and a set under its promised coverage
is told what a marginal promise means for one small set. Each sentence is read back against
the figures the library computed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calm_core.calibration.selective import Threshold, binomial_cdf, crc_threshold, marginal_low
from calm_core.calibration.selective_summary import Estimate, SelectiveSummary, wilson
from calm_core.cli.commands import main
from calm_core.results import selective as sel
from calm_core.runs.layout import write_heldout
from tests.test_selective_run import make_run


def _choice(answered: int, n: int = 28) -> sel.Choice:
    return sel.Choice("calm", n, "out of fold", Threshold("crc", 0.1, None, 0.97, n, answered, 0), 0.5)


@pytest.mark.parametrize(("answered", "said"), [
    (0, "The guarantee is met by answering none of the 28 held-out items: at this target the model never answers alone."),
    (1, "The guarantee is met by answering 1 of 28 held-out items: at this target the model answers almost nothing "
        "alone."),
    (2, "The guarantee is met by answering 2 of 28 held-out items"),
    (3, None),  # 3 of 28 is over a tenth: an ordinary threshold
])
def test_a_guarantee_met_by_answering_almost_nothing_says_so(answered: int, said: str | None) -> None:
    line = sel.choice_line(_choice(answered))
    assert f"answers {answered} of 28 held-out items (0 wrong)" in line
    if said is None:
        assert "The guarantee is met by" not in line
    else:
        assert said in line


def test_the_abstention_sentence_reads_the_runs_own_threshold(tmp_path: Path) -> None:
    """On a run's S_V of 28 items whose second most confident answer is wrong, crc at 5% is
    met by answering the most confident one alone: the sentence's counts are the chosen
    threshold's."""
    run = make_run(tmp_path, n_heldout=28)
    top = np.linspace(0.99, 0.4, 28)  # (28,) each item's confidence in option 0
    probs = np.stack([top, *(np.full(28, 0.0) + (1 - top) / 3 for _ in range(3))], axis=1)  # (28, 4)
    gold = np.zeros(28, dtype=np.int64)
    gold[1] = 1  # the second most confident item is wrong
    write_heldout(run.path, "calm", probs, gold, np.full(28, 4), "out of fold")
    report = sel.selective_report(run, sel.SelectiveRequest("calm", target_error=0.05, rule="crc"))
    chosen = crc_threshold(probs.max(axis=1), (gold == 0).astype(float), 0.05)
    assert report.choices["calm"].threshold == chosen and (chosen.heldout_answered, chosen.n_heldout) == (1, 28)
    assert "The guarantee is met by answering 1 of 28 held-out items" in sel.choice_line(report.choices["calm"])
    wider = sel.selective_report(run, sel.SelectiveRequest("calm", target_error=0.2, rule="crc")).choices["calm"]
    assert wider.threshold.heldout_answered >= 3 and "The guarantee is met by" not in sel.choice_line(wider)


def test_a_refusal_for_the_error_among_answered_says_its_way_out_bounds_another_error(tmp_path: Path) -> None:
    run = make_run(tmp_path, n_heldout=14)
    answered = sel.selective_report(run, sel.SelectiveRequest("calm", 0.1, rule="ltt-answered")).choices["calm"]
    assert "at least 29 held-out items for an error among answered of 10%" in answered.refusal
    assert ("or a guarantee on another error, the error among all questions on average (conformal risk control: "
            "9 items), where a question left unanswered counts as no error") in answered.refusal
    among_all = sel.selective_report(run, sel.SelectiveRequest("calm", 0.1, rule="ltt")).choices["calm"]
    assert "or for it on average (conformal risk control: 9 items)" in among_all.refusal  # the same error
    assert "another error" not in among_all.refusal


def test_the_cli_refusal_names_rule_crc_and_that_command_works(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = make_run(tmp_path / "runs", n_heldout=14)
    root = ["--runs-root", str(tmp_path / "runs")]
    assert main(["selective", run.run_id, *root]) == 0
    printed = capsys.readouterr().out
    way_out = next(line for line in printed.splitlines() if line.startswith("way out: "))
    assert way_out == (f"way out: calm selective {run.run_id} --variant ts --target-error 0.1 --rule crc: "
                       f"{sel.RULES['crc']}")
    command = way_out.removeprefix("way out: calm ").split(":")[0].split()
    assert main([*command, *root]) == 0  # the named command gives a threshold
    assert "no threshold" not in capsys.readouterr().out.split("S_V: ")[1].splitlines()[0]
    assert main(["selective", run.run_id, *root, "--rule", "ltt-answered"]) == 0
    changed = capsys.readouterr().out
    assert "--rule crc: " in changed and "(another error than the one asked: among all questions, not among " \
        "answered)" in changed


def _coverage_report(coverage: float, n: int = 30) -> sel.SelectiveReport:
    covered = round(coverage * n)
    summary = SelectiveSummary(n, wilson(n, n), wilson(0, n), wilson(0, n), wilson(covered, n), None)
    choice = sel.Choice("calm", 60, "out of fold", Threshold("ltt", 0.1, 0.05, 0.5, 60, 50, 3), 0.5)
    rows = [{"dataset": "private/test", "variant": "calm", "summary": summary}]
    return sel.SelectiveReport("r", sel.SelectiveRequest("calm", 0.1), {"calm": choice}, rows)


def test_a_set_under_its_promised_coverage_hears_what_a_marginal_promise_means() -> None:
    """The practitioner's private 30: 80% coverage against a promised 90%."""
    report = _coverage_report(0.8)
    note = sel.coverage_note(report)
    shown = sel.cell(report.rows[0]["summary"].coverage)
    assert note is not None and f"Under the promised 90% coverage here: private/test ({shown})." in note
    assert "not on each set" in note and "over many draws of held-out and new questions" in note
    low = marginal_low(30, 0.9)
    assert binomial_cdf(low, 30, 0.9) >= 0.1 > binomial_cdf(low - 1, 30, 0.9)  # the figure is the 10% quantile
    assert f"one set of 30 questions comes out at {low} of 30 ({low / 30:.0%}) or fewer at least one time in ten" \
        in note
    assert low == 25
    assert sel.coverage_note(_coverage_report(0.9)) is None  # at the promise: nothing to explain


def test_the_cli_prints_the_coverage_note(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    run = make_run(tmp_path / "runs")
    report = _coverage_report(0.8)
    monkeypatch.setattr(sel, "selective_report", lambda run, request: report)
    assert main(["selective", run.run_id, "--runs-root", str(tmp_path / "runs")]) == 0
    assert f"note: {sel.coverage_note(report)}" in capsys.readouterr().out


def test_marginal_low_is_the_binomial_quantile() -> None:
    for n, level in ((14, 0.9), (30, 0.95), (100, 0.8)):
        k = marginal_low(n, level)
        assert binomial_cdf(k, n, level) >= 0.1 and (k == 0 or binomial_cdf(k - 1, n, level) < 0.1)


def test_estimate_cell_of_the_note_is_the_tables() -> None:
    e = Estimate(0.8, 0.66, 0.89, 30)
    assert sel.cell(e) == "80% (66%-89%)"


@pytest.mark.parametrize("calibrate_on", [None, "heldout", "all"])
def test_a_run_calibrated_on_all_labelled_items_says_why_only_s_v_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture, calibrate_on: str | None
) -> None:
    """k-fold on S_T + S_V (calibrate_on = all): the thresholds are still chosen on S_V's 60
    items, and `calm selective` (and Compare, through the same note) says why in one sentence."""
    import json

    run = make_run(tmp_path / "runs")
    if calibrate_on is not None:
        config = json.loads((run.path / "config.json").read_text())
        config["train"]["calibrate_on"] = calibrate_on
        (run.path / "config.json").write_text(json.dumps(config))
    assert main(["selective", run.run_id, "--runs-root", str(tmp_path / "runs")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "S_T + S_V" in line]
    if calibrate_on != "all":
        assert notes == []
        return
    assert notes == [
        "note: Only the 60 S_V items choose the thresholds, though this run fitted its calibrators k-fold on "
        "S_T + S_V (calibrate_on = all): the trained model learned from S_T, so its answers there are better than "
        "on new questions, and a calibrator's out-of-fold S_T predictions come from the fold fits, not the "
        "exported one, so neither keeps the guarantee exact, and every variant is chosen on the same items."
    ]
    report = sel.selective_report(run, sel.SelectiveRequest("ts"))
    assert sel.sv_only_note(report) == notes[0].removeprefix("note: ")
