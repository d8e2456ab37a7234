"""How much of Learn's ECE is noise? The embedded model's ECE on Learn's quiz at T = 1 and
at the fitted temperature (as Fit T puts the slider), beside the ECE a perfectly
calibrated model would show at the same confidences and size (metrics.noise_ece).

    PYTHONPATH=$PWD .venv/bin/python bench/noise_ece.py [--sets builtin/chemical_symbols/test]
        [--limit 40] [--rule cloze] [--draws 2000] [--json bench/results/noise_ece.json]

Each set is scored once by the embedded model under Learn's rule (cached as Learn's quiz
is, calm_core/scoring/score_cache.py: the default quiz is read back from set-up's cache). At each
temperature: accuracy, mean confidence, ECE (15 equal-width bins, the project's), the
noise ECE's median and the value 90% of its draws stay under, whether the ECE is within
that, the diagram's equal-mass bins for N items and how many one-item bins the 15
equal-width bins would have drawn. Prints a table and writes --json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def scores_of(dataset: str, rule: str, limit: int, seed: int) -> Any:
    """The embedded model's option scores on the set's first `limit` seeded questions."""
    from calm_core.scoring.models import EMBEDDED_NAME, embedded_model_dir, load_model
    from calm_core.scoring.score_cache import Quiz, cached_scores, quiz_items, score_quiz

    quiz = Quiz(dataset, rule, limit, seed)
    items = quiz_items(quiz)
    scores, hit = cached_scores(
        embedded_model_dir(), quiz, items, lambda todo: score_quiz(load_model(EMBEDDED_NAME), quiz, todo)
    )
    print(f"{dataset}: {len(items)} questions, {'cached' if hit else 'scored'}", file=sys.stderr)
    return scores


def row_at(scores: Any, temperature: float, draws: int) -> dict[str, Any]:
    """One temperature's figures against the noise at the same confidences."""
    from calm_core.calibration import metrics

    confidence, correct = metrics.top_label(scores.probs(temperature), scores.gold)
    ece = metrics.confidence_ece(confidence, correct, n_bins=15)
    noise = metrics.noise_ece(confidence, n_bins=15, n_draws=draws)
    uniform = metrics.prepare_reliability(confidence, correct, n_bins=15, strategy="uniform")
    return {
        "temperature": temperature,
        "n": len(confidence),
        "acc": float(correct.mean()),
        "confidence": float(confidence.mean()),
        "ece": ece,
        "noise_median": noise.median,
        "noise_upper": noise.upper,
        "within_noise": noise.within(ece),
        "diagram_bins": metrics.auto_bins(len(confidence)),
        "one_item_bins_of_15": int(uniform.hollow.sum()),
    }


def rows_for(dataset: str, rule: str, limit: int, seed: int, draws: int) -> list[dict[str, Any]]:
    """T = 1 and the fitted T (NLL on the same questions, on the slider's grid, as Learn)."""
    from app.pages.learn.temperature import on_slider
    from calm_core.calibration.posthoc import TemperatureScaler

    scores = scores_of(dataset, rule, limit, seed)
    fitted = TemperatureScaler.fit(scores.logits, scores.gold).temperature_
    rows = []
    for label, temperature in (("T = 1", 1.0), ("fitted T", on_slider(fitted))):
        rows.append({"set": dataset, "rule": rule, "at": label, **row_at(scores, temperature, draws)})
    return rows


def main() -> None:
    from calm_core.scoring.score_cache import LEARN_QUIZ

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=[LEARN_QUIZ.dataset])
    parser.add_argument("--limit", type=int, default=LEARN_QUIZ.limit, help="questions per set (Learn's default)")
    parser.add_argument("--rule", default=LEARN_QUIZ.rule)
    parser.add_argument("--seed", type=int, default=LEARN_QUIZ.seed)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/noise_ece.json")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = [r for dataset in args.sets for r in rows_for(dataset, args.rule, args.limit, args.seed, args.draws)]
    print(f"{'set':34} {'at':9} {'T':>5} {'n':>4} {'acc':>6} {'conf':>6} {'ECE':>6} {'noise med':>9} "
          f"{'noise 90%':>9} {'within':>6} {'bins':>4} {'1-item/15':>9}")
    for r in rows:
        print(f"{r['set']:34} {r['at']:9} {r['temperature']:5.2f} {r['n']:4d} {r['acc']:6.3f} {r['confidence']:6.3f} "
              f"{r['ece']:6.3f} {r['noise_median']:9.3f} {r['noise_upper']:9.3f} {str(r['within_noise']):>6} "
              f"{r['diagram_bins']:4d} {r['one_item_bins_of_15']:9d}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "rule": args.rule, "limit": args.limit, "seed": args.seed,
                                     "draws": args.draws, "seconds": round(time.perf_counter() - started, 1)},
                                    indent=2, default=lambda v: v.item() if isinstance(v, np.generic) else str(v)))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
