"""Which fast paths a model gets, decided by measurement: each proves itself once against
the model's own forward (`scoring.probes`), and steps aside with a recorded reason where
it differs or raises.

    support = fast_paths(model)                 # hidden path, feature capture, prefix sharing
    check = frozen_prefix_check(model, 2)   # the frozen prefix below layer 2 (training)
    choices = fast_path_choices(model, split)   # what a run records (status.json `choices`)

Why measured: every fast path is a claim about the model's forward (that its last hidden
state times its LM head is its logits, that its bottom layers can be run apart), and
attribute names are no evidence of it: Gemma 3 has Llama's names and not its rotary
embedding. A path that is wrong silently trains and scores wrong, so the probe is the
guard, whatever the family.

This module measures; the checks and their cache are `scoring.path_checks` (on the model
object and on disk, keyed by the model's fingerprint and this code). Whoever is about to
run a model calls `fast_paths` first (the `Scorer` when it is built, the training loop
when it builds a run's context); the paths below read what it kept, and a model nobody
measured runs the plain forward.
"""

from __future__ import annotations

from typing import Any

import torch

from calm_core.scoring.forward import causal_lm
from calm_core.scoring.path_checks import (
    SCORING_PATHS,
    FastPathSupport,
    PathCheck,
    keep_support,
    kept_frozen,
    kept_support,
    read_stored,
    store,
)
from calm_core.scoring.probes import probe_frozen_prefix, probe_scoring_paths

# Relative gap allowed between a fast path and the model's own forward: max |fast - own|
# over max(1, max |own|). float32 reorderings stay near 1e-7 (tests/numeric.py); Gemma 2's
# missing soft-cap was 2e-4 on a tiny random model, so 1e-5 tells them apart. bfloat16
# keeps 8 bits of mantissa (4e-3 per rounding), summed over layers.
LOGIT_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def tolerance(model: Any) -> float:
    """The declared logit tolerance for the model's parameter dtype (LOGIT_TOLERANCE)."""
    dtype = next(causal_lm(model).parameters()).dtype
    return LOGIT_TOLERANCE.get(dtype, LOGIT_TOLERANCE[torch.bfloat16])


def fast_paths(model: Any) -> FastPathSupport:
    """The measured scoring fast paths of `model` (a CausalLM or a PEFT model over one):
    from the model object, else from the disk cache, else measured now (a few short
    forward passes) and kept in both."""
    lm = causal_lm(model)
    support = kept_support(lm)
    if support is not None:
        return support
    stored = read_stored(lm).get("scoring")
    if stored is not None:
        support = FastPathSupport.from_dict(stored)
    else:
        keep_support(lm, FastPathSupport.all_off("being measured"))  # the probe's own calls take plain paths
        try:
            support = probe_scoring_paths(model, tolerance(model))
        finally:
            keep_support(lm, None)
        store(lm, "scoring", support.to_dict())
    keep_support(lm, support)
    return support


def frozen_prefix_check(model: Any, split: int) -> PathCheck:
    """Whether a FrozenPrefixModel split below layer `split` computes the model's own
    logits and LoRA gradients (`probes.probe_frozen_prefix`), cached as `fast_paths`."""
    lm = causal_lm(model)
    frozen = kept_frozen(lm)
    if split in frozen:
        return frozen[split]
    stored = read_stored(lm).get("frozen_prefix", {}).get(str(split))
    if stored is not None:
        check = PathCheck.from_dict(stored)
    else:
        check = probe_frozen_prefix(model, split, tolerance(model))
        store(lm, "frozen_prefix", {**read_stored(lm).get("frozen_prefix", {}), str(split): check.to_dict()})
    frozen[split] = check
    return check


def fast_path_choices(model: Any, frozen_prefix: PathCheck | None = None) -> dict[str, dict[str, Any]]:
    """What a run records in its choices (`fast_paths`): each path, used or not, and why."""
    support = fast_paths(model)
    choices = {name: getattr(support, name).to_dict() for name in SCORING_PATHS}
    if frozen_prefix is not None:
        choices["frozen_prefix"] = frozen_prefix.to_dict()
    return choices
