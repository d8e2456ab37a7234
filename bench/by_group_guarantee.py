"""What a threshold per subject (Mondrian) buys over one threshold for all, on a simulation
where one subject is overconfident: how often each subject's own error among all its
questions stays within the target, and how much each answers.

    .venv/bin/python bench/by_group_guarantee.py [--trials 200] [--heldout 200] [--target 0.1]

Two subjects, each with confidences uniform on [0.5, 1]: "calibrated" is right with
probability c, "overconfident" with probability c - 0.3 (floored at 0). Per trial, `--heldout`
items per subject choose the thresholds (rule ltt, delta 0.05: calibration/selective.py),
and a population of 20,000 items per subject measures them. A simulation, not a model: it
shows what the per-group guarantee means, not how often real subjects differ this much.
"""

from __future__ import annotations

import argparse

import numpy as np

from calm_core.calibration.by_group import mondrian_thresholds
from calm_core.calibration.selective_answerer import SelectiveAnswerer

SUBJECTS = {"calibrated": 0.0, "overconfident": 0.3}  # how far accuracy sits below confidence
POPULATION = 20_000  # items per subject that measure a threshold's error (its population value, nearly)


def draw(n: int, gap: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(confidence (n,), correct (n,)) of one subject."""
    confidence = rng.uniform(0.5, 1.0, n)
    return confidence, (rng.uniform(size=n) < np.clip(confidence - gap, 0.0, 1.0)).astype(float)


def risk(threshold: float, confidence: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(error among all: answered and wrong, answered share) of a threshold on a population."""
    answered = confidence >= threshold
    return float(np.mean(answered & (correct == 0))), float(np.mean(answered))


def trial(args: argparse.Namespace, rng: np.random.Generator) -> dict[str, dict[str, tuple[float, float]]]:
    """One held-out draw: each subject's (error, answered) under the pooled and the Mondrian thresholds."""
    answerer = SelectiveAnswerer("ltt", target_level=args.target, confidence_level=0.95)
    held = {name: draw(args.heldout, gap, rng) for name, gap in SUBJECTS.items()}
    c = np.concatenate([held[name][0] for name in SUBJECTS])
    a = np.concatenate([held[name][1] for name in SUBJECTS])
    groups = [name for name in SUBJECTS for _ in range(args.heldout)]
    pooled = SelectiveAnswerer(**answerer.get_params()).calibrate_scores(c, a).threshold_
    per_group = {fit.group: fit.threshold.threshold for fit in mondrian_thresholds(answerer, c, a, groups)}
    out: dict[str, dict[str, tuple[float, float]]] = {"pooled": {}, "mondrian": {}}
    for name, gap in SUBJECTS.items():
        population = draw(POPULATION, gap, rng)
        out["pooled"][name] = risk(pooled, *population)
        out["mondrian"][name] = risk(per_group[name], *population)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--heldout", type=int, default=200, help="held-out items per subject")
    parser.add_argument("--target", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    results = [trial(args, rng) for _ in range(args.trials)]
    print(f"{args.trials} trials, {args.heldout} held-out items per subject, target {args.target:.0%} (ltt, 95%)")
    print("threshold  subject        within target  mean error  mean answered")
    for how in ("pooled", "mondrian"):
        for name in SUBJECTS:
            errors = np.array([r[how][name][0] for r in results])
            answered = np.array([r[how][name][1] for r in results])
            within = np.mean(errors <= args.target)
            print(f"{how:<10} {name:<14} {within:>13.1%} {errors.mean():>11.3f} {answered.mean():>14.1%}")


if __name__ == "__main__":
    main()
