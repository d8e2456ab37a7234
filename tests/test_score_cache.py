"""Learn's quiz scores kept on disk (calm_core/scoring/score_cache.py): read back only when the
model's files, the questions and the rule all match; never unpickled; filled at set-up."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from calm_core.data.schema import MCItem
from calm_core.scoring import score_cache
from calm_core.scoring.options import OptionScores, pad_ragged
from calm_core.scoring.score_cache import Quiz, cache_path, cached_scores, read_cached

QUIZ = Quiz("builtin/example/test", rule="cloze", limit=3, seed=0)
ITEMS = [
    MCItem("a", "Symbol of gold?", ("Au", "Ag", "Fe"), 0),
    MCItem("b", "Symbol of iron?", ("Au", "Fe"), 1),
    MCItem("c", "Symbol of silver?", ("Ag", "Au", "Cu", "Fe"), 0),
]


@pytest.fixture()
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 'model' whose fingerprint is its config.json, and a private scores cache."""
    monkeypatch.setattr(score_cache, "scores_root", lambda: tmp_path / "scores")
    folder = tmp_path / "model-a"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    return folder


class Scorer:
    """A stand-in for the model: ragged logits, and a count of how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, items) -> OptionScores:
        self.calls += 1
        rows = [np.linspace(-1.0, 1.0, len(item.choices)) * (i + 1) for i, item in enumerate(items)]
        return OptionScores([it.id for it in items], pad_ragged(rows), np.array([it.answer for it in items]),
                            {"rule": "cloze"}, {"name": "embedded"})


def test_a_second_call_reads_the_stored_scores_without_the_model(model_dir: Path) -> None:
    scorer = Scorer()
    first, hit = cached_scores(model_dir, QUIZ, ITEMS, scorer)
    assert not hit and scorer.calls == 1
    assert cache_path(model_dir, QUIZ).is_file()
    second, hit = cached_scores(model_dir, QUIZ, ITEMS, scorer)
    assert hit and scorer.calls == 1
    np.testing.assert_array_equal(second.logits, first.logits)  # -inf padding back where it was
    np.testing.assert_array_equal(second.gold, first.gold)
    assert second.ids == first.ids and second.scoring == first.scoring and second.model == first.model
    np.testing.assert_allclose(second.probs(), first.probs())


@pytest.mark.parametrize("change", ["question", "answer", "model", "rule"])
def test_a_changed_model_quiz_or_rule_scores_again_and_replaces_the_file(model_dir: Path, change: str) -> None:
    scorer = Scorer()
    cached_scores(model_dir, QUIZ, ITEMS, scorer)
    items, quiz = list(ITEMS), QUIZ
    if change == "question":
        items[0] = MCItem("a", "Chemical symbol of gold?", ("Au", "Ag", "Fe"), 0)
    elif change == "answer":
        items[2] = MCItem("c", "Symbol of silver?", ("Ag", "Au", "Cu", "Fe"), 1)
    elif change == "model":
        (model_dir / "config.json").write_text('{"hidden_size": 16}')
    else:
        quiz = Quiz(QUIZ.dataset, "cloze_norm", QUIZ.limit, QUIZ.seed)
    _, hit = cached_scores(model_dir, quiz, items, scorer)
    assert not hit and scorer.calls == 2
    _, hit = cached_scores(model_dir, quiz, items, scorer)  # the new scores are the stored ones now
    assert hit and scorer.calls == 2


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"key": 1}', b"\x80\x04K\x01."])
def test_a_damaged_file_is_a_miss_not_an_error(model_dir: Path, content: bytes) -> None:
    path = cache_path(model_dir, QUIZ)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    scorer = Scorer()
    _, hit = cached_scores(model_dir, QUIZ, ITEMS, scorer)
    assert not hit and scorer.calls == 1
    assert json.loads(path.read_text())["ids"] == ["a", "b", "c"]


class _Payload:
    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_pickle_in_the_cache_is_never_run(model_dir: Path, tmp_path: Path) -> None:
    payload = _Payload()
    payload.marker = str(tmp_path / "ran")
    path = cache_path(model_dir, QUIZ)
    path.parent.mkdir(parents=True)
    path.write_bytes(pickle.dumps(payload))
    assert read_cached(path, {"format": 1}) is None
    _, hit = cached_scores(model_dir, QUIZ, ITEMS, Scorer())
    assert not hit and not (tmp_path / "ran").exists()


def test_a_file_with_the_right_key_but_bad_logits_is_a_miss(model_dir: Path) -> None:
    cached_scores(model_dir, QUIZ, ITEMS, Scorer())
    path = cache_path(model_dir, QUIZ)
    data = json.loads(path.read_text())
    data["logits"][0] = [1.0]  # one option: not a question
    path.write_text(json.dumps(data))
    _, hit = cached_scores(model_dir, QUIZ, ITEMS, Scorer())
    assert not hit


def test_a_model_without_a_fingerprint_is_scored_and_nothing_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(score_cache, "scores_root", lambda: tmp_path / "scores")
    scorer = Scorer()
    cached_scores(tmp_path / "gone", QUIZ, ITEMS, scorer)
    cached_scores(tmp_path / "gone", QUIZ, ITEMS, scorer)
    assert scorer.calls == 2 and not (tmp_path / "scores").exists()


def test_setup_scores_the_learn_quiz_once(tiny_lm, tiny_model_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(score_cache, "scores_root", lambda: tmp_path / "scores")
    monkeypatch.setattr(score_cache, "embedded_model_dir", lambda: tiny_model_dir)
    loads = []
    monkeypatch.setattr(score_cache, "load_model", lambda name: loads.append(name) or tiny_lm)
    small = Quiz("builtin/chemical_symbols/test", limit=10)
    path, hit = score_cache.prepare_learn_quiz(small)
    assert not hit and path.is_file() and loads == ["embedded"]
    path, hit = score_cache.prepare_learn_quiz(small)
    assert hit and loads == ["embedded"]  # the second set-up does not even load the model
    stored = read_cached(path, json.loads(path.read_text())["key"])
    assert stored is not None and len(stored) == 10


def test_the_learn_page_opens_on_stored_scores_without_loading_the_model(open_page, tiny_everywhere,
                                                                        monkeypatch) -> None:
    import app.widgets.state

    open_page("../pages/learn/learn.py")  # scores the default quiz with the tiny model, and stores it
    app.widgets.state._score_store().clear()  # a fresh server: nothing in memory

    def no_model(name: str = "embedded"):
        raise AssertionError("the page loaded the model although the scores were stored")

    monkeypatch.setattr(app.widgets.state, "get_model", no_model)
    at = open_page("../pages/learn/learn.py")
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 2
    assert not at.get("progress")


def test_setup_says_a_failed_quiz_and_still_lets_the_studio_start(tiny_model_dir: Path, tmp_path: Path, monkeypatch,
                                                                   capsys) -> None:
    monkeypatch.setattr(score_cache, "scores_root", lambda: tmp_path / "scores")
    monkeypatch.setattr(score_cache, "embedded_model_dir", lambda: tiny_model_dir)

    def broken(name):
        raise RuntimeError("no memory left")

    monkeypatch.setattr(score_cache, "load_model", broken)
    assert score_cache.main() == 0
    assert "Learn's quiz not scored (RuntimeError: no memory left)" in capsys.readouterr().out
