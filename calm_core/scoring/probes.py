"""The probes behind `scoring.fast_paths`: each fast path against the model's own forward
on a short batch, with the relative gap measured and any exception turned into a reason.

The probe batch (`probe_sequences`) is what breaks a path that only looks right: rows of
different lengths, left-padded, so padding and explicit positions matter; two rows that
share a long prefix, so the shared-prefix KV-cache passes run; and rows longer than the
model's sliding window (when it has one, up to MAX_PROBE_LENGTH tokens), so a path that
ignores the window differs. Token ids are drawn from a fixed seed: the probe needs no
tokenizer and gives the same batch on every machine.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from calm_core.scoring.forward import (
    STRUCTURE,
    causal_lm,
    head_input_hook,
    last_hidden,
    left_pad_batch,
    output_head,
    supports_frozen_prefix,
)
from calm_core.scoring.frozen_prefix import FrozenPrefixModel
from calm_core.scoring.logprobs import shared_prefix_logprobs
from calm_core.scoring.path_checks import FastPathSupport, PathCheck, keep_support

MIN_PROBE_LENGTH = 24  # tokens of the longest row when the model has no sliding window
MAX_PROBE_LENGTH = 600  # a window wider than this (4096: Mistral 7B) is not exercised on the CPU
N_LAST = 3  # positions whose logits are compared (the scorers keep a few, not all)
# Gradients sum over more terms than logits (and a shared prefix adds them in another
# order): their gap may be this many times the logit tolerance.
GRAD_FACTOR = 10.0


def probe_sequences(config: Any) -> list[list[int]]:
    """Four token sequences: two sharing all but their last tokens, two shorter ones."""
    window = getattr(config, "sliding_window", None) or 0
    length = min(max(MIN_PROBE_LENGTH, window + 8), MAX_PROBE_LENGTH)
    vocab = int((config.get_text_config() if hasattr(config, "get_text_config") else config).vocab_size)
    generator = torch.Generator().manual_seed(0)

    def draw(n: int) -> list[int]:
        tokens: list[int] = torch.randint(0, vocab, (n,), generator=generator).tolist()
        return tokens

    common = draw(length - 3)
    return [common + draw(3), common + draw(2), draw(length // 2 + 1), draw(max(5, length // 3))]


def relative_gap(fast: torch.Tensor, own: torch.Tensor) -> float:
    """max |fast - own| / max(1, max |own|): the measure every tolerance refers to."""
    fast, own = fast.detach().double(), own.detach().double()
    return float((fast - own).abs().max() / max(1.0, float(own.abs().max())))


def _check(name: str, measure: Callable[[], float], limit: float) -> PathCheck:
    """Run one probe: on within `limit`, off (with the gap or the exception) otherwise."""
    try:
        gap = measure()
    except Exception as exc:  # noqa: BLE001 - any failure of a fast path switches it off, with its reason
        return PathCheck(False, f"{name} raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return _judged(name, gap, limit)


def _judged(name: str, gap: float, limit: float) -> PathCheck:
    """On when `gap` is within `limit`, off (with the gap) otherwise."""
    if gap != gap or gap > limit:  # NaN counts as a difference
        return PathCheck(False, f"{name} differs from the model's own forward: gap {gap:.2e} > {limit:.0e}", gap)
    return PathCheck(True, f"equal to the model's own forward (gap {gap:.1e} <= {limit:.0e})", gap)


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """Dropout off for the probe (a LoRA dropout would make two passes differ), restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _batch(model: Any) -> dict[str, torch.Tensor]:
    device = next(causal_lm(model).parameters()).device
    return left_pad_batch(probe_sequences(causal_lm(model).config), 0, device)  # padding is masked out


def probe_scoring_paths(model: Any, limit: float) -> FastPathSupport:
    """Hidden path, feature capture and prefix sharing of `model`, each against its forward
    (one plain pass gives the logits, the head's input and `output_hidden_states`).
    Prefix sharing is measured with the hidden path as just decided (how scoring runs it)."""
    lm = causal_lm(model)
    with _eval_mode(model), torch.no_grad():
        batch = _batch(model)
        with head_input_hook(model) as seen:
            out = model(**batch, logits_to_keep=N_LAST, use_cache=False, output_hidden_states=True)
        hidden = (
            _check("the hidden path", lambda: _hidden_gap(model, batch, out.logits), limit)
            if supports_frozen_prefix(model)
            else _lacks(lm)
        )
        final_norm = out.hidden_states[-1][:, -N_LAST:]  # what output_hidden_states calls the last state
        features = _check("feature capture", lambda: relative_gap(seen[-1], final_norm), limit)
        keep_support(lm, FastPathSupport(hidden, features, PathCheck(False, "being measured")))
        sharing = _check("prefix sharing", lambda: _sharing_gap(model, batch), limit)
    return FastPathSupport(hidden_path=hidden, feature_capture=features, prefix_sharing=sharing)


def _lacks(lm: Any) -> PathCheck:
    """The check for a model without the parts a path calls (GPT-2, GPT-NeoX, OPT)."""
    return PathCheck(False, f"{type(lm).__name__} lacks some of {STRUCTURE}, which this path runs")


def _hidden_gap(model: Any, batch: dict[str, torch.Tensor], own: torch.Tensor) -> float:
    """`last_hidden` + `output_head` against the model's logits."""
    states = last_hidden(model, {**batch, "use_cache": False}, N_LAST)
    return relative_gap(output_head(model)(states), own)


def _sharing_gap(model: Any, batch: dict[str, torch.Tensor]) -> float:
    """`shared_prefix_logprobs` (contexts once, continuations on their KV cache) against
    log-softmax of the model's logits over the whole sequences (one batch)."""
    seqs = probe_sequences(causal_lm(model).config)
    device = batch["input_ids"].device
    groups = [(seqs[0][:-3], [seqs[0][-3:], seqs[1][-2:]]), (seqs[2][:-2], [seqs[2][-2:], seqs[3][:4]])]
    shared = [lp for scored in shared_prefix_logprobs(model, groups, 0, device) for lp in scored]
    own = _own_logprobs(model, [(context, cont) for context, conts in groups for cont in conts], device)
    return max(relative_gap(fast, plain) for fast, plain in zip(shared, own, strict=True))


def _own_logprobs(model: Any, pairs: list[tuple[list[int], list[int]]], device: torch.device) -> list[torch.Tensor]:
    """log p(cont | context) per token from one plain left-padded pass over the whole
    sequences, the LM head only on the positions that predict a continuation token."""
    keep = max(len(cont) for _, cont in pairs) + 1
    batch = left_pad_batch([context + cont for context, cont in pairs], 0, device)
    logits = model(**batch, logits_to_keep=keep, use_cache=False).logits.float()  # (B, keep, V)
    out = []
    for row, (_, cont) in enumerate(pairs):
        picked = torch.log_softmax(logits[row, keep - 1 - len(cont) : keep - 1], dim=-1)
        out.append(picked.gather(-1, torch.tensor(cont, device=device)[:, None])[:, 0])
    return out


def probe_frozen_prefix(model: Any, split: int, limit: float) -> PathCheck:
    """A FrozenPrefixModel below `split` against the model: logits and the gradients of a
    loss w.r.t. the trainable (LoRA) parameters, with the top layers sharing prefixes and
    then, from the same cache, every row whole. LoRA's zero-initialised B is given small
    random values for the probe (restored after), so the adapter changes the output and
    its gradients reach every matrix. Where only the top layers' prefix sharing differs
    (its gradients flow through a KV cache), the path stays on without it (`share_top`)."""
    if not supports_frozen_prefix(model):
        return _lacks(causal_lm(model))
    gaps: list[float] = []
    with _eval_mode(model), torch.inference_mode(False), torch.enable_grad(), _perturbed_adapter(model):
        failed = _check("the frozen prefix", lambda: _frozen_gaps(model, split, gaps), limit)
    if failed.on or len(gaps) < 2:  # both equal, or it raised before the whole-row pass
        return failed
    shared, whole = (_judged("the frozen prefix", gap, limit) for gap in gaps)
    if not whole.on:
        return whole
    why = f"{whole.reason}, each row's top layers run whole: sharing a prefix there {shared.reason.split(' ', 3)[3]}"
    return PathCheck(True, why, whole.gap, share_top=False)


def _frozen_gaps(model: Any, split: int, gaps: list[float]) -> float:
    """The runner's gap (the largest of the logit gap and the gradient gap over
    GRAD_FACTOR) with its top layers sharing prefixes, then from its cache with every row
    whole; appended to `gaps` as they are measured, the larger returned."""
    batch = _batch(model)
    params = [p for p in model.parameters() if p.requires_grad]
    own, own_grads = _logits_and_grads(model, batch, params)
    runner = FrozenPrefixModel(model, split)
    for share_top in (True, False):  # the first pass also fills the cache (sharing prefixes there)
        runner.share_top = share_top
        fast, fast_grads = _logits_and_grads(runner, batch, params)
        gaps.append(max(relative_gap(fast, own), _grad_gap(fast_grads, own_grads) / GRAD_FACTOR))
    return max(gaps)


def _logits_and_grads(
    model: Any, batch: dict[str, torch.Tensor], params: list[torch.nn.Parameter]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits at the last N_LAST positions and d(loss)/d(params), loss = NLL of fixed targets."""
    logits = model(**batch, logits_to_keep=N_LAST, use_cache=False).logits
    if not params:
        return logits.detach(), []
    targets = torch.arange(logits.shape[0] * N_LAST, device=logits.device).reshape(-1, N_LAST) % logits.shape[-1]
    loss = -torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[..., None]).mean()
    return logits.detach(), [g.detach() for g in torch.autograd.grad(loss, params, allow_unused=True)]


def _grad_gap(fast: Sequence[torch.Tensor | None], own: Sequence[torch.Tensor | None]) -> float:
    """||fast - own|| / ||own|| over all trainable parameters together: a relative error
    of the whole gradient (a tensor whose gradient is tiny does not count as all of it).
    A gradient one path has and the other lacks is an infinite gap."""
    num = den = 0.0
    for f, o in zip(fast, own, strict=True):
        if (f is None) != (o is None):
            return float("inf")
        if f is not None and o is not None:
            num += float((f.double() - o.double()).pow(2).sum())
            den += float(o.double().pow(2).sum())
    gap: float = (num**0.5) / max(den**0.5, 1e-30)
    return gap


@contextmanager
def _perturbed_adapter(model: Any) -> Iterator[None]:
    """Trainable parameters that are all zero get N(0, 0.02) values for the block, then zeros again."""
    generator = torch.Generator().manual_seed(1)
    zero = [p for p in model.parameters() if p.requires_grad and not bool(p.detach().any())]
    with torch.no_grad():
        for p in zero:
            p.copy_(torch.randn(p.shape, generator=generator).to(p) * 0.02)
    try:
        yield
    finally:
        with torch.no_grad():
            for p in zero:
                p.zero_()
