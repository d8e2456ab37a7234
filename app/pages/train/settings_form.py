"""Widgets for declared settings (calm_core.settings): label, help, bounds and choices come
from the field's metadata, so the studio shows a setting as `calm train --help` does."""

from __future__ import annotations

from typing import Any

from app.widgets.words import helps
from calm_core.settings import SettingSpec


def current_value(config: Any, spec: SettingSpec) -> Any:
    """The value a config holds for a setting (through its sections: bilevel.eta)."""
    for part in spec.path:
        config = getattr(config, part)
    return config


def setting_input(container: Any, spec: SettingSpec, value: Any, key: str) -> Any:
    """A selectbox for a setting with choices, a number input for an int or float one."""
    label, help_text = spec.label, spec.help
    defined = helps(spec.label) or helps(spec.name)  # eta, "Inner steps T": the glossary's words too
    if defined:
        help_text = f"{help_text}\n\n{defined}"
    choices = spec.meta("choices")
    if choices:
        options = list(choices)
        return container.selectbox(
            label, options, index=options.index(value) if value in options else 0, key=key, help=help_text
        )
    if spec.kind in (int, float):
        cast = spec.kind
        bounds = {name: cast(spec.meta(name)) for name in ("min", "max") if spec.meta(name) is not None}
        extra = {"format": spec.meta("format")} if spec.meta("format") else {}
        return container.number_input(
            label,
            min_value=bounds.get("min"),
            max_value=bounds.get("max"),
            value=cast(value),
            key=key,
            help=help_text,
            **extra,
        )
    return container.text_input(label, value="" if value is None else str(value), key=key, help=help_text)


def optional_count_input(container: Any, spec: SettingSpec, value: int | None, key: str) -> int | None:
    """An optional count (None: all) as a number input where 0 stands for None, bounded
    above by the declaration; its label says so ("Training items (0: all)")."""
    number = container.number_input(
        f"{spec.label} (0: all)",
        min_value=0,
        max_value=int(spec.meta("max")),
        value=int(value or 0),
        key=key,
        help=spec.help,
    )
    return int(number) or None
