"""Time a named model's GGUF conversion both ways, side by side, and check they agree.

    .venv/bin/python bench/convert_gguf.py --model gemma3-270m
    .venv/bin/python bench/convert_gguf.py --model embedded
    .venv/bin/python bench/convert_gguf.py --model tiny   # the script runs; its seconds mean nothing

The plain way is transformers' own readers (what CALM Studio did before, kept as
`gguf_convert.convert_gguf_plain`); the fast way is `gguf_convert.convert_gguf`. Both
write into a temp folder (never the model cache); the output compares every file of the
two folders byte for byte, and the load average, since 2 shared cores make seconds noisy.
`--model tiny` converts the tiny synthetic GGUF of tests/test_gguf_convert.py (a 2-layer
Llama with one Q8_0 tensor) instead of a named model's: a smoke run of both ways.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

COMPARED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")


def source_gguf(name: str, folder: Path) -> Path:
    """The named model's GGUF: the package's file, or assembled from its chunks into `folder`;
    for `tiny`, the tests' synthetic one written into `folder`."""
    import importlib

    from calm_core.scoring.named_models import NAMED_MODELS, _whole_gguf

    if name == "tiny":
        from tests.test_gguf_convert import write_tiny_gguf

        return write_tiny_gguf(folder / "tiny-llama.gguf")
    model = NAMED_MODELS[name]
    if not model.chunked:
        return _whole_gguf(model)
    return Path(importlib.import_module(model.module).assemble(folder / model.gguf))


def timed(label: str, convert, *args) -> float:
    started = time.perf_counter()
    convert(*args)
    seconds = time.perf_counter() - started
    print(f"{label}: {seconds:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
    return seconds


def main() -> int:
    from calm_core.scoring.gguf_convert import convert_gguf, convert_gguf_plain, quiet_step

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m", help="a named model, or tiny (a smoke run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="convert-bench-") as tmp:
        root = Path(tmp)
        gguf = source_gguf(args.model, root)
        plain = timed("plain (transformers' readers)", convert_gguf_plain, gguf, root / "plain", "plain")
        fast = timed("fast (gguf_convert.convert_gguf)", convert_gguf, gguf, root / "fast", "fast", quiet_step)
        same = {name: (root / "plain" / name).read_bytes() == (root / "fast" / name).read_bytes() for name in COMPARED}
    print(f"{args.model}: plain {plain:.1f} s, fast {fast:.1f} s ({plain / fast:.1f}x); byte-identical: {same}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
