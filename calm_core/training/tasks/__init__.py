"""Training tasks, chosen by `TrainConfig.task`. Each is one module of this package with the
shape `calm_core.training.context.Task` describes: NAME, ITEM_KIND, METHODS, and
lower / upper (the bilevel objectives), check_items, prefill, evaluate_now and
final_evaluation (what the loop calls). Adding a task is adding a module here
(calm_core.registry finds every module that defines NAME).
"""

from __future__ import annotations

from types import ModuleType

from calm_core.registry import discover, lookup

TASKS: dict[str, ModuleType] = discover(__name__, __path__)


def get_task(name: str) -> ModuleType:
    return lookup(TASKS, "task", name)
