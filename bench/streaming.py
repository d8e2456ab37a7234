"""Opening a large multiple-choice file: the eager loader against LazyItems (calm_core.data.stream).

    .venv/bin/python bench/streaming.py [--rows 1000000] [--dir /tmp/calm_stream_bench]

Writes a JSONL file of `--rows` generated multiple-choice items (one row in
`REJECT_EVERY` has a single choice, so the rejected-row report is exercised) and the
same rows as Parquet (row groups of `ROW_GROUP` rows) under `--dir`, once; the data are
never committed. Then, per format and loader (`eager`: `load_file(stream=False)`, the
loader as it was; `stream`: `load_file(stream=True)`), one child process measures:

- open: seconds for `load_file` (the stream loader validates every row here too),
- first batch: seconds from the loaded report to the items of training step 0, drawn
  with the trainer's own `calm_core.training.loop.batch_indices` (imported, no model),
- peak RSS of the child and its RSS before the load (interpreter, numpy, torch), and the
  difference: what loading the file cost in memory.

Each configuration runs in its own process so that one's memory cannot hide another's;
they run one after another. Prints a table and writes `--json` and `--md`.

`--train-step` also times a real `train()` up to its first step on the JSONL file: the
tiny random-weight Llama of tests/conftest.py (saved under `--dir`), method sft, one step
of `BATCH_SIZE`, a separate small S_V and evaluation set, per loader, in a child process
stopped after `--train-timeout` seconds (reported as such).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROW_GROUP = 16_384  # Parquet rows per row group (and rows generated at a time): a read decodes one group
REJECT_EVERY = 10_000  # one row in this many is invalid (one choice)
BATCH_SIZE = 16
SEED = 0
CONFIGS = [("jsonl", "eager"), ("jsonl", "stream"), ("parquet", "eager"), ("parquet", "stream")]
WORDS = ("river", "stone", "light", "paper", "garden", "engine", "winter", "signal", "market", "forest",
         "planet", "silver", "window", "harbor", "candle", "mirror")


def make_row(number: int, rng: random.Random) -> dict:
    """One generated item; varied lengths, 3 to 5 options, the answer as a 0-based index."""
    k = rng.randint(3, 5)
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24)))
    choices = [f"{rng.choice(WORDS)} {rng.choice(WORDS)} {j}" for j in range(k)]
    if number % REJECT_EVERY == 0:
        choices = choices[:1]  # rejected: fewer than 2 choices
    return {"id": f"bench-{number}", "question": f"Which word follows {words}?", "choices": choices,
            "answer": rng.randrange(len(choices)), "subject": WORDS[number % len(WORDS)]}


def generate(folder: Path, rows: int) -> tuple[Path, Path]:
    """JSONL and Parquet files of `rows` items (reused when already there with that many rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    jsonl, parquet = folder / f"mc_{rows}.jsonl", folder / f"mc_{rows}_rg{ROW_GROUP}.parquet"
    if jsonl.is_file() and parquet.is_file():
        return jsonl, parquet
    rng = random.Random(SEED)
    writer = None
    with (folder / f".{jsonl.name}.tmp").open("w", encoding="utf-8") as handle:
        for start in range(1, rows + 1, ROW_GROUP):
            chunk = [make_row(n, rng) for n in range(start, min(start + ROW_GROUP, rows + 1))]
            handle.writelines(json.dumps(row) + "\n" for row in chunk)
            table = pa.Table.from_pylist(chunk)
            writer = writer or pq.ParquetWriter(folder / f".{parquet.name}.tmp", table.schema)
            writer.write_table(table, row_group_size=ROW_GROUP)
    writer.close()
    (folder / f".{jsonl.name}.tmp").rename(jsonl)
    (folder / f".{parquet.name}.tmp").rename(parquet)
    return jsonl, parquet


def write_heldout(folder: Path, rows: int = 64) -> Path:
    """A small S_V / evaluation file whose questions are not training questions (other seed)."""
    path = folder / "heldout.jsonl"
    if not path.is_file():
        rng = random.Random(SEED + 1)
        path.write_text("".join(json.dumps({**make_row(n, rng), "id": f"held-{n}"}) + "\n"
                                for n in range(1, rows + 1) if n % REJECT_EVERY), encoding="utf-8")
    return path


def tiny_model(folder: Path) -> Path:
    """tests/conftest.py's tiny random Llama with the embedded tokenizer, saved once."""
    target = folder / "tiny-llama"
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import TINY_CONFIG

    from calm_core.scoring.models import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY_CONFIG)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


# A bench's --smoke run: every part of the run, on a few steps and items (TrainConfig fields).
SMOKE_RUN = {"steps": 2, "train_limit": 8, "heldout_limit": 8, "eval_limit": 8}
TINY = "tiny"  # a bench's --model value for tiny_model: a smoke run's model, whose figures mean nothing


def model_or_tiny(name: str, folder: Path) -> str:
    """`name` as load_model and TrainConfig take it: TINY becomes tiny_model's folder under
    `folder` (so a bench's smoke run goes through its real code path on random weights in
    seconds), any other name is returned as it is."""
    return str(tiny_model(folder)) if name == TINY else name


def train_child(path: Path, mode: str, heldout: Path, model: Path) -> dict:
    """Seconds from `train()` to the end of its first step (data, model, checks, step)."""
    from calm_core.data import loaders
    from calm_core.training import batches
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    if mode == "eager":
        loaders.STREAM_FROM_BYTES = 2**62  # the eager loader whatever the file's size
    cfg = TrainConfig(method="sft", steps=1, batch_size=BATCH_SIZE, heldout_batch_size=BATCH_SIZE, eval_every=0,
                      checkpoint_every=0, scoring="letter", train_data=str(path), heldout_data=str(heldout),
                      eval_data=(str(heldout),), model=str(model), device="cpu", frozen_prefix=False, seed=SEED)
    before = rss_mb()
    started = time.perf_counter()
    seen: dict = {}
    train(cfg, progress=lambda step, total, record: seen.setdefault("first_step_s", time.perf_counter() - started))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"first_step_s": seen["first_step_s"], "rss_before_mb": before, "peak_rss_mb": peak,
            "load_mb": peak - before, "loop": loop_version(batches)}


def loop_version(batches: object) -> str:
    """Whether the training loop streams (the patch /tmp/calm/stream_loop.diff, applied) or not."""
    return "streaming patch applied" if hasattr(batches, "drawn_positions") else "as committed (reads every item)"


def run_train_child(path: Path, mode: str, heldout: Path, model: Path, timeout: float) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--train-child", mode, str(path), str(heldout),
               str(model)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timed_out_s": timeout}
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def train_table(rows: list[dict]) -> str:
    lines = ["| loader | first step s | RSS before MB | peak RSS MB | load MB |", "|---|---|---|---|---|"]
    for r in rows:
        if "timed_out_s" in r:
            lines.append(f"| {r['loader']} | > {r['timed_out_s']:.0f} (stopped) | - | - | - |")
        else:
            lines.append(f"| {r['loader']} | {r['first_step_s']:.1f} | {r['rss_before_mb']:.0f} | "
                         f"{r['peak_rss_mb']:.0f} | {r['load_mb']:.0f} |")
    return "\n".join(lines)


def rss_mb() -> float:
    """Resident memory now, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reproduced_batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """A copy of the trainer's `batch_indices`, used only when the trainer cannot be imported."""
    import numpy as np

    epoch, offset = divmod(step, max(1, n // batch_size))
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[offset * batch_size: offset * batch_size + batch_size].tolist()


def schedule() -> tuple[object, str]:
    """(batch_indices, where it came from): the trainer's own (imports torch, loads no
    model), or the copy above when the training package does not import."""
    for module in ("calm_core.training.batches", "calm_core.training.loop"):
        try:
            return __import__(module, fromlist=["batch_indices"]).batch_indices, module
        except (ImportError, AttributeError):
            continue
    return reproduced_batch_indices, "reproduced in bench/streaming.py (the trainer did not import)"


def child(path: Path, mode: str) -> dict:
    """One configuration, in this (fresh) process: open, then the first training batch."""
    from calm_core.data.loaders import load_file

    batch_indices, origin = schedule()
    before = rss_mb()
    started = time.perf_counter()
    report = load_file(path, kind="mc", stream=mode == "stream")
    opened = time.perf_counter()
    batch = [report.items[i] for i in batch_indices(len(report.items), BATCH_SIZE, 0, SEED)]
    drawn = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"items": len(report.items), "rejected": report.n_rejected, "batch": len(batch),
            "first_ids": [item.id for item in batch[:3]], "open_s": opened - started,
            "first_batch_s": drawn - opened, "rss_before_mb": before, "peak_rss_mb": peak,
            "load_mb": peak - before, "items_type": type(report.items).__name__, "schedule": origin}


def run_child(path: Path, mode: str) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    header = ("format", "loader", "items", "rejected", "open s", "1st batch s", "open+batch s",
              "RSS before MB", "peak RSS MB", "load MB")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = (r["format"], r["loader"], r["items"], r["rejected"], f"{r['open_s']:.2f}", f"{r['first_batch_s']:.3f}",
                 f"{r['open_s'] + r['first_batch_s']:.2f}", f"{r['rss_before_mb']:.0f}", f"{r['peak_rss_mb']:.0f}",
                 f"{r['load_mb']:.0f}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/calm_stream_bench"))
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "streaming.json")
    parser.add_argument("--md", type=Path, default=ROOT / "bench" / "results" / "streaming.md")
    parser.add_argument("--train-step", action="store_true", help="also time a real train() to its first step")
    parser.add_argument("--train-timeout", type=float, default=900.0)
    parser.add_argument("--train-rows", type=int, help="rows of the file --train-step trains on (default: --rows)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--train-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[1]), args.child[0])))
        return
    if args.train_child:
        mode, path, heldout, model = args.train_child
        print(json.dumps(train_child(Path(path), mode, Path(heldout), Path(model))))
        return

    started = time.perf_counter()
    jsonl, parquet = generate(args.dir, args.rows)
    sizes = ", ".join(f"{p} ({p.stat().st_size / 2**20:.0f} MiB)" for p in (jsonl, parquet))
    print(f"data: {sizes} in {time.perf_counter() - started:.0f} s", flush=True)
    files = {"jsonl": jsonl, "parquet": parquet}
    rows = []
    for fmt, mode in CONFIGS:
        rows.append({"format": fmt, "loader": mode, **run_child(files[fmt], mode)})
        print(f"  {fmt} {mode}: open {rows[-1]['open_s']:.1f} s, peak RSS {rows[-1]['peak_rss_mb']:.0f} MB", flush=True)
    for fmt in files:  # both loaders must return the same items and rejections
        eager, lazy = (r for r in rows if r["format"] == fmt)
        same = all(eager[k] == lazy[k] for k in ("items", "rejected", "first_ids"))
        assert same, f"{fmt}: eager and stream loaders disagree: {eager} vs {lazy}"
    trained = []
    train_rows = args.train_rows or args.rows
    if args.train_step:
        heldout, model = write_heldout(args.dir), tiny_model(args.dir)
        train_file = generate(args.dir, train_rows)[0]
        for mode in ("stream", "eager"):
            trained.append({"loader": mode, **run_train_child(train_file, mode, heldout, model, args.train_timeout)})
            print(f"  train {mode}: {trained[-1]}", flush=True)
    command = f".venv/bin/python bench/streaming.py --rows {args.rows}" + (
        f" --train-step --train-rows {train_rows} --train-timeout {args.train_timeout:.0f}" if args.train_step else "")
    record = {"command": command, "rows": args.rows, "schedule": sorted({r["schedule"] for r in rows}),
              "batch_size": BATCH_SIZE, "row_group": ROW_GROUP,
              "files_mib": {k: round(p.stat().st_size / 2**20, 1) for k, p in files.items()},
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                         f"Python {platform.python_version()}",
              "results": rows, "train_rows": train_rows if trained else None,
              "heldout_items": sum(1 for _ in write_heldout(args.dir).open()) if trained else None,
              "train_step": trained}
    text = markdown(record)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    args.md.write_text(text, encoding="utf-8")
    print(f"wrote {args.json} and {args.md}")


def markdown(record: dict) -> str:
    """bench/results/streaming.md from the JSON record: the tables, what they measure, the command."""
    sizes = ", ".join(f"{k} {v} MiB" for k, v in record["files_mib"].items())
    text = (f"Opening a {record['rows']:,}-row multiple-choice file ({sizes}; Parquet row groups of "
            f"{record['row_group']} rows) and drawing training step 0's batch of {record['batch_size']} with "
            f"`batch_indices` (from {', '.join(record['schedule'])}); one child process per row, one after another "
            f"({record['machine']}; a machine shared with other work, so the seconds are indicative, the memory "
            f"is not). `load MB` = peak RSS minus RSS before the load (interpreter, numpy, torch). `stream` "
            f"validates every row while it indexes, so both loaders report the same items and rejected rows.\n\n"
            f"{table(record['results'])}\n")
    trained = record.get("train_step") or []
    if trained:
        loops = ", ".join(sorted({r["loop"] for r in trained if "loop" in r})) or "unknown"
        text += (f"\n`train()` to the end of step 1 on the {record['train_rows']:,}-row JSONL file (tiny random "
                 f"Llama, sft, batch {record['batch_size']}, a {record['heldout_items']}-item S_V and evaluation "
                 f"set, letter scoring, no frozen prefix; training loop: {loops}). `stream`: LazyItems, only the "
                 f"drawn items checked against the context; `eager`: a list, every item tokenized by that check "
                 f"before step 1, as today.\n\n{train_table(trained)}\n")
    return text + f"\nCommand: `{record['command']}`\n"


if __name__ == "__main__":
    main()
