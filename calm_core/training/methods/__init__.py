"""Training methods, chosen by `TrainConfig.method`. Each is one module of this package with
the shape `calm_core.training.context.Method` describes: NAME, USES_HEAD, DESCRIPTION and
`step(ctx, train_items, heldout_items) -> dict[str, float]` (the log values), and optionally
LABEL, OPTIMIZER, FORCED_SCOPE, Settings and step_cost. Adding a method is adding a module here
(calm_core.registry finds every module that defines NAME; base.py holds the shared helpers
and defines none); `as_method` checks it and fills in the optional parts' defaults."""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

from calm_core.registry import discover, lookup
from calm_core.training.context import Method

REQUIRED = ("NAME", "USES_HEAD", "DESCRIPTION", "step")
OPTIONAL: dict[str, Any] = {  # name -> the default `as_method` gives a module without it
    "LABEL": None,
    "OPTIMIZER": "adamw",
    "FORCED_SCOPE": None,
    "Settings": None,
    "step_cost": None,
}


def as_method(module: ModuleType) -> Method:
    """`module` as a Method: a missing required name is refused in one line naming the
    module; a missing optional one gets its default (OPTIONAL), once, here."""
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ValueError(f"Expected method module {module.__name__} to define {missing} (training/context.py Method)")
    if not callable(module.step):
        raise ValueError(f"Expected `step` of method module {module.__name__} to be a function")
    for name, default in OPTIONAL.items():
        if not hasattr(module, name):
            setattr(module, name, default)
    return cast(Method, module)


METHODS: dict[str, Method] = {name: as_method(m) for name, m in discover(__name__, __path__).items()}


def get_method(name: str) -> Method:
    return cast(Method, lookup(cast(dict[str, ModuleType], METHODS), "method", name))
