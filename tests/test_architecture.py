"""The layering of calm_core, checked from the source (docs/architecture.md draws it).

Every import in calm_core (module level or inside a function) goes to the same layer or
one below; no two modules import each other at module level, directly or round a loop;
calm_core never imports Streamlit. A change that breaks the picture fails here first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "calm_core"

# Bottom to top: a module may import its own layer and those listed before it.
LAYERS: list[tuple[str, ...]] = [
    ("io", "paths", "faults", "provenance", "registry", "settings", "glossary", "logs"),
    ("data", "runs", "calibration"),
    ("scoring",),
    ("generative",),
    ("training",),
    ("access", "estimate", "results"),
    ("export", "launch"),
    ("cli",),
]
LAYER_OF = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, top_level_only: bool) -> set[str]:
    """calm_core modules `path` imports (`from calm_core.x import y` counts x.y when y is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("calm_core")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("calm_core") and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if _is_module(sub) else node.module)
    return found


def _is_module(name: str) -> bool:
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYER_OF.get(parts[1]) if len(parts) > 1 else None


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "template" not in p.parts)


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({module_name(p).split(".")[1] for p in SOURCES if module_name(p) != "calm_core"} - set(LAYER_OF))
    assert not unplaced, f"add these to LAYERS here and to docs/architecture.md: {unplaced}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_only_go_down(path: Path) -> None:
    own = layer(module_name(path))
    upward = sorted(name for name in imports_of(path, top_level_only=False)
                    if own is not None and (layer(name) or 0) > own)
    assert not upward, f"{module_name(path)} (layer {own}) imports a higher layer: {upward}"


def import_graph() -> dict[str, set[str]]:
    """{module: the calm_core modules it imports anywhere}: module level, inside functions
    and under TYPE_CHECKING alike, since a function-level import hides a circle, not breaks it."""
    return {module_name(p): imports_of(p, top_level_only=False) for p in SOURCES}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first walk of `graph` meets (each closing edge once)."""
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph or nxt == node or node.startswith(nxt + "."):
                continue  # a package's __init__ runs before its modules: importing the parent is no circle
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return circles


def test_no_import_circles() -> None:
    circles = import_circles(import_graph())
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_a_function_level_import_is_a_circle_too(tmp_path: Path) -> None:
    """The checker itself: b importing a inside a function still closes a -> b -> a."""
    (tmp_path / "a.py").write_text("from calm_core.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from calm_core.a import y\n")
    graph = {"calm_core.a": imports_of(tmp_path / "a.py", False), "calm_core.b": imports_of(tmp_path / "b.py", False)}
    assert import_circles(graph) == [["calm_core.a", "calm_core.b", "calm_core.a"]]


def test_the_library_never_imports_streamlit() -> None:
    offenders = [module_name(p) for p in SOURCES if "streamlit" in {n.split(".")[0] for n in _all_imports(p)}]
    assert not offenders


def _all_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_checker_catches_an_upward_import(tmp_path: Path) -> None:
    """The rule itself: a scoring module importing training is reported."""
    fake = tmp_path / "bad.py"
    fake.write_text("from calm_core.training.loop import train\n")
    assert "calm_core.training.loop" in imports_of(fake, top_level_only=False)
    assert layer("calm_core.training.loop") > layer("calm_core.scoring.options")


# Folders whose modules are found by the registry (calm_core.registry.discover), not imported by name.
DISCOVERED = ("calm_core.training.methods.", "calm_core.training.tasks.", "calm_core.calibration.posthoc.")


def test_every_library_module_is_used_by_the_product() -> None:
    """Issue 32: the package holds the product. A module that only tests or docs import
    (a toy, a reference implementation, an alias) belongs in tests/ or bench/; one that the
    README gives the user as `python -m <module>` is a command of the product."""
    users = [*SOURCES, *sorted((PACKAGE.parent / "app").rglob("*.py"))]
    imported = set().union(*(imports_of(path, top_level_only=False) | _imported_by_name(path) for path in users))
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    imported |= {name for name in map(module_name, SOURCES) if f"python -m {name}" in readme}  # a user's command
    unused = [
        name
        for name in map(module_name, SOURCES)
        if name not in imported
        and not name.endswith("__main__")
        and not name.startswith(DISCOVERED)
        and not (PACKAGE.parent.joinpath(*name.split(".")) / "__init__.py").is_file()
    ]
    assert unused == [], f"imported by no calm_core or app module: {unused}"


def _imported_by_name(path: Path) -> set[str]:
    """Modules `path` imports through importlib.import_module("calm_core....") (a lazy import)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("calm_core")}
    return found


def layer_table() -> str:
    """The layers as the code has them today, one Markdown row per layer: its folders, its
    modules and lines, and the lower layers it imports. `python tests/test_architecture.py`
    prints it (docs/architecture.md, "Checking the structure")."""
    rows = ["| layer | folders | modules | lines | imports layers |", "|---|---|---|---|---|"]
    for level, parts in enumerate(LAYERS):
        paths = [p for p in SOURCES if layer(module_name(p)) == level]
        lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)
        below = sorted({layer(n) for p in paths for n in imports_of(p, top_level_only=False)} - {None, level})
        rows.append(f"| {level} | {', '.join(parts)} | {len(paths)} | {lines} | {', '.join(map(str, below)) or '-'} |")
    return "\n".join(rows)


def test_the_layer_table_counts_every_module() -> None:
    table = layer_table()
    counted = sum(int(row.split("|")[3]) for row in table.splitlines()[2:])
    assert counted == sum(1 for p in SOURCES if layer(module_name(p)) is not None)
    assert len(table.splitlines()) == len(LAYERS) + 2


def upward_imports() -> list[str]:
    """`module -> module` for every import of a higher layer (test_imports_only_go_down's rule)."""
    found = []
    for path in SOURCES:
        own = layer(module_name(path))
        found += [f"{module_name(path)} -> {name}" for name in sorted(imports_of(path, top_level_only=False))
                  if own is not None and (layer(name) or 0) > own]
    return found


if __name__ == "__main__":
    print(layer_table())
    circles, upward = import_circles(import_graph()), upward_imports()
    print(f"\n{len(circles)} import circles (function-level imports counted), {len(upward)} upward imports")
    for line in [" -> ".join(c) for c in circles] + upward:
        print("  " + line)
