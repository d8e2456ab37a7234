"""Pivot a `calm eval --json` file with several `--fit-ts-on` sets into the docs' table.

    .venv/bin/python scripts/ts_transfer_table.py docs/results/eval_cloze_200.json [--metric ece]

Rows: evaluation sets. Columns: accuracy, the base model's metric, TS fitted on the
same dataset's own held-out split (when one was given), and TS carried over from each
other fit set. `--own` pairs an evaluation set with its fit set (defaults: same folder,
e.g. arc/easy_test <- arc/easy_dev). Pure re-formatting: every number is in the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_OWN = {
    "arc/easy_test": "arc/easy_dev",
    "arc/challenge_test": "arc/challenge_dev",
    "openbookqa/test": "openbookqa/train",
    "commonsenseqa/dev": "commonsenseqa/train",
}


def pivot(results: list[dict], metric: str) -> tuple[list[str], list[list[str]]]:
    datasets = list(dict.fromkeys(r["dataset"] for r in results))
    fits = [r["variant"].removeprefix("ts:") for r in results if r["variant"].startswith("ts")]
    fits = list(dict.fromkeys(fits))
    header = ["dataset", "n", "acc", f"{metric} base", f"{metric} TS own"] + [f"TS from {f}" for f in fits]
    rows = []
    for name in datasets:
        by_variant = {r["variant"]: r for r in results if r["dataset"] == name}
        base = by_variant["base"]
        own = DEFAULT_OWN.get(name)
        own_cell = f"{by_variant[f'ts:{own}'][metric]:.4f}" if own and f"ts:{own}" in by_variant else "-"
        cells = [name, str(base["n"]), f"{base['acc']:.4f}", f"{base[metric]:.4f}", own_cell]
        cells += [f"{by_variant[f'ts:{f}'][metric]:.4f}" if f"ts:{f}" in by_variant else "-" for f in fits]
        rows.append(cells)
    return header, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file", type=Path)
    parser.add_argument("--metric", default="ece")
    args = parser.parse_args()
    record = json.loads(args.json_file.read_text())
    header, rows = pivot(record["results"], args.metric)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    temps = ", ".join(f"{t['dataset']}: T = {t['temperature']:.3f}" for t in record.get("ts") or [])
    if temps:
        print(f"\nFitted temperatures: {temps}.")


if __name__ == "__main__":
    main()
