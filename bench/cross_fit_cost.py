"""What the final evaluation's post-hoc fits and the recommendation's cross-fitting cost, per
calibrator and S_V size: seconds against the item-fits the time estimate counts.

    PYTHONPATH=$PWD .venv/bin/python bench/cross_fit_cost.py [--width 576] [--items 48 96 192] \
        [--json bench/results/cross_fit_cost_576.json]

Synthetic logits (4 options) and hidden states of `--width` (576: the embedded model's, 64:
the tests' tiny model's); each calibrator fitted once on all items (`fit_calibrator`, as the
final evaluation's `fit_baselines` does) and cross-fitted for the recommendation
(`cross_fitted`). The work is `PosthocCalibrator.fit_work` summed as the estimate sums it
(`calibration.recommend.cross_fit_work`); seconds per item-fit should hold across sizes if
the count is the right driver. The first fit of a process imports and warms up: it is
repeated and the first one dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(width: int, n: int, seed: int = 0) -> list[dict[str, float | int | str]]:
    """One row per calibrator that fits `n` items: its fit's and its cross-fitting's
    seconds and work."""
    from calm_core.calibration.posthoc import fit_calibrator, for_task
    from calm_core.calibration.recommend import cross_fit_work, cross_fitted

    rng = np.random.default_rng(seed)
    logits, gold = rng.normal(size=(n, 4)) * 3.0, rng.integers(0, 4, n)
    features = rng.normal(size=(n, width))
    rows: list[dict[str, float | int | str]] = []
    for name, cls in for_task("mcqa", defaults_only=False, with_features=True).items():
        if n < cls.min_items:
            continue
        began = time.perf_counter()
        fit_calibrator(cls, logits, gold, features)
        fit_s = time.perf_counter() - began
        began = time.perf_counter()
        cross_fitted(logits, gold, {name: cls}, features=features)
        cross_s = time.perf_counter() - began
        work = cls.fit_work(n) + cross_fit_work(n, {name: cls})
        total = fit_s + cross_s
        rows.append(
            {
                "calibrator": name,
                "items": n,
                "fit_s": round(fit_s, 3),
                "cross_fit_s": round(cross_s, 3),
                "work": work,
                "s_per_work": total / work if work else 0.0,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=576)
    parser.add_argument("--items", type=int, nargs="+", default=[48, 96, 192])
    parser.add_argument("--json", type=Path, default=None, help="default: bench/results/cross_fit_cost_<width>.json")
    args = parser.parse_args()
    args.json = args.json or ROOT / "bench" / "results" / f"cross_fit_cost_{args.width}.json"
    measure(args.width, 24)  # warm-up: imports and first fits, dropped
    rows = [row for n in args.items for row in measure(args.width, n)]
    lines = ["| calibrator | items | fit s | cross-fit s | item-fits | ms per item-fit |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['calibrator']} | {r['items']} | {r['fit_s']} | {r['cross_fit_s']} | {r['work']:.0f} "
        f"| {1000 * float(r['s_per_work']):.2f} |"
        for r in rows
    ]
    print("\n".join(lines))
    command = " ".join(["bench/cross_fit_cost.py", *sys.argv[1:]])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": command, "width": args.width, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
