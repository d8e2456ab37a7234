"""The post-hoc calibrators side by side, from `calm eval --json` records (docs/results.md 6).

    .venv/bin/python scripts/posthoc_table.py docs/results/ats_fit_chemical_symbols.json \
        --in-domain builtin/chemical_symbols/test --below-chance openbookqa/test commonsenseqa/dev \
        truthfulqa_mc/mc1_validation

Per set: accuracy, then ECE and AUROC of every variant in the record (base, ts, ats, ...).
Then the mean out-of-domain ECE and AUROC over the above-chance sets that are not in
domain, and separately over the below-chance sets, and the issue-29 verdicts of each
calibrator against base:
- (f) no set's ECE is worse than base's by more than 0.02;
- (g) mean AUROC over the sets at or above base's;
plus the goal's ratio: mean out-of-domain ECE over TS's (target at most 0.75, and at or
below base's). Pure reading of the JSON; every figure is the record's own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

WORSE_BY = 0.02


def _rows(record: dict) -> dict[tuple[str, str], dict]:
    return {(r["dataset"], r["variant"]): r for r in record["results"]}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def table(record: dict, in_domain: str, below: list[str]) -> str:
    rows = _rows(record)
    sets = list(dict.fromkeys(d for d, _ in rows))
    variants = list(dict.fromkeys(v for _, v in rows))
    head = ["set (acc)"] + [f"{v} ECE" for v in variants] + [f"{v} AUROC" for v in variants]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in sets:
        acc = rows[(name, "base")]["acc"]
        cells = [f"{rows[(name, v)]['ece']:.3f}" for v in variants] + [f"{rows[(name, v)]['auroc']:.3f}" for v in variants]
        lines.append(f"| {name} ({acc:.2f}) | " + " | ".join(cells) + " |")
    ood = [s for s in sets if s != in_domain and s not in below]
    for label, group in (("mean out of domain, above chance", ood), ("mean below chance", below)):
        ece = [f"{_mean([rows[(s, v)]['ece'] for s in group]):.3f}" for v in variants]
        auroc = [f"{_mean([rows[(s, v)]['auroc'] for s in group]):.3f}" for v in variants]
        lines.append(f"| {label} | " + " | ".join(ece + auroc) + " |")
    lines.append("")
    ts_ood = _mean([rows[(s, "ts")]["ece"] for s in ood]) if "ts" in variants else float("nan")
    base_ood = _mean([rows[(s, "base")]["ece"] for s in ood])
    for v in variants:
        if v == "base":
            continue
        worse = [s for s in sets if rows[(s, v)]["ece"] > rows[(s, "base")]["ece"] + WORSE_BY]
        auroc_ok = _mean([rows[(s, v)]["auroc"] for s in sets]) >= _mean([rows[(s, "base")]["auroc"] for s in sets])
        ood_ece = _mean([rows[(s, v)]["ece"] for s in ood])
        lines.append(
            f"- {v}: (f) {'met' if not worse else 'missed on ' + ', '.join(worse)}; "
            f"(g) {'met' if auroc_ok else 'missed'}; out-of-domain ECE {ood_ece:.3f} = {ood_ece / ts_ood:.2f} x TS's, "
            f"{'at or below' if ood_ece <= base_ood else 'above'} base's {base_ood:.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--in-domain", required=True)
    parser.add_argument("--below-chance", nargs="*", default=[])
    args = parser.parse_args()
    for path in args.records:
        print(f"### {path}\n")
        print(table(json.loads(path.read_text()), args.in_domain, args.below_chance))
        print()


if __name__ == "__main__":
    main()
