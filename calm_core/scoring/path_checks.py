"""The fast paths' checks and where they are kept: on the model object (a second look
costs nothing) and on disk under cache_dir()/fast_paths/, keyed by what a check depends
on. Only records and storage live here, no measuring: `scoring.fast_paths` measures (with
`scoring.probes`) and keeps its checks here; `forward` and `options` read what was kept.

    support = kept_support(lm)          # FastPathSupport, or None when nothing measured it
    kept_frozen(lm)[split]              # the frozen prefix's PathCheck per split

Why a module of its own: the functions that use a fast path (`forward.hidden_path`,
`forward.head_inputs`) sit below the probes that measure it. Reading the check from
here keeps every import pointing down; a path nobody measured for a model is not used.

The disk key (`probe_key`) hashes the model's fingerprint and config, its dtype, device
and attention implementation, the torch and transformers versions, and the source of the
modules that implement the paths (`CODE_MODULES`): an edit to the code measures again,
an unchanged model and code never do.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from calm_core.io import atomic_write_json
from calm_core.paths import cache_dir
from calm_core.provenance import model_fingerprint

SCORING_PATHS = ("hidden_path", "feature_capture", "prefix_sharing")
CODE_MODULES = ("decoder", "forward", "frozen_prefix", "logprobs", "probes", "fast_paths", "path_checks")
_ATTRIBUTE = "_calm_fast_paths"  # on the CausalLM: {"scoring": FastPathSupport, "frozen": {split: PathCheck}}


@dataclass(frozen=True)
class PathCheck:
    """One fast path for one model: used or not, why, and the relative gap measured."""

    on: bool
    reason: str
    gap: float | None = None
    share_top: bool = True  # the frozen prefix only: False where sharing a prefix in the top layers failed alone

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PathCheck:
        share_top = bool(data.get("share_top", True))
        return cls(on=bool(data["on"]), reason=str(data["reason"]), gap=data.get("gap"), share_top=share_top)


@dataclass(frozen=True)
class FastPathSupport:
    """The scoring fast paths' checks for one model (the frozen prefix is per split)."""

    hidden_path: PathCheck
    feature_capture: PathCheck
    prefix_sharing: PathCheck

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).to_dict() for name in SCORING_PATHS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FastPathSupport:
        return cls(**{name: PathCheck.from_dict(data[name]) for name in SCORING_PATHS})

    @classmethod
    def all_off(cls, reason: str) -> FastPathSupport:
        return cls(**{name: PathCheck(False, reason) for name in SCORING_PATHS})


NOT_MEASURED = FastPathSupport.all_off("not measured for this model (scoring.fast_paths measures it)")


def kept_support(lm: Any) -> FastPathSupport | None:
    """The scoring checks kept on the CausalLM `lm`, or None: nothing measured them yet."""
    return _kept(lm).get("scoring")


def keep_support(lm: Any, support: FastPathSupport | None) -> None:
    """Keep `support` on `lm` for every later reader; None drops it (the next look measures)."""
    if support is None:
        _kept(lm).pop("scoring", None)
    else:
        _kept(lm)["scoring"] = support


def kept_frozen(lm: Any) -> dict[int, PathCheck]:
    """The frozen prefix's checks kept on `lm`, by split layer (a dict to fill)."""
    frozen: dict[int, PathCheck] = _kept(lm).setdefault("frozen", {})
    return frozen


def _kept(lm: Any) -> dict[str, Any]:
    if not hasattr(lm, _ATTRIBUTE):
        object.__setattr__(lm, _ATTRIBUTE, {})  # not a Module attribute: no state dict, no submodule
    kept: dict[str, Any] = getattr(lm, _ATTRIBUTE)
    return kept


def checks_folder() -> Path:
    """Where checks are kept: cache_dir()/fast_paths (a test points it elsewhere)."""
    return cache_dir() / "fast_paths"


def checks_path(lm: Any) -> Path:
    """The JSON file that holds the CausalLM `lm`'s checks (`checks_folder`)."""
    return checks_folder() / f"{probe_key(lm)}.json"


def probe_key(lm: Any) -> str:
    """What a check depends on, hashed: the model's files and config, how it runs here,
    the library versions and this code (CODE_MODULES' source)."""
    import transformers

    config = lm.config
    parameter = next(lm.parameters())
    parts = [
        type(lm).__name__,
        _files_fingerprint(lm) or "",
        config.to_json_string(use_diff=False),
        str(parameter.dtype),
        parameter.device.type,
        str(getattr(config, "_attn_implementation", None)),
        str(bool(getattr(lm, "is_loaded_in_4bit", False))),
        transformers.__version__,
        torch.__version__,
        _code_version(),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def _code_version() -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in CODE_MODULES:
        digest.update((here / f"{name}.py").read_bytes())
    return digest.hexdigest()[:16]


def read_stored(lm: Any) -> dict[str, Any]:
    """Everything stored on disk for `lm` (`checks_path`), {} when nothing is or it is unreadable."""
    try:
        stored: dict[str, Any] = json.loads(checks_path(lm).read_text())
    except (OSError, ValueError):
        return {}
    return stored


def store(lm: Any, section: str, value: Any) -> None:
    """Best effort: a read-only cache costs a second measurement, never a failure. The
    model's files' fingerprint, dtype and device go beside the checks, so a page can
    find them without loading the model (`known_fast_paths`)."""
    path = checks_path(lm)
    parameter = next(lm.parameters())
    about = {
        "fingerprint": _files_fingerprint(lm),
        "model_type": getattr(lm.config, "model_type", None),
        "dtype": str(parameter.dtype).removeprefix("torch."),
        "device": parameter.device.type,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {**read_stored(lm), **about, section: value})
    except OSError:
        pass


def _files_fingerprint(lm: Any) -> str | None:
    source = str(getattr(lm.config, "_name_or_path", "") or "")
    return model_fingerprint(source) if source else None


def known_fast_paths(fingerprint: str | None) -> dict[str, Any] | None:
    """The newest checks measured on this machine for a model whose files have this
    `provenance.model_fingerprint` (any dtype or device): the JSON `store` keeps, or None."""
    if not fingerprint:
        return None
    folder = checks_folder()
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("fingerprint") == fingerprint and "scoring" in data:
            found.append((path.stat().st_mtime, data))
    return max(found, key=lambda pair: pair[0])[1] if found else None
