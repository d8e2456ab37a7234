"""Shared fixtures: a tiny random-weight model for speed, the embedded model for truth.

The tiny model is a 2-layer Llama with the embedded model's tokenizer (so prompts
tokenize exactly as in production) and random weights from a fixed seed. Tests that
need real weights are marked `embedded`; they load SmolLM2-135M once per session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)


@pytest.fixture(autouse=True, scope="session")
def _library_notes_on_stderr() -> None:
    """calm_core's log records printed as the `calm` command prints them ("calm: ..." on
    stderr), so tests read them where a user sees them (tests/test_logs.py checks the setup)."""
    from calm_core.logs import configure

    configure()


@pytest.fixture(autouse=True)
def _isolated_workspace(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never write uploads or runs into the developer's own workspace."""
    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))


@pytest.fixture(scope="session")
def embedded_dir() -> Path:
    from calm_core.scoring.models import embedded_model_dir

    return embedded_model_dir()


@pytest.fixture(scope="session")
def tiny_model_dir(embedded_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random Llama + the embedded tokenizer, loadable with load_model(path)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY_CONFIG)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    target = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir: Path):
    from calm_core.scoring.models import ModelSpec, load_model

    return load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))


@pytest.fixture(scope="session")
def embedded_lm(embedded_dir: Path):
    from calm_core.scoring.models import ModelSpec, load_model

    return load_model(ModelSpec(name="embedded", device="cpu"))


@pytest.fixture()
def tiny_everywhere(tiny_lm, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Studio pages that would load the embedded model get the tiny one, and their scores'
    disk cache is a temporary folder keyed by the tiny model's files (never the user's)."""
    import app.widgets.state
    import calm_core.scoring.score_cache

    app.widgets.state._score_store().clear()
    monkeypatch.setattr(app.widgets.state, "get_model", lambda name="embedded": tiny_lm)
    monkeypatch.setattr(app.widgets.state, "model_dir", lambda name="embedded": tiny_model_dir)
    monkeypatch.setattr(calm_core.scoring.score_cache, "scores_root", lambda: tmp_path / "scores")
    return tiny_lm


@pytest.fixture()
def open_page():
    """open_page("../pages/x/x.py") -> an AppTest of the studio switched to that page and run
    (a path as app/navigation.page_paths gives it: relative to the router, app/server/)."""
    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parent.parent

    def _open(path: str):
        at = AppTest.from_file(str(root / "app" / "server" / "studio.py"), default_timeout=180)
        at.run()
        assert not at.exception, at.exception
        if path != "../pages/learn/learn.py":
            at.switch_page(path)
            at.run()
        return at

    return _open


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory: pytest.TempPathFactory):
    """family_dir(case) -> a saved tiny model of that case (tests/families.py CASES), built
    once per session: the family matrix's columns share it."""
    from tests.families import build_case

    built: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in built:
            built[case] = build_case(case, tmp_path_factory.mktemp(f"family-{case}"))
        return built[case]

    return get


@pytest.fixture(scope="session")
def family_lm(family_dir):
    """family_lm(case) -> the case's model loaded by load_model (for scoring; never wrapped)."""
    from calm_core.scoring.models import ModelSpec, load_model

    loaded: dict[str, object] = {}

    def get(case: str):
        if case not in loaded:
            loaded[case] = load_model(ModelSpec(name=str(family_dir(case)), device="cpu"))
        return loaded[case]

    return get


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Record each family-matrix cell's outcome (tests/families.py) for the session's table."""
    outcome = yield
    report = outcome.get_result()
    from tests.families import cell_of, outcome_word

    cell = cell_of(item)
    if cell is not None and (report.when == "call" or report.outcome != "passed"):
        item.config.stash.setdefault(_MATRIX, {})[cell] = outcome_word(report)
        for key, value in item.user_properties:  # what a cell measured beside its outcome (record_property)
            item.config.stash.setdefault(_NOTES, {}).setdefault(cell[0], {})[key] = value


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The family matrix as a table after the run, and as JSON where CALM_FAMILY_MATRIX says
    (scripts/family_table.py writes docs/families.md from it)."""
    import json
    import os

    cells, notes = config.stash.get(_MATRIX, {}), config.stash.get(_NOTES, {})
    if not cells:
        return
    from tests.families import matrix_markdown

    terminalreporter.write_sep("-", "model-family matrix")
    terminalreporter.write(matrix_markdown(cells, notes))
    target = os.environ.get("CALM_FAMILY_MATRIX")
    if target:
        rows = [[case, column, word] for (case, column), word in sorted(cells.items())]
        Path(target).write_text(json.dumps({"cells": rows, "notes": notes}, indent=1))


_MATRIX = pytest.StashKey[dict]()
_NOTES = pytest.StashKey[dict]()


SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
LONG_LIST = Path(__file__).with_name("long_tests.txt")


def listed_entries(path: Path) -> set[str]:
    """A measured list's entries (`file` or `file::function`, after the seconds)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return {line.split(maxsplit=1)[1].strip() for line in lines if line.strip() and not line.startswith("#")}


def slow_entries() -> set[str]:
    """tests/slow_tests.txt's entries (`file` or `file::function`): the tests the fast loop's
    measurement found slow (scripts/slow_tests.py writes it from a --durations report)."""
    return listed_entries(SLOW_LIST)


def long_entries() -> set[str]:
    """tests/long_tests.txt's entries: the tests the whole suite (CI) leaves to `--long`."""
    return listed_entries(LONG_LIST)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Mark `slow` what tests/slow_tests.txt lists and `long` what tests/long_tests.txt lists,
    before `-m` deselects by marker, every parametrization of a listed function."""
    lists = ((slow_entries(), pytest.mark.slow), (long_entries(), pytest.mark.long))
    for item in items:
        file, _, rest = item.nodeid.partition("::")
        for entries, mark in lists:
            if file in entries or f"{file}::{rest.split('[')[0]}" in entries:
                item.add_marker(mark)
