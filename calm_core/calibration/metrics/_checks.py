"""Validation stage shared by every metric: convert inputs once, fail with one template.

Every message reads "Expected `<name>` <requirement>, but got <value>", so a caller
can tell from the text alone which argument to change.
"""

from __future__ import annotations

import numbers

import numpy as np

ROW_SUM_TOL = 1e-4  # float32 softmax rows sum to 1 within ~1e-6; 1e-4 catches unnormalised logits


def fail(name: str, requirement: str, got: object) -> ValueError:
    """Build the one error of the package: "Expected `name` requirement, but got got"."""
    return ValueError(f"Expected `{name}` {requirement}, but got {got}")


def check_positive_int(value: object, name: str) -> int:
    """`value` as an int, or ValueError when it is not a positive int (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise fail(name, "to be a positive int", value)
    return int(value)


def check_probs(probs: object) -> np.ndarray:
    """Probabilities (N, K) as float64: non-empty, finite, in [0, 1], rows summing to 1."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise fail("probs", "to have shape (N, K)", p.shape)
    if p.size == 0:
        raise fail("probs", "to be non-empty", f"shape {p.shape}")
    if not np.all(np.isfinite(p)):
        raise fail("probs", "to be finite", p[~np.isfinite(p)][0])
    if p.min() < 0.0 or p.max() > 1.0:
        raise fail("probs", "values in [0, 1]", p.min() if p.min() < 0.0 else p.max())
    err = np.abs(p.sum(axis=1) - 1.0)  # (N,)
    if err.max() > ROW_SUM_TOL:
        row = int(err.argmax())
        raise fail(
            "probs",
            f"rows to sum to 1 (tolerance {ROW_SUM_TOL:.0e})".replace("e-0", "e-"),
            f"{p[row].sum():.6g} in row {row}",
        )
    return p


def check_labels(labels: object, n: int, k: int) -> np.ndarray:
    """Gold indices (N,) as int64, each in [0, K)."""
    y = np.asarray(labels)
    if y.shape != (n,):
        raise fail("labels", f"to have shape ({n},)", y.shape)
    if y.dtype.kind not in "iu":
        raise fail("labels", "to be integers", y.dtype)
    bad = y[(y < 0) | (y >= k)]
    if bad.size:
        raise fail("labels", "values in [0, K)", f"{bad[0]} (K = {k})")
    return y.astype(np.int64)


def check_probs_labels(probs: object, labels: object) -> tuple[np.ndarray, np.ndarray]:
    """The validation stage of every (probs, labels) metric: returns (P (N, K), y (N,))."""
    p = check_probs(probs)
    return p, check_labels(labels, *p.shape)


def check_scores(confidence: object, correct: object) -> tuple[np.ndarray, np.ndarray]:
    """Confidences and correctness (N,) as float64, both non-empty and in [0, 1]."""
    c = np.asarray(confidence, dtype=np.float64)
    a = np.asarray(correct, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise fail("confidence", "to have shape (N,) with N >= 1", c.shape)
    if a.shape != c.shape:
        raise fail("correct", f"to have shape {c.shape}", a.shape)
    for name, v in (("confidence", c), ("correct", a)):
        if not np.all((v >= 0.0) & (v <= 1.0)):  # also refuses nan
            raise fail(name, "values in [0, 1]", v[~((v >= 0.0) & (v <= 1.0))][0])
    return c, a
