"""Calibration: the CALM head alpha = (l, tau) (head), post-hoc calibrators fitted on
option logits (posthoc) and every calibration metric (metrics). Knows numbers, not models."""
