"""Which modules LoRA adapts, found in the model itself rather than in a list of Llama names.

    stack = layer_stack(model)                  # LayerStack("transformer.h", 12) for GPT-2
    names = resolve_targets(model, ("attention",))  # ["c_attn", "attn.c_proj"] for GPT-2

A family names its projections its own way: Llama's `q_proj`, GPT-2's `c_attn` (a
transformers Conv1D, not an nn.Linear), GPT-NeoX's `query_key_value`, Phi-3's fused
`qkv_proj`, OPT's `out_proj` and `fc1`. A fixed list of Llama names fails on all of them
with peft's "Target modules ... not found". So the candidates are the model's own linear
(and Conv1D) layers inside its decoder blocks, the LM head and embeddings never among
them, and a request names either a group of them or the modules themselves:

- `attention`: the projections inside each block's attention module (the default, what
  the project adapted on Llama before: q, k, v, o);
- `mlp`: the rest of each block's linear layers (the feed-forward ones);
- `all`: both (the paper's q, k, v, o, gate, up, down on Llama);
- any other name: a module name or the end of a dotted path inside a block (`c_proj`,
  `attn.c_proj`); one that matches no candidate is refused, with the model's candidates
  in the message, before peft sees it.

peft's own table (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`) is no substitute:
it lists only the query and value projections, and has no entry for Phi-3 or OLMo-2
(peft 0.17); tests/test_families.py checks that discovery covers its entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from torch import nn

GROUPS = ("attention", "mlp", "all")
DEFAULT_TARGETS = ("attention",)
_ATTENTION_WORDS = ("attn", "attention")


@dataclass(frozen=True)
class LayerStack:
    """The decoder blocks: where they sit (`model.layers`, `transformer.h`) and how many."""

    path: str
    count: int

    @property
    def pattern(self) -> str:
        """The attribute holding the blocks, as peft's `layers_pattern` names it."""
        return self.path.rsplit(".", 1)[-1]


def layer_stack(model: nn.Module) -> LayerStack | None:
    """The ModuleList of identical blocks holding the most parameters: the decoder layers,
    wherever the family keeps them (Llama's `model.layers`, GPT-2's `transformer.h`,
    OPT's `model.decoder.layers`). None for a model without one."""
    best: tuple[int, str, int] | None = None
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if len({type(block) for block in module}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if best is None or size > best[0]:
            best = (size, name, len(module))
    return None if best is None else LayerStack(best[1], best[2])


def _first_block(model: nn.Module, stack: LayerStack) -> nn.Module:
    """The first block of `stack`: a ModuleList, the only kind `layer_stack` finds."""
    return cast(nn.ModuleList, model.get_submodule(stack.path))[0]


def _is_linear(module: nn.Module) -> bool:
    """nn.Linear, or transformers' Conv1D (GPT-2's linear layers, weight transposed)."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def block_linears(model: nn.Module) -> dict[str, str]:
    """{path inside a block: group} of every linear layer in the first decoder block, e.g.
    {"self_attn.q_proj": "attention", "mlp.down_proj": "mlp"}; the blocks are alike."""
    stack = layer_stack(model)
    if stack is None:
        return {}
    first = _first_block(model, stack)
    found: dict[str, str] = {}
    for name, module in first.named_modules():
        if name and _is_linear(module):
            parents = name.split(".")[:-1]
            attention = any(word in part.lower() for part in parents for word in _ATTENTION_WORDS)
            found[name] = "attention" if attention else "mlp"
    return found


def _matches(path: str, name: str) -> bool:
    """peft's rule: a target matches a module whose dotted path is it or ends with `.name`."""
    return path == name or path.endswith("." + name)


def _short_names(chosen: list[str], every: Sequence[str]) -> list[str]:
    """Each chosen path by its last part where that part names no module left out (Llama's
    `q_proj`), else by its whole path inside the block (GPT-2's `attn.c_proj`, whose last
    part is also the MLP's `mlp.c_proj`)."""
    out = []
    for path in chosen:
        last = path.rsplit(".", 1)[-1]
        clash = any(_matches(other, last) and other not in chosen for other in every)
        name = path if clash else last
        if name not in out:
            out.append(name)
    return out


def resolve_targets(model: nn.Module, requested: Sequence[str]) -> list[str]:
    """peft `target_modules` for `requested` (groups and names, see the module docstring)
    on this model; raises ValueError, in one line naming the candidates, for a name that
    matches none of the model's block linears or a request that selects nothing."""
    linears = block_linears(model)
    family = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    if not linears:
        raise ValueError(f"Expected decoder blocks with linear layers in the model ({family}), but found none")
    chosen: list[str] = []
    for name in requested:
        if name in GROUPS:
            picked = [p for p, group in linears.items() if name in ("all", group)]
        else:
            picked = [p for p in linears if _matches(p, name)]
            if not picked:
                raise ValueError(
                    f"Expected LoRA target modules among {sorted(linears)} or a group {list(GROUPS)} "
                    f"for this model ({family}), but got {name!r}"
                )
        chosen += [p for p in picked if p not in chosen]
    if not chosen:
        raise ValueError(f"Expected {list(requested)} to select LoRA target modules in this model ({family}), but none")
    return _short_names(chosen, list(linears))


def uses_conv1d(model: nn.Module, targets: Sequence[str]) -> bool:
    """Whether the targets are transformers Conv1D layers (weight stored (in, out)): peft
    must then be told `fan_in_fan_out`, or it warns and sets it itself."""
    stack = layer_stack(model)
    if stack is None:
        return False
    first = _first_block(model, stack)
    return any(
        type(module).__name__ == "Conv1D" and any(_matches(path, t) for t in targets)
        for path, module in first.named_modules()
    )
