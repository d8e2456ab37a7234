"""How far a configuration runs from this machine's physical limit: the fp32 matmul peak
measured here, the FLOPs a piece of work performs counted from the operations it actually
runs, and the fraction of the peak that the work's measured time reaches.

    peak = matmul_peak_gflops()                    # best of a few square fp32 matmuls, GFLOP/s
    flops, result = counted_flops(lambda: work())  # torch's FlopCounterMode over the real ops
    fraction = flops / seconds / 1e9 / peak

The count comes from torch.utils.flop_counter.FlopCounterMode: the shapes of the matmuls,
convolutions and attention kernels that ran (the tokens actually run, padding included,
and only the LM-head rows the scorer computed), forward and backward where a step runs
one. Elementwise work (norms, activations, softmax) is not counted; on these models the
matmuls hold nearly all the arithmetic, so the fraction is a slight underestimate.

The peak is measured in the calling process with its thread count, right before the work
it is compared with, so both see the same machine load. Run alone:

    .venv/bin/python bench/flops.py [--threads N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

PEAK_SIZES = (512, 1024, 2048)  # square fp32 matmuls; the best rate of any size is the peak
PEAK_SECONDS = 0.5  # per size: enough repetitions to pass this, after one warm-up


def matmul_peak_gflops(
    sizes: tuple[int, ...] = PEAK_SIZES, seconds: float = PEAK_SECONDS, dtype: str = "float32"
) -> float:
    """The best matmul rate this process reaches in `dtype` (GFLOP/s, 2 n^3 per n x n
    product), with torch's current thread count: the ceiling a model's forward can approach."""
    import torch

    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n).to(getattr(torch, dtype)), torch.randn(n, n).to(getattr(torch, dtype))
        torch.mm(a, b)  # warm-up: allocation and kernel selection
        count, start = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        best = max(best, 2 * n**3 * count / elapsed / 1e9)
    return best


def add_peak_sizes_option(parser: argparse.ArgumentParser) -> None:
    """`--peak-sizes` for a bench that reports its share of the matmul peak: the square sizes
    to measure (none given: PEAK_SIZES). A smoke run gives one small size, since the large
    bf16 matmuls are slow on a CPU without native bf16."""
    parser.add_argument(
        "--peak-sizes",
        type=int,
        nargs="+",
        default=[],
        help="the matmul peak's square sizes (default: bench/flops.py's PEAK_SIZES; a smoke run's one small size)",
    )


def counted_flops(work: Callable[[], T]) -> tuple[int, T]:
    """(FLOPs of the operations `work` ran, its result), counted by FlopCounterMode. The
    counting slows the work: never time a counted call."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        result = work()
    return int(counter.get_total_flops()), result


class StepCounter:
    """FlopCounterMode held open across one training step, entered and left from the
    trainer's progress callback (which runs between steps), so a real step is counted
    inside the real loop. `start()` after step k, `stop()` after step k + 1."""

    def __init__(self) -> None:
        self._mode: Any = None
        self.flops: int | None = None

    def start(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def stop(self) -> None:
        if self._mode is None:
            return
        self._mode.__exit__(None, None, None)
        self.flops = int(self._mode.get_total_flops())
        self._mode = None


def peak_fraction(flops: float | None, seconds: float, peak_gflops: float) -> float | None:
    """The share of the measured peak that `flops` done in `seconds` reaches."""
    if not flops or seconds <= 0 or peak_gflops <= 0:
        return None
    return flops / seconds / 1e9 / peak_gflops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    peak = matmul_peak_gflops()
    print(f"fp32 matmul peak: {peak:.1f} GFLOP/s with {torch.get_num_threads()} threads")
    print(json.dumps({"peak_gflops": peak, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
