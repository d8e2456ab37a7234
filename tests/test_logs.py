"""Library notes go through logging (a caller can silence or capture them), the CLI prints
them as "calm: ...", and third-party noise that is not the user's business never shows."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from calm_core import logs

ROOT = Path(__file__).resolve().parent.parent


def test_a_library_note_is_a_log_record_the_caller_controls(capsys: pytest.CaptureFixture[str]) -> None:
    from calm_core.scoring import truncation

    logs.configure()
    truncation.log.warning("warning: %s", "a note")
    assert capsys.readouterr().err == "calm: warning: a note\n"
    package = logging.getLogger(logs.PACKAGE_LOGGER)
    package.setLevel(logging.ERROR)
    try:
        truncation.log.warning("warning: silenced")
        assert capsys.readouterr().err == ""
    finally:
        package.setLevel(logging.INFO)


def test_without_configure_the_library_prints_nothing() -> None:
    """A fresh Python that imports calm_core and logs a note: nothing on stderr (NullHandler)."""
    code = "import logging, calm_core.scoring.truncation as t; t.log.info('quiet'); print('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok" and "quiet" not in out.stderr


def test_bitsandbytes_kernel_noise_is_filtered_at_its_source() -> None:
    """bitsandbytes on a CPU logs at import that it could not fetch a kernel and suggests
    trust_remote_code=True; importing it after calm_core prints none of that."""
    code = "import calm_core, bitsandbytes, peft; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    assert "gemm_4bit" not in out.stderr and "trust_remote_code" not in out.stderr, out.stderr


def test_a_training_run_prints_no_third_party_deprecation(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`calm train` on a CPU: no bitsandbytes or kernels line and no FutureWarning from peft
    asking transformers' deprecated is_gradient_checkpointing (both printed on every run)."""
    import os

    env = {**os.environ, "CALM_WORKSPACE": str(tmp_path)}
    command = [sys.executable, "-m", "calm_core.cli", "train", "--model", str(tiny_model_dir), "--method", "calm",
               "--preset", "quick", "--steps", "2", "--train-limit", "8", "--heldout-limit", "8", "--eval-limit", "8"]
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    for noise in ("gemm_4bit", "kernels", "trust_remote_code", "FutureWarning", "is_gradient_checkpointing"):
        assert noise not in out.stderr and noise not in out.stdout, noise
