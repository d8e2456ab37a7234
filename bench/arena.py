"""Fill and read throughput and peak memory of the frozen-prefix cache: in memory (the
dict of tensors `FrozenPrefixModel` keeps without a store) against the disk arena
(`HiddenStateStore` over `calm_core.scoring.arena`), for N synthetic sequences.

    .venv/bin/python bench/arena.py [--sizes 10000,100000] [--fsync-sizes 10000]
                                    [--dir /tmp/calm-bench-arena] [--json bench/results/arena.json]

Each configuration runs in a child process of its own, so its peak resident memory
(getrusage ru_maxrss) is its own; the table also gives the child's memory before the
fill (Python, torch, the source block), so the difference is what the cache costs.
Sequences are as the embedded model's cache holds them: hidden size 576 (SmolLM2-135M),
lengths drawn uniformly from 30..120 tokens, float32 (the store's dtype). The keys are
token-id tuples of the same lengths, which the in-memory cache keeps as dict keys and the
arena keeps on disk. `fill` puts every sequence (the arena: written and indexed, flushed to the
kernel; `arena+fsync`: also fsynced, data then record); `read` then gets every sequence
back in a shuffled order as a float32 tensor, the arena through a store opened afresh
(as a second run would; `reopen` is that open, reading the index). An in-memory row whose
states would need more than half the memory available is skipped and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HIDDEN = 576  # SmolLM2-135M's hidden size
LENGTHS = (30, 120)  # tokens per sequence, uniform, both ends included
VOCAB = 49152  # SmolLM2's vocabulary: the range of the synthetic token ids
SOURCE_ROWS = 4096  # rows of random states the sequences are cut from
ITEMSIZE = 4  # float32


def lengths_of(n: int, seed: int) -> list[int]:
    import numpy as np

    return np.random.default_rng(seed).integers(LENGTHS[0], LENGTHS[1] + 1, n).tolist()


def key_of(i: int, length: int) -> tuple[int, ...]:
    """A distinct token-id tuple per sequence, made on the fly so the child does not hold
    every key the way the in-memory cache does."""
    return (i % VOCAB, i // VOCAB) + tuple((i * 7919 + j * 104729) % VOCAB for j in range(length - 2))


def payload_bytes(lengths: list[int]) -> int:
    return sum(lengths) * HIDDEN * ITEMSIZE


def rss_now() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def child(mode: str, n: int, directory: Path, seed: int) -> dict:
    """One configuration: fill, (arena: reopen), read; times and memory."""
    import numpy as np
    import torch

    from calm_core.scoring.arena import ArenaConfig
    from calm_core.scoring.frozen_prefix import HiddenStateStore

    torch.set_num_threads(1)  # the copies are small: threads only contend (a shared machine ran 10x slower with 2)
    lengths = lengths_of(n, seed)
    source = torch.from_numpy(np.random.default_rng(seed).standard_normal((SOURCE_ROWS + LENGTHS[1], HIDDEN),
                                                                           dtype=np.float32))
    like = torch.empty(0, dtype=torch.float32)
    config = ArenaConfig(fsync=mode == "arena+fsync")
    open_cache = (lambda: HiddenStateStore(directory, "bench", like, config)) if mode != "memory" else dict
    base_rss = rss_now()

    cache = open_cache()
    clone = mode == "memory"  # as FrozenPrefixModel._keep: memory keeps a clone of the batch's slice, a store copies it out
    start = time.perf_counter()
    for i, length in enumerate(lengths):
        at = i % SOURCE_ROWS
        states = source[at:at + length]
        cache[key_of(i, length)] = states.clone() if clone else states
    fill_s = time.perf_counter() - start

    reopen_s = 0.0
    if mode != "memory":
        del cache
        start = time.perf_counter()
        cache = open_cache()
        assert len(cache) == n
        reopen_s = time.perf_counter() - start
    order = np.random.default_rng(seed + 1).permutation(n).tolist()
    total = 0.0
    start = time.perf_counter()
    for i in order:
        total += float(cache[key_of(i, lengths[i])][-1, 0])  # touch the state as the batch copy would
    read_s = time.perf_counter() - start
    disk = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if mode != "memory" else 0
    return {"mode": mode, "sequences": n, "states_bytes": payload_bytes(lengths), "fill_s": fill_s,
            "reopen_s": reopen_s, "read_s": read_s, "base_rss_bytes": base_rss,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "disk_bytes": disk,
            "checksum": total}


def run_child(mode: str, n: int, directory: Path, seed: int) -> dict:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    try:
        out = subprocess.run([sys.executable, __file__, "--child", mode, str(n), "--dir", str(directory),
                              "--seed", str(seed)], check=True, capture_output=True, text=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def skip_reason(mode: str, states: int, directory: Path) -> str | None:
    """Why a configuration would not fit this machine, or None."""
    import psutil

    if mode == "memory" and states > psutil.virtual_memory().available / 2:
        return f"needs {states / 2**30:.1f} GiB of memory, {psutil.virtual_memory().available / 2**30:.1f} GiB available"
    free = shutil.disk_usage(directory.parent).free
    if mode != "memory" and states > free * 0.8:
        return f"needs {states / 2**30:.1f} GiB of disk, {free / 2**30:.1f} GiB free"
    return None


LEGEND = ("fill: every sequence put (memory: a clone kept in a dict; arena: written and indexed; arena+fsync: "
          "data and record fsynced too). reopen: a fresh store opened, its index read. read: every sequence back "
          "in a shuffled order as a float32 tensor (memory: a dict lookup; arena: copied out of the mapped file). "
          "RSS before: the child after its imports, before the fill; peak RSS: its ru_maxrss. MB/s: states bytes "
          "over seconds.")
COLUMNS = ("cache", "sequences", "states GiB", "fill s", "fill MB/s", "reopen s", "read s", "read MB/s",
           "RSS before MiB", "peak RSS MiB", "disk GiB")


def cells(r: dict) -> list[str]:
    """One row's table cells; a skipped row says why in place of its measurements."""
    head = [r["mode"], str(r["sequences"]), f"{r['states_bytes'] / 2**30:.2f}"]
    if "skipped" in r:
        return head + [f"skipped: {r['skipped']}"] + [""] * (len(COLUMNS) - 4)
    mb = r["states_bytes"] / 2**20
    return head + [f"{r['fill_s']:.1f}", f"{mb / r['fill_s']:.0f}", f"{r['reopen_s']:.2f}", f"{r['read_s']:.1f}",
                   f"{mb / r['read_s']:.0f}", f"{r['base_rss_bytes'] / 2**20:.0f}", f"{r['peak_rss_bytes'] / 2**20:.0f}",
                   f"{r['disk_bytes'] / 2**30:.2f}"]


def table(rows: list[dict]) -> str:
    """A markdown table, numbers right-aligned."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(["---"] + ["--:"] * (len(COLUMNS) - 1)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(cells(r)) + " |" for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--fsync-sizes", default="10000", help="sizes that also get an arena+fsync row ('' for none)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/calm-bench-arena"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "arena.json")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.dir, args.seed)))
        return

    import numpy as np
    import psutil
    import torch

    fsync_sizes = {int(s) for s in args.fsync_sizes.split(",") if s}
    load = os.getloadavg()[1]  # the machine may be shared: its 5-minute load when the run began
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        states = payload_bytes(lengths_of(n, args.seed))
        for mode in ["memory", "arena"] + (["arena+fsync"] if n in fsync_sizes else []):
            reason = skip_reason(mode, states, args.dir)
            row = ({"mode": mode, "sequences": n, "states_bytes": states, "skipped": reason} if reason
                   else run_child(mode, n, args.dir, args.seed))
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
    command = "nice -n 10 .venv/bin/python bench/arena.py " + shlex.join(sys.argv[1:])
    report = table(rows)
    print(report)
    result = {"command": command.strip(), "hidden": HIDDEN, "lengths": list(LENGTHS), "dtype": "float32",
              "machine": {"cpus": psutil.cpu_count(), "load_5min_at_start": load,
                          "memory_bytes": psutil.virtual_memory().total,
                          "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__},
              "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    args.json.with_suffix(".md").write_text(
        f"Frozen-prefix cache, in memory against the disk arena ({len(rows)} configurations, one child process "
        f"each; hidden size {HIDDEN}, {LENGTHS[0]}-{LENGTHS[1]} tokens, float32; {psutil.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB memory, 5-minute load {load:.1f} at the start):\n\n"
        f"    {command.strip()}\n\n{report}\n\n{LEGEND}\n")


if __name__ == "__main__":
    main()
