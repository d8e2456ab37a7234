"""Training: the loop (loop), its config (config), the first-order bilevel step (bilevel,
substitution; bilevel_toys and bilevel_toy_tables), the methods (methods/), the losses
(objectives), LoRA adapters (adapters) and data-parallel helpers (distributed)."""
