"""Model loading: the embedded conversion, local dirs, and errors that say what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from calm_core.models import (
    ModelLoadError,
    ModelSpec,
    embedded_gguf_path,
    embedded_model_dir,
    load_model,
    resolve_dtype,
)


def test_local_dir_loads_on_cpu_and_records_how(tiny_model_dir: Path) -> None:
    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))
    assert lm.info["kind"] == "local" and lm.info["device"] == "cpu" and lm.info["dtype"] == "float32"
    assert lm.info["spec"]["trust_remote_code"] is False
    assert not lm.model.training
    assert lm.tokenizer.pad_token_id is not None


def test_embedded_conversion_is_cached(embedded_dir: Path) -> None:
    assert (embedded_dir / "config.json").is_file()
    assert (embedded_dir / "model.safetensors").is_file()
    marker = json.loads((embedded_dir / "calm_conversion.json").read_text())
    assert marker["source_bytes"] == embedded_gguf_path().stat().st_size
    config = json.loads((embedded_dir / "config.json").read_text())
    assert "quantization_config" not in config  # a plain fp32 copy, loadable in 4-bit
    before = (embedded_dir / "model.safetensors").stat().st_mtime
    assert embedded_model_dir() == embedded_dir
    assert (embedded_dir / "model.safetensors").stat().st_mtime == before  # not converted again


@pytest.mark.embedded
def test_converted_copy_computes_what_the_gguf_computes(embedded_dir: Path, embedded_lm) -> None:
    from transformers import AutoModelForCausalLM

    gguf = embedded_gguf_path()
    original = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ids = embedded_lm.tokenizer("Question: What is the capital of France?\nAnswer: Paris", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = original(input_ids=ids).logits
        actual = embedded_lm.model(input_ids=ids).logits
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_missing_local_path_says_so() -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model("./no/such/model")


def test_dir_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(str(tmp_path))


def test_offline_hub_id_explains_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as info:
        load_model("calm-studio-tests/no-such-model")
    message = str(info.value)
    assert "huggingface-cli download" in message and "embedded" in message
    assert "Traceback" not in message


def test_spec_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="`dtype`"):
        ModelSpec(dtype="float8")
    with pytest.raises(ValueError, match="`name`"):
        ModelSpec(name="  ")


def test_four_bit_refuses_gguf(tmp_path: Path) -> None:
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(ModelSpec(name=str(fake), load_in_4bit=True))


def test_cpu_defaults_to_fp32() -> None:
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
