"""Model loading: the embedded conversion, local dirs, and errors that say what to do."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import torch

from calm_core.scoring import models
from calm_core.scoring.models import (
    ModelLoadError,
    ModelSpec,
    _probe_address,
    embedded_gguf_path,
    embedded_model_dir,
    hub_unreachable_reason,
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


_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
               "NO_PROXY", "no_proxy")


@pytest.fixture()
def hub_at(monkeypatch: pytest.MonkeyPatch):
    """hub_at(port): HF_ENDPOINT on a local port, online mode, no proxies (deterministic)."""
    for name in (*_PROXY_VARS, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)

    def point(port: int) -> None:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")

    return point


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket closes


def test_unreachable_hub_fails_fast_and_says_what_to_do(hub_at) -> None:
    hub_at(_closed_port())
    started = time.monotonic()
    with pytest.raises(ModelLoadError) as info:
        load_model(ModelSpec(name="calm-studio-tests/no-such-model", device="cpu"))
    assert time.monotonic() - started < 10  # huggingface_hub's own retries took 50 s here
    message = str(info.value)
    assert "cannot connect to 127.0.0.1" in message and "local cache" in message
    assert "huggingface-cli download calm-studio-tests/no-such-model" in message and "embedded" in message


def test_probe_passes_when_the_endpoint_listens(hub_at) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        hub_at(server.getsockname()[1])
        assert hub_unreachable_reason(timeout=2) is None


def test_probe_honours_offline_mode_and_proxies(hub_at, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_unreachable_reason() == "HF_HUB_OFFLINE is set"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert _probe_address("https://huggingface.co") == ("proxy.internal", 3128)  # httpx connects there first
    assert _probe_address("http://127.0.0.1:9") == ("127.0.0.1", 9)


@pytest.mark.parametrize("reachable", [True, False])
def test_hub_download_runs_as_before_when_the_probe_passes(monkeypatch: pytest.MonkeyPatch,
                                                           reachable: bool) -> None:
    """The probe only narrows: a reachable Hub gets the normal download, an unreachable
    one the local cache (so a model downloaded earlier still loads offline)."""
    seen: dict[str, object] = {}

    def fake_from_pretrained(source: str, **kwargs: object) -> None:
        seen.update(kwargs)
        raise OSError("stop here")

    monkeypatch.setattr(models, "hub_unreachable_reason", lambda: None if reachable else "no route")
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", fake_from_pretrained)
    with pytest.raises(ModelLoadError, match="stop here" if reachable else "no route"):
        load_model(ModelSpec(name="some-org/some-model", device="cpu"))
    assert seen.get("local_files_only", False) is (not reachable)
