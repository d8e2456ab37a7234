"""Progress reporting for long loops over items (scoring, generation, prefilling caches).

A caller passes `progress`: True for a tqdm bar on stderr, False for none, or its own
`(done, total)` callback (the studio's progress bar in app/state.py, a test's counter).
`progress_callback` turns any of the three into one `update(done, total)` and a `close()`.
"""

from __future__ import annotations

import sys
from typing import Callable

ProgressFn = Callable[[int, int], None]  # (done, total) -> None


def progress_callback(progress: bool | ProgressFn, total: int, desc: str) -> tuple[ProgressFn, Callable[[], None]]:
    """(update, close) for `progress`: the caller's own callback, a no-op, or a tqdm bar named `desc`."""
    if callable(progress):
        return progress, lambda: None
    if not progress:
        return (lambda done, total: None), lambda: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, unit="item", file=sys.stderr, leave=False)

    def update(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return update, bar.close
