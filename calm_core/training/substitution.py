"""Run code as if parameters held other values, without writing to them: `at`.

The BOME step (training/bilevel.py) evaluates its loss closures at theta~ this way: a
torch-function mode hands every torch operation that receives one of the parameters the
stand-in value instead (the module's attribute, a tensor read inside the closure:
whatever reaches an operation). The parameters' `.data`, storage and requires_grad stay
as they were, so a wrapper that keeps parameters elsewhere (FSDP's sharded storage,
calm_core.training.distributed.shard_frozen) sees one consistent state, and an exception
inside the block leaves nothing to restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map


class _Substitute(TorchFunctionMode):
    """While active, every torch operation receives `values[i]` wherever it would receive
    the tensor `params[i]` (matched by identity; nested lists and dicts of arguments too)."""

    def __init__(self, params: Sequence[Tensor], values: Sequence[Tensor]) -> None:
        super().__init__()
        self._by_id = {id(p): v for p, v in zip(params, values, strict=True)}
        self._params = list(params)  # the ids stay theirs while the mode lives

    def _swap(self, x: object) -> object:
        return self._by_id.get(id(x), x) if isinstance(x, Tensor) else x

    def __torch_function__(
        self,
        func: Callable[..., object],
        types: Sequence[type],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        args, kwargs = tree_map(self._swap, (args, kwargs or {}))
        return func(*args, **kwargs)


@contextmanager
def at(params: Sequence[Tensor], values: Sequence[Tensor], track: bool = True) -> Iterator[list[Tensor]]:
    """Run the enclosed code as if `params` held `values`, without writing to `params`;
    yields the leaf tensors that stand for them (requiring grad if `track`): take
    gradients at `values` with respect to these."""
    if [tuple(v.shape) for v in values] != [tuple(p.shape) for p in params]:
        raise ValueError("Expected one value of each parameter's shape, but the shapes differ")
    leaves = [v.detach().requires_grad_(track) for v in values]
    with _Substitute(params, leaves):
        yield leaves
