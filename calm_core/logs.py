"""Library messages go through `logging`; the `calm` command and the studio choose where they go.

    log = logging.getLogger(__name__)          # in a calm_core module
    log.warning("note: %s", what)              # printed by the CLI as "calm: note: ..."
    configure()                                # the CLI and the studio: calm_core's records to stderr

Why: notes printed straight to stderr could not be silenced or captured by a caller that
embeds the library (a notebook, a service); through `logging.getLogger("calm_core")` they
can. The package itself adds only a NullHandler, as libraries should.

Third-party noise that is not the user's business is filtered at its source here, once,
when calm_core is imported: bitsandbytes, on a CPU without its optional kernels package,
logs at import that it could not fetch a kernel and suggests `trust_remote_code=True`,
which invites a user to enable remote code for nothing (it falls back to its plain path).
peft asks transformers' deprecated `is_gradient_checkpointing` on every training run, a
FutureWarning addressed to peft's authors, not to ours or our users.
"""

from __future__ import annotations

import logging
import re
import sys
import warnings
from typing import Any

PACKAGE_LOGGER = "calm_core"
FORMAT = "calm: %(message)s"
# logger name -> the starts of messages that say nothing a user can act on
THIRD_PARTY_NOISE: dict[str, tuple[str, ...]] = {
    "bitsandbytes.backends.cpu.ops": ("Failed to load CPU gemm_4bit_forward",),
}
# warnings (category, the start of the message) raised by a dependency about another one
THIRD_PARTY_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    (FutureWarning, "`is_gradient_checkpointing` is deprecated"),
)
_HANDLER_NAME = "calm-stderr"


class _DropNoise(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time of the record (a test's capture, a job's log)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def quiet_third_party() -> None:
    """Attach the noise filters (idempotent)."""
    for name, starts in THIRD_PARTY_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise(starts))
    for category, start in THIRD_PARTY_WARNINGS:
        warnings.filterwarnings("ignore", message=f"{_escape(start)}", category=category)


def _escape(text: str) -> str:
    return re.escape(text)


def configure(level: int = logging.INFO) -> None:
    """calm_core's records at `level` and above to stderr as "calm: ..." (idempotent: the
    CLI and the studio call it at start)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    logger.setLevel(level)
    if not any(h.get_name() == _HANDLER_NAME for h in logger.handlers):
        handler = _CurrentStderr()
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    logger.propagate = False


logging.getLogger(PACKAGE_LOGGER).addHandler(logging.NullHandler())
