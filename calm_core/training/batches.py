"""The item sets of a training run and the seeded batch schedule.

`load_data` reads S_T, S_V and the evaluation sets (rejected rows said and kept for
status.json; S_V and evaluation items that repeat a training question dropped and
counted). `batch_indices` draws the items of a step from (seed, step) alone, so a resumed
run, every data-parallel rank and the frozen-prefix prefill see the same batches.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from calm_core.data.schema import DataError
from calm_core.data.stream import chunks, subset
from calm_core.generative.answers import normalize_answer
from calm_core.scoring.evaluate import load_report

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the config imports the task registry, whose modules import this one
    from calm_core.training.config import TrainConfig


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Items of step `step`: consecutive slices of a per-epoch permutation, so the batch
    sequence depends only on (seed, step) and a resumed run sees the same batches."""
    per_epoch = max(1, n // batch_size)
    epoch, offset = divmod(step, per_epoch)
    batch: list[int] = _epoch_order(n, seed, epoch)[offset * batch_size : offset * batch_size + batch_size].tolist()
    return batch


@functools.lru_cache(maxsize=4)  # S_T's and S_V's current epochs, and the ones before
def _epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """Epoch `epoch`'s permutation, drawn once rather than at every step: on a million
    items a permutation costs more than the batch it is drawn for, and the context check
    and the prefill schedule ask for every step's batch before step 1."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    order.flags.writeable = False
    return order


def drawn_positions(n: int, batch_size: int, steps: int, seed: int, start_step: int = 0) -> list[int]:
    """Every position steps start_step..steps-1 draw from a set of `n`, in order, once each:
    the only items of S_T a run reads (all of them once the run covers an epoch)."""
    return sorted({i for step in range(start_step, steps) for i in batch_indices(n, batch_size, step, seed)})


LOWER_PROBE_ITEMS = 64  # S_T items whose cross-entropy under theta tells whether the lower level is still solved


def lower_probe(cfg: "TrainConfig", train: Sequence[Any]) -> list[Any]:
    """The S_T items of the calibrated stop's lower-level probe (any task): the
    LOWER_PROBE_ITEMS lowest positions the run draws (so an MCQA run has their frozen
    layers cached), the same at every evaluation."""
    return list(subset(train, _probe_positions(len(train), cfg.batch_size, cfg.steps, cfg.seed)))


@functools.lru_cache(maxsize=4)
def _probe_positions(n: int, batch_size: int, steps: int, seed: int) -> list[int]:
    """Computed once per run, not at every evaluation: the drawn positions of a long run
    over a large S_T are a set of millions to build and sort."""
    return drawn_positions(n, batch_size, steps, seed)[:LOWER_PROBE_ITEMS]


@dataclass
class Data:
    train: Sequence[Any]  # MCItem (task mcqa) or OpenItem (task openqa); LazyItems for a large file
    heldout: Sequence[Any]
    evals: dict[str, Sequence[Any]]
    dropped: dict[str, int] = field(default_factory=dict)  # set -> items removed as training questions
    rejected: dict[str, dict[str, Any]] = field(default_factory=dict)  # set -> rows its loader rejected (first 20)


def question_key(question: str) -> str:
    """Questions that differ only in case, punctuation, articles or spacing are the same."""
    return normalize_answer(question)


def without_training_questions(items: Sequence[Any], train_keys: set[str]) -> list[Any]:
    """`items` minus those whose question is a training question (TriviaQA's two splits
    share 268): a held-out or evaluation number must not be measured on training data."""
    return [it for it in items if question_key(it.question) not in train_keys]


def training_questions_among(train: Sequence[Any], others: list[Sequence[Any]]) -> set[str]:
    """The question keys of `others` that are training questions too: one pass over S_T a
    chunk at a time, keeping only keys of `others`, so memory follows the held-out and
    evaluation sets rather than the training set."""
    wanted = {question_key(it.question) for items in others for it in items}
    return {key for chunk in chunks(train) for key in (question_key(it.question) for it in chunk) if key in wanted}


def load_data(cfg: TrainConfig, kind: str, eval_reading: Mapping[str, dict[str, Any]] | None = None) -> Data:
    """S_T, S_V and the evaluation sets, loaded as `kind` items (the task's ITEM_KIND); S_V
    and evaluation items that repeat a training question are dropped before `limit`
    counts, and how many is recorded. `eval_reading`: per evaluation set, how to read its
    file (`mapping`, `encoding`: `calm eval --run` on a person's own file)."""
    rejected: dict[str, dict[str, Any]] = {}

    def load(name: str, limit: int | None, **reading: Any) -> Sequence[Any]:
        """The set's items; its rejected rows are said on stderr (stdout.log for a job)
        and kept for status.json, never dropped without a word."""
        report = load_report(name, kind, limit, cfg.seed, **reading)
        if report.n_rejected:
            rejected[name] = report.rejected_record(20)
            head, *reasons = report.rejection_lines()
            log.warning("note: %s:\n%s", head, "\n".join(f"  {line}" for line in reasons))
        return report.items  # a list, or LazyItems (parsed on demand) for a large file

    train_items = load(cfg.train_data, cfg.train_limit)
    loaded_evals = {name: load(name, None, **(eval_reading or {}).get(name, {})) for name in cfg.eval_data}
    loaded_heldout = load(cfg.heldout_data, None)
    keys = training_questions_among(train_items, [loaded_heldout, *loaded_evals.values()])
    dropped: dict[str, int] = {}

    def clean(name: str, items: Sequence[Any], limit: int | None) -> list[Any]:
        kept = without_training_questions(items, keys)
        if len(kept) < len(items):
            dropped[name] = len(items) - len(kept)
        return kept[:limit]

    evals: dict[str, Sequence[Any]] = {name: clean(name, items, cfg.eval_limit) for name, items in loaded_evals.items()}
    heldout = clean(cfg.heldout_data, loaded_heldout, cfg.heldout_limit)
    if not train_items or not heldout:
        which = "training set" if not train_items else "held-out set S_V (after removing training questions)"
        raise DataError(f"Expected items in the {which}, but it is empty: choose another set or slice")
    return Data(train_items, heldout, evals, dropped, rejected)
