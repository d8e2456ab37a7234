"""BOME on the embedded model (real weights): the coupling acts and every step keeps
BOME's descent guarantee with the defaults; the earlier setting (T = 1, inner step 1e-3)
is recognised as inert."""

from __future__ import annotations

import pytest

from calm_core.training.bilevel_health import coupling_inert
from calm_core.scoring.models import load_model
from calm_core.training.config import TrainConfig
from calm_core.training.loop import train

pytestmark = pytest.mark.embedded
DATA = dict(train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation", eval_data=(),
            train_limit=12, heldout_limit=8, eval_every=0, checkpoint_every=0)


def _records(**overrides) -> list[dict]:
    records: list[dict] = []
    cfg = TrainConfig.preset("quick", method="scalar", steps=3, **DATA, **overrides)
    train(cfg, lm=load_model("embedded"), progress=lambda step, total, record: records.append(record))
    return records


def test_defaults_couple_and_every_update_decreases_q_as_bome_guarantees() -> None:
    records = _records()  # the quick preset: T = 3 Polyak steps
    assert all(r["bome/descent_ratio"] >= 1 - 1e-4 for r in records)  # <-delta, grad q> >= xi phi
    # A batch the model already answers with loss ~ 4e-4 leaves theta~ ~ theta, rightly;
    # on the others the inner solve removes most of L and alpha feels the constraint.
    learning = [r for r in records if r["train/lower_loss"] > 1e-2]
    assert len(learning) >= 2
    assert all(r["bome/inner_drop_frac"] > 0.3 and r["bome/coupling_ratio"] > 0.05 for r in learning)
    assert not coupling_inert(records, eta=0.5)


def test_the_earlier_one_tiny_inner_step_is_flagged_inert() -> None:
    records = _records(inner_steps=1, inner_rule="fixed", inner_lr=1e-3)
    assert all(r["bome/inner_drop_frac"] < 1e-2 for r in records)
    assert coupling_inert(records, eta=0.5)
