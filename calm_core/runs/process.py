"""Is a run's process alive? Checks of processes on this machine, through /proc where it exists.

A status.json records `pid`, `host` and `pid_start` (calm_core.runs.rundir writes them), so a
pid is only ever checked on the machine that recorded it, and a pid the kernel has since
given to another process does not count as the job's.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

HOST = socket.gethostname()  # pids are only checked on the machine that recorded them


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks) from /proc, or None when unavailable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and ')'
    return fields[0], fields[19]


def process_start(pid: int) -> str | None:
    """An opaque start stamp for `pid` (Linux), so a reused pid is not taken for our job."""
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def pid_alive(pid: int | None, start: str | None = None) -> bool:
    """True when process `pid` on this machine exists and is not a zombie.

    With `start` (from `process_start`), a different process that got the same pid
    counts as dead.
    """
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if not os.path.isdir("/proc/self"):
        return True  # no procfs: kill(0) is all we can know
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):  # gone since, or exited and not yet reaped
        return False
    return start is None or stat[1] == start


def process_alive(status: dict) -> bool | None:
    """Whether the run's recorded process is alive; None when it cannot be checked here."""
    pid = status.get("pid")
    if not pid or status.get("host", HOST) != HOST:
        return None
    return pid_alive(int(pid), status.get("pid_start"))


def pids_with_option(option: str, value: str) -> list[int]:
    """Live processes on this machine whose command line holds `option value` as two
    words: how a process is found when no status records its pid. Linux /proc; [] elsewhere."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode("utf-8", "replace") for a in args]
        if any(w == option and i + 1 < len(words) and words[i + 1] == value for i, w in enumerate(words)):
            if pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found
