"""Data-parallel training without a wrapper: every rank holds the whole model, takes
its shard of the global batch, and averages gradients (and the losses that decide a
step) across ranks before stepping, so all ranks take the same step.

    torchrun --nproc_per_node 2 -m calm_core.cli train --preset quick ...   # CPU: gloo, GPU: nccl

Why not DistributedDataParallel: the BOME step takes several gradients per step
(grad L at theta, grad_alpha L at theta~, grad F) with autograd.grad, outside a single
backward; averaging each explicitly is simpler than bending DDP's hooks to it, and it
makes lambda and q the same on every rank. Single process: every function is a no-op.
Rank 0 alone writes the run directory (checkpoints, metrics, status, evaluation).

Sharded (FSDP2, `torch.distributed.fsdp.fully_shard`): `shard_frozen` spreads the frozen
base model's decoder layers over the ranks, the memory that grows with the model, and
leaves the trainable parameters (LoRA's theta, the head's alpha) whole on every rank, out
of FSDP's hands. Why not shard them too: FSDP runs the forward on gathered copies of the
parameters it manages, so autograd.grad with respect to the parameters themselves (the
BOME step's every gradient) would find them unused and return zeros; left out, they stay
ordinary tensors, averaged like data-parallel gradients, and the BOME step evaluates L at
theta~ on them without writing to them (calm_core.training.substitution.at). Under FSDP
every rank must run the same forward passes in the same order (each gathers a layer's
shards from all ranks): see `shard_frozen`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

T = TypeVar("T")


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
        t.copy_(flat[offset : offset + n].view_as(t).to(t.dtype))
        offset += n
    return tensors


def mean_value(value: float) -> float:
    """The mean of a Python float across ranks (losses that decide lambda and q)."""
    if not is_distributed():
        return value
    return float(mean_([torch.tensor([value], dtype=torch.float64)])[0])


def shard(items: Sequence[T], n_ranks: int | None = None, this_rank: int | None = None) -> list[T]:
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
    return box[0] or ""


def mean_log(log: dict[str, float]) -> dict[str, float]:
    """A step's logged numbers averaged over ranks (one all-reduce), so rank 0 logs the
    global batch's losses, not its shard's. Keys must be the same on every rank."""
    if not is_distributed():
        return log
    keys = sorted(log)
    values = mean_([torch.tensor([float(log[k]) for k in keys], dtype=torch.float64)])[0]
    return dict(zip(keys, values.tolist(), strict=True))


TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class FsdpSettings:
    """FSDP as `accelerate launch --config_file configs/accelerate/fsdp.yaml` describes it in
    the environment (ACCELERATE_USE_FSDP, FSDP_VERSION, FSDP_RESHARD_AFTER_FORWARD,
    FSDP_TRANSFORMER_CLS_TO_WRAP); under torchrun, set ACCELERATE_USE_FSDP=true yourself."""

    enabled: bool = False
    version: int = 2  # FSDP2 (fully_shard); FSDP1's flat parameters are refused (see shard_frozen)
    reshard_after_forward: bool = True  # free a layer's gathered weights after its forward (FULL_SHARD)
    layer_classes: tuple[str, ...] = ()  # module classes sharded one by one; () = the model's _no_split_modules

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FsdpSettings:
        env = os.environ if env is None else env
        classes = tuple(c.strip() for c in env.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(",") if c.strip())
        return cls(
            enabled=env.get("ACCELERATE_USE_FSDP", "").lower() in TRUE,
            version=int(env.get("FSDP_VERSION", "2")),
            reshard_after_forward=env.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() in TRUE,
            layer_classes=classes,
        )


def _layer_classes(model: torch.nn.Module, settings: FsdpSettings) -> tuple[str, ...]:
    """The decoder-layer class names to shard: the settings', else the (PEFT-wrapped)
    transformers model's own `_no_split_modules` (what accelerate's auto wrap uses)."""
    if settings.layer_classes:
        return settings.layer_classes
    get_base = getattr(model, "get_base_model", None)  # PEFT's wrapper
    base = get_base() if get_base is not None else model
    return tuple(getattr(base, "_no_split_modules", None) or ())


def _runner_of(model: torch.nn.Module, layers: Sequence[torch.nn.Module]) -> torch.nn.Module:
    """The module whose forward runs every layer (Llama's `model.model`): the nearest common
    parent of the layers' containers."""
    name_of = {id(m): n for n, m in model.named_modules()}
    parents = [name_of[id(layer)].split(".")[:-1] for layer in layers]
    common = os.path.commonprefix(parents)
    while common and isinstance(model.get_submodule(".".join(common)), (torch.nn.ModuleList, torch.nn.ModuleDict)):
        common = common[:-1]
    return model.get_submodule(".".join(common))


def shard_frozen(
    model: torch.nn.Module, trainable: Sequence[torch.nn.Parameter], settings: FsdpSettings
) -> dict[str, Any]:
    """Shard each decoder layer of `model` over the ranks with FSDP2 (in place), keeping the
    `trainable` parameters whole on every rank; returns a record for config.json.

    Only the decoder layers are sharded: the embeddings, final norm and LM head stay whole,
    because scoring calls the inner model and the LM head separately and the two share one
    tensor when the embeddings are tied. The module that runs the layers (Llama's
    `model.model`) becomes FSDP's root with no parameters of its own to shard: without a
    root, each layer would be one, and FSDP keeps a root's weights gathered after its
    forward (so no memory would be saved). Every parameter a sharded layer holds is frozen
    or in `trainable`: a trainable one FSDP managed would get no gradient.

    The caller keeps the ranks in lockstep: every rank runs the same number of forward
    passes through the layers, in the same order (FSDP gathers each layer's shards from all
    ranks at each forward). Scoring whose number of passes depends on the batch (cloze
    runs of similar length, cache hits of the frozen-prefix runner) breaks that and hangs;
    one rank alone may run forwards only inside `gathered`.
    """
    if not settings.enabled:
        return {"used": False, "reason": "not asked for (ACCELERATE_USE_FSDP)"}
    if settings.version != 2:
        raise ValueError(
            f"Expected FSDP_VERSION 2 (fully_shard), but got {settings.version}: FSDP1 runs the forward "
            "on flat parameters, which the BOME step's gradients cannot reach"
        )
    if not is_distributed():
        return {"used": False, "reason": "one process"}
    from torch.distributed.fsdp import fully_shard

    classes = _layer_classes(model, settings)
    layers = [m for m in model.modules() if type(m).__name__ in classes]
    if not layers:
        raise ValueError(
            f"Expected modules of the classes {list(classes)} to shard, but the model has none: "
            "set FSDP_TRANSFORMER_CLS_TO_WRAP (fsdp_transformer_layer_cls_to_wrap) to its decoder layer"
        )
    names = sorted({type(m).__name__ for m in layers})  # fully_shard renames the classes (FSDP...)
    runner = _runner_of(model, layers)
    keep = {id(p) for p in trainable}
    in_layers: set[int] = set()
    shards = []  # the layers again, as fully_shard returns them: FSDP modules
    total = sum(p.numel() for p in model.parameters())
    sharded = sum(p.numel() for layer in layers for p in layer.parameters() if id(p) not in keep)
    for layer in layers:
        stray = [n for n, p in layer.named_parameters() if p.requires_grad and id(p) not in keep]
        if stray:
            raise ValueError(
                f"Expected every trainable parameter of a sharded layer among `trainable`, but {stray[:3]} "
                "are not: FSDP would run them as gathered copies that get no gradient"
            )
        in_layers.update(id(p) for p in layer.parameters())
        shard = fully_shard(
            layer,
            reshard_after_forward=settings.reshard_after_forward,
            ignored_params={p for p in layer.parameters() if id(p) in keep},
        )
        shards.append(shard)
    for i, shard in enumerate(shards):  # see `gathered`
        shard.set_modules_to_backward_prefetch([shards[i - 1] if i else shard])
    fully_shard(runner, ignored_params={p for p in runner.parameters() if id(p) not in in_layers or id(p) in keep})
    return {
        "used": True,
        "version": 2,
        "layer_class": names,
        "layers": len(layers),
        "sharded_params": sharded,
        "whole_params": total - sharded,
        "reshard_after_forward": settings.reshard_after_forward,
        "world_size": world_size(),
    }


@contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Every FSDP-sharded layer of `model` whole on this rank for the block, so that one rank
    alone may run forward passes (rank 0's evaluation); sharded again after. Every rank
    enters it (the gather is collective). Without FSDP, nothing happens.

    FSDP's default backward prefetch follows the order of the forwards a rank has run
    since its last backward, so one rank's extra forwards here would make it gather
    another layer than the others at the next backward, and hang: `shard_frozen` fixes
    each layer's prefetch by position (the layer below it) instead."""
    from torch.distributed.fsdp import FSDPModule

    sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in sharded:
        m.unshard()
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        after_forward = FsdpSettings.from_env().reshard_after_forward
        for m in sharded:
            m.reshard()
            m.set_reshard_after_forward(after_forward, recurse=False)
