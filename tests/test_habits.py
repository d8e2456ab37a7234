"""The habits CONTRIBUTING.md asks for, checked where a check is cheap: one version
source, a fast test command that skips every slow marker, and no issue numbers in the
library's or the pages' code (history goes in commit messages and CHANGELOG.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_has_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "calm_core.__version__"}
    import calm_core

    assert re.fullmatch(r"\d+\.\d+\.\d+", calm_core.__version__)


def test_the_fast_command_skips_every_declared_marker() -> None:
    """A new marker must be placed: skipped by `scripts/test.sh --fast` or not."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = {line.split(":")[0] for line in config["tool"]["pytest"]["ini_options"]["markers"]}
    script = (ROOT / "scripts/test.sh").read_text(encoding="utf-8")
    expression = re.search(r'--fast.*?-m "([^"]+)"', script, re.S)
    assert expression is not None, "scripts/test.sh --fast selects no markers"
    skipped = set(re.findall(r"not (\w+)", expression.group(1)))
    assert skipped == markers


def test_no_issue_numbers_in_code() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("calm_core", "app")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bissues? \d+", line, re.I)
    ]
    assert offenders == [], f"say why, not which issue: {offenders}"


def test_contributing_names_the_inner_loop_and_the_checks() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for command in ("bash scripts/test.sh --fast", "bash scripts/typecheck.sh", "ruff format --check"):
        assert command in text


MAX_LINES = 450
# Modules still over MAX_LINES, each at most its recorded length: the list may only shrink.
LONG: dict[str, int] = {}


def test_modules_and_pages_stay_short() -> None:
    """Pages and library modules under MAX_LINES, so each reads as one thing; the one
    that is not yet may not grow."""
    over = {}
    for folder in ("calm_core", "app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > LONG.get(name, MAX_LINES):
                over[name] = lines
    assert over == {}, f"split these (over {MAX_LINES} lines, or longer than LONG records): {over}"
