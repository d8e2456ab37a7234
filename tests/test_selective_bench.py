"""bench/selective_guarantee.py: its split and tally on synthetic scores, and the table in
docs/selective.md is the one its published JSON gives (a number in the docs comes from the
command the docs name)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import selective_guarantee as bench  # noqa: E402


def calibrated_pool(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """4-option probabilities with gold drawn from them: a calibrated forecaster."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.0, size=(n, 4))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return p, np.array([rng.choice(4, p=row) for row in p])


def test_the_high_probability_rules_hold_on_most_splits_of_a_calibrated_forecaster() -> None:
    probs, gold = calibrated_pool(600, 0)
    records = [bench.one_split(probs, gold, 100, 500, 0.1, seed) for seed in range(60)]
    tally = bench.summarise(records, 0.1)
    assert tally["ltt"]["within_target"] >= 0.8 and tally["ltt"]["mean_answered"] > 0.2
    assert tally["ltt-answered"]["within_target"] >= 0.8
    assert tally["crc"]["mean_error"] <= 0.1 + 0.01  # on average, not split by split
    assert tally["crc"]["mean_answered"] > tally["ltt"]["mean_answered"]  # the weaker promise answers more
    assert 0.85 <= tally["lac"]["mean_coverage"] <= 0.97


def test_held_out_and_test_sizes() -> None:
    assert bench.sizes("arc/easy_test", 600) == (100, 500)
    assert bench.sizes("builtin/arithmetic", 600) == (100, 500)
    assert bench.sizes("builtin/capitals", 172) == (86, 86)


def test_the_docs_table_is_the_published_benchmark() -> None:
    published = json.loads((ROOT / "bench/results/selective_guarantee.json").read_text())
    docs = (ROOT / "docs/selective.md").read_text()
    assert bench.table(published["results"], published["target"]) in docs
    assert published["splits"] == 200 and set(published["results"]) == set(bench.SETS)
