"""The worked examples of docs/architecture.md, run as written: a method added as one file
is discovered, gets its flag and its config section, and trains; a setting added as one
line becomes a flag with its help. If the page and the code drift apart, this fails."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from calm_core.registry import discover
from calm_core.settings import declared_settings, setting
from calm_core.training import methods
from calm_core.training.config import TrainConfig, train_settings

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def example(path: str) -> str:
    """The ```python block of docs/architecture.md whose first line is `# <path>`."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if b.startswith(f"# {path}\n")]
    assert found, f"docs/architecture.md has no example for {path}"
    return found[0]


@pytest.fixture
def focal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The page's focal.py in a package of its own, found by the same discovery as
    calm_core/training/methods, and registered as the methods package would have it."""
    package = tmp_path / "doc_methods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "focal.py").write_text(example("calm_core/training/methods/focal.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover("doc_methods", [str(package)])
    assert set(found) == {"focal"}
    monkeypatch.setitem(methods.METHODS, "focal", methods.as_method(found["focal"]))
    yield found["focal"]
    sys.modules.pop("doc_methods.focal", None)


def test_a_method_is_one_file_with_its_flag_and_settings(focal) -> None:
    from calm_core.cli.train import add_parsers, resolve_config

    assert "gamma" in train_settings()
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="cmd"))
    cfg = resolve_config(parser.parse_args(["train", "--method", "focal", "--gamma", "1"]))
    assert cfg.method_settings == focal.Settings(gamma=1.0)
    assert cfg.to_dict()["method_settings"] == {"gamma": 1.0}
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_the_documented_method_trains(focal, tiny_model_dir: Path) -> None:
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.loop import train

    logged: list[dict] = []
    cfg = TrainConfig(method="focal", steps=2, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0,
                      scoring="letter", train_limit=8, heldout_limit=6, eval_limit=6, lr_theta=1e-2)
    result = train(cfg, lm=load_model(ModelSpec(name=str(tiny_model_dir), device="cpu")),
                   progress=lambda step, total, record: logged.append(record))
    assert result.state == "finished" and len(logged) == 2
    assert all(record["train/lower_loss"] > 0 for record in logged)


def test_a_setting_is_one_line() -> None:
    """The page's `warmup_steps` line on a copy of TrainConfig: a declared setting with
    its help, which the flag builder and the studio read."""
    line = re.search(r"^    (warmup_steps: int = setting\(.*\))$", DOC.read_text(encoding="utf-8"), re.M).group(1)
    name, _, rest = line.partition(": int = ")
    extended = dataclasses.make_dataclass("Extended", [(name, int, eval(rest, {"setting": setting}))],  # noqa: S307
                                          bases=(TrainConfig,))
    specs = {spec.name: spec for spec in declared_settings(extended)}
    assert specs["warmup_steps"].help.startswith("steps before the head's step size")
    assert specs["warmup_steps"].kind is int and specs["warmup_steps"].meta("min") == 0
    assert extended(warmup_steps=5).to_dict()["warmup_steps"] == 5


def test_the_documented_calibrator_is_one_file_and_passes_its_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's bias.py, dropped into the posthoc package's path, is found by the
    registry; the page's own test for it then passes as written."""
    import numpy as np

    from calm_core.calibration import metrics, posthoc

    (tmp_path / "bias.py").write_text(example("calm_core/calibration/posthoc/bias.py"))
    monkeypatch.setattr(posthoc, "__path__", [*posthoc.__path__, str(tmp_path)])
    test_code = re.search(r"```python\n(def test_bias_scaling.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    namespace = {"np": np, "metrics": metrics}
    exec(compile(test_code, "docs/architecture.md", "exec"), namespace)  # noqa: S102 - our own docs
    try:
        namespace["test_bias_scaling_recovers_a_position_preference"](tmp_path)
    finally:
        sys.modules.pop("calm_core.calibration.posthoc.bias", None)


def test_the_documented_calibrator_exports_from_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tiny_model_dir: Path) -> None:
    """The same one file is exported: a run whose results.json holds a bias-scaling fit
    writes `calm export --variant bs` as a folder whose head gives bias scaling's
    probabilities, whose card names it, and which the verdict offers as an export; no
    other file of calm_core names it."""
    import numpy as np
    import torch

    from calm_core.calibration import posthoc
    from calm_core.calibration.head import CalibrationHead
    from calm_core.export.folder import export_run
    from calm_core.launch import run_config_record
    from calm_core.results.verdict import posthoc_exports, variant_label
    from calm_core.runs.records import RunResults
    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train
    from tests.test_trainer import fresh_lm, small_config

    (tmp_path / "bias.py").write_text(example("calm_core/calibration/posthoc/bias.py"))
    monkeypatch.setattr(posthoc, "__path__", [*posthoc.__path__, str(tmp_path)])
    try:
        cls = posthoc.calibrators()["bs"]
        rng = np.random.default_rng(0)
        z = rng.normal(0.0, 2.0, size=(400, 4))
        fit = cls.fit(z, np.argmax(z + np.array([0.8, 0.0, -0.4, 0.0]) + rng.gumbel(size=z.shape), axis=1))
        cfg = small_config(model=str(tiny_model_dir), scoring="cloze", scope="scalar", select="last")
        run = RunDir.create(tmp_path / "runs", "tiny-bs", run_config_record(cfg))
        train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
        results = run.results().to_json()
        run.write_results(RunResults.from_json({**results, "bs": {**fit.params(), "fit_on": "S_V"}}))

        assert "bs" in posthoc_exports()
        folder = export_run(run, tmp_path / "out", "bs")
        head = CalibrationHead.load(folder / "calibration_head.safetensors")
        scores = torch.tensor(z[:8], dtype=torch.float32)
        exported = torch.softmax(head.on_options(scores), dim=-1).detach().numpy()
        np.testing.assert_allclose(exported, fit.probs(z[:8]), atol=1e-5)
        card = (folder / "README.md").read_text(encoding="utf-8")
        assert f"**{variant_label('bs')}** of the base model" in card and "not the trained adapter" in card
        assert json.loads((folder / "calm_export.json").read_text())["variant"] == "bs"
    finally:
        sys.modules.pop("calm_core.calibration.posthoc.bias", None)


def _documented_metric():
    """The page's smooth-ECE declaration, built as written."""
    from calm_core.calibration.metrics import smooth_ece
    from calm_core.calibration.metrics.columns import Column

    line = re.search(r"^    (Column\(\"smooth_ece\".*\)),$", DOC.read_text(encoding="utf-8"), re.M).group(1)
    return eval(line, {"Column": Column, "smooth_ece": smooth_ece})  # noqa: S307 - our own docs


def test_the_documented_metric_is_one_declaration(tiny_model_dir: Path, tiny_everywhere, open_page,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Swapped into COLUMNS, the page's one line makes smooth ECE a column of the runs'
    table, a curve a real (tiny) run logs at every evaluation, a key of its results, and a
    Monitor chart."""
    from calm_core.calibration.metrics import columns
    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train
    from calm_core.launch import run_config_record
    from tests.pages import run_picker
    from tests.test_trainer import fresh_lm, small_config

    declared = _documented_metric()
    assert "smooth_ece" not in columns.table_columns("mcqa") and "smooth_ece" not in columns.curve_names()
    monkeypatch.setattr(columns, "COLUMNS", tuple(declared if c.name == "smooth_ece" else c for c in columns.COLUMNS))
    assert columns.table_columns("mcqa")[-1] == "smooth_ece" and "smooth_ece" in columns.curve_names()

    cfg = small_config(model=str(tiny_model_dir), eval_every=2)
    run = RunDir.create(None, "20260301-000000-smooth-0001", run_config_record(cfg))
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    logged = [r for r in run.read_metrics() if "eval/heldout/acc" in r]
    assert logged and all(0.0 <= r["eval/heldout/smooth_ece"] <= 1.0 for r in logged)
    assert all("smooth_ece" in row for row in run.results().rows)

    monitor = open_page("../pages/monitor/monitor.py")
    run_picker(monitor).set_value(run.run_id).run()
    assert not monitor.exception, monitor.exception
    specs = [json.loads(chart.proto.spec) for chart in monitor.get("plotly_chart")]
    assert "Smooth ECE" in [spec["layout"].get("title", {}).get("text") for spec in specs]


def _documented_format():
    """The page's TsvSource, defined where the page puts it (in calm_core/data/sources.py's
    namespace), and its FILE_FORMATS line, read where the page puts it (calm_core/data/readers.py,
    which imports the reader)."""
    from calm_core.data import readers, sources

    namespace = dict(vars(sources))
    exec(compile(example("calm_core/data/sources.py: TsvSource"), "docs/architecture.md", "exec"), namespace)  # noqa: S102
    line = re.search(r"^        (FileFormat\(\"tsv\".*\)),$", DOC.read_text(encoding="utf-8"), re.M).group(1)
    return eval(line, {**vars(readers), "TsvSource": namespace["TsvSource"]})  # noqa: S307 - our own docs


def test_the_documented_format_reads_whole_and_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's reader and line, added to FILE_FORMATS (and to `readers.FORMATS`, which
    is derived from it when readers is imported): `.tsv` is detected and kept on upload,
    and a file with a short row loads whole and streamed to the same items and rejected
    rows; a streamed item refuses the file once it has changed."""
    from calm_core.data import readers
    from calm_core.data.loaders import load_file
    from calm_core.data.schema import DataError
    from calm_core.data.stream import LazyItems

    monkeypatch.setitem(readers.FILE_FORMATS, "tsv", _documented_format())
    monkeypatch.setitem(readers.FORMATS, ".tsv", "tsv")
    path = tmp_path / "quiz.tsv"
    lines = ["question\tA\tB\tanswer", *(f"q{i}?\tyes\tno\t{'AB'[i % 2]}" for i in range(12)), "short\trow", ""]
    path.write_text("\r\n".join(lines), encoding="utf-8")
    assert readers.detect_format(path) == "tsv" and readers.upload_suffix("quiz.tsv", b"question") == ".tsv"
    eager = load_file(path, mapping="choices=A|B", stream=False)
    lazy = load_file(path, mapping="choices=A|B", stream=True)
    assert isinstance(lazy.items, LazyItems) and isinstance(eager.items, list)
    assert (list(lazy.items), lazy.rejected, lazy.summary()) == (eager.items, eager.rejected, eager.summary())
    assert len(eager.items) == 12 and [e.row for e in eager.rejected] == [13]
    assert "Expected 4 fields" in eager.rejected[0].message
    path.write_text("question\tA\tB\tanswer\nchanged?\tx\ty\tA\n", encoding="utf-8")
    with pytest.raises(DataError, match="changed"):
        lazy.items[3]



def test_a_calibrator_that_fits_on_fewer_items_than_the_builtins_gets_its_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> None:
    """A plug-in calibrator may take fewer S_V items than the built-ins' minimum: the final
    evaluation then computes the fit data when asked, instead of handing over the `None` it
    skipped computing for the built-ins (a TypeError in `fit_baselines` once)."""
    from calm_core.calibration.posthoc import MIN_FIT_ITEMS
    from calm_core.launch import run_config_record
    from calm_core.runs.rundir import RunDir
    from calm_core.training.loop import train
    from calm_core.training.tasks import mcqa
    from tests.test_trainer import fresh_lm, small_config

    handed: list[object] = []

    def asking(n_items, fit_data, task, enabled=True, defaults_only=True):
        handed.append(fit_data())  # what a calibrator with min_items <= n_items would get
        return {}, {}

    monkeypatch.setattr(mcqa, "fit_baselines", asking)
    cfg = small_config(model=str(tiny_model_dir), scoring="cloze", scope="scalar", select="last")
    assert cfg.heldout_limit is not None and cfg.heldout_limit < MIN_FIT_ITEMS
    run = RunDir.create(tmp_path / "runs", "tiny-small-sv", run_config_record(cfg))
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert handed and handed[0] is not None
    logits, labels = handed[0][:2]
    assert len(labels) == cfg.heldout_limit and logits.shape[0] == cfg.heldout_limit
