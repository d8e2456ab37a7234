"""Facts about a run that pages state beside its figures: the head scope it really has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def head_scope(train: Mapping[str, Any]) -> str:
    """The head scope a run really has: `head_scope` as config.json records it, else (runs
    made before it was recorded) the config's resolution of `auto` and a method's forced
    scope; what the config says when it comes from another version and no longer validates."""
    from calm_core.training.config import TrainConfig

    if train.get("head_scope"):
        return str(train["head_scope"])
    try:
        return TrainConfig.from_dict(dict(train)).effective_scope
    except (TypeError, ValueError):
        return str(train.get("scope"))
