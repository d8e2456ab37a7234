"""Which calm_core modules a call walks through (issue 32: "follow one dataset"): a tracer
that records each calm_core function entered, collapsed into stays (consecutive calls in
one module are one stay) and rooms (distinct modules). Used by tests/test_trace.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Walk:
    """The modules entered, in order, one entry per stay."""

    stays: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (caller module, callee module) per call
    functions: set[str] = field(default_factory=set)  # "module.qualname" of every function entered

    @property
    def rooms(self) -> set[str]:
        return set(self.stays)

    def returns_to(self, module: str) -> int:
        """How many times the walk comes back to `module` after leaving it."""
        return max(0, self.stays.count(module) - 1)


def walk(fn: Callable[[], Any], prefix: str = "calm_core") -> tuple[Any, Walk]:
    """Run fn() and record every `prefix` function entered (`call` events)."""
    record = Walk()

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return None
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(prefix):
            return None
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
        record.calls.append((caller, module))
        record.functions.add(f"{module}.{frame.f_code.co_qualname}")
        if not record.stays or record.stays[-1] != module:
            record.stays.append(module)
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        result = fn()
    finally:
        sys.settrace(previous)
    return result, record
