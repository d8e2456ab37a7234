"""A setting is declared once, and the declaration is what validates (issue 32, part 1).

Every declared setting of a training run (TrainConfig, its BOME section, each method's
Settings, LoRA's and answer generation's) is tried just outside its declared bounds or
choices: the Python API and `calm train` refuse it with the same message
(calm_core.settings.bound_error), and the Train page's widget carries the declared bounds,
so it cannot hold the value at all. A bound that is declared but not enforced (the old
`steps` max of 100,000) or enforced but not declared fails here.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from calm_core.generative.sampling import GenerationConfig
from calm_core.scoring.adapters import LoraSettings
from calm_core.settings import SettingSpec, bound_error, declared_settings
from calm_core.training.config import TrainConfig, train_settings
from calm_core.training.methods import METHODS


def _outside(spec: SettingSpec) -> list[Any]:
    """Values just outside the declaration: past each bound, or not a choice."""
    if spec.meta("choices"):
        return ["not-a-choice"]
    values: list[Any] = []
    low, high = spec.meta("min"), spec.meta("max")
    if spec.kind is int:
        values += [low - 1] if low is not None else []
        values += [high + 1] if high is not None else []
    elif spec.kind is float:
        values += [low - max(abs(low) * 0.5, 1e-3)] if low is not None else []
        values += [high * 1.01 + 1e-3] if high is not None else []
    return values


def _cases() -> list[tuple[str, Any]]:
    return [(name, value) for name, spec in train_settings().items() for value in _outside(spec)]


def _method_for(name: str) -> str | None:
    """The method whose Settings declare `name` (a method setting is read only for it)."""
    return next((m for m, method in METHODS.items() if method.Settings and name in _names(method.Settings)), None)


def _names(kind: type) -> set[str]:
    return {spec.name for spec in declared_settings(kind)}


def _api_message(fields: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as refused:
        TrainConfig.from_dict(fields)
    return str(refused.value)


def test_every_numeric_setting_declares_both_bounds() -> None:
    """A bound only the code knows is a second source of truth: each number declares both."""
    kinds = [TrainConfig, LoraSettings, GenerationConfig] + [m.Settings for m in METHODS.values() if m.Settings]
    for kind in kinds:
        for spec in declared_settings(kind):
            if spec.kind in (int, float) and not spec.meta("choices"):
                assert spec.meta("min") is not None and spec.meta("max") is not None, spec.path


@pytest.mark.parametrize(("name", "value"), _cases())
def test_api_and_cli_refuse_a_value_outside_its_declaration_with_one_message(name: str, value: Any, capsys) -> None:
    from calm_core.cli.commands import main

    spec = train_settings()[name]
    expected = bound_error(spec, value)
    assert expected and expected.startswith(f"Expected `{name}` to be "), (name, value, expected)
    method = _method_for(name)
    fields = {name: value, **({"method": method} if method else {})}
    assert _api_message(fields) == expected
    argv = ["train", f"--{name.replace('_', '-')}", str(value)] + (["--method", method] if method else [])
    assert main(argv) != 0
    assert capsys.readouterr().err.strip() == f"calm: error: {expected}"


@pytest.mark.parametrize("kind", [LoraSettings, GenerationConfig])
def test_nested_parts_refuse_with_the_same_message(kind: type) -> None:
    """LoRA's and generation's settings travel as parts of the config (`lora`, `generation`)."""
    part = "lora" if kind is LoraSettings else "generation"
    for spec in declared_settings(kind):
        for value in _outside(spec):
            assert _api_message({part: {spec.name: value}}) == bound_error(spec, value)


def test_inside_the_bounds_is_accepted() -> None:
    for name, spec in train_settings().items():
        low, high = spec.meta("min"), spec.meta("max")
        for value in (low, high):
            if value is None or (spec.kind is int and isinstance(value, float) and not value.is_integer()):
                continue
            method = _method_for(name)
            TrainConfig.from_dict({name: spec.kind(value), **({"method": method} if method else {})})


def test_a_setting_of_the_wrong_kind_is_refused() -> None:
    assert _api_message({"steps": 2.5}) == "Expected `steps` to be an integer between 1 and 100000, but got 2.5"
    assert _api_message({"steps": True}) == "Expected `steps` to be an integer between 1 and 100000, but got True"
    assert _api_message({"eta": math.nan}) == "Expected `eta` to be a number between 0.01 and 100, but got nan"
    assert _api_message({"eval_limit": 0}) == (
        "Expected `eval_limit` to be an integer between 1 and 10000000 or None, but got 0"
    )


def test_heldout_batch_size_is_decided_once_and_recorded() -> None:
    """Both front ends leave it unset: it follows batch_size, and config.json records it."""
    cfg = TrainConfig.preset("quick", batch_size=8)
    assert cfg.heldout_batch_size == 8 and cfg.to_dict()["heldout_batch_size"] == 8
    assert TrainConfig.preset("quick", batch_size=8, heldout_batch_size=2).heldout_batch_size == 2


def test_the_train_page_widgets_carry_the_declared_bounds(open_page, tiny_everywhere) -> None:
    """Every number the Train page asks for is bounded by its declaration (an optional count
    shows 0 for "all", so its floor is 0); a value past a bound never reaches the config."""
    at = open_page("../pages/train/train.py")
    assert not at.exception, at.exception
    shown = {n.label: n for n in at.number_input}
    specs = {**train_settings(), **{f"lora_{s.name}": s for s in declared_settings(LoraSettings)}}
    checked = 0
    for spec in specs.values():
        widget = shown.get(spec.label) or shown.get(f"{spec.label} (0: all)")
        if widget is None:
            continue
        all_is_zero = widget.label.endswith("(0: all)")
        assert widget.min == (0 if all_is_zero else spec.meta("min")), spec.path
        assert widget.max == spec.meta("max"), spec.path
        checked += 1
    assert checked >= 12, sorted(shown)  # steps, batch, the BOME and lr settings, LoRA, the limits
    before = shown["Steps"].value
    shown["Steps"].set_value(0).run()  # what a forged message could send: Streamlit drops it server-side
    assert next(n for n in at.number_input if n.label == "Steps").value == before >= 1


def test_docs_settings_is_what_calm_settings_prints() -> None:
    """docs/settings.md is generated from the declarations (`calm settings > docs/settings.md`)."""
    from pathlib import Path

    from calm_core.cli.train import settings_markdown

    doc = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
    assert doc.read_text(encoding="utf-8") == settings_markdown(), "run: calm settings > docs/settings.md"
    assert "| `steps` | `--steps` | `60` | 1 to 100000 |" in settings_markdown()
