"""Build a model's thermometer, and its leave-one-domain-out table.

    python -m calm_core.training.thermometer_build                       # the embedded model's
    python -m calm_core.training.thermometer_build --model gemma3-270m   # any model `calm eval` takes
    python -m calm_core.training.thermometer_build --limit 60            # fewer items a set
    python -m calm_core.training.thermometer_build --model qwen2.5-coder-1.5b --scoring letter --chat
                                                                          # the rule the model's runs take

1. Scores every labelled training set (`TRAIN_SETS`: the built-in domains' validation
   splits and the real sets' dev splits in CALM_DATA_DIR) with the model under cloze
   scoring (or `--scoring`/`--chat`: a thermometer reads the state of one rule, and a run
   uses it only under that rule), capturing the hidden state (scoring.features); each set's scores are cached
   under the model cache (`thermometer/[<model>/]<set>.parquet`: the embedded model's
   where they always were, another's in a folder of its own), so a second build only trains.
2. Trains the thermometer on all of them (calibration/thermometer.py), names the model
   in it, and writes it where runs on that model read it (`thermometer_path`: the shipped
   file of a named model once it ships one, else the cache); `--out` writes elsewhere
   (`calm_core/calibration/thermometer_<name>.json` ships it).
3. For each domain, a thermometer trained on the other domains predicts the temperature
   of that domain's test split from its unlabelled inputs; the table compares its ECE
   with base, with one temperature fitted on the other domains' labels (TS carried over),
   and with the oracle (TS fitted on the test split's own labels). JSON beside the table.

Why here (workspace, not calibration): it loads a model and scores data.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from calm_core.calibration import metrics
from calm_core.calibration.posthoc import TemperatureScaler
from calm_core.calibration.thermometer import (
    Labelled,
    Thermometer,
    domain_of,
    leave_one_domain_out,
    model_key,
    thermometer_path,
)
from calm_core.paths import PROJECT_ROOT, cache_dir, data_dir
from calm_core.scoring.prompts import RULES, ScoringConfig

TRAIN_SETS = (
    "builtin/capitals/validation",
    "builtin/chemical_symbols/validation",
    "builtin/units/validation",
    "builtin/animal_classes/validation",
    "builtin/atomic_numbers/validation",
    "builtin/arithmetic/validation",
    "arc/easy_dev",
    "arc/challenge_dev",
    "openbookqa/train",
    "commonsenseqa/train",
    "truthfulqa_mc/mc1_validation",
)
TEST_OF = {  # a training set -> the split its domain is tested on (a real set without one: its own rows after LIMIT)
    "builtin/capitals/validation": "builtin/capitals/test",
    "builtin/chemical_symbols/validation": "builtin/chemical_symbols/test",
    "builtin/units/validation": "builtin/units/test",
    "builtin/animal_classes/validation": "builtin/animal_classes/test",
    "builtin/atomic_numbers/validation": "builtin/atomic_numbers/test",
    "builtin/arithmetic/validation": "builtin/arithmetic/test",
    "arc/easy_dev": "arc/easy_test",
    "arc/challenge_dev": "arc/challenge_test",
    "openbookqa/train": "openbookqa/test",
    "commonsenseqa/train": "commonsenseqa/dev",
}


def available_sets(names: tuple[str, ...]) -> list[str]:
    """The sets of `names` this machine can load: every built-in one, and a shared one
    when `CALM_DATA_DIR` holds its folder (so a build without the shared data still runs)."""
    real = data_dir()
    return [n for n in names if n.startswith("builtin/") or (real is not None and (real / n.split("/")[0]).is_dir())]


def scored(lm: Any, name: str, limit: int, cache: Path, rule: Any = None) -> Labelled:
    """The set's scores under `rule` (a ScoringConfig; cloze when None) with features, from
    the cache when this build made them before (cloze's under their old names, so an
    existing cache stays valid; another rule's with its name in the file name)."""
    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.options import read_scores
    from calm_core.scoring.scorer import Capture, Scorer

    rule = rule or ScoringConfig(rule="cloze")
    suffix = "" if rule.name == "cloze" else f"-{rule.name.replace('+', '_')}"
    path = cache / f"{name.replace('/', '__')}-{limit}{suffix}.parquet"
    if path.exists():
        scores = read_scores(path)
    else:
        items = load_mc_items(name, limit)
        scores = Scorer.of(lm).score(items, rule, capture=Capture.FEATURES, dataset=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        scores.to_frame().to_parquet(path)
    assert scores.features is not None
    return Labelled(name, scores.logits, scores.gold, scores.features)


def lodo_rows(train: list[Labelled], tests: dict[str, Labelled]) -> list[dict[str, Any]]:
    """One row per held-out domain: ECE, accuracy and AUROC of base, TS carried over from
    the other domains, the thermometer trained on them, and the oracle; the temperatures."""
    rows = []
    for entry in leave_one_domain_out(train):
        test = tests.get(TEST_OF.get(entry["dataset"], ""))
        if test is None:
            continue
        thermo: Thermometer = entry["thermometer"]
        others = [d for d in train if d.domain != domain_of(entry["dataset"])]
        width = max(d.logits.shape[1] for d in others)
        carried = TemperatureScaler.fit(
            np.concatenate([_pad(d.logits, width) for d in others]), np.concatenate([d.gold for d in others])
        )
        oracle = TemperatureScaler.fit(test.logits, test.gold)
        t_thermo = thermo.temperature(test.features)
        probs = {
            "base": metrics.softmax(test.logits),
            "ts_other_domains": carried.probs(test.logits),
            "thermometer": metrics.softmax(test.logits / t_thermo),
            "oracle_ts": oracle.probs(test.logits),
        }
        rows.append(
            {
                "domain": test.name,
                "n": len(test.gold),
                "acc": metrics.accuracy(probs["base"], test.gold),
                "temperature": {
                    "ts_other_domains": carried.temperature_,
                    "thermometer": t_thermo,
                    "oracle_ts": oracle.temperature_,
                },
                "ece": {k: metrics.ece(p, test.gold) for k, p in probs.items()},
                "auroc": {k: metrics.auroc(p, test.gold) for k, p in probs.items()},
            }
        )
    return rows


def _pad(logits: np.ndarray, width: int) -> np.ndarray:
    """(N, K) -> (N, width) with -inf: sets with different option counts, fitted together."""
    out = np.full((len(logits), width), -np.inf)
    out[:, : logits.shape[1]] = logits
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    variants = ("base", "ts_other_domains", "thermometer", "oracle_ts")
    lines = [
        "| held-out domain (n, acc) | " + " | ".join(f"{v} ECE" for v in variants) + " | T carried / thermo / oracle |",
        "|---|" + "---|" * (len(variants) + 1),
    ]
    for r in rows:
        t = r["temperature"]
        lines.append(
            f"| {r['domain']} ({r['n']}, {r['acc']:.2f}) | "
            + " | ".join(f"{r['ece'][v]:.3f}" for v in variants)
            + f" | {t['ts_other_domains']:.2f} / {t['thermometer']:.2f} / {t['oracle_ts']:.2f} |"
        )
    means = {v: float(np.mean([r["ece"][v] for r in rows])) for v in variants}
    lines.append("| mean | " + " | ".join(f"{means[v]:.3f}" for v in variants) + " | |")
    return "\n".join(lines)


def score_cache(model: str) -> Path:
    """Where a build keeps `model`'s scores: the embedded model's where they always were
    (a rebuild reuses them), another model's in a folder of its own (the same set scored
    by two models must never be mixed)."""
    base = cache_dir() / "thermometer"
    return base if model == "embedded" else base / model_key(model)


def default_table(model: str) -> Path:
    """The leave-one-domain-out table's JSON: docs/results/thermometer_lodo[_<model>].json."""
    suffix = "" if model == "embedded" else f"_{model_key(model)}"
    return PROJECT_ROOT / "docs" / "results" / f"thermometer_lodo{suffix}.json"


def build(
    lm: Any, model: str, limit: int, out: Path, table: bool = True, rule: Any = None
) -> tuple[Thermometer, list[dict[str, Any]]]:
    """Score (or read the cached scores of) every available set under `rule` (a
    ScoringConfig; cloze when None), train on the training sets, save the thermometer named
    for `model` and the rule at `out`; (it, the held-out rows).
    `table=False` scores no test split and gives no rows: the thermometer alone, in half
    the scoring (a slow model on a busy machine)."""
    cache = score_cache(model)

    rule = rule or ScoringConfig(rule="cloze")
    train = [scored(lm, name, limit, cache, rule) for name in available_sets(TRAIN_SETS)]
    test_sets = available_sets(tuple(TEST_OF.values())) if table else []
    tests = {name: scored(lm, name, limit, cache, rule) for name in test_sets}
    thermo = Thermometer.train(train)
    thermo.model, thermo.scoring = model, rule.name  # what `scored` read: a run checks it (mismatch)
    out.parent.mkdir(parents=True, exist_ok=True)
    thermo.save(out)
    return thermo, lodo_rows(train, tests)


def main(argv: list[str] | None = None) -> int:
    from calm_core.scoring.models import ModelSpec, load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="as `calm eval --model`: a name, a folder or a hub id")
    parser.add_argument("--device", default="cpu", help="cpu (default) | cuda[:N] | auto")
    parser.add_argument("--limit", type=int, default=100, help="items per set (default 100)")
    parser.add_argument("--out", type=Path, help="where the thermometer goes (default: where runs on --model read it)")
    parser.add_argument(
        "--table", type=Path, help="the held-out table's JSON (default: docs/results/thermometer_lodo*)"
    )
    parser.add_argument("--no-table", action="store_true", help="train and save only: no test split is scored")
    parser.add_argument("--scoring", choices=RULES, default="cloze", help="the rule of the runs (default cloze)")
    parser.add_argument("--chat", action="store_true", help="the chat template, as `calm eval --chat`")
    args = parser.parse_args(argv)
    out = args.out or thermometer_path(args.model)
    lm = load_model(ModelSpec(name=args.model, device=args.device))
    rule = ScoringConfig(rule=args.scoring, chat_template=args.chat)
    thermo, rows = build(lm, args.model, args.limit, out, table=not args.no_table, rule=rule)
    print(f"thermometer: {thermo.describe()} -> {out}")
    if args.no_table:
        return 0
    table = args.table or default_table(args.model)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(json.dumps({"model": args.model, "limit": args.limit, "rows": rows}, indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
