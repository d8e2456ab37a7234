"""Sharded training (FSDP2) on the CPU: two gloo processes whose decoder layers are sharded
(`distributed.shard_frozen`) take the same BOME steps as one process on the same global
batch, and end with its parameters.

The worker below is this file run as a script: it loads the tiny model, attaches LoRA and
an options head, and takes STEPS `bilevel_step`s on letter-scored batches (one forward
pass per closure call on every rank: FSDP's lockstep, see shard_frozen). The two runs do
the same arithmetic with the sums in another order, so they differ by float32 rounding;
the tolerances are test_distributed's, derived from the magnitudes (`float32_noise`): the
logged numbers that decide a step to their own float32 noise, each weight to STEPS times
the noise of its tensor's largest entry (assert_weights_match says why).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from calm_core.training.distributed import FsdpSettings, shard_frozen
from tests.numeric import float32_noise
from tests.test_distributed import assert_logs_match, assert_weights_match

STEPS = 3
BATCH = 4  # global batch: 2 items a rank
TRAIN = {"phi": "grad", "eta": 0.5, "lr_theta": 1e-2, "lr_alpha": 1e-1, "steps": STEPS, "optimizer": "sgd"}
ROOT = Path(__file__).resolve().parent.parent
FSDP_CONFIG = ROOT / "configs" / "accelerate" / "fsdp.yaml"


def _items(prefix: str, n: int) -> list:
    """n four-option questions, the gold option in every position."""
    from calm_core.data.schema import MCItem

    cities = ("Paris", "Rome", "Madrid", "Berlin", "Lisbon", "Vienna", "Prague", "Oslo")
    return [MCItem(f"{prefix}{i}", f"Which city is number {i} on the list?", tuple(cities[(i + j) % 8] for j in range(4)),
                   i % 4) for i in range(n)]


def _record(step: int, log: dict[str, float]) -> dict[str, float]:
    """A step's log in metrics.jsonl's names (what test_distributed's tolerances read)."""
    return {"step": step, "train/lower_loss": log["lower_loss"], "train/upper_loss": log["upper_loss"],
            **{f"bome/{k}": log[k] for k in ("q", "lambda", "grad_f_norm", "grad_q_norm")}}


def worker(model_dir: str, out: str) -> None:
    """STEPS BOME steps, sharded when the environment asks for FSDP; rank 0 writes the
    final LoRA and head weights (safetensors), the logs and the sharding record (json)."""
    from safetensors.torch import save_file

    from calm_core.calibration.head import CalibrationHead
    from calm_core.scoring.adapters import LoraSettings, attach_lora, lora_parameters
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.training import distributed
    from calm_core.training.bilevel import BilevelConfig, bilevel_step
    from calm_core.training.objectives import (
        negative_entropy,
        option_cross_entropy,
        option_logits,
    )

    torch.manual_seed(0)
    lm = load_model(ModelSpec(name=model_dir, device="cpu"))
    distributed.init_from_env(lm.device)
    model, _ = attach_lora(lm.model, LoraSettings(r=4, alpha=8))
    model.train()
    head = CalibrationHead("options", size=4)
    theta, alpha = lora_parameters(model), list(head.parameters())
    record = shard_frozen(model, [*theta, *alpha], FsdpSettings.from_env())
    local = [p.to_local().numel() for p in model.parameters() if hasattr(p, "to_local")]
    record.update(local_numel=sum(local), processes=distributed.world_size())
    optimizer = torch.optim.SGD([{"params": theta, "lr": TRAIN["lr_theta"]}, {"params": alpha, "lr": TRAIN["lr_alpha"]}])
    scoring = ScoringConfig(rule="letter")
    train_items, heldout_items = _items("t", 2 * BATCH), _items("h", 2 * BATCH)
    logs = []
    for step in range(STEPS):
        start = (step * BATCH) % len(train_items)
        train = distributed.shard(train_items[start:start + BATCH])
        heldout = distributed.shard(heldout_items[start:start + BATCH])
        gold = torch.tensor([it.answer for it in train])

        def lower(items: list = train, gold: torch.Tensor = gold) -> torch.Tensor:
            return option_cross_entropy(option_logits(model, lm.tokenizer, items, scoring, head), gold)

        def upper(items: list = heldout) -> torch.Tensor:
            return negative_entropy(option_logits(model, lm.tokenizer, items, scoring, head))

        optimizer.zero_grad(set_to_none=True)
        log = bilevel_step(alpha, theta, lower, upper, optimizer,
                           BilevelConfig(inner_steps=3, eta=TRAIN["eta"], phi=TRAIN["phi"]))
        logs.append(_record(step + 1, distributed.mean_log(log)))
    if distributed.is_main():
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        weights = {n: p.detach().contiguous() for n, p in zip(names, theta)}
        weights.update({f"head.{n}": p.detach().contiguous() for n, p in head.named_parameters()})
        save_file(weights, out + ".safetensors")
        Path(out + ".json").write_text(json.dumps({"logs": logs, "fsdp": record}))
    distributed.barrier()


def _free_port() -> int:
    """A port no one listens on (accelerate's default 29500 may be another test's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(model_dir: Path, out: Path, ranks: int) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors.torch import load_file

    script = ["-m", "tests.test_fsdp", str(model_dir), str(out)]
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP_CONFIG),
                  "--num_processes", str(ranks), "--main_process_port", str(_free_port())]  # the documented launch;
    # on the CPU its processes join with gloo
    command = accelerate + script if ranks > 1 else [sys.executable, *script]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_file(str(out) + ".safetensors"), json.loads(Path(str(out) + ".json").read_text())


@pytest.mark.slow  # 90 s on a shared 2-core machine (two model loads under accelerate, one alone)
def test_two_sharded_gloo_processes_match_one_process(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`accelerate launch --config_file configs/accelerate/fsdp.yaml` with 2 processes on the
    CPU: the config reaches the trainer's FsdpSettings, the layers are sharded, and the
    steps are one process's to float32 noise."""
    one, one_run = _run(tiny_model_dir, tmp_path / "one", ranks=1)
    two, two_run = _run(tiny_model_dir, tmp_path / "two", ranks=2)
    assert one_run["fsdp"]["used"] is False and one_run["fsdp"]["processes"] == 1
    fsdp = two_run["fsdp"]
    assert fsdp["used"] and fsdp["processes"] == 2 and fsdp["layers"] == 2 and fsdp["layer_class"] == ["LlamaDecoderLayer"]
    assert fsdp["local_numel"] == fsdp["sharded_params"] // 2  # each rank holds half of every sharded layer
    terms = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]  # the widest float32 sum
    assert_logs_match(two_run["logs"], one_run["logs"], TRAIN, terms)
    assert_weights_match(two, one, TRAIN, terms)
    moved = [n for n in one if "lora_B" in n and one[n].abs().sum() > 0]
    assert moved, "training did not move the adapter: the comparison would prove nothing"
    for record in [r for r in one_run["logs"] if r["step"] > 0]:  # theta~ is not theta: a step evaluated at theta
        lower = record["train/lower_loss"]
        assert record["bome/q"] > 100 * float32_noise(2 * lower, terms), record


LETTER = ("--scoring", "letter", "--set", "eval_every=2", "--set", "checkpoint_every=2")  # FSDP's lockstep scoring


@pytest.mark.slow
def test_calm_train_under_the_fsdp_config_matches_one_process(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`calm train` under `accelerate launch --config_file configs/accelerate/fsdp.yaml`: the
    layers are sharded, rank 0 evaluates alone (at step 2, mid-run, and at the end) and the
    run ends with one process's weights and logs, to float32 noise."""
    from tests.test_distributed import _train

    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP_CONFIG),
                  "--num_processes", "2", "--main_process_port", str(_free_port())]
    one = _train(tmp_path, tiny_model_dir, "calm", ranks=1, extra=LETTER)
    two = _train(tmp_path, tiny_model_dir, "calm", ranks=2, extra=LETTER, launcher=accelerate)
    assert two.pop("choices")["fsdp"]["used"] is True and one.pop("choices")["fsdp"]["used"] is False
    log_one, log_two, train = one.pop("metrics"), two.pop("metrics"), one.pop("train")
    two.pop("train")
    terms = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
    assert_logs_match(log_two, log_one, train, terms)
    assert_weights_match(two, one, train, terms)
    for a, b in zip(log_one, log_two):  # rank 0's evaluation on gathered layers is one process's
        evals = [k for k in a if k.startswith("eval/")]
        assert evals or a["step"] == 1
        assert all(abs(a[k] - b[k]) <= float32_noise(abs(a[k]), terms) for k in evals), (a, b)


def test_fsdp_settings_read_accelerates_environment() -> None:
    env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "false",
           "FSDP_TRANSFORMER_CLS_TO_WRAP": "LlamaDecoderLayer, MistralDecoderLayer"}
    assert FsdpSettings.from_env(env) == FsdpSettings(True, 2, False, ("LlamaDecoderLayer", "MistralDecoderLayer"))
    assert FsdpSettings.from_env({}) == FsdpSettings()


def test_fsdp_only_when_asked_and_never_fsdp1(tiny_lm) -> None:
    assert shard_frozen(tiny_lm.model, [], FsdpSettings()) == {"used": False,
                                                               "reason": "not asked for (ACCELERATE_USE_FSDP)"}
    assert shard_frozen(tiny_lm.model, [], FsdpSettings(enabled=True)) == {"used": False, "reason": "one process"}
    with pytest.raises(ValueError, match="FSDP_VERSION 2"):
        shard_frozen(tiny_lm.model, [], FsdpSettings(enabled=True, version=1))


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])
