"""What survives more than a killed process: a power loss (atomic_write fsyncs) and a
move to a GPU (checkpoints keep every CUDA generator, so a resumed run with LoRA dropout
continues the same curves)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from calm_core import io
from calm_core.training import checkpoints


def test_atomic_write_fsyncs_the_data_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(io.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(io.os, "replace", lambda a, b: events.append("replace") or real_replace(a, b))
    io.atomic_write_json(tmp_path / "status.json", {"state": "running"})
    assert events[:2] == ["fsync", "replace"]  # the data reaches the disk before the name does
    assert events.count("fsync") == 2  # and the folder after the rename
    assert (tmp_path / "status.json").read_text().startswith("{")


def test_checkpoints_keep_and_restore_every_cuda_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CUDA here, torch.cuda's calls are stood in for: the state saved must hold the
    devices' generators and a restore must put them back (it kept the CPU's alone)."""
    saved_states = [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([4, 5], dtype=torch.uint8)]
    restored: list[list[torch.Tensor]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: saved_states)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.append(list(states)))
    state = checkpoints.rng_state()
    assert [t.tolist() for t in state["cuda"]] == [[1, 2, 3], [4, 5]]
    point = checkpoints.Checkpoint(adapter={}, head=None, optimizer={}, inner=None, rng=state["torch"],
                                   cuda_rng=checkpoints._cuda_states(state["cuda"]))
    checkpoints.restore_rng(point)
    assert [[t.tolist() for t in r] for r in restored] == [[[1, 2, 3], [4, 5]]]
    with pytest.raises(ValueError, match="CUDA RNG states"):
        checkpoints._cuda_states("junk")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_restored_cuda_generator_draws_the_same_dropout_mask() -> None:
    state = checkpoints.rng_state()
    first = torch.nn.functional.dropout(torch.ones(64, device="cuda"), 0.5)
    checkpoints.restore_rng(checkpoints.Checkpoint({}, None, {}, None, state["torch"], cuda_rng=state["cuda"]))
    assert torch.equal(first, torch.nn.functional.dropout(torch.ones(64, device="cuda"), 0.5))
