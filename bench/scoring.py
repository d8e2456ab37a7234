"""Scoring throughput and peak memory on the embedded model, configurations side by side.

    .venv/bin/python bench/scoring.py [--data arc/easy_test] [--limit 100] [--json bench/results/scoring.json]

Each configuration (rule x batch size x prefix sharing) runs in a fresh subprocess so
its peak resident memory (ru_maxrss) is its own; the model load is excluded from the
timing, one warm-up batch is not. Prints a table and writes JSON. Compare rows within
one run only: this machine's speed varies with whatever else is running.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [  # (rule, batch size, share prefix)
    ("cloze", 8, True), ("cloze", 32, True), ("cloze", 32, False),
    ("letter", 8, False), ("letter", 32, False),
]


def run_one(data: str, limit: int, rule: str, batch_size: int, share: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from calm_core.evaluate import load_mc_items
    from calm_core.models import load_model
    from calm_core.prompts import ScoringConfig
    from calm_core.scoring import score_items

    items = load_mc_items(data, limit=limit)
    lm = load_model("embedded")
    score_items(lm, items[:2], ScoringConfig(rule=rule), batch_size=batch_size, progress=False, share_prefix=share)
    start = time.perf_counter()
    scores = score_items(lm, items, ScoringConfig(rule=rule), batch_size=batch_size, progress=False, share_prefix=share)
    seconds = time.perf_counter() - start
    return {
        "rule": rule, "batch_size": batch_size, "share_prefix": share, "n": len(items), "seconds": seconds,
        "questions_per_s": len(items) / seconds, "acc": float((scores.predictions == scores.gold).mean()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="arc/easy_test")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "scoring.json")
    parser.add_argument("--one", nargs=3, metavar=("RULE", "BATCH", "SHARE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        rule, batch, share = args.one
        print(json.dumps(run_one(args.data, args.limit, rule, int(batch), share == "1")))
        return
    rows = []
    for rule, batch, share in CONFIGS:
        cmd = [sys.executable, __file__, "--data", args.data, "--limit", str(args.limit),
               "--one", rule, str(batch), "1" if share else "0"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        rows.append(json.loads(out))
        print(f"{rule:7} batch {batch:3} share_prefix {str(share):5}  {rows[-1]['questions_per_s']:6.2f} q/s  "
              f"acc {rows[-1]['acc']:.3f}  peak {rows[-1]['peak_rss_mb']:7.0f} MB", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"data": args.data, "limit": args.limit, "rows": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
