"""Docs that cannot go stale: every `calm_core.` dotted name and every module path named in
the docs (README, CONTRIBUTING, docs/) and in the sources' docstrings and comments must
resolve, so a move that forgets a pointer fails here instead of misleading a reader.

Three shapes are read:
- `calm_core.a.b.c` anywhere: imported and looked up attribute by attribute;
- in backticks, a name relative to the package (`export.export_run`, `access.Refused`):
  resolved as `calm_core.<name>`;
- a path under the project's folders (`calm_core/x/y.py`, `bench/z.py`, `docs/w.md`), or
  relative to the package (`training/loop.py`): the file must exist.
Files that a command writes (a bench's JSON) and names planted on purpose by tests are
listed below with their reason: nothing else is exempt."""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "calm_core"
EXTENSIONS = ("py", "sh", "md", "toml", "json", "jsonl", "yaml", "parquet", "csv", "txt")

WRITTEN_BY_COMMANDS = {  # named as where a command writes, before any run has made them
    "bench/results/first_chart.json": "bench/first_chart.py --json",
    "bench/results/precision.json": "bench/precision.py's default --json",
    "bench/results/harness.json": "bench/scoring.py --harness's default --json",
    "docs/bilevel_minibatch_section.md": "bench/bilevel_toy_tables.py --section writes it",
}
PLANTED = {  # files whose stale-looking names are examples, made up on purpose
    "tests/test_architecture.py": "imports of made-up modules (calm_core.a, calm_core.x) the layer check must catch",
    "tests/test_extending.py": "the files it creates to show how to add a calibrator and a method",
    "tests/test_stale_references.py": "the planted names this test checks it catches",
}
EXAMPLES = {  # (doc, name): a name that is an example to follow, not a pointer
    ("docs/architecture.md", "calm_core.calibration.posthoc.bias"): "'Adding things' (tests/test_extending.py makes it)",
    ("docs/architecture.md", "calm_core/calibration/posthoc/bias.py"): "the same walk-through's file",
    ("docs/architecture.md", "calm_core/training/methods/focal.py"): "the same walk-through's method",
}


def _subpackages() -> list[str]:
    names = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    names |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return sorted(names)


ABSOLUTE = re.compile(r"\bcalm_core(?:\.[A-Za-z_]\w*)+")
RELATIVE = re.compile(r"`((?:" + "|".join(_subpackages()) + r")(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
# packages that are gone: a dotted name in them is stale (a call on a variable of that name is not)
RETIRED = re.compile(r"(?<![\w.])(workspace\.[A-Za-z_]\w*)(?![\w(])")
FOLDERS = "calm_core|app|tests|bench|scripts|docs|configs"
PATH = re.compile(r"(?<![\w/.-])((?:" + FOLDERS + r")/[\w./-]*\w\.(?:" + "|".join(EXTENSIONS) + r"))\b")
PACKAGE_PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(_subpackages()) + r")/[\w./-]*\w\.py)\b")


@cache
def resolves(dotted: str) -> bool:
    """Whether `dotted` names a module, or an attribute reached from the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def stale_names(text: str) -> list[str]:
    """The dotted names and paths in `text` that resolve to nothing in this checkout."""
    stale = [name for name in set(ABSOLUTE.findall(text)) if not resolves(name)]
    for name in set(RELATIVE.findall(text)):
        if name.rsplit(".", 1)[-1] not in EXTENSIONS and not resolves(f"calm_core.{name}"):
            stale.append(name)
    stale += sorted(set(RETIRED.findall(text)))
    for path in set(PATH.findall(text)):
        if path not in WRITTEN_BY_COMMANDS and not (ROOT / path).exists():
            stale.append(path)
    for path in set(PACKAGE_PATH.findall(text)):
        if not (PACKAGE / path).exists() and not (ROOT / path).exists():
            stale.append(path)
    return sorted(stale)


def documents() -> list[Path]:
    """The docs a reader follows and every source file whose docstrings and comments name things."""
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("calm_core", "app", "bench", "scripts", "tests"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [f for f in files if f.is_file() and str(f.relative_to(ROOT)) not in PLANTED]


def test_every_named_module_function_and_file_exists() -> None:
    stale = {}
    for path in documents():
        doc = str(path.relative_to(ROOT))
        names = [n for n in stale_names(path.read_text(encoding="utf-8")) if (doc, n) not in EXAMPLES]
        if names:
            stale[doc] = names
    assert not stale, f"names that point at nothing (moved or renamed?): {stale}"


def test_a_planted_stale_name_of_each_shape_is_caught() -> None:
    planted = (
        "see calm_core.results.no_such_module and `export.no_such_function`; "
        "bench/no_such_bench.py and training/no_such_room.py; workspace.verdict"
    )
    assert stale_names(planted) == sorted(
        ["bench/no_such_bench.py", "calm_core.results.no_such_module", "export.no_such_function",
         "training/no_such_room.py", "workspace.verdict"]
    )
    live = "calm_core.calibration.metrics and `export.record.selective_record`; bench/scoring.py, training/loop.py"
    assert stale_names(live) == []


def test_the_examples_are_still_named() -> None:
    """An example exemption whose doc no longer names it is dropped. (Whether it resolves
    depends on the tests before: tests/test_extending.py makes the example module in this
    process; and the files commands write are not checked for absence: other tests write them.)"""
    for (doc, name), reason in EXAMPLES.items():
        assert name in (ROOT / doc).read_text(encoding="utf-8"), f"{doc} no longer names {name}"
