"""The few directions of a wide hidden state that an input-reading calibrator uses.

    mean, projection = principal_projection(h, k=8, standardise=True)
    x = (h - mean) @ projection.T          # (N, k): unit variance on the fit rows

Both input-reading calibrators (posthoc/ats.py per question, thermometer.py per dataset)
fit a handful of weights on few labelled examples against a hidden state of hundreds of
dimensions, so each reads only its top principal components, scaled to unit variance so
that one weight decay means the same for every component. `projection` folds the
standardisation and the scaling in, so applying it needs the mean and one matrix.
"""

from __future__ import annotations

import math

import numpy as np


def principal_projection(rows: np.ndarray, k: int, standardise: bool) -> tuple[np.ndarray, np.ndarray]:
    """(mean, projection (k', H)), k' <= k the components with non-zero variance; with
    `standardise`, each column is divided by its standard deviation first (a feature's
    scale then does not decide its weight in the components)."""
    mean = rows.mean(axis=0)
    if k == 0:
        return mean, np.zeros((0, rows.shape[1]))
    scale = rows.std(axis=0) if standardise else np.ones(rows.shape[1])
    scale = np.where(scale > 1e-8, scale, 1.0)
    _, singular, vt = np.linalg.svd((rows - mean) / scale, full_matrices=False)
    k = min(k, int((singular > 1e-8 * max(singular[0], 1e-300)).sum()))
    unit = singular[:k] / math.sqrt(max(len(rows) - 1, 1))
    return mean, vt[:k] / scale[None, :] / unit[:, None]
