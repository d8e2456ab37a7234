"""Run states are one enum (calm_core/runs/lifecycle.py `RunState`): no module of the
library or the studio spells a state as a bare string, so a renamed or added state is
one edit and a typo is a NameError, not a silent mismatch."""

from __future__ import annotations

import io
import json
import tokenize
from pathlib import Path

from calm_core.runs.lifecycle import ACTIVE_STATES, STATES, TERMINAL_STATES, RunState

ROOT = Path(__file__).resolve().parents[1]
WORDS = {state.value for state in RunState}
# Strings equal to a state's word that are not states: a machine-load record's key.
NOT_STATES = {("calm_core/estimate/machine_load.py", "running")}


def bare_states(source: str) -> list[str]:
    """The string literals of `source` (docstrings and comments aside) that spell a state."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and token.string.strip("\"'") in WORDS and token.string[0] in "\"'":
            found.append(token.string.strip("\"'"))
    return found


def test_the_checker_finds_a_bare_state() -> None:
    assert bare_states('if status.state == "finished":\n    pass\n') == ["finished"]
    assert bare_states('run.write_status("failed", error="x")\n') == ["failed"]
    assert bare_states('"""A finished run."""\n# "running" here is a comment\nx = RunState.RUNNING\n') == []


def test_no_module_spells_a_state_as_a_string() -> None:
    offenders = {}
    for path in [*sorted((ROOT / "calm_core").rglob("*.py")), *sorted((ROOT / "app").rglob("*.py"))]:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "calm_core/runs/lifecycle.py":
            continue
        words = [w for w in bare_states(path.read_text(encoding="utf-8")) if (rel, w) not in NOT_STATES]
        if words:
            offenders[rel] = words
    assert not offenders, f"use calm_core.runs.lifecycle.RunState: {offenders}"


def test_states_are_strings_on_disk_and_in_comparisons() -> None:
    assert json.dumps({"state": RunState.FINISHED}) == '{"state": "finished"}'
    assert RunState.RUNNING == "running" and "queued" in STATES and RunState.DAMAGED not in STATES
    assert set(ACTIVE_STATES) | set(TERMINAL_STATES) | {RunState.QUEUED} == set(STATES)
