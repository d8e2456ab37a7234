"""Settings declared once, with their help text: the config, the `calm train` flags and the
studio's advanced settings all read the same field metadata.

    @dataclass
    class Settings:
        beta: float = setting(0.5, "weight of the entropy bonus: CE - beta * entropy", min=0.0)

A field made with `setting` is a flag (`--beta`) whose help is that text, a key of the
run's config.json, and, where a page lists it, a widget with that label, help and bounds.
The declaration also validates: `check_settings(self)` in a settings class's __post_init__
refuses a value of the wrong kind, outside `choices` or outside `min` / `max`, with
`bound_error`'s message, the same whichever front end the value came through. A
`section` field nests a dataclass of settings (TrainConfig.bilevel); its settings are
flags by their own names (`--inner-steps`), so flags stay flat while configs nest.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    label: str | None = None,
    choices: tuple[Any, ...] | Callable[[], Iterable[Any]] | None = None,
    min: float | None = None,
    max: float | None = None,
    format: str | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field that is a user-facing setting (see the module docstring): `label`
    names it in the studio (default: its name, capitalised), `choices` (a tuple, or a
    function that returns the current ones) / `min` / `max` bound the widget and the value,
    `format` is the widget's number format (e.g. "%.0e")."""
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
    field: dataclasses.Field[Any]

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def help(self) -> str:
        return str(self.field.metadata.get("help", ""))

    @property
    def label(self) -> str:
        return self.field.metadata.get("label") or self.name.replace("_", " ").capitalize()

    def meta(self, key: str) -> Any:
        """A widget bound or hint from the declaration (choices, min, max, format), or None.
        `choices` may be declared as a function, read now: a registry that grows (methods
        and tasks discovered from their folders) is its own list of choices."""
        value = self.field.metadata.get(key)
        return tuple(value()) if key == "choices" and callable(value) else value

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


def _words(value: float) -> str:
    """A bound as a person writes it: 10000000, 0.5, 1e-06."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _range_words(spec: SettingSpec) -> str:
    """ "between 1 and 100000", "at least 0", "at most 10" or "" (no bounds)."""
    low, high = spec.meta("min"), spec.meta("max")
    if low is not None and high is not None:
        return f"between {_words(low)} and {_words(high)}"
    if low is not None:
        return f"at least {_words(low)}"
    return f"at most {_words(high)}" if high is not None else ""


def allowed_words(spec: SettingSpec) -> str:
    """What a setting accepts, for a table of settings: "one of: `cloze`, `letter`",
    "1 to 512", "any", with ", or none" when None is allowed."""
    choices = spec.meta("choices")
    if choices:
        return "one of: " + ", ".join(f"`{c}`" for c in choices)
    low, high = spec.meta("min"), spec.meta("max")
    bounds = f"{_words(low)} to {_words(high)}" if low is not None and high is not None else "any"
    return bounds + (", or none" if spec.optional else "")


def _kind_words(spec: SettingSpec) -> str:
    return {int: "an integer", float: "a number", bool: "true or false"}.get(spec.kind, "text")


def _right_kind(spec: SettingSpec, value: Any) -> bool:
    if spec.kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if spec.kind is int:
        return isinstance(value, int)
    if spec.kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, str)


def bound_error(spec: SettingSpec, value: Any) -> str | None:
    """Why `value` breaks `spec`'s declaration (its kind, choices, min and max), or None.
    The one message for a value out of bounds, whichever front end it came through: the
    Python API, `calm train`'s flags and the Train page all end in `check_settings`."""
    if value is None and spec.optional:
        return None
    choices = spec.meta("choices")
    if choices:
        return None if value in choices else f"Expected `{spec.name}` to be one of {list(choices)}, but got {value!r}"
    bounds = _range_words(spec)
    wanted = f"{_kind_words(spec)} {bounds}".strip() + (" or None" if spec.optional else "")
    if not _right_kind(spec, value):
        return f"Expected `{spec.name}` to be {wanted}, but got {value!r}"
    low, high = spec.meta("min"), spec.meta("max")
    if (low is not None and value < low) or (high is not None and value > high):
        return f"Expected `{spec.name}` to be {wanted}, but got {value!r}"
    return None


def check_settings(settings: Any) -> None:
    """Raise ValueError (bound_error's message) for the first declared setting of the
    dataclass instance `settings` that breaks its declaration. Its sections check themselves
    (their own __post_init__), so this reads only `settings`' own fields."""
    for spec in dataclasses.fields(settings):
        if spec.metadata.get("flag"):
            message = bound_error(SettingSpec((spec.name,), spec), getattr(settings, spec.name))
            if message:
                raise ValueError(message)
