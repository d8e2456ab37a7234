"""Scoring and evaluation: load a model (models) and its adapters (adapters), turn items
into prompts by a recorded rule (prompts) and into token ids that fit the model's context
(truncation), run the forward pass (forward, logprobs; frozen_prefix and arena cache the
bottom layers), read option scores (options; progress for the bar), and compute metrics
per model variant and dataset (evaluate)."""
