"""The Python floor is one claim, kept true: pyproject's requires-python, ruff's target,
scripts/setup.sh's check and the interpreter the tests run on agree, and no module uses
syntax newer than the floor."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _floor() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec.strip())
    assert found, f"requires-python should be a plain floor, got {spec!r}"
    return int(found[1]), int(found[2])


def test_the_floor_is_claimed_the_same_everywhere_and_met_here() -> None:
    major, minor = _floor()
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["target-version"]
    assert ruff == f"py{major}{minor}"
    assert f'FLOOR="{major}.{minor}"' in (ROOT / "scripts" / "setup.sh").read_text()
    assert f"Python >= {major}.{minor}" in (ROOT / "README.md").read_text()
    assert sys.version_info[:2] >= (major, minor)


def test_no_module_uses_syntax_newer_than_the_floor() -> None:
    floor = _floor()
    files = [*ROOT.glob("calm_core/**/*.py"), *ROOT.glob("app/**/*.py")]
    assert len(files) > 100
    for path in files:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=floor)
