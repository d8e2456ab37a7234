"""`calm train / runs / cancel / resume` with the real trainer on a tiny model."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch


from calm_core.cli import main
from calm_core.runs.rundir import RunDir

TINY = ["--train-data", "builtin/capitals/train", "--heldout-data", "builtin/capitals/validation",
        "--eval-data", "builtin/capitals/test", "--train-limit", "8", "--heldout-limit", "6", "--eval-limit", "6",
        "--scoring", "letter", "--batch-size", "2", "--set", "heldout_batch_size=2"]


def wait_for(predicate, timeout: float = 180.0, every: float = 0.5) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def only_run(root: Path) -> RunDir:
    runs = [p for p in root.iterdir() if (p / "status.json").is_file()]
    assert len(runs) == 1
    return RunDir.open(runs[0])


def test_foreground_train_writes_a_finished_run(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    argv = ["train", "--model", str(tiny_model_dir), "--method", "calm", "--name", "calm-tiny", "--steps", "2", "--runs-root", str(tmp_path),
            "--set", "eval_every=2", *TINY]
    assert main(argv) == 0
    threads_before = torch.get_num_threads()
    run = only_run(tmp_path)
    assert run.status.state == "finished"
    assert run.config.train["method"] == "calm" and (run.config.environment.versions or {})["torch"]
    cores = os.cpu_count() or 1  # threads = 0: every core but one, recorded, and this process's put back
    assert run.status.threads == {"threads": max(1, cores - 1),
                                     "why": f"every core but one of {cores}, at least 1 (threads = 0)"}
    assert torch.get_num_threads() == threads_before
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2]
    assert main(["runs", "--runs-root", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert run.run_id in listed and "[bome: drop" in listed  # the BOME diagnostics of the last steps
    assert "The model is from step" in listed and " held-out items" in listed  # `calm train`'s closing lines
    assert main(["runs", "--runs-root", str(tmp_path), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert {"q", "lambda", "inner_drop_frac", "coupling_ratio", "inert"} <= set(entry["bome"])
    out_json = tmp_path / "compare.json"
    assert main(["compare", run.run_id, "--runs-root", str(tmp_path), "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())["results"]
    assert {r["variant"] for r in rows} == {"base", "calm", "calm_theta_only"}  # 6 S_V items: too few for ts
    assert "calm_theta_only" in capsys.readouterr().out
    assert main(["compare", "--name-prefix", "nomatch", "--runs-root", str(tmp_path)]) == 2
    capsys.readouterr()
    assert main(["compare", "--name-prefix", "ca", "--runs-root", str(tmp_path), "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].startswith("| variant |") and [line.split(" | ")[0] for line in wide[2:]] == [
        "| base", "| calm", "| calm_theta_only"]
    target = tmp_path / "export"
    assert main(["export", run.run_id, str(target), "--runs-root", str(tmp_path)]) == 0
    assert (target / "adapter_model.safetensors").is_file() and (target / "calibration_head.safetensors").is_file()
    card = (target / "README.md").read_text()
    assert "method `calm`" in card and "calm_theta_only" in card
    assert main(["export", run.run_id, str(target), "--runs-root", str(tmp_path)]) == 2  # never overwrites


def test_job_threads_leave_a_core_unless_set_and_a_bad_count_is_refused() -> None:
    from calm_core.training.config import TrainConfig

    assert TrainConfig().job_threads(2) == (1, "every core but one of 2, at least 1 (threads = 0)")
    assert TrainConfig().job_threads(16)[0] == 15 and TrainConfig().job_threads(1)[0] == 1
    assert TrainConfig(threads=2).job_threads(2) == (2, "set (threads)")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="`threads`"):
            TrainConfig(threads=bad)


def test_runs_flags_an_inert_coupling(tmp_path: Path, capsys) -> None:
    run = RunDir.create(tmp_path, "inert", {"train": {"method": "calm", "eta": 0.5}})
    for step in (1, 2):
        run.append_metrics({"step": step, "elapsed": float(step), "bome/q": 1e-6, "bome/lambda": 0.5,
                            "bome/inner_drop_frac": 1e-5, "bome/coupling_ratio": 1e-4})
    assert main(["runs", "--runs-root", str(tmp_path)]) == 0
    assert "coupling INERT" in capsys.readouterr().out


def test_bad_config_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("method: calm\nscope: tokens\n")
    assert main(["train", "--config", str(config), "--runs-root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`scope`" in err
    assert not (tmp_path / "runs").exists()  # nothing created for a rejected config


def test_detached_job_killed_then_resumed_continues_its_curve(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    argv = ["train", "--model", str(tiny_model_dir), "--method", "sft", "--steps", "150", "--detach",
            "--runs-root", str(tmp_path), "--set", "checkpoint_every=2", "--select", "last", *TINY]  # all 150 steps
    assert main(argv) == 0
    run_id = capsys.readouterr().out.strip().splitlines()[-1]
    run = RunDir.at(run_id, tmp_path)
    assert wait_for(lambda: run.latest_checkpoint() is not None and run.latest_checkpoint()[0] >= 4), \
        (run.path / "stdout.log").read_text() if (run.path / "stdout.log").exists() else run.status
    os.killpg(run.status.pid, signal.SIGKILL)
    assert wait_for(lambda: run.state().state == "failed", timeout=30)
    assert run.state().resumable
    assert main(["resume", run_id, "--runs-root", str(tmp_path)]) == 0
    assert wait_for(lambda: run.status.state == "finished", timeout=300), run.status
    steps = [r["step"] for r in run.read_metrics()]
    assert steps == list(range(0, 151))  # step 0's evaluation, then no gap, no duplicate across the kill


def test_a_head_that_would_rerank_cloze_options_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    argv = ["train", "--scoring", "cloze", "--scope", "options", "--runs-root", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "re-rank" in err and "letter" in err
    assert not (tmp_path / "runs").exists()


def test_every_declared_setting_is_a_train_flag_with_its_help() -> None:
    """`calm train` flags come from the declared settings (calm_core.settings.setting) of
    TrainConfig, its bilevel section and the methods' Settings: each parses into its place
    in the nested config with its own type and help; undeclared fields stay --set only."""
    import argparse

    from calm_core.cli.train import add_parsers, resolve_config
    from calm_core.training.config import train_settings

    flags = train_settings()
    assert {"steps", "lr_alpha", "inner_steps", "eta", "seed", "beta", "cft_gamma"} <= set(flags)
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="cmd"))
    train = parser._subparsers._group_actions[0].choices["train"]  # noqa: SLF001 - argparse keeps no public map
    helps = {a.dest: a.help for a in train._actions}
    assert all(helps[name] == spec.help.replace("%", "%%") for name, spec in flags.items())
    args = parser.parse_args(["train", "--steps", "7", "--lr-alpha", "0.25", "--inner-rule", "fixed",
                              "--train-limit", "9", "--eta", "0.75"])
    cfg = resolve_config(args)
    assert (cfg.steps, cfg.lr_alpha, cfg.bilevel.inner_rule, cfg.train_limit, cfg.bilevel.eta) == (7, 0.25, "fixed", 9, 0.75)
    cfg = resolve_config(parser.parse_args(["train", "--method", "regularization", "--beta", "0.3"]))
    assert cfg.method_settings.beta == 0.3
    with pytest.raises(ValueError, match="setting of method 'regularization'"):
        resolve_config(parser.parse_args(["train", "--method", "calm", "--beta", "0.3"]))
    assert "--frozen-prefix" not in train.format_help()


def test_a_task_brings_its_own_defaults_and_preset_part_to_the_cli_and_the_studio() -> None:
    """`calm train --preset quick --task openqa` starts from the open-answer sets and the
    quick preset's open-answer part (5 samples), as the studio's Train page does: both go
    through TrainConfig.preset, which reads training/tasks/openqa.py's DEFAULTS and PRESETS."""
    import argparse

    from calm_core.cli.train import add_parsers, resolve_config
    from calm_core.training.config import DEFAULT_LR, TrainConfig
    from calm_core.training.tasks import get_task

    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="cmd"))
    cli = resolve_config(parser.parse_args(["train", "--preset", "quick", "--task", "openqa"]))
    studio_base = TrainConfig.preset("quick", task="openqa")
    assert cli == studio_base
    assert cli.train_data == get_task("openqa").DEFAULTS["train_data"] and cli.generation.n_samples == 5
    assert cli.lr_alpha == DEFAULT_LR["sgd"]["lr_alpha"]  # one default for both (it was 50x apart once)
    assert TrainConfig.preset("quick").train_data == "builtin/capitals/train"  # mcqa keeps TrainConfig's own
    given = resolve_config(parser.parse_args(["train", "--preset", "quick", "--task", "openqa",
                                              "--set", 'generation={"prompt": "plain"}']))
    assert (given.generation.n_samples, given.generation.prompt) == (5, "plain")  # sections merge, not replace


def test_train_ends_with_the_selected_step_the_recommendation_and_the_evidence(tmp_path: Path, monkeypatch,
                                                                              capsys) -> None:
    """After "run X: finished", `calm train` prints verdict_lines: the trainer is replaced
    by one that writes a results.json by hand (tests/test_verdict.py), so this runs fast."""
    from types import SimpleNamespace

    import calm_core.cli.train as cli_train
    import calm_core.training.loop as loop
    from calm_core.io import atomic_write_json
    from calm_core.training.config import TrainConfig
    from calm_core.launch import create_run
    from tests.test_verdict import DATASET, results

    def fake_train(cfg, run, progress=None):
        atomic_write_json(run.path / "results.json", results(recommended="vs", with_ts=False))
        return SimpleNamespace(state="finished", step=12)

    monkeypatch.setattr(loop, "train", fake_train)
    monkeypatch.setattr(cli_train, "_graceful", lambda run: None)  # keep pytest's own signal handlers
    run = create_run(TrainConfig.preset("quick"), root=tmp_path)
    assert cli_train.run_in_process(run, show_progress=False) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run {run.run_id}: finished at step 12 ({run.path})"
    assert out[1].startswith("The model is from step 4, selected on S_V: NLL 0.8123")
    assert out[2].startswith("Use vector scaling: on 24 held-out items it lowers the NLL (NLL change -0.10, 90% "
                             "interval -0.18 to -0.03).") and "--variant recommended" in out[2]
    assert out[3] == "No ts: no `ts` variant: S_V has 8 items, fewer than 10"
    assert out[4] == (f"{DATASET}: best calibrated CALM (ECE 0.060); flags none; "
                      "recommended on S_V: Use vector scaling")  # the verdict row
    assert out[5].split()[:3] == ["variant", "S_V", "NLL"]  # the recommendation's S_V evidence, lowest NLL first
    assert out[6].startswith("vector scaling") and out[6].split()[-1] == "recommended"
    evidence = out.index(next(line for line in out if line.split()[:2] == ["dataset", "variant"]))
    assert out[evidence].split() == ["dataset", "variant", "acc", "ece", "auroc", "confidence"]
    rows = out[evidence + 1:evidence + 4]
    assert [line.split()[:2] for line in rows] == [[DATASET, "base"], [DATASET, "vs"], [DATASET, "calm"]]
    assert rows[1].split()[2] == "*" and "0.060 [0.030, 0.120]" in rows[2]  # vs recommended; 90% intervals
    assert out[-1].startswith("(* recommended on S_V")

    def damaging_train(cfg, run, progress=None):
        (run.path / "results.json").write_text("{not json")
        return SimpleNamespace(state="finished", step=12)

    monkeypatch.setattr(loop, "train", damaging_train)
    assert cli_train.run_in_process(run, show_progress=False) == 0  # a damaged file: said, the run still finished
    assert "could not read the run's verdict" in capsys.readouterr().out


def test_calibrate_on_all_fits_post_hoc_calibrators_k_fold_on_every_labelled_item(tiny_model_dir: Path, tmp_path: Path,
                                                                                   capsys) -> None:
    """`--calibrate-on all`: 6 S_V items are too few for TS (the test above has no `ts`), but
    with the 8 S_T items the 14 labelled items are enough. The note before launch says what
    both support; config.json and results.json record the choice; the recommendation reads
    out-of-fold predictions on all 14 items for the post-hoc choice and S_V's 6 for CALM."""
    from calm_core.calibration.recommend import LABELLED_ITEMS

    argv = ["train", "--model", str(tiny_model_dir), "--steps", "1", "--runs-root", str(tmp_path),
            "--calibrate-on", "all", *TINY]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "calm: note: 6 held-out items: too few to fit even one temperature" in err
    assert "With k-fold on all 14 labelled items, the post-hoc choice has enough items to fit one temperature" in err
    run = only_run(tmp_path)
    assert run.config.train["calibrate_on"] == "all"
    results = run.results()
    assert {r.variant for r in results.rows} == {"base", "ts", "vs", "calm", "calm_theta_only"}
    assert results.calibrators["ts"]["calibrate_on"] == "all"
    assert results.calibrators["ts"]["fit_on"] == "builtin/capitals/train + builtin/capitals/validation"
    rec = results.recommendation
    assert rec is not None and rec.calibrate_on == "all"
    assert (rec.posthoc_fit or "").endswith("cross-fitted on all labelled items (S_T + S_V)")
    pooled, heldout = rec.stages["all labelled"], rec.stages["S_V"]
    assert pooled.comparison and pooled.comparison.n == 14 and pooled.comparison.items == LABELLED_ITEMS
    assert set(pooled.heldout) == {"base", "ts", "vs"}  # the trained model saw S_T: not in the pooled stage
    assert heldout.comparison and heldout.comparison.n == 6 and set(heldout.heldout) == {"base", "calm", "ts", "vs"}
    assert rec.variant == (heldout if heldout.variant == "calm" else pooled).variant
    from calm_core.results.advice import heldout_rows

    assert "CALM" in [row["variant"] for row in heldout_rows(results)]  # every trained variant (issue 40)
    last = run.status.final  # the final evaluation's own progress, which the Monitor shows: its last stage
    from calm_core.training.tasks.mcqa import CROSS_FIT_STAGE

    assert last is not None and last.stage == CROSS_FIT_STAGE and last.done == last.total == 2 * 5  # ts, vs: 5 folds
    assert run.status.timings["cross_fit_s"] > 0 and run.status.timings["sizes"]["cross_fit"] > 0


def test_calibrate_on_is_refused_for_open_answers_in_one_line(tmp_path: Path, capsys) -> None:
    assert main(["train", "--task", "openqa", "--calibrate-on", "all", "--runs-root", str(tmp_path)]) == 2
    assert "Expected `calibrate_on` heldout for task openqa" in capsys.readouterr().err
