"""What a run's held-out part S_V supports, said before launch in the same words by the
Train page and `calm train` (the sentence itself is data/split_sizes.heldout_support).

    support_sentence(cfg)   # "24 held-out items: enough to fit one temperature, not to choose between methods ..."

The counts are the datasets' sizes under the run's limits, before held-out questions that
repeat training ones are dropped (as the time estimate counts them): an upper bound.
"""

from __future__ import annotations

from calm_core.calibration.recommend import ALL_LABELLED
from calm_core.data.split_sizes import heldout_support
from calm_core.training.config import TrainConfig
from calm_core.training.tasks import get_task


def labelled_counts(cfg: TrainConfig) -> tuple[int, int]:
    """(S_V items, S_T items) a run of `cfg` will read; it loads both datasets."""
    from calm_core.scoring.evaluate import load_report

    kind = get_task(cfg.task).ITEM_KIND
    heldout = len(load_report(cfg.heldout_data, kind, cfg.heldout_limit, cfg.seed).items)
    train = len(load_report(cfg.train_data, kind, cfg.train_limit, cfg.seed).items)
    return heldout, train


def support_sentence(cfg: TrainConfig, counts: tuple[int, int] | None = None) -> str:
    """heldout_support for this run: S_V's items, and all labelled items when the post-hoc
    calibrators are fitted k-fold on S_T + S_V (calibrate_on = all). `counts`: (S_V, S_T)
    items when the caller has them (labelled_counts reads the datasets)."""
    heldout, train = counts if counts is not None else labelled_counts(cfg)
    return heldout_support(heldout, heldout + train if cfg.calibrate_on == ALL_LABELLED else None)
