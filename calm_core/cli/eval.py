"""`calm eval`: score datasets with a model, base beside post-hoc calibrators; open
answers with --task openqa; a finished run on more data with --run.

    calm eval --model embedded --data arc/easy_test --scoring cloze --limit 300 \\
              [--fit-ts-on commonsenseqa/dev] [--json out.json] [--save-preds DIR]
    calm eval --data my_questions.csv --thermometer       # a file without answers
    calm eval --run RUN_ID --data arc/easy_test           # a finished run on more data (results/added.py)
    calm eval --run RUN_ID --data private.csv --mapping 'question=q, choices=A|B|C|D, answer=label' --encoding cp1252
    calm eval --from-lm-eval DIR --fit-ts-on TASK          # lm-evaluation-harness samples (cli/eval_harness.py)

Every dataset is read and every output path checked before the model loads: a typo fails
in a second. Rows a dataset rejected are named on stderr and counted in `--json`, whose
record is built in one place (`eval_io.eval_record`) for both tasks. The flags' choices come from
their registries (scoring rules, tasks) and the answer-generation flags from
GenerationConfig's declarations.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.calibration import metrics
from calm_core.cli import eval_io
from calm_core.cli.eval_harness import add_args as add_harness_args
from calm_core.cli.eval_harness import eval_from_lm_eval
from calm_core.cli.eval_open import GENERATION_FLAGS, eval_open
from calm_core.cli.eval_run import eval_run
from calm_core.cli.eval_served import check_served_export
from calm_core.cli.usage import UsageError
from calm_core.data.catalog import load_dataset
from calm_core.data.mapping import ColumnMapping, MissingColumns
from calm_core.data.schema import UNLABELLED_MC, DataError, LoadReport
from calm_core.generative.sampling import GenerationConfig
from calm_core.io import atomic_write_json
from calm_core.runs.layout import write_predictions
from calm_core.scoring.prompts import ScoringConfig
from calm_core.settings import declared_settings
from calm_core.training.tasks import TASKS


def add_parsers(sub: Any) -> None:
    """`calm eval` under the `calm` subcommands `sub`."""
    ev = sub.add_parser("eval", help="score datasets with a model: base and post-hoc calibration (TS)")
    eval_io.add_model_args(ev)
    eval_io.add_scoring_args(ev)
    ev.add_argument(
        "--data",
        action="append",
        nargs="+",
        metavar="NAME",
        help="catalog names (arc/easy_test, builtin/capitals/test, upload/x) or files; repeatable "
        "(with --from-lm-eval: tasks of its samples)",
    )
    add_harness_args(ev)
    ev.add_argument(
        "--run",
        metavar="RUN_ID",
        help="a finished run instead of --model: its base, ts (its own S_V fit) and trained model at its "
        "selected step, scored as its final evaluation scores; rows stored with the run as added",
    )
    ev.add_argument("--runs-root", type=Path, help="with --run: where runs live (default: workspace/runs)")
    ev.add_argument(
        "--limit",
        type=int,
        help="first N items of each dataset, in file order (with --run: default the "
        "run's eval_limit, after removing its training questions)",
    )
    ev.add_argument(
        "--mapping",
        help="column mapping for files, e.g. 'question=q, choices=A|B|C|D, answer=label' (default: the names "
        "question, choices, answer, else the mapping saved with an upload of the same columns, else the Data "
        "page's guess when it names only the file's columns: a note says which)",
    )
    ev.add_argument(
        "--encoding",
        help="text encoding of CSV / JSON files, e.g. cp1252 or latin-1 for a file a Windows spreadsheet saved "
        "(default: utf-8, or for a file that is not UTF-8 the encoding it looks like, as the Data page reads it: "
        "a note names it)",
    )
    ev.add_argument("--seed", type=int, default=0, help="seed for built-in datasets")
    ev.add_argument(
        "--fit-ts-on",
        action="append",
        nargs="+",
        metavar="NAME",
        help="fit the post-hoc calibrators (temperature scaling) on this dataset: variant `ts` "
        "(several: `ts:<name>` each)",
    )
    ev.add_argument("--fit-limit", type=int, help="first N items of the --fit-ts-on dataset")
    ev.add_argument("--ts-file", type=Path, help="apply a saved calibrator (JSON from --save-ts) as its variant (`ts`)")
    ev.add_argument("--save-ts", type=Path, help="write the fitted temperature to this JSON file")
    ev.add_argument("--json", type=Path, help="write results as JSON")
    ev.add_argument(
        "--save-preds", type=Path, metavar="DIR", help="per-item predictions: DIR/eval/<variant>/<dataset>.parquet"
    )
    ev.add_argument(
        "--features",
        nargs="?",
        const="prompt",
        choices=["prompt", "options"],
        help="with --save-preds: store each item's final hidden state at its last prompt token (`options`, "
        "cloze: also each option's mean state) in the predictions, float16, captured in the scoring pass",
    )
    ev.add_argument(
        "--thermometer",
        nargs="?",
        type=Path,
        const=Path("shipped"),
        metavar="FILE",
        help="add the `thermometer` variant: one temperature per evaluated set, predicted from its inputs' "
        "mean hidden state, no labels needed (default: the --model's own, shipped for the named models or "
        "built into the cache by `python -m calm_core.training.thermometer_build --model NAME`)",
    )
    ev.add_argument(
        "--export",
        type=Path,
        metavar="DIR",
        help="with --model openai:URL: check that the server, serving this merged export (`calm export --merged`), "
        "gives the studio's calibrated probabilities through the card's request",
    )
    ev.add_argument("--quiet", action="store_true", help="no progress bars")
    ev.add_argument(
        "--task",
        choices=list(TASKS),
        default="mcqa",
        help="mcqa: option scores; openqa: generated answers, Semantic ECE (calm_core.generative)",
    )
    op = ev.add_argument_group("openqa (with --task openqa)")
    generation = {spec.name: spec for spec in declared_settings(GenerationConfig)}
    for flag, name in GENERATION_FLAGS.items():  # default, help and choices: GenerationConfig's declarations
        spec = generation[name]
        choices = spec.meta("choices")
        op.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=flag,
            type=spec.kind,
            default=spec.field.default,
            choices=list(choices) if choices else None,
            help=spec.help.replace("%", "%%"),
        )


def _check_features(args: argparse.Namespace, cfg: Any) -> None:
    """--features is stored with the predictions, so it needs --save-preds; option
    features need option tokens (a cloze rule)."""
    if args.features is None:
        return
    if args.save_preds is None:
        raise UsageError("--features stores hidden states with the per-item predictions: give --save-preds DIR too")
    if args.features == "options" and not cfg.is_cloze:
        raise UsageError(f"--features options needs a cloze rule: the {cfg.rule} rule scores no option tokens")


def _check_served(args: argparse.Namespace, refused: str | None = None) -> None:
    """A served model gives prompt log-probabilities only: nothing that reads hidden states
    (or, with `refused`, what that says it needs) goes with it."""
    from calm_core.scoring.served import is_served

    wanted = [flag for flag, given in (("--features", args.features), ("--thermometer", args.thermometer)) if given]
    if is_served(args.model) and (wanted or refused):
        what = refused or f"{', '.join(wanted)} read hidden states, which"
        raise UsageError(
            f"{what} a served model (openai:URL) does not give: it is scored from prompt log-probabilities"
        )


def _posthoc(args: argparse.Namespace, lm: Any, cfg: Any, fit_items: dict[str, list[Any]]) -> list[Any]:
    """The post-hoc variants (scoring.evaluate.PosthocFit): the saved one of --ts-file, or
    every default calibrator fitted on each --fit-ts-on set (`ts`, `ts:<dataset>` for several)."""
    from calm_core.calibration.posthoc import load_calibrator
    from calm_core.scoring.evaluate import PosthocFit, fit_posthoc
    from calm_core.scoring.scorer import Capture
    from calm_core.scoring.served import scorer_of

    if args.ts_file:
        calibrator = load_calibrator(args.ts_file)
        return [PosthocFit(calibrator.name, calibrator, {"file": str(args.ts_file)})]
    scorer = scorer_of(lm, batch_size=args.batch_size, progress=not args.quiet)
    fit_sets = {  # with features: adaptive temperature scaling reads them
        name: scorer.score(items, cfg, capture=Capture.FEATURES, dataset=name) for name, items in fit_items.items()
    }
    fits = fit_posthoc(fit_sets)
    if args.save_ts:  # exactly one set fitted: checked in cmd_eval before the model loaded
        next(f for f in fits if f.calibrator.name == "ts").calibrator.save(args.save_ts)
    return fits


def _thermometer(args: argparse.Namespace) -> Any:
    """The thermometer of --thermometer (None without it), checked before the model loads:
    its file must exist and it must have been trained on this model's hidden states."""
    from calm_core.calibration.thermometer import build_command, load_thermometer, mismatch, thermometer_path

    if args.thermometer is None:
        return None
    model = args.model or "embedded"
    path = thermometer_path(model) if args.thermometer == Path("shipped") else args.thermometer
    if not path.is_file():
        raise UsageError(f"no thermometer at {path}: build {model}'s with `{build_command(model)}`")
    thermometer = load_thermometer(path)
    why = mismatch(thermometer, model, ScoringConfig(rule=args.scoring or "cloze", chat_template=args.chat).name)
    if why:
        raise UsageError(f"the thermometer at {path} {why}")
    return thermometer


UNLABELLED_COLUMNS = ("dataset", "variant", "n", "confidence", "entropy")  # what a set without answers has


_UNLABELLED_NOTE = (
    "no answers in {sets}: accuracy, ECE and every score against the gold cannot be computed there.\n"
    "The thermometer is the only calibrator that applies (it reads the questions, not their answers);\n"
    "TS and ATS are fitted on labelled items of the domain they calibrate.\n"
    "Mean confidence and entropy of each forecast (--save-preds: per-question probabilities, gold -1):"
)


def _eval_reports(names: list[str], args: argparse.Namespace) -> dict[str, LoadReport]:
    """--data's reports. A file that lacks only its answer column is read unlabelled
    (answers UNLABELLED) when --thermometer is given, since a thermometer needs no labels;
    without it the loader's error stands, saying so. Every other problem is the loader's
    error, as for any labelled file: nothing else is relaxed."""
    answer = ColumnMapping.parse(args.mapping).answer if args.mapping else ColumnMapping().answer
    reports = {}
    for name in names:
        try:
            reports[name] = eval_io.read_set(name, "mc", args.limit, args)[0]
        except MissingColumns as err:
            if err.columns != [answer]:
                raise
            if args.thermometer is None:
                raise DataError(
                    f"{err}. A file without answers can only be calibrated by a thermometer: add --thermometer"
                ) from err
            reports[name] = load_dataset(
                name, args.limit, args.seed, args.mapping, kind=UNLABELLED_MC, encoding=eval_io.set_encoding(name, args)
            )
            print(
                f"calm: note: {name} has no `{answer}` column: scored without answers "
                f"(if another column holds them, name it with --mapping answer=COLUMN)",
                file=sys.stderr,
            )
        eval_io.note_rejected(reports[name])
    return reports


def _unlabelled_row(scores: Any, dataset: str, variant: str, calibrator: Any) -> dict[str, Any]:
    """What a set without answers can report of a variant: its size and how sure and how
    spread its forecasts are (no accuracy, no calibration error: they need the gold)."""
    from calm_core.scoring.evaluate import variant_probs

    probs = variant_probs(scores, calibrator)
    return {
        "dataset": dataset,
        "variant": variant,
        "n": len(scores.gold),
        "confidence": metrics.mean_confidence(probs),
        "entropy": metrics.mean_entropy(probs),
    }


def cmd_eval(args: argparse.Namespace) -> int:
    """`calm eval`: a finished run on more data (--run), open answers (--task openqa), or
    option scores of a model, base beside its post-hoc calibrators; or the option scores
    of lm-evaluation-harness samples (--from-lm-eval), no model loaded."""
    if args.from_lm_eval:
        return eval_from_lm_eval(args)
    if args.export is not None:
        return check_served_export(args)
    if not args.data:
        raise UsageError("give --data NAME (or --from-lm-eval DIR); with --model openai:URL, --export DIR works alone")
    if args.run:
        return eval_run(args)
    if args.task == "openqa":
        _check_served(args, "--task openqa generates answers, which")
        return eval_open(args)
    return _eval_mc(args)


@dataclass
class McTable:
    """What `calm eval` on option scores collects, set by set: labelled rows, rows of sets
    without answers, and the thermometer's temperature of each set."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unlabelled: list[dict[str, Any]] = field(default_factory=list)
    temperatures: list[dict[str, Any]] = field(default_factory=list)


def _eval_mc(args: argparse.Namespace) -> int:
    datasets = [name for group in args.data for name in group]
    cfg = ScoringConfig(rule=args.scoring or "cloze", chat_template=args.chat)
    # Check outputs and read every dataset before loading the model: a typo or an
    # unwritable --json fails in a second, not after a minute of loading and scoring.
    eval_io.check_outputs(args)
    _check_features(args, cfg)
    _check_served(args)
    reports = _eval_reports(datasets, args)
    fit_reports = _fit_reports(args)
    thermometer = _thermometer(args)
    lm = eval_io.load_lm(args)
    fits = _posthoc(args, lm, cfg, {name: list(report.items) for name, report in fit_reports.items()})
    table = McTable()
    for name in datasets:
        _score_set(args, lm, cfg, reports[name], name, fits, thermometer, table)
    _print_mc(args, lm, cfg, fits, table)
    if args.json:
        extra = {
            **({"unlabelled": table.unlabelled} if table.unlabelled else {}),
            **({"thermometer": table.temperatures} if thermometer is not None else {}),
            "scoring": cfg.to_dict(),
        }
        record = eval_io.eval_record(args, table.rows, lm, fits, "mcqa", reports, fit_reports, extra)
        atomic_write_json(args.json, record)
    return 0


def _fit_reports(args: argparse.Namespace) -> dict[str, LoadReport]:
    """The --fit-ts-on datasets, read and checked (enough items, flags that go together)."""
    from calm_core.calibration.posthoc import MIN_FIT_ITEMS

    fit_names = [name for group in (args.fit_ts_on or []) for name in group]
    if fit_names and args.ts_file:
        raise UsageError("use either --fit-ts-on or --ts-file, not both")
    if args.save_ts and len(fit_names) != 1:
        raise UsageError("--save-ts needs exactly one --fit-ts-on dataset")
    reports = eval_io.load_reports(fit_names, "mc", args.fit_limit, args)
    for name, report in reports.items():
        if len(report.items) < MIN_FIT_ITEMS:
            raise UsageError(
                f"Expected at least {MIN_FIT_ITEMS} items to fit TS on `{name}`, but it has {len(report.items)}"
            )
    return reports


def _score_set(
    args: argparse.Namespace,
    lm: Any,
    cfg: Any,
    report: LoadReport,
    name: str,
    fits: list[Any],
    thermometer: Any,
    table: McTable,
) -> None:
    """One set scored once (features captured), every variant's row into `table` and, with
    --save-preds, its predictions; a set without answers gets base and the thermometer only."""
    from calm_core.scoring.evaluate import predictions_frame, result_row
    from calm_core.scoring.features import FEATURES
    from calm_core.scoring.scorer import Capture
    from calm_core.scoring.served import scorer_of

    capture = Capture.FEATURES  # ats reads them; stored with the predictions only with --features
    if args.features == "options":
        capture |= Capture.OPTION_FEATURES
    scorer = scorer_of(lm, batch_size=args.batch_size, progress=not args.quiet)
    scores = scorer.score(list(report.items), cfg, capture=capture, dataset=name)
    labelled = report.kind != UNLABELLED_MC
    variants = [("base", None)] + [(f.variant, f.calibrator) for f in fits if labelled]
    if thermometer is not None:
        variants.append(("thermometer", thermometer))
        table.temperatures.append({"dataset": name, "temperature": thermometer.temperature(scores.features)})
    for variant, calibrator in variants:
        if labelled:
            table.rows.append(result_row(scores, name, variant, calibrator, n_bins=args.bins))
        else:
            table.unlabelled.append(_unlabelled_row(scores, name, variant, calibrator))
        if args.save_preds:
            frame = predictions_frame(scores, calibrator, report.items)
            if args.features is None:
                frame = frame.drop(columns=[FEATURES], errors="ignore")
            write_predictions(args.save_preds, variant, name, frame)


def _print_mc(args: argparse.Namespace, lm: Any, cfg: Any, fits: list[Any], table: McTable) -> None:
    from calm_core.scoring.evaluate import format_table, interval_table

    print(
        f"model: {lm.info.get('label', lm.info['name'])} ({lm.info['device']}, {lm.info['dtype']})  "
        f"scoring: {cfg.name}  bins: {args.bins}"
    )
    eval_io.print_posthoc(fits)
    for entry in table.temperatures:
        print(f"thermometer on {entry['dataset']}: T = {entry['temperature']:.4f} (from its inputs, no labels)")
    if table.rows:
        print(format_table(table.rows))
        print(f"90% bootstrap intervals (shifted by their bias, so each holds its figure; ECE on {args.bins} bins):")
        print(interval_table(table.rows))
    if table.unlabelled:
        print(_UNLABELLED_NOTE.format(sets=", ".join(dict.fromkeys(r["dataset"] for r in table.unlabelled))))
        print(format_table(table.unlabelled, UNLABELLED_COLUMNS))


COMMANDS = {"eval": cmd_eval}
