"""Fast paths are measured, per family (issue 39): each one equals the model's own forward
or is switched off with a reason, a broken one is caught by the probe and the run falls
back, and the check is measured once per model.

Run with `-s` to see the support table (`test_support_table`): which family gets which path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from calm_core.scoring import decoder, fast_paths, path_checks
from calm_core.scoring.fast_paths import LOGIT_TOLERANCE, frozen_prefix_check
from calm_core.scoring.forward import causal_lm, left_pad_batch, supports_frozen_prefix
from calm_core.scoring.frozen_prefix import FrozenPrefixModel
from calm_core.scoring.models import ModelSpec, load_model
from calm_core.scoring.probes import probe_sequences, relative_gap
from tests.families import FAMILIES, FAMILY_LAYERS, build_family

SPLIT = FAMILY_LAYERS - 2  # LoRA on the top two layers, two layers frozen below
TOL = LOGIT_TOLERANCE[torch.float32]
MEASURED_ON = {"gemma2", "gemma3"}  # must keep the frozen prefix and the hidden path after the fix


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family's tiny model, built on first use and shared by this module's tests."""
    root = tmp_path_factory.mktemp("families")
    return {family: root / family for family in FAMILIES}


@pytest.fixture(scope="module")
def verdict_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fast-path-checks")


@pytest.fixture(autouse=True)
def _verdicts_here(verdict_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verdicts go to this module's folder, never the user's cache."""
    monkeypatch.setattr(path_checks, "checks_folder", lambda: verdict_cache)


@pytest.fixture()
def fresh_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of its own: a mutation must be measured, not read from an earlier check
    (the key hashes the code's files, which a monkeypatch leaves as they are)."""
    monkeypatch.setattr(path_checks, "checks_folder", lambda: tmp_path / "path_checks")
    return tmp_path / "path_checks"


_LOADED: dict[str, object] = {}  # family -> its model, shared by the tests that only read it


def _model(family: str, dirs: dict[str, Path], fresh: bool = False):
    """The family's tiny model; `fresh` for a test that changes it or must measure anew
    (LoRA attached in place, a mutation: the check is kept on the model object)."""
    folder = dirs[family]
    if not (folder / "config.json").is_file():
        build_family(family, folder)
    if fresh:  # never shared: a changed model or a mutated check stays in its own test
        return load_model(ModelSpec(name=str(folder), device="cpu"))
    if family not in _LOADED:
        _LOADED[family] = load_model(ModelSpec(name=str(folder), device="cpu"))
    return _LOADED[family]


def _freeze_below(model, split: int) -> None:
    """What LoRA on the top layers leaves trainable, without LoRA (whose targets are not
    this file's subject): every parameter of layers split.. and nothing else."""
    model.requires_grad_(False)
    for layer in causal_lm(model).model.layers[split:]:
        layer.requires_grad_(True)


def _logits_and_grads(model, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    params = [p for p in causal_lm(model if not isinstance(model, FrozenPrefixModel) else model.model).parameters()]
    params = [p for p in params if p.requires_grad]
    logits = model(**batch, logits_to_keep=3, use_cache=False).logits
    loss = torch.log_softmax(logits.float(), dim=-1)[..., :7].sum()
    return logits.detach(), [g.detach() for g in torch.autograd.grad(loss, params)]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_frozen_prefix_equals_the_model_or_is_off_with_a_reason(family: str, family_dirs) -> None:
    lm = _model(family, family_dirs)
    if not supports_frozen_prefix(lm.model):
        check = frozen_prefix_check(lm.model, SPLIT)
        assert not check.on and "lacks some of" in check.reason
        return
    _freeze_below(lm.model, SPLIT)
    check = frozen_prefix_check(lm.model, SPLIT)
    assert check.reason
    if family in MEASURED_ON:
        assert check.on, check.reason
    if not check.on:
        return
    batch = left_pad_batch(probe_sequences(lm.model.config)[::-1], 0, torch.device("cpu"))  # other order than the probe
    own, own_grads = _logits_and_grads(lm.model, batch)
    fast, fast_grads = _logits_and_grads(FrozenPrefixModel(lm.model, SPLIT), batch)
    assert relative_gap(fast, own) <= TOL
    for f, o in zip(fast_grads, own_grads, strict=True):
        torch.testing.assert_close(f, o, atol=10 * TOL * float(o.abs().max()), rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_scoring_path_has_a_verdict_and_gemma_keeps_the_hidden_path(family: str, family_dirs) -> None:
    support = fast_paths.fast_paths(_model(family, family_dirs).model)
    for name in fast_paths.SCORING_PATHS:
        assert getattr(support, name).reason
    if family in MEASURED_ON:  # Gemma 2's soft-cap is applied by output_head
        assert support.hidden_path.on, support.hidden_path.reason


@pytest.mark.parametrize("family", sorted(MEASURED_ON))
def test_gemma_shares_prefixes_and_scores_as_whole_sequences(family: str, family_dirs) -> None:
    """Gemma's sliding-window KV cache keeps only its last window - 1 keys; a cache
    rebuilt for the continuations (select_cache) must carry how many it has seen, or the
    mask slides over the wrong keys (8e-3 apart, caught by the probe)."""
    from calm_core.data.schema import MCItem
    from calm_core.scoring.scorer import Scorer
    from calm_core.scoring.prompts import ScoringConfig

    lm = _model(family, family_dirs)
    question = "Which of these is the largest city of the country whose capital is far away from here?"
    items = [MCItem("a", question, ("Paris", "Lyon", "Marseille"), 0), MCItem("b", "2 + 2 =", ("4", "five"), 0)]
    rule = ScoringConfig(rule="cloze")
    shared = Scorer.of(lm, progress=False, share_prefix=True).score(items, rule).logits
    plain = Scorer.of(lm, progress=False, share_prefix=False).score(items, rule).logits
    assert fast_paths.fast_paths(lm.model).prefix_sharing.on
    torch.testing.assert_close(torch.tensor(shared), torch.tensor(plain), atol=1e-5, rtol=0)


def _global_rotary_everywhere(rotary, hidden, position_ids, kinds):
    """A hand-made bug: every layer gets the full-attention rotary (Gemma 3's local layers use another base)."""
    shared = rotary(hidden, position_ids, layer_type=decoder.FULL)
    return {kind: shared for kind in kinds}


def test_a_broken_prefix_is_switched_off_by_the_probe(family_dirs, fresh_verdicts, monkeypatch) -> None:
    monkeypatch.setattr(decoder, "position_embeddings", _global_rotary_everywhere)
    lm = _model("gemma3", family_dirs, fresh=True)
    _freeze_below(lm.model, SPLIT)
    check = frozen_prefix_check(lm.model, SPLIT)
    assert not check.on and "differs from the model's own forward" in check.reason


def test_a_model_without_the_embedding_scale_is_switched_off(family_dirs, fresh_verdicts, monkeypatch) -> None:
    """Gemma scales its embeddings by sqrt(d) inside embed_tokens: a prefix that skips it differs."""

    def unscaled(self, ids, mask, positions, cache):
        embed = causal_lm(self.model).model.embed_tokens
        return self._layers(torch.nn.functional.embedding(ids, embed.weight), mask, positions, cache, 0, self.split)

    monkeypatch.setattr(FrozenPrefixModel, "_bottom", unscaled)
    lm = _model("gemma2", family_dirs, fresh=True)
    _freeze_below(lm.model, SPLIT)
    assert not frozen_prefix_check(lm.model, SPLIT).on


def test_a_prefix_whose_top_sharing_alone_is_broken_stays_on_without_it(family_dirs, fresh_verdicts, monkeypatch):
    """Gradients lost in the top layers' shared-prefix pass (logits still equal; what the
    probe found on the real Gemma 3 270M): the path stays on with every row run whole."""
    shared = FrozenPrefixModel._top_shared

    def detached(self, keys, groups, width):
        return {row: states.detach() for row, states in shared(self, keys, groups, width).items()}

    monkeypatch.setattr(FrozenPrefixModel, "_top_shared", detached)
    lm = _model("llama", family_dirs, fresh=True)
    _freeze_below(lm.model, SPLIT)
    check = frozen_prefix_check(lm.model, SPLIT)
    assert check.on and check.share_top is False
    assert "each row's top layers run whole: sharing a prefix there differs" in check.reason


def test_the_verdict_is_measured_once_per_model(family_dirs, monkeypatch) -> None:
    first = fast_paths.fast_paths(_model("llama", family_dirs).model)
    assert path_checks.checks_path(_model("llama", family_dirs).model).is_file()
    monkeypatch.setattr(fast_paths, "probe_scoring_paths", lambda *a: pytest.fail("measured twice"))
    assert fast_paths.fast_paths(_model("llama", family_dirs, fresh=True).model) == first  # a new load reads the disk


def test_feature_capture_off_reads_the_final_norm_states(family_dirs, monkeypatch) -> None:
    """Where the head's input is not the final-norm state, `head_inputs` gives the base
    model's last_hidden_state instead, cut to logits_to_keep: the same numbers here."""
    from calm_core.scoring.forward import head_inputs
    from calm_core.scoring.path_checks import FastPathSupport, PathCheck, keep_support

    lm = _model("llama", family_dirs, fresh=True)  # its kept check is changed below
    batch = left_pad_batch(probe_sequences(lm.model.config), 0, torch.device("cpu"))
    support = fast_paths.fast_paths(lm.model)
    assert support.feature_capture.on, support.feature_capture.reason
    with torch.no_grad(), head_inputs(lm.model) as hooked:
        lm.model(**batch, logits_to_keep=2)
    keep_support(lm.model, FastPathSupport(support.hidden_path, PathCheck(False, "test"), support.prefix_sharing))
    with torch.no_grad(), head_inputs(lm.model) as fallback:
        lm.model(**batch, logits_to_keep=2)
    assert fallback[-1].shape == hooked[-1].shape
    torch.testing.assert_close(fallback[-1], hooked[-1])


def _train_two_steps(lm, tmp_path: Path, name: str):
    from calm_core.runs.rundir import RunDir
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    cfg = TrainConfig(
        method="calm", steps=2, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0,
        lr_theta=1e-2, lr_alpha=1e-1, scoring="cloze", lora={"r": 4, "alpha": 8, "layers": 2},
        train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation",
        eval_data=("builtin/capitals/test",), train_limit=4, heldout_limit=4, eval_limit=4,
    )  # fmt: skip
    run = RunDir.create(tmp_path, name, {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=lm)
    assert result.state == "finished" and result.step == 2
    return run


@pytest.mark.slow
def test_calm_trains_gemma3_through_the_frozen_prefix(family_dirs, tmp_path) -> None:
    """The issue's failure: Gemma 3 stopped at step 0 caching frozen layers (rotary_emb's layer_type)."""
    from calm_core.results.report import run_report_html

    run = _train_two_steps(_model("gemma3", family_dirs, fresh=True), tmp_path, "gemma3")
    choices = run.status.choices
    assert "<th>fast path: frozen prefix</th><td>used: LoRA on the top 2 layers only" in run_report_html(run)
    assert choices.frozen_prefix is not None and choices.frozen_prefix.used is True
    assert choices.fast_paths["frozen_prefix"].on is True
    assert set(choices.fast_paths) == {"frozen_prefix", *fast_paths.SCORING_PATHS}


@pytest.mark.slow
def test_a_run_on_a_broken_prefix_falls_back_and_says_why(family_dirs, tmp_path, fresh_verdicts, monkeypatch) -> None:
    monkeypatch.setattr(decoder, "position_embeddings", _global_rotary_everywhere)
    choices = _train_two_steps(_model("gemma3", family_dirs, fresh=True), tmp_path, "broken").status.choices
    assert choices.frozen_prefix is not None and choices.frozen_prefix.used is False
    assert "differs from the model's own forward" in choices.fast_paths["frozen_prefix"].reason


def test_the_train_page_shows_the_chosen_models_fast_paths(open_page, family_dirs, tmp_path) -> None:
    """Once measured (by any run or evaluation on this machine), the Train page shows which
    fast paths the chosen model got; before, it says when they will be measured."""
    folder = family_dirs["gemma3"]
    fast_paths.fast_paths(_model("gemma3", family_dirs).model)
    at = open_page("../pages/train/train.py")
    at.radio(key="train_model_kind").set_value("local directory").run()
    at.text_input(key="train_model_name").set_value(str(folder)).run()
    assert not at.exception, at.exception
    labels = [e.label for e in at.expander if e.label.startswith("Fast paths")]
    assert len(labels) == 1 and labels[0].startswith("Fast paths this model got: hidden path, feature capture")
    unmeasured = build_family("llama", tmp_path / "unmeasured", pad_token=False)  # another config: another fingerprint
    at.text_input(key="train_model_name").set_value(str(unmeasured)).run()
    assert not [e for e in at.expander if e.label.startswith("Fast paths")]
    assert any("measured against this model's own forward" in c.value for c in at.caption)


def test_fast_path_rows_say_used_or_not_and_why() -> None:
    from calm_core.results.fast_path_view import fast_path_items, fast_path_rows
    from calm_core.runs.choices_record import PathChoice

    record = {"hidden_path": PathChoice(True, "equal"), "frozen_prefix": PathChoice(False, "differs")}
    assert [(r["fast path"], r["used"], r["why"]) for r in fast_path_rows(record)] == [
        ("hidden path", "yes", "equal"),
        ("frozen prefix", "no", "differs"),
    ]
    assert fast_path_items(record)[1] == ("fast path: frozen prefix", "not used: differs")
    assert fast_path_rows(None) == []


def test_support_table(family_dirs) -> None:
    """Print which family gets which path (pytest -s): measured, never written by hand."""
    rows = ["| family | frozen prefix | hidden path | feature capture | prefix sharing |", "|---|---|---|---|---|"]
    for family in FAMILIES:
        lm = _model(family, family_dirs)
        support = fast_paths.fast_paths(lm.model)
        if supports_frozen_prefix(lm.model):
            _freeze_below(lm.model, SPLIT)
        cells = [frozen_prefix_check(lm.model, SPLIT)] + [getattr(support, n) for n in fast_paths.SCORING_PATHS]
        rows.append(f"| {family} | " + " | ".join(("on" if v.on else "off: " + v.reason) for v in cells) + " |")
    print("\n" + "\n".join(rows))
    assert len(rows) == len(FAMILIES) + 2
