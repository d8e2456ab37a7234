"""The thermometer builder for any model (training/thermometer_build.py): a tiny model's
thermometer names it, lands where runs on that model look for it (thermometer_path),
and a run on that model finds it while a run on another is refused; the shipped files
are keyed to their models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.calibration import thermometer as thermometer_module
from calm_core.calibration.thermometer import (
    SHIPPED_DIR,
    load_thermometer,
    model_key,
    run_thermometer,
    thermometer_path,
)


def test_model_keys_are_file_names_that_keep_models_apart() -> None:
    assert model_key("embedded") == "embedded" and model_key("gemma3-270m") == "gemma3-270m"
    a, b = model_key("/models/a/llama"), model_key("/models/b/llama")
    assert a != b and a.startswith("llama-") and "/" not in a
    assert "/" not in model_key("HuggingFaceTB/SmolLM2-360M-Instruct")


def test_named_models_read_their_shipped_file_and_others_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path))
    assert thermometer_path("embedded") == SHIPPED_DIR / "thermometer_embedded.json"
    other = thermometer_path("/models/mine")
    assert other.parent == tmp_path / "thermometers" and other.name.startswith("thermometer_mine-")
    shipped = sorted(SHIPPED_DIR.glob("thermometer_*.json"))
    for path in shipped:  # each shipped file is read for the model it names, and by nothing else
        model = load_thermometer(path).model
        assert path.name == f"thermometer_{model_key(model)}.json" and thermometer_path(model) == path


@pytest.mark.skipif(not (SHIPPED_DIR / "thermometer_gemma3-270m.json").is_file(), reason="not built yet")
def test_gemma_ships_its_own_thermometer() -> None:
    thermo = load_thermometer(SHIPPED_DIR / "thermometer_gemma3-270m.json")
    assert thermo.model == "gemma3-270m" and thermo.scoring == "cloze" and len(thermo.trained_on) >= 3
    assert len(thermo.mean) in (0, 640)  # Gemma 3 270M's hidden size


def test_the_builder_makes_a_tiny_models_thermometer_that_its_runs_find(
    tiny_lm, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calm_core.training import thermometer_build

    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CALM_DATA_DIR", str(tmp_path / "no-shared-data"))  # the built-in sets only
    model = str(tiny_model_dir)
    out = thermometer_path(model)
    thermo, rows = thermometer_build.build(tiny_lm, model, limit=10, out=out)  # 10: the oracle TS's least
    assert out.is_file() and out.parent == tmp_path / "cache" / "thermometers"
    saved = load_thermometer(out)
    assert saved.model == model and saved.scoring == "cloze" and len(saved.trained_on) == 6
    assert {r["domain"] for r in rows} == {name.replace("validation", "test") for name in saved.trained_on}
    scores = thermometer_build.score_cache(model)
    assert scores.parent == tmp_path / "cache" / "thermometer" and len(list(scores.glob("*.parquet"))) == 12
    width = tiny_lm.model.config.hidden_size
    found, why = run_thermometer(model, "cloze", width)
    assert why is None and found is not None and found.model == model
    _, why = run_thermometer("/another/model", "cloze", width)
    assert "none is built for /another/model" in why and "--model /another/model" in why
    monkeypatch.setattr(thermometer_module, "thermometer_path", lambda m: out)  # another model's file, read anyway
    _, why = run_thermometer("/another/model", "cloze", width)
    assert f"reads {model}'s hidden states" in why


def test_the_cli_builds_for_the_model_it_is_given(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from calm_core.training import thermometer_build

    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CALM_DATA_DIR", str(tmp_path / "no-shared-data"))
    monkeypatch.setattr(thermometer_build, "TRAIN_SETS", thermometer_build.TRAIN_SETS[:4])  # leave-one-out trains on 3
    monkeypatch.setattr(thermometer_build, "TEST_OF", dict(list(thermometer_build.TEST_OF.items())[:1]))
    table = tmp_path / "table.json"
    argv = ["--model", str(tiny_model_dir), "--limit", "10", "--table", str(table)]
    assert thermometer_build.main(argv) == 0
    assert load_thermometer(thermometer_path(str(tiny_model_dir))).model == str(tiny_model_dir)
    assert json.loads(table.read_text())["model"] == str(tiny_model_dir)
    assert "thermometer:" in capsys.readouterr().out
    table.unlink()
    alone = tmp_path / "alone.json"
    assert thermometer_build.main([*argv, "--no-table", "--out", str(alone)]) == 0  # the scores are cached now
    assert load_thermometer(alone).model == str(tiny_model_dir) and not table.exists()


def test_a_thermometer_built_under_letter_and_chat_serves_only_runs_under_that_rule(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The paper's setting (letter answers in the chat template) reads another hidden state
    than cloze: the build records the rule with the template, keeps its scores apart from
    cloze's, and a run under cloze or under plain letters is refused it."""
    from calm_core.training import thermometer_build

    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CALM_DATA_DIR", str(tmp_path / "no-shared-data"))
    monkeypatch.setattr(thermometer_build, "TRAIN_SETS", thermometer_build.TRAIN_SETS[:4])
    out = tmp_path / "letter.json"
    argv = ["--model", str(tiny_model_dir), "--limit", "10", "--no-table", "--out", str(out)]
    assert thermometer_build.main([*argv, "--scoring", "letter", "--chat"]) == 0
    assert load_thermometer(out).scoring == "letter+chat"
    cached = sorted(p.name for p in thermometer_build.score_cache(str(tiny_model_dir)).glob("*.parquet"))
    assert len(cached) == 4 and all(name.endswith("-10-letter_chat.parquet") for name in cached)
    width = None
    monkeypatch.setattr(thermometer_module, "thermometer_path", lambda m: out)
    found, why = run_thermometer(str(tiny_model_dir), "letter+chat", width)
    assert found is not None and why is None
    for other in ("cloze", "letter"):
        found, why = run_thermometer(str(tiny_model_dir), other, width)
        assert found is None and f"was trained under letter+chat scoring, not {other}" in why
