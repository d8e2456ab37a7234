"""Registries by discovery: every module of a package that defines NAME is an entry.

Methods (training/methods/), tasks (training/tasks/) and post-hoc calibrators are found
this way, so adding one is adding a module: no list to edit elsewhere.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType


def discover(package: str, path: Iterable[str]) -> dict[str, ModuleType]:
    """{module.NAME: module} for the modules of `package` (its `__path__`), by module name."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda i: i.name):
        module = importlib.import_module(f"{package}.{info.name}")
        name = getattr(module, "NAME", None)
        if name is None:
            continue
        if name in found:
            raise ValueError(f"Two modules of {package} are named {name!r}: {found[name].__name__}, {module.__name__}")
        found[name] = module
    return found


def lookup(registry: dict[str, ModuleType], kind: str, name: str) -> ModuleType:
    """registry[name], or a ValueError that lists the choices (`kind` names the setting)."""
    if name not in registry:
        raise ValueError(f"Expected `{kind}` to be one of {sorted(registry)}, but got {name!r}")
    return registry[name]
