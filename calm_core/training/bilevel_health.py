"""Is a run's BOME step working? One line per diagnostic chart, decided by a declared rule.

    health = bome_health(records, eta=0.5)     # records: metrics.jsonl lines
    health["lambda"].line                       # "healthy" or "watch: lambda sits at eta ..."
    RULES["inner_drop_frac"].rule               # the rule in words (the chart's tooltip, docs)

Why: the Monitor's six BOME charts (q, lambda, inner drop, coupling ratio, cos, descent
ratio) mean something only to a reader of the BOME paper. A practitioner needs to know
whether to worry, so each chart is judged by a rule over its last WINDOW logged values,
declared here once, pure over metric rows and tested (tests/test_bilevel_health.py); the
Monitor shows the lines above its diagnostics expander and each rule in its tooltip.

The rules (values: the last WINDOW finite values of `bome/<key>`, at least MIN_VALUES of them):

- any key: a logged value that is not a finite number (the step diverged) -> watch;
- q: the mean of the last values is over Q_RISE times the mean of the first ones (theta
  drifts from what it could fit on a batch);
- lambda: every last value within LAMBDA_AT_ETA of eta (the training fit is a fixed
  weight: `coupling_inert`'s test);
- inner drop: the mean under INERT_DROP_FRAC (1% of L: theta~ is theta, no coupling);
- coupling ratio: the mean under INERT_COUPLING (the head ignores the training fit);
- cos: the mean under COS_OPPOSED (the two goals mostly pull against each other);
- descent ratio: any last value under DESCENT_FLOOR (BOME's promise broken; AdamW voids it).

Fewer than MIN_VALUES values: "too early to tell". The thresholds for inertness are
this module's (INERT_DROP_FRAC, INERT_COUPLING), so this module and `calm runs`' inert
flag judge alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

INERT_DROP_FRAC = 1e-2  # an inner solve that removes under 1% of L leaves theta~ ~ theta
INERT_COUPLING = 1e-2  # ||grad_alpha q|| under 1% of ||grad_alpha F||: alpha ignores the constraint


def coupling_inert(records: Sequence[dict[str, float]], eta: float) -> bool:
    """True when a run's BOME log shows no coupling throughout: every step's inner drop
    under INERT_DROP_FRAC of L and either lambda within 5% of eta (its value when grad F
    and grad q are orthogonal) or ||grad_alpha q|| under INERT_COUPLING of ||grad_alpha F||.
    Records: metrics.jsonl lines (keys `bome/...`); runs without them are not judged."""
    steps = [r for r in records if "bome/inner_drop_frac" in r]
    if not steps:
        return False

    def inert(r: dict[str, float]) -> bool:
        lam_at_eta = abs(r.get("bome/lambda", 0.0) - eta) <= 0.05 * eta
        weak = r.get("bome/coupling_ratio", 1.0) < INERT_COUPLING
        return r["bome/inner_drop_frac"] < INERT_DROP_FRAC and (lam_at_eta or weak)

    return all(inert(r) for r in steps)


WINDOW = 10  # the last logged values each rule reads (view.bome_summary's window too)
MIN_VALUES = 3  # fewer logged steps than this: too early to tell
Q_RISE = 2.0  # q's recent mean over its early mean above this: drifting from the batch fit
LAMBDA_AT_ETA = 0.05  # lambda within 5% of eta on every recent step: not adapting
COS_OPPOSED = -0.5  # mean cos(grad F, grad q) below this: the two goals oppose
DESCENT_FLOOR = 0.99  # BOME promises >= 1; a little under 1 is rounding
HEALTHY, TOO_EARLY = "healthy", "too early to tell"

Judge = Callable[[list[float], float | None], str | None]  # (values, eta) -> why to watch, or None


@dataclass(frozen=True)
class Rule:
    """A chart's rule: `rule` says it in words (tooltip, docs), `judge` applies it to the
    last values and returns what to watch, or None when healthy."""

    key: str
    title: str
    rule: str
    judge: Judge


@dataclass(frozen=True)
class Health:
    """One chart's reading: `ok` (healthy, or too early to tell) and the line the page shows."""

    key: str
    ok: bool
    line: str


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _q(values: list[float], eta: float | None) -> str | None:
    early, late = _mean(values[:WINDOW]), _mean(values[-WINDOW:])
    if len(values) > WINDOW and early > 0 and late > Q_RISE * early:
        return f"q is rising ({early:.3g} early, {late:.3g} now): theta drifts from what it could fit on a batch"
    return None


def _lambda(values: list[float], eta: float | None) -> str | None:
    recent = values[-WINDOW:]
    if eta and all(abs(v - eta) <= LAMBDA_AT_ETA * eta for v in recent):
        return f"lambda sits at eta ({eta:g}): keeping the training fit is a fixed weight, not adapting"
    return None


def _inner_drop(values: list[float], eta: float | None) -> str | None:
    mean = _mean(values[-WINDOW:])
    if mean < INERT_DROP_FRAC:
        return (
            f"the inner solve removes {mean:.1%} of the loss: theta~ is theta, nothing ties the head to the fit; "
            "raise the inner steps or the inner step size"
        )
    return None


def _coupling(values: list[float], eta: float | None) -> str | None:
    mean = _mean(values[-WINDOW:])
    if mean < INERT_COUPLING:
        return f"coupling ratio {mean:.3g}: the head ignores the training fit and only raises entropy"
    return None


def _cos(values: list[float], eta: float | None) -> str | None:
    mean = _mean(values[-WINDOW:])
    if mean < COS_OPPOSED:
        return f"mean cos {mean:+.2f}: calibrating and keeping the fit pull against each other; lambda holds the fit"
    return None


def _descent(values: list[float], eta: float | None) -> str | None:
    low = min(values[-WINDOW:])
    if low < DESCENT_FLOOR:
        return f"descent ratio {low:.2f} < 1: a step kept less than BOME's promised decrease of q"
    return None


RULES: dict[str, Rule] = {
    rule.key: rule
    for rule in (
        Rule("q", "q", f"watch when the mean of the last {WINDOW} values is over {Q_RISE:g}x the first {WINDOW}'s", _q),
        Rule(
            "lambda",
            "lambda",
            f"watch when each of the last {WINDOW} values is within {LAMBDA_AT_ETA:.0%} of eta",
            _lambda,
        ),
        Rule(
            "inner_drop_frac",
            "inner drop",
            f"watch when the mean of the last {WINDOW} values is under {INERT_DROP_FRAC:.0%}",
            _inner_drop,
        ),
        Rule(
            "coupling_ratio",
            "coupling ratio",
            f"watch when the mean of the last {WINDOW} values is under {INERT_COUPLING:g}",
            _coupling,
        ),
        Rule("cos_fq", "cos", f"watch when the mean of the last {WINDOW} values is under {COS_OPPOSED:g}", _cos),
        Rule(
            "descent_ratio",
            "descent ratio",
            f"watch when any of the last {WINDOW} values is under {DESCENT_FLOOR:g} (BOME promises at least 1)",
            _descent,
        ),
    )
}
NOT_FINITE = "watch when any logged value is not a finite number"


def logged(records: Sequence[dict[str, Any]], key: str) -> list[Any]:
    """Every value of `bome/<key>` in the records, in step order (numbers only, nan kept)."""
    name = f"bome/{key}"
    return [r[name] for r in records if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]


def judge(key: str, values: Sequence[float], eta: float | None) -> Health:
    """One chart's Health from all its logged values (RULES[key] over the last WINDOW)."""
    values = [float(v) for v in values]
    bad = [v for v in values[-WINDOW:] if not math.isfinite(v)]
    if bad:
        return Health(key, False, f"watch: {RULES[key].title} is not a number in the last steps (the step diverged)")
    if len(values) < MIN_VALUES:
        return Health(key, True, f"{TOO_EARLY} ({len(values)} step{'s' if len(values) != 1 else ''} logged)")
    why = RULES[key].judge(values, eta)
    return Health(key, why is None, HEALTHY if why is None else f"watch: {why}")


def bome_health(records: Sequence[dict[str, Any]], eta: float | None) -> dict[str, Health]:
    """key -> Health for each diagnostic the run logged (RULES' order); {} without a BOME log."""
    found = {key: logged(records, key) for key in RULES}
    return {key: judge(key, values, eta) for key, values in found.items() if values}


def health_summary(health: dict[str, Health]) -> str:
    """One line over all charts: "all 6 healthy", "2 of 6 to watch: lambda, inner drop", or
    "too early to tell" while some chart has too few steps and none is to watch."""
    watch = [RULES[k].title for k, h in health.items() if not h.ok]
    if watch:
        return f"{len(watch)} of {len(health)} to watch: {', '.join(watch)}"
    if any(h.line.startswith(TOO_EARLY) for h in health.values()):
        return TOO_EARLY
    return f"all {len(health)} healthy"
