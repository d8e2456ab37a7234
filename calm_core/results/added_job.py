"""A finished run evaluated on more data as a queued job: Compare's "Evaluate on more data"
in a shared studio.

    python -m calm_core.results.added_job --run-dir runs/<job id>     # what the queue starts

Why a job: in the server's process the evaluation took 131 s of CPU and 1.2 GB per 100
items, for anyone who clicked, on anyone's run, and five at once took the server from 758
to 4,036 MB. As a job it waits for a slot like a training run, is counted by the same
quotas (a job directory under the runs root, `launched_by` / `launched_from` in its
config.json), carries its own cost estimate (`evaluation_cost`) and can be cancelled by
its owner. Its config.json keeps the run it measures under EVALUATES; the rows go into
that run (`added.evaluate_run`), the job's own directory keeps the status and the log.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from calm_core.data.counts import item_count
from calm_core.runs.lifecycle import RunState
from calm_core.runs.queue import JobQueue
from calm_core.runs.rundir import RunDir

EVALUATES = "evaluates"  # config.json of an evaluation job: {"run", "datasets", "limit", "cost"}
HEARTBEAT_S = 15.0  # well inside state.STALE_AFTER_S


def worker_command() -> list[str]:
    """The job's command; `{run_dir}` is filled in when it starts (jobs.bind_run_dir)."""
    return [sys.executable, "-m", "calm_core.results.added_job", "--run-dir", "{run_dir}"]


def evaluation_cost(run: RunDir, datasets: Sequence[str], limit: int | None) -> dict[str, Any]:
    """What the evaluation will cost, before it is queued: its items (None when a set's size
    is known only once loaded) and seconds at the default rates of the run's model size
    (startup, loading, and the final evaluation's per-item rate)."""
    from calm_core.estimate.predict import model_shape
    from calm_core.estimate.rates import default_rates, task_defaults
    from calm_core.training.config import TrainConfig

    counts = [item_count(name, limit) for name in datasets]
    items = None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
    cfg = TrainConfig.from_dict(run.config.train)
    shape = model_shape(cfg.model)
    rates = task_defaults(cfg, default_rates(shape[0] if shape else None))
    seconds = None if items is None else rates.startup_s + rates.load_s + rates.final_per_item * items
    return {"items": items, "seconds": seconds}


def evaluation_record(run: RunDir, datasets: Sequence[str], limit: int | None, cost: dict[str, Any]) -> dict[str, Any]:
    """config.json of the job (without its launcher's tags): what it evaluates, labelled by
    the run's method. It trains nothing (`train` empty), so a finished job is not expected to
    write results.json of its own (RunDir.read_files)."""
    return {
        "train": {},
        "name": f"evaluate {run.run_id}",
        "method": run.config.train_method,
        EVALUATES: {"run": run.run_id, "datasets": list(datasets), "limit": limit, "cost": cost},
    }


def _beat(job: RunDir, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        job.heartbeat(0)


def run_job(job: RunDir) -> int:
    """Evaluate the run the job names, heartbeating meanwhile; the job ends `finished` or
    `failed` with the reason in one line, and starts the next queued run. Returns the exit code."""
    from calm_core.results.added import evaluate_run

    spec = job.config.extra[EVALUATES]
    stop = threading.Event()
    threading.Thread(target=_beat, args=(job, stop), daemon=True).start()
    try:
        job.heartbeat(0)
        rows = evaluate_run(RunDir(job.path.parent / spec["run"]), spec["datasets"], spec["limit"])
    except Exception as error:  # noqa: BLE001 - the job's status says why, in one line
        stop.set()
        job.write_status(RunState.FAILED, error=f"{type(error).__name__}: {error}"[:500])
        return 1
    else:
        stop.set()
        job.write_status(RunState.FINISHED, step=len(rows))  # the rows it added, where a training run counts steps
        return 0
    finally:
        JobQueue.of(job).schedule()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--run-dir", type=Path, required=True, help="the evaluation job's own directory")
    return run_job(RunDir(parser.parse_args(argv).run_dir))


if __name__ == "__main__":
    raise SystemExit(main())
