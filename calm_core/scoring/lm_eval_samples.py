"""lm-evaluation-harness `--log_samples` output read as option scores: calibrating a model
that runs somewhere else.

    tasks = read_harness_folder("results/")           # every samples_<task>_<date>.jsonl below it
    scores = tasks["arc_easy"].scores("acc")          # OptionScores: summed log-likelihoods (cloze)
    norm = tasks["arc_easy"].scores("acc_norm")       # the same divided by each choice's characters

Why: people evaluate large models with the harness on GPUs, vLLM or several machines and
keep its per-sample files. Each line of a multiple-choice task holds one log-likelihood per
choice (`filtered_resps`, stringified by the harness), the request pairs (context,
delimiter + choice) in `arguments`, the gold in `target` (an index, or the gold choice's
text) and the document in `doc` (its `subject`, where the task has one). Those
log-likelihoods are the studio's `cloze` scores of the same prompts, so every step after
scoring (TS, vector scaling, the verdict, reliability, selective thresholds) runs on them.

The harness's two accuracies are two forms of the same numbers, and the form is recorded
in the scores' `scoring` record: `acc` takes the sum (our `cloze`), `acc_norm` divides it by
the choice's length in characters, `len(choice)` in lm_eval 0.4 (`cloze_chars` here; our own
`cloze_norm` divides by tokens, which the samples do not hold). Rows that cannot be read
(a gold index out of range, several golds, a non-finite log-likelihood, mutual-information
requests) are rejected with their reason, never guessed; the harness itself only warns.
"""

from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from calm_core.data.schema import DataError, RowError
from calm_core.data.sources import bounded_lines, parse_json_line
from calm_core.scoring.options import OptionScores, pad_ragged

SAMPLES_FILE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d.\-]+)\.jsonl$")
SOURCE = "lm-evaluation-harness"
DEFAULT_DELIMITER = " "  # the harness's `target_delimiter` when no results file says otherwise
MAX_CHOICES = 100  # options per question; a row with more is rejected (the studio draws one bar each)
# Questions per task: the largest multiple-choice tasks of the harness hold tens of thousands
# (MMLU's 57 subjects together: 14,042). Each read question costs a few hundred bytes, so a
# file of millions of tiny lines (an upload's worth) is refused rather than held.
MAX_SAMPLES = 500_000


class _Rejected(Exception):
    """Why one sample line is not read, and the field at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class HarnessForm:
    """One of the harness's multiple-choice accuracies as a scoring rule of the studio."""

    metric: str  # the harness's metric name
    rule: str  # the name results and tables show
    normalisation: str  # what the summed log-likelihood is divided by


FORMS = {
    "acc": HarnessForm("acc", "cloze", "none: the sum of the choice's token log-likelihoods"),
    "acc_norm": HarnessForm("acc_norm", "cloze_chars", "the choice's length in characters (lm_eval's len(choice))"),
}


@dataclass
class HarnessTask:
    """One task's samples: per question, one log-likelihood and one length per choice."""

    task: str
    files: list[str]
    ids: list[str] = field(default_factory=list)
    loglik: list[np.ndarray] = field(default_factory=list)  # per item (K,) float64
    chars: list[np.ndarray] = field(default_factory=list)  # per item (K,) characters of each choice
    gold: list[int] = field(default_factory=list)
    subjects: list[str | None] = field(default_factory=list)
    rejected: list[RowError] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # the task's config from results_<date>.json, if found
    reported: dict[str, float] = field(default_factory=dict)  # the harness's own acc / acc_norm, if found
    model: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, metric: str = "acc", limit: int | None = None) -> OptionScores:
        """Option scores under the harness's `metric` form (FORMS), the first `limit` items."""
        if metric not in FORMS:
            raise ValueError(f"Expected `metric` to be one of {sorted(FORMS)}, but got {metric!r}")
        if not self.ids:
            raise DataError(f"Expected multiple-choice samples in {', '.join(self.files)}, but no row could be read")
        n = len(self.ids) if limit is None else min(limit, len(self.ids))
        rows = (
            self.loglik[:n]
            if metric == "acc"
            else [ll / c for ll, c in zip(self.loglik[:n], self.chars[:n], strict=True)]
        )
        gold = np.asarray(self.gold[:n], dtype=np.int64)
        return OptionScores(list(self.ids[:n]), pad_ragged(rows), gold, self.scoring(metric), dict(self.model))

    def scoring(self, metric: str) -> dict[str, Any]:
        """The record every result of these scores carries: where they came from and which form."""
        form = FORMS[metric]
        return {
            "rule": form.rule,
            "chat_template": bool(self.config.get("chat_template")),
            "source": SOURCE,
            "harness_metric": form.metric,
            "normalisation": form.normalisation,
            "task": self.task,
            "target_delimiter": self.config.get("target_delimiter", DEFAULT_DELIMITER),
            "num_fewshot": self.config.get("num_fewshot"),
        }

    def accuracy(self, metric: str = "acc") -> float:
        """Share of questions whose top choice under `metric` is the gold: what the harness reports."""
        scores = self.scores(metric)
        return float(np.mean(scores.predictions == scores.gold))

    def disagreement(self, metric: str) -> str | None:
        """Why our accuracy differs from the harness's own (None when it agrees or none is known):
        a sign that the file is not what this reader expects (another filter, mutual information)."""
        theirs = self.reported.get(metric)
        if theirs is None or not self.ids or self.rejected:
            return None
        ours = self.accuracy(metric)
        if abs(ours - theirs) <= 1e-9:
            return None
        return f"{self.task}: {metric} from the samples is {ours:.4f}, the harness reported {theirs:.4f}"


def read_samples(handle: IO[bytes], task: str, source: str, config: dict[str, Any] | None = None) -> HarnessTask:
    """One samples file (an open binary handle) as a HarnessTask; `source` names it in rejections.
    Lines are read at most `MAX_ROW_BYTES` at a time (data/limits.py), as an upload's are."""
    out = HarnessTask(task, [source], config=dict(config or {}))
    delimiter = out.config.get("target_delimiter", DEFAULT_DELIMITER)
    wanted: str | None = None  # one filter's lines: the first one seen ("none" for multiple choice)
    for number, raw in enumerate(bounded_lines(handle, source), start=1):
        if not raw.strip():
            continue
        record = parse_json_line(raw, source, number)
        if isinstance(record, RowError):
            out.rejected.append(record)
            continue
        wanted = wanted if wanted is not None else str(record.get("filter", "none"))
        if str(record.get("filter", "none")) != wanted:
            continue
        _add_row(out, record, delimiter, RowError(source, number, "", ""))
        if len(out) > MAX_SAMPLES:
            raise DataError(
                f"Expected at most {MAX_SAMPLES:,} questions in {source}, but it holds more: split the file"
            )
    return out


def read_samples_bytes(data: bytes, filename: str) -> HarnessTask:
    """An uploaded samples file (its bytes; the upload route bounds their size), its task
    named by the harness's file name or, for another name, by the name's stem."""
    match = SAMPLES_FILE.match(Path(filename).name)
    task = match["task"] if match else Path(filename).stem
    return read_samples(io.BytesIO(data), task, Path(filename).name)


def _add_row(out: HarnessTask, record: dict[str, Any], delimiter: str, where: RowError) -> None:
    """One sample line into `out`, or its RowError into `out.rejected`."""
    try:
        contexts, choices = _requests(record.get("arguments"), delimiter)
        loglik = _logliks(record, len(choices))
        gold = _gold(record.get("target"), choices)
    except _Rejected as err:
        out.rejected.append(RowError(where.source, where.row, err.field, err.message))
        return
    raw_doc = record.get("doc")
    doc: dict[str, Any] = raw_doc if isinstance(raw_doc, dict) else {}
    doc_id = record.get("doc_id", where.row - 1)
    out.ids.append(str(doc["id"]) if isinstance(doc.get("id"), (str, int)) else f"{out.task}-{doc_id}")
    out.loglik.append(loglik)
    out.chars.append(np.array([max(len(c), 1) for c in choices], dtype=np.float64))
    out.gold.append(gold)
    out.subjects.append(doc["subject"] if isinstance(doc.get("subject"), str) else None)


def _requests(arguments: Any, delimiter: str) -> tuple[list[str], list[str]]:
    """(contexts, choice texts) of a row's requests. The harness writes `arguments` as
    {"gen_args_i": {"arg_0": context, "arg_1": delimiter + choice}}; older versions as a list."""
    if isinstance(arguments, dict):
        keys = sorted(arguments, key=lambda k: int(k.rpartition("_")[2]) if k.rpartition("_")[2].isdigit() else -1)
        pairs = [arguments[k] for k in keys]
        pairs = [[p.get("arg_0"), p.get("arg_1")] if isinstance(p, dict) else p for p in pairs]
    elif isinstance(arguments, list):
        pairs = arguments
    else:
        raise _Rejected("Expected the requests of a multiple-choice task, but the row has none", "arguments")
    if not all(isinstance(p, list) and len(p) >= 2 and all(isinstance(x, str) for x in p[:2]) for p in pairs):
        raise _Rejected("Expected (context, continuation) text pairs: is this a multiple-choice task?", "arguments")
    contexts = [p[0] for p in pairs]
    if any(c == "" for c in contexts) and any(c != "" for c in contexts):
        raise _Rejected("Expected one request per choice, but got unconditional ones (acc_mutual_info)", "arguments")
    if not 2 <= len(pairs) <= MAX_CHOICES:
        raise _Rejected(f"Expected 2 to {MAX_CHOICES} choices, but got {len(pairs)}", "arguments")
    return contexts, [p[1][len(delimiter) :] if p[1].startswith(delimiter) else p[1] for p in pairs]


def _logliks(record: dict[str, Any], k: int) -> np.ndarray:
    """The row's (K,) log-likelihoods: `filtered_resps` (what the metrics read), else `resps`."""
    values = record.get("filtered_resps")
    if not isinstance(values, list):
        resps = record.get("resps")
        values = (
            [r[0] for r in resps] if isinstance(resps, list) and all(isinstance(r, list) and r for r in resps) else None
        )
    if not isinstance(values, list) or len(values) != k:
        raise _Rejected(f"Expected {k} responses, one per request, but got {_count(values)}", "filtered_resps")
    try:
        out = np.array([float(v[0] if isinstance(v, list) else v) for v in values], dtype=np.float64)
    except (TypeError, ValueError, IndexError):
        raise _Rejected(
            "Expected a log-likelihood per choice, but got text: is this a generation task?", "filtered_resps"
        ) from None
    if not np.isfinite(out).all():
        raise _Rejected("Expected finite log-likelihoods, but got inf or NaN", "filtered_resps")
    return out


def _count(values: Any) -> str:
    return str(len(values)) if isinstance(values, list) else "none"


def _gold(target: Any, choices: list[str]) -> int:
    """The gold index from the harness's `target` (str of an index, or the gold choice's text)."""
    text = str(target).strip() if target is not None else ""
    if text.startswith("["):
        raise _Rejected("Expected one gold choice, but the row has several", "target")
    if re.fullmatch(r"-?\d+", text):
        gold = int(text)
    elif text in [c.strip() for c in choices]:
        gold = [c.strip() for c in choices].index(text)
    else:
        raise _Rejected(f"Expected an option index or an option's text, but got {text[:60]!r}", "target")
    if not 0 <= gold < len(choices):
        raise _Rejected(f"Expected a gold index in 0..{len(choices) - 1}, but got {gold}", "target")
    return gold


def read_harness_folder(folder: str | Path) -> dict[str, HarnessTask]:
    """Every task's samples below `folder` (the harness's --output_path or a model's folder
    in it): the newest samples_<task>_<date>.jsonl of each task, with the task's config and
    the harness's own accuracies from the results_<date>.json beside it, if there is one."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise DataError(f"Expected a folder of lm-evaluation-harness output at {root}, but there is none")
    newest = _newest_files(root)
    if not newest:
        raise DataError(
            f"Expected samples_<task>_<date>.jsonl files below {root}, but found none: run lm_eval with --log_samples"
        )
    tasks = {}
    for task, path in sorted(newest.items()):
        results = _results_beside(path)
        with path.open("rb") as handle:
            tasks[task] = read_samples(handle, task, path.name, _task_config(results, task))
        tasks[task].reported = _reported(results, task)
        tasks[task].model = {"name": str(results.get("model_name", "")), "source": SOURCE} if results else {}
    return tasks


def _newest_files(root: Path) -> dict[str, Path]:
    """task -> its newest samples file below `root`; refused when two folders (two models) hold one task."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("samples_*.jsonl")):
        match = SAMPLES_FILE.match(path.name)
        if match is None:
            continue
        task, previous = match["task"], found.get(match["task"])
        if previous is not None and previous.parent != path.parent:
            raise DataError(
                f"Expected one model's samples of `{task}`, but {previous.parent} and {path.parent} both hold some: "
                "name one model's folder"
            )
        if previous is None or SAMPLES_FILE.match(previous.name)["date"] < match["date"]:  # type: ignore[index]
            found[task] = path
    return found


def _results_beside(samples: Path) -> dict[str, Any]:
    """The results_<date>.json written with a samples file ({} when absent or unreadable)."""
    date = SAMPLES_FILE.match(samples.name)["date"]  # type: ignore[index]
    path = samples.with_name(f"results_{date}.json")
    try:
        results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return results if isinstance(results, dict) else {}


def _task_config(results: dict[str, Any], task: str) -> dict[str, Any]:
    config = results.get("configs", {}).get(task, {})
    return {**config, "chat_template": results.get("chat_template")} if isinstance(config, dict) else {}


def _reported(results: dict[str, Any], task: str) -> dict[str, float]:
    """The harness's own `acc` and `acc_norm` of `task` (keys `acc,none`), where it wrote them."""
    numbers = results.get("results", {}).get(task, {})
    out = {}
    for metric in FORMS:
        value = numbers.get(f"{metric},none") if isinstance(numbers, dict) else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[metric] = float(value)
    return out
