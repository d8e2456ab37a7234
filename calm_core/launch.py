"""Starting a training run: the one path shared by `calm train` and the studio's Train page.

    run, started_now = launch_training(TrainConfig.preset("quick"))   # queued; started_now: a slot was free

A launch records the time estimate its caller showed (`estimate=`, made by
`estimate.predict.launch_estimate` as the Train page and `calm train` make it) and makes
none itself: a run launched without one records no `estimate` in config.json, and later
estimates have no error of its to learn from.

A run directory is created with the resolved config and its provenance; a detached
run is queued as a background job (`calm train --run-dir DIR` in a new session, see
calm_core.runs.queue), so it outlives the terminal or the browser tab that started it.

Given the studio's `Access`, a launch and a resume also apply a shared studio's rules
(access.launch_refusal, access.resume_refusal: the quotas per session, per signed-in
browser and per server, the step budget, the owner rule) and raise `access.rules.Refused` with
the page's one line: the rules hold even for a request that did not come through the
page's disabled button.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from calm_core.access.rules import (
    Access,
    ActiveRuns,
    Refused,
    budget_refusal,
    eval_items_refusal,
    launch_refusal,
    operator_credentials,
    resume_refusal,
    write_refusal,
)
from calm_core.io import file_lock
from calm_core.provenance import environment_record
from calm_core.results.added_job import evaluation_cost, evaluation_record, worker_command
from calm_core.runs import jobs, listing
from calm_core.runs.lifecycle import WAITING_OR_ACTIVE, RunState
from calm_core.runs.naming import runs_root
from calm_core.runs.queue import JobQueue, resume
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig

LAUNCH_LOCK = ".launch.lock"  # under the runs root: held while the quotas are counted and a run queued


class ShownEstimate(Protocol):
    """What a launch records of the time estimate its caller showed: estimate/arithmetic.py's
    `Estimate` (the Train page's, or the CLI's: both make it with `estimate.predict`)."""

    def to_record(self) -> dict[str, object]: ...


def run_config_record(
    cfg: TrainConfig,
    launched_by: str | None = None,
    estimate: dict[str, Any] | None = None,
    launched_from: str | None = None,
) -> dict[str, Any]:
    """config.json of a run: the TrainConfig, the scoring rule and the environment, the
    opaque tag of the studio session that launched it (access.session_tag; None from the
    CLI), which a shared studio's quota and cancel rule read, and the time estimate made at
    its launch (the shown estimate's record), from which later estimates learn their error.
    `launched_from`: the signed-in browser's opaque tag (all its sessions share it), which
    the per-browser quota counts."""
    splits = split_provenance([cfg.train_data, cfg.heldout_data, *cfg.eval_data])
    record: dict[str, Any] = {
        "train": cfg.to_dict(),
        "name": cfg.name,
        "method": cfg.method,
        "seed": cfg.seed,
        "scoring": {"rule": cfg.scoring, "chat_template": cfg.chat_template},
        "splits": splits,
        "environment": environment_record(),
        "launched_by": launched_by,
        "launched_from": launched_from,
    }
    if estimate is not None:
        record["estimate"] = estimate
    return record


def split_provenance(datasets: list[str]) -> dict[str, dict[str, Any]]:
    """{split name: how it was made (source, seed, stratify, sizes, parts)} for every
    dataset that is a part of a saved split (`calm data split`): the run keeps the recipe
    even if the split is later deleted. The item ids stay in the split's own split.json."""
    from calm_core.data.split import split_record_of

    found: dict[str, dict[str, Any]] = {}
    for name in datasets:
        record = split_record_of(name)
        if record is not None:
            found[record.name] = {key: value for key, value in record.to_dict().items() if key != "ids"}
    return found


def create_run(
    cfg: TrainConfig,
    root: str | Path | None = None,
    launched_by: str | None = None,
    estimate: ShownEstimate | None = None,
    launched_from: str | None = None,
) -> RunDir:
    """A new run directory for `cfg`, recording the time estimate its caller showed (None:
    the caller showed none, and the run records none)."""
    record = run_config_record(cfg, launched_by, estimate.to_record() if estimate else None, launched_from)
    return RunDir.new(record, name_hint=cfg.name or cfg.method, root=root)


def launch_training(
    cfg: TrainConfig,
    root: str | Path | None = None,
    launched_by: str | None = None,
    access: Access | None = None,
    estimate: ShownEstimate | None = None,
    launched_from: str | None = None,
) -> tuple[RunDir, bool]:
    """Create the run and queue it as a background job; (run, started now?). When every
    job slot is busy the run waits as `queued` and starts when one frees up. With the
    studio's `access`, a launch past the session's quota or the step budget raises Refused
    before anything is created: counted under the launch lock, so two clicks at once cannot
    both pass (the page's own check only says why the button is off). `estimate`: the one
    the caller showed, recorded as it is (estimate.predict.launch_estimate makes it): no
    dataset is loaded to launch."""
    record = run_config_record(cfg, launched_by, estimate.to_record() if estimate else None, launched_from)
    credentials = access is None or operator_credentials(access, cfg.model)
    queue = JobQueue.at(root)
    with budget_held(root):
        if access is not None:
            refusal = launch_refusal(access, cfg.steps, active_runs(access, launched_by, launched_from, root))
            if refusal:
                raise Refused(refusal)
        run = RunDir.new(record, name_hint=cfg.name or cfg.method, root=root)  # queued: the next count sees it
    return run, queue.submit(run, jobs.worker_command(), credentials=credentials)


def launch_evaluation(
    run: RunDir,
    datasets: list[str],
    limit: int | None,
    access: Access,
    launched_by: str | None = None,
    launched_from: str | None = None,
) -> tuple[RunDir, bool]:
    """Queue `run` evaluated on more `datasets` as a job of its own (results.added_job);
    (the job, started now?). It writes into `run`, so only the run's owner (or the admin,
    or anyone in a local studio) may ask (access.write_refusal); its cost is estimated
    first and refused past the item budget; and it counts toward the same quotas as a
    training run, counted and queued under the same lock. Refused: one line."""
    from calm_core.results.added import check_finished

    refusal = write_refusal(access, launched_by, run.config.launched_by)
    if refusal:
        raise Refused(refusal)
    check_finished(run)
    cost = evaluation_cost(run, datasets, limit)
    refusal = eval_items_refusal(access, cost["items"])
    if refusal:
        raise Refused(refusal)
    tags = {"launched_by": launched_by, "launched_from": launched_from}  # the quotas count these
    record = {**evaluation_record(run, datasets, limit, cost), **tags}
    root = run.path.parent
    with budget_held(root):
        refusal = budget_refusal(access, active_runs(access, launched_by, launched_from, root))
        if refusal:
            raise Refused(refusal)
        job = RunDir.new(record, name_hint=f"eval-{run.config.name or 'run'}", root=root)
    model = run.config.train.model
    return job, JobQueue(root).submit(job, worker_command(), credentials=operator_credentials(access, model))


@contextmanager
def budget_held(root: str | Path | None = None) -> Iterator[None]:
    """Hold the runs root's launch lock (an flock: every thread and process of every
    studio on this workspace) while the quotas are counted and a run is queued. Without
    it, ten sessions clicking Launch at once each counted the runs before any of them had
    created one, and all ten passed a quota of 3. Re-entrant within a thread."""
    with file_lock(runs_root(root) / LAUNCH_LOCK):
        yield


def active_runs_of(launched_by: str, root: str | Path | None = None) -> int:
    """Queued or running runs a studio session launched (a shared studio's quota)."""
    return sum(1 for s in listing.list_runs(root) if s.launched_by == launched_by and s.state in WAITING_OR_ACTIVE)


def active_runs(access: Access, session: str | None, browser: str | None, root: str | Path | None = None) -> ActiveRuns:
    """The queued or running runs of this session, of this browser and of the server, from
    one listing, where the quotas apply (shared mode); a local studio counts nothing."""
    if not access.shared:
        return ActiveRuns()
    active = [s for s in listing.list_runs(root) if s.state in WAITING_OR_ACTIVE]
    return ActiveRuns(
        session=sum(1 for s in active if session and s.launched_by == session),
        browser=sum(1 for s in active if browser and s.launched_from == browser),
        server=len(active),
        frees=_soonest_free(active),
    )


def _soonest_free(active: list[Any]) -> str:
    """In words, the running run nearest its end (the first slot to free), from its steps."""
    running = [s for s in active if s.state != RunState.QUEUED and s.total_steps]
    if not running:
        return "The queue moves when the running run ends."
    nearest = max(running, key=lambda s: (s.step or 0) / s.total_steps)
    return f"The run nearest its end is at step {nearest.step or 0} of {nearest.total_steps}."


def resume_refusal_for(
    access: Access,
    session: str | None,
    launched_by: str | None,
    root: str | Path | None = None,
    browser: str | None = None,
) -> str | None:
    """Why `session` may not resume a run that the session `launched_by` launched (None: it may): the
    owner rule and the quotas (access.resume_refusal), counted in the runs root `root`."""
    return resume_refusal(access, session, launched_by, active_runs(access, session, browser, root))


def resume_run(run: RunDir, access: Access, session: str | None, browser: str | None = None) -> list[str]:
    """`runs.queue.resume` for a studio session: Refused (one line) when the session may not
    resume it, so a resume can never take a session past its quota."""
    with budget_held(run.path.parent):  # counted and requeued under the lock, as a launch is
        refusal = resume_refusal_for(access, session, run.config.launched_by, run.path.parent, browser)
        if refusal:
            raise Refused(refusal)
        return resume(run)
