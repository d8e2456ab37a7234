"""bf16 against fp32 on the CPU, side by side: the same questions scored by the same model
loaded both ways, in one process, so the two see the same machine load.

    .venv/bin/python bench/precision.py [--models embedded qwen2.5-coder-1.5b] [--limit 40]
        [--sets builtin/capitals/test ... arc/easy_test] [--json bench/results/precision.json]
    .venv/bin/python bench/precision.py --models tiny --limit 2 --sets builtin/capitals/test \
        --threads 1 --peak-sizes 64   # the script runs

Per model and set: questions/s in each dtype and their ratio, how many answers (the
argmax option) agree, the largest difference of an option's log-probability, accuracy in
each, and the share of the measured bf16 and fp32 matmul peaks each pass reaches (FLOPs
counted by FlopCounterMode over the ops that ran on the first COUNTED_ITEMS items, scaled
to the set; bench/flops.py). The rule is the one
each model is run under: `letter+chat` for a model that answers letters (the Qwen models),
`cloze` for the embedded one (at chance with letters); `--rule` overrides. Each model's
two loads force the dtype (`--dtype float32`, `--dtype bfloat16`); the bf16 one has its LM
head in fp32 (scoring/precision.py). A model whose answers do not all agree, or whose
largest gap passes scoring/precision.MAX_PROBE_GAP, is printed `keep fp32`: that is the
verdict `NamedModel.cpu_bf16` records. `--models tiny` (tests/conftest.py's random tiny Llama)
and a small `--peak-sizes` make a smoke run (the peak's large bf16 matmuls are slow on a CPU
without native bf16); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SETS = (
    "builtin/capitals/test",
    "builtin/chemical_symbols/test",
    "builtin/atomic_numbers/test",
    "builtin/units/test",
    "builtin/animal_classes/test",
    "arc/easy_test",
)
LETTER_MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")  # aligned models that answer letters
COLUMNS = (
    "model",
    "set",
    "rule",
    "n",
    "q/s fp32",
    "q/s bf16",
    "speed-up",
    "same answers",
    "max gap",
    "%peak fp32",
    "%peak bf16",
)


def rule_for(model: str, given: str | None) -> tuple[str, bool]:
    """(rule, chat template) a model is benched under."""
    if given:
        return given.removesuffix("+chat"), given.endswith("+chat")
    return ("letter", True) if model in LETTER_MODELS else ("cloze", False)


COUNTED_ITEMS = 4  # FLOPs are counted on the first few items and scaled by the item count (counting is slow)


def scored(lm: Any, items: list, rule: str, chat: bool, batch_size: int) -> tuple[float, Any, int]:
    """(seconds, scores, FLOPs) of one warm pass over `items` (after a two-item warm-up);
    the FLOPs are those of the first COUNTED_ITEMS items times len(items) / COUNTED_ITEMS."""
    from flops import counted_flops

    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.scoring.scorer import Scorer

    scorer = Scorer.of(lm, batch_size=batch_size, progress=False)
    cfg = ScoringConfig(rule=rule, chat_template=chat)
    scorer.score(items[:2], cfg)
    start = time.perf_counter()
    scores = scorer.score(items, cfg)
    seconds = time.perf_counter() - start
    counted = items[:COUNTED_ITEMS]
    flops, _ = counted_flops(lambda: scorer.score(counted, cfg))
    return seconds, scores, int(flops * len(items) / len(counted))


def log_probs(scores: Any) -> Any:
    """Per-item option log-probabilities (N, K) from option logits, padding kept at -inf."""
    import numpy as np
    import torch

    logits = torch.as_tensor(np.asarray(scores.logits, dtype=np.float64))
    return torch.log_softmax(logits, dim=-1).numpy()


def compare_model(
    model: str,
    sets: list[str],
    limit: int,
    rule: str | None,
    batch_size: int,
    source: str = "",
    peak_sizes: tuple[int, ...] = (),
) -> list[dict]:
    """One row per set: fp32 and bf16 passes of the same items, side by side. `source`: where
    `model` loads from (default: its name); `peak_sizes`: the matmul peak's (default: flops.py's)."""
    import numpy as np
    import torch
    from flops import PEAK_SIZES, matmul_peak_gflops, peak_fraction

    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.models import ModelSpec, load_model

    rule_name, chat = rule_for(model, rule)
    items = {name: load_mc_items(name, limit=limit) for name in sets}
    passes: dict[str, dict[str, tuple[float, Any, int]]] = {}
    peaks: dict[str, float] = {}
    for dtype in ("float32", "bfloat16"):
        lm = load_model(ModelSpec(name=source or model, device="cpu", dtype=dtype))
        passes[dtype] = {name: scored(lm, batch, rule_name, chat, batch_size) for name, batch in items.items()}
        peaks[dtype] = matmul_peak_gflops(peak_sizes or PEAK_SIZES, dtype=dtype)
        precision = lm.info["precision"]
        del lm
    rows = []
    for name in sets:
        (s32, a, f32), (s16, b, f16) = passes["float32"][name], passes["bfloat16"][name]
        la, lb = log_probs(a), log_probs(b)
        finite = np.isfinite(la) & np.isfinite(lb)
        rows.append(
            {
                "model": model,
                "set": name,
                "rule": rule_name + ("+chat" if chat else ""),
                "n": len(a.gold),
                "qps_fp32": len(a.gold) / s32,
                "qps_bf16": len(b.gold) / s16,
                "speed_up": s32 / s16,
                "same_answers": int((np.asarray(a.predictions) == np.asarray(b.predictions)).sum()),
                "max_logprob_gap": float(np.abs(la - lb)[finite].max()),
                "acc_fp32": float((np.asarray(a.predictions) == np.asarray(a.gold)).mean()),
                "acc_bf16": float((np.asarray(b.predictions) == np.asarray(b.gold)).mean()),
                "peak_fraction_fp32": peak_fraction(f32, s32, peaks["float32"]),
                "peak_fraction_bf16": peak_fraction(f16, s16, peaks["bfloat16"]),
                "peak_gflops": peaks,
                "bf16_probe": precision.get("probe"),
                "threads": torch.get_num_threads(),
            }
        )
    return rows


def verdict(rows: list[dict]) -> str:
    """`bf16 agrees` when every answer is the same and no option moved past the probe's bound."""
    from calm_core.scoring.precision import MAX_PROBE_GAP

    same = all(row["same_answers"] == row["n"] for row in rows)
    gap = max(row["max_logprob_gap"] for row in rows)
    return "bf16 agrees" if same and gap <= MAX_PROBE_GAP else f"keep fp32 (same answers: {same}, max gap {gap:.3f})"


def line(row: dict) -> str:
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    cells = (
        row["model"], row["set"], row["rule"], row["n"], f"{row['qps_fp32']:.2f}", f"{row['qps_bf16']:.2f}",
        f"{row['speed_up']:.2f}x", f"{row['same_answers']}/{row['n']}", f"{row['max_logprob_gap']:.4f}",
        pct(row["peak_fraction_fp32"]), pct(row["peak_fraction_bf16"]),
    )  # fmt: skip
    return " | ".join(str(c) for c in cells)


def default_models() -> list[str]:
    from calm_core.scoring.models import installed_models

    return [m for m in installed_models() if m in ("embedded", "qwen2.5-coder-1.5b")]


def main() -> None:
    from flops import add_peak_sizes_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=None, help="named models; tiny: a smoke run")
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--rule", default=None, help="cloze | letter | letter+chat (default: the model's own)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    add_peak_sizes_option(parser)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "precision.json"))
    args = parser.parse_args()
    import torch

    from calm_core.scoring.precision import cpu_bf16_flags

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU bf16 flags: {', '.join(cpu_bf16_flags()) or 'none'}; {torch.get_num_threads()} threads")
    print(" | ".join(COLUMNS))
    report: dict[str, Any] = {"cpu_bf16_flags": list(cpu_bf16_flags()), "models": {}}
    from bench.streaming import model_or_tiny

    with tempfile.TemporaryDirectory(prefix="calm-precision-") as scratch:
        for model in args.models or default_models():
            source = model_or_tiny(model, Path(scratch))
            rows = compare_model(
                model, args.sets, args.limit, args.rule, args.batch_size, source, tuple(args.peak_sizes)
            )
            for row in rows:
                print(line(row), flush=True)
            report["models"][model] = {"rows": rows, "verdict": verdict(rows)}
            print(f"{model}: {verdict(rows)}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps({m: r["verdict"] for m, r in report["models"].items()}))


if __name__ == "__main__":
    main()
