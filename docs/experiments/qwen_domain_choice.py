"""Which built-in domain to train CALM on for the Qwen2.5-Coder transfer block, chosen on S_V
alone: each domain's validation split (never a test split) scored by the untouched model
under letter answers, with and without the chat template.

    CALM_DATA_DIR=../shared/data .venv/bin/python docs/experiments/qwen_domain_choice.py \
        [--model qwen2.5-coder-1.5b] [--limit 40] [--json docs/results/qwen_domain_choice.json]

Per domain and prompt format: accuracy, mean confidence, ECE (15 bins), NLL and the
temperature TS fits there (T < 1 sharpens: the model is under-confident). A domain is a
candidate where the model is above chance by accuracy's 90% interval (the paper's setting
needs letters that carry knowledge) and miscalibrated; over-confident ones first, since
CALM's upper level raises entropy, which can only help a model that is too sure. The
script names the over-confident candidate with the largest ECE under each format (the
largest ECE of any candidate when none is over-confident). docs/results.md section 11 cites its output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DOMAINS = ("capitals", "chemical_symbols", "atomic_numbers", "arithmetic", "units", "animal_classes")


def measure(lm, name: str, chat: bool, limit: int) -> dict:
    from calm_core.calibration import metrics
    from calm_core.calibration.posthoc.temperature import TemperatureScaler
    from calm_core.calibration.selective_summary import wilson
    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.scoring.scorer import Scorer

    items = load_mc_items(f"builtin/{name}/validation", limit=limit)
    scores = Scorer.of(lm, progress=False).score(items, ScoringConfig(rule="letter", chat_template=chat))
    logits, gold = np.asarray(scores.logits, dtype=np.float64), np.asarray(scores.gold)
    probs = scores.probs()  # the one softmax over options (OptionScores), padding kept at zero
    correct = probs.argmax(1) == gold
    acc = wilson(int(correct.sum()), len(gold))
    ts = TemperatureScaler().fit(logits, gold)
    return {
        "domain": name,
        "chat": chat,
        "n": len(gold),
        "acc": acc.value,
        "acc_low": acc.low,
        "chance": float(np.mean([1 / len(i.choices) for i in items])),
        "confidence": float(probs.max(1).mean()),
        "ece": metrics.ece(probs, gold),
        "nll": metrics.nll(probs, gold),
        "ts_temperature": float(getattr(ts, "temperature_", None) or ts.temperature),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "qwen_domain_choice.json")
    parser.add_argument("--rechoose", action="store_true", help="read --json's rows and choose again (no scoring)")
    args = parser.parse_args()
    if args.rechoose:
        record = json.loads(args.json.read_text())
        record["choice"] = choose(record["rows"])
        args.json.write_text(json.dumps(record, indent=1))
        return
    from calm_core.scoring.models import load_model

    lm = load_model(args.model)
    print(f"{args.model} ({lm.info['dtype']}): S_V = each domain's validation split, first {args.limit} items")
    print("domain | chat | n | acc [low] | chance | confidence | ECE | NLL | TS T")
    rows = []
    for name in DOMAINS:
        for chat in (True, False):
            row = measure(lm, name, chat, args.limit)
            rows.append(row)
            print(
                f"{name} | {'yes' if chat else 'no'} | {row['n']} | {row['acc']:.3f} [{row['acc_low']:.2f}] | "
                f"{row['chance']:.2f} | {row['confidence']:.3f} | {row['ece']:.3f} | {row['nll']:.3f} | "
                f"{row['ts_temperature']:.2f}",
                flush=True,
            )
    choice = choose(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"model": args.model, "dtype": lm.info["dtype"], "rows": rows, "choice": choice}, indent=1)
    )


def choose(rows: list[dict]) -> dict:
    """Per prompt format, the domain to train on (see the module's docstring), printed."""
    choice = {}
    for chat in (True, False):
        known = [r for r in rows if r["chat"] == chat and r["acc_low"] > r["chance"]]
        over = [r for r in known if r["confidence"] > r["acc"]]  # what CALM's entropy objective can fix
        best = max(over or known, key=lambda r: r["ece"], default=None)
        fmt = "chat" if chat else "plain"
        choice[fmt] = best["domain"] if best else None
        print(f"{fmt}: the most miscalibrated {'over-confident ' if over else ''}domain it knows: {choice[fmt]}")
    return choice


if __name__ == "__main__":
    main()
