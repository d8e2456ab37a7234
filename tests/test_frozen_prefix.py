"""Frozen-prefix caching computes what the full model computes: logits, losses, gradients."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from calm_core.scoring.adapters import LoraSettings, attach_lora, lora_parameters
from calm_core.data.schema import MCItem
from calm_core.scoring.frozen_prefix import FrozenPrefixModel, frozen_prefix_split
from calm_core.calibration.head import CalibrationHead
from calm_core.training.objectives import negative_entropy, option_cross_entropy, option_logits
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.forward import left_pad_batch
from calm_core.scoring.scorer import Scorer
from tests.numeric import float32_noise

ITEMS = [
    MCItem("a", "What is the capital of France?", ("Paris", "Lyon", "Marseille", "Nice"), 0),
    MCItem("b", "2 + 2 =", ("4", "5 and a half"), 1),
    MCItem("c", "Which gas do plants take in?", ("carbon dioxide", "oxygen", "helium"), 0),
]


@pytest.fixture()
def four_layer_lora(tiny_model_dir: Path):
    """A 4-layer random Llama (the tiny tokenizer) with LoRA on its top 2 layers; B != 0
    so the adapter changes the output and a wrong split would show."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = LlamaConfig.from_pretrained(tiny_model_dir)
    config.num_hidden_layers = 4
    torch.manual_seed(1)
    model, _ = attach_lora(LlamaForCausalLM(config).eval(), LoraSettings(r=4, layers=2))
    with torch.no_grad():
        for p in lora_parameters(model):
            p.normal_(0, 0.1)
    return model, tokenizer


def test_split_is_below_the_adapted_layers(four_layer_lora) -> None:
    model, _ = four_layer_lora
    assert frozen_prefix_split(model, 2) == 2
    assert frozen_prefix_split(model, None) is None
    assert frozen_prefix_split(model, 4) is None  # nothing below to cache


def test_refuses_a_split_that_would_cache_trainable_layers(four_layer_lora) -> None:
    model, _ = four_layer_lora
    with pytest.raises(ValueError, match="must be frozen"):
        FrozenPrefixModel(model, split=3)


def test_logits_equal_the_full_model_on_a_left_padded_batch(four_layer_lora) -> None:
    model, tokenizer = four_layer_lora
    seqs = [tokenizer(t).input_ids for t in ("a short one", "a somewhat longer sequence of words here", "mid size text")]
    batch = left_pad_batch(seqs, tokenizer.pad_token_id, torch.device("cpu"))
    runner = FrozenPrefixModel(model, split=2)
    with torch.no_grad():
        full = model(**batch, logits_to_keep=3, use_cache=False).logits
        first = runner(**batch, logits_to_keep=3).logits
        again = runner(**left_pad_batch(seqs[::-1], tokenizer.pad_token_id, torch.device("cpu")), logits_to_keep=3).logits
    assert runner.cached_sequences == 3
    torch.testing.assert_close(first, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again, full.flip(0), atol=1e-5, rtol=1e-5)  # from the cache, other widths


@pytest.mark.parametrize("rule,scope", [("cloze", "vocab"), ("cloze", "options"), ("letter", "vocab")])
def test_losses_and_gradients_equal_the_uncached_path(four_layer_lora, rule: str, scope: str) -> None:
    model, tokenizer = four_layer_lora
    cfg = ScoringConfig(rule=rule)
    head = CalibrationHead(scope, size=model.config.vocab_size if scope == "vocab" else 4)
    with torch.no_grad():
        head.log_temperature.normal_(0, 0.3)
    gold = torch.tensor([it.answer for it in ITEMS])
    runner = FrozenPrefixModel(model, split=2)

    def loss_and_grads(net) -> tuple[float, list[torch.Tensor]]:
        params = lora_parameters(model) + list(head.parameters())
        z = option_logits(net, tokenizer, ITEMS, cfg, head)
        loss = option_cross_entropy(z, gold) + negative_entropy(z)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        return float(loss.detach()), [g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)]

    loss_full, grads_full = loss_and_grads(model)
    loss_cached, grads_cached = loss_and_grads(runner)
    loss_again, grads_again = loss_and_grads(runner)  # second pass: every sequence from the cache
    noise = float32_noise(loss_full, model.config.vocab_size)  # tests/numeric.py: the order of sums may differ
    assert loss_cached == pytest.approx(loss_full, abs=noise)
    assert loss_again == pytest.approx(loss_full, abs=noise)
    for g_full, g_cached, g_again in zip(grads_full, grads_cached, grads_again):
        torch.testing.assert_close(g_cached, g_full, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(g_again, g_full, atol=1e-5, rtol=1e-4)
    assert any(float(g.abs().sum()) > 0 for g in grads_full[:-2])  # the LoRA weights do get a gradient


def test_scores_equal_and_adapter_can_be_switched_off(four_layer_lora) -> None:
    model, tokenizer = four_layer_lora
    runner = FrozenPrefixModel(model, split=2)
    plain = SimpleNamespace(model=model, tokenizer=tokenizer, device=torch.device("cpu"), info={})
    cached = SimpleNamespace(model=runner, tokenizer=tokenizer, device=torch.device("cpu"), info={})
    cfg = ScoringConfig(rule="cloze")
    expected = Scorer.of(plain, progress=False).score(ITEMS, cfg).logits
    got = Scorer.of(cached, progress=False, share_prefix=False).score(ITEMS, cfg).logits
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite],
                               atol=float32_noise(np.abs(expected[finite]).max(), model.config.vocab_size))
    with model.disable_adapter():
        base_expected = Scorer.of(plain, progress=False).score(ITEMS, cfg).logits
    with runner.disable_adapter():  # the cache is shared by base and adapted variants
        base_got = Scorer.of(cached, progress=False, share_prefix=False).score(ITEMS, cfg).logits
    np.testing.assert_allclose(base_got[finite], base_expected[finite],
                               atol=float32_noise(np.abs(base_expected[finite]).max(), model.config.vocab_size))
    assert np.abs(base_expected[finite] - expected[finite]).max() > 1e-3  # the adapter matters here


def test_inference_mode_fill_can_feed_a_backward_later(four_layer_lora) -> None:
    model, tokenizer = four_layer_lora
    runner = FrozenPrefixModel(model, split=2)
    cfg = ScoringConfig(rule="cloze")
    with torch.inference_mode():
        option_logits(runner, tokenizer, ITEMS, cfg)
    z = option_logits(runner, tokenizer, ITEMS, cfg)
    option_cross_entropy(z, torch.tensor([0, 1, 0])).backward()
    assert lora_parameters(model)[-1].grad is not None


def test_disk_store_serves_a_second_runner_and_keys_on_the_weights(four_layer_lora, tmp_path: Path) -> None:
    model, tokenizer = four_layer_lora
    seqs = [tokenizer(t).input_ids for t in ("one two three", "four five")]
    batch = left_pad_batch(seqs, tokenizer.pad_token_id, torch.device("cpu"))
    first = FrozenPrefixModel(model, split=2, store_root=tmp_path)
    with torch.no_grad():
        expected = model(**batch, logits_to_keep=2, use_cache=False).logits
        first(**batch, logits_to_keep=2)
        second = FrozenPrefixModel(model, split=2, store_root=tmp_path)
        got = second(**batch, logits_to_keep=2).logits
    assert first.computed == 2 and second.computed == 0  # the second runner read both from disk
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        model.get_base_model().model.layers[0].mlp.up_proj.weight.mul_(1.01)  # a frozen weight changes
    third = FrozenPrefixModel(model, split=2, store_root=tmp_path)
    assert third.store.path != first.store.path  # so stale states are never served


def test_a_store_backed_runner_holds_no_states_and_trains_exactly_as_in_memory(four_layer_lora,
                                                                               tmp_path: Path) -> None:
    """With a store the states live in the arena only and feed the top layers' backward
    from there: the loss and LoRA gradients equal the in-memory runner's to float32
    rounding (bit for bit where the kernels sum in the same order), on the pass that fills
    the store, on one that reads it, and in a second runner."""
    model, tokenizer = four_layer_lora
    cfg = ScoringConfig(rule="cloze")
    gold = torch.tensor([it.answer for it in ITEMS])
    params = lora_parameters(model)

    def loss_and_grads(runner: FrozenPrefixModel) -> list[torch.Tensor]:
        loss = option_cross_entropy(option_logits(runner, tokenizer, ITEMS, cfg), gold)
        return [loss.detach(), *torch.autograd.grad(loss, params, materialize_grads=True)]

    memory, stored = FrozenPrefixModel(model, split=2), FrozenPrefixModel(model, split=2, store_root=tmp_path)
    want = loss_and_grads(memory)
    got = [loss_and_grads(stored), loss_and_grads(stored)]
    second = FrozenPrefixModel(model, split=2, store_root=tmp_path)
    got.append(loss_and_grads(second))
    assert stored._cache is stored.store and second.computed == 0
    assert stored.computed == memory.computed and stored.cached_sequences == memory.cached_sequences
    for run in got:  # float32 rounding: bit for bit on some CPUs; 5e-7 relative on a Haswell one (2 threads)
        for g, w in zip(run, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * float(w.abs().max()))
    assert float(want[1].abs().sum()) > 0  # the LoRA weights do get a gradient


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_store_gives_states_back_in_the_model_dtype_unchanged(tmp_path: Path, dtype: torch.dtype) -> None:
    from calm_core.scoring.frozen_prefix import HiddenStateStore

    store = HiddenStateStore(tmp_path, "fingerprint", torch.zeros(1, dtype=dtype))
    states = torch.randn(7, 16).to(dtype)
    store[(5, 6, 7)] = states
    assert (5, 6, 7) in store and (5, 6) not in store and len(store) == 1
    got = store[(5, 6, 7)]
    assert got.dtype == dtype and torch.equal(got, states)
    with pytest.raises(KeyError):
        store[(5, 6)]


def test_needed_logits_equal_the_full_logits_at_the_kept_positions(four_layer_lora) -> None:
    """The LM head on the positions each row needs only, for the PEFT model, the runner and
    the same model with the adapter off: the same numbers as slicing the full logits."""
    from calm_core.scoring.fast_paths import fast_paths
    from calm_core.scoring.forward import hidden_path
    from calm_core.scoring.logprobs import last_logits, needed_logits

    model, tokenizer = four_layer_lora
    seqs = [tokenizer(t).input_ids for t in ("one two three four", "five six", "seven eight nine")]
    batch = left_pad_batch(seqs, tokenizer.pad_token_id, torch.device("cpu"))
    lengths = [3, 1, 2]
    runner = FrozenPrefixModel(model, split=2)
    assert not hidden_path(model) and not hidden_path(runner)  # unmeasured: the plain forward
    fast_paths(model)
    assert hidden_path(model) and hidden_path(runner)
    with torch.no_grad():
        full = last_logits(model, batch, 3)  # (3, 3, V)
        expected = torch.cat([full[0, 0:], full[1, 2:], full[2, 1:]])
        torch.testing.assert_close(needed_logits(model, batch, lengths), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(needed_logits(runner, batch, lengths), expected, atol=1e-5, rtol=1e-5)
        with model.disable_adapter():
            base = last_logits(model, batch, 3)
            got = needed_logits(runner, batch, lengths)
        torch.testing.assert_close(got, torch.cat([base[0, 0:], base[1, 2:], base[2, 1:]]), atol=1e-5, rtol=1e-5)


def test_shared_prefixes_run_once_and_give_the_same_states(four_layer_lora) -> None:
    """A question's options share its prompt: the runner computes that prefix once (KV
    cache) and each option's tail on it; the states equal a runner that never shares."""
    import calm_core.scoring.frozen_prefix as fp
    from calm_core.scoring.truncation import cloze_requests

    model, tokenizer = four_layer_lora
    pairs = [pair for reqs in cloze_requests(ITEMS, ScoringConfig(rule="cloze"), tokenizer) for pair in reqs]
    seqs = [(ctx + cont)[:-1] for ctx, cont in pairs] + [tokenizer("unrelated words").input_ids]
    batch = left_pad_batch(seqs, tokenizer.pad_token_id, torch.device("cpu"))
    shared = FrozenPrefixModel(model, split=2)
    with torch.no_grad():
        got = shared(**batch).logits
    assert shared.shared_rows >= len(pairs) - 1  # every option of a multi-option item, at least
    assert shared.computed == len(seqs)
    original = fp.MIN_SHARED_PREFIX
    fp.MIN_SHARED_PREFIX = 10**6  # nothing shares: every row runs in full
    try:
        plain = FrozenPrefixModel(model, split=2)
        with torch.no_grad():
            want = plain(**batch).logits
    finally:
        fp.MIN_SHARED_PREFIX = original
    assert plain.shared_rows == 0
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[mask], model(**batch, use_cache=False).logits[mask], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rule", ["cloze", "cloze_norm"])
def test_top_layers_share_prefixes_with_the_same_losses_and_gradients(four_layer_lora, rule: str) -> None:
    """The trained layers also run a question's prompt once for all its options (KV cache
    with gradients): loss and every LoRA / head gradient equal the rows run in full."""
    model, tokenizer = four_layer_lora
    cfg = ScoringConfig(rule=rule)
    head = CalibrationHead("vocab", size=model.config.vocab_size)
    with torch.no_grad():
        head.log_temperature.normal_(0, 0.3)
    items = ITEMS + [MCItem("d", "Name a colour", ("red", "blue"), 1)]
    gold = torch.tensor([it.answer for it in items])
    params = lora_parameters(model) + list(head.parameters())

    def loss_and_grads(runner: FrozenPrefixModel) -> tuple[float, list[torch.Tensor]]:
        z = option_logits(runner, tokenizer, items, cfg, head)
        loss = option_cross_entropy(z, gold) + negative_entropy(z)
        return float(loss.detach()), list(torch.autograd.grad(loss, params, materialize_grads=True))

    shared, alone = FrozenPrefixModel(model, split=2), FrozenPrefixModel(model, split=2)
    alone.share_top = False
    loss_shared, grads_shared = loss_and_grads(shared)
    loss_alone, grads_alone = loss_and_grads(alone)
    assert shared.top_shared_rows >= 11 and alone.top_shared_rows == 0  # every option of a, b, c, d
    assert loss_shared == pytest.approx(loss_alone, abs=float32_noise(loss_alone, model.config.vocab_size))
    for g_shared, g_alone in zip(grads_shared, grads_alone):
        torch.testing.assert_close(g_shared, g_alone, atol=1e-5, rtol=1e-4)
    assert float(grads_shared[0].abs().sum()) > 0  # the LoRA weights below the shared prefix learn


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_prefill_holds_every_sequence_training_reads_with_the_same_states(four_layer_lora, rule: str) -> None:
    """After `prefill` on forward_sequences, the training forward computes no bottom layer
    and returns what a runner filled lazily, batch by batch, returns."""
    from calm_core.training.objectives import forward_sequences

    model, tokenizer = four_layer_lora
    cfg = ScoringConfig(rule=rule)
    ahead, lazy = FrozenPrefixModel(model, split=2), FrozenPrefixModel(model, split=2)
    seen: list[tuple[int, int]] = []
    computed = ahead.prefill(forward_sequences(tokenizer, ITEMS, cfg), items_per_batch=2,
                             progress=lambda done, total: seen.append((done, total)))
    assert computed == (9 if rule == "cloze" else 3) and seen == [(2, 3), (3, 3)]
    assert ahead.prefill(forward_sequences(tokenizer, ITEMS, cfg)) == 0  # nothing left to do
    with torch.no_grad():
        got = option_logits(ahead, tokenizer, ITEMS, cfg)
        want = option_logits(lazy, tokenizer, ITEMS, cfg)  # filled on the way, in the batch's order
    assert ahead.computed == computed and lazy.computed == computed  # the forward found every sequence cached
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=1e-5, rtol=1e-5)


def test_shared_prefix_groups_keep_a_tail_for_every_member() -> None:
    from calm_core.scoring.frozen_prefix import shared_prefix_groups

    keys = [(1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 7, 8), (9, 9), (1, 2, 3, 4, 5), (7, 7, 7, 7, 7)]
    groups, singles = shared_prefix_groups(keys)
    # sorted: (1,2,3,4,5) (1,2,3,4,5,6) (1,2,3,4,5,7,8) share 5 tokens, but the first has
    # only 5: the prefix is 4 so that it keeps one token of its own
    assert groups == [(4, [3, 0, 1])]
    assert sorted(singles) == [2, 4]


def test_shared_prefix_groups_do_not_merge_questions_on_a_common_opening() -> None:
    """Two questions' options all start "Question: Which": one group of eight sharing
    three tokens saves 21 tokens, two groups of four sharing their prompts save 3 * 8 +
    3 * 9; the grouping takes the larger saving."""
    from calm_core.scoring.frozen_prefix import shared_prefix_groups

    opening = (1, 2, 3, 4)
    first = [opening + (10, 11, 12, 13, 14, 15, 16, 17) + (50 + k,) for k in range(4)]  # prompt of 12 tokens
    second = [opening + (20, 21, 22, 23, 24, 25, 26, 27, 28) + (60 + k, 61) for k in range(4)]  # 13 tokens
    groups, singles = shared_prefix_groups(first + second)
    assert singles == []
    assert sorted((p, sorted(m)) for p, m in groups) == [(12, [0, 1, 2, 3]), (13, [4, 5, 6, 7])]


def test_length_runs_cut_where_padding_costs_more_than_a_pass() -> None:
    from calm_core.scoring.forward import length_runs

    assert length_runs([1, 9, 1, 1, 1], run_cost=2) == [[0, 2, 3, 4], [1]]  # 4 * 1 + 2 + 9 + 2 < 5 * 9 + 2
    assert length_runs([3, 4, 3, 4], run_cost=16) == [[0, 2, 1, 3]]  # one pass: 16 + 16 < 4 * 4 + 16
    lengths = [5, 1, 7, 7, 2, 30, 6]
    runs = length_runs(lengths)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
