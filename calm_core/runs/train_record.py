"""config.json's `train` as readers above training/ see it: the facts of the run's config
they use, typed, over the whole mapping as it was written.

    train = run.config.train           # TrainRecord
    train.model, train.task, train.scoring, train.eval_data, train.limit("heldout")

`TrainConfig.to_dict()` (training/config.py, a layer above) writes it, and
`TrainConfig.from_dict(train)` reads it back whole where a run is trained or resumed.
The studio, the export and the results read these attributes instead: they must read
runs written by every earlier version, which `from_dict` may refuse (a field since
renamed), so a key an older run lacks takes the default its readers always assumed.
`from_json` checks the type of every typed key that is present, refusing a damaged file
by name like any run record. It stays a read-only mapping of everything written, so
`TrainConfig.from_dict` and the portable copy (runs/portable.py) see all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.runs.record_fields import DataMapping, checked_value

_NO_ADVICE = "it was written by hand or by another program"

# The typed keys and their types as JSON holds them (checked when present).
TYPED: dict[str, Any] = {
    "model": str,
    "method": str,
    "task": str,
    "scoring": str,
    "chat_template": bool,
    "dtype": str,
    "steps": int,
    "train_data": str,
    "heldout_data": str,
    "eval_data": tuple[str, ...],
    "train_limit": int,
    "heldout_limit": int,
    "eval_limit": int,
    "head_scope": str,
    "scope": str,
    "calibrate_on": str,
    "lora": Mapping[str, Any],
    "generation": Mapping[str, Any],
}


@dataclass(frozen=True)
class TrainRecord(DataMapping):
    """The `train` mapping with its typed facts (see the module docstring)."""

    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "config.json", advice: str = _NO_ADVICE, where: str = "train"
    ) -> TrainRecord:
        """The record of a `train` object; RunFileError names the file and the wrong key."""
        if not isinstance(data, Mapping):
            return cls(checked_value(data, Mapping[str, Any], where, path, advice))
        for key, hint in TYPED.items():
            if data.get(key) is not None:
                checked_value(data[key], hint, f"{where}.{key}", path, advice)
        return cls(dict(data))

    def required(self, key: str) -> Any:
        """`key`'s value, or ValueError saying config.json's `train` lacks it."""
        if self.data.get(key) is None:
            raise ValueError(f"Expected `{key}` in config.json's `train`, but the run records none")
        return self.data[key]

    def _text(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else default

    @property
    def model(self) -> str:
        """The model as the run named it ("embedded" where an early run named none)."""
        return self._text("model") or "embedded"

    @property
    def method(self) -> str | None:
        return self._text("method")

    @property
    def task(self) -> str:
        return self._text("task") or "mcqa"

    @property
    def scoring(self) -> str | None:
        """The scoring rule the run resolved ("cloze", "letter"; None before it recorded one)."""
        return self._text("scoring")

    @property
    def chat_template(self) -> bool:
        return bool(self.data.get("chat_template"))

    @property
    def dtype(self) -> str:
        return self._text("dtype") or "auto"

    @property
    def steps(self) -> int | None:
        return _count(self.data.get("steps"))

    @property
    def train_data(self) -> str | None:
        return self._text("train_data")

    @property
    def heldout_data(self) -> str | None:
        return self._text("heldout_data")

    @property
    def eval_data(self) -> tuple[str, ...]:
        return tuple(self.data.get("eval_data") or ())

    def limit(self, part: str) -> int | None:
        """`<part>_limit` ("train", "heldout", "eval"): the item cap, None for none."""
        return _count(self.data.get(f"{part}_limit"))

    @property
    def calibrate_on(self) -> str | None:
        return self._text("calibrate_on")

    @property
    def lora(self) -> Mapping[str, Any]:
        return self.data.get("lora") or {}

    @property
    def generation(self) -> Mapping[str, Any] | None:
        return self.data.get("generation") or None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
