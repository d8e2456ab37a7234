"""Checkpoints of a training run: what is saved, read back whole, and resumed from.

A checkpoint holds the adapter (PEFT), the head, the optimizer, a persistent BOME
theta~ and the torch RNG of one step, written through `RunDir.writing_checkpoint` (a
kill leaves the previous checkpoint, never half of this one). Resuming reads one whole
before anything is changed, skips a damaged one for the one before (said, and recorded
in status.json), and continues the same curves: batches depend only on (seed, step).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import safe_open

from calm_core.calibration.head import CalibrationHead
from calm_core.calibration.head_base import HEAD_FILENAME, Head
from calm_core.faults import fault_point
from calm_core.io import atomic_write_json
from calm_core.runs.rundir import RunDir
from calm_core.training import distributed
from calm_core.training.context import StepContext

log = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.pt"

RNG_FILE = "rng.pt"

INNER_FILE = "inner_iterate.safetensors"  # a persistent BOME theta~ (bilevel.BilevelState), when there is one

SELECTION_FILE = "selection.json"  # the calibrated stop's state at this step (training/selection.py)

SELECTED_FILE = "selected.safetensors"  # the adapter and head of the step selected so far


@dataclass
class Snapshot:
    """The trainable tensors of one step, in memory: the calibrated stop's selected step
    (training/selection.py). Light: theta (LoRA) and alpha (the head), in the order of
    ctx.theta and ctx.alpha, no optimizer state. Taken from the parameters themselves, not
    through state_dict(): under FSDP a state_dict() is a collective, and rank 0 evaluates
    (and selects) alone."""

    step: int
    theta: list[torch.Tensor]
    alpha: list[torch.Tensor]

    def tensors(self) -> dict[str, torch.Tensor]:
        """Flat, for one safetensors file: `theta.<i>` and `alpha.<i>`."""
        out = {f"theta.{i}": v.detach().cpu().contiguous() for i, v in enumerate(self.theta)}
        out.update({f"alpha.{i}": v.detach().cpu().contiguous() for i, v in enumerate(self.alpha)})
        return out

    @classmethod
    def from_tensors(cls, step: int, tensors: dict[str, torch.Tensor]) -> "Snapshot":
        def block(prefix: str) -> list[torch.Tensor]:
            return [tensors[f"{prefix}.{i}"] for i in range(sum(k.startswith(prefix + ".") for k in tensors))]

        return cls(step, block("theta"), block("alpha"))


@dataclass
class SelectionRecord:
    """What a checkpoint keeps of the calibrated stop: the selector's state and the
    selected step's snapshot, as they were at the checkpoint's step, so a resumed run
    replays the evaluations after it into the same selection."""

    state: dict[str, Any]
    snapshot: Snapshot | None


def save_checkpoint(ctx: StepContext, run: RunDir, step: int, selection: SelectionRecord | None = None) -> Path:
    """Adapter, head, optimizer, persistent theta~, RNG and the calibrated stop's state of
    `step`, written as a whole (`RunDir.writing_checkpoint`: a kill leaves the previous
    checkpoint, never half of this one)."""
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
        if selection is not None:
            _save_selection(directory, selection)
        torch.save(rng_state(), directory / RNG_FILE)
    fault_point("checkpoint_done")
    run.prune_checkpoints(keep=2)
    return run.checkpoint_dir(step)


@dataclass(frozen=True)
class Checkpoint:
    """Everything a checkpoint holds, read into memory: a damaged file fails here, before
    the trainer or the run directory is touched (`RunDir.prepare_resume`)."""

    adapter: dict[str, torch.Tensor]
    head: Head | None  # a CalibrationHead, or an AdaptiveHead (CalibrationHead.load gives the right class)
    optimizer: dict[str, Any]
    inner: dict[str, torch.Tensor] | None
    rng: torch.Tensor
    selection: SelectionRecord | None = None  # None: a checkpoint from before the calibrated stop
    cuda_rng: list[torch.Tensor] | None = None  # one state per CUDA device; None: saved without CUDA


def rng_state() -> dict[str, Any]:
    """What drives dropout: torch's CPU generator and, where CUDA is present, every
    device's generator (LoRA dropout on a GPU draws from the device's own). Batches depend
    only on (seed, step), so nothing else is kept."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng(checkpoint: Checkpoint) -> None:
    """Put the saved generators back; CUDA's only where it was saved and is present now
    (a run resumed on another kind of machine continues with a fresh device generator)."""
    torch.set_rng_state(checkpoint.rng)
    if checkpoint.cuda_rng is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(checkpoint.cuda_rng)


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
            raise ValueError(
                f"{name} is unreadable ({str(error).splitlines()[0][:120] if str(error) else type(error).__name__})"
            ) from error

    rng = read(RNG_FILE, lambda p: torch.load(p, weights_only=True))
    if not isinstance(rng, dict) or not isinstance(rng.get("torch"), torch.Tensor):
        raise ValueError(f"Expected a torch RNG state in {RNG_FILE}, but it holds something else")
    optimizer = read(OPTIMIZER_FILE, lambda p: torch.load(p, weights_only=True))
    if not isinstance(optimizer, dict) or "state" not in optimizer:
        raise ValueError(f"Expected an optimizer state in {OPTIMIZER_FILE}, but it holds something else")
    return Checkpoint(
        adapter=read("adapter_model.safetensors", lambda p: load_file(str(p))),
        head=read(HEAD_FILENAME, CalibrationHead.load) if with_head else None,
        optimizer=optimizer,
        inner=read(INNER_FILE, lambda p: load_file(str(p))) if (directory / INNER_FILE).exists() else None,
        rng=rng["torch"],
        selection=_read_selection(directory, read) if (directory / SELECTION_FILE).exists() else None,
        cuda_rng=_cuda_states(rng.get("cuda")),
    )


def _cuda_states(saved: Any) -> list[torch.Tensor] | None:
    if saved is None:
        return None
    if not isinstance(saved, list) or not all(isinstance(t, torch.Tensor) for t in saved):
        raise ValueError(f"Expected CUDA RNG states in {RNG_FILE}, but it holds something else")
    return saved


def _save_selection(directory: Path, selection: SelectionRecord) -> None:
    from safetensors.torch import save_file

    atomic_write_json(directory / SELECTION_FILE, selection.state)
    if selection.snapshot is not None:
        save_file(
            selection.snapshot.tensors(),
            str(directory / SELECTED_FILE),
            metadata={"step": str(selection.snapshot.step)},
        )


def _read_selection(directory: Path, read: Callable[[str, Callable[[Path], Any]], Any]) -> SelectionRecord:
    state = read(SELECTION_FILE, lambda p: json.loads(p.read_text(encoding="utf-8")))
    if not isinstance(state, dict):
        raise ValueError(f"Expected the selection's state in {SELECTION_FILE}, but it holds something else")
    snapshot = None
    if (directory / SELECTED_FILE).exists():

        def load(path: Path) -> Snapshot:
            with safe_open(str(path), framework="pt") as f:
                step = int((f.metadata() or {})["step"])
                return Snapshot.from_tensors(step, {k: f.get_tensor(k) for k in f.keys()})

        snapshot = read(SELECTED_FILE, load)
    return SelectionRecord(state, snapshot)


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
    if checkpoint.selection is not None:
        ctx.state["selection"] = checkpoint.selection  # taken by stopping.CalibratedStop.start
    restore_rng(checkpoint)


def resume_point(ctx: StepContext, run: RunDir, writer: RunDir | None) -> tuple[int, float]:
    """(step to continue after, elapsed seconds before it) for a (re)starting run, its
    checkpoint applied. Rank 0 chooses the newest checkpoint it can read whole (a damaged
    one is skipped and named in status.json and stdout; `fresh_start` in the status, set
    by `calm resume --fresh`, ignores every checkpoint); the other ranks follow its choice."""

    def read(directory: Path) -> Checkpoint:
        return read_checkpoint(directory, with_head=ctx.head is not None)

    point = None
    if writer is not None:
        fresh = run.status.fresh_start
        point = run.prepare_resume(read, fresh=fresh)
        if point.skipped or point.path is not None or fresh:
            note = f"resuming after step {point.step} from {point.path.name if point.path else 'the start'}"
            if point.skipped:
                note += " (skipped as damaged: " + "; ".join(point.skipped) + ")"
            log.warning("%s", note)
        run.update_status(
            resumed_from=point.path.name if point.path else None,
            skipped_checkpoints=list(point.skipped),
            fresh_start=False,
        )
    step = int(distributed.broadcast_text(str(point.step) if point is not None else None) or 0)
    if step == 0:
        return 0, 0.0
    checkpoint = point.data if point is not None else read(run.checkpoint_dir(step))
    apply_checkpoint(ctx, checkpoint)
    previous = run.read_metrics()
    return step, previous[-1]["elapsed"] if previous else 0.0


def take_snapshot(ctx: StepContext, step: int) -> Snapshot:
    """Copies of theta and alpha as they are now."""
    return Snapshot(step, [p.detach().clone() for p in ctx.theta], [p.detach().clone() for p in ctx.alpha])


def restore_snapshot(ctx: StepContext, snapshot: Snapshot) -> None:
    """Put a snapshot's theta and alpha back into the parameters (the optimizer is left
    alone: this is for evaluation and export, not for training on)."""
    if len(snapshot.theta) != len(ctx.theta) or len(snapshot.alpha) != len(ctx.alpha):
        raise ValueError(
            f"Expected a snapshot of {len(ctx.theta)} + {len(ctx.alpha)} tensors, but it holds "
            f"{len(snapshot.theta)} + {len(snapshot.alpha)}"
        )
    with torch.no_grad():
        for p, v in zip([*ctx.theta, *ctx.alpha], [*snapshot.theta, *snapshot.alpha], strict=True):
            p.copy_(v.to(p.device, p.dtype))


def save_selected(ctx: StepContext, run: RunDir, snapshot: Snapshot) -> None:
    """`selected/` in the run directory: the snapshot's adapter (PEFT's files, so an export
    loads it as any checkpoint) and head; replaced whole. PEFT writes the model's own
    tensors, so the snapshot goes in for the write and the current state comes back after."""
    current = take_snapshot(ctx, snapshot.step)
    restore_snapshot(ctx, snapshot)
    try:
        with run.writing_selected(snapshot.step) as directory:
            ctx.model.save_pretrained(directory)
            if ctx.head is not None:
                ctx.head.save(directory)
    finally:
        restore_snapshot(ctx, current)
