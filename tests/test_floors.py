"""scripts/floors.py: the constraints file of the minimum-versions job (scripts/test_floors.sh)
is pyproject.toml's floors, every one of them, and a requirement without a floor is refused."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("floors", ROOT / "scripts" / "floors.py")
floors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floors)


def test_every_declared_dependency_but_torch_is_pinned_at_its_floor() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [s for e in ("hf", "studio", "dev") for s in project["optional-dependencies"][e]]
    expected = {}
    for spec in specs:
        name = floors._normal(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0])
        expected[name] = re.search(r">=\s*([^,;\s]+)", spec).group(1)
    del expected["torch"]  # pinned by scripts/test_floors.sh as scripts/setup.sh pins it
    lines = floors.floors(ROOT / "pyproject.toml", ["hf", "studio", "dev"])
    assert dict(line.split("==") for line in lines) == expected


def test_a_requirement_without_a_floor_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["numpy>=1.26,<3", "pandas"]\n')
    with pytest.raises(SystemExit, match="pandas"):
        floors.floors(pyproject, [])
    with pytest.raises(SystemExit, match="no such extra"):
        floors.floors(pyproject, ["studio"])
