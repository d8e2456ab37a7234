"""Training: the loop (loop), its config (config), the first-order bilevel step (bilevel,
substitution; its problems with known answers are bench/bilevel_toys.py), the methods (methods/), the losses
(objectives), LoRA adapters (adapters) and data-parallel helpers (distributed)."""
