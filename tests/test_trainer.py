"""The training loop on a tiny random model: every method trains, the run directory is
written as the design says, cancel checkpoints, and resume reproduces an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from calm_core.training.methods import METHODS
from calm_core.scoring.models import ModelSpec, load_model
from calm_core.runs.rundir import RunDir
from calm_core.training.config import TrainConfig
from calm_core.training.batches import batch_indices
from calm_core.training.loop import train

DATA = dict(train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation",
            eval_data=("builtin/capitals/test",), train_limit=8, heldout_limit=6, eval_limit=6)


def fresh_lm(tiny_model_dir: Path):
    """LoRA wraps a model in place, so every training test gets its own copy."""
    return load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))


def small_config(**overrides) -> TrainConfig:
    settings = dict(steps=2, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0,
                    lr_theta=1e-2, lr_alpha=1e-1, scoring="letter", **DATA)
    settings.update(overrides)
    return TrainConfig(**settings)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_moves_trainable_and_keeps_frozen(tiny_model_dir: Path, method: str) -> None:
    lm = fresh_lm(tiny_model_dir)
    frozen_before = lm.model.model.layers[0].mlp.up_proj.weight.detach().clone()
    seen = {}

    def snapshot(step, total, record):
        seen[step] = record

    cfg = small_config(method=method, select="last")  # the last step's parameters stay in the model
    result = train(cfg, lm=lm, progress=snapshot)
    assert result.state == "finished" and result.step == 2
    model = lm.model  # PEFT injected the adapters into this module tree in place
    lora = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora and any(p.detach().abs().sum() > 0 for p in lora)  # lora_B starts at zero
    torch.testing.assert_close(model.model.layers[0].mlp.up_proj.weight, frozen_before)
    assert "train/lower_loss" in seen[2]
    if METHODS[method].USES_HEAD and method != "sft":
        tau = seen[2].get("alpha/tau_mean")
        assert tau is not None and tau != pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize(
    "scoring, scope",
    [("letter", "options"), ("letter", "vocab"), ("cloze", "scalar"), ("cloze", "adaptive"), ("letter", "adaptive")],
)
def test_run_directory_is_written(tiny_model_dir: Path, tmp_path: Path, scoring: str, scope: str) -> None:
    cfg = small_config(steps=3, eval_every=2, checkpoint_every=2, heldout_limit=10, scoring=scoring, scope=scope)
    run = RunDir.create(tmp_path, "run-a", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    records = run.read_metrics()
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # step 0: the untouched model, evaluated
    assert "bome/lambda" not in records[0] and "eval/heldout/nll" in records[0]
    assert "bome/lambda" in records[1] and "eval/heldout/ece" in records[1] and "eval/builtin/capitals/test/acc" in records[3]
    if scope == "options":  # the vectors themselves; the vocab scope logs summaries only
        assert "alpha/tau" in records[1] and len(records[1]["alpha/tau"]) == 4
    assert "alpha/tau_mean" in records[1]
    assert "lower/st_nll" in records[0]
    selected = run.status.selection.selected_step
    assert selected in (0, 1, 2, 3) and records[3]["select/selected_step"] == selected
    assert run.status.state == "finished" and run.status.step == 3
    step, checkpoint = run.latest_checkpoint()
    assert step == 3
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert (checkpoint / "calibration_head.safetensors").is_file()
    if scope == "adaptive":  # l(h) where the rule allows shifts: letter, one per option position
        from calm_core.calibration.head import CalibrationHead

        head = CalibrationHead.load(checkpoint)
        assert head.options == (4 if scoring == "letter" else 0)
        if scoring == "letter":
            assert head.shift_weights.abs().sum() > 0  # the bilevel step moved U
    assert run.status.choices.quantization["four_bit"] is False
    results = json.loads((run.path / "results.json").read_text())["results"]
    variants = {r["variant"] for r in results}
    assert variants == {"base", "ts", "vs", "calm", "calm_theta_only"}
    from calm_core.runs.layout import predictions_path
    import pandas as pd

    for row in results:
        frame = pd.read_parquet(predictions_path(run.path, row["variant"], row["dataset"]))
        assert len(frame) == row["n"] == 6
        assert frame["prediction"].eq(frame["gold"]).mean() == pytest.approx(row["acc"])


def _final_weights(lm) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in lm.model.named_parameters() if p.requires_grad}


def test_cancel_then_resume_equals_uninterrupted(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(steps=4)
    straight_lm = fresh_lm(tiny_model_dir)
    train(cfg, run=RunDir.create(tmp_path, "straight", {"train": cfg.to_dict()}), lm=straight_lm)

    run = RunDir.create(tmp_path, "interrupted", {"train": cfg.to_dict()})

    def cancel_after_two(step, total, record):
        if step == 2:
            run.request_cancel()

    first = train(cfg, run=run, lm=fresh_lm(tiny_model_dir), progress=cancel_after_two)
    assert first.state == "cancelled" and first.step == 2
    assert run.status.state == "cancelled" and run.latest_checkpoint()[0] == 2

    resumed_lm = fresh_lm(tiny_model_dir)
    second = train(cfg, run=run, lm=resumed_lm)
    assert second.state == "finished" and second.step == 4
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2, 3, 4]
    straight, resumed = _final_weights(straight_lm), _final_weights(resumed_lm)
    assert straight.keys() == resumed.keys()
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=1e-5, atol=1e-6)


def test_batches_depend_only_on_seed_and_step() -> None:
    assert batch_indices(10, 3, 4, 0) == batch_indices(10, 3, 4, 0)
    epoch0 = [i for s in range(3) for i in batch_indices(10, 3, s, 0)]
    assert len(set(epoch0)) == 9  # one epoch visits distinct items


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="`scope`"):
        TrainConfig(scope="tokens")
    with pytest.raises(ValueError, match="`steps`"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="unknown field"):
        TrainConfig.from_dict({"stepz": 3})


def test_final_evaluation_reuses_the_selected_steps_scores(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Each evaluation scores the trained model on every set; the final evaluation reads the
    selected step's scores (the same parameters, put back) instead of scoring again: only
    the base variant is scored at the end."""
    import calm_core.training.tasks.mcqa as trainer_module

    calls: list[tuple[int, bool, bool]] = []
    final = [False]
    real, real_final = trainer_module._variant_scores, trainer_module.final_evaluation

    def counted(ctx, items, batch_size, use_head, use_adapter):
        if final[0]:
            calls.append((len(items), use_head, use_adapter))
        return real(ctx, items, batch_size, use_head, use_adapter)

    def final_evaluation(*args, **kwargs):
        final[0] = True
        return real_final(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "_variant_scores", counted)
    monkeypatch.setattr(trainer_module, "final_evaluation", final_evaluation)
    cfg = small_config(method="calm", scope="scalar", scoring="cloze",
                       eval_data=("builtin/capitals/test", "builtin/units/test"))
    run = RunDir.create(tmp_path, "reuse", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    # the end: both sets and S_V (for the recommendation) without the adapter (base; 6 S_V
    # items fit no TS), while calm and calm_theta_only come from the selected step's scores
    assert sorted(calls) == [(6, False, False)] * 3
    selected = run.status.selection.selected_step
    at_selected = next(r for r in run.read_metrics() if r["step"] == selected)
    calm = next(r for r in json.loads((run.path / "results.json").read_text())["results"] if r["variant"] == "calm")
    assert calm["acc"] == pytest.approx(at_selected["eval/builtin/capitals/test/acc"])
    assert calm["ece"] == pytest.approx(at_selected["eval/builtin/capitals/test/ece"])


def test_prefill_shows_its_progress_in_the_status(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Filling the cache can take a minute before step 1: the status phase says so (the
    Monitor and `calm runs` show it) and is cleared before the first step."""
    phases: list[object] = []
    real = RunDir.update_status

    def recorded(self, **fields):
        if "phase" in fields:
            phases.append(fields["phase"])
        return real(self, **fields)

    monkeypatch.setattr(RunDir, "update_status", recorded)
    cfg = small_config(method="sft", scoring="cloze", lora={"r": 4, "alpha": 8, "layers": 1})
    run = RunDir.create(tmp_path, "phase", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    filling = [p for p in phases if isinstance(p, str) and p.startswith("caching frozen layers")]
    items = run.status.extra["prefill"]["items"]
    assert filling[0] == f"caching frozen layers: 0/{items} items"  # shown before the first batch
    assert filling[-1] == f"caching frozen layers: {items}/{items} items"
    assert phases[phases.index(filling[-1]) + 1] is None  # cleared once the fill is done


def test_cancel_during_the_cache_fill_stops_it(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Cancel pressed while the cache fills: the fill stops at its next progress write
    and the run ends `cancelled` at step 0, not a minute later after the whole fill."""
    monkeypatch.setattr(RunDir, "cancel_requested", lambda self: True)
    cfg = small_config(method="sft", scoring="cloze", lora={"r": 4, "alpha": 8, "layers": 1})
    run = RunDir.create(tmp_path, "cancel-fill", {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert result.state == "cancelled" and result.step == 0
    assert run.status.extra["prefill"]["sequences_computed"] == 0 and run.status.state == "cancelled"


def test_quick_preset_evaluates_every_20_steps_or_every_tenth_of_a_long_run() -> None:
    """The same rule from Python and from `calm train --preset quick` (config file, --set
    and flags applied first); an explicit eval_every wins."""
    import argparse

    from calm_core.cli.train import add_parsers, resolve_config

    assert TrainConfig.preset("quick").eval_every == 20
    assert TrainConfig.preset("quick", steps=300).eval_every == 30
    assert TrainConfig.preset("quick", steps=300, eval_every=5).eval_every == 5
    assert TrainConfig.preset("paper", steps=300).eval_every == 20
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    for argv, expected in ((["--steps", "300"], 30), (["--set", "steps=1000"], 100), (["--steps", "300", "--eval-every", "7"], 7)):
        assert resolve_config(parser.parse_args(["train", "--preset", "quick", *argv])).eval_every == expected


@pytest.mark.parametrize("method", ["calm", "sft"])
def test_frozen_prefix_cache_trains_to_the_same_weights_and_results(tiny_model_dir: Path, tmp_path: Path,
                                                                   method: str, monkeypatch) -> None:
    """LoRA on the top layer only: caching layer 0 changes the cost, not the numbers."""
    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path / "cache"))  # the disk store goes here
    runs = {}
    for cached in (False, True):
        cfg = small_config(method=method, steps=3, scoring="cloze", frozen_prefix=cached, frozen_prefix_store=cached,
                           lora={"r": 4, "alpha": 8, "layers": 1})
        lm = fresh_lm(tiny_model_dir)
        run = RunDir.create(tmp_path, f"cached-{cached}", {"train": cfg.to_dict()})
        train(cfg, run=run, lm=lm)
        runs[cached] = (run, _final_weights(lm))
    assert runs[True][0].status.choices.frozen_prefix.used is True
    assert runs[False][0].status.choices.frozen_prefix.used is False
    assert any(path.stat().st_size > 0 for path in (tmp_path / "cache" / "frozen_prefix").rglob("data.arena"))
    prefill = runs[True][0].status.extra["prefill"]  # drawn training items + all of S_V + the evaluation set
    drawn = {i for step in range(3) for i in batch_indices(8, 2, step, cfg.seed)}
    assert prefill["items"] == len(drawn) + 6 + 6 and prefill["sequences_computed"] > 0
    assert "prefill" not in runs[False][0].status.extra
    # The cached path sums in another order (a shared prefix runs once, with a KV cache),
    # so hidden states differ by ~1e-7; Adam divides by sqrt(v), and where a gradient is
    # near 0 that noise becomes a share of a step (seen: 0.6% of one step on 1 of 256
    # weights). Allow 10% of one step (lr 1e-2), as tests/test_distributed.py does; a
    # wrong cache moves weights by whole steps.
    for name, weight in runs[False][1].items():
        torch.testing.assert_close(runs[True][1][name], weight, rtol=1e-2, atol=1e-3)
    results = [json.loads((run.path / "results.json").read_text())["results"] for run, _ in runs.values()]
    for uncached, cached in zip(*results):
        assert (uncached["variant"], uncached["dataset"]) == (cached["variant"], cached["dataset"])
        assert cached["acc"] == uncached["acc"] and cached["nll"] == pytest.approx(uncached["nll"], abs=1e-4)


def test_qlora_on_cpu_when_asked_trains_and_records_the_choice(tiny_model_dir: Path, tmp_path: Path) -> None:
    """4-bit NF4 base weights (bitsandbytes runs them on a CPU too) with the frozen-prefix
    cache over the quantized bottom layer: trains, and status.json says 4-bit and why."""
    pytest.importorskip("bitsandbytes")
    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu", load_in_4bit=True))
    assert "4bit" in type(lm.model.model.layers[0].self_attn.q_proj.weight).__name__.lower()
    cfg = small_config(method="calm", steps=2, scoring="cloze", load_in_4bit=True, lora={"r": 4, "alpha": 8, "layers": 1})
    run = RunDir.create(tmp_path, "qlora", {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=lm)
    choices = run.status.choices
    assert result.state == "finished" and choices.quantization == {"four_bit": True, "reason": "requested 4-bit (QLoRA)"}
    assert choices.frozen_prefix.used is True
    assert all(np.isfinite(r["train/lower_loss"]) for r in run.read_metrics() if r["step"] > 0)


def test_a_set_with_more_options_than_s_v_gets_no_vector_scaling_row(tiny_model_dir: Path, tmp_path: Path,
                                                                      capsys) -> None:
    """Vector scaling has a weight per option position fitted on S_V (4 options); an
    evaluation set of 5 gets every other row and a line saying why not that one, instead
    of a failed run."""
    wide = tmp_path / "five.jsonl"
    rows = [{"id": f"w{i}", "question": f"Pick the number {i}.", "choices": [str(i + k) for k in range(5)],
             "answer": 0} for i in range(4)]
    wide.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cfg = small_config(steps=1, scoring="cloze", scope="scalar", heldout_limit=10,
                       eval_data=("builtin/capitals/test", str(wide)), eval_limit=4)
    run = RunDir.create(tmp_path, "wide", {"train": cfg.to_dict()})
    result = train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert result.state == "finished"
    results = json.loads((run.path / "results.json").read_text())["results"]
    sets = sorted({r["dataset"] for r in results})
    assert len(sets) == 2
    (narrow,) = [d for d in sets if d == "builtin/capitals/test"]
    (five,) = [d for d in sets if d != narrow]
    by_set = {d: {r["variant"] for r in results if r["dataset"] == d} for d in sets}
    assert "vs" in by_set[narrow] and "vs" not in by_set[five]
    assert {"base", "ts", "calm"} <= by_set[five]
    assert f"{five}: no vs row (fitted on 4 option positions, this set has 5)" in capsys.readouterr().err


def test_a_cancel_asked_before_the_first_step_skips_the_step_0_evaluation(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Cancel pressed while the job loaded or filled its cache: the calibrated stop's
    evaluation of the untouched model (minutes on a large held-out set) is not run first;
    the run ends `cancelled` at step 0 with no metrics row."""
    monkeypatch.setattr(RunDir, "cancel_requested", lambda self: True)
    cfg = small_config(method="calm", eval_every=1, select="best")
    run = RunDir.create(tmp_path, "cancel-before-step-0", {"train": cfg.to_dict()})
    evaluated: list[str] = []
    monkeypatch.setattr("calm_core.training.loop.periodic_evaluation", lambda loop, kind: evaluated.append(kind))
    result = train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert (result.state, result.step, evaluated) == ("cancelled", 0, [])
    assert run.read_metrics() == [] and run.status.state == "cancelled"
