"""Scoring and evaluation: load a model (models), turn items into prompts by a recorded
rule (prompts), run the forward pass (forward, frozen_prefix) and read option logits
(options), then metrics per model variant (evaluate) and on a typed prompt (playground)."""
