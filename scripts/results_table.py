"""Seed-averaged results of finished runs, with bootstrap intervals and the issue's targets.

    .venv/bin/python scripts/results_table.py --name-prefix arc- [--json docs/results/arc_easy_calm.json]

Runs are grouped by name without its `-s<seed>` suffix (`arc-calm-s0`, `arc-calm-s1` ->
`arc-calm`). For every variant (base, ts, the method, its theta-only ablation) and
evaluation set the table gives the mean over seeds of accuracy, ECE (15 and 10 bins),
AUROC, AURC and mean confidence, each with a 90% bootstrap interval: every draw resamples
the items of every seed's predictions independently and averages the seeds, so the
interval covers item noise (seeds are few; their spread is printed too); the percentile
interval is moved by the draws' median bias, as calm_core's `bootstrap_ci` does, so that a
binned ECE's interval holds the figure it is shown beside.
`base` and the post-hoc calibrators (ts, vs) are listed with every group, over that
group's own seeds, so a method is always compared with base and TS on the same seeds
(a group whose third seed did not finish is compared on its two).

Verdicts (issue 21; first evaluation set = in domain), per trained variant:
- (a) no set loses more than one point of accuracy against base (one item on a set
  under 100 items); gains are listed;
- (b) in-domain ECE <= TS + 0.02;
- (c) mean out-of-domain ECE below TS's (the paper's central claim);
- (d) AUROC not below base's 90% interval on any set;
- (e) mean confidence > 1/K + 0.05 wherever accuracy > 1/K + 0.1;
- (f) no set's ECE worse than base's by more than 0.02 (issue 29: a temperature fitted where
  the model is right half the time must not cool a set it answers 86% right);
- (g) mean AUROC over the sets at or above base's.
Every variant but base and the theta-only ablations is judged, post-hoc calibrators too
(TS's (b) and (c) compare it with itself). `--below-chance SETS` keeps sets where the model
is near chance out of the verdicts and reports their mean ECE as a second out-of-domain column.
Pure reading of run directories; every metric is calm_core.calibration.metrics'.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METRICS = ("acc", "ece", "ece_10", "auroc", "aurc", "confidence")
SEED = re.compile(r"-s(\d+)$")


def _metric(name: str, confidence: np.ndarray, correct: np.ndarray) -> float:
    from calm_core.calibration import metrics

    if name == "acc":
        return float(correct.mean())
    if name == "confidence":
        return float(confidence.mean())
    if name in ("ece", "ece_10"):
        return metrics.confidence_ece(confidence, correct, n_bins=15 if name == "ece" else 10)
    if name == "auroc":
        return metrics.confidence_auroc(confidence, correct)
    return metrics.confidence_aurc(confidence, correct)


def _predictions(run, variant: str, dataset: str) -> tuple[np.ndarray, np.ndarray, float]:
    """(confidence, correct, mean 1/K) of one variant on one set."""
    import pandas as pd

    from calm_core.results.predictions import predictions
    from calm_core.runs.layout import predictions_path

    confidence, correct = predictions(run, variant, dataset)
    frame = pd.read_parquet(predictions_path(run.path, variant, dataset), columns=["probs"])
    return confidence, correct, float(np.mean([1.0 / len(p) for p in frame["probs"]]))


def collect(prefix: str, root: Path | None) -> dict:
    """{(group, variant): {dataset: [(confidence, correct, 1/K) per seed]}}, datasets in order."""
    from calm_core.runs.listing import list_runs
    from calm_core.runs.rundir import RunDir

    table: dict = defaultdict(lambda: defaultdict(list))
    answered: dict = defaultdict(lambda: defaultdict(list))
    datasets: list[str] = []
    for summary in sorted(list_runs(root), key=lambda s: s.name or ""):
        if summary.state != "finished" or not (summary.name or "").startswith(prefix):
            continue
        run = RunDir.open(summary.path)
        group, seed = SEED.sub("", summary.name), int((SEED.search(summary.name) or [0, 0])[1])
        for row in run.results().rows:
            variant, dataset = row.variant, row.dataset
            if dataset not in datasets:
                datasets.append(dataset)
            table[(group, variant)][dataset].append(_predictions(run, variant, dataset))
        for variant, sets in _answered(run).items():
            for dataset, fraction in sets.items():
                answered[(group, variant)][dataset].append(fraction)
    return {"table": table, "datasets": datasets, "answered": answered}


SELECTIVE_TARGET = 0.1  # the error among answered that the threshold keeps, chosen on S_V


def _answered(run) -> dict[str, dict[str, tuple[float, float]]]:
    """{variant: {dataset: (the fraction answered, the error among answered)}} under the studio's default selective rule
    at a 10% target error, its threshold chosen on the run's S_V (results/selective.py);
    variants without S_V probabilities, or whose S_V is too small for the rule, have none."""
    from calm_core.calibration.selective_summary import summarize_selective
    from calm_core.results import selective as sel

    out: dict[str, dict[str, tuple[float, float]]] = {}
    for variant in sel.heldout_variants(run):
        choice = sel.choose(run, sel.SelectiveRequest(variant, SELECTIVE_TARGET), variant)
        if choice.threshold is None:
            continue
        out[variant] = {}
        for _, dataset, added in sel.evaluation_sets(run, variant):
            if not added:
                probs, gold = sel.set_probs(run, variant, dataset, added)
                summary = summarize_selective(probs, gold, choice.threshold.threshold)
                out[variant][dataset] = (summary.answered.value, summary.error_answered.value)
    return out


def summarize(per_seed: list, n_boot: int, seed: int = 0) -> dict:
    """Mean over seeds of every metric, its 90% bootstrap interval and the seeds' spread."""
    rng = np.random.default_rng(seed)
    out: dict = {"seeds": len(per_seed), "inv_k": float(np.mean([s[2] for s in per_seed]))}
    for name in METRICS:
        values = [_metric(name, c, a) for c, a, _ in per_seed]
        draws = []
        for _ in range(n_boot):
            draw = []
            for c, a, _ in per_seed:
                idx = rng.integers(0, len(a), len(a))
                draw.append(_metric(name, c[idx], a[idx]))
            draws.append(np.nanmean(draw))
        point = float(np.mean(values))
        lo, median, hi = np.nanpercentile(draws, [5, 50, 95])
        lo, hi = point - (median - lo), point + (hi - median)  # moved by the median bias, as bootstrap_ci's
        out[name] = {"mean": point, "lo": float(lo), "hi": float(hi),
                     "seed_sd": float(np.std(values)) if len(values) > 1 else 0.0}
    return out


ECE_SLACK = 0.02  # (f): how much worse than base a set's ECE may be


def verdict_checks(rows: dict, datasets: list[str], sizes: dict[str, int]) -> dict[tuple[str, str], list]:
    """The five verdicts of issue 21 for every trained variant: {(run, variant): [(letter,
    met, text)]}: (a) no set loses more than one point of accuracy against base (one item
    on a set under 100 items); (b) in-domain ECE <= TS + 0.02; (c) mean out-of-domain ECE
    below TS's; (d) AUROC not below base's interval on any set; (e) mean confidence >
    1/K + 0.05 wherever accuracy > 1/K + 0.1."""
    from calm_core.calibration.recommend import accuracy_slack


    in_domain, ood = datasets[0], datasets[1:]
    checks: dict[tuple[str, str], list] = {}
    for key, sets in rows.items():
        if key[1] == "base" or key[1].endswith("_theta_only") or any(d not in sets for d in datasets):
            continue
        base, ts = rows.get((key[0], "base"), {}), rows.get((key[0], "ts"), {})  # on the same seeds
        out = checks[key] = []
        lost = {d: round(sets[d]["acc"]["mean"] - base[d]["acc"]["mean"], 3) for d in datasets
                if sets[d]["acc"]["mean"] < base[d]["acc"]["mean"] - accuracy_slack(sizes[d]) - 1e-9}
        gained = {d: round(sets[d]["acc"]["mean"] - base[d]["acc"]["mean"], 3) for d in datasets
                  if sets[d]["acc"]["mean"] > base[d]["acc"]["mean"] + 1e-9}
        out.append(("a", not lost, f"accuracy lost beyond one point / one item on {lost or 'no set'}"
                                   f"{f' (gained on {gained})' if gained else ''}"))
        if ts:
            ece, ts_ece = sets[in_domain]["ece"]["mean"], ts[in_domain]["ece"]["mean"]
            out.append(("b", ece <= ts_ece + 0.02, f"in-domain ECE {ece:.3f} vs TS {ts_ece:.3f} + 0.02"))
            if ood:
                ece, ts_ece = (np.mean([s[d]["ece"]["mean"] for d in ood]) for s in (sets, ts))
                base_ece = np.mean([base[d]["ece"]["mean"] for d in ood])
                out.append(("c", ece < ts_ece, f"mean OOD ECE {ece:.3f} vs TS {ts_ece:.3f} (base {base_ece:.3f})"))
        below = [d for d in datasets if sets[d]["auroc"]["mean"] < base[d]["auroc"]["lo"]]
        out.append(("d", not below, f"AUROC below base's interval on {below or 'no set'}"))
        flat = [d for d in datasets if sets[d]["acc"]["mean"] > sets[d]["inv_k"] + 0.1
                and sets[d]["confidence"]["mean"] <= sets[d]["inv_k"] + 0.05]
        out.append(("e", not flat, f"mean confidence <= 1/K + 0.05 where accuracy > 1/K + 0.1 on {flat or 'no set'}"))
        worse = {d: round(sets[d]["ece"]["mean"] - base[d]["ece"]["mean"], 3) for d in datasets
                 if sets[d]["ece"]["mean"] > base[d]["ece"]["mean"] + ECE_SLACK}
        out.append(("f", not worse, f"ECE worse than base + {ECE_SLACK} on {worse or 'no set'}"))
        auroc, base_auroc = (np.nanmean([s[d]["auroc"]["mean"] for d in datasets]) for s in (sets, base))  # none
        # on a set answered all right
        out.append(("g", bool(auroc >= base_auroc - 1e-12), f"mean AUROC {auroc:.3f} vs base {base_auroc:.3f}"))
    return checks


def verdicts(rows: dict, datasets: list[str], sizes: dict[str, int]) -> list[str]:
    """`verdict_checks` as lines of text."""
    return [f"{key[0]} ({key[1]}): ({letter}) {text} -> {'met' if met else 'MISSED'}"
            for key, checks in verdict_checks(rows, datasets, sizes).items() for letter, met, text in checks]


def summary_table(rows: dict, datasets: list[str], sizes: dict[str, int], below: list[str] = (),
                  answered: dict | None = None) -> str:
    """The headline: per variant, in-domain (the first set) accuracy, ECE, AUROC and mean
    confidence with intervals, the mean accuracy, ECE, AUROC and AURC over the other sets,
    the fraction answered there at a 10% target error and the error among those answered
    (`answered`: collect's, "-" where a variant has no S_V probabilities or its S_V is too
    small for the rule), the mean ECE
    over the below-chance sets, and which verdicts it meets."""
    answered = answered or {}
    in_domain, ood = datasets[0], datasets[1:]
    checks = verdict_checks(rows, datasets, sizes)

    def cell(m: dict) -> str:
        return f"{m['mean']:.3f} [{m['lo']:.3f}, {m['hi']:.3f}]"

    lines = ["| run | variant | seeds | ID acc | ID ECE | ID AUROC | ID confidence | OOD acc (mean) | OOD ECE (mean) "
             "| OOD ECE / TS | OOD ECE / base | OOD AUROC (mean) | OOD AURC (mean) | OOD answered at 10% (error) "
             "| below-chance ECE (mean) | verdicts met |",
             "|" + "---|" * 16]

    def ood_mean(variant_sets: dict, metric: str, among: list[str]) -> float:
        """The mean of `metric` over `among` (the sets the compared variant has)."""
        values = [variant_sets[d][metric]["mean"] for d in among if d in variant_sets]
        return float(np.mean(values)) if len(values) == len(among) and values else float("nan")

    for key, sets in rows.items():
        if key[1].endswith("_theta_only") or in_domain not in sets:
            continue
        have = [d for d in ood if d in sets]  # vector scaling has no row on a set with another K
        ood_acc = np.mean([sets[d]["acc"]["mean"] for d in have]) if have else float("nan")
        ood_ece = ood_mean(sets, "ece", have)
        aurocs = [sets[d]["auroc"]["mean"] for d in have if not np.isnan(sets[d]["auroc"]["mean"])]
        ood_auroc = float(np.mean(aurocs)) if aurocs else float("nan")  # a set answered all right has none
        ood_aurc = float(np.mean([sets[d]["aurc"]["mean"] for d in have])) if have else float("nan")
        per_set = [answered.get(key, {}).get(d) or [(np.nan, np.nan)] for d in have]  # [(answered, error)] per seed
        fractions = [np.mean([a for a, _ in seeds]) for seeds in per_set]
        errors = [np.nanmean([e for _, e in seeds]) if any(not np.isnan(e) for _, e in seeds) else np.nan
                  for seeds in per_set]  # error among answered: none where nothing was answered
        ood_answered = (f"{np.mean(fractions):.2f} ({np.nanmean(errors):.2f})"
                        if fractions and not np.isnan(fractions).any() else "-")
        below_ece = np.mean([sets[d]["ece"]["mean"] for d in below if d in sets]) if below else float("nan")
        met = " ".join(f"{letter}{'✓' if ok else '✗'}" for letter, ok, _ in checks.get(key, [])) or "-"
        m = sets[in_domain]
        to_ts = ood_ece / ood_mean(rows.get((key[0], "ts"), {}), "ece", have)  # on the same sets; goal: <= 0.75
        to_base = ood_ece / ood_mean(rows.get((key[0], "base"), {}), "ece", have)  # and <= 1
        lines.append(f"| {key[0]} | {key[1]} | {m['seeds']} | {cell(m['acc'])} | {cell(m['ece'])} | {cell(m['auroc'])} "
                     f"| {cell(m['confidence'])} | {ood_acc:.3f} | {ood_ece:.3f} | {to_ts:.2f} | {to_base:.2f} "
                     f"| {ood_auroc:.3f} | {ood_aurc:.3f} | {ood_answered} | {below_ece:.3f} | {met} |")
    return "\n".join(lines)


def markdown(rows: dict, datasets: list[str], metric: str) -> str:
    """One Markdown table: variants x datasets, `mean [lo, hi]`."""
    head = "| run | variant | " + " | ".join(datasets) + " |"
    lines = [head, "|" + "---|" * (len(datasets) + 2)]
    for (group, variant), sets in rows.items():
        cells = [f"{sets[d][metric]['mean']:.3f} [{sets[d][metric]['lo']:.3f}, {sets[d][metric]['hi']:.3f}]"
                 if d in sets else "-" for d in datasets]
        lines.append(f"| {group} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name-prefix", required=True)
    parser.add_argument("--runs-root", type=Path)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--below-chance", nargs="*", default=[], metavar="DATASET",
                        help="sets where the model is near chance: out of the verdicts, their mean ECE apart")
    args = parser.parse_args()
    data = collect(args.name_prefix, args.runs_root)
    rows = {key: {d: summarize(v, args.boot) for d, v in sets.items()} for key, sets in data["table"].items()}
    sizes = {d: len(v[0][1]) for (_, _), sets in data["table"].items() for d, v in sets.items()}
    judged = [d for d in data["datasets"] if d not in args.below_chance]
    print(f"\n### Summary (in domain: {judged[0]}; OOD: the mean over the other above-chance sets)\n")
    print(summary_table(rows, judged, sizes, args.below_chance, data["answered"]))
    for metric in METRICS:
        print(f"\n### {metric} (mean over seeds [90% bootstrap interval])\n")
        print(markdown(rows, data["datasets"], metric))
    print("\n### Targets\n")
    lines = verdicts(rows, judged, sizes)
    print("\n".join(f"- {line}" for line in lines))
    if args.json:
        answered = [{"run": k[0], "variant": k[1], "sets": dict(v)} for k, v in data["answered"].items()]
        args.json.write_text(json.dumps({"datasets": data["datasets"], "verdicts": lines, "answered_at_10": answered,
                                         "rows": [{"run": k[0], "variant": k[1], "sets": v} for k, v in rows.items()]},
                                        indent=2))


if __name__ == "__main__":
    main()
