"""One finished run as one self-contained HTML file to share: its settings, the metrics
table, reliability diagrams (base / ts / trained variants) per evaluation set, the alpha
summary and the BOME line. `calm report RUN_ID` and the Compare page write it.

    text = run_report_html(RunDir.at("20261201-031814-calm-3bf5"))   # -> "<!DOCTYPE html>..."

Figures are inline SVG, drawn by results/report_svg.py from `metrics.prepare_reliability`
tables: no script, no plotly, no network, so the file opens offline anywhere, prints, and
stays ~50 KB (inline plotly.js alone is ~4.8 MB). Hovering a bar shows its numbers (SVG
<title>). Every string that comes from a user or a file (names, datasets, paths) goes
through html.escape; numbers are formatted here. The page holds no local path: the model is
named and fingerprinted, and the whole page passes through the run's `Portable` last
(runs/portable.py). This module writes the sections and the page.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from html import escape
from typing import Any, Mapping

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.metrics.columns import cell, interval_names, is_missing
from calm_core.results import advice, verdict
from calm_core.results.curves import BOME_MEANINGS, bome_line, bome_name, bome_summary, series
from calm_core.results.fast_path_view import fast_path_items, setting_choice_lines
from calm_core.results.predictions import row_predictions
from calm_core.results.report_svg import line_svg, reliability_svg
from calm_core.results.run_facts import head_scope
from calm_core.results.tables import ADDED_MARK, added_lines, compare_rows, posthoc_lines, result_columns
from calm_core.runs.choices_record import RunChoices
from calm_core.runs.portable import Portable, portable_config
from calm_core.runs.records import RunEnvironment, RunResults, RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.training.config import recorded_bilevel

N_BINS = 15  # the project's ECE bins (results.json's `ece`); the table's ece_10 is the paper's 10


def run_report_html(run: RunDir, n_bins: int = N_BINS) -> str:
    """The whole report of a finished run as one HTML document (a str to write as UTF-8).
    Raises ValueError for a run without results.json (it has not finished its final
    evaluation); a damaged results.json raises RunFileError (a ValueError) naming it."""
    rows = compare_rows([run])  # one run: its rows as written, plus variant_raw / run
    train, method = run.config.train, run.config.train_method
    status = run.status_or_none()

    records = run.read_metrics()
    name = status.name if status is not None else None
    title = f"CALM report: {run.run_id}" + (f" ({name})" if name else "")
    results = run.results()
    portable = Portable.of(run)
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(status.state if status is not None else "unknown")} · generated '
        f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} by CALM Studio</p>",
        _verdict(results, method),
        _settings(run, portable, status),
        _metrics(rows, results),
        _diagrams(run, rows, n_bins),
        _alpha(records, train),
        _bome(records, train),
        HOW_TO_READ,
    ]
    return portable.text(_page(title, "\n".join(body)))  # no local path leaves in the file


# --- sections ------------------------------------------------------------------------


def _verdict(results: RunResults, method: str) -> str:
    """Which step the model is from and why, the calibrator to use (chosen on S_V; said
    plainly when the trained model does not win), why a baseline is missing, and the
    evidence on the evaluation sets with 90% intervals ("" for a run without either)."""
    selection, said = advice.selection_line(results), advice.recommendation_line(results, method)
    table = verdict.verdict_table(results)
    if not (selection or said or table):
        return ""
    lines = [_verdict_table(table)] if table else []
    lines += [f"<p>{escape(selection)}</p>"] if selection else []
    if said:
        wins = advice.method_recommended(results, method)
        lines.append(f'<p class="{"win" if wins else "lose"}"><b>{escape(said)}</b></p>')
    lines += [_heldout_table(results)] if said else []
    lines += [f'<p class="note">{escape(note)}</p>' for note in advice.missing_variant_notes(results).values()]
    rows = advice.evidence_rows(results, method) if selection or said else []  # the evidence for a verdict
    if rows:
        columns = ["dataset", "variant", *interval_names()]
        head = "".join(f"<th>{escape(c)}</th>" for c in columns)
        body = "".join(
            f'<tr><td class="t">{escape(r["dataset"])}</td><td class="t">{escape(r["variant"])}'
            f"{' *' if r['recommended'] else ''}</td>"
            + "".join(f"<td>{escape(r[m])}</td>" for m in interval_names())
            + "</tr>"
            for r in rows
        )
        lines.append(
            f'<table class="grid" id="evidence"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            '<p class="note">* recommended on S_V. Figures on the evaluation sets, each with its 90% '
            "bootstrap interval [lo, hi].</p>"
        )
    return f'<section id="verdict"><h2>Which model to use</h2>{"".join(lines)}</section>'


def _heldout_table(results: RunResults) -> str:
    """The recommendation's evidence (advice.heldout_rows): each variant's NLL and its
    change against the model as it is, with the paired interval ("" without rows)."""
    rows, columns = advice.heldout_rows(results), advice.evidence_columns(results)
    if not rows:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f'<td class="t">{escape(row[c])}</td>' for c in columns) + "</tr>" for row in rows)
    return (
        f'<table class="grid" id="heldout"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f'<p class="note">{escape(advice.evidence_caption(results))}</p>'
    )


def _verdict_table(table: list[dict[str, str]]) -> str:
    """One line per evaluation set (verdict.verdict_table): what the report opens with."""
    head = "".join(f"<th>{escape(c)}</th>" for c in verdict.VERDICT_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f'<td class="t">{escape(row[c])}</td>' for c in verdict.VERDICT_COLUMNS) + "</tr>"
        for row in table
    )
    return (
        f'<table class="grid" id="verdict-row"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f'<p class="note">{escape(verdict.VERDICT_CAPTION)}</p>'
    )


def _settings(run: RunDir, portable: Portable, status: RunStatus | None) -> str:
    """The training settings and the environment record as one table, then the whole
    config.json folded away; the model and the datasets by name (portable_config), with
    the model's fingerprint."""
    config = portable_config(run.config)
    env = run.config.environment
    items = _training_items(config.get("train") or {}, status, run.config.train.task, portable.fingerprint)
    items += setting_choice_lines(_choices(status))  # the scoring rule and precision, with the reason
    items += fast_path_items(_choices(status).fast_paths)  # measured, with the reason
    items += _environment_items(env)
    table = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in items if v is not None)
    config_text = json.dumps(config, indent=2, sort_keys=True, default=str)
    return (
        f'<section id="settings"><h2>Settings</h2><table class="kv">{table}</table>'
        f"<details><summary>config.json</summary><pre>{escape(config_text)}</pre></details></section>"
    )


def _environment_items(env: RunEnvironment | None) -> list[tuple[str, Any]]:
    """(label, value) of where the run was launched (config.json's `environment`)."""
    if env is None:
        return []
    versions = ", ".join(f"{k} {v}" for k, v in (env.versions or {}).items())
    return [
        ("environment", f"{env.machine}, Python {env.python}; {versions}"),
        ("git", env.git),
        ("created", env.created),
    ]


def _choices(status: RunStatus | None) -> RunChoices:
    """status.json's `choices` (none recorded when the status is lost: the report still shows the results)."""
    return status.choices if status is not None else RunChoices()


def _lora_targets(lora: dict[str, Any], status: RunStatus | None) -> str:
    """The modules LoRA adapted, as the run found them in its model (status.json's
    choices), and the request they came from when that was a group (`attention`)."""
    asked = list(lora.get("target_modules") or [])
    lora_choice = _choices(status).lora
    found = list(lora_choice.targets) if lora_choice is not None else []
    if not found or found == asked:
        return ", ".join(asked)
    return f"{', '.join(found)} ({', '.join(asked)})"


def _training_items(
    train: dict[str, Any], status: RunStatus | None, task: str, fingerprint: str | None
) -> list[tuple[str, Any]]:
    """(label, value) of method, scope, model (by name, and its files' `fingerprint`),
    scoring, data, optimizer, and the BOME settings of a calm run or the generation
    settings of an open-QA one."""
    model = status.model if status is not None else None
    loaded_as = [v for v in (model.kind, model.device, model.dtype) if v] if model is not None else []
    lora, t = train.get("lora") or {}, train.get
    items = [
        ("method", t("method")),
        ("task", task),
        ("head scope (effective)", head_scope(train) if train else None),
        ("model", t("model")),
        ("model fingerprint", fingerprint),
        ("loaded as", ", ".join(loaded_as) or None),
        ("scoring rule", f"{t('scoring')}, chat template {'on' if t('chat_template') else 'off'}"),
        ("steps", f"{status.step if status is not None else '?'} of {t('steps')}"),
        ("S_T (training set)", _data(train, "train")),
        ("S_V (held-out set)", _data(train, "heldout")),
        ("evaluation sets", _data(train, "eval")),
        (
            "optimizer",
            f"{t('optimizer')}, lr_theta {t('lr_theta')}, lr_alpha {t('lr_alpha')}, weight decay {t('weight_decay')}",
        ),
        ("batch sizes", f"{t('batch_size')} (S_T), {t('heldout_batch_size')} (S_V)"),
        ("LoRA", f"r {lora.get('r')}, alpha {lora.get('alpha')}, on {_lora_targets(lora, status)}"),
        ("seed", t("seed")),
    ]
    bome = recorded_bilevel(train)
    if t("method") == "calm" and bome is not None:
        items += [
            (
                "BOME inner solve",
                f"{bome.inner_steps} steps, lr {bome.inner_lr} ({bome.inner_rule}), start {bome.inner_start}",
            ),
            (
                "BOME step",
                f"eta {bome.eta}, constraint {bome.constraint}, phi {bome.phi}, max update norm {bome.max_update_norm}",
            ),
        ]
    if task == "openqa":
        gen = t("generation") or {}
        items.append(
            (
                "generation",
                f"{gen.get('n_samples')} samples at temperature {gen.get('temperature')}, "
                f"grouping {gen.get('grouping')}, prompt {gen.get('prompt')}",
            )
        )
    return items


def _data(train: dict[str, Any], key: str) -> str | None:
    """`name (first N items)` of S_T / S_V, or the evaluation sets joined."""
    names = train.get(f"{key}_data")
    if names is None:
        return None
    limit = train.get(f"{key}_limit")
    text = ", ".join(names) if isinstance(names, (list, tuple)) else str(names)
    return text + (f" (first {limit} items{' each' if key == 'eval' else ''})" if limit else "")


def _metrics(rows: list[dict[str, Any]], results: RunResults) -> str:
    """The final results table with the runs' columns (metrics.columns; open-QA ones for
    an open-QA run) and a line per post-hoc calibrator: what it fitted, or why it is missing."""
    columns = result_columns(rows)
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_td(c, r.get(c)) for c in columns) + "</tr>" for r in rows)
    posthoc_line = escape(" ".join(posthoc_lines(results)))
    added = "".join(f'<p class="note added">{escape(line)}</p>' for line in added_lines(rows))
    note = (
        "ECE: 15 equal-width bins; ece_10: the paper's 10. The first evaluation set is the in-domain one. "
        + (
            f"A set marked{ADDED_MARK} was evaluated after training (`calm eval --run`): the model at the run's "
            "selected step, the post-hoc calibrators as fitted on S_V. "
            if any(r.get("added_after_training") for r in rows)
            else ""
        )
        + (
            "Open answers: acc is the greedy answer's exact match, sem_acc the Sem1 (modal) answer's; ece, "
            "ece_10 and auroc are on (Sem1 confidence, modal answer correct)."
            if "sem_acc" in columns
            else ""
        )
    )
    return (
        f'<section id="metrics"><h2>Metrics</h2><table class="grid"><thead><tr>{head}</tr></thead>'
        f'<tbody>{body}</tbody></table><p class="note">{escape(note)} {posthoc_line}</p>{added}</section>'
    )


def _td(column: str, value: Any) -> str:
    """A table cell: text left-aligned (class t), numbers right-aligned by the CSS."""
    return (
        f'<td class="t">{escape(value)}</td>' if isinstance(value, str) else f"<td>{escape(_cell(value, column))}</td>"
    )


def _cell(value: Any, column: str = "") -> str:
    """format_table's cells (metrics.columns' formats), with a dash for a missing or nan value."""
    return "–" if is_missing(value) else cell(column, value)


def _diagrams(run: RunDir, rows: list[dict[str, Any]], n_bins: int) -> str:
    """Per evaluation set, one reliability diagram per variant, side by side."""
    parts = [
        '<section id="reliability"><h2>Reliability diagrams</h2>',
        '<p class="note">Equal-mass bins, as many as the item count supports (about its square root, 3 to 15). '
        "Bars: accuracy per bin; the red (blue) segment reaches up (down) to the bin's mean confidence, so red "
        "is over-confidence; whiskers: 90% Wilson interval of the bin's accuracy; an outlined bar is a bin of "
        "one item, whose accuracy is that one answer; below, how many items fell into each bin. Under each "
        f"diagram: the ECE ({n_bins} equal-width bins) that a perfectly calibrated model would show at the same "
        "confidences and size, from chance alone."
        + (
            " Open answers: confidence is Sem1 and correct means the modal answer matches."
            if run.config.train.task == "openqa"
            else ""
        )
        + "</p>",
    ]
    missing = advice.missing_variant_notes(run.results())
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        figures = [_diagram(run, row, n_bins) for row in rows if row["dataset"] == dataset]
        figures += [
            f'<figure class="missing"><figcaption><b>{escape(name)}</b>: {escape(note)}</figcaption></figure>'
            for name, note in missing.items()
        ]  # where the variant's diagram would be
        parts.append(f'<h3>{escape(dataset)}</h3><div class="figs">{"".join(figures)}</div>')
    return "\n".join(parts) + "</section>"


def _diagram(run: RunDir, row: dict[str, Any], n_bins: int) -> str:
    """One variant's figure, from its predictions (items without a confidence, open-QA
    items without samples, are left out and counted), or a note saying why not."""
    variant = escape(row["variant"])
    try:
        confidence, correct = row_predictions(run, row)
    except (ValueError, KeyError) as error:  # a missing, damaged or foreign Parquet: say so in place of the figure
        return f"<figure><figcaption><b>{variant}</b>: {escape(str(error))}</figcaption></figure>"
    keep = ~(np.isnan(confidence) | np.isnan(correct))  # (N,)
    if not keep.any():
        return f"<figure><figcaption><b>{variant}</b>: no item has a confidence</figcaption></figure>"
    c, a = confidence[keep], correct[keep]
    data = metrics.prepare_reliability(c, a)  # equal-mass bins from the item count
    noise = metrics.noise_ece(c, n_bins=n_bins)
    left_out = f", {int((~keep).sum())} without confidence" if not keep.all() else ""
    acc_name = "sem_acc" if row.get("task") == "openqa" else "acc"  # open QA: the modal answer's accuracy
    caption = (
        f"<b>{variant}</b>: {acc_name} {a.mean():.3f}, mean confidence {c.mean():.3f}, "
        f"ECE {_cell(row.get('ece'), 'ece')}, n {int(keep.sum())}{left_out}"
    )
    caption += f"<br>{escape(noise.sentence(metrics.confidence_ece(c, a, n_bins=n_bins)))}."
    return f"<figure>{reliability_svg(data.to_records())}<figcaption>{caption}</figcaption></figure>"


def _alpha(records: list[dict[str, Any]], train: Mapping[str, Any]) -> str:
    """The last logged alpha statistics (and vectors, options scope), and tau_mean over steps."""
    last = records[-1] if records else {}
    stats = {k[6:]: v for k, v in last.items() if k.startswith("alpha/") and isinstance(v, (int, float))}
    if not stats:
        method = escape(str(train.get("method", "?")))
        return (
            '<section id="alpha"><h2>Calibration head alpha</h2><p>This run logged no calibration head '
            f"parameters (no alpha/* in metrics.jsonl: method {method}).</p></section>"
        )
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{v:.6g}</td></tr>" for k, v in stats.items())
    vectors = {n: last[f"alpha/{n}"] for n in ("tau", "l") if isinstance(last.get(f"alpha/{n}"), list)}
    per_option = ""
    if vectors:
        size = max(len(v) for v in vectors.values())
        head = "".join(f"<th>option {chr(65 + k) if k < 26 else k + 1}</th>" for k in range(size))
        per_option = (
            '<table class="grid"><tr><th></th>'
            + head
            + "</tr>"
            + "".join(
                f"<tr><th>{n}</th>" + "".join(f"<td>{float(x):.4f}</td>" for x in v) + "</tr>"
                for n, v in vectors.items()
            )
            + "</table>"
        )
    curves = {n: series(records, f"alpha/{n}") for n in ("tau_mean", "tau_min", "tau_max")}
    chart = line_svg({n: c for n, c in curves.items() if c[0]}, "step", "tau") if curves["tau_mean"][0] else ""
    return (
        f'<section id="alpha"><h2>Calibration head alpha (step {last.get("step")})</h2>'
        '<p class="note">p = softmax(z / tau + l): tau above 1 flattens the forecast (less confident), '
        "below 1 sharpens it; l shifts options (or tokens) against each other.</p>"
        f'<div class="figs"><table class="kv">{rows}</table>{chart}</div>{per_option}</section>'
    )


def _bome(records: list[dict[str, Any]], train: Mapping[str, Any]) -> str:
    """BOME's diagnostics line and their means over the last 10 steps (calm runs only)."""
    bome = recorded_bilevel(train)
    summary = bome_summary(records, bome.eta if bome else None)
    if not summary:
        return ""
    rows = "".join(
        f"<tr><th>{escape(bome_name(k))}</th><td>{summary[k]:.4g}</td><td>{escape(meaning)}</td></tr>"
        for k, meaning in BOME_MEANINGS.items()
        if k in summary
    )  # each described by its glossary entry, in plain words, as on the Monitor
    return (
        f'<section id="bome"><h2>BOME diagnostics</h2><p><b>{escape(bome_line(summary))}</b> '
        f"(means over the last {min(10, summary['steps'])} of {summary['steps']} logged steps)</p>"
        f'<table class="kv">{rows}</table></section>'
    )


HOW_TO_READ = """<section id="read"><h2>How to read this</h2><ul>
<li><b>ECE</b> is the mean gap between confidence and accuracy over bins: lower is better calibrated.
Read it beside <b>AUROC</b> (does confidence rank right answers above wrong ones? 0.5 is chance) and the
<b>mean confidence</b>: a near-uniform forecast (confidence ~ 1/K on every item) has a small ECE and tells
nothing, and CALM's entropy objective pulls confidence toward 1/K.</li>
<li><b>base</b> is the untouched model, <b>ts</b> post-hoc temperature scaling fitted on S_V, <b>calm</b>
(or the method's name) the trained model with its head, <b>*_theta_only</b> the trained weights without it.</li>
<li>A trained variant whose accuracy fell below base has bought its ECE with accuracy.</li>
</ul></section>"""


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:0}.sub,.note{color:#666;font-size:.9em}table{border-collapse:collapse;margin:.5em 0}
th,td{padding:3px 8px;text-align:left;font-size:.9em;vertical-align:top}
table.grid td,table.grid th{border:1px solid #ddd}table.grid td{text-align:right;font-variant-numeric:tabular-nums}
table.grid td.t{text-align:left}table.kv th{color:#555;font-weight:600}
.figs{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}figure{margin:0;max-width:250px}
figcaption{font-size:.85em}.win{color:#1f7a3a}.lose{color:#a35a00}pre{font-size:.8em;background:#f6f6f6;padding:.5em;overflow:auto}section{margin-top:1.5em}"""


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
