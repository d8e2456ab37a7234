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
            ("calm_core.workspace.launch", "calm_core.runs.jobs"),
            ("calm_core.runs.jobs", "calm_core.workspace.launch"),
        ]
    )
    assert upward_calls(record) == [("calm_core.runs.jobs", "calm_core.workspace.launch")]


def test_the_walk_records_stays_and_rooms() -> None:
    from calm_core.data.split_sizes import heldout_support

    _, record = walk(lambda: heldout_support(24, 48))
    assert record.stays and record.stays[0] == "calm_core.data.split_sizes"
    assert record.rooms == {"calm_core.data.split_sizes"} and record.returns_to("calm_core.data.split_sizes") == 0


def test_launch_training_never_calls_back_up_a_layer(tiny_model_dir: Path, tmp_path: Path) -> None:
    from calm_core.runs.jobs import cancel
    from calm_core.training.config import TrainConfig
    from calm_core.workspace.launch import launch_training

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
        assert len(record.rooms) > 5  # the walk saw the launch: workspace, runs, training, data...
        assert {layer(m) for m in record.rooms} >= {1, 4, 5}
        assert upward_calls(record) == []
    finally:
        cancel(run)
