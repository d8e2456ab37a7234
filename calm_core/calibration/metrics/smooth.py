"""Smooth ECE (Błasiok & Nakkiran 2023, "Smooth ECE: Principled Reliability Diagrams
via Kernel Smoothing") of the top-label confidence, in numpy.

The discretisation follows relplot 1.0.3 (`relplot.smECE`) so the two agree to ~1e-9:
masses are split linearly onto a grid of m points, convolved with a Gaussian truncated
to |d| <= 1/2 and reflected once at 0 and at 1, and read back by linear interpolation.
"""

from __future__ import annotations

import numpy as np

from calm_core.calibration.metrics._checks import check_probs_labels
from calm_core.calibration.metrics.bins import _top_label_update

DENSITY_EPS = 1e-4  # relplot adds this to the smoothed density before dividing by it
SIGMA_FLOOR = 1e-3  # bandwidths below this count as "too small" (relplot's eps)
BISECTION_STEPS = 10  # sigma* is found on the dyadic grid k / 2**10, as relplot


def smooth_ece(probs: object, labels: object) -> float:
    """smECE at the fixed-point bandwidth sigma*, on top-label confidences.

    With c_i = max_k p_ik, r_i = c_i - 1[argmax_k p_ik = y_i] and the reflected Gaussian
    kernel K_s(t, c) on [0, 1],
        smECE_s = integral_0^1 |sum_i K_s(t, c_i) r_i| dt / integral_0^1 sum_i K_s(t, c_i) dt,
    i.e. the mean |kernel-smoothed residual| weighted by the smoothed density of the c_i.
    sigma* solves smECE_s = s (s larger -> smoother -> smaller smECE); it is found by
    bisection on (0, 1] and smECE_{sigma*} is returned. probs (N, K), labels (N,).
    Example: every item correct with confidence 1 -> all r_i = 0 -> smECE = 0; one
    item, confidence 0.9, wrong -> r = 0.9 everywhere the kernel has mass -> ~0.9.
    """
    conf, correct = _top_label_update(*check_probs_labels(probs, labels))
    return _smooth_ece_compute(conf, correct)[0]


def _smooth_ece_compute(conf: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(smECE_{sigma*}, sigma*) for confidences and correctness (N,)."""
    resid = conf - correct  # (N,)
    lo, hi = 0.0, 1.0  # invariant: smECE_lo > lo (too narrow), smECE_hi <= hi
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if mid < SIGMA_FLOOR or mid < _smece_at(conf, resid, mid):
            lo = mid
        else:
            hi = mid
    return _smece_at(conf, resid, hi), hi


def _smece_at(conf: np.ndarray, resid: np.ndarray, sigma: float) -> float:
    """smECE_sigma on a grid of T = max(round(10 / sigma), 200) points t in [0, 1]."""
    m = max(2000, round(20 / sigma)) // 2 + 1  # kernel grid points, as relplot
    smoothed = _reflected_gaussian(conf, np.stack([resid, np.ones_like(resid)]), sigma, m)
    t = np.linspace(0.0, 1.0, max(round(10 / sigma), 200))
    grid = np.linspace(0.0, 1.0, m)
    r_t, dens_t = (np.interp(t, grid, row) for row in smoothed)  # (T,) each
    # mean_t |r(t) / d(t)| * d(t) / mean_t d(t); relplot's eps enters the denominator only
    return float(np.abs(r_t).sum() / (dens_t + DENSITY_EPS).sum())


def _reflected_gaussian(x: np.ndarray, w: np.ndarray, sigma: float, m: int) -> np.ndarray:
    """sum_i w_ri K(g_j, x_i) on the grid g_j = j / (m-1), for each row r of w (R, N)."""
    pos = x * (m - 1)
    left = np.clip(pos.astype(int), 0, m - 2)  # (N,) grid cell of each point
    frac = pos - left
    mass = np.stack(
        [np.bincount(left, wr * (1 - frac), minlength=m) + np.bincount(left + 1, wr * frac, minlength=m) for wr in w]
    )  # (R, m)
    ext = np.pad(mass, ((0, 0), (m - 1, m - 1)), mode="reflect")  # (R, 3m-2): images at -x, 2-x
    d = np.linspace(0.0, 1.0, m) - 0.5  # kernel offsets, truncated at +-1/2
    ker = np.exp(-d * d / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)  # (m,)
    n_fft = ext.shape[1] + m - 1
    full = np.fft.irfft(np.fft.rfft(ext, n_fft) * np.fft.rfft(ker, n_fft), n_fft)  # (R, 4m-3)
    start = (m - 1) + m // 2  # 'valid' part starts at m-1; relplot keeps m from m//2 on
    return full[:, start : start + m]
