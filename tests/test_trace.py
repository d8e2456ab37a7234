"""Following a launch through its calls (issue 32, "done when"): `launch_training`'s config
flows down the layers (docs/architecture.md), never back up through a callback. The walk
is recorded by tests/module_trace.py, which the project can rerun on any call."""

from __future__ import annotations

from pathlib import Path

from tests.module_trace import Walk, walk
from tests.test_architecture import layer


def upward_calls(record: Walk) -> list[tuple[str, str]]:
    """The calls in `record` from a calm_core module into one of a higher layer: a lower
    layer handing control back up (a callback), which the layering forbids at run time too."""
    return [
        (caller, callee)
        for caller, callee in record.calls
        if layer(caller) is not None and layer(callee) is not None and layer(callee) > layer(caller)
    ]


def test_a_callback_into_a_higher_layer_is_an_upward_call() -> None:
    record = Walk(
        calls=[
            ("calm_core.launch", "calm_core.runs.jobs"),
            ("calm_core.runs.jobs", "calm_core.launch"),
        ]
    )
    assert upward_calls(record) == [("calm_core.runs.jobs", "calm_core.launch")]


def test_the_walk_records_stays_and_rooms() -> None:
    from calm_core.data.split_sizes import heldout_support

    _, record = walk(lambda: heldout_support(24, 48))
    assert record.stays and record.stays[0] == "calm_core.data.split_sizes"
    assert record.rooms == {"calm_core.data.split_sizes"} and record.returns_to("calm_core.data.split_sizes") == 0


def test_launch_training_never_calls_back_up_a_layer(tiny_model_dir: Path, tmp_path: Path) -> None:
    from calm_core.runs.queue import cancel
    from calm_core.training.config import TrainConfig
    from calm_core.launch import launch_training

    cfg = TrainConfig.preset(
        "quick",
        model=str(tiny_model_dir),
        steps=1,
        train_data="builtin/capitals/train",
        heldout_data="builtin/capitals/validation",
        eval_data=("builtin/capitals/test",),
        train_limit=4,
        heldout_limit=4,
        eval_limit=4,
    )
    (run, _), record = walk(lambda: launch_training(cfg, root=tmp_path / "runs"))
    try:
        assert len(record.rooms) > 5  # the walk saw the launch: runs, training, data...
        assert {layer(m) for m in record.rooms} >= {1, 4}
        assert not [m for m in record.rooms if m.startswith("calm_core.estimate")]  # the caller's estimate only
        assert upward_calls(record) == []
    finally:
        cancel(run)


# What reading a dataset's rows goes through: the readers and their sources, the
# streaming index, the mapping and the item checks, the hub loader, and the entry points
# that generate or load a whole set. Counting a set's items must need none of them.
DATA_LOADING_MODULES = {
    "calm_core.data.loaders",
    "calm_core.data.readers",
    "calm_core.data.sources",
    "calm_core.data.parquet_batches",
    "calm_core.data.files",
    "calm_core.data.encoding",
    "calm_core.data.stream",
    "calm_core.data.mapping",
    "calm_core.data.hf",
    "calm_core.scoring.evaluate",
}
DATA_LOADING_FUNCTIONS = {
    "calm_core.data.catalog.load_dataset",
    "calm_core.data.entries.load_builtin_set",
    "calm_core.data.entries._builtin_entries",  # generates every built-in set to list it
    "calm_core.data.builtin.load_builtin",
}


def data_loading(record: Walk) -> set[str]:
    """The data-loading modules and functions (see above) that `record` entered."""
    return (record.rooms & DATA_LOADING_MODULES) | (record.functions & DATA_LOADING_FUNCTIONS)


def test_the_loading_set_names_what_loading_a_file_enters(tmp_path: Path) -> None:
    from calm_core.data.catalog import load_dataset

    _, record = walk(lambda: load_dataset(str(_write_quiz(tmp_path / "q.jsonl", 3))))
    assert {"calm_core.data.loaders", "calm_core.data.catalog.load_dataset"} <= data_loading(record)


def test_launching_loads_no_dataset(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Launching records what the run needs; its time estimate counts the items from what
    the data layer knows (calm_core/data/counts.py). The job loads the data, not the launch."""
    import sys

    from calm_core.launch import launch_training
    from calm_core.runs import jobs, queue
    from calm_core.training.config import TrainConfig

    monkeypatch.setattr(jobs, "worker_command", lambda: [sys.executable, "-c", "import time; time.sleep(30)"])
    quiz = _write_quiz(tmp_path / "quiz.jsonl", 20)
    cfg = TrainConfig.preset(
        "quick",
        model=str(tiny_model_dir),
        steps=2,
        train_data="builtin/capitals/train",
        heldout_data="builtin/capitals/validation",
        eval_data=("builtin/units/test", f"{quiz}[0:12]"),
        train_limit=8,
    )
    from calm_core.estimate.predict import launch_estimate

    def launch() -> tuple:  # as `calm train --detach` and the Train page launch: the estimate, then the run
        return launch_training(cfg, root=tmp_path / "runs", estimate=launch_estimate(cfg, tmp_path / "runs"))

    (run, _), record = walk(launch)
    print(f"launch_training: {len(record.stays)} stays in {len(record.rooms)} modules")
    try:
        assert data_loading(record) == set(), sorted(data_loading(record))
        assert run.config.estimate is not None and run.config.estimate["figure_s"] > 0  # made from counts
    finally:
        queue.cancel(run)


def _write_quiz(path: Path, rows: int) -> Path:
    import json

    lines = (
        json.dumps({"question": f"What is {i} + 1?", "choices": [str(i + k) for k in (1, 2, 3, 4)], "answer": 0})
        for i in range(rows)
    )
    path.write_text("".join(line + "\n" for line in lines))
    return path


# Measured before the restructure (commit 5b10209, the same file and call): 63 stays in 12
# modules, data/loaders.py entered 15 times (the walk: 67 stays, loaders 16 times).
STAYS_BEFORE = 63


def test_reading_a_file_for_a_page_walks_half_as_far(tiny_everywhere, tmp_path: Path) -> None:
    """Issue 32, part 2: `get_scores` on a 12-row file whose scores are cached (the page's
    read) enters half as many modules as before: each loading stage (read, map, validate)
    runs once over a chunk of rows instead of the walk going loaders > mapping > schema >
    readers for every row, and the kind is decided in one place (mapping.resolve_kind)."""
    import app.widgets.state

    path = str(_write_quiz(tmp_path / "quiz.jsonl", 12))
    app.widgets.state.get_scores("embedded", path, "cloze", 8)  # scored once: the disk cache holds it
    app.widgets.state._score_store().clear()
    _, record = walk(lambda: app.widgets.state.get_scores("embedded", path, "cloze", 8))
    print(" > ".join(m.removeprefix("calm_core.") for m in record.stays))
    assert len(record.stays) <= STAYS_BEFORE // 2, len(record.stays)
    assert record.returns_to("calm_core.data.loaders") <= 6


def test_a_longer_file_walks_no_further(tmp_path: Path) -> None:
    """The walk does not grow with the rows (up to a chunk, loaders.CHUNK_ROWS): a stage
    sees a chunk at a time, so 12 rows and 200 rows enter the same modules as often."""
    from calm_core.data.loaders import CHUNK_ROWS, load_file

    assert CHUNK_ROWS >= 200
    short, long = (_write_quiz(tmp_path / f"q{n}.jsonl", n) for n in (12, 200))
    walks = [walk(lambda path=path: load_file(path))[1] for path in (short, long)]
    assert len(walks[0].stays) == len(walks[1].stays)
