"""What a post-hoc calibrator accepts, checked once at the boundary: (N, K) logits with
-inf padding, (N,) gold option indices, optional (N,) item weights. Every error names
what was expected and what came, in the house template; the phrases scikit-learn's
estimator checks look for ("NaN", "inf", "Reshape your data", "n_samples = 1",
"Unknown label type") are in them, so its checks read our refusals as refusals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

MIN_FIT_ITEMS = 10  # fewer and the fitted temperature is mostly noise


def check_logits(logits: Any, name: str = "logits") -> np.ndarray:
    """(N, K) float64 logits, or ValueError saying what is wrong: dense and real, a 2-D
    array (one row per item, one column per option, K >= 1), no NaN and no +inf (-inf is
    the padding of an option an item lacks), and a finite logit in every row."""
    if hasattr(logits, "toarray") or hasattr(logits, "tocsr"):  # scipy.sparse, without importing scipy
        raise TypeError(f"Expected dense `{name}`, but got a sparse {type(logits).__name__}: call .toarray() first")
    raw = np.asarray(logits)
    if np.iscomplexobj(raw):
        raise ValueError(f"Expected real `{name}`, but got {raw.dtype}: Complex data not supported")
    z = raw.astype(np.float64)
    if z.ndim != 2:
        raise ValueError(
            f"Expected `{name}` of shape (N, K), but got shape {z.shape}. Reshape your data: "
            "one row per item, one column per option"
        )
    if z.shape[1] == 0:
        raise ValueError(
            f"Expected an option column in `{name}`, but got 0 feature(s) (shape={z.shape}) "
            "while a minimum of 1 is required."
        )
    if np.isnan(z).any():
        raise ValueError(f"Expected `{name}` without NaN, but got {int(np.isnan(z).sum())} NaN values")
    if np.isposinf(z).any():
        raise ValueError(
            f"Expected `{name}` without +inf (-inf marks a missing option), but got {int(np.isposinf(z).sum())}"
        )
    empty = ~np.isfinite(z).any(axis=1)
    if empty.any():
        raise ValueError(f"Expected a finite logit in every row of `{name}`, but row {int(np.argmax(empty))} has none")
    return z


def check_labels(labels: Any, n: int, k: int) -> np.ndarray:
    """(n,) int64 gold indices in [0, k), or ValueError: y indexes the logits' columns, so
    text, fractions, NaN and inf are refused (as is a 2-D y, and no y at all)."""
    if labels is None:
        raise ValueError("A post-hoc calibrator requires y to be passed, but the target y is None")
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"Expected `labels` of shape ({n},), one gold index per row of the logits, but got {y.shape}")
    if y.dtype.kind not in "iub":
        numeric = y.dtype.kind == "f"
        if not numeric or not np.isfinite(y).all() or not np.equal(np.mod(y, 1), 0).all():
            shown = "NaN or inf" if numeric and not np.isfinite(y).all() else repr(y[:3].tolist())
            raise ValueError(
                f"Expected `labels` to be gold option indices (integers in [0, {k})), but got {shown}; "
                "Unknown label type: a calibrator's classes are the logits' columns"
            )
    gold = y.astype(np.int64)
    if n and (gold.min() < 0 or gold.max() >= k):
        raise ValueError(f"Expected `labels` in [0, {k}) (the logits' columns), but got {gold.min()}..{gold.max()}")
    return gold


def item_weights(sample_weight: Any, n: int) -> np.ndarray:
    """(n,) float64 item weights: ones for None; non-negative, finite, not all zero."""
    if sample_weight is None:
        return np.ones(n)
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise ValueError(
            f"Expected `sample_weight` of shape ({n},), finite, non-negative and not all zero, but got shape {w.shape}"
        )
    return w


def check_fit_inputs(
    logits: np.ndarray, labels: np.ndarray, min_items: int = MIN_FIT_ITEMS, what: str = "a post-hoc calibrator"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, labels) as tensors, or ValueError: the logits (`check_logits`), the labels
    (`check_labels`), then at least `min_items` items (a calibrator with a larger minimum
    says so, and why, in `what`), then a finite logit at every gold option (its probability
    would be 0 and its NLL infinite)."""
    z = check_logits(logits)
    if z.shape[1] < 2:
        raise ValueError(f"Expected at least 2 options per item to fit {what}, but got n_features = {z.shape[1]}")
    y = check_labels(labels, len(z), z.shape[1])
    if len(y) < min_items:
        raise ValueError(f"Expected at least {min_items} items to fit {what}, but got {len(y)} (n_samples = {len(y)})")
    at_gold = z[np.arange(len(y)), y]
    if not np.isfinite(at_gold).all():
        raise ValueError(
            f"Expected a finite logit at every gold option, but item {int(np.argmin(np.isfinite(at_gold)))} has -inf"
        )
    return torch.from_numpy(z), torch.from_numpy(y)
