"""Multiple-choice QA as a training task (`TrainConfig.task = "mcqa"`): option scores.

- `lower` / `upper`: cross-entropy at the gold option, and minus the mean option entropy
  on held-out inputs (training/objectives.py; the head acts where it says it acts);
- `check_items`: items longer than the model's context are cut from the left before
  step 1 (an option that cannot fit fails here, by item id);
- `prefill`: the frozen-prefix cache filled ahead of the first step, for the items the
  rest of the run reads;
- `evaluate_now`: accuracy, ECE, NLL, entropy, confidence, AUROC, AURC on S_V and each set;
- `selection_candidate`: S_V's NLL, ECE and accuracy and the lower-level probe (S_T
  cross-entropy of theta alone) for the calibrated stop (training/selection.py);
- `final_evaluation`: base, the post-hoc calibrators (ts), the trained model and its
  theta-only ablation on every evaluation set -> eval/<variant>/<dataset>.parquet +
  results.json, and each compared variant's S_V probabilities -> heldout/ (selective answering);
- `added_evaluation`: the same variants on more sets after training, with the run's saved
  calibrators (`calm eval --run`, results/added.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Callable, Sequence

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.calibration.adaptive_head import AdaptiveHead
from calm_core.calibration.metrics.columns import curve_names
from calm_core.calibration.posthoc import MIN_FIT_ITEMS
from calm_core.calibration.recommend import ALL_LABELLED
from calm_core.calibration.thermometer import run_thermometer
from calm_core.data.schema import MCItem
from calm_core.data.stream import LazyItems, subset
from calm_core.faults import fault_point
from calm_core.runs.layout import write_predictions
from calm_core.runs.recommendation import Recommendation
from calm_core.runs.records import ResultRow, RunResults
from calm_core.runs.rundir import RunDir
from calm_core.runs.selection_record import recorded_selection
from calm_core.scoring.adapters import evaluating
from calm_core.scoring.evaluate import baseline_records, fit_baselines, predictions_frame, result_row, variant_probs
from calm_core.scoring.options import apply_option_head
from calm_core.scoring.scorer import Capture, Scorer
from calm_core.scoring.truncation import context_limit, truncated_item_ids, warn_truncated
from calm_core.training.batches import Data, drawn_positions, lower_probe
from calm_core.training.context import StepContext, Variant, final_variants
from calm_core.training.frozen_fill import fill_frozen_prefix
from calm_core.training.objectives import negative_entropy, option_cross_entropy
from calm_core.training.recommendation import Fit, recommendation
from calm_core.training.selection import Candidate

log = logging.getLogger(__name__)

prefill = fill_frozen_prefix  # the Task protocol's prefill: training/frozen_fill.py, shared by option scoring

NAME = "mcqa"
ITEM_KIND = "mc"
METHODS = None  # every method works on option scores
SELECTS = True  # the calibrated stop judges S_V's NLL (selection_candidate)
RECOMMENDS = True  # the final evaluation fits post-hoc calibrators and cross-fits them (timings.RunSizes)
FIT_STAGE = "fitting the post-hoc calibrators"  # status.json `final` stages (estimate/remaining.py)
CROSS_FIT_STAGE = "cross-fitting the calibrators for the recommendation"
DEFAULTS: dict = {}  # TrainConfig's own defaults are multiple choice
PRESETS: dict = {}  # the presets as training/config.py declares them


def lower(ctx: StepContext, items: Sequence[MCItem]) -> Callable[[], torch.Tensor]:
    """L_tr closure: cross-entropy at the gold option of a training batch."""
    gold = torch.tensor([it.answer for it in items], device=ctx.device)
    return lambda: option_cross_entropy(ctx.logits(items), gold)


def upper(ctx: StepContext, items: Sequence[MCItem]) -> Callable[[], torch.Tensor]:
    """F closure: minus mean option entropy on held-out inputs (labels unused)."""
    return lambda: negative_entropy(ctx.logits(items))


def evaluate_now(
    ctx: StepContext,
    data: Data,
    batch_size: int,
    caches: dict[str, dict[tuple[bool, bool], Any]] | None = None,
    heldout_only: bool = False,
) -> dict[str, float]:
    """`eval/<set>/<metric>` for every metric declared as a curve (metrics.columns) on S_V
    and every evaluation set (S_V alone with `heldout_only`). With `caches` (set name ->
    `_scores_for` cache), the scores stay there for a final evaluation at the same
    parameters, which then does not compute them again."""
    record: dict[str, float] = {}
    for name, items in {"heldout": data.heldout, **({} if heldout_only else data.evals)}.items():
        if not items:
            continue
        cache = caches.setdefault(name, {}) if caches is not None else {}
        probs = metrics.softmax(
            _scores_for(ctx, items, batch_size, use_head=True, use_adapter=True, cache=cache).logits
        )
        gold = np.array([it.answer for it in items])
        summary = metrics.summarize(probs, gold)
        for key in curve_names():
            record[f"eval/{name}/{key}"] = summary[key]
    return record


def selection_candidate(
    ctx: StepContext, data: Data, step: int, record: dict[str, float], caches: dict[str, dict[tuple[bool, bool], Any]]
) -> Candidate | None:
    """What the calibrated stop (training/selection.py) judges at this evaluation: S_V's
    NLL (and per-item NLL), ECE and accuracy under head and adapter, read from the scores
    `evaluate_now` just left in `caches`, and the S_T cross-entropy of theta alone (adapter
    on, no head) on the probe items: a rise there means theta, not the head, moved the
    training fit. None without S_V."""
    if not data.heldout:
        return None
    bs = ctx.settings.eval_batch_size
    heldout = _scores_for(
        ctx, data.heldout, bs, use_head=True, use_adapter=True, cache=caches.setdefault("heldout", {})
    )
    losses = metrics.item_nll(metrics.softmax(heldout.logits), heldout.gold)
    probe = lower_probe(ctx.settings, data.train)
    lower = None
    if probe:
        theta_only = _scores_for(ctx, probe, bs, use_head=False, use_adapter=True, cache={})
        lower = metrics.nll(metrics.softmax(theta_only.logits), theta_only.gold)
    return Candidate(
        step=step,
        score=float(losses.mean()),
        ece=record["eval/heldout/ece"],
        acc=record["eval/heldout/acc"],
        n=len(losses),
        lower=lower,
        losses=losses.tolist(),
    )


def check_items(ctx: StepContext, data: Data) -> dict[str, int]:
    """{set: items cut from the left to fit the model's context} for every set of the run,
    checked before the first step (tokenizing only): an item that cannot fit at all fails
    here (DataError) rather than at the step that draws it, and a cut is said once per set.
    Of a streamed S_T (LazyItems: a large file) only the items the run's steps draw are
    checked (all of it once the run covers an epoch): the others are never read, and
    tokenizing a million rows would delay step 1 by minutes."""
    limit = context_limit(ctx.net, ctx.tokenizer)
    cfg = ctx.settings
    train = data.train
    if isinstance(train, LazyItems):
        train = subset(train, drawn_positions(len(train), cfg.batch_size, cfg.steps, cfg.seed))
    counts: dict[str, int] = {}
    for name, items in {"train": train, "heldout": data.heldout, **data.evals}.items():
        cut = truncated_item_ids(items, ctx.scoring, ctx.tokenizer, limit)
        warn_truncated(cut, len(items), limit, name)
        if cut:
            counts[name] = len(cut)
    return counts


def fit_adaptive_projection(ctx: StepContext, data: Data) -> dict[str, Any]:
    """Fix an adaptive head's feature mean and principal directions from the untouched
    model's states on S_V, before the first step (calibration.adaptive_head); the record
    goes to status.json's choices."""
    base = _variant_scores(ctx, data.heldout, ctx.settings.eval_batch_size, use_head=False, use_adapter=False)
    if not isinstance(ctx.head, AdaptiveHead):
        raise ValueError(f"Expected an adaptive head to fit a projection for, but the run has {ctx.head!r}")
    directions = ctx.head.fit_projection(base.features)
    return {
        "components": directions,
        "fit_on": "the untouched model's hidden states on S_V",
        "items": len(data.heldout),
    }


def _variant_scores(ctx: StepContext, items: list[MCItem], batch_size: int, use_head: bool, use_adapter: bool) -> Any:
    """Option scores of the model being trained (adapter on or off, head or none) through
    the same prefix-shared, batched scorer as `calm eval`; no gradients."""
    # the base model's hidden state: what ats reads; the trained model's: what an adaptive head reads
    wanted = not use_adapter or (ctx.head is not None and ctx.head.reads_features)
    capture = Capture.FEATURES if wanted else Capture.NOTHING
    with evaluating(ctx.model, use_adapter):
        scorer = Scorer(ctx.net, ctx.tokenizer, batch_size=batch_size, progress=False)
        return scorer.score(items, ctx.scoring, head=ctx.head if use_head else None, capture=capture)


def _scores_for(
    ctx: StepContext,
    items: list[MCItem],
    bs: int,
    *,
    use_head: bool,
    use_adapter: bool,
    cache: dict[tuple[bool, bool], Any],
) -> Any:
    """Scores of one variant, computing each (head, adapter) combination once; a head that
    acts on option scores is applied to the adapter's scores rather than scored again."""
    key = (use_head and ctx.head is not None, use_adapter)
    if key not in cache:
        if key[0] and ctx.head is not None and ctx.head.acts_on == "options":
            raw = _scores_for(ctx, items, bs, use_head=False, use_adapter=use_adapter, cache=cache)
            cache[key] = dataclasses.replace(raw, logits=apply_option_head(raw.logits, ctx.head, raw.features))
        else:
            cache[key] = _variant_scores(ctx, items, bs, *key)
    return cache[key]


def final_evaluation(
    ctx: StepContext,
    data: Data,
    run: RunDir,
    reuse: dict[str, dict[tuple[bool, bool], Any]] | None = None,
    extra: dict[str, Any] | None = None,
    times: Any = None,
) -> list[dict[str, Any]]:
    """Every variant on every evaluation set -> eval/<variant>/<dataset>.parquet + results.json.

    Variants: `base` (adapter off, no head), each default post-hoc calibrator (`ts`:
    base + temperature fitted on S_V with its labels; calibration.posthoc's registry),
    `<method>` (the trained model: theta and alpha), and for methods with a head
    `<method>_theta_only` (theta alone), the design's ablation of the head.
    `reuse`: what the evaluation of the step being evaluated (the selected one) computed
    at these same parameters; `extra`: more fields for results.json (the selection).
    The post-hoc calibrators are fitted on S_V, or with calibrate_on = all on S_T + S_V
    (the untouched model's scores of both), which results.json records with each of them.
    `times` (timings.PhaseTimes): the fits and the recommendation's cross-fitting are timed
    as its `cross_fit` part; status.json's `final` says each stage and its progress.
    """
    heldout_cache: dict[tuple[bool, bool], Any] = (reuse or {}).get("heldout", {})
    train_cache: dict[tuple[bool, bool], Any] = {}  # S_T's base scores, with calibrate_on = all
    pooled = ctx.settings.calibrate_on == ALL_LABELLED

    def fit_data() -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        return (
            _labelled_base(ctx, data, heldout_cache, train_cache)
            if pooled
            else _base_arrays(ctx, data.heldout, heldout_cache)
        )

    n_fit = len(data.heldout) + (len(data.train) if pooled else 0)
    arrays = (
        fit_data() if ctx.settings.eval_baselines and n_fit >= MIN_FIT_ITEMS else None
    )  # forwards: outside the fits' time
    _final_progress(run, FIT_STAGE)(0, 0)
    with _timed(times):  # a run's table: TS, vector scaling and ATS beside the model
        fitted, notes = fit_baselines(
            n_fit,
            lambda: arrays if arrays is not None else fit_data(),
            NAME,
            ctx.settings.eval_baselines,
            defaults_only=False,
        )
    fit_on = f"{ctx.settings.train_data} + {ctx.settings.heldout_data}" if pooled else ctx.settings.heldout_data
    records = baseline_records(fitted, notes, fit_on=fit_on, calibrate_on=ctx.settings.calibrate_on)
    thermometer = _thermometer(ctx, records)
    variants = _variants_of(ctx, _with_thermometer(fitted, thermometer))
    rows = _evaluate_sets(ctx, data.evals, variants, run.path, reuse, progress=_final_progress(run))
    recommended = None
    if ctx.settings.eval_baselines:
        with _timed(times):
            recommended = _recommendation(ctx, data, (heldout_cache, train_cache), fitted, thermometer, run)
    run.write_results(
        RunResults(
            rows=tuple(ResultRow.from_json(row) for row in rows),
            selection=recorded_selection(extra),
            recommendation=recommended,
            calibrators=records,
        )
    )
    return rows


def _thermometer(ctx: StepContext, records: dict[str, Any]) -> Any:
    """The `thermometer` variant (one temperature per evaluation set, from its inputs, no
    labels) when a thermometer was trained on this model's states under this rule; its
    record, or the note why not, goes into `records`. A model with no thermometer at all
    (any but the embedded one) gets neither."""
    if not ctx.settings.eval_baselines:
        return None
    width = getattr(getattr(ctx.model, "config", None), "hidden_size", None)
    thermometer, why = run_thermometer(ctx.settings.model, ctx.scoring.name, width)  # rule and template
    if thermometer is not None:
        records["thermometer"] = {**thermometer.params(), "fit_on": "its own labelled sets (no label of this run)"}
    elif why and "trained under" in why:  # another model has no thermometer at all: nothing to say
        records["thermometer"] = {"note": why}
    return thermometer


def _base_arrays(
    ctx: StepContext, items: Any, cache: dict[tuple[bool, bool], Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The untouched model's (logits, gold, features) on `items`: what post-hoc calibrators fit on."""
    scores = _scores_for(ctx, items, ctx.settings.eval_batch_size, use_head=False, use_adapter=False, cache=cache)
    return scores.logits, scores.gold, scores.features


def _labelled_base(
    ctx: StepContext, data: Data, heldout_cache: dict[tuple[bool, bool], Any], train_cache: dict[tuple[bool, bool], Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The untouched model's scores on every labelled item, S_T then S_V (calibrate_on =
    all): the base model was trained on neither, so a post-hoc fit may use both. Option
    counts may differ between the two: logits are padded with -inf, as within a set."""
    train = _base_arrays(ctx, data.train, train_cache)
    heldout = _base_arrays(ctx, data.heldout, heldout_cache)
    width = max(train[0].shape[1], heldout[0].shape[1])
    logits = np.concatenate([_pad(train[0], width), _pad(heldout[0], width)])
    gold = np.concatenate([train[1], heldout[1]])
    features = None if train[2] is None or heldout[2] is None else np.concatenate([train[2], heldout[2]])
    return logits, gold, features


def _pad(logits: np.ndarray, width: int) -> np.ndarray:
    """(N, K) logits as (N, width), the new options at -inf (no probability)."""
    out = np.full((len(logits), width), -np.inf, dtype=np.float64)
    out[:, : logits.shape[1]] = logits
    return out


def added_evaluation(
    ctx: StepContext, evals: dict[str, list[MCItem]], calibrators: dict[str, Any], root: Any
) -> list[dict[str, Any]]:
    """The final evaluation's variants on more sets, after training (results/added.py):
    `ctx` holds the run's model at its selected step (`training.run_context.restored_context`), `calibrators`
    the post-hoc calibrators the run fitted on S_V, as saved (never refitted on these sets).
    Predictions go under `root`; returns the rows, in `final_evaluation`'s shape. The
    thermometer needs no fit: the new sets get their own temperatures from their inputs."""
    variants = _variants_of(ctx, _with_thermometer(calibrators, _thermometer(ctx, {})))
    return _evaluate_sets(ctx, evals, variants, root, None)


def _with_thermometer(calibrators: dict[str, Any], thermometer: Any) -> dict[str, Any]:
    """The post-hoc variants to evaluate: the fitted calibrators and, when there is one,
    the thermometer (fitted on no label of the run)."""
    return {**calibrators, **({"thermometer": thermometer} if thermometer is not None else {})}


def _variants_of(ctx: StepContext, fitted: dict[str, Any]) -> list[Variant]:
    settings = ctx.settings
    return final_variants(settings.method, ctx.head is not None, fitted, settings.eval_baselines)


def _evaluate_sets(
    ctx: StepContext,
    evals: dict[str, Any],
    variants: list[Variant],
    root: Any,
    reuse: dict[str, dict[tuple[bool, bool], Any]] | None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (set, variant) and its predictions at <root>/eval/<variant>/<set>.parquet;
    `reuse`: scores already computed at these parameters, per set. Each row's `paired`
    holds its per-item top-label Brier difference to every other variant of the set, with
    the paired interval (metrics.paired_records), so the verdict row can tell a tie.
    `progress(done, total)` is told before each (set, variant) pass and after the last."""
    rows, total = [], len(evals) * len(variants)
    for index, (name, items) in enumerate(evals.items()):
        cache: dict[tuple[bool, bool], Any] = (reuse or {}).get(name, {})
        set_rows, per_item = [], {}
        for offset, variant in enumerate(variants):
            if progress is not None:
                progress(index * len(variants) + offset, total)
            scores = _scores_for(
                ctx,
                items,
                ctx.settings.eval_batch_size,
                use_head=variant.use_head,
                use_adapter=variant.use_adapter,
                cache=cache,
            )
            why = variant.calibrator.cannot_apply(scores.logits) if variant.calibrator is not None else None
            if why:  # e.g. vector scaling fitted on 4 options, a set of 5: no row, said once
                log.warning("%s: no %s row (%s)", name, variant.name, why)
                continue
            set_rows.append(result_row(scores, name, variant.name, variant.calibrator))
            per_item[variant.name] = _item_top_label_brier(variant_probs(scores, variant.calibrator), scores.gold)
            write_predictions(root, variant.name, name, predictions_frame(scores, variant.calibrator, items))
            fault_point("eval_written")
        records = metrics.paired_records(per_item, TIE_SCORE) if per_item else {}
        rows += [{**row, "paired": records[row["variant"]]} for row in set_rows]
    if progress is not None:
        progress(total, total)
    return rows


def _final_progress(run: RunDir, stage: str | None = None, unit: str = "") -> Callable[[int, int], None]:
    """status.json's `final`: the final evaluation's `stage` (None: its (set, variant)
    passes) and its count of `unit` done and in all, which the Monitor shows
    (estimate/remaining.py), so that no stage runs unsaid."""
    named = {"stage": stage, "unit": unit} if stage else {}

    def told(done: int, total: int) -> None:
        run.update_status(final={"done": done, "total": total, **named})

    return told


def _timed(times: Any) -> Any:
    """The block timed as the run's `cross_fit` part (timings.PhaseTimes), when it has one."""
    return times.part("cross_fit") if times is not None else contextlib.nullcontext()


TIE_SCORE = "top-label Brier"  # what a result row's `paired` compares (results/verdict.py says why)


def _item_top_label_brier(probs: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """(confidence - correct)^2 per item, of the top-label forecast that ECE bins."""
    return metrics.item_confidence_brier(*metrics.top_label(probs, gold))


def _recommendation(
    ctx: StepContext,
    data: Data,
    caches: tuple[dict[tuple[bool, bool], Any], ...],
    fitted: dict[str, Any],
    thermometer: Any,
    run: RunDir,
) -> Recommendation | None:
    """Which variant to use, chosen on S_V (training/recommendation.py), from the scores the
    final evaluation has (`caches`: S_V's, then S_T's); None without S_V."""
    if not data.heldout:
        return None
    bs = ctx.settings.eval_batch_size
    base = _scores_for(ctx, data.heldout, bs, use_head=False, use_adapter=False, cache=caches[0])
    trained = _scores_for(ctx, data.heldout, bs, use_head=True, use_adapter=True, cache=caches[0])
    probs = {"base": metrics.softmax(base.logits), ctx.settings.method: metrics.softmax(trained.logits)}
    if thermometer is not None and base.features is not None:  # fitted on no S_V label: its S_V forecast is fair
        probs["thermometer"] = thermometer.probs(base.logits, base.features)
    pooled = ctx.settings.calibrate_on == ALL_LABELLED
    labelled = _labelled_base(ctx, data, *caches) if pooled else (base.logits, base.gold, base.features)
    classes = {name: type(c) for name, c in fitted.items()}
    fit = Fit(base, labelled, data.heldout)
    progress = _final_progress(run, CROSS_FIT_STAGE, "calibrator and fold fits")
    return recommendation(ctx.settings, fit, classes, probs, run.path, progress)
