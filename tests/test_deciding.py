"""The recommendation shows its deciding comparison (issue 49).

With calibrate_on = all, the evidence table put CALM's NLL on S_V alone (1.362) beside
TS's on S_T + S_V (1.400), and the comparison that decided (TS 1.380 against CALM 1.362
on S_V, difference +0.018 [-0.039, +0.075], a tie, so the simpler one wins) was only in
results.json. Here that run's record, written by hand, is read back: the sentence Compare,
the Monitor, the report and `calm train` show says it, and the evidence table has TS
on S_V beside CALM, each row labelled with its items.
"""

from __future__ import annotations

import html
from typing import Any

from calm_core.results import advice, report
from calm_core.results.deciding import deciding_comparison
from tests.test_verdict import _pooled, _results, results


def _difference(mean: float, lo: float, hi: float, n: int = 28) -> dict[str, float]:
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "level": 0.9}


def _gemma_like(against_runner_up: dict[str, float]) -> dict[str, Any]:
    """The issue's run: the pooled stage recommends TS; on the 28 S_V items TS (1.380) and
    CALM (1.362) both beat base, and the S_V stage, CALM its runner-up, picked TS."""
    data = _pooled(results(recommended="ts"))
    stage = data["recommendation"]["stages"]["S_V"]
    stage["heldout"]["ts"]["nll"], stage["heldout"]["calm"]["nll"] = 1.380, 1.362
    stage["comparison"].update(n=28, runner_up="calm", against_runner_up=against_runner_up, simpler="ts")
    return data


def test_the_sentence_says_the_deciding_comparison_on_the_same_items() -> None:
    data = _results(_gemma_like(_difference(0.018, -0.039, 0.075)))
    expected = (
        "CALM was trained on S_T, so it was compared on the 28 S_V items alone: NLL 1.362 against temperature "
        "scaling's 1.380 on the same items; the per-item NLL difference, temperature scaling minus CALM, is +0.018 "
        "(90% interval -0.039 to +0.075), which holds 0, so these items cannot tell them apart, and the simpler "
        "one, temperature scaling, is recommended."
    )
    assert deciding_comparison(data, "calm") == expected
    line = advice.recommendation_line(data, "calm")
    assert line is not None and expected in line  # Compare, the Monitor and `calm train` show this line
    assert html.escape(expected) in report._verdict(data, "calm")  # the HTML report


def test_a_difference_beyond_the_noise_is_said_as_one() -> None:
    data = _results(_gemma_like(_difference(-0.05, -0.09, -0.01)))
    said = deciding_comparison(data, "calm")
    assert said is not None and said.endswith(
        "is -0.050 (90% interval -0.090 to -0.010), wholly below 0: temperature scaling is better on these items.")


def test_the_recommended_variant_sits_beside_the_trained_one_on_s_v() -> None:
    rows = advice.heldout_rows(_results(_gemma_like(_difference(0.018, -0.039, 0.075))))
    on_sv = {row["variant"]: row["NLL"] for row in rows if row[advice.SCORED_ON] == advice.HELDOUT_ONLY_ITEMS}
    assert on_sv == {"the model as it is": "0.900", "temperature scaling": "1.380", "CALM": "1.362"}
    assert all(row[advice.SCORED_ON] for row in rows)  # every figure labelled with the items it is on


def test_no_deciding_comparison_where_the_sentence_is_it() -> None:
    assert deciding_comparison(_results(results(recommended="ts")), "calm") is None  # decided on S_V itself
    assert deciding_comparison(_results(_pooled(results(recommended="calm"))), "calm") is None  # CALM won on S_V
