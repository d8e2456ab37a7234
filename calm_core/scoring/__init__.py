"""Scoring and evaluation: load a model (models) and its adapters (adapters), turn items
into prompts by a recorded rule (prompts), run the forward pass (forward; frozen_prefix and
arena cache the bottom layers), read option scores (options), and compute metrics per model
variant and dataset (evaluate)."""
