"""The time estimate in words: what the Train page shows, one likely figure first.

    headline(estimate)        # "3.2 min": the page's metric
    range_sentence(estimate)  # the range and the share of runs it is meant to hold
    basis_sentence(estimate)  # what the range is learned from, and how it has done
    part_rows(estimate)       # the breakdown, for an expander

Why here and not on the page: the words are tested without a browser, and `calm`
could print the same lines.
"""

from __future__ import annotations

from calm_core.estimate.arithmetic import Estimate
from calm_core.estimate.error import COVER, MAX_WIDTH


def minutes(seconds: float) -> str:
    """`41 s` under two minutes, else `7.6 min`."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def span(low: float, high: float) -> str:
    return f"{minutes(low)} to {minutes(high)}"


def headline(estimate: Estimate) -> str:
    """The likely duration, alone: what a person reads first."""
    return minutes(estimate.likely)


def range_sentence(estimate: Estimate) -> str:
    """The range and what it means, in one sentence."""
    share = round(COVER * 10)
    within = span(estimate.low, estimate.high)
    return f"Likely **{minutes(estimate.likely)}**; {share} in 10 runs like this one should take {within}."


def basis_sentence(estimate: Estimate) -> str:
    """Where the range comes from: the measured default or this machine's past runs, and
    how past ranges held up, so a person can judge it."""
    spread, condition = estimate.spread, "beside other processes" if estimate.machine.busy else "on an idle machine"
    if spread.runs == 0:
        text = (
            f"No finished run here has recorded its estimate yet: the range is the one measured for runs {condition} "
            "(bench/estimate_accuracy.py), and it is learned from your runs as they finish."
        )
    else:
        plural = "s" if spread.runs > 1 else ""
        text = f"The range is learned from {spread.runs} past run{plural} {condition} on this machine."
    if spread.limited:
        text += f" Runs here have varied more than {MAX_WIDTH:g}x, so the range is cut to that width: " + (
            f"{spread.covered} of {spread.runs} past runs fall inside it." if spread.runs else "it may miss."
        )
    track = estimate.track
    if track is not None:
        text += f" {track.inside} of your {track.runs} latest runs finished inside the range shown at their launch."
    return text


def early_sentence(estimate: Estimate) -> str | None:
    """What the run takes if the calibrated stop ends it first (None when it cannot)."""
    if estimate.earliest_stop >= estimate.steps:
        return None
    return (
        f"The calibrated stop may end the run from step {estimate.earliest_stop}: then about "
        f"{minutes(estimate.early)}; with all {estimate.steps} steps it takes longer."
    )


def part_rows(estimate: Estimate) -> list[dict[str, str]]:
    """One row per part: its share of the likely duration and what it counts. Each part
    is scaled by the same learned correction, so the rows add up to the likely figure."""
    center = estimate.spread.center
    return [{"part": p.name, "likely": minutes(p.seconds * center), "what it counts": p.detail} for p in estimate.parts]


def parts_note(estimate: Estimate) -> str:
    """The expander's closing line: the steps it counts and where the rates come from."""
    return f"Steps: {estimate.steps_note()}. Rates: {estimate.source}."
