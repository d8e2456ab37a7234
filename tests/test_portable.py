"""Exports and reports carry no local path (issue 31, part 5): the model by hub id or name
and fingerprint, datasets by name, every other local path replaced
(calm_core/runs/portable.py, provenance.model_fingerprint).

The done-when check: a tiny real run whose model lives in the home directory, exported
(folder and zip) and reported; neither they nor its results.json hold the workspace, the
model's directory or the home directory."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from calm_core.data.catalog import load_dataset
from calm_core.provenance import model_fingerprint
from calm_core.runs.rundir import RunDir
from calm_core.runs.portable import Portable, _replacements, public_dataset_name, public_model_name
from tests.test_trainer import fresh_lm, small_config


def test_public_names_keep_catalog_names_and_hub_ids_and_drop_directories() -> None:
    assert public_model_name("embedded") == "embedded"
    assert public_model_name("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert public_model_name("/home/ana/models/my-llama/") == "my-llama"
    assert public_model_name("~/models/q4.gguf") == "q4.gguf"
    for catalog in ("builtin/capitals/test", "upload/quiz", "split/quiz/train", "arc/easy_test", "hf:org/set:test"):
        assert public_dataset_name(catalog) == catalog
    assert public_dataset_name("/home/ana/data/quiz.csv[0:100]") == "quiz.csv[0:100]"
    assert public_dataset_name("~/quiz.jsonl") == "quiz.jsonl"
    assert public_dataset_name("data/quiz.parquet") == "quiz.parquet"


def test_the_fingerprint_names_the_files_not_their_place(tiny_model_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_model_dir, tmp_path / "elsewhere" / "renamed"))
    assert model_fingerprint(tiny_model_dir) == model_fingerprint(copy) != None  # noqa: E711
    assert model_fingerprint(tiny_model_dir).startswith("sha256:") and len(model_fingerprint(copy)) == 23
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    assert model_fingerprint(copy) != model_fingerprint(tiny_model_dir)
    assert (
        model_fingerprint("HuggingFaceTB/SmolLM2-360M-Instruct") is None and model_fingerprint(tmp_path / "x") is None
    )
    (tmp_path / "short.safetensors").write_bytes(b"abc")  # damaged: still a fingerprint, never an exception
    assert model_fingerprint(tmp_path / "short.safetensors")


def test_two_same_shape_models_with_other_weights_differ(tmp_path: Path) -> None:
    """Same config, same tensor names, dtypes and shapes, other weights: the header alone
    could not tell them apart (it hashed metadata only)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    folders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        folders.append(tmp_path / f"seed{seed}")
        LlamaForCausalLM(config).save_pretrained(folders[-1])
    assert model_fingerprint(folders[0]) != model_fingerprint(folders[1])
    assert model_fingerprint(folders[0]) == model_fingerprint(folders[0])  # the remembered digest agrees


def test_a_hub_cache_file_is_named_by_its_blob(tmp_path: Path) -> None:
    """In the Hub's cache a weight file links to blobs/<sha256 of its content>: that name is
    the content digest, no read needed."""
    from calm_core.provenance import content_digest

    blob = tmp_path / "blobs" / ("ab" * 32)
    blob.parent.mkdir()
    blob.write_bytes(b"weights")
    link = tmp_path / "snapshots" / "rev" / "model.safetensors"
    link.parent.mkdir(parents=True)
    link.symlink_to(blob)
    assert content_digest(link) == "ab" * 32


def test_replacements_end_at_a_path_boundary_and_reach_escaped_and_non_ascii_paths() -> None:
    portable = Portable("m", None, _replacements([("/home/jürgen/a&b", "m"), ("/home/jürgen", "~")]))
    assert portable.text("in /home/jürgen/a&b/config.json.") == "in m/config.json."
    assert portable.text("at /home/jürgen.") == "at ~."
    assert portable.text("/home/jürgen/x /home/jürgenx /var/home/jürgen") == "~/x /home/jürgenx /var/home/jürgen"
    assert portable.text("&lt;/home/jürgen/a&amp;b&gt;") == "&lt;m&gt;"  # as html.escape writes it
    record = portable.data({"path": "/home/jürgen/a&b", "list": ["/home/jürgen/r.csv"], "n": 1})
    assert record == {"path": "m", "list": ["~/r.csv"], "n": 1}
    assert "j\\u00fcrgen" not in json.dumps(record)  # redacted before json.dumps could escape it
    never = Portable("m", None, _replacements([("/", "root"), ("", "x")]))  # the root; "" (the current directory)
    assert never.text(f"/b {Path.cwd()}/a") == f"/b {Path.cwd()}/a"


def test_an_embedded_run_names_no_cache_or_home_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from calm_core.launch import run_config_record

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    cache = home / ".cache" / "calm-studio" / "models" / "smollm2-135m-instruct-1"
    run = RunDir.create(tmp_path / "runs", "emb", run_config_record(small_config(model="embedded")))
    run.update_status(model={"name": "embedded", "kind": "embedded", "source": str(cache), "fingerprint": "sha256:1"})
    portable = Portable.of(run)
    assert (portable.model_name, portable.fingerprint) == ("embedded", "sha256:1")
    assert (
        portable.text(f"loaded from {cache}/model.safetensors")
        == "loaded from smollm2-135m-instruct-1/model.safetensors"
    )
    assert portable.text(f"{home}/notes") == "~/notes"


@pytest.fixture(scope="module")
def shared_artefacts(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A tiny real run whose model lives in (a stand-in for) the home directory and whose
    last evaluation set is a file outside the workspace; its export folder, export zip,
    report and results.json."""
    from calm_core.training.loop import train
    from calm_core.export.folder import export_run, export_zip
    from calm_core.launch import create_run
    from calm_core.results.report import run_report_html

    base = tmp_path_factory.mktemp("portable")
    home, workspace, elsewhere = base / "home", base / "workspace", base / "elsewhere"
    model = Path(shutil.copytree(tiny_model_dir, home / "models" / "tiny-llama"))
    elsewhere.mkdir()
    data_file = elsewhere / "units.jsonl"
    items = load_dataset("builtin/units/test", limit=6).items
    data_file.write_text("".join(json.dumps(dataclasses.asdict(item)) + "\n" for item in items))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("CALM_WORKSPACE", str(workspace))
        cfg = small_config(
            model=str(model),
            steps=3,
            eval_every=2,
            heldout_limit=12,
            scope="options",
            eval_data=("builtin/capitals/test", str(data_file)),
        )
        run = create_run(cfg)
        assert train(cfg, run=run, lm=fresh_lm(model)).state == "finished"
        folder = export_run(run, base / "export")
        files = {f"export/{p.name}": p.read_bytes() for p in folder.iterdir()}
        with zipfile.ZipFile(io.BytesIO(export_zip(run))) as archive:
            files |= {f"zip/{name}": archive.read(name) for name in archive.namelist()}
        files["report.html"] = run_report_html(run).encode()
        files["results.json"] = (run.path / "results.json").read_bytes()
    needles = {"workspace": workspace, "model directory": model, "home directory": home}
    return {"files": files, "needles": needles, "data_file": data_file, "run": run}


def _spellings(path: Path) -> set[bytes]:
    return {str(path).encode(), str(path.resolve()).encode()}


def test_exports_reports_and_results_name_no_local_directory(shared_artefacts: dict) -> None:
    files, needles = shared_artefacts["files"], shared_artefacts["needles"]
    assert {"export/calm_export.json", "export/README.md", "export/calm_config.json", "report.html"} <= set(files)
    found = [
        (name, what)
        for name, data in files.items()
        for what, path in needles.items()
        for spelling in _spellings(path)
        if spelling in data
    ]
    assert found == []
    shared = {name: data for name, data in files.items() if name != "results.json"}
    data_file = shared_artefacts["data_file"]  # named by a path: results.json keeps it, the shared files do not
    assert not [name for name, data in shared.items() for s in _spellings(data_file) if s in data]
    assert data_file.name.encode() in files["report.html"]


def test_the_export_names_the_model_by_name_and_fingerprint(shared_artefacts: dict) -> None:
    record = json.loads(shared_artefacts["files"]["export/calm_export.json"])
    model = shared_artefacts["needles"]["model directory"]
    assert record["base_model_setting"] == record["base_model_hub_id"] == "tiny-llama"
    assert record["base_model_fingerprint"] == model_fingerprint(model)
    assert record["base_model_fingerprint"] == shared_artefacts["run"].status.model["fingerprint"]  # as loaded
    config = json.loads(shared_artefacts["files"]["export/calm_config.json"])
    assert config["train"]["model"] == "tiny-llama" and config["train"]["eval_data"][-1] == "units.jsonl"
    report = shared_artefacts["files"]["report.html"].decode()
    assert "<th>model</th><td>tiny-llama</td>" in report and record["base_model_fingerprint"] in report
