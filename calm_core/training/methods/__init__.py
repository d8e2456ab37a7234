"""Training methods, chosen by name. Each is one module with the same shape:
NAME, USES_HEAD, DESCRIPTION, optional FORCED_SCOPE, and
`step(ctx, train_items, heldout_items) -> dict[str, float]` (the log values).
Adding a method is adding a file and a line here."""

from __future__ import annotations

from types import ModuleType

from calm_core.training.methods import calm, cft, iterate, label_smoothing, regularization, scalar, sft

METHODS: dict[str, ModuleType] = {m.NAME: m for m in (calm, sft, regularization, iterate, scalar, label_smoothing, cft)}


def get_method(name: str) -> ModuleType:
    if name not in METHODS:
        raise ValueError(f"Expected `method` to be one of {sorted(METHODS)}, but got {name!r}")
    return METHODS[name]
