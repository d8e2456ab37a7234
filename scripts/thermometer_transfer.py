"""Section 9's Thermometer row: each evaluation set calibrated by a thermometer that never saw its domain.

    .venv/bin/python scripts/thermometer_transfer.py [--json docs/results/thermometer_transfer.json]

For each training domain of docs/experiments/adaptive_transfer.sh and each seed, the
evaluation items are those its runs evaluated (`load_data` on the runs' settings: the same
seeded distractors, training questions dropped, 100 items a set). The embedded model scores
them once with features (cloze, as the runs did); each set gets one temperature from a
thermometer trained on every labelled set of thermometer_build except those of the set's
own domain (section 7's leave-one-domain-out thermometers, 80 items a training set). The
metrics, the seed means with their bootstrap intervals and the verdicts are results_table's,
judged against the base and TS rows of docs/results/adaptive_transfer_<domain>.json; this
script's own base row is compared with the JSON's, which says the items match.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # calm_core, and results_table beside this file

from results_table import summarize, verdict_checks  # noqa: E402

from calm_core.calibration import metrics  # noqa: E402
from calm_core.calibration.thermometer import Labelled, Thermometer, domain_of, leave_one_domain_out  # noqa: E402

RESULTS = HERE.parent / "docs" / "results"
TRAINING = {  # adaptive_transfer.sh's sets_for: a training domain's (S_T, S_V)
    "chemical_symbols": ("builtin/chemical_symbols/train", "builtin/chemical_symbols/validation"),
    "arc_easy": ("arc/easy_train", "arc/easy_dev"),
}
BELOW_CHANCE = ("openbookqa/test", "commonsenseqa/dev", "truthfulqa_mc/mc1_validation")  # the script's BELOW
RUN_LIMITS = {"train_limit": 1000, "heldout_limit": 100, "eval_limit": 100}  # the script's COMMON
SEEDS = (0, 1, 2)
THERMO_LIMIT = 80  # items a training set: section 7's `thermometer_build --limit 80`
CAPITALS = "builtin/capitals/test"
BASE_CHECKED = ("acc", "ece", "auroc", "confidence")
ROW = "Thermometer (left out of the target's domain)"


@dataclass(frozen=True)
class Scored:
    """One evaluation set as a run saw it: (N, K) logits (-inf past an item's options), gold, (N, H) features."""

    logits: np.ndarray
    gold: np.ndarray
    features: np.ndarray

    def seed_entry(self, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(confidence, correct, mean 1/K): one seed's entry for results_table.summarize."""
        confidence, correct = metrics.top_label(probs, self.gold)
        return confidence, correct, float(np.mean(1.0 / np.isfinite(self.logits).sum(axis=1)))


def thermometers_by_domain(train: Sequence[Labelled]) -> dict[str, Thermometer]:
    """Domain -> the thermometer trained on the other domains' sets (leave_one_domain_out)."""
    return {domain_of(row["dataset"]): row["thermometer"] for row in leave_one_domain_out(train)}


def thermometer_for(dataset: str, thermometers: dict[str, Thermometer]) -> Thermometer:
    """The thermometer that left `dataset`'s domain out; a domain with no labelled set has none."""
    domain = domain_of(dataset)
    if domain not in thermometers:
        raise ValueError(f"Expected a labelled training set in the domain of {dataset} ({domain}), but got none")
    return thermometers[domain]


def headline(sets: dict[str, dict], ts: dict[str, dict], datasets: Sequence[str]) -> dict[str, float]:
    """Section 9's columns from one variant's per-set summaries (results_table.summarize):
    the first set is in domain, OOD is the mean over the other above-chance sets."""
    judged = [d for d in datasets if d not in BELOW_CHANCE]
    ood = judged[1:]

    def mean(of: dict[str, dict], names: Sequence[str], metric: str) -> float:
        return float(np.mean([of[d][metric]["mean"] for d in names]))

    return {
        "id_ece": sets[judged[0]]["ece"]["mean"],
        "ood_ece": mean(sets, ood, "ece"),
        "ood_ece_over_ts": mean(sets, ood, "ece") / mean(ts, ood, "ece"),
        "ood_auroc": mean(sets, ood, "auroc"),
        "capitals_ece": sets[CAPITALS]["ece"]["mean"],
        "below_chance_ece": mean(sets, [d for d in datasets if d in BELOW_CHANCE], "ece"),
    }


def evaluation_items(domain: str, datasets: Sequence[str], seed: int) -> dict[str, list[Any]]:
    """The items a run of `domain` with `seed` evaluated, by the runs' own loader."""
    from calm_core.training.batches import load_data
    from calm_core.training.config import TrainConfig

    train, heldout = TRAINING[domain]
    cfg = TrainConfig.preset(
        "quick",
        method="calm",
        train_data=train,
        heldout_data=heldout,
        eval_data=tuple(datasets),
        seed=seed,
        **RUN_LIMITS,
    )
    return {name: list(items) for name, items in load_data(cfg, "mc").evals.items()}


def score(lm: Any, name: str, items: list[Any], cache: dict[tuple, Scored]) -> Scored:
    """Cloze option logits with features (the runs' scorer and batch size), each item list once."""
    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.scoring.scorer import Capture, Scorer

    key = (name, tuple((it.question, it.choices, it.answer) for it in items))
    if key not in cache:
        scorer = Scorer.of(lm, batch_size=64, progress=False)
        scores = scorer.score(items, ScoringConfig(rule="cloze"), capture=Capture.FEATURES)
        cache[key] = Scored(scores.logits, scores.gold, scores.features)
    return cache[key]


def domain_table(
    lm: Any, domain: str, thermometers: dict[str, Thermometer], *, boot: int, cache: dict[tuple, Scored]
) -> dict[str, Any]:
    """One training domain: base and thermometer summaries over the seeds, the JSON's base
    and TS beside them, the headline columns and the verdicts."""
    recorded = json.loads((RESULTS / f"adaptive_transfer_{domain}.json").read_text())
    datasets = recorded["datasets"]
    group = recorded["rows"][0]["run"]
    json_rows = {r["variant"]: r["sets"] for r in recorded["rows"] if r["run"] == group}
    per_seed: dict[str, dict[str, list]] = {"base": {d: [] for d in datasets}, "thermometer": {d: [] for d in datasets}}
    temperatures: dict[str, list[float]] = {d: [] for d in datasets}
    for seed in SEEDS:
        for name, items in evaluation_items(domain, datasets, seed).items():
            scored = score(lm, name, items, cache)
            t = thermometer_for(name, thermometers).temperature(scored.features)
            temperatures[name].append(t)
            per_seed["base"][name].append(scored.seed_entry(metrics.softmax(scored.logits)))
            per_seed["thermometer"][name].append(scored.seed_entry(metrics.softmax(scored.logits / t)))
    ours = {v: {d: summarize(s, boot) for d, s in sets.items()} for v, sets in per_seed.items()}
    sizes = {d: len(per_seed["base"][d][0][1]) for d in datasets}
    rows = {(ROW, "base"): json_rows["base"], (ROW, "ts"): json_rows["ts"], (ROW, "thermometer"): ours["thermometer"]}
    judged = [d for d in datasets if d not in BELOW_CHANCE]
    checks = verdict_checks(rows, judged, sizes)[(ROW, "thermometer")]
    return {
        "datasets": datasets,
        "temperature": {d: temperatures[d] for d in datasets},
        "headline": headline(ours["thermometer"], json_rows["ts"], datasets),
        "verdicts": [{"letter": letter, "met": bool(met), "text": text} for letter, met, text in checks],
        "base_check": base_check(ours["base"], json_rows["base"], datasets),
        "sets": ours["thermometer"],
    }


def base_check(ours: dict[str, dict], recorded: dict[str, dict], datasets: Sequence[str]) -> dict[str, float]:
    """The largest difference between this script's base seed means and the runs' (same items: ~0)."""
    out = {m: max(abs(ours[d][m]["mean"] - recorded[d][m]["mean"]) for d in datasets) for m in BASE_CHECKED}
    return {**out, "inv_k": max(abs(ours[d]["inv_k"] - recorded[d]["inv_k"]) for d in datasets)}


HEADER = "| variant | ID ECE | OOD ECE | OOD ECE / TS's | OOD AUROC | capitals ECE | below-chance ECE | verdicts |"


def markdown_row(table: dict[str, Any]) -> str:
    h = table["headline"]
    met = " ".join(v["letter"] for v in table["verdicts"] if v["met"]) or "none"
    return (
        f"| {ROW} | {h['id_ece']:.3f} | {h['ood_ece']:.3f} | {h['ood_ece_over_ts']:.2f} | {h['ood_auroc']:.3f} "
        f"| {h['capitals_ece']:.3f} | {h['below_chance_ece']:.3f} | {met} |"
    )


def markdown(tables: dict[str, dict[str, Any]]) -> str:
    """Per training domain: the base check, section 9's row, and the verdicts in words."""
    out = []
    for domain, table in tables.items():
        out += [f"\n### Trained on {domain}: base against the JSON's, largest difference {table['base_check']}\n"]
        out += [HEADER, "|---" * 8 + "|", markdown_row(table), ""]
        out += [f"- ({v['letter']}) {v['text']} -> {'met' if v['met'] else 'MISSED'}" for v in table["verdicts"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from calm_core.paths import cache_dir
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.thermometer_build import TRAIN_SETS, available_sets, scored

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boot", type=int, default=300, help="bootstrap draws (section 9 used 300)")
    parser.add_argument("--json", type=Path, default=RESULTS / "thermometer_transfer.json")
    args = parser.parse_args(argv)
    lm = load_model(ModelSpec(name="embedded", device="cpu"))
    train = [scored(lm, name, THERMO_LIMIT, cache_dir() / "thermometer") for name in available_sets(TRAIN_SETS)]
    thermometers = thermometers_by_domain(train)
    cache: dict[tuple, Scored] = {}  # both domains evaluate the same items (unless a training question is dropped)
    tables = {domain: domain_table(lm, domain, thermometers, boot=args.boot, cache=cache) for domain in TRAINING}
    record = {
        "thermo_limit": THERMO_LIMIT,
        "seeds": list(SEEDS),
        "boot": args.boot,
        "thermometers": {d: {"model": t.describe(), "trained_on": t.trained_on} for d, t in thermometers.items()},
        "domains": tables,
    }
    args.json.write_text(json.dumps(record, indent=1))
    print(markdown(tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
