"""Fault injection: named points in a training job where a test can SIGKILL it.

    CALM_FAULT=checkpoint_files:2 calm train ...   # dies the 2nd time a checkpoint is half written

A job passes `fault_point(name)` at every moment whose interruption the run directory
must survive (tests/test_faults.py kills it at each in turn and checks that `calm runs`
tells the truth, no file is corrupt and resume reproduces an uninterrupted run). Unset,
a point costs one dictionary lookup. SIGKILL, not an exception: nothing gets to clean up,
as with the OOM killer or a power cut.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "CALM_FAULT"

POINTS = {
    "model_loaded": "after the model is loaded, before the run directory is touched",
    "cache_fill": "while the frozen-layer cache fills (each progress report)",
    "step_logged": "after a step's metrics line is written, before its heartbeat",
    "checkpoint_files": "inside a checkpoint: the adapter written, the optimizer not yet",
    "checkpoint_done": "after a checkpoint is in place, before older ones are pruned",
    "eval_written": "in the final evaluation, after one variant's predictions file",
    "results_written": "after results.json, before the final status",
}

_seen: dict[str, int] = {}


def parse(spec: str) -> tuple[str, int]:
    """`name` or `name:n` -> (name, n >= 1); ValueError naming the known points otherwise."""
    name, _, count = spec.partition(":")
    if name not in POINTS or (count and (not count.isdigit() or int(count) < 1)):
        raise ValueError(
            f"Expected {FAULT_ENV} as POINT or POINT:N with POINT one of {', '.join(POINTS)} "
            f"and N >= 1, but got {spec!r}"
        )
    return name, int(count or 1)


def fault_point(name: str) -> None:
    """SIGKILL this process at the n-th pass through `name`, when CALM_FAULT asks for it."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    target, count = parse(spec)
    if name != target:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == count:
        os.kill(os.getpid(), signal.SIGKILL)
