"""The export's model card: metadata through huggingface_hub, Hub dataset ids, and a loading
snippet that works offline.

The snippet loads the base model from CALM Studio's converted copy where the machine has
it (the run's own weights, no network), else from the Hub; run as written, in a Python
that cannot import calm_core, with HF_HUB_OFFLINE=1, it must load from the local copy and
finish, and without the copy it must fail at once rather than wait for the network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from calm_core.export.card_data import card_data, eval_results, hub_dataset
from calm_core.export.folder import export_run
from calm_core.export.model_card import base_source_lines, load_snippet
from calm_core.runs.records import RunConfig
from tests.test_export import _fake_run


@pytest.mark.parametrize("name, expected", [
    ("hf:allenai/ai2_arc:ARC-Easy:test", ("allenai/ai2_arc", "ARC-Easy", "test")),
    ("hf:allenai/ai2_arc:ARC-Easy:test[0:100]", ("allenai/ai2_arc", "ARC-Easy", "test")),
    ("hf:cais/mmlu:validation", ("cais/mmlu", None, "validation")),
    ("hf:piqa", ("piqa", None, None)),
    ("builtin/capitals/test", None),
    ("upload/quiz", None),
    ("hf:/home/me/saved_folder", None),  # a save_to_disk folder: no Hub id
    ("quiz.csv", None),
])
def test_hub_dataset_ids_come_only_from_hub_names(name: str, expected) -> None:
    assert hub_dataset(name) == expected


def _row(dataset: str, variant: str, acc: float) -> dict:
    return {"dataset": dataset, "dataset_raw": dataset, "variant_raw": variant, "variant": variant,
            "acc": acc, "ece": 0.1, "auroc": 0.7}


def test_eval_results_and_datasets_name_the_hub_where_the_data_came_from_it() -> None:
    from huggingface_hub import ModelCard

    arc, capitals = "hf:allenai/ai2_arc:ARC-Easy:test", "builtin/capitals/test"
    rows = [_row(arc, "calm", 0.6), _row(arc, "base", 0.5), _row(capitals, "calm", 0.9), _row(capitals, "base", 0.8)]
    record = {"task": "mcqa", "method": "calm", "variant": "calm", "base_model_hub_id": "org/base"}
    config = RunConfig.from_json({"train": {"train_data": "hf:allenai/ai2_arc:ARC-Easy:train",
                                            "heldout_data": "builtin/capitals/validation", "eval_data": [arc, capitals]}})
    run = SimpleNamespace(run_id="r1", config=config)
    data = card_data(run, record, rows)
    assert data.datasets == ["allenai/ai2_arc"]  # the Hub links the card to it; built-in sets name no Hub dataset
    by_set = {(r.dataset_name, r.metric_type): r for r in eval_results(record, rows)}
    arc_acc = by_set[(arc, "accuracy")]
    assert (arc_acc.dataset_type, arc_acc.dataset_config, arc_acc.dataset_split) == ("allenai/ai2_arc", "ARC-Easy", "test")
    assert arc_acc.metric_value == 0.6 and by_set[(arc, "roc_auc")].metric_value == 0.7  # the exported variant's
    assert set(by_set) == {(arc, "accuracy"), (arc, "ece"), (arc, "roc_auc")}  # no built-in set, no base figures
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\nbody\n")  # round trip through huggingface_hub's parser
    assert {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results} == {
        key: r.metric_value for key, r in by_set.items()}
    assert card.data.base_model == "org/base" and card.data.library_name == "peft"


# Run the card's snippet as written (its folder's path put in) in a Python without calm_core.
FRESH = r"""
import sys, time
sys.path.append(sys.argv[1])
try:
    import calm_core
except ImportError:
    pass
else:
    raise SystemExit("calm_core is importable")
start = time.time()
scope = {}
exec(open(sys.argv[2]).read(), scope)
print("SOURCE", scope["source"])
print("P", [round(float(x), 6) for x in scope["p"]])
"""


def _run_snippet(snippet: str, scratch: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    (scratch / "snippet.py").write_text(snippet)
    argv = [sys.executable, "-I", "-S", "-B", "-c", FRESH, sysconfig.get_paths()["purelib"], str(scratch / "snippet.py")]
    return subprocess.run(argv, cwd=scratch, capture_output=True, text=True, timeout=300,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(scratch), **env})


def test_the_snippet_loads_the_studios_local_copy_offline(embedded_dir: Path, tiny_model_dir: Path,
                                                         tmp_path: Path) -> None:
    """An embedded-model run: the card names CALM Studio's converted copy relative to its
    cache, and the snippet loads it with HF_HUB_OFFLINE=1 and no calm_core; with no copy
    there, it fails at once instead of waiting for the network."""
    run = _fake_run(tmp_path / "runs", tiny_model_dir, "embedded")  # a tiny adapter: the copy is the tiny model
    folder = export_run(run, tmp_path / "out")
    record = json.loads((folder / "calm_export.json").read_text())
    local = record["base_model_local_copy"]
    assert local and not local.startswith("/") and local.startswith("models/")  # relative: no path of this machine
    card = (folder / "README.md").read_text()
    snippet = card.split("```python\n")[1].split("```")[0].replace('"path/to/this/folder"', json.dumps(str(folder)))
    assert snippet == load_snippet(record).replace('"path/to/this/folder"', json.dumps(str(folder)))
    cache = tmp_path / "cache"
    shutil.copytree(tiny_model_dir, cache / local)
    done = _run_snippet(snippet, tmp_path, {"CALM_CACHE_DIR": str(cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"SOURCE {cache / local}" in done.stdout and "P [" in done.stdout
    shutil.rmtree(cache)
    started = time.monotonic()
    gone = _run_snippet(snippet, tmp_path, {"CALM_CACHE_DIR": str(cache)})
    assert gone.returncode != 0 and time.monotonic() - started < 60  # no network wait: it fails, and says why
    assert "offline mode" in gone.stderr.splitlines()[-1]


def test_a_model_without_a_local_copy_is_named_with_the_offline_switch() -> None:
    record = {"base_model_hub_id": "Qwen/Qwen2.5-0.5B-Instruct", "base_model_local_copy": None}
    (line,) = base_source_lines(record)
    assert line.startswith('source = "Qwen/Qwen2.5-0.5B-Instruct"') and "HF_HUB_OFFLINE=1" in line
    (local,) = base_source_lines({"base_model_hub_id": "tiny-llama", "base_model_local_copy": None})
    assert "point it at your copy" in local
