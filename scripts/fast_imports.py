"""Which calm_core modules the fast loop never imports: the fast tests' files (as pytest
collects them under `scripts/test.sh --fast`'s marker expression), their calm_core imports
followed through calm_core's own (tests/test_architecture.py's import graph, imports inside
functions included, a module's packages with it).

    .venv/bin/python scripts/fast_imports.py

Run it after redrawing tests/slow_tests.txt: a module no fast test reaches is one the inner
loop cannot catch breaking (scripts/slow_tests.py `KEEP` holds a test for it). Modules the
code loads by name (the training methods, through their registry) are reached at run time
though no import names them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_architecture import SOURCES, imports_of, module_name  # noqa: E402

FAST = "not embedded and not gemma and not browser and not slow and not long"  # scripts/test.sh --fast


def fast_test_files() -> set[str]:
    """The test files that hold at least one fast test."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", FAST]
    listing = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {line.split("::")[0] for line in listing.splitlines() if "::" in line}


def named_imports(path: Path) -> list[str]:
    """The calm_core modules (and `from` names, which may be modules) a file imports."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("calm_core"):
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("calm_core")]
    return found


def reached(starts: list[str], graph: dict[str, set[str]]) -> set[str]:
    """Every calm_core module `starts` import, through calm_core's own imports and packages."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        module = todo.pop()
        if module in seen or module not in graph:
            continue
        seen.add(module)
        todo += [*graph[module], module.rsplit(".", 1)[0]]
    return seen


def main() -> None:
    graph = {module_name(path): set(imports_of(path, top_level_only=False)) for path in SOURCES}
    files = fast_test_files()
    seen = reached([name for file in files for name in named_imports(ROOT / file)], graph)
    print(f"{len(files)} fast test files reach {len(seen)} of {len(graph)} calm_core modules")
    for module in sorted(set(graph) - seen):
        print(f"  not reached: {module}")


if __name__ == "__main__":
    main()
