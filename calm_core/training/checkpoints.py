"""Checkpoints of a training run: what is saved, read back whole, and resumed from.

A checkpoint holds the adapter (PEFT), the head, the optimizer, a persistent BOME
theta~ and the torch RNG of one step, written through `RunDir.writing_checkpoint` (a
kill leaves the previous checkpoint, never half of this one). Resuming reads one whole
before anything is changed, skips a damaged one for the one before (said, and recorded
in status.json), and continues the same curves: batches depend only on (seed, step).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from calm_core.calibration.head import CalibrationHead
from calm_core.faults import fault_point
from calm_core.runs.rundir import RunDir
from calm_core.training import distributed
from calm_core.training.context import StepContext

OPTIMIZER_FILE = "optimizer.pt"

RNG_FILE = "rng.pt"

INNER_FILE = "inner_iterate.safetensors"  # a persistent BOME theta~ (bilevel.BilevelState), when there is one


def save_checkpoint(ctx: StepContext, run: RunDir, step: int) -> Path:
    """Adapter, head, optimizer, persistent theta~ and RNG of `step`, written as a whole
    (`RunDir.writing_checkpoint`: a kill leaves the previous checkpoint, never half of this one)."""
    with run.writing_checkpoint(step) as directory:
        ctx.model.save_pretrained(directory)  # PEFT: adapter weights + adapter_config.json
        fault_point("checkpoint_files")
        if ctx.head is not None:
            ctx.head.save(directory)
        torch.save(ctx.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        inner = ctx.state.get("bilevel")
        if inner is not None and inner.tilde is not None:
            from safetensors.torch import save_file

            save_file(inner.tensors(), str(directory / INNER_FILE))
        # Batches depend only on (seed, step); torch's RNG drives dropout, so it is all we keep.
        torch.save({"torch": torch.get_rng_state()}, directory / RNG_FILE)
    fault_point("checkpoint_done")
    run.prune_checkpoints(keep=2)
    return run.checkpoint_dir(step)


@dataclass(frozen=True)
class Checkpoint:
    """Everything a checkpoint holds, read into memory: a damaged file fails here, before
    the trainer or the run directory is touched (`RunDir.prepare_resume`)."""

    adapter: dict[str, torch.Tensor]
    head: CalibrationHead | None
    optimizer: dict[str, Any]
    inner: dict[str, torch.Tensor] | None
    rng: torch.Tensor


def read_checkpoint(directory: Path, with_head: bool) -> Checkpoint:
    """Read our own checkpoint (safetensors, weights_only torch loads); raises with the
    file's name when one is missing or unreadable."""
    from safetensors.torch import load_file

    def read(name: str, load: Callable[[Path], Any]) -> Any:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{name} is missing")
        try:
            return load(path)
        except Exception as error:  # noqa: BLE001 - safetensors, pickle and zip errors alike
            raise ValueError(f"{name} is unreadable ({str(error).splitlines()[0][:120] if str(error) else type(error).__name__})") from error

    from calm_core.calibration.head import HEAD_FILENAME

    rng = read(RNG_FILE, lambda p: torch.load(p, weights_only=True))
    if not isinstance(rng, dict) or not isinstance(rng.get("torch"), torch.Tensor):
        raise ValueError(f"{RNG_FILE} does not hold a torch RNG state")
    optimizer = read(OPTIMIZER_FILE, lambda p: torch.load(p, weights_only=True))
    if not isinstance(optimizer, dict) or "state" not in optimizer:
        raise ValueError(f"{OPTIMIZER_FILE} does not hold an optimizer state")
    return Checkpoint(
        adapter=read("adapter_model.safetensors", lambda p: load_file(str(p))),
        head=read(HEAD_FILENAME, CalibrationHead.load) if with_head else None,
        optimizer=optimizer,
        inner=read(INNER_FILE, lambda p: load_file(str(p))) if (directory / INNER_FILE).exists() else None,
        rng=rng["torch"])


def apply_checkpoint(ctx: StepContext, checkpoint: Checkpoint) -> None:
    """Put a read checkpoint's state into the model, head, optimizer and RNG."""
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(ctx.model, checkpoint.adapter)
    if ctx.head is not None and checkpoint.head is not None:
        ctx.head.load_state_dict(checkpoint.head.state_dict())
    ctx.optimizer.load_state_dict(checkpoint.optimizer)
    if checkpoint.inner is not None:
        from calm_core.training.bilevel import BilevelState

        ctx.state.setdefault("bilevel", BilevelState()).load(checkpoint.inner)
    torch.set_rng_state(checkpoint.rng)


def resume_point(ctx: StepContext, run: RunDir, writer: RunDir | None) -> tuple[int, float]:
    """(step to continue after, elapsed seconds before it) for a (re)starting run, its
    checkpoint applied. Rank 0 chooses the newest checkpoint it can read whole (a damaged
    one is skipped and named in status.json and stdout; `fresh_start` in the status, set
    by `calm resume --fresh`, ignores every checkpoint); the other ranks follow its choice."""
    def read(directory: Path) -> Checkpoint:
        return read_checkpoint(directory, with_head=ctx.head is not None)

    point = None
    if writer is not None:
        fresh = bool(run.status.get("fresh_start"))
        point = run.prepare_resume(read, fresh=fresh)
        if point.skipped or point.path is not None or fresh:
            note = f"resuming after step {point.step} from {point.path.name if point.path else 'the start'}"
            if point.skipped:
                note += " (skipped as damaged: " + "; ".join(point.skipped) + ")"
            print(f"calm: {note}", flush=True)
        run.update_status(resumed_from=point.path.name if point.path else None,
                          skipped_checkpoints=list(point.skipped), fresh_start=False)
    step = int(distributed.broadcast_text(str(point.step) if point is not None else None) or 0)
    if step == 0:
        return 0, 0.0
    checkpoint = point.data if point is not None else read(run.checkpoint_dir(step))
    apply_checkpoint(ctx, checkpoint)
    previous = run.read_metrics()
    return step, previous[-1]["elapsed"] if previous else 0.0


@dataclass
class Snapshot:
    """The adapter and head of one step, in memory: the calibrated stop's selected step
    (training/selection.py). Light: LoRA weights and the head, no optimizer state."""

    step: int
    adapter: dict[str, torch.Tensor]
    head: dict[str, torch.Tensor] | None


def take_snapshot(ctx: StepContext, step: int) -> Snapshot:
    """Copies of the adapter's and head's tensors as they are now."""
    from peft import get_peft_model_state_dict

    adapter = {k: v.detach().clone() for k, v in get_peft_model_state_dict(ctx.model).items()}
    head = {k: v.detach().clone() for k, v in ctx.head.state_dict().items()} if ctx.head is not None else None
    return Snapshot(step, adapter, head)


def restore_snapshot(ctx: StepContext, snapshot: Snapshot) -> None:
    """Put a snapshot's adapter and head back into the model (the optimizer is left alone:
    this is for evaluation and export, not for training on)."""
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(ctx.model, snapshot.adapter)
    if ctx.head is not None and snapshot.head is not None:
        ctx.head.load_state_dict(snapshot.head)


def save_selected(ctx: StepContext, run: RunDir, step: int) -> None:
    """`selected/` in the run directory: the adapter (PEFT's files, so an export loads it
    as any checkpoint) and head as they are now, at the newly selected `step`; replaced whole."""
    with run.writing_selected(step) as directory:
        ctx.model.save_pretrained(directory)
        if ctx.head is not None:
            ctx.head.save(directory)


def read_selected(ctx: StepContext, run: RunDir) -> Snapshot | None:
    """The snapshot `selected/` holds (None when there is none or it does not read whole):
    a resumed run continues its selection from it."""
    from safetensors.torch import load_file

    from calm_core.calibration.head import HEAD_FILENAME

    step = run.selected_step()
    if step is None:
        return None
    directory = run.selected_dir
    try:
        adapter = load_file(str(directory / "adapter_model.safetensors"))
        head = CalibrationHead.load(directory / HEAD_FILENAME).state_dict() if ctx.head is not None else None
    except Exception:  # noqa: BLE001 - a damaged snapshot: the selection starts again from what remains
        return None
    return Snapshot(step, adapter, head)
