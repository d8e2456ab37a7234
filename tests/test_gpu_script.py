"""bench/gpu_quick.py and bench/gpu_quick.sh, run here so the GPU benchmark cannot rot
between the rare sessions that have a GPU (docs/gpu.md).

On this CPU: the smoke run writes the JSON that the GPU run writes (every field the
docs describe); the same code path as on the GPU (NF4 through bitsandbytes' CPU
kernels, bf16 weights, bf16 autocast) runs end to end; asked for CUDA where there is
none, the script and the shell entry stop at once with exit 3 and say why, before
loading a model or installing anything.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_quick.py"
SHELL = ROOT / "bench" / "gpu_quick.sh"
METRICS = ("acc", "ece", "auroc", "aurc", "entropy", "confidence")
SETS = ("heldout", "builtin/capitals/test")  # the quick preset's S_V and evaluation set
EXIT_NOT_READY = 3
no_gpu = pytest.mark.skipif(torch.cuda.is_available() or Path("/dev/nvidia0").exists(),
                            reason="this machine has a GPU: the not-ready paths cannot be seen")


def run_script(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


def smoke_args(model: Path, out: Path, *extra: str) -> list[str]:
    """Two steps (one warm-up, one timed) on the tiny model, a few evaluation items."""
    return ["--device", "cpu", "--steps", "2", "--model", str(model), "--eval-limit", "12", "--json", str(out), *extra]


def check_variant(row: dict[str, Any], name: str, four_bit: bool, dtype: str, autocast: str) -> None:
    assert (row["variant"], row["four_bit"], row["quantization"]) == (name, four_bit, four_bit)
    assert (row["dtype"], row["autocast"]) == (dtype, autocast)
    assert (row["steps"], row["timed_steps"]) == (2, 1)
    assert row["median_step_s"] > 0 and row["first_step_s"] > 0 and row["load_s"] >= 0
    assert row["tokens_per_step_median"] > 0
    assert row["tokens_per_s"] == pytest.approx(row["tokens_per_step_median"] / row["median_step_s"])
    assert row["peak_gpu_mib"] is None and row["peak_gpu_reserved_mib"] is None  # no GPU, no figure
    assert set(row["final"]) == set(SETS)
    for values in row["final"].values():
        assert set(values) == set(METRICS)
        assert all(0.0 <= values[m] <= 1.0 for m in ("acc", "ece", "auroc", "aurc", "confidence"))
        assert 0.0 <= values["entropy"] <= math.log(4) + 1e-9  # four options


def test_cpu_smoke_writes_every_field(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu_quick.json"
    done = run_script(smoke_args(tiny_model_dir, out, "--no-4bit"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == "gpu_quick" and record["smoke"] is True and record["complete"] is True
    assert record["settings"]["steps"] == 2 and record["settings"]["preset"] == "quick"
    assert record["settings"]["method"] == "calm" and record["settings"]["autocast"] == "none"
    versions = record["versions"]
    assert versions["torch"] == torch.__version__ and versions["torch_cuda"] == torch.version.cuda
    assert versions["gpu"] is None and versions["transformers"] and versions["peft"]
    assert [row["variant"] for row in record["variants"]] == ["lora"]
    check_variant(record["variants"][0], "lora", False, "float32", "none")
    assert "s/step" in done.stdout and "tok/s" in done.stdout and "builtin/capitals/test" in done.stdout


def test_gpu_code_path_runs_on_cpu(tiny_model_dir: Path, tmp_path: Path) -> None:
    """QLoRA then LoRA with bf16 weights under bf16 autocast, as on the GPU (only the
    kernels differ): a dtype clash in the trainer would fail here, not on a lent GPU."""
    out = tmp_path / "gpu_quick.json"
    done = run_script(smoke_args(tiny_model_dir, out, "--dtype", "bfloat16", "--autocast", "bf16"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["versions"]["bitsandbytes"]
    assert [row["variant"] for row in record["variants"]] == ["qlora", "lora"]
    check_variant(record["variants"][0], "qlora", True, "bfloat16", "bf16")
    check_variant(record["variants"][1], "lora", False, "bfloat16", "bf16")


@no_gpu
def test_script_stops_at_once_without_cuda(tmp_path: Path) -> None:
    out = tmp_path / "gpu_quick.json"
    done = run_script(["--steps", "1", "--json", str(out)], tmp_path)  # --device cuda is the default
    assert done.returncode == EXIT_NOT_READY
    assert "not ready" in done.stderr and ("CUDA" in done.stderr or "GPU" in done.stderr)
    assert "gpu_quick: qlora" not in done.stdout  # stopped before any model was loaded
    assert not out.exists()


@no_gpu
def test_shell_entry_stops_without_a_gpu_and_installs_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "CALM_GPU_PYTHON": sys.executable, "CALM_GPU_STATE": str(tmp_path / "state"),
           "CALM_GPU_CARRY": str(tmp_path / "carry")}
    done = subprocess.run(["bash", str(SHELL), "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_NOT_READY, done.stderr[-2000:]
    assert "GPU" in done.stderr
    assert not (tmp_path / "state" / "venv").exists()  # no torch download on a machine without a GPU


def test_shell_entry_passes_a_cpu_smoke_through(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The device command's wiring (interpreter choice, package checks, PYTHONPATH, exit
    status, the JSON) with `--device cpu`, which needs no GPU."""
    out = tmp_path / "gpu_quick.json"
    env = {**os.environ, "CALM_GPU_PYTHON": sys.executable, "CALM_GPU_STATE": str(tmp_path / "state"),
           "CALM_GPU_CARRY": str(tmp_path / "carry")}
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(SHELL), "run", *smoke_args(tiny_model_dir, out, "--no-4bit")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["variants"][0]["variant"] == "lora"
    assert (tmp_path / "state" / "gpu_quick.log").read_text().count("wrote ") == 1


def test_shell_entry_refuses_a_model_wheel_missing_its_staged_half(tmp_path: Path) -> None:
    """Device call 2 on a machine that lost call 1's staging (it was given back between
    them) stops with exit 4 and says to make both calls again, before loading anything."""
    carry = tmp_path / "carry" / "run"
    carry.mkdir(parents=True)
    (carry / "model-0.1-py3-none-any.whl.part1").write_bytes(b"second half")
    (carry / "MANIFEST").write_text(f"{'0' * 64}  model-0.1-py3-none-any.whl\n")
    env = {**os.environ, "CALM_GPU_PYTHON": sys.executable, "CALM_GPU_STATE": str(tmp_path / "state"),
           "CALM_GPU_CARRY": str(tmp_path / "carry")}
    done = subprocess.run(["bash", str(SHELL), "run", "--device", "cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 4, done.stderr[-2000:]
    assert "incomplete (checksum)" in done.stderr and "stage" in done.stderr
    assert "gpu_quick:" not in done.stdout  # the benchmark never started
