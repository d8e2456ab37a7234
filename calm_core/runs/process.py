"""Is a run's process alive? Checks of processes on this machine, through psutil.

A status.json records `pid`, `host` and `pid_start` (calm_core.runs.rundir writes them), so a
pid is only ever checked on the machine that recorded it, and a pid the system has since
given to another process does not count as the job's. psutil (installed with peft) gives
the same answers on Linux, macOS and Windows; reading /proc by hand gave them on Linux only.
"""

from __future__ import annotations

import socket

import psutil

from calm_core.runs.records import RunStatus

HOST = socket.gethostname()  # pids are only checked on the machine that recorded them
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def process_start(pid: int) -> str | None:
    """An opaque start stamp for `pid` (its creation time), so a reused pid is not taken for our job."""
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, ValueError):
        return None


def pid_alive(pid: int | None, start: str | None = None) -> bool:
    """True when process `pid` on this machine exists and is not a zombie.

    With `start` (from `process_start`), a different process that got the same pid
    counts as dead.
    """
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() in _GONE:  # exited and not yet reaped
            return False
        return start is None or _same_start(process, start)
    except psutil.AccessDenied:
        return True  # exists, owned by someone else
    except psutil.Error:
        return False


def _same_start(process: psutil.Process, start: str) -> bool:
    """Whether `start` is this process's stamp. A stamp from before psutil (clock ticks of
    /proc/<pid>/stat, a whole number) is compared the old way, so a job started by an older
    version is not taken for dead."""
    if "." in start:
        return f"{process.create_time():.2f}" == start
    try:
        with open(f"/proc/{process.pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return True  # cannot tell: the pid exists
    return text[text.rindex(")") + 2 :].split()[19] == start


def process_alive(status: RunStatus) -> bool | None:
    """Whether the run's recorded process is alive; None when it cannot be checked here."""
    if not status.pid or (status.host or HOST) != HOST:
        return None
    return pid_alive(status.pid, status.pid_start)


def pids_with_option(option: str, value: str) -> list[int]:
    """Live processes on this machine whose command line holds `option value` as two
    words: how a process is found when no status records its pid."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        words = process.info.get("cmdline") or []
        if any(w == option and i + 1 < len(words) and words[i + 1] == value for i, w in enumerate(words)):
            if pid_alive(process.info["pid"]):
                found.append(process.info["pid"])
    return found
