"""Settings declared once, with their help text: the config, the `calm train` flags and the
studio's advanced settings all read the same field metadata.

    @dataclass
    class Settings:
        beta: float = setting(0.5, "weight of the entropy bonus: CE - beta * entropy", min=0.0)

A field made with `setting` is a flag (`--beta`) whose help is that text, a key of the
run's config.json, and, where a page lists it, a widget with that label and help. A
`section` field nests a dataclass of settings (TrainConfig.bilevel); its settings are
flags by their own names (`--inner-steps`), so flags stay flat while configs nest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    label: str | None = None,
    choices: tuple[Any, ...] | None = None,
    min: float | None = None,
    max: float | None = None,
    format: str | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field that is a user-facing setting (see the module docstring): `label`
    names it in the studio (default: its name, capitalised), `choices` / `min` / `max`
    bound the widget, `format` is the widget's number format (e.g. "%.0e")."""
    metadata = {
        "flag": True,
        "help": help,
        "label": label,
        "choices": choices,
        "min": min,
        "max": max,
        "format": format,
    }
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(kind: type, help: str = "") -> Any:
    """A nested dataclass of settings, made with its defaults."""
    return dataclasses.field(default_factory=kind, metadata={"section": kind, "help": help})


@dataclasses.dataclass(frozen=True)
class SettingSpec:
    """One declared setting: where it lives (`path`, e.g. ("bilevel", "eta")) and its field."""

    path: tuple[str, ...]
    field: dataclasses.Field

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def help(self) -> str:
        return self.field.metadata.get("help", "")

    @property
    def label(self) -> str:
        return self.field.metadata.get("label") or self.name.replace("_", " ").capitalize()

    def meta(self, key: str) -> Any:
        """A widget bound or hint from the declaration (choices, min, max, format), or None."""
        return self.field.metadata.get(key)

    @property
    def kind(self) -> type:
        """int, float, bool or str, from the annotation (`int | None` -> int)."""
        declared = self.field.type if isinstance(self.field.type, str) else getattr(self.field.type, "__name__", "")
        parts = {part.strip() for part in declared.split("|")}
        return next((kind for kind in (bool, int, float) if kind.__name__ in parts), str)

    @property
    def optional(self) -> bool:
        return "None" in str(self.field.type)


def declared_settings(kind: type, prefix: tuple[str, ...] = ()) -> Iterator[SettingSpec]:
    """Every `setting` of a dataclass, through its `section`s, in declaration order."""
    for spec in dataclasses.fields(kind):
        if spec.metadata.get("flag"):
            yield SettingSpec(prefix + (spec.name,), spec)
        elif spec.metadata.get("section"):
            yield from declared_settings(spec.metadata["section"], prefix + (spec.name,))
