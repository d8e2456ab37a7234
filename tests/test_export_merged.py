"""calm export --merged: a plain transformers folder, the adapter merged and the head folded.

Tiny runs under the letter rule (scalar head: folded exactly; vocab head on a Llama, whose
LM head takes no bias: temperatures folded, shifts by the card's formula; centred options
head: the formula) and under cloze (scalar: the formula) are exported merged, then loaded
with `AutoModelForCausalLM.from_pretrained(DIR)` alone in a Python that cannot import
calm_core. There the letter-scalar folder's plain softmax over the letters' logits, and
every folder's card code (`calibrated(question, options)`), must give the run's own
calibrated probabilities and top answers (its predictions file) to 1e-4.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from calm_core.calibration.head import CalibrationHead
from calm_core.runs.layout import predictions_path
from calm_core.runs.rundir import RunDir
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.truncation import letter_prompt_ids
from calm_core.training.loop import train
from calm_core.export.folder import export_run
from calm_core.export.merged import CHECK_TOLERANCE
from calm_core.launch import run_config_record
from calm_core.calibration.posthoc.vector import VectorScaler
from tests.test_export import VS_WEIGHTS, _eval_items, _positive_vs_copy
from tests.test_trainer import fresh_lm, small_config

RUNS = {"letter-scalar": ("letter", "scalar"), "letter-vocab": ("letter", "vocab"),
        "letter-options": ("letter", "options"), "cloze-scalar": ("cloze", "scalar")}
FOLDS = {"letter-scalar": "exact", "letter-vocab": "temperature", "letter-options": "formula",
         "cloze-scalar": "formula", "letter-ts": "exact", "cloze-vs": "formula"}
VARIANTS = {"letter-ts": ("letter-options", "ts"), "cloze-vs": ("cloze-scalar", "vs")}  # post-hoc, over the base
TOLERANCE = 1e-4  # abs, on probabilities: the bound (float32 merged weights vs the run's adapter + head)


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunDir]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        for name, (rule, scope) in RUNS.items():
            cfg = small_config(model=str(tiny_model_dir), scoring=rule, scope=scope, heldout_limit=10, select="last")
            run = RunDir.create(root, f"tiny-{name}", run_config_record(cfg))
            train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
            out[name] = run
    return out


@pytest.fixture(scope="module")
def merged(runs: dict[str, RunDir], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("merged")
    out = {name: export_run(run, root / name, merged=True) for name, run in runs.items()}
    for name, (source, variant) in VARIANTS.items():
        run = _positive_vs_copy(runs[source], root) if variant == "vs" else runs[source]
        out[name] = export_run(run, root / name, variant, merged=True)
    return out


# A Python that cannot import calm_core: the folder alone, through transformers. Per job,
# `plain`: the softmax of the letters' logits at the prompt ids the parent gives (no head,
# no formula); `card`: the card's own code, run as written with the folder's path in it.
FRESH = r"""
import json, sys
sys.path.append(sys.argv[1])  # site-packages alone: torch, transformers
try:
    import calm_core
except ImportError:
    pass
else:
    raise SystemExit(f"calm_core is importable from {calm_core.__file__}")
import torch
from transformers import AutoModelForCausalLM
out = {}
for job in json.loads(open(sys.argv[2]).read()):
    model = AutoModelForCausalLM.from_pretrained(job["folder"]).eval()
    plain = {}
    with torch.no_grad():
        for item in job["letter"]:
            z = model(input_ids=torch.tensor([item["ids"]])).logits[0, -1, item["letters"]].double()
            plain[item["id"]] = torch.softmax(z, -1).tolist()
    scope = {}
    exec(job["snippet"], scope)  # defines calibrated(question, options)
    card = {item["id"]: scope["calibrated"](item["question"], item["choices"]).tolist() for item in job["items"]}
    out[job["name"]] = {"plain": plain, "card": card}
print(json.dumps(out))
"""


def _snippet(folder: Path) -> str:
    card = (folder / "README.md").read_text()
    code = card.split("```python\n")[1].split("```")[0]
    return code.replace('"path/to/this/folder"', json.dumps(str(folder)))


def _letter_jobs(run: RunDir, folder: Path, items: list) -> list[dict]:
    """The studio's own prompt ids and letter ids of each item (letter runs; [] for cloze)."""
    from transformers import AutoTokenizer

    cfg = ScoringConfig(rule=run.config.train["scoring"])
    if cfg.is_cloze:
        return []
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = letter_prompt_ids(items, cfg, tokenizer)
    return [{"id": it.id, "ids": p, "letters": letter_token_ids(tokenizer, it.n_choices, cfg)}
            for it, p in zip(items, ids, strict=True)]


@pytest.fixture(scope="module")
def fresh(runs, merged, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    scratch = tmp_path_factory.mktemp("fresh")
    jobs = []
    for name, folder in merged.items():
        items = _eval_items(runs[VARIANTS.get(name, (name,))[0]])
        jobs.append({"name": name, "folder": str(folder), "snippet": _snippet(folder),
                     "letter": _letter_jobs(runs[VARIANTS.get(name, (name,))[0]], folder, items),
                     "items": [{"id": it.id, "question": it.question, "choices": list(it.choices)} for it in items]})
    (scratch / "jobs.json").write_text(json.dumps(jobs))
    argv = [sys.executable, "-I", "-S", "-B", "-c", FRESH, sysconfig.get_paths()["purelib"], str(scratch / "jobs.json")]
    done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=600,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(scratch)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_probs(run: RunDir, variant: str | None = None) -> dict[str, list[float]]:
    train_cfg = run.config.train
    frame = pd.read_parquet(predictions_path(run.path, variant or train_cfg["method"], train_cfg["eval_data"][0]))
    return dict(zip(frame["id"], frame["probs"], strict=True))


def _worst(got: dict, expected: dict) -> float:
    assert got.keys() == expected.keys() and len(got) == 6
    return max(abs(a - b) for key in got for a, b in zip(got[key], expected[key], strict=True))


def _expected(runs: dict[str, RunDir], name: str) -> dict[str, list[float]]:
    """The run's own probabilities of what `name` exports: its method, or a post-hoc variant
    (vector scaling: VectorScaler with the copy's weights on the run's base scores)."""
    if name not in VARIANTS:
        return _run_probs(runs[name])
    run, variant = runs[VARIANTS[name][0]], VARIANTS[name][1]
    if variant != "vs":
        return _run_probs(run, variant)
    train_cfg = run.config.train
    frame = pd.read_parquet(predictions_path(run.path, "base", train_cfg["eval_data"][0]))
    fitted = run.results().calibrators["vs"]
    scaler = VectorScaler.fitted(weights=VS_WEIGHTS[: len(fitted["weights"])], biases=fitted["biases"])
    return {i: scaler.probs(np.asarray([z]))[0].tolist() for i, z in zip(frame["id"], frame["logits"], strict=True)}


@pytest.mark.parametrize("name", sorted(FOLDS))
def test_the_cards_code_gives_the_runs_calibrated_probabilities_and_answers(runs, merged, fresh, name) -> None:
    expected, got = _expected(runs, name), fresh[name]["card"]
    worst = _worst(got, expected)
    assert worst <= TOLERANCE, f"{name}: max |p_merged - p_run| = {worst:.2e}"
    assert all(np.argmax(got[key]) == np.argmax(expected[key]) for key in got)  # the studio's top answers
    record = json.loads((merged[name] / "calm_export.json").read_text())
    assert record["merged"]["fold"] == FOLDS[name]
    assert record["merged"]["check"]["max_abs_diff"] <= CHECK_TOLERANCE  # the export's own check
    # Not vacuous: the head (or calibrator) moves these probabilities far more than the tolerance.
    run = runs[VARIANTS.get(name, (name,))[0]]
    untouched = "base" if name in VARIANTS else f"{run.config.train['method']}_theta_only"
    assert _worst(expected, _run_probs(run, untouched)) > 10 * TOLERANCE


def test_a_folded_letter_run_is_calibrated_by_its_plain_softmax(runs, fresh) -> None:
    """Folding is exact for a scalar head under the letter rule: the letters' plain softmax is
    the run's calibrated probability, with no code from the card."""
    expected = _run_probs(runs["letter-scalar"])
    worst = _worst(fresh["letter-scalar"]["plain"], expected)
    assert worst <= TOLERANCE, f"max |softmax(letters) - p_run| = {worst:.2e}"
    assert _worst(fresh["letter-ts"]["plain"], _expected(runs, "letter-ts")) <= TOLERANCE  # TS folds the same way
    # The vocab head's shifts are not in a Llama's weights: its plain softmax is not the run's.
    assert _worst(fresh["letter-vocab"]["plain"], _run_probs(runs["letter-vocab"])) > TOLERANCE


def test_the_merged_folder_is_plain_transformers_untied_and_portable(runs, merged, tiny_model_dir: Path) -> None:
    folder = merged["letter-scalar"]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "calm_export.json", "tokenizer.json"} <= names
    assert not names & {"adapter_config.json", "adapter_model.safetensors", "calm_head.py",
                        "calibration_head.safetensors"}
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is False  # tiny Llama ties them: the fold needs its own LM head
    record = json.loads((folder / "calm_export.json").read_text())
    assert record["merged"]["tied_untied"] is True
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        embed, head = f.get_tensor("model.embed_tokens.weight"), f.get_tensor("lm_head.weight")
    tau = record["merged"]["temperature"]
    assert tau == pytest.approx(float(CalibrationHead.load(runs["letter-scalar"].exported_step()[1]).tau))
    with safe_open(str(tiny_model_dir / "model.safetensors"), framework="pt") as f:
        original = f.get_tensor("model.embed_tokens.weight")
    torch.testing.assert_close(embed, original)  # the inputs are the base model's (no adapter on them)
    torch.testing.assert_close(head, original / tau)  # the outputs carry the temperature
    for path in folder.glob("*.json"):  # no local path leaves the machine
        assert str(tiny_model_dir) not in path.read_text() and str(runs["letter-scalar"].path) not in path.read_text()


def test_the_card_gives_the_formula_with_its_check(runs, merged) -> None:
    from huggingface_hub import ModelCard

    record = json.loads((merged["cloze-scalar"] / "calm_export.json").read_text())
    card_text = (merged["cloze-scalar"] / "README.md").read_text()
    tau = record["merged"]["temperature"]
    assert f"p_k = softmax_k(S_k / T),   T = {tau!r}" in card_text
    assert f"scores / {tau!r}" in card_text  # the code applies the same T
    assert re.search(r"Checked when the folder was written .*to \d\.\de-\d\d", card_text)
    assert tau == pytest.approx(float(CalibrationHead.load(runs["cloze-scalar"].exported_step()[1]).tau))
    card = ModelCard(card_text)
    assert card.data.library_name == "transformers" and "merged" in card.data.tags
    vocab = (merged["letter-vocab"] / "README.md").read_text()
    assert "**not** folded" in vocab and "log_softmax(logits + l)" in vocab
    assert "calibration_shift.safetensors" in {p.name for p in merged["letter-vocab"].iterdir()}


def _fake_run(root: Path, model_dir: Path, head: torch.nn.Module, name: str = "fake") -> RunDir:
    """A run whose checkpoint holds a tiny LoRA adapter and `head` (no training)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    cfg = small_config(model=str(model_dir))
    run = RunDir.create(root, name, run_config_record(cfg))
    torch.manual_seed(3)
    net = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), LoraConfig(r=2, target_modules=["q_proj"]))
    for name_, p in net.named_parameters():
        if "lora_B" in name_:
            torch.nn.init.normal_(p, std=0.05)  # a moved adapter: merging it changes the weights
    with run.writing_checkpoint(1) as directory:
        net.save_pretrained(directory)
        head.save(directory)
    return run


@pytest.fixture(scope="module")
def phi_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Phi: its LM head has a bias, so a vocab head's shifts fold too."""
    from transformers import AutoTokenizer, PhiConfig, PhiForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = PhiConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, max_position_embeddings=512)
    torch.manual_seed(0)
    target = tmp_path_factory.mktemp("tiny-phi")
    PhiForCausalLM(config).save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def test_a_vocab_heads_shifts_fold_into_a_bias_where_the_lm_head_has_one(phi_dir: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    size = AutoModelForCausalLM.from_pretrained(phi_dir).config.vocab_size
    head = CalibrationHead("vocab", size=size)
    torch.manual_seed(4)
    with torch.no_grad():
        head.log_temperature.copy_(torch.randn(size) * 0.3)
        head.shift.copy_(torch.randn(size))
    run = _fake_run(tmp_path / "runs", phi_dir, head)
    folder = export_run(run, tmp_path / "out", merged=True)
    record = json.loads((folder / "calm_export.json").read_text())["merged"]
    assert record["fold"] == "exact" and record["bias_folded"] is True
    tokenizer = AutoTokenizer.from_pretrained(phi_dir)
    ids = tokenizer("Question: Which planet is red?\nAnswer:", return_tensors="pt").input_ids
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(phi_dir), str(run.latest_checkpoint()[1]))
        plain = torch.log_softmax(adapted(input_ids=ids).logits[0, -1].double(), -1)  # (V,)
        expected = torch.log_softmax(head.double()(adapted(input_ids=ids).logits[0, -1].double()), -1)
        got = torch.log_softmax(AutoModelForCausalLM.from_pretrained(folder)(input_ids=ids).logits[0, -1].double(), -1)
    assert (got - expected).abs().max() <= TOLERANCE  # log-probabilities over the whole vocabulary
    assert (expected - plain).abs().max() > 1000 * TOLERANCE  # not vacuous: the head moves them


def test_an_input_adaptive_temperature_is_refused_with_the_reason(tiny_model_dir: Path, tmp_path: Path) -> None:
    from calm_core.calibration.adaptive_head import AdaptiveHead

    run = _fake_run(tmp_path / "runs", tiny_model_dir, AdaptiveHead(width=64))
    with pytest.raises(ValueError, match=r"adaptive head.*hidden state.*without --merged"):
        export_run(run, tmp_path / "out", merged=True)
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["runs"]
