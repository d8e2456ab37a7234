"""The model-family matrix (issue 39): the whole path on a tiny random model of every family.

Parametrised over `tests/families.py` (as peft tests its tuners), each family runs:

- its LoRA target modules found (scoring/lora_targets.py): `c_attn`, `query_key_value`,
  `qkv_proj`, `out_proj`, not only Llama's `q_proj`;
- scoring under cloze and letter equal to a plain forward (log-softmax sums of
  `model(input_ids).logits`, one unpadded sequence at a time, computed here);
- features equal to `output_hidden_states` (the final-norm state at the last prompt token);
- two CALM steps under the scalar and the adaptive head scope with the default fast
  paths (LoRA on the top 2 of 4 layers, so a frozen prefix exists below them; whether it
  is used, and why, is the run's own choice);
- TS and ATS fitted on its scores (calibration/posthoc);
- every export variant (the trained scalar and adaptive models, ts, vs, ats, base)
  loading in a python without calm_core and giving the run's probabilities.

Two tokenizer variants ride along: `llama-nopad` (no pad token) and `gpt2-bare` (no pad
token and no chat template, as GPT-2's own tokenizer ships).

Each cell's outcome is recorded (conftest.py -> families.record_cell) and printed as a
table at the end of the session; `scripts/family_table.py` writes docs/families.md from it.

Budget: the whole matrix must stay a few minutes of CI on 2 cores. So models are built
once per session, scores once per (case, rule), each run trains 2 steps with one inner
step on a handful of items, and every export of every family is scored by ONE fresh
python (starting torch + transformers + peft costs seconds each time).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from calm_core.runs.choices_record import RunChoices
from tests.families import CASES, CONFIGS, FAMILIES, KNOWN_BREAKS, case_marks

RULES = ("cloze", "letter")
SCOPES = ("scalar", "adaptive")
N_ITEMS = 4  # items scored against the plain forward
TOLERANCE = 1e-4  # abs, on summed log-probs / logits / states: float32, padded batches vs one sequence
EXPORT_TOLERANCE = 1e-5  # abs, on probabilities (as tests/test_export.py)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    """One torch thread for the matrix, restored after: a 64-wide model is all per-op
    overhead, which a second thread only adds to (a tiny CALM run took 1.2 s of CPU on one
    thread and 7.7 s on two, beside other jobs on this 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cells(*columns: str, kind: str = "", cases: Any = CASES) -> list[Any]:
    """pytest params (case, column) for every case (of `cases`), each with the known-break
    marks of `kind + column` (families.KNOWN_BREAKS: `cloze`, `features cloze`, `scalar`, ...)."""
    return [
        pytest.param(case, column, id=f"{case}-{column}", marks=case_marks(case, f"{kind}{column}"))
        for case in cases
        for column in columns
    ]


# --- LoRA targets -------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_targets_are_found_in_the_familys_own_layers(record_property, family: str) -> None:
    """Attention and MLP groups are found inside the decoder blocks of every family, cover
    peft's own table where it has an entry, and adapt the top k blocks only."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TABLE
    from transformers import AutoModelForCausalLM

    from calm_core.scoring.adapters import LoraSettings, attach_lora
    from calm_core.scoring.lora_targets import block_linears, layer_stack, resolve_targets

    model = AutoModelForCausalLM.from_config(CONFIGS[family](512, bos_token_id=1, eos_token_id=2, pad_token_id=0))
    stack = layer_stack(model)
    assert stack is not None and stack.count == model.config.num_hidden_layers
    linears = block_linears(model)
    attention, mlp = resolve_targets(model, ("attention",)), resolve_targets(model, ("mlp",))
    assert attention and mlp and not set(attention) & set(mlp)
    assert {p for p, g in linears.items() if g == "attention"} and len(linears) >= 4
    for name in PEFT_TABLE.get(model.config.model_type, []):  # peft's names are among ours
        assert any(p == name or p.endswith("." + name) for p in linears), (family, name)
    peft_model, record = attach_lora(model, LoraSettings(r=2, layers=2))
    adapted = {n.split(".lora_A")[0] for n, _ in peft_model.named_modules() if n.endswith("lora_A")}
    depth = {int(n.split(f"{stack.pattern}.")[1].split(".")[0]) for n in adapted}
    assert depth == {stack.count - 2, stack.count - 1}  # the top 2 blocks, nothing below, no LM head
    assert len(adapted) == 2 * sum(g == "attention" for g in linears.values())
    assert record["targets"] == attention and record["layer_stack"] == stack.path
    record_property("LoRA targets (attention / mlp)", f"{', '.join(attention)} / {', '.join(mlp)}")


def test_a_target_list_that_matches_nothing_is_refused_with_the_candidates() -> None:
    from transformers import AutoModelForCausalLM

    from calm_core.scoring.adapters import LoraSettings, attach_lora
    from calm_core.scoring.lora_targets import resolve_targets

    gpt2 = AutoModelForCausalLM.from_config(CONFIGS["gpt2"](512))
    with pytest.raises(ValueError, match=r"among \['attn.c_attn', 'attn.c_proj', 'mlp.c_fc', 'mlp.c_proj'\].*'q_proj'"):
        attach_lora(gpt2, LoraSettings(target_modules=("q_proj", "v_proj")))
    assert resolve_targets(gpt2, ("c_attn", "c_proj")) == ["c_attn", "c_proj"]  # a user's list wins
    assert resolve_targets(gpt2, ("all",)) == ["c_attn", "c_proj", "c_fc"]
    llama = AutoModelForCausalLM.from_config(CONFIGS["llama"](512))
    assert resolve_targets(llama, ("q_proj", "down_proj")) == ["q_proj", "down_proj"]


def test_target_modules_are_groups_by_default_and_parse_from_a_string() -> None:
    """The default asks for the attention group, the paper preset for every block linear;
    `--set 'lora={"target_modules": "c_attn,c_proj"}'` gives names, not letters."""
    from calm_core.training.config import TrainConfig

    assert TrainConfig().lora.target_modules == ("attention",)
    assert TrainConfig.preset("paper").lora.target_modules == ("all",)
    assert TrainConfig(lora={"target_modules": "c_attn, c_proj"}).lora.target_modules == ("c_attn", "c_proj")
    assert TrainConfig(lora={"target_modules": ["mlp"]}).to_dict()["lora"]["target_modules"] == ["mlp"]


# --- scoring and features against the model's own forward ------------------------------------


@pytest.fixture(scope="session")
def scored(family_lm) -> Any:
    """scored(case, rule) -> (scores with features, reference): memoised per session."""
    cache: dict[tuple[str, str], Any] = {}

    def get(case: str, rule: str) -> Any:
        if (case, rule) not in cache:
            from calm_core.scoring.evaluate import load_mc_items
            from calm_core.scoring.scorer import Capture, Scorer
            from calm_core.scoring.prompts import ScoringConfig

            lm = family_lm(case)
            items = load_mc_items("builtin/capitals/test", limit=N_ITEMS)
            cfg = ScoringConfig(rule=rule)
            scores = Scorer.of(lm, batch_size=8, progress=False).score(items, cfg, capture=Capture.FEATURES)
            cache[case, rule] = (scores, _plain_forward(lm, items, cfg))
        return cache[case, rule]

    return get


def _plain_forward(lm: Any, items: list, cfg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(option scores (N, K), states (N, d)) from `model(input_ids)` on one unpadded
    sequence at a time: log-softmax sums over a cloze continuation's tokens or the letters'
    logits at the answer position, and `output_hidden_states[-1]` at the last prompt token."""
    from calm_core.scoring.prompts import letter_token_ids
    from calm_core.scoring.truncation import cloze_requests, letter_prompt_ids

    k = max(it.n_choices for it in items)
    scores, states = np.full((len(items), k), -np.inf), []
    with torch.no_grad():
        if cfg.is_cloze:
            for i, pairs in enumerate(cloze_requests(items, cfg, lm.tokenizer)):
                for j, (context, continuation) in enumerate(pairs):
                    out = lm.model(torch.tensor([context + continuation]), output_hidden_states=True)
                    logprobs = out.logits[0].double().log_softmax(-1)
                    scores[i, j] = sum(float(logprobs[len(context) - 1 + t, c]) for t, c in enumerate(continuation))
                states.append(out.hidden_states[-1][0, len(context) - 1])
        else:
            letters = letter_token_ids(lm.tokenizer, k, cfg)
            for i, ids in enumerate(letter_prompt_ids(items, cfg, lm.tokenizer)):
                out = lm.model(torch.tensor([ids]), output_hidden_states=True)
                scores[i, : items[i].n_choices] = out.logits[0, -1, letters[: items[i].n_choices]].double().numpy()
                states.append(out.hidden_states[-1][0, -1])
    return scores, torch.stack(states).numpy()


@pytest.mark.parametrize("case, rule", cells(*RULES))
def test_scores_equal_a_plain_forward(scored, case: str, rule: str) -> None:
    scores, (reference, _) = scored(case, rule)
    worst = float(np.max(np.abs(np.where(np.isfinite(reference), scores.logits - reference, 0.0))))
    assert worst <= TOLERANCE, f"{case} {rule}: max |score - plain forward| = {worst:.2e}"
    assert np.array_equal(np.isfinite(scores.logits), np.isfinite(reference))


@pytest.mark.parametrize("case, rule", cells(*RULES, kind="features "))
def test_features_equal_output_hidden_states(scored, case: str, rule: str) -> None:
    scores, (_, states) = scored(case, rule)
    assert scores.features is not None and scores.features.shape == states.shape
    worst = float(np.max(np.abs(scores.features - states)))
    assert worst <= TOLERANCE, f"{case} {rule}: max |h - output_hidden_states| = {worst:.2e}"


# --- TS and ATS -------------------------------------------------------------------------------


@pytest.mark.parametrize("case, column", cells("posthoc"))
def test_ts_and_ats_fit_on_the_familys_scores(family_lm, case: str, column: str) -> None:
    """`calm eval --fit-ts-on`'s fit (scoring.evaluate.fit_posthoc) on 40 scored S_V items with
    features (ATS's minimum): TS and ATS both fitted, their probabilities proper."""
    from calm_core.calibration.posthoc.ats import MIN_ITEMS
    from calm_core.scoring.evaluate import fit_posthoc, load_mc_items
    from calm_core.scoring.scorer import Capture, Scorer
    from calm_core.scoring.prompts import ScoringConfig

    items = load_mc_items("builtin/chemical_symbols/validation", limit=MIN_ITEMS)
    rule = ScoringConfig(rule="letter")  # one forward per item: the cheaper rule, the same fit
    scores = Scorer.of(family_lm(case), batch_size=64, progress=False).score(items, rule, capture=Capture.FEATURES)
    fits = {fit.variant: fit.calibrator for fit in fit_posthoc({"sv": scores})}
    assert {"ts", "ats"} <= set(fits)
    assert fits["ts"].temperature_ > 0
    for name, calibrator in fits.items():
        probs = calibrator.probs(scores.logits, scores.features) if name == "ats" else calibrator.probs(scores.logits)
        assert np.all(np.isfinite(probs)) and np.allclose(probs.sum(axis=1), 1.0), name


# --- CALM training ----------------------------------------------------------------------------


def matrix_config(folder: Path, scope: str) -> Any:
    """Two CALM steps, one inner step, on a handful of capitals items; LoRA on the top 2 of
    4 layers, every fast path at its default (the run decides whether it applies). The
    scalar run keeps the baselines (S_V of 10: TS's minimum), whose variants it exports;
    the adaptive run skips them (its head is what differs)."""
    from calm_core.training.config import TrainConfig

    scalar = scope == "scalar"
    return TrainConfig(
        model=str(folder), method="calm", scoring="cloze", scope=scope, steps=2, batch_size=2,
        heldout_batch_size=4, eval_every=0, checkpoint_every=0, lr_theta=1e-2, lr_alpha=1e-1, select="last",
        lora={"layers": 2}, bilevel={"inner_steps": 1}, train_data="builtin/capitals/train",
        heldout_data="builtin/capitals/validation", eval_data=("builtin/capitals/test",),
        train_limit=4, heldout_limit=10 if scalar else 6, eval_limit=N_ITEMS, eval_batch_size=64,
        eval_baselines=scalar,
    )


@pytest.fixture(scope="session")
def trained(family_dir, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """trained(case, scope) -> the finished run (RunDir), or the exception it raised:
    memoised, so the export tests reuse the training tests' runs."""
    cache: dict[tuple[str, str], Any] = {}
    root = tmp_path_factory.mktemp("family-runs")

    def get(case: str, scope: str) -> Any:
        if (case, scope) not in cache:
            cache[case, scope] = _train(family_dir(case), scope, root / f"{case}-{scope}")
        return cache[case, scope]

    return get


def _train(folder: Path, scope: str, where: Path) -> Any:
    from calm_core.runs.rundir import RunDir
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.loop import train
    from calm_core.launch import run_config_record

    cfg = matrix_config(folder, scope)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("CALM_WORKSPACE", str(where / "workspace"))
            run = RunDir.create(where, "run", run_config_record(cfg))
            train(cfg, run=run, lm=load_model(ModelSpec(name=str(folder), device="cpu")))
    except Exception as exc:  # noqa: BLE001 - recorded, re-raised by each test that needs the run
        return exc
    return run


def finished(trained: Any, case: str, scope: str) -> Any:
    run = trained(case, scope)
    if isinstance(run, Exception):
        raise run
    return run


@pytest.mark.parametrize("case, scope", cells("scalar") + cells("adaptive", cases=FAMILIES))
def test_calm_trains_under_the_scope(trained, record_property, case: str, scope: str) -> None:
    """Two BOME steps finish; the adapter moved in the resolved target modules of the top
    2 layers only; the run records its targets and what it did with the frozen prefix."""
    from safetensors.torch import load_file

    run = finished(trained, case, scope)
    if scope == "scalar":  # the table's fast-paths column: the run's own choice and reason
        record_property("frozen prefix (the CALM run's choice)", _prefix_words(run.status.choices))
    assert run.status.state == "finished" and run.status.step == 2
    choices = run.status.choices
    lora, prefix = choices.lora, choices.frozen_prefix
    assert lora is not None and lora.targets and lora.extra["layers_to_transform"] == [2, 3]
    assert prefix is not None and prefix.reason  # used, or switched off with its reason
    adapter = load_file(str(run.latest_checkpoint()[1] / "adapter_model.safetensors"))
    moved = [k for k, v in adapter.items() if "lora_B" in k and float(v.abs().sum()) > 0]
    assert moved and all(any(f".{t}." in k for t in lora.targets) for k in moved)
    records = run.read_metrics()
    assert [r["step"] for r in records][-1] == 2 and np.isfinite(records[-1]["train/lower_loss"])
    assert records[-1]["alpha/tau_mean"] != pytest.approx(1.0, abs=1e-7)


def _prefix_words(choices: RunChoices) -> str:
    prefix = choices.frozen_prefix
    return f"{'used' if prefix and prefix.used else 'off'} ({prefix.reason if prefix else None})"


# --- exports, loaded without calm_core --------------------------------------------------------

VARIANTS = ("calm", "ts", "vs", "base", "ats")  # what `calm export` writes of a scalar run
ADAPTIVE = "adaptive"  # the trained adaptive run's export, for the families (not the tokenizer variants)
VS_WEIGHTS = [0.8, 1.3, 0.5, 1.1]  # positive, as tests/test_export.py sets them (a random model's fit may not be)
ATS_WEIGHTS = [0.6, -0.5, 0.4]


def _expected(run: Any, variant: str) -> tuple[pd.DataFrame, dict[str, list]]:
    """The run's predictions of `variant` on its evaluation set, and {item id: probabilities}."""
    from calm_core.runs.layout import predictions_path

    frame = pd.read_parquet(predictions_path(run.path, variant, run.config.train["eval_data"][0]))
    return frame, dict(zip(frame["id"], (list(p) for p in frame["probs"]), strict=True))


def _exports(run: Any, adaptive: Any, root: Path) -> dict[str, tuple[Path, dict[str, list]]]:
    """{variant: (export folder, {item id: expected probabilities})} of one case's runs."""
    from calm_core.calibration.posthoc.vector import VectorScaler
    from calm_core.runs.rundir import RunDir
    from calm_core.export.folder import export_run

    out: dict[str, tuple[Path, dict[str, list]]] = {"calm": (export_run(run, root / "calm"), _expected(run, "calm")[1])}
    if adaptive is not None:
        out[ADAPTIVE] = (export_run(adaptive, root / ADAPTIVE), _expected(adaptive, "calm")[1])
    for variant in ("ts", "base"):
        out[variant] = (export_run(run, root / variant, variant), _expected(run, variant)[1])
    copy = RunDir(shutil.copytree(run.path, root / "vs-run"))  # positive weights: see VS_WEIGHTS
    results = copy.results().to_json()
    k = len(results["vs"]["weights"])
    results["vs"] = {**results["vs"], "weights": VS_WEIGHTS[:k]}
    (copy.path / "results.json").write_text(json.dumps(results))
    frame, _ = _expected(run, "base")
    scaler = VectorScaler.fitted(weights=VS_WEIGHTS[:k], biases=results["vs"]["biases"])
    vs = {i: scaler.probs(np.asarray([z]))[0].tolist() for i, z in zip(frame["id"], frame["logits"], strict=True)}
    out["vs"] = (export_run(copy, root / "vs", "vs"), vs)
    out["ats"] = _ats_export(run, root)
    return out


def _ats_export(run: Any, root: Path) -> tuple[Path, dict[str, list]]:
    """`--variant ats` of a copy of the run holding an ATS whose temperature varies over the
    items (a random model's own fit is one temperature), expected from the run's base
    option scores and the ATS on its stored (float16) states."""
    from calm_core.calibration.adaptive_head import bias_for
    from calm_core.calibration.posthoc.ats import AdaptiveTemperature
    from calm_core.calibration.projection import principal_projection
    from calm_core.runs.rundir import RunDir
    from calm_core.export.folder import export_run

    frame, _ = _expected(run, "base")
    states = np.stack([np.asarray(h, dtype=np.float64) for h in frame["features"]])
    mean, projection = principal_projection(states, len(ATS_WEIGHTS), standardise=True)
    ats = AdaptiveTemperature.fitted(mean=mean.tolist(), projection=projection.tolist(),
                              weights=ATS_WEIGHTS[: len(projection)], bias=bias_for(1.0))
    copy = RunDir(shutil.copytree(run.path, root / "ats-run"))
    results = copy.results().to_json()
    results["ats"] = {**ats.params(), "fit_on": (results.get("ats") or {}).get("fit_on")}
    (copy.path / "results.json").write_text(json.dumps(results))
    logits = np.stack([np.asarray(z, dtype=np.float64) for z in frame["logits"]])
    probs = ats.probs(logits, states)
    return export_run(copy, root / "ats", "ats"), {i: p.tolist() for i, p in zip(frame["id"], probs, strict=True)}


# tests/test_export.FRESH for many exports of few bases: each base model and tokenizer is
# read once (a 49k-entry tokenizer takes a while to parse) and each export is loaded with
# PeftModel.from_pretrained on a fresh copy of its base, as the model card says.
FRESH_MANY = r"""
import copy, importlib.util, json, os, sys
sys.path.append(sys.argv[1])  # site-packages alone: torch, transformers, peft
try:
    import calm_core
except ImportError:
    pass
else:
    raise SystemExit(f"calm_core is importable from {calm_core.__file__}")
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
out, bases = {}, {}
for job in json.loads(open(sys.argv[2]).read()):
    spec = importlib.util.spec_from_file_location("calm_head_" + job["name"].replace("/", "_"),
                                                  job["folder"] + "/calm_head.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if job["base"] not in bases:
        bases[job["base"]] = (AutoModelForCausalLM.from_pretrained(job["base"]),
                              AutoTokenizer.from_pretrained(job["base"]))
    base, tokenizer = bases[job["base"]]
    model = PeftModel.from_pretrained(copy.deepcopy(base), job["folder"]).eval()
    has_head = os.path.exists(job["folder"] + "/calibration_head.safetensors")
    head = module.CalibrationHead.from_folder(job["folder"]) if has_head else None
    scoring = module.read_export(job["folder"])["scoring"]
    out[job["name"]] = {item["id"]: module.option_probabilities(model, tokenizer, item["question"], item["choices"],
                                                                head, scoring=scoring).tolist()
                        for item in job["items"]}
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def fresh_exports(request: pytest.FixtureRequest, trained, family_dir,
                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{case: {variant: (fresh probabilities, expected)} or the exception}: the exports of
    every case whose export test this session runs, scored by one python that cannot
    import calm_core (tests/test_export.FRESH)."""
    from tests.test_export import _eval_items

    root = tmp_path_factory.mktemp("family-exports")
    out: dict[str, Any] = {}
    jobs = []
    wanted = [item.callspec.params["case"] for item in request.session.items
              if getattr(item, "originalname", "") == "test_every_export_variant_loads_without_calm_core"]
    for case in wanted:
        try:
            adaptive = finished(trained, case, "adaptive") if case in FAMILIES else None
            made = _exports(finished(trained, case, "scalar"), adaptive, root / case)
        except Exception as exc:  # noqa: BLE001 - re-raised by that family's test
            out[case] = exc
            continue
        items = _eval_items(finished(trained, case, "scalar"))
        out[case] = {variant: expected for variant, (_, expected) in made.items()}
        jobs += [{"name": f"{case}/{variant}", "folder": str(folder), "base": str(family_dir(case)),
                  "items": [{"id": it.id, "question": it.question, "choices": list(it.choices)} for it in items]}
                 for variant, (folder, _) in made.items()]
    (root / "jobs.json").write_text(json.dumps(jobs))
    site = sysconfig.get_paths()["purelib"]
    argv = [sys.executable, "-I", "-S", "-B", "-c", FRESH_MANY, site, str(root / "jobs.json")]
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=900,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(root),
                               "OMP_NUM_THREADS": "1"})  # as _one_thread
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for case, per_variant in out.items():
        if isinstance(per_variant, dict):
            out[case] = {v: (got[f"{case}/{v}"], expected) for v, expected in per_variant.items()}
    return out


@pytest.mark.parametrize("case, column", cells("exports"))
def test_every_export_variant_loads_without_calm_core(fresh_exports, case: str, column: str) -> None:
    result = fresh_exports[case]
    if isinstance(result, Exception):
        raise result
    assert set(result) == set(VARIANTS) | ({ADAPTIVE} if case in FAMILIES else set())
    for variant, (got, expected) in result.items():
        assert got.keys() == expected.keys() and len(got) == N_ITEMS
        tolerance = 1e-3 if variant == "ats" else EXPORT_TOLERANCE  # ats: expected from float16 states
        worst = max(abs(a - b) for key in got for a, b in zip(got[key], expected[key], strict=True))
        assert worst <= tolerance, f"{case} {variant}: max |p_export - p_run| = {worst:.2e}"


def test_the_known_breaks_name_cases_and_columns_that_exist() -> None:
    columns = {*RULES, *SCOPES, "posthoc", "exports", *(f"features {rule}" for rule in RULES)}
    for (case, column), reason in KNOWN_BREAKS.items():
        assert case in CASES and column in columns and reason
