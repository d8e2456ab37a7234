"""Data-parallel training: `torchrun --nproc_per_node 2 -m calm_core.cli train` on the CPU
(gloo) ends with the same weights as one process on the same global batch.

The two runs do the same arithmetic with the sums in another order (the batch split over
two ranks, matrix products of other shapes, the rank mean in float64), so they differ by
float32 rounding and by nothing else. No tolerance below is a fixed number: each is that
rounding, derived from the magnitudes of the numbers involved (`float32_noise`), so it
holds for a loss of 0.6 or of 6 and for a q of 0.003 or of 0.9 alike.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from calm_core.runs.rundir import RunDir
from calm_core.training.distributed import shard
from tests.numeric import float32_noise

ADAM_OUTLIERS = 0.01  # share of AdamW's coordinates allowed past the float32 bound (see assert_weights_match)


def logged_tolerances(record: dict[str, float], train: dict, terms: int) -> dict[str, float]:
    """The float32 noise (`float32_noise`) of each logged number a step is decided by, from
    the magnitudes of the terms it is computed from (one process's record):

    - the losses L and F, the norms ||grad F|| and ||grad q||: their own size (a gradient
      is a float32 sum like a loss). An underestimate where the items' gradients cancel
      (the sum of their sizes is larger than the norm of their mean), which the factor
      sqrt(terms) absorbs: see float32_noise for the margin seen;
    - q = L - L~: |L| + |L~|, with L~ = L - q;
    - lambda = eta - r, r = <grad F, grad q>_w / ||grad q||_w^2 (phi "grad"; 0 when
      negative): with grad F and grad q each off by a relative rho, r is off by at most
      4 rho ||grad F||_w / ||grad q||_w (rho once through grad F, three times through grad q),
      and ||grad F||_w / ||grad q||_w <= (||grad F|| / ||grad q||) sqrt(max lr / min lr)
      (w = lr / max lr per block, so 1 >= w >= min lr / max lr): magnitude eta + 4 that ratio.
    """
    assert train["phi"] == "grad", "lambda's magnitude below is that of phi = eta ||grad q||^2"
    lower = record["train/lower_loss"]
    magnitudes = {"train/lower_loss": abs(lower)}
    for key in ("train/upper_loss", "bome/grad_f_norm", "bome/grad_q_norm"):
        if key in record:
            magnitudes[key] = abs(record[key])
    if "bome/q" in record:
        magnitudes["bome/q"] = abs(lower) + abs(lower - record["bome/q"])
        lrs = [train["lr_theta"], train["lr_alpha"]]
        ratio = record["bome/grad_f_norm"] / record["bome/grad_q_norm"] if record["bome/grad_q_norm"] else 0.0
        magnitudes["bome/lambda"] = train["eta"] + 4 * ratio * math.sqrt(max(lrs) / min(lrs))
    return {key: float32_noise(m, terms) for key, m in magnitudes.items()}


def assert_logs_match(log_two: list[dict], log_one: list[dict], train: dict, terms: int) -> None:
    """Every step's deciding numbers of the two runs agree to their float32 noise (step 0's
    record is an evaluation before training: nothing of a step to compare)."""
    assert [r["step"] for r in log_two] == [r["step"] for r in log_one]
    log_one, log_two = [r for r in log_one if r["step"] > 0], [r for r in log_two if r["step"] > 0]
    for one, two in zip(log_one, log_two):
        tolerances = logged_tolerances(one, train, terms)
        assert tolerances.keys() == logged_tolerances(two, train, terms).keys(), (one, two)
        for key, tolerance in tolerances.items():
            assert abs(two[key] - one[key]) <= tolerance, (
                f"step {one['step']}: {key} {two[key]!r} against {one[key]!r}, {abs(two[key] - one[key]):.3g} apart "
                f"> its float32 noise {tolerance:.3g}")


def assert_weights_match(two: dict[str, torch.Tensor], one: dict[str, torch.Tensor], train: dict,
                         terms: int) -> None:
    """The final weights agree to the float32 noise of `steps` updates.

    One step rounds each weight once and adds an update computed in float32, off by
    float32_noise(|update|); an update is no larger than the weights it builds (LoRA's B
    starts at 0 and the head's log tau at 0, so they are sums of their updates; A moves by
    a small share of itself), so a step adds at most float32_noise(max |w|) to each weight
    of a tensor and `steps` steps `steps` times that: the bound for a plain (SGD) step,
    which keeps the float32 relative error of the gradients.

    AdamW divides each coordinate's step by its own root mean square gradient: a
    coordinate whose gradient is within float32 noise of 0 (or of Adam's eps, 1e-8) can be
    moved by any share of lr in one run and not in the other (seen: 2% of one step on 1 of
    512 weights), which no float32 bound covers. Those coordinates are the rare ones with
    a vanishing gradient, so up to ADAM_OUTLIERS of them (1%) may leave the float32 bound,
    and only within Adam's own one: |m^ / sqrt(v^)| <= 1 in the first steps, so a
    coordinate moves at most lr a step and two runs differ by at most 2 lr a step. The
    faults this guards against are far above both: ranks that do not average their
    gradients move 99.9% of AdamW's coordinates past the bound, ranks that sum them
    instead (which Adam's normalization mostly hides) 7.8%, and the plain step's weights
    thousands of times past it.
    """
    assert one.keys() == two.keys()
    steps, adam = train["steps"], train["optimizer"] == "adamw"
    outliers = total = 0
    for name, a in one.items():
        a, b = a.double(), two[name].double()
        bound = steps * float32_noise(a.abs().max().item(), terms)
        off = (b - a).abs() > bound
        total += a.numel()
        if not adam:
            assert not off.any(), f"{name}: {(b - a).abs().max().item():.3g} apart > the float32 noise {bound:.3g}"
            continue
        lr = train["lr_alpha"] if name.startswith("head.") else train["lr_theta"]
        assert (b - a).abs().max().item() <= 2 * steps * lr, f"{name}: beyond AdamW's 2 lr a step ({lr})"
        outliers += int(off.sum())
    assert outliers <= ADAM_OUTLIERS * total, f"{outliers} of {total} AdamW weights past the float32 noise"


def test_shard_splits_a_batch_evenly_or_refuses() -> None:
    assert shard(list("abcd"), 2, 0) == ["a", "c"] and shard(list("abcd"), 2, 1) == ["b", "d"]
    with pytest.raises(ValueError, match="divisible"):
        shard(list("abc"), 2, 0)


VOCABULARY = 49152  # the tiny model's (tests/conftest.py), read from its config in the test below
TRAIN = {"phi": "grad", "eta": 0.5, "lr_theta": 1e-2, "lr_alpha": 1e-1, "steps": 3, "optimizer": "sgd"}


def test_the_tolerances_pass_float32_noise_and_fail_a_real_discrepancy() -> None:
    """The tolerances, on the numbers of a real run (step 2 of the calm case), let float32
    noise pass and fail a relative error of 1e-3 in any one logged number or weight, a sum
    over ranks instead of a mean, and AdamW weights off by half a step."""
    record = {"step": 2, "train/lower_loss": 6.001961, "train/upper_loss": -0.4473767, "bome/q": 0.8868685,
              "bome/lambda": 0.4979892, "bome/grad_f_norm": 0.04070661, "bome/grad_q_norm": 2.196542}
    assert_logs_match([record], [record], TRAIN, VOCABULARY)
    for key in logged_tolerances(record, TRAIN, VOCABULARY):
        nudged = {**record, key: record[key] * (1 + 1e-3)}
        with pytest.raises(AssertionError, match=key):
            assert_logs_match([nudged], [record], TRAIN, VOCABULARY)
    # issue 13's flake: q 0.0030094 against 0.0030117 from losses near 1.4 is noise, q off by
    # 5% is not; 1e-3 of so small a q (3e-6) is the float32 noise of L - L~ itself, which no
    # test can resolve (the tolerance is 2.4% of q there)
    flaky = {**record, "train/lower_loss": 1.4, "bome/q": 0.0030094}
    assert_logs_match([{**flaky, "bome/q": 0.0030117}], [flaky], TRAIN, VOCABULARY)
    with pytest.raises(AssertionError, match="bome/q"):
        assert_logs_match([{**flaky, "bome/q": 0.0030094 * 1.05}], [flaky], TRAIN, VOCABULARY)
    with pytest.raises(AssertionError, match="grad_q_norm"):  # a sum over 2 ranks instead of a mean
        assert_logs_match([{**record, "bome/grad_q_norm": 2 * record["bome/grad_q_norm"]}], [record], TRAIN, VOCABULARY)

    torch.manual_seed(0)
    weights = {"lora_B": 1e-3 * torch.randn(8, 64), "head.log_temperature": torch.tensor([0.0968])}
    assert_weights_match(weights, weights, TRAIN, VOCABULARY)
    for name in weights:
        with pytest.raises(AssertionError, match="float32 noise"):
            assert_weights_match({**weights, name: weights[name] * (1 + 1e-3)}, weights, TRAIN, VOCABULARY)
    adam = {**TRAIN, "optimizer": "adamw"}
    one_flipped = weights["lora_B"].clone()
    one_flipped[0, 0] += 2e-4  # 2% of one step on one weight: Adam amplifying noise, allowed
    assert_weights_match({**weights, "lora_B": one_flipped}, weights, adam, VOCABULARY)
    with pytest.raises(AssertionError, match="AdamW weights past"):  # every weight half a step off
        assert_weights_match({**weights, "lora_B": weights["lora_B"] + 5e-3}, weights, adam, VOCABULARY)


def _train(tmp_path: Path, tiny_model_dir: Path, method: str, ranks: int, extra: tuple[str, ...] = (),
           launcher: list[str] | None = None) -> dict[str, torch.Tensor]:
    """A 3-step `calm train` of the tiny model on `ranks` processes (torchrun unless
    `launcher` says otherwise); its final weights, metrics and train config."""
    root = tmp_path / f"{method}-{ranks}"
    args = ["-m", "calm_core.cli", "train", "--model", str(tiny_model_dir), "--method", method, "--steps", "3",
            "--batch-size", "4", "--scoring", "cloze", "--train-data", "builtin/capitals/train",
            "--heldout-data", "builtin/capitals/validation", "--eval-data", "builtin/capitals/test",
            "--train-limit", "12", "--heldout-limit", "8", "--eval-limit", "6", "--lr-theta", "1e-2",
            "--lr-alpha", "1e-1", "--set", "heldout_batch_size=4", "--set", "eval_every=0",
            "--set", "checkpoint_every=0", "--runs-root", str(root), *extra]
    if launcher is None:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else [sys.executable]
    command = launcher + args
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [p for p in root.iterdir() if (p / "status.json").is_file()]
    assert len(runs) == 1, f"expected one run for {ranks} processes, got {runs}"
    run = RunDir.open(runs[0])
    assert run.status.state == "finished" and run.status.choices.world_size == ranks
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2, 3]  # rank 0 alone writes (0: the evaluation before step 1)
    if extra == FROZEN_PREFIX:
        assert run.status.choices.frozen_prefix.used is True and run.status.extra["prefill"]["items"] > 0
    train = run.config.train
    weights_and_log = {"metrics": run.read_metrics(), "train": {**train, **train.get("bilevel", {})},  # phi, eta
                       "choices": run.status.choices.to_json()}
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
    one.pop("choices"), two.pop("choices")
    train = one.pop("train")
    assert two.pop("train") == train
    terms = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]  # the widest float32 sum
    assert_logs_match(log_two, log_one, train, terms)
    assert_weights_match(two, one, train, terms)
    moved = [name for name in one if "lora_B" in name and one[name].abs().sum() > 0]
    assert moved, "training did not move the adapter: the comparison would prove nothing"
