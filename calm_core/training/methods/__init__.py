"""Training methods, chosen by `TrainConfig.method`. Each is one module of this package with
the same shape: NAME, USES_HEAD, DESCRIPTION, optional OPTIMIZER and FORCED_SCOPE, and
`step(ctx, train_items, heldout_items) -> dict[str, float]` (the log values). Adding a
method is adding a module here (calm_core.registry finds every module that defines NAME;
base.py holds the shared helpers and defines none)."""

from __future__ import annotations

from types import ModuleType

from calm_core.registry import discover, lookup

METHODS: dict[str, ModuleType] = discover(__name__, __path__)


def get_method(name: str) -> ModuleType:
    return lookup(METHODS, "method", name)
