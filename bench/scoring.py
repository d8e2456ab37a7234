"""Scoring throughput and peak memory on the embedded model, configurations side by side;
and, with --harness, our scorer against lm-evaluation-harness on the same items.

    .venv/bin/python bench/scoring.py [--data arc/easy_test] [--limit 100] [--repeats 2] [--threads 1] [--json ...]
    .venv/bin/python bench/scoring.py --harness --limit 300 [--batch-size 8] [--repeats 2]   # needs lm-eval
    .venv/bin/python bench/scoring.py --models tiny --limit 2 --repeats 1 --threads 1 --peak-sizes 64   # a smoke run

--harness: the harness's `hf` model on the same local model directory and a task
written for the occasion (a JSONL of exactly our items, ARC's cloze formulation
"Question: {question}\nAnswer:" + " " + choice, summed log-likelihoods, offline); our
`Scorer.score` with the `cloze` rule. Each side runs in its own process (model load
excluded from the time). Prints one table row (HARNESS_COLUMNS): questions/second for
both, the ratio, how many items' predictions agree, the largest log-likelihood
difference, peak memory; JSON to bench/results/harness.json (or --json).
The cost of feature capture beside it: after its timed pass (the `calm q/s` and peak),
the calm process scores the same items with capture on, once in full (`capture q/s`,
`capture ratio`: that over lm-eval's q/s; this pass runs warm, the first cold), then
the paired off/on measurement described below (`on/off`, --repeats rounds); `identical`:
every logit and prediction bit-identical with capture on and off.

Each configuration (rule x batch size x prefix sharing) runs in a fresh subprocess so
its peak resident memory (ru_maxrss) is its own; the model load is excluded from the
timing, one warm-up batch is not. Prints a table and writes JSON. Compare rows within
one run only: this machine's speed varies with whatever else is running.

The `capture` column is the cost of feature capture (calm_core.scoring.features): inside
each configuration's process the same items are scored with capture off and on
(`features=True`, and for cloze `option_features=True` too), CAPTURE_CHUNK items at a time,
the two back to back in alternating order, --repeats rounds over the items
(`paired_capture_times`); `capture` is total seconds on / total seconds off (1.00: free;
JSON also has the median of the per-chunk ratios), and `same` says whether every logit
was bit-identical between the two, as tests/test_features.py requires. Seconds and
questions/s are one full pass with capture off.

`--models tiny` (tests/conftest.py's random tiny Llama) with a small `--peak-sizes` (the
matmul peak's square sizes, bench/flops.py) is a smoke run of every configuration: the same
processes, passes and counts on random weights, whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [  # (rule, batch size, share prefix)
    ("cloze", 8, True),
    ("cloze", 32, True),
    ("cloze", 32, False),
    ("letter", 8, False),
    ("letter", 32, False),
]


CAPTURE_CHUNK = 16  # items per paired off/on measurement of the capture cost


def run_one(
    data: str,
    limit: int,
    rule: str,
    batch_size: int,
    share: bool,
    repeats: int = 2,
    threads: int | None = None,
    model: str = "embedded",
    peak_sizes: tuple[int, ...] = (),
) -> dict:
    sys.path.insert(0, str(ROOT))
    import torch
    from flops import PEAK_SIZES, counted_flops, matmul_peak_gflops, peak_fraction

    if threads:
        torch.set_num_threads(threads)
    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.models import load_model
    from calm_core.scoring.prompts import ScoringConfig

    items = load_mc_items(data, limit=limit)
    lm = load_model(model)
    cfg = ScoringConfig(rule=rule)
    timed = scorer_timer(lm, cfg, batch_size=batch_size, share_prefix=share)
    timed(items[:2], **capture_kwargs(cfg))  # warm-up
    seconds, scores = timed(items)
    peak_gflops = matmul_peak_gflops(peak_sizes or PEAK_SIZES)  # right after the timed pass: the same machine load
    flops, _ = counted_flops(lambda: timed(items))
    cost = capture_cost(timed, items, cfg, scores, repeats) if repeats else {}
    return {
        "model": model,
        "vocab": int(lm.model.config.get_text_config().vocab_size),
        "rule": rule,
        "batch_size": batch_size,
        "share_prefix": share,
        "n": len(items),
        "seconds": seconds,
        "questions_per_s": len(items) / seconds,
        "acc": float((scores.predictions == scores.gold).mean()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gflop": flops / 1e9,
        "matmul_peak_gflops": peak_gflops,
        "peak_fraction": peak_fraction(flops, seconds, peak_gflops),
        **cost,
        "threads": torch.get_num_threads(),
    }


Timed = Callable[..., tuple[float, Any]]  # (items, capture=...) -> (seconds, OptionScores)


def scorer_timer(lm: Any, cfg: Any, *, batch_size: int, share_prefix: bool = True) -> Timed:
    """`Scorer.score` on `lm` with fixed settings, timed: the one call both benches measure."""
    from calm_core.scoring.scorer import Capture, Scorer

    scorer = Scorer.of(lm, batch_size=batch_size, progress=False, share_prefix=share_prefix)

    def timed(subset: list, capture: Capture = Capture.NOTHING) -> tuple[float, Any]:
        start = time.perf_counter()
        scores = scorer.score(subset, cfg, capture=capture)
        return time.perf_counter() - start, scores

    return timed


def capture_kwargs(cfg: Any) -> dict[str, Any]:
    """Feature capture on: hidden states, and per-option ones where the rule has options (cloze)."""
    from calm_core.scoring.scorer import Capture

    return {"capture": Capture.FEATURES | (Capture.OPTION_FEATURES if cfg.is_cloze else Capture.NOTHING)}


def capture_cost(timed: Timed, items: list, cfg: Any, scores: Any, repeats: int) -> dict[str, Any]:
    """The same items again with capture on: one full pass (`capture_seconds`), then the
    paired off/on measurement (`paired_capture_times`) whose ratio is the cost; identical
    means every logit and prediction matched the capture-off `scores`, chunks included."""
    capture = capture_kwargs(cfg)
    capture_seconds, captured = timed(items, **capture)
    off, on, identical = paired_capture_times(timed, items, capture, repeats)
    return {
        "capture": str(capture["capture"]),  # the flag's name: the row is printed as JSON (--one-side)
        "capture_seconds": capture_seconds,
        "capture_questions_per_s": len(items) / capture_seconds,
        "capture_off_seconds": sum(off),
        "capture_on_seconds": sum(on),
        "capture_ratio": sum(on) / sum(off),
        "capture_ratio_median": float(np.median(np.divide(on, off))),
        "capture_identical": bool(
            identical
            and np.array_equal(scores.logits, captured.logits)
            and np.array_equal(scores.predictions, captured.predictions)
        ),
    }


def paired_capture_times(
    timed: Timed, items: list, capture: dict[str, Any], repeats: int
) -> tuple[list[float], list[float], bool]:
    """Seconds with capture off and on, chunk by chunk of CAPTURE_CHUNK items, the two
    back to back in alternating order (ABBA), `repeats` rounds: on a machine that others
    share, the load changes within one pass, and only a paired measurement close in time
    sees a cost of a few percent. Also whether every chunk's logits were bit-identical."""
    chunks = [items[i : i + CAPTURE_CHUNK] for i in range(0, len(items), CAPTURE_CHUNK)]
    off: list[float] = []
    on: list[float] = []
    identical = True
    for round_ in range(repeats):
        for j, chunk in enumerate(chunks):
            first_on = (round_ + j) % 2 == 1
            runs = {}
            for with_capture in (first_on, not first_on):
                runs[with_capture] = timed(chunk, **(capture if with_capture else {}))
            off.append(runs[False][0])
            on.append(runs[True][0])
            identical = identical and np.array_equal(runs[False][1].logits, runs[True][1].logits)
    return off, on, identical


def harness_side(data: str, limit: int, batch_size: int) -> dict:
    """lm-evaluation-harness on our items: per-item option log-likelihoods and the time."""
    import tempfile

    sys.path.insert(0, str(ROOT))
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.models import embedded_model_dir

    items = load_mc_items(data, limit=limit)
    with tempfile.TemporaryDirectory(prefix="calm-harness-") as scratch:  # the task and its items, removed after
        folder = Path(scratch)
        rows = [{"id": i.id, "question": i.question, "choices": list(i.choices), "answer": i.answer} for i in items]
        (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "calm_mc.yaml").write_text(
            "task: calm_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f"    test: {folder / 'items.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
            'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_target: answer\ndoc_to_choice: "{{choices}}"\n'
            "metric_list:\n  - metric: acc\n"
        )
        model = HFLM(pretrained=str(embedded_model_dir()), dtype="float32", device="cpu", batch_size=batch_size)
        start = time.perf_counter()
        result = simple_evaluate(
            model=model,
            tasks=["calm_mc"],
            task_manager=TaskManager(include_path=str(folder)),
            log_samples=True,
            verbosity="ERROR",
        )
        seconds = time.perf_counter() - start
    samples = sorted(result["samples"]["calm_mc"], key=lambda s: s["doc_id"])
    loglik = [[float(r[0][0]) for r in s["resps"]] for s in samples]
    return {
        "side": "lm-eval",
        "n": len(items),
        "seconds": seconds,
        "questions_per_s": len(items) / seconds,
        "loglikelihoods": loglik,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def our_side(data: str, limit: int, batch_size: int, repeats: int) -> dict:
    """Our cloze scorer on the same items: one pass (as before capture was measured), then
    the capture cost in the same process (`capture_cost`; the peak before it is our peak)."""
    sys.path.insert(0, str(ROOT))
    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.scoring.models import load_model
    from calm_core.scoring.prompts import ScoringConfig

    items = load_mc_items(data, limit=limit)
    lm = load_model("embedded")
    cfg = ScoringConfig(rule="cloze")
    timed = scorer_timer(lm, cfg, batch_size=batch_size)
    seconds, scores = timed(items)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cost = capture_cost(timed, items, cfg, scores, repeats)
    loglik = [row[np.isfinite(row)].tolist() for row in scores.logits]
    return {
        "side": "calm",
        "n": len(items),
        "seconds": seconds,
        "questions_per_s": len(items) / seconds,
        "loglikelihoods": loglik,
        "peak_rss_mb": peak_rss_mb,
        **cost,
        "capture_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


HARNESS_COLUMNS = [  # (header, template over the JSON summary): the printed table is derived from the JSON
    ("batch", "{batch_size}"),
    ("calm q/s", "{calm_questions_per_s:.2f}"),
    ("capture q/s", "{capture_questions_per_s:.2f}"),
    ("lm-eval q/s", "{lm_eval_questions_per_s:.2f}"),
    ("ratio", "{ratio:.2f}"),
    ("capture ratio", "{ratio_with_capture:.2f}"),
    ("on/off", "{capture_ratio:.3f}"),
    ("identical", "{capture_identical}"),
    ("agree", "{agree}/{n}"),
    ("max |loglik diff|", "{max_abs_loglik_diff:.2e}"),
    ("calm peak MB", "{calm_peak_rss_mb:.0f}"),
    ("lm-eval peak MB", "{lm_eval_peak_rss_mb:.0f}"),
]


def harness_summary(calm: dict, harness: dict) -> dict[str, Any]:
    """The comparison's numbers from the two sides' rows: ratios are calm over lm-eval in
    questions/s (`ratio_with_capture`: calm's pass with capture on); `capture_ratio` is
    calm's own paired on/off time ratio; agreement is on the argmax over options."""
    ours, theirs = calm["loglikelihoods"], harness["loglikelihoods"]
    pairs = list(zip(ours, theirs, strict=True))
    agree = sum(int(np.argmax(a) == np.argmax(b)) for a, b in pairs)
    return {
        "calm_questions_per_s": calm["questions_per_s"],
        "capture_questions_per_s": calm["capture_questions_per_s"],
        "lm_eval_questions_per_s": harness["questions_per_s"],
        "ratio": calm["questions_per_s"] / harness["questions_per_s"],
        "ratio_with_capture": calm["capture_questions_per_s"] / harness["questions_per_s"],
        "capture_ratio": calm["capture_ratio"],
        "capture_ratio_median": calm["capture_ratio_median"],
        "capture_identical": calm["capture_identical"],
        "agree": agree,
        "n": len(pairs),
        "max_abs_loglik_diff": max(float(np.max(np.abs(np.array(a) - np.array(b)))) for a, b in pairs),
        "calm_peak_rss_mb": calm["peak_rss_mb"],
        "lm_eval_peak_rss_mb": harness["peak_rss_mb"],
    }


def this_bench(args: argparse.Namespace, *extra: str) -> list[str]:
    """This script again, on the same items, as one side or one configuration (`extra`)."""
    return [
        sys.executable,
        __file__,
        "--data",
        args.data,
        "--limit",
        str(args.limit),
        "--repeats",
        str(args.repeats),
        *extra,
    ]


def compare_with_harness(args: argparse.Namespace) -> None:
    sides = {}
    for side in ("calm", "lm-eval"):
        cmd = this_bench(args, "--batch-size", str(args.batch_size), "--one-side", side)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{side} failed:\n{done.stderr[-3000:]}")
        sides[side] = json.loads(done.stdout.strip().splitlines()[-1])
    numbers = harness_summary(sides["calm"], sides["lm-eval"])
    summary = {
        "data": args.data,
        "limit": args.limit,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        **numbers,
        "rows": [{k: v for k, v in row.items() if k != "loglikelihoods"} for row in sides.values()],
    }
    print("  ".join(header for header, _ in HARNESS_COLUMNS))
    print("  ".join(template.format(**summary).rjust(len(header)) for header, template in HARNESS_COLUMNS))
    target = args.json.with_name("harness.json") if args.json.name == "scoring.json" else args.json
    target.write_text(json.dumps(summary, indent=2))
    print(f"wrote {target}")


def default_models() -> list[str]:
    """The embedded model, and Gemma 3 270M beside it when its extra is installed (its
    vocabulary is five times the embedded model's: the scorer's largest LM head)."""
    sys.path.insert(0, str(ROOT))
    from calm_core.scoring.models import installed_models

    return [name for name in ("embedded", "gemma3-270m") if name in installed_models()]


def one_configuration(args: argparse.Namespace, model: str, rule: str, batch: int, share: bool) -> dict:
    """One configuration in a fresh subprocess, so its peak memory is its own."""
    threads = ["--threads", str(args.threads)] if args.threads else []
    peak = ["--peak-sizes", *map(str, args.peak_sizes)] if args.peak_sizes else []
    cmd = this_bench(args, "--model", model, *threads, *peak, "--one", rule, str(batch), "1" if share else "0")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


def row_line(row: dict) -> str:
    """One printed row: the model, the configuration, its speed, memory, share of the
    measured matmul peak, and the capture cost where it was measured (--repeats > 0)."""
    line = (
        f"{row['model']:12} vocab {row['vocab']:6}  {row['rule']:7} batch {row['batch_size']:3} "
        f"share_prefix {str(row['share_prefix']):5}  {row['questions_per_s']:6.2f} q/s  acc {row['acc']:.3f}  "
        f"peak {row['peak_rss_mb']:7.0f} MB  {row['gflop']:8.1f} GFLOP  "
        f"{100 * (row['peak_fraction'] or 0):5.1f}% of {row['matmul_peak_gflops']:.0f} GFLOP/s"
    )
    if "capture_ratio" in row:
        line += (
            f"  capture x{row['capture_ratio']:.3f} (median x{row['capture_ratio_median']:.3f}, "
            f"{'same' if row['capture_identical'] else 'DIFFERENT'})"
        )
    return line


def main() -> None:
    from flops import add_peak_sizes_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="arc/easy_test")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "scoring.json")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per configuration, capture off and on each")
    parser.add_argument(
        "--threads", type=int, help="torch threads per configuration (default: torch's; 1 on a machine others share)"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=default_models(),
        help="models to measure, one after the other (default: embedded, and gemma3-270m where installed; "
        "tiny: a smoke run)",
    )
    add_peak_sizes_option(parser)
    parser.add_argument("--model", default="embedded", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=3, metavar=("RULE", "BATCH", "SHARE"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--harness", action="store_true", help="compare with lm-evaluation-harness (pip install lm-eval)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward, both scorers (--harness)")
    parser.add_argument("--one-side", choices=["calm", "lm-eval"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_side:
        if args.one_side == "calm":
            row = our_side(args.data, args.limit, args.batch_size, args.repeats)
        else:
            row = harness_side(args.data, args.limit, args.batch_size)
        print(json.dumps(row))
        return
    if args.harness:
        compare_with_harness(args)
        return
    if args.one:
        rule, batch, share = args.one
        row = run_one(
            args.data,
            args.limit,
            rule,
            int(batch),
            share == "1",
            args.repeats,
            args.threads,
            args.model,
            tuple(args.peak_sizes),
        )
        print(json.dumps(row))
        return
    sys.path.insert(0, str(ROOT))
    from bench.streaming import model_or_tiny

    rows = []
    with tempfile.TemporaryDirectory(prefix="calm-scoring-") as scratch:
        for model in args.models:
            source = model_or_tiny(model, Path(scratch))  # the children load it; the rows name the model
            for rule, batch, share in CONFIGS:
                rows.append({**one_configuration(args, source, rule, batch, share), "model": model})
                print(row_line(rows[-1]), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "data": args.data,
        "limit": args.limit,
        "repeats": args.repeats,
        "threads": args.threads,
        "models": args.models,
        "rows": rows,
    }
    args.json.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
