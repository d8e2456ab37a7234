"""Progress reporting for long loops over items (scoring, generation, prefilling caches).

A caller passes `progress`: True for a tqdm bar on stderr, False for none, or its own
`(done, total)` callback (the studio's progress bar in app/widgets/state.py, a test's counter).
`progress_callback` turns any of the three into one `update(done, total)` and a `close()`.
A set-up step that runs for minutes (converting a model, scoring a quiz) says what it is
doing and, while silent, that it still is: `Ticker`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

from tqdm.auto import tqdm

ProgressFn = Callable[[int, int], None]  # (done, total) -> None


def progress_callback(progress: bool | ProgressFn, total: int, desc: str) -> tuple[ProgressFn, Callable[[], None]]:
    """(update, close) for `progress`: the caller's own callback, a no-op, or a tqdm bar named `desc`."""
    if callable(progress):
        return progress, lambda: None
    if not progress:
        return (lambda done, total: None), lambda: None

    bar = tqdm(total=total, desc=desc, unit="item", file=sys.stderr, leave=False)

    def update(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return update, bar.close


# The longest silence of a long set-up step (scripts/studio.sh promises a line every 20 s); a
# little under scripts/ticker.sh's 15 s, so the shell's ticker around a step that ticks stays quiet.
TICK_S = 12.0


def say_on_stderr(line: str) -> None:
    print(f"calm: {line}", file=sys.stderr, flush=True)


class Ticker:
    """Says what a long set-up is doing and, while it stays silent, that it still is.

        with Ticker() as ticker:
            ticker.stage("converting the embedded model")   # printed at once
            ...                                             # "still converting ... (12 s)" every 12 s
            Scorer.of(lm, progress=ticker.progress("scoring Learn's quiz")).score(...)

    `stage` prints its line at once; a thread prints "still <stage> (N s)" whenever
    `every` seconds pass without a line (N counts from the stage's start). `step` is a
    conversion's step function (`gguf_convert.StepFn`) and `progress(what)` a scoring
    loop's callback: both make their words the stage, the callback without a line of
    its own (the ticks then carry its count), so a long step is never silent and a fast
    loop never floods the terminal. Why: a first `bash scripts/studio.sh` converts the
    model and scores a quiz for minutes, which must not look like a hang."""

    def __init__(self, every: float | None = None, say: Callable[[str], None] = say_on_stderr) -> None:
        self.every, self.say = TICK_S if every is None else every, say
        self._what, self._began, self._said = "starting", time.monotonic(), time.monotonic()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="calm-ticker", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def stage(self, what: str) -> None:
        """Print `what` now and make it what the ticks say."""
        with self._lock:
            self._what, self._began, self._said = what, time.monotonic(), time.monotonic()
            self.say(what)

    def step(self, step: int, steps: int, what: str) -> None:
        """A conversion's step (`gguf_convert.StepFn`), as `print_step` words it."""
        self.stage(f"converting [{step}/{steps}] {what}")

    def progress(self, what: str) -> ProgressFn:
        """A `(done, total)` callback that makes "<what> (<done>/<total> done)" the stage's words, silently."""

        def update(done: int, total: int) -> None:
            with self._lock:
                self._what = f"{what} ({done}/{total} done)"

        return update

    def _tick(self) -> None:
        while True:
            with self._lock:
                wait = self._said + self.every - time.monotonic()
            if self._done.wait(max(wait, 0.0)):
                return
            with self._lock:
                now = time.monotonic()
                if now - self._said >= self.every:
                    self.say(f"still {self._what} ({now - self._began:.0f} s)")
                    self._said = now
