"""Frozen-prefix caching: run the bottom decoder layers once per sequence, ever.

When LoRA adapts only the top k decoder layers (`lora.layers = k`), the hidden states
entering layer N - k depend on the token sequence alone: not on theta, not on alpha,
not on the step. `FrozenPrefixModel` keeps them per sequence (keyed by its token ids)
and every later forward, backward and BOME inner step runs only the top k layers, the
final norm and the LM head. It is a drop-in for the model in `scoring` and
`objectives`: called like a causal LM with a left-padded batch, it returns `.logits`.

    runner = FrozenPrefixModel(peft_model, split=n_layers - k)
    runner(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=3).logits

Why per sequence and not per batch: batches are re-drawn every epoch and padded to
different widths, but a row computes exactly what it would alone (explicit position
ids, `scoring.forward.left_pad_batch`), so a row's hidden states can be cut out of one batch
and padded into another. Padded positions get zeros; the attention mask hides them.
The cache lives in memory (about L x d floats per sequence: 60 x 576 x 4 B = 140 KB for
the embedded model, 0.6 GB for 1,200 training questions of 4 options), or, given a
store directory, on disk only (`HiddenStateStore`), filled lazily or, by the trainer,
ahead of the first step (`prefill`, in order of length).

Sequences that start alike (a question's K options) share work in both halves: the fill
runs their common prefix once into a KV cache and each tail on it, and so do the top
layers in every forward, with gradients flowing through that cache
(`shared_prefix_groups` picks the groups, `_shared_pass` runs them).
The `HiddenStateStore` is one append-only arena (`scoring.arena`: a data file, an index,
one memory map) under a fingerprint of the frozen weights: memory stays bounded however
many sequences there are, and runs that share evaluation sets (a method comparison)
compute those sets' bottom layers once between them.
Which models: those with the parts it calls (`model.model.layers`, `embed_tokens`,
`rotary_emb`, `norm`, `lm_head`), whose layers it calls as their own forward does
(`scoring.decoder`: a mask per attention type, a rotary embedding per layer type, so
Gemma 2 and 3 too), and only where it proves equal to that forward, logits and LoRA
gradients, on a probe batch (`scoring.fast_paths.frozen_prefix_check`, measured once
per model and split). Other models train uncached, with the reason in the run's choices.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from calm_core.scoring.arena import Arena, ArenaConfig
from calm_core.scoring.decoder import LayerRun, run_layers
from calm_core.scoring.forward import (
    STRUCTURE,
    cache_kwarg,
    causal_lm,
    left_pad_batch,
    left_pad_positions,
    length_runs,
    output_head,
    select_cache,
    supports_frozen_prefix,
)

MIN_SHARED_PREFIX = 4  # tokens: below this, a separate prefix pass costs more than it saves
PREFILL_ITEMS = 16  # items per prefill batch: bench/prefill.py measures 4, 16 and 32


def shared_prefix_groups(keys: list[tuple[int, ...]]) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """Group sequences by a common prefix: ([(prefix length, member indices)], singles).

    Sorted, the sequences that share a prefix are neighbours, and a run of neighbours
    shares the smallest common prefix between them. The runs are chosen to save the most
    tokens, sum (members - 1) * prefix, by dynamic programming: joining a question's
    options to the next question only because both prompts open with "Question: Which"
    would shrink the shared prefix to three tokens, so it does not happen. A group's
    prefix is at least MIN_SHARED_PREFIX tokens and leaves every member at least one
    token of its own; groups have two or more members."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    n = len(order)
    neighbours = [_common_length(keys[order[k]], keys[order[k + 1]]) for k in range(n - 1)]
    best = [0] * (n + 1)  # best[j]: tokens saved over order[:j]
    first = list(range(-1, n))  # first[j]: where the run ending at order[j - 1] starts
    shared_of = [0] * (n + 1)
    for j in range(1, n + 1):
        best[j], first[j], shared = best[j - 1], j - 1, len(keys[order[j - 1]]) - 1
        for i in range(j - 2, -1, -1):  # the run order[i .. j-1]
            shared = min(shared, neighbours[i], len(keys[order[i]]) - 1)
            if shared < MIN_SHARED_PREFIX:
                break
            if best[i] + (j - 1 - i) * shared > best[j]:
                best[j], first[j], shared_of[j] = best[i] + (j - 1 - i) * shared, i, shared
    groups: list[tuple[int, list[int]]] = []
    singles: list[int] = []
    j = n
    while j > 0:
        i = first[j]
        if j - i >= 2:
            groups.append((shared_of[j], order[i:j]))
        else:
            singles.append(order[i])
        j = i
    return groups[::-1], singles[::-1]


def _common_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def frozen_fingerprint(model: Any, split: int) -> str:
    """A short id of everything the cached states depend on: the config and the frozen
    weights below `split` (sums and shapes, so a retrained local model gets a new id)."""
    lm = causal_lm(model)
    digest = hashlib.blake2b(digest_size=12)
    digest.update(json.dumps(lm.config.to_dict(), sort_keys=True, default=str).encode())
    digest.update(str(split).encode())
    with torch.no_grad():
        frozen = [*lm.model.embed_tokens.parameters(), *lm.model.layers[:split].parameters()]
        for p in frozen:
            digest.update(f"{tuple(p.shape)}:{float(p.float().sum()):.6e}:{float(p.float().abs().sum()):.6e}".encode())
    return digest.hexdigest()


class HiddenStateStore:
    """Hidden states by token ids, on disk only: an `Arena` in <root>/<fingerprint>/,
    shared by every run (and process) with the same frozen weights and split.

    It stands in for the runner's in-memory dict (`in`, `[key]`, `[key] = states`,
    `len`), so with a store nothing but the arena's index stays in memory: a read copies
    the sequence out of the mapped file onto the device of `like` (the embedding
    weight, so a model moved after this was made is followed) in its dtype. Stored as
    float32, as the .npy store before it did: exact for float32, bfloat16 and float16."""

    def __init__(self, root: Path, fingerprint: str, like: torch.Tensor, config: ArenaConfig | None = None) -> None:
        self.path = Path(root) / fingerprint
        self.arena = Arena(self.path, config)
        self._like = like

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return _key_bytes(key) in self.arena

    def __getitem__(self, key: tuple[int, ...]) -> torch.Tensor:
        states = self.arena.get(_key_bytes(key))
        if states is None:
            raise KeyError(key)
        return torch.from_numpy(states).to(device=self._like.device, dtype=self._like.dtype)

    def __setitem__(self, key: tuple[int, ...], states: torch.Tensor) -> None:
        self.arena.put(_key_bytes(key), states.detach().to("cpu", torch.float32).numpy())

    def __len__(self) -> int:
        return len(self.arena)


def _key_bytes(key: tuple[int, ...]) -> bytes:
    return np.asarray(key, dtype=np.int64).tobytes()


class FrozenPrefixModel:
    """A causal LM whose layers below `split` are computed once per token sequence."""

    def __init__(self, model: Any, split: int, store_root: Path | None = None) -> None:
        if not supports_frozen_prefix(model):
            raise ValueError(
                f"Frozen-prefix caching needs {STRUCTURE}; {type(causal_lm(model)).__name__} lacks some of them"
            )
        lm = causal_lm(model)
        n_layers = len(lm.model.layers)
        if not 0 < split < n_layers:
            raise ValueError(f"Expected 0 < split < {n_layers} (the number of decoder layers), but got {split}")
        trainable_below = [n for n, p in lm.model.layers[:split].named_parameters() if p.requires_grad]
        if trainable_below or any(p.requires_grad for p in lm.model.embed_tokens.parameters()):
            raise ValueError(f"Layers below {split} must be frozen to cache them, but {trainable_below[:3]} train")
        self.model = model  # the PEFT model: adapters, disable_adapter(), save_pretrained() stay there
        self.split = split
        self.config = lm.config
        embedding = next(lm.model.embed_tokens.parameters())
        self.store = HiddenStateStore(store_root, frozen_fingerprint(model, split), embedding) if store_root else None
        # token ids -> (L, d) hidden states at `split`: in memory, or (given a store) on disk only
        self._cache: dict[tuple[int, ...], torch.Tensor] | HiddenStateStore = {} if self.store is None else self.store
        self.computed = 0  # sequences whose bottom layers ran in this process (the rest came from the store)
        self.shared_rows = 0  # of those, computed on a shared prefix's KV cache (shared_prefix_groups)
        self.share_top = True  # top layers: run a shared prefix once per forward too (False: every row in full)
        self.top_shared_rows = 0  # rows whose top layers ran on a shared prefix's KV cache (all forwards)

    # The bits of the nn.Module interface that scoring and the trainer use.
    def parameters(self) -> Iterator[torch.nn.Parameter]:
        params: Iterator[torch.nn.Parameter] = self.model.parameters()
        return params

    def disable_adapter(self) -> AbstractContextManager[None]:
        off: AbstractContextManager[None] = self.model.disable_adapter()
        return off

    @property
    def cached_sequences(self) -> int:
        """Sequences whose states are at hand: in memory, or in the store (from any run)."""
        return len(self._cache)

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        logits_to_keep: int = 0,
        use_cache: bool = False,
        **_: Any,
    ) -> SimpleNamespace:
        if use_cache:
            raise ValueError(
                "FrozenPrefixModel takes no KV cache: it shares prefixes itself (scoring passes it whole sequences)"
            )
        hidden = self.last_hidden(input_ids, attention_mask, position_ids, logits_to_keep)
        return SimpleNamespace(logits=output_head(self.model)(hidden))

    def last_hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, n_last: int = 0
    ) -> torch.Tensor:
        """Final-norm hidden states of the last `n_last` positions (0: all), (B, n, d)."""
        keys = [tuple(row[mask.bool()].tolist()) for row, mask in zip(input_ids, attention_mask, strict=True)]
        self._fill(input_ids, attention_mask, position_ids, keys)
        groups, singles = shared_prefix_groups(keys) if self.share_top else ([], list(range(len(keys))))
        if not groups:
            return self._top(self._states(keys, input_ids.shape[1]), attention_mask, position_ids, n_last)
        width = n_last or input_ids.shape[1]
        rows = self._top_shared(keys, groups, width)  # row -> (width, d)
        if singles:
            index = torch.tensor(singles, device=input_ids.device)
            hidden = self._states([keys[r] for r in singles], input_ids.shape[1])
            alone = self._top(hidden, attention_mask[index], position_ids[index], width)  # (S, width, d)
            rows.update({r: alone[i] for i, r in enumerate(singles)})
        return torch.stack([rows[r] for r in range(len(keys))])  # (B, width, d)

    def prefill(
        self,
        per_item: Sequence[Sequence[Sequence[int]]],
        items_per_batch: int = PREFILL_ITEMS,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Compute the bottom layers of every item's sequences now; returns how many ran.

        Training would fill them lazily, but a training batch is whatever the shuffle
        drew: prompts of every length padded together. Here items go in order of length,
        a few at a time (each item's sequences together, so they share their prompt), which
        wastes less on padding (bench/prefill.py measures both). `progress(done, total)`
        counts items."""
        todo = [item for item in per_item if any(tuple(seq) not in self._cache for seq in item)]
        todo.sort(key=lambda item: min(len(seq) for seq in item))  # about the prompt's length: tails run apart
        device = next(self.parameters()).device
        before = self.computed
        for start in range(0, len(todo), items_per_batch):
            seqs = [list(seq) for item in todo[start : start + items_per_batch] for seq in item]
            batch = left_pad_batch(seqs, 0, device)  # the pad id is masked out and never cached
            self._fill(batch["input_ids"], batch["attention_mask"], batch["position_ids"], [tuple(x) for x in seqs])
            if progress is not None:
                progress(min(start + items_per_batch, len(todo)), len(todo))
        return self.computed - before

    def _fill(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        keys: list[tuple[int, ...]],
    ) -> None:
        """Run the bottom layers for the rows not cached yet and keep them."""
        missing = [r for r, key in enumerate(keys) if key not in self._cache]
        if not missing:
            return
        # Outside inference mode (scoring runs in it) so cached states can feed a backward later.
        with torch.inference_mode(False), torch.no_grad():
            self._compute(input_ids, attention_mask, position_ids, keys, missing)

    def _compute(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        keys: list[tuple[int, ...]],
        missing: list[int],
    ) -> None:
        groups, singles = shared_prefix_groups([keys[r] for r in missing])
        if groups:
            self._compute_shared([keys[r] for r in missing], groups, input_ids.device)
        if singles:
            self._compute_rows(input_ids, attention_mask, position_ids, keys, [missing[i] for i in singles])

    def _compute_rows(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        keys: list[tuple[int, ...]],
        missing: list[int],
    ) -> None:
        """The bottom layers over whole rows of the batch (no shared prefix to reuse)."""
        rows = torch.tensor(missing, device=input_ids.device)
        mask, positions = attention_mask[rows].clone(), position_ids[rows].clone()  # (M, W)
        hidden = self._bottom(input_ids[rows].clone(), mask, positions, None)  # (M, W, d)
        for i, r in enumerate(missing):
            self._keep(keys[r], hidden[i, mask[i].bool()])  # (L, d), padding dropped

    def _bottom(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        """Embeddings and layers below `split` ((B, W) ids -> (B, W, d)); with a KV cache,
        the rows continue the cached prefixes (mask covers cache + ids)."""
        hidden = causal_lm(self.model).model.embed_tokens(ids)
        return self._layers(hidden, mask, positions, cache, 0, self.split)

    def _layers(
        self, hidden: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any, start: int, stop: int
    ) -> torch.Tensor:
        """Decoder layers start..stop-1 on (B, W, d) hidden states; with a KV cache, the
        rows continue what those layers cached (mask covers cache + new positions)."""
        inner = causal_lm(self.model).model
        request = LayerRun(hidden, mask, positions, (start, stop), cache, cache_kwarg(self.model))
        return run_layers(inner, self.config, request)

    def _compute_shared(
        self, keys: list[tuple[int, ...]], groups: list[tuple[int, list[int]]], device: torch.device
    ) -> None:
        """Sequences that start alike (a question's K options) through the bottom layers,
        each shared prefix once (`_shared_pass`); the states are those of the whole
        sequences (same positions, same attention)."""
        embed = causal_lm(self.model).model.embed_tokens
        outputs = self._shared_pass(groups, lambda m: embed(torch.tensor(keys[m], device=device)), 0, self.split)
        for m, states in outputs.items():
            self._keep(keys[m], states)
        self.shared_rows += len(outputs)

    def _shared_pass(
        self, groups: list[tuple[int, list[int]]], states_of: Callable[[int], torch.Tensor], start: int, stop: int
    ) -> dict[int, torch.Tensor]:
        """Layers start..stop-1 over every member m of `groups` ((prefix length, members)),
        whose input is states_of(m), (L, d): each group's prefix runs once, left-padded,
        into a KV cache, and every member's tail on its group's cached keys and values.
        Tails go in runs of similar length (`length_runs`): one batch padded to the longest
        answer would double the work. Returns member -> its output states (L, d).
        Gradients flow through the cache, so the top layers can train on it."""
        from transformers import DynamicCache

        owners = [g for g, (_, members) in enumerate(groups) for _ in members]
        members = [m for _, ms in groups for m in ms]
        tails = [states_of(m)[groups[g][0] :] for g, m in zip(owners, members, strict=True)]
        prefix, prefix_mask = _pad_states([states_of(ms[0])[:p] for p, ms in groups], left=True)  # (G, Wp, d)
        cache = DynamicCache(config=self.config)
        prefix_out = self._layers(prefix, prefix_mask, left_pad_positions(prefix_mask), cache, start, stop)
        outputs: dict[int, torch.Tensor] = {}
        for run in length_runs([len(t) for t in tails]):
            index = torch.tensor([owners[r] for r in run], device=prefix.device)
            hidden, mask = _pad_states([tails[r] for r in run], left=False)  # right-padded: real tokens first
            ctx_mask = prefix_mask[index]
            positions = ctx_mask.sum(dim=1, keepdim=True) + torch.arange(hidden.shape[1], device=prefix.device)
            out = self._layers(
                hidden,
                torch.cat([ctx_mask, mask], dim=1),
                positions,
                select_cache(cache, index, self.config),
                start,
                stop,
            )
            for i, r in enumerate(run):
                g = owners[r]
                outputs[members[r]] = torch.cat([prefix_out[g, prefix_mask[g].bool()], out[i, : len(tails[r])]])
        return outputs

    def _keep(self, key: tuple[int, ...], states: torch.Tensor) -> None:
        """Cache one row's states: a slice of the batch, so in memory it is cloned (the
        batch is freed); the store copies it to disk itself."""
        self._cache[key] = states if self.store is not None else states.clone()
        self.computed += 1

    def _states(self, keys: list[tuple[int, ...]], width: int) -> torch.Tensor:
        """Cached states of `keys`, left-padded to `width` as in scoring.forward.left_pad_batch: (B, W, d)."""
        return _pad_states([self._cache[k] for k in keys], left=True, width=width)[0]

    def _top(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, logits_to_keep: int
    ) -> torch.Tensor:
        """Layers split.. and the final norm (LoRA and gradients live here)."""
        inner = causal_lm(self.model).model
        hidden = self._layers(hidden, attention_mask, position_ids, None, self.split, len(inner.layers))
        hidden = inner.norm(hidden)
        return hidden[:, -logits_to_keep:] if logits_to_keep else hidden  # (B, keep, d)

    def _top_shared(
        self, keys: list[tuple[int, ...]], groups: list[tuple[int, list[int]]], width: int
    ) -> dict[int, torch.Tensor]:
        """The top layers for rows that start alike, each shared prefix run once
        (`_shared_pass`, gradients included): row -> its final-norm states at its last
        `width` positions (zeros before its start). A question's K options cost one
        question and K short tails, not K questions."""
        inner = causal_lm(self.model).model
        outputs = self._shared_pass(groups, lambda m: self._cache[keys[m]], self.split, len(inner.layers))
        rows = list(outputs)
        out = inner.norm(_pad_states([outputs[m][-width:] for m in rows], left=True, width=width)[0])  # (R, width, d)
        self.top_shared_rows += len(rows)
        return {m: out[i] for i, m in enumerate(rows)}


def _pad_states(states: list[torch.Tensor], left: bool, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_i, d) states padded with zeros into (N, W, d) (W: `width` or the longest), and
    the (N, W) mask of real rows. Autograd follows the slice assignments."""
    width = width or max(len(x) for x in states)
    out = states[0].new_zeros((len(states), width, states[0].shape[-1]))
    mask = torch.zeros((len(states), width), dtype=torch.long, device=states[0].device)
    for i, x in enumerate(states):
        span = slice(width - len(x), width) if left else slice(0, len(x))
        out[i, span] = x
        mask[i, span] = 1
    return out, mask


def frozen_prefix_split(model: Any, lora_layers: int | None) -> int | None:
    """The layer index to cache below, or None when caching does not apply."""
    if lora_layers is None or not supports_frozen_prefix(model):
        return None
    n_layers = len(causal_lm(model).model.layers)
    split = n_layers - lora_layers
    return split if split > 0 else None
