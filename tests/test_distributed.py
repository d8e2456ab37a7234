"""Data-parallel training: `torchrun --nproc_per_node 2 -m calm_core.cli train` on the CPU
(gloo) ends with the same weights as one process on the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from calm_core.distributed import shard
from calm_core.runs import RunDir

# Sums in another order differ by ~1e-7; Adam divides by sqrt(v), so where a gradient is
# near 0 that noise can become a visible share of a step (seen: 2% of one step on 1 of
# 512 weights). Allow 10% of one step (lr 1e-2): ranks stepping on their own shards
# without averaging move weights by whole steps. The logged q, lambda and ||grad q||
# (which a sum instead of a mean would double) are checked tightly below.
TOLERANCE = dict(rtol=1e-2, atol=1e-3)


def test_shard_splits_a_batch_evenly_or_refuses() -> None:
    assert shard(list("abcd"), 2, 0) == ["a", "c"] and shard(list("abcd"), 2, 1) == ["b", "d"]
    with pytest.raises(ValueError, match="divisible"):
        shard(list("abc"), 2, 0)


def _train(tmp_path: Path, tiny_model_dir: Path, method: str, ranks: int, extra: tuple[str, ...] = ()
           ) -> dict[str, torch.Tensor]:
    root = tmp_path / f"{method}-{ranks}"
    args = ["-m", "calm_core.cli", "train", "--model", str(tiny_model_dir), "--method", method, "--steps", "3",
            "--batch-size", "4", "--scoring", "cloze", "--train-data", "builtin/capitals/train",
            "--heldout-data", "builtin/capitals/validation", "--eval-data", "builtin/capitals/test",
            "--train-limit", "12", "--heldout-limit", "8", "--eval-limit", "6", "--lr-theta", "1e-2",
            "--lr-alpha", "1e-1", "--set", "heldout_batch_size=4", "--set", "eval_every=0",
            "--set", "checkpoint_every=0", "--runs-root", str(root), *extra]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else [sys.executable]
    command = launcher + (args if ranks == 1 else args)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [p for p in root.iterdir() if (p / "status.json").is_file()]
    assert len(runs) == 1, f"expected one run for {ranks} processes, got {runs}"
    run = RunDir.open(runs[0])
    assert run.status["state"] == "finished" and run.status["choices"]["world_size"] == ranks
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3]  # rank 0 alone writes
    if extra == FROZEN_PREFIX:
        assert run.status["choices"]["frozen_prefix"]["used"] is True and run.status["prefill"]["items"] > 0
    weights_and_log = {"metrics": run.read_metrics()}
    step, directory = run.latest_checkpoint()
    weights = load_file(str(directory / "adapter_model.safetensors"))
    if (directory / "calibration_head.safetensors").is_file():
        weights.update({f"head.{k}": v for k, v in load_file(str(directory / "calibration_head.safetensors")).items()})
    return {**weights, **weights_and_log}


FROZEN_PREFIX = ("--set", 'lora={"r": 4, "alpha": 8, "layers": 1}')  # each rank prefills its share of the batches


@pytest.mark.parametrize("method,extra", [("calm", ()), ("sft", ()), ("calm", FROZEN_PREFIX)],
                         ids=["calm", "sft", "calm-frozen-prefix"])
def test_two_gloo_processes_match_one_process(tmp_path: Path, tiny_model_dir: Path, method: str,
                                              extra: tuple[str, ...]) -> None:
    one = _train(tmp_path, tiny_model_dir, method, ranks=1, extra=extra)
    two = _train(tmp_path, tiny_model_dir, method, ranks=2, extra=extra)
    log_one, log_two = one.pop("metrics"), two.pop("metrics")
    # q is a difference of two float32 losses near 1.4: its absolute error is ~1e-6
    for key in ("train/lower_loss", "bome/q", "bome/lambda", "bome/grad_q_norm"):  # the step's deciding numbers
        logged = [(a.get(key), b.get(key)) for a, b in zip(log_one, log_two)]
        for a, b in logged:
            assert (a is None) == (b is None) and (a is None or b == pytest.approx(a, rel=1e-4, abs=2e-6)), (key, logged)
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], **TOLERANCE)
    moved = [name for name in one if "lora_B" in name and one[name].abs().sum() > 0]
    assert moved, "training did not move the adapter: the comparison would prove nothing"
