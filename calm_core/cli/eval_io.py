"""What `calm eval`'s paths share: the model and scoring flags, loading the model and the
datasets (rejected rows named on stderr; a file whose columns the default names miss read
with the mapping saved with an upload of the same columns, or with the Data page's guess,
or refused with the `--mapping` to give), checking output paths before any work, and the `--json` record,
built here once for both tasks."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from calm_core.data.catalog import split_slice
from calm_core.data.encoding import file_encoding, is_utf8_name, utf8_copy
from calm_core.data.guess import GUESS_ROWS, guess_column_mapping
from calm_core.data.mapping import MissingColumns, has_column
from calm_core.data.readers import FORMATS, detect_format, peek_records
from calm_core.data.schema import REJECTED_SHOWN, DataError, LoadReport
from calm_core.data.uploads import saved_mappings
from calm_core.paths import ensure_writable
from calm_core.provenance import environment_record
from calm_core.scoring.prompts import RULES

DETECTED = "detected_encodings"  # on the parsed arguments: file -> the encoding found for it (None: UTF-8)
JSON_REJECTED_KEPT = 100  # rejected rows listed per dataset in `--json`; `n_rejected` is always exact


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        help="'embedded' (default), 'gemma3-270m', a local model dir / .gguf, a hub id, or openai:URL[#NAME] "
        "(a vLLM / llama.cpp server's /v1/completions, scored from its prompt log-probabilities)",
    )
    parser.add_argument("--tokenizer", help="with --model openai:URL: the served model's tokenizer (default: its id)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    parser.add_argument("--trust-remote-code", action="store_true", help="run model code from the hub (off by default)")


def add_scoring_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scoring",
        choices=list(RULES),
        help="scoring rule, default cloze (recorded with every result); see calm_core/scoring/prompts.py",
    )
    parser.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per forward pass")
    parser.add_argument("--bins", type=int, default=15, help="ECE bins (equal width); ece_10 is always added")


def load_lm(args: argparse.Namespace) -> Any:
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.scoring.served import is_served, load_served

    if is_served(args.model):
        return load_served(args.model, getattr(args, "tokenizer", None))

    spec = ModelSpec(
        name=args.model or "embedded", device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code
    )
    return load_model(spec)


def check_outputs(args: argparse.Namespace) -> None:
    """Every output `calm eval` will write, checked before any data or model is loaded."""
    for attribute, kind in (("json", "file"), ("save_ts", "file"), ("save_preds", "directory")):
        if getattr(args, attribute) is not None:
            setattr(args, attribute, ensure_writable(getattr(args, attribute), kind))


def load_reports(names: list[str], kind: str, limit: int | None, args: argparse.Namespace) -> dict[str, LoadReport]:
    """Reports of `names` (items + rejected rows); each rejection is noted on stderr now,
    before the model loads, so a person sees at once that part of a file was left out."""
    reports = {name: read_set(name, kind, limit, args)[0] for name in names}
    for report in reports.values():
        note_rejected(report)
    return reports


def read_set(name: str, kind: str, limit: int | None, args: argparse.Namespace) -> tuple[LoadReport, Any]:
    """(report, the mapping it was read with) of one dataset: `--mapping` when given. A
    file whose columns the default names miss is read with the mapping saved with an
    upload that reads its columns, or else with the Data page's guess when it names
    only columns the file has (either said on stderr); otherwise MissingColumns says
    which `--mapping` to give."""
    from calm_core.scoring.evaluate import load_report

    encoding = set_encoding(name, args)
    try:
        return load_report(name, kind, limit, args.seed, args.mapping, encoding), args.mapping
    except MissingColumns as err:
        if args.mapping is not None or not _is_file(name):
            raise
        mapping = _saved_mapping(name, kind, err) or _guessed_mapping(name, kind, err, encoding)
    return load_report(name, kind, limit, args.seed, mapping, encoding), mapping


def set_encoding(name: str, args: argparse.Namespace) -> str | None:
    """The text encoding `name` is read in: `--encoding` when given; else, for a CSV or
    JSON file that is not UTF-8, the one it looks like (`likely_encoding`, which the Data
    page reads it in with one click), said once on stderr; None (UTF-8) otherwise. Read as
    UTF-8, such a file loses every row with an accent, so the command would refuse a file
    the page takes. Each file is looked at once per command, however often it is read."""
    given: str | None = getattr(args, "encoding", None)
    if given is not None or not _is_file(name):
        return given
    detected: dict[str, str | None] = vars(args).setdefault(DETECTED, {})
    if name not in detected:
        detected[name] = _detected_encoding(name)
    return detected[name]


def _detected_encoding(name: str) -> str | None:
    """The encoding the file `name` looks like, with the stderr note naming it; None for
    UTF-8, Parquet (UTF-8 by definition) or a file that cannot be read (its reader says why)."""
    path = Path(split_slice(name.strip())[0]).expanduser()
    guess = None if detect_format(path) == "parquet" else file_encoding(path)
    if guess is None:
        return None
    print(
        f"calm: note: {name}: not UTF-8 text, so it is read as {guess.label}, the encoding it looks like "
        "(as the Data page's Read it as button reads it); --encoding replaces it",
        file=sys.stderr,
    )
    return guess.encoding


def _is_file(name: str) -> bool:
    """Whether `name` is a file path (the catalog's own sets use the default column names)."""
    return Path(split_slice(name.strip())[0]).suffix.lower() in FORMATS


def _saved_mapping(name: str, kind: str, err: Any) -> Any:
    """The one mapping saved with uploads that read this file's columns (`err.found`),
    said on stderr; None when no upload has them; MissingColumns naming the choice when
    several were saved with different mappings."""
    found = saved_mappings(err.found, kind)
    distinct = {mapping.to_text(): upload for upload, mapping in reversed(found)}  # the newest upload of each
    if not distinct:
        return None
    if len(distinct) == 1:
        (text, upload), mapping = next(iter(distinct.items())), found[0][1]
        print(
            f"calm: note: {name}: reading its columns with the mapping saved with {upload} ({text}); "
            "--mapping replaces it",
            file=sys.stderr,
        )
        return mapping
    choices = "; ".join(f"{upload}'s --mapping '{text}'" for text, upload in distinct.items())
    way_out = f"Uploads with these columns were saved with different mappings, so name one: {choices}"
    raise MissingColumns(err.columns, f"{err}. {way_out}", err.found) from None


def _guessed_mapping(name: str, kind: str, err: Any, encoding: str | None) -> Any:
    """The Data page's guess for the file's columns (`guess_column_mapping`, from its first
    readable rows), said on stderr, when every column `kind` needs is one the file has;
    otherwise MissingColumns with the guess as `--mapping`'s text, `?` where it is unsure."""
    mapping = guess_column_mapping(err.found, _first_records(name, encoding))
    text = mapping.to_text()
    if all(has_column(err.found, column) for column in mapping.required_columns(kind)):
        print(
            f"calm: note: {name}: no --mapping given, so its columns are read as the Data page guesses them "
            f"({text}); --mapping replaces it",
            file=sys.stderr,
        )
        return mapping
    parts = []
    for part in text.split(", "):
        key, _, value = part.partition("=")
        named = [v for v in value.split("|") if v] if key in ("question", "choices", "answer", "labels") else []
        parts.append(f"{key}=?" if any(not has_column(err.found, v) for v in named) else part)
    way_out = (
        f"Name the columns with --mapping '{', '.join(parts)}' (a guess: put a column's name for each ?), "
        "or upload the file on the Data page, which guesses the mapping with you and shows it as text"
    )
    raise MissingColumns(err.columns, f"{err}. {way_out}", err.found) from None


def _first_records(name: str, encoding: str | None) -> list[Any]:
    """The file's first readable rows, as the Data page reads them for its guess (in
    `encoding` when one is given); [] when none can be read (the guess then reads names alone)."""
    path = Path(split_slice(name.strip())[0]).expanduser()
    try:
        if is_utf8_name(encoding):
            return peek_records(path, rows=GUESS_ROWS, source=path.name)
        with tempfile.TemporaryDirectory(prefix="calm-guess-") as folder:
            copy = utf8_copy(path, str(encoding), Path(folder))
            return peek_records(copy, rows=GUESS_ROWS, source=path.name)
    except (DataError, OSError):
        return []


def note_rejected(report: LoadReport) -> None:
    lines = report.rejection_lines(REJECTED_SHOWN)
    if lines:
        print(f"calm: note: {lines[0]}:", *(f"  {line}" for line in lines[1:]), sep="\n", file=sys.stderr)


def data_record(reports: dict[str, LoadReport], role: str) -> list[dict[str, Any]]:
    """`--json` entries: per dataset, how many rows were kept and rejected, and why."""
    return [
        {"dataset": name, "role": role, **report.rejected_record(JSON_REJECTED_KEPT)}
        for name, report in reports.items()
    ]


def posthoc_record(fits: list[Any], task: str) -> dict[str, list[dict[str, Any]]]:
    """`--json` entries per calibrator name (`ts`: one record per fit set, [] when none)."""
    from calm_core.calibration.posthoc import for_task

    names = list(dict.fromkeys([*for_task(task), *(f.calibrator.name for f in fits)]))
    return {name: [f.record for f in fits if f.calibrator.name == name] for name in names}


def print_posthoc(fits: list[Any], suffix: str = "") -> None:
    """`ts: T = 1.2345` per post-hoc variant, and the calibrator's note when its fit is degenerate."""
    for fit in fits:
        print(f"{fit.variant}: {fit.calibrator.describe()}{suffix}")
        warning = fit.calibrator.warning()
        if warning:
            print(f"  note: {warning}")


def eval_record(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    lm: Any,
    fits: list[Any],
    task: str,
    reports: dict[str, Any],
    fit_reports: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """`calm eval --json`'s record, one shape for both tasks: the rows, the model, the
    post-hoc fits, every dataset read (kept and rejected rows), the limits, the seed and the
    environment; `extra` holds what only one task has (scoring rule or generation settings)."""
    return {
        "results": rows,
        "model": lm.info,
        **extra,
        **posthoc_record(fits, task),
        "datasets": data_record(reports, "eval") + data_record(fit_reports, "fit"),
        "limit": args.limit,
        "seed": args.seed,
        "environment": environment_record(),
    }
