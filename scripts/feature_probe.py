"""Do the embedded model's hidden states know when it is right? A linear probe, per set.

    .venv/bin/python -m calm_core.training.thermometer_build --limit 80   # scores and caches the sets
    .venv/bin/python scripts/feature_probe.py                              # docs/results.md section 7

For each set scored by the thermometer build (cached under the model cache), a logistic
regression on the hidden state h (standardised, top 16 principal components, C by inner
cross-validation) predicts whether the model's answer is right. Reported per set:
accuracy, the AUROC of the model's own confidence (how well it ranks its right answers
above its wrong ones), the probe's AUROC cross-fitted within the set (5 folds), and the
probe's AUROC when trained on every *other* domain (what an input-adaptive calibrator
fitted elsewhere can carry over). An AUROC near 0.5 means h does not tell right from
wrong there, and no per-question temperature read from h can then help ranking.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegressionCV
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calm_core.calibration import metrics  # noqa: E402
from calm_core.calibration.thermometer import domain_of  # noqa: E402
from calm_core.paths import cache_dir  # noqa: E402
from calm_core.scoring.options import read_scores  # noqa: E402


def _probe() -> object:
    return make_pipeline(StandardScaler(), PCA(n_components=16, random_state=0), LogisticRegressionCV(Cs=6, cv=3))


def _auroc(correct: np.ndarray, score: np.ndarray) -> float:
    return float(roc_auc_score(correct, score)) if 0 < correct.sum() < len(correct) else float("nan")


def main() -> None:
    sets = {}
    for path in sorted((cache_dir() / "thermometer").glob("*-80.parquet")):
        scores = read_scores(path)
        name = path.name.rsplit("-", 1)[0].replace("__", "/")
        probs = metrics.softmax(scores.logits)
        correct = (probs.argmax(1) == scores.gold).astype(int)
        sets[name] = (scores.features, correct, probs.max(1))
    rows = []
    for name, (h, correct, confidence) in sets.items():
        folds = StratifiedKFold(5, shuffle=True, random_state=0)
        within = (
            cross_val_predict(_probe(), h, correct, cv=folds, method="predict_proba")[:, 1]
            if min(correct.sum(), len(correct) - correct.sum()) >= 5
            else np.full(len(correct), np.nan)
        )
        others = [k for k in sets if domain_of(k) != domain_of(name)]
        x = np.concatenate([sets[k][0] for k in others])
        y = np.concatenate([sets[k][1] for k in others])
        carried = _probe().fit(x, y).predict_proba(h)[:, 1]
        rows.append(
            {
                "set": name,
                "n": len(correct),
                "acc": float(correct.mean()),
                "auroc_confidence": _auroc(correct, confidence),
                "auroc_probe_within": _auroc(correct, within) if np.isfinite(within).all() else float("nan"),
                "auroc_probe_other_domains": _auroc(correct, carried),
            }
        )
    print("| set (n, acc) | AUROC of confidence | probe, cross-fitted in the set | probe, trained on other domains |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} ({r['n']}, {r['acc']:.2f}) | {r['auroc_confidence']:.3f} | "
            f"{r['auroc_probe_within']:.3f} | {r['auroc_probe_other_domains']:.3f} |"
        )
    out = ROOT / "docs" / "results" / "feature_probe.json"
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
