"""Which fast paths a model gets, decided by measurement: each proves itself once against
the model's own forward (`scoring.probes`), and steps aside with a recorded reason where
it differs or raises.

    support = fast_paths(model)                 # hidden path, feature capture, prefix sharing
    verdict = frozen_prefix_verdict(model, 2)   # the frozen prefix below layer 2 (training)
    choices = fast_path_choices(model, split)   # what a run records (status.json `choices`)

Why measured: every fast path is a claim about the model's forward (that its last hidden
state times its LM head is its logits, that its bottom layers can be run apart), and
attribute names are no evidence of it: Gemma 3 has Llama's names and not its rotary
embedding. A path that is wrong silently trains and scores wrong, so the probe is the
guard, whatever the family.

The verdict is kept on the model object (a second call costs nothing) and on disk under
cache_dir()/fast_paths/, keyed by the model's fingerprint and config, its dtype, device
and attention implementation, the torch and transformers versions, and a hash of the
source of the modules that implement the paths (`CODE_MODULES`): an edit to the code
measures again, an unchanged model and code never do.
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
from calm_core.scoring.forward import causal_lm

SCORING_PATHS = ("hidden_path", "feature_capture", "prefix_sharing")
# Relative gap allowed between a fast path and the model's own forward: max |fast - own|
# over max(1, max |own|). float32 reorderings stay near 1e-7 (tests/numeric.py); Gemma 2's
# missing soft-cap was 2e-4 on a tiny random model, so 1e-5 tells them apart. bfloat16
# keeps 8 bits of mantissa (4e-3 per rounding), summed over layers.
LOGIT_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9, torch.bfloat16: 3e-2, torch.float16: 5e-3}
# Gradients sum over more terms (and a shared prefix adds them in another order): 10x.
GRAD_FACTOR = 10.0
CODE_MODULES = ("decoder", "forward", "frozen_prefix", "logprobs", "probes", "fast_paths")
_ATTRIBUTE = "_calm_fast_paths"  # on the CausalLM: {"scoring": FastPathSupport, "frozen": {split: PathVerdict}}


@dataclass(frozen=True)
class PathVerdict:
    """One fast path for one model: used or not, why, and the relative gap measured."""

    on: bool
    reason: str
    gap: float | None = None
    share_top: bool = True  # the frozen prefix only: False where sharing a prefix in the top layers failed alone

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PathVerdict:
        share_top = bool(data.get("share_top", True))
        return cls(on=bool(data["on"]), reason=str(data["reason"]), gap=data.get("gap"), share_top=share_top)


@dataclass(frozen=True)
class FastPathSupport:
    """The scoring fast paths' verdicts for one model (the frozen prefix is per split)."""

    hidden_path: PathVerdict
    feature_capture: PathVerdict
    prefix_sharing: PathVerdict

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).to_dict() for name in SCORING_PATHS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FastPathSupport:
        return cls(**{name: PathVerdict.from_dict(data[name]) for name in SCORING_PATHS})

    @classmethod
    def all_off(cls, reason: str) -> FastPathSupport:
        return cls(**{name: PathVerdict(False, reason) for name in SCORING_PATHS})


def tolerance(model: Any) -> float:
    """The declared logit tolerance for the model's parameter dtype (LOGIT_TOLERANCE)."""
    dtype = next(causal_lm(model).parameters()).dtype
    return LOGIT_TOLERANCE.get(dtype, LOGIT_TOLERANCE[torch.bfloat16])


def fast_paths(model: Any) -> FastPathSupport:
    """The measured scoring fast paths of `model` (a CausalLM or a PEFT model over one):
    from the model object, else from the disk cache, else measured now (a few short
    forward passes) and kept in both."""
    lm = causal_lm(model)
    kept = _kept(lm)
    if "scoring" in kept:
        return kept["scoring"]
    stored = _read(lm).get("scoring")
    if stored is not None:
        support = FastPathSupport.from_dict(stored)
    else:
        from calm_core.scoring.probes import probe_scoring_paths

        kept["scoring"] = FastPathSupport.all_off("being measured")  # the probe's own calls take plain paths
        try:
            support = probe_scoring_paths(model, tolerance(model))
        finally:
            del kept["scoring"]
        _write(lm, "scoring", support.to_dict())
    kept["scoring"] = support
    return support


def frozen_prefix_verdict(model: Any, split: int) -> PathVerdict:
    """Whether a FrozenPrefixModel split below layer `split` computes the model's own
    logits and LoRA gradients (`probes.probe_frozen_prefix`), cached as `fast_paths`."""
    lm = causal_lm(model)
    frozen = _kept(lm).setdefault("frozen", {})
    if split in frozen:
        return frozen[split]
    stored = _read(lm).get("frozen_prefix", {}).get(str(split))
    if stored is not None:
        verdict = PathVerdict.from_dict(stored)
    else:
        from calm_core.scoring.probes import probe_frozen_prefix

        verdict = probe_frozen_prefix(model, split, tolerance(model))
        _write(lm, "frozen_prefix", {**_read(lm).get("frozen_prefix", {}), str(split): verdict.to_dict()})
    frozen[split] = verdict
    return verdict


def fast_path_choices(model: Any, frozen_prefix: PathVerdict | None = None) -> dict[str, dict[str, Any]]:
    """What a run records in its choices (`fast_paths`): each path, used or not, and why."""
    choices = {name: verdict.to_dict() for name, verdict in _named(fast_paths(model))}
    if frozen_prefix is not None:
        choices["frozen_prefix"] = frozen_prefix.to_dict()
    return choices


def _named(support: FastPathSupport) -> list[tuple[str, PathVerdict]]:
    return [(name, getattr(support, name)) for name in SCORING_PATHS]


def forget(model: Any) -> None:
    """Drop the verdicts kept on the model object (the disk cache stays): the next call measures or reads again."""
    lm = causal_lm(model)
    if hasattr(lm, _ATTRIBUTE):
        delattr(lm, _ATTRIBUTE)


def _kept(lm: Any) -> dict[str, Any]:
    if not hasattr(lm, _ATTRIBUTE):
        object.__setattr__(lm, _ATTRIBUTE, {})  # not a Module attribute: no state dict, no submodule
    return getattr(lm, _ATTRIBUTE)


def verdict_folder() -> Path:
    """Where verdicts are kept: cache_dir()/fast_paths (a test points it elsewhere)."""
    return cache_dir() / "fast_paths"


def verdict_path(model: Any) -> Path:
    """The JSON file that holds `model`'s verdicts (`verdict_folder`)."""
    return verdict_folder() / f"{probe_key(causal_lm(model))}.json"


def probe_key(lm: Any) -> str:
    """What a verdict depends on, hashed: the model's files and config, how it runs here,
    the library versions and this code (CODE_MODULES' source)."""
    import transformers

    config = lm.config
    source = str(getattr(config, "_name_or_path", "") or "")
    parameter = next(lm.parameters())
    parts = [
        type(lm).__name__,
        (model_fingerprint(source) if source else None) or "",
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


def _read(lm: Any) -> dict[str, Any]:
    path = verdict_path(lm)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(lm: Any, section: str, value: Any) -> None:
    """Best effort: a read-only cache costs a second measurement, never a failure. The
    model's files' fingerprint, dtype and device go beside the verdicts, so a page can
    find them without loading the model (`known_fast_paths`)."""
    path = verdict_path(lm)
    parameter = next(lm.parameters())
    about = {
        "fingerprint": _files_fingerprint(lm),
        "model_type": getattr(lm.config, "model_type", None),
        "dtype": str(parameter.dtype).removeprefix("torch."),
        "device": parameter.device.type,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {**_read(lm), **about, section: value})
    except OSError:
        pass


def _files_fingerprint(lm: Any) -> str | None:
    source = str(getattr(lm.config, "_name_or_path", "") or "")
    return model_fingerprint(source) if source else None


def known_fast_paths(fingerprint: str | None) -> dict[str, Any] | None:
    """The newest verdicts measured on this machine for a model whose files have this
    `provenance.model_fingerprint` (any dtype or device): the JSON `_write` keeps, or None."""
    if not fingerprint:
        return None
    folder = verdict_folder()
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("fingerprint") == fingerprint and "scoring" in data:
            found.append((path.stat().st_mtime, data))
    return max(found, key=lambda pair: pair[0])[1] if found else None
