"""`calm eval --task openqa`: generated answers, judged by meaning (Semantic ECE), base
beside temperature scaling fitted on gold answer tokens."""

from __future__ import annotations

import argparse

from calm_core.calibration.metrics.columns import table_columns
from calm_core.cli import eval_io
from calm_core.cli.usage import UsageError
from calm_core.generative.sampling import GenerationConfig
from calm_core.io import atomic_write_json
from calm_core.runs.layout import write_predictions

# `calm eval --task openqa`'s flag -> GenerationConfig's setting (the flags kept their short names)
GENERATION_FLAGS = {
    "samples": "n_samples",
    "temperature": "temperature",
    "top_p": "top_p",
    "max_new_tokens": "max_new_tokens",
    "prompt": "prompt",
    "grouping": "grouping",
    "threshold": "grouping_threshold",
}


def eval_open(args: argparse.Namespace) -> int:
    """`calm eval --task openqa`: generated answers, judged; base and (optionally) the
    post-hoc calibrators that apply to generation (TS)."""
    from calm_core.calibration.posthoc import MIN_FIT_ITEMS
    from calm_core.generative.evaluate import evaluate_open, fit_token_calibrators
    from calm_core.scoring.evaluate import PosthocFit, format_table

    if args.ts_file or args.save_ts:
        raise UsageError("--ts-file / --save-ts are for --task mcqa; with openqa use --fit-ts-on")
    if args.features:
        raise UsageError("--features is for --task mcqa: open answers are generated, not scored as options")
    cfg = GenerationConfig(
        **{name: getattr(args, flag) for flag, name in GENERATION_FLAGS.items()},
        batch_size=args.batch_size,
        seed=args.seed,
    )
    eval_io.check_outputs(args)
    reports = eval_io.load_reports([name for group in args.data for name in group], "open", args.limit, args)
    datasets = {name: list(report.items) for name, report in reports.items()}
    fit_names = [name for group in (args.fit_ts_on or []) for name in group]
    if len(fit_names) > 1:
        raise UsageError("--task openqa fits one temperature: give one --fit-ts-on dataset")
    fit_reports = eval_io.load_reports(fit_names, "open", args.fit_limit, args)
    fit_items = list(fit_reports[fit_names[0]].items) if fit_names else []
    if fit_names and len(fit_items) < MIN_FIT_ITEMS:
        raise UsageError(
            f"Expected at least {MIN_FIT_ITEMS} items to fit TS on `{fit_names[0]}`, but it has {len(fit_items)}"
        )
    lm = eval_io.load_lm(args)
    scalers = fit_token_calibrators(lm.model, lm.tokenizer, fit_items, cfg.prompt, args.batch_size) if fit_items else {}
    fits = [PosthocFit(name, s, {"dataset": fit_names[0], **s.params()}) for name, s in scalers.items()]
    rows, frames = evaluate_open(lm.model, lm.tokenizer, datasets, cfg, scalers, progress=not args.quiet)
    if args.save_preds:
        for (variant, name), frame in frames.items():
            write_predictions(args.save_preds, variant, name, frame)
    print(
        f"model: {lm.info.get('label', lm.info['name'])} ({lm.info['device']}, {lm.info['dtype']})  task: openqa  "
        f"prompt: {cfg.prompt}  samples: {cfg.n_samples}  grouping: {cfg.grouping}"
    )
    eval_io.print_posthoc(fits, f" (fit on the gold answer tokens of {fit_names[0]})" if fits else "")
    print(format_table(rows, table_columns("openqa")))
    if args.json:
        extra = {"task": "openqa", "generation": cfg.to_dict()}
        atomic_write_json(args.json, eval_io.eval_record(args, rows, lm, fits, "openqa", reports, fit_reports, extra))
    return 0
