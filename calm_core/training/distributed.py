"""Data-parallel training without a wrapper: every rank holds the whole model, takes
its shard of the global batch, and averages gradients (and the losses that decide a
step) across ranks before stepping, so all ranks take the same step.

    torchrun --nproc_per_node 2 -m calm_core.cli train --preset quick ...   # CPU: gloo, GPU: nccl

Why not DistributedDataParallel: the BOME step takes several gradients per step
(grad L at theta, grad_alpha L at theta~, grad F) with autograd.grad, outside a single
backward; averaging each explicitly is simpler than bending DDP's hooks to it, and it
makes lambda and q the same on every rank. Single process: every function is a no-op.
Rank 0 alone writes the run directory (checkpoints, metrics, status, evaluation).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch


def is_distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and world_size() > 1


def world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def is_main() -> bool:
    return rank() == 0


def init_from_env(device: torch.device) -> bool:
    """Join the process group that torchrun / accelerate describe in the environment
    (WORLD_SIZE > 1); True when this process is one of several."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not torch.distributed.is_available():
        return False
    if device.type == "cuda":  # one GPU per rank; "auto" devices then resolve to it
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return is_distributed()


def mean_(tensors: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
    """Average each tensor across ranks, in place (one flattened all-reduce); returns them."""
    if not is_distributed() or not tensors:
        return tensors
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
    torch.distributed.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t).to(t.dtype))
        offset += n
    return tensors


def mean_value(value: float) -> float:
    """The mean of a Python float across ranks (losses that decide lambda and q)."""
    if not is_distributed():
        return value
    return float(mean_([torch.tensor([value], dtype=torch.float64)])[0])


def shard(items: Sequence, n_ranks: int | None = None, this_rank: int | None = None) -> list:
    """This rank's share of a global batch: items r, r + W, r + 2W, ... The global batch
    size must be a multiple of the world size, so every rank's mean loss weighs the same."""
    n_ranks = world_size() if n_ranks is None else n_ranks
    this_rank = rank() if this_rank is None else this_rank
    if len(items) % n_ranks:
        raise ValueError(f"Expected a batch size divisible by the {n_ranks} processes, but got {len(items)}")
    return list(items[this_rank::n_ranks])


def barrier() -> None:
    if is_distributed():
        torch.distributed.barrier()


def broadcast_text(text: str | None) -> str:
    """Rank 0's string on every rank (the run directory rank 0 created)."""
    if not is_distributed():
        return text or ""
    box = [text]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def mean_log(log: dict[str, float]) -> dict[str, float]:
    """A step's logged numbers averaged over ranks (one all-reduce), so rank 0 logs the
    global batch's losses, not its shard's. Keys must be the same on every rank."""
    if not is_distributed():
        return log
    keys = sorted(log)
    values = mean_([torch.tensor([float(log[k]) for k in keys], dtype=torch.float64)])[0]
    return dict(zip(keys, values.tolist()))
