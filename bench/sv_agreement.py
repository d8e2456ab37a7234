"""How often does the S_V recommendation agree with the choice a large test split makes,
as S_V shrinks? The curve behind the held-out thresholds in calm_core/data/split_sizes.py.

    CALM_DATA_DIR=../shared/data .venv/bin/python bench/sv_agreement.py \\
        [--sizes 20 40 80 160] [--resamples 200] [--json bench/results/sv_agreement.json] [--limit N]

The embedded model (`--model`; tiny: tests/conftest.py's random tiny Llama, for a smoke run
whose figures mean nothing) scores each set once, with its hidden-state features (`calm eval
--save-preds DIR --features`, skipped when DIR already holds the predictions); after
that only the items are resampled. Each resample of a set (a pool of scored items)
draws a random order: the last items (the pool less the largest size) are the test
split T, the first n items are S_V, nested across the sizes. On S_V the run's own rule
picks a variant (calibration/recommend.py: the post-hoc calibrators cross-fitted on S_V,
the paired bootstrap against keeping the model as it is); on T the same rule picks among
the same candidates, each fitted on all of S_V as a run would ship it. They agree when
they pick the same variant. Also counted: how often S_V recommends a change, how often
T does, and how often S_V's change scores a higher NLL on T than keeping the model.

The candidates are base (keep the model as it is) and the post-hoc calibrators of the
mcqa task: temperature scaling and vector scaling; the adaptive temperature (ats) only
with --with-ats, since each of its fits chooses its own settings by cross-fitting and
takes minutes on a small CPU. `split_sizes.choose_threshold` turns the table into the smallest S_V size
that agrees often enough on every set; tests/test_split_sizes.py checks that
split_sizes.CHOOSE_HELDOUT is what it gives on the published JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> the catalog datasets pooled into it (a built-in set's parts are small: all three)
SETS = {
    "arc/easy_test": ("arc/easy_test",),
    "builtin/arithmetic": ("builtin/arithmetic/train", "builtin/arithmetic/validation", "builtin/arithmetic/test"),
}
# dataset -> the first N items scored (the embedded model scores about one ARC item a
# second on a busy 2-core machine; 600 leave a 440-item test split beside an S_V of 160)
LIMITS = {"arc/easy_test": 600}
DEFAULT_PREDS = Path("/tmp/calm_sv_agreement")


@dataclass
class Pool:
    """One set's scored items: base logits (N, K), gold (N,), features (N, d)."""

    logits: np.ndarray
    gold: np.ndarray
    features: np.ndarray


def score_once(preds: Path, datasets: list[str], limit: int | None = None, model: str = "embedded") -> None:
    """`calm eval` of `model` with features (first LIMITS[name] items, and at most `limit`: a
    smoke run's few) for each dataset whose predictions `preds` lacks; one process per item
    cap, so the model loads once for a built-in set's three parts (calm eval scores and
    saves each --data set on its own)."""
    missing = [name for name in datasets if not _pred_file(preds, name).is_file()]
    for cap, names in by_cap(missing, limit, LIMITS).items():
        command = [sys.executable, "-m", "calm_core.cli", "eval", "--model", model, "--data", *names]
        command += ["--save-preds", str(preds), "--features", "--quiet"]
        command += ["--limit", str(cap)] if cap is not None else []
        print("scoring:", " ".join(command), file=sys.stderr, flush=True)
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)


def by_cap(datasets: list[str], limit: int | None, limits: dict[str, int]) -> dict[int | None, list[str]]:
    """The datasets grouped by the items scored of each: the least of `limits[name]` and
    `limit` (None: all). bench/selective_guarantee.py groups its sets with it too."""
    groups: dict[int | None, list[str]] = {}
    for name in datasets:
        caps = [n for n in (limits.get(name), limit) if n is not None]
        groups.setdefault(min(caps) if caps else None, []).append(name)
    return groups


def _pred_file(preds: Path, dataset: str) -> Path:
    from calm_core.runs.layout import predictions_path

    return predictions_path(preds, "base", dataset)


def load_pool(preds: Path, datasets: tuple[str, ...]) -> Pool:
    """The base variant's saved scores of `datasets`, pooled (padded to one option count)."""
    import pandas as pd

    from calm_core.scoring.options import OptionScores, pad_ragged

    parts = [OptionScores.from_frame(pd.read_parquet(_pred_file(preds, name)), {}) for name in datasets]
    width = max(p.logits.shape[1] for p in parts)
    rows = [row for p in parts for row in p.logits]
    logits = pad_ragged([row[np.isfinite(row)] for row in rows])
    assert logits.shape[1] == width
    gold = np.concatenate([p.gold for p in parts])
    features = np.concatenate([np.asarray(p.features, dtype=np.float32) for p in parts])
    return Pool(logits, gold, features)


WITH_ATS = False  # --with-ats: one ATS fit on 160 items took 96 s here, six of them per resample and size


def candidates() -> dict[str, Any]:
    """The post-hoc calibrators of the mcqa task; the adaptive temperature (ats, which
    reads features and chooses its own by cross-fitting) only with --with-ats."""
    from calm_core.calibration.posthoc import for_task

    return {
        name: cls
        for name, cls in for_task("mcqa", defaults_only=False, with_features=True).items()
        if WITH_ATS or not cls.reads_features
    }


def heldout_choice(pool: Pool, idx: np.ndarray, seed: int) -> tuple[str | None, list[str]]:
    """What a run recommends on S_V = pool[idx] (mcqa._recommendation without a trained
    model), and the post-hoc calibrators it could score at this size (T gets the same)."""
    from calm_core.calibration import metrics
    from calm_core.calibration.recommend import IN_SAMPLE, cross_fitted, recommend

    z, y, h = pool.logits[idx], pool.gold[idx], pool.features[idx]
    posthoc, how = cross_fitted(z, y, candidates(), seed=seed, features=h)
    in_sample = list(posthoc) if how.startswith(IN_SAMPLE) else []
    picked = recommend({"base": metrics.softmax(z), **posthoc}, y, posthoc_fit=how, in_sample=in_sample).variant
    return picked, list(posthoc)


def choice_on_test(pool: Pool, fit: np.ndarray, test: np.ndarray, names: list[str]) -> tuple[str | None, dict]:
    """What the same rule picks on T among `names`, each fitted on all of S_V; and every
    variant's T NLL."""
    from calm_core.calibration import metrics
    from calm_core.calibration.posthoc import calibrated_probs, fit_calibrator
    from calm_core.calibration.recommend import recommend

    found = candidates()
    z, y, h = pool.logits[test], pool.gold[test], pool.features[test]
    probs = {"base": metrics.softmax(z)}
    for name in names:
        fitted = fit_calibrator(found[name], pool.logits[fit], pool.gold[fit], pool.features[fit])
        probs[name] = calibrated_probs(fitted, z, h)
    nll = {name: metrics.nll(p, y) for name, p in probs.items()}
    return recommend(probs, y).variant, nll


def one_resample(pool: Pool, sizes: list[int], seed: int) -> dict[int, dict[str, Any]]:
    """n -> S_V's choice, T's choice and T's NLLs, for one random order of the pool."""
    order = np.random.default_rng(seed).permutation(len(pool.gold))
    test = order[max(sizes) :]
    out = {}
    for n in sizes:
        fit = order[:n]
        picked, names = heldout_choice(pool, fit, seed)
        truth, nll = choice_on_test(pool, fit, test, names)
        out[n] = {"heldout": picked, "test": truth, "test_nll": nll}
    return out


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreement and the change rates over one (set, size)'s resamples."""
    n = len(records)
    agree = sum(r["heldout"] == r["test"] for r in records)
    changes = [r for r in records if r["heldout"] not in (None, "base")]
    worse = sum(r["test_nll"][r["heldout"]] > r["test_nll"]["base"] for r in changes)
    return {
        "resamples": n,
        "agreement": agree / n,
        "agreement_se": float(np.sqrt(max(agree * (n - agree), 1) / n**3)),
        "heldout_changes": len(changes) / n,
        "test_changes": sum(r["test"] not in (None, "base") for r in records) / n,
        "changes_worse_on_test": worse / n,
        "heldout_picks": _counts(r["heldout"] for r in records),
        "test_picks": _counts(r["test"] for r in records),
    }


def _counts(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return dict(sorted(out.items()))


def table(curve: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The Markdown table docs/results.md prints."""
    lines = [
        "| set | S_V items | T items | agreement | S_V recommends a change | T recommends a change "
        "| S_V's change worse on T | S_V picks | T picks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, by_size in curve.items():
        for n, row in by_size.items():
            lines.append(
                f"| {name} | {n} | {row['test_items']} | {row['agreement']:.2f} ± {row['agreement_se']:.2f} "
                f"| {row['heldout_changes']:.2f} | {row['test_changes']:.2f} | {row['changes_worse_on_test']:.2f} "
                f"| {_picks(row['heldout_picks'])} | {_picks(row['test_picks'])} |"
            )
    return "\n".join(lines)


def _picks(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 40, 80, 160])
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--preds", type=Path, default=DEFAULT_PREDS, help="where the scored predictions are kept")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/sv_agreement.json")
    parser.add_argument("--with-ats", action="store_true", help="also the adaptive temperature (minutes per fit)")
    parser.add_argument("--limit", type=int, help="items scored per set part (a smoke run; default: all, ARC 600)")
    parser.add_argument("--model", default="embedded", help="the scoring model; tiny: a smoke run's random tiny Llama")
    args = parser.parse_args(argv)
    global WITH_ATS
    WITH_ATS = args.with_ats

    from bench.streaming import model_or_tiny
    from calm_core.calibration.posthoc.base import one_thread
    from calm_core.data.split_sizes import AGREEMENT_TARGET, choose_threshold

    sizes = sorted(args.sizes)
    with tempfile.TemporaryDirectory(prefix="calm-sv-agreement-") as scratch:
        model = model_or_tiny(args.model, Path(scratch))
        score_once(args.preds, [d for name in args.sets for d in SETS[name]], args.limit, model)
    curve: dict[str, dict[str, dict[str, Any]]] = {}
    started = time.perf_counter()
    with one_thread():
        for name in args.sets:
            pool = load_pool(args.preds, SETS[name])
            per_size: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
            for seed in range(args.resamples):
                for n, record in one_resample(pool, sizes, seed).items():
                    per_size[n].append(record)
            curve[name] = {
                str(n): {**summarise(rs), "test_items": len(pool.gold) - max(sizes), "pool": len(pool.gold)}
                for n, rs in per_size.items()
            }
            print(f"{name}: {len(pool.gold)} items, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    threshold = choose_threshold(
        {name: {int(n): r["agreement"] for n, r in rows.items()} for name, rows in curve.items()}
    )
    result = {
        "command": "bench/sv_agreement.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": args.model,
        "sizes": sizes,
        "resamples": args.resamples,
        "candidates": ["base", *candidates()],
        "agreement_target": AGREEMENT_TARGET,
        "choose_threshold": threshold,
        "curve": curve,
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(table(curve))
    print(f"\nsmallest S_V size agreeing in >= {AGREEMENT_TARGET:.0%} of resamples on every set: {threshold}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
