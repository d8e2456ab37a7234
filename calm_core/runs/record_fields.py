"""The one decoder behind every typed run record (`runs/records.py`): JSON object -> frozen
dataclass, refusing damage the way `runs/damage.py` does.

A record declares its fields with ordinary annotations; `decode` checks each value against
its annotation and names the first one that is wrong, so a damaged status.json, config.json
or results.json is reported as "<file> is damaged (`step` is a str where an int belongs);
<advice>" whichever record reads it. Keys a record does not type are kept in its `extra`
mapping, so `to_json` writes back everything it read (a newer writer's fields survive an
older reader's rewrite).

A JSON null counts as an absent key: an optional field is then None, a field with a default
takes its default, and a required field (no default) is refused.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from calm_core.runs.damage import RunFileError

R = TypeVar("R")

EXTRA = "extra"  # the field that keeps the keys a record does not type
_JSON_NAMES = {int: "int", float: "number", str: "str", bool: "bool", dict: "object", list: "list"}


def damaged(path: str | Path, problem: str, advice: str) -> RunFileError:
    """The one refusal: the file, what is wrong, what to do (damage.py's template)."""
    return RunFileError(f"{path} is damaged ({problem}); {advice}")


def decode(
    cls: type[R], data: Any, path: str | Path, advice: str, keys: Mapping[str, str] | None = None, where: str = ""
) -> R:
    """`cls` built from the JSON object `data` read from `path`; RunFileError naming the file,
    the first wrong key and `advice` when a value does not fit its field's annotation.
    `keys`: field name -> JSON key where they differ (results.json's `results` is `rows`);
    `where`: the dotted key of a nested record ("recommendation.comparison"), named with
    the key that is wrong."""
    if not isinstance(data, Mapping):
        if where:
            raise _wrong(data, "object", where, path, advice)
        raise damaged(path, f"a JSON {type(data).__name__} where an object belongs", advice)
    hints = typing.get_type_hints(cls)
    keys = keys or {}
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name == EXTRA:
            continue
        key = keys.get(field.name, field.name)
        value = data.get(key)
        if value is None:
            if _required(field):
                raise damaged(path, f"`{where + '.' if where else ''}{key}` is missing", advice)
            continue
        values[field.name] = _checked(value, hints[field.name], f"{where}.{key}" if where else key, path, advice)
    typed = {keys.get(f.name, f.name) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if EXTRA in {f.name for f in dataclasses.fields(cls)}:  # type: ignore[arg-type]
        values[EXTRA] = {key: value for key, value in data.items() if key not in typed}
    return cls(**values)


def encode(record: Any, keys: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON object of a record built by `decode`: its typed fields (None and empty
    defaults left out, as `decode` reads an absent key) and its `extra` keys, as plain
    dicts and lists."""
    keys = keys or {}
    out: dict[str, Any] = dict(getattr(record, EXTRA, {}) or {})
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if field.name == EXTRA or value is None or _empty_default(field, value):
            continue
        out[keys.get(field.name, field.name)] = _plain(value)
    return out


def _empty_default(field: dataclasses.Field[Any], value: Any) -> bool:
    """A field still holding its empty default ({}): left out, so a round trip adds no key."""
    return field.default_factory is not dataclasses.MISSING and value == field.default_factory()


def _required(field: dataclasses.Field[Any]) -> bool:

    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def checked_value(value: Any, hint: Any, key: str, path: str | Path, advice: str) -> Any:
    """`value` as a field annotated `hint` holds it, or RunFileError naming `key` (for a
    record that checks its keys itself, as runs/train_record.py does)."""
    return _checked(value, hint, key, path, advice)


def _checked(value: Any, hint: Any, key: str, path: str | Path, advice: str) -> Any:
    """`value` as its field holds it (a list as a tuple, a record decoded), or RunFileError."""
    hint = _unoptional(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if hasattr(hint, "from_json"):  # a nested record with its own reader (a result row)
        return hint.from_json(value, path, advice, where=key)
    if _is_record(hint):  # a nested record: the same decoder
        return decode(hint, value, path, advice, where=key)
    if origin is tuple:
        if not isinstance(value, list):
            raise _wrong(value, "list", key, path, advice)
        return tuple(_checked(v, args[0], f"{key}[{i}]", path, advice) for i, v in enumerate(value))
    if origin is not None and issubclass(origin, Mapping):
        return _mapping(value, args[1] if len(args) == 2 else Any, key, path, advice)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise _wrong(value, _JSON_NAMES.get(hint, hint.__name__), key, path, advice)
    return value


def _unoptional(hint: Any) -> Any:
    """`X` for `X | None`; any other hint as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return options[0] if len(options) == 1 else hint
    return hint


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _mapping(value: Any, item: Any, key: str, path: str | Path, advice: str) -> Any:
    """A JSON object as its field holds it: each value decoded when they are records
    (name -> record), else the object as read."""
    if not isinstance(value, dict):
        raise _wrong(value, "object", key, path, advice)
    if _is_record(item):
        return {name: _checked(v, item, f"{key}.{name}", path, advice) for name, v in value.items()}
    return value


def _wrong(value: Any, expected: str, key: str, path: str | Path, advice: str) -> RunFileError:
    found = _JSON_NAMES.get(type(value), type(value).__name__)
    return damaged(path, f"`{key}` is {_a(found)} where {_a(expected)} belongs", advice)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _plain(value: Any) -> Any:
    """Tuples back to lists and nested records to their JSON, for json.dumps."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if _is_record(type(value)):  # a nested record without its own writer: its fields
        return encode(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class DataMapping(Mapping[str, Any]):
    """A read-only mapping over a record's whole JSON object, `data`, for records that type
    a few of its keys and keep all of them (a result row, config.json's `train`)."""

    data: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dict(self.data)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)
