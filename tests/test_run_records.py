"""The typed run records (calm_core/runs/records.py): one `from_json` each that refuses a
damaged file by name, round trips, and no reader above runs/ that goes around them.

The grep test defines "a `.get` on a run file" as what it matches, outside calm_core/runs/:
- `.get(` or `["` straight on a record read: `.results()`, `.status`, `.config`
  (of a name starting with `run`), `files.status` / `files.config`, `status_or_empty()`;
- `.get(` or `["` on a name bound in the same file to one of those reads
  (`status = run.status` ... `status.get("step")`);
- a direct JSON read (`json.load*`, `read_json_object`) of results.json, status.json or a
  run's config.json.
Nested JSON mappings inside a record are matched by a second grep (`nested_reads`):
`.get(` or `["` on a record's mapping field or a part of it (`results.selection.get(`,
`(status.final or {}).get(`, `status.choices.quantization["four_bit"]`), directly or
through a name bound to it. What readers read is typed (the recommendation, status.json's
`choices`, config.json's `environment`: runs/), so none is allowed: NESTED_ALLOWED, the
count per file that may only shrink, is empty.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calm_core.runs.choices_record import PathChoice, RejectedRows, RunChoices
from calm_core.runs.damage import RunFileError
from calm_core.runs.records import ResultRow, RunConfig, RunResults, RunStatus

ROOT = Path(__file__).resolve().parents[1]
READ = r"(?:\brun\w*\.results\(\)|\brun\w*\.status\b(?!_)|\brun\w*\.config\b|\bfiles\.(?:status|config)\b|status_or_empty\(\))"
DIRECT = re.compile(READ + r'(?:\.get\(|\[")')
BOUND = re.compile(r"^\s*(\w+)\s*=\s*" + READ + r"\s*(?:#.*)?$", re.M)
JSON_READ = re.compile(r"(json\.loads?|read_json_object)\(.*(results\.json|status\.json|RESULTS|STATUS|run\w*\.path / \"config\.json\"|/ CONFIG)")

# What the test still allows, file -> matched lines: it may only shrink (empty: none left).
ALLOWED: dict[str, int] = {}

# A record's fields that hold JSON mappings, and the names a record is read under.
MAPPING_FIELDS = (
    "recommendation|selection|choices|timings|final|model|threads|estimate|scoring|splits|environment|generation"
    "|train|calibrators"
)
RECORD = r"\b(?:files\.status|files\.config|run\w*\.status|run\w*\.config|run\w*\.results\(\)|\w*results|\w*status|config)"
CHAIN = r"\.(?:" + MAPPING_FIELDS + r")\b(?:\.\w+)*"  # a field, or a part of it (`status.choices.quantization`)
NESTED = re.compile(r"\(?" + RECORD + CHAIN + r"(?:\s+or\s+\{\}\))?(?:\.get\(|\[\")")
NESTED_BOUND = re.compile(r"^\s*(\w+)\s*=\s*\(?" + RECORD + CHAIN + r"(?:\s+or\s+\{\})?\)?\s*(?:#.*)?$", re.M)
# file -> nested reads still allowed on the fields not yet typed: they may only shrink (none left).
NESTED_ALLOWED: dict[str, int] = {}


def run_file_reads(text: str) -> list[str]:
    """The lines of `text` that read a run file around its record (see the module docstring)."""
    found = [m.group(0) for m in DIRECT.finditer(text)]
    for name in set(BOUND.findall(text)):
        found += re.findall(rf"\b{name}(?:\.get\(|\[\")", text)
    found += [m.group(0) for m in JSON_READ.finditer(text)]
    return found


def nested_reads(text: str) -> list[str]:
    """The lines of `text` that read a record's nested JSON mapping by key (module docstring)."""
    found = [m.group(0) for m in NESTED.finditer(text)]
    for name in set(NESTED_BOUND.findall(text)):
        found += re.findall(rf"\b{name}(?:\.get\(|\[\")", text)
    return found


def _sources() -> list[Path]:
    return [*sorted((ROOT / "calm_core").rglob("*.py")), *sorted((ROOT / "app").rglob("*.py"))]


def test_the_nested_grep_matches_what_it_says() -> None:
    """The matcher itself, on the shapes the readers had before the recommendation was typed."""
    assert nested_reads('variant = (results.recommendation or {}).get("variant")')
    assert nested_reads('rec = results.recommendation or {}\nstages = rec.get("stages")')
    assert nested_reads('step = run.status.selection["selected_step"]')
    assert nested_reads('final = status.final or {}\ndone = final.get("done")')
    assert nested_reads('found = (status.choices.get("lora") or {}).get("targets")')
    assert nested_reads('four_bit = run.status.choices.quantization["four_bit"]')  # a part of a field
    assert nested_reads('env = config.environment or {}\ngit = env.get("git")')
    assert nested_reads('torch = run.config.environment.versions["torch"]')
    assert not nested_reads("variant = results.recommendation.variant")
    assert not nested_reads('rec = results.recommendation\nn = rec.comparison.n if rec.comparison else 0')
    assert not nested_reads("targets = status.choices.lora.targets if status.choices.lora else ()")


def _nested_offenders(texts: dict[str, str]) -> dict[str, int]:
    """file -> nested reads, for the files (outside runs/) that have more than NESTED_ALLOWED lets them."""
    counts = {rel: len(nested_reads(text)) for rel, text in texts.items() if not rel.startswith("calm_core/runs/")}
    return {rel: n for rel, n in counts.items() if n > NESTED_ALLOWED.get(rel, 0)}


def _source_texts() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in _sources()}


def test_no_reader_reads_a_nested_mapping_by_key_beyond_its_allowance() -> None:
    offenders = _nested_offenders(_source_texts())
    assert not offenders, f"type the nested record in runs/ and read its attributes instead: {offenders}"


def test_a_planted_nested_read_is_caught() -> None:
    """The guard on today's sources, with one reader's old line put back: it must fail."""
    texts = _source_texts()
    planted = "calm_core/results/report.py"
    texts[planted] += '\n\ndef _git(config):\n    env = config.environment or {}\n    return env.get("git")\n'
    assert _nested_offenders(texts) == {planted: 1}
    assert NESTED_ALLOWED == {}  # every nested mapping readers read is a typed record now


def test_the_recommendation_is_read_by_attribute_everywhere() -> None:
    """No reader indexes the typed recommendation: a `.get(` on it would fail at run time."""
    pattern = re.compile(r"\.recommendation\b(?:\s+or\s+\{\}\))?(?:\.get\(|\[\")")
    offenders = [p.relative_to(ROOT).as_posix() for p in _sources() if pattern.search(p.read_text(encoding="utf-8"))]
    assert not offenders


def test_the_grep_matches_what_it_says() -> None:
    """The matcher itself, on lines like those today's readers had (it must be able to fail)."""
    assert run_file_reads('x = run.config.get("train", {})')
    assert run_file_reads('rows = run.results()["results"]')
    assert run_file_reads('s = run.status_or_empty().get("name")')
    assert run_file_reads('status = run.status\nstep = status.get("step")')
    assert run_file_reads('files = run.read_files()\nx = files.status.get("selection")')
    assert run_file_reads('data = json.loads((run.path / "results.json").read_text())')
    assert not run_file_reads('config = model.config.get_text_config()')
    assert not run_file_reads('step = run.status.step\nrec = (results.recommendation or {}).get("variant")')


def test_no_reader_above_runs_goes_around_the_records() -> None:
    offenders: dict[str, int] = {}
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("calm_core/runs/"):
            continue
        hits = run_file_reads(path.read_text(encoding="utf-8"))
        if len(hits) > ALLOWED.get(rel, 0):
            offenders[rel] = len(hits)
    assert not offenders, f"read through runs/records.py's attributes instead: {offenders}"


# ----------------------------------------------------------------------------- from_json


@pytest.mark.parametrize(
    ("cls", "data", "problem"),
    [
        (RunStatus, {"step": 3}, "`state` is missing"),
        (RunStatus, {"state": "running", "step": "3"}, "`step` is a str where an int belongs"),
        (RunStatus, {"state": "running", "step": True}, "`step` is a bool where an int belongs"),
        (RunStatus, {"state": "running", "choices": []}, "`choices` is a list where an object belongs"),
        (RunStatus, {"state": "running", "choices": {"lora": {"targets": "q_proj"}}},
         "`choices.lora.targets` is a str where a list belongs"),
        (RunStatus, {"state": "running", "choices": {"fast_paths": {"hidden_path": {"reason": "x"}}}},
         "`choices.fast_paths.hidden_path.on` is missing"),
        (RunStatus, {"state": "running", "choices": {"rejected_rows": {"s": {"n_rows": "3", "n_rejected": 1}}}},
         "`choices.rejected_rows.s.n_rows` is a str where an int belongs"),
        (RunStatus, {"state": "running", "choices": {"scoring": {"chat_template": True}}},
         "`choices.scoring.rule` is missing"),
        (RunConfig, {"environment": {"versions": ["torch"]}}, "`environment.versions` is a list where an object belongs"),
        (RunConfig, {"environment": {"git": 3}}, "`environment.git` is an int where a str belongs"),
        (RunStatus, {"state": "running", "model": {"dtype": 16}}, "`model.dtype` is an int where a str belongs"),
        (RunResults, {"results": [], "ts": {"temperature": "2"}}, "`ts.temperature` is a str where a number belongs"),
        (RunResults, {"results": [], "vs": {"note": 3}}, "`vs.note` is an int where a str belongs"),
        (RunStatus, {"state": "running", "model": "embedded"}, "`model` is a str where an object belongs"),
        (RunConfig, {"train": "calm"}, "`train` is a str where an object belongs"),
        (RunConfig, {"launched_by": 7}, "`launched_by` is an int where a str belongs"),
        (RunResults, {"selection": {}}, "`results` is missing"),
        (RunResults, {"results": [{"dataset": "d"}]}, "a result row has no `dataset` / `variant`"),
        (RunResults, {"results": [], "recommendation": "ts"}, "`recommendation` is a str where an object belongs"),
        (RunStatus, [1, 2], "a JSON list where an object belongs"),
    ],
)
def test_from_json_refuses_damage_naming_the_file(cls: type, data: object, problem: str) -> None:
    with pytest.raises(RunFileError) as info:
        cls.from_json(data, "/runs/r1/some.json", "`calm resume r1` rebuilds it")
    assert str(info.value) == f"/runs/r1/some.json is damaged ({problem}); `calm resume r1` rebuilds it"


def test_a_damaged_status_on_disk_is_named_by_the_run(tmp_path: Path) -> None:
    from calm_core.runs.rundir import RunDir

    run = RunDir.create(tmp_path, "r1", {"train": {"method": "calm"}})
    (run.path / "status.json").write_text('{"state": "running", "total_steps": "ten"}')
    with pytest.raises(RunFileError, match=r"status\.json is damaged \(`total_steps` is a str where an int"):
        _ = run.status
    assert run.state().state == "damaged"


STATUS = {
    "state": "finished", "run_id": "r1", "step": 60, "total_steps": 60, "pid": 12, "host": "vm",
    "pid_start": "1.00", "created": 1.0, "ended": 2, "model": {"dtype": "float32"},
    "choices": {"lora": {"r": 8, "targets": ["q_proj"]}, "fast_paths": {"hidden_path": {"on": True, "reason": "equal",
                "share_top": True}}, "scoring": {"rule": "letter", "chat_template": True, "reason": "above chance"},
                "precision": {"dtype": "float32", "reason": "cpu"}, "tensorboard": {"written": False, "reason": "off"},
                "rejected_rows": {"s": {"n_rows": 3, "n_rejected": 1, "n_items": 2, "rejected": [{"row": 2}]}},
                "world_size": 1, "a_newer_choice": {"x": 1}},
    "selection": {"selected_step": 60}, "threads": {"threads": 1, "why": "x"}, "items_cut_to_context": {"s": 2},
    "a_newer_field": [1],
}
CONFIG = {"train": {"method": "calm", "steps": 60}, "name": "n", "seed": 1, "scoring": {"rule": "letter"},
          "splits": {"s": {"source": "f.csv"}}, "launched_by": "tag", "estimate": {"likely_s": 3.0},
          "environment": {"created": "2026-12-05T10:00:00+00:00", "versions": {"torch": "2.5.1", "peft": None},
                          "git": "abc123+dirty", "python": "3.12.3", "machine": "Linux x86_64"}}
RESULTS = {"results": [{"dataset": "d", "variant": "base", "acc": 0.5}], "ts": {"temperature": 2.0},
           "vs": {"note": "too few"}, "selection": {"selected_step": 4}, "recommendation": {"variant": "ts"}}


@pytest.mark.parametrize(("cls", "data"), [(RunStatus, STATUS), (RunConfig, CONFIG), (RunResults, RESULTS)])
def test_records_round_trip(cls: type, data: dict) -> None:
    record = cls.from_json(data)
    expected = {**data, "ended": 2.0, "fresh_start": False} if cls is RunStatus else data  # as read back
    assert record.to_json() == expected
    assert cls.from_json(record.to_json()) == record


def test_records_type_what_readers_use() -> None:
    status, config, results = RunStatus.from_json(STATUS), RunConfig.from_json(CONFIG), RunResults.from_json(RESULTS)
    assert (status.step, status.ended, status.model_dtype, status.thread_count) == (60, 2.0, "float32", 1)
    assert status.extra == {"a_newer_field": [1]}  # kept, and written back
    assert status.model is not None and (status.model.dtype, status.model.kind, status.model["dtype"]) == (
        "float32", None, "float32")
    assert (config.train_method, config.launched_by, config.label("name")) == ("calm", "tag", "n")
    assert results.recommended == "ts" and results.calibrator("ts").to_json() == {"temperature": 2.0}
    assert results.missing_notes == {"vs": "too few"} and results.calibrator("ats") is None
    ts = results.calibrator("ts")
    assert ts is not None and (ts.temperature, ts.note, ts["temperature"]) == (2.0, None, 2.0)
    written = RunResults(rows=(), calibrators={"ts": {"temperature": 1.5, "fit_on": "S_V"}})  # as the writer builds it
    assert written.calibrators["ts"].fit_on == "S_V"
    assert written.to_json() == {"results": [], "ts": {"temperature": 1.5, "fit_on": "S_V"}}
    row = results.rows[0]
    assert isinstance(row, ResultRow) and (row.dataset, row.variant, row["acc"]) == ("d", "base", 0.5)
    choices = status.choices
    assert choices.lora is not None and choices.lora.targets == ("q_proj",) and choices.lora.extra == {"r": 8}
    assert choices.fast_paths["hidden_path"] == PathChoice(True, "equal", extra={"share_top": True})
    assert choices.scoring is not None and (choices.scoring.rule, choices.scoring.chat_template) == ("letter", True)
    assert choices.rejected_rows["s"] == RejectedRows(3, 1, 2, ({"row": 2},)) and choices.world_size == 1
    assert choices.extra == {"a_newer_choice": {"x": 1}}  # kept, and written back
    env = config.environment
    assert env is not None and (env.git, env.python, env.machine) == ("abc123+dirty", "3.12.3", "Linux x86_64")
    assert env.versions == {"torch": "2.5.1", "peft": None}


def test_an_older_runs_choices_read_with_defaults() -> None:
    """A status.json written before the fast paths, the scoring choice, the precision,
    TensorBoard and the rejected rows were recorded (and a config.json before `environment`)."""
    old = {"state": "finished", "choices": {"quantization": {"four_bit": False, "reason": "cpu"}, "lora": {"r": 8}}}
    choices = RunStatus.from_json(old).choices
    assert choices.lora is not None and choices.lora.targets == () and choices.quantization == old["choices"]["quantization"]
    assert (choices.fast_paths, choices.rejected_rows, choices.dropped_training_questions) == ({}, {}, {})
    assert choices.scoring is None and choices.precision is None and choices.tensorboard is None
    assert RunStatus.from_json({"state": "queued"}).choices == RunChoices()  # no choices yet
    assert RunStatus.from_json(old).to_json() == {**old, "step": 0, "fresh_start": False}
    assert RunConfig.from_json({"train": {"method": "calm"}}).environment is None


def test_the_status_writer_refuses_a_field_of_the_wrong_type(tmp_path: Path) -> None:
    from calm_core.runs.rundir import RunDir

    run = RunDir.create(tmp_path, "r1", {"train": {"method": "calm"}})
    before = (run.path / "status.json").read_text()
    with pytest.raises(TypeError, match="`step` is a str"):
        run.update_status(step="4")
    assert (run.path / "status.json").read_text() == before


# ----------------------------------------------------------------------------- the recommendation


def _written_recommendation() -> dict:
    """A recommendation as the final evaluation writes it (calibration/recommend.py)."""
    import numpy as np

    from tests.test_recommend import _recommend_ts

    pick = _recommend_ts(60, 0)
    assert isinstance(pick.heldout["ts"].nll, float) and not isinstance(pick.heldout["ts"].nll, np.floating)
    return pick.to_json()


def test_a_written_recommendation_reads_back_typed_and_round_trips() -> None:
    import json

    from calm_core.calibration.metrics.paired import PairedDifference
    from calm_core.runs.recommendation import Recommendation

    data = json.loads(json.dumps(_written_recommendation()))  # through the file's JSON
    rec = RunResults.from_json({"results": [], "recommendation": data}).recommendation
    assert isinstance(rec, Recommendation) and rec.comparison is not None
    assert isinstance(rec.comparison.against_reference["ts"], PairedDifference)
    assert rec.comparison.n == 60 and rec.heldout["base"].acc is not None
    assert rec.to_json() == data
    pooled = {**data, "calibrate_on": "all", "stages": {"all labelled": data, "S_V": data}}
    again = Recommendation.from_json(pooled)
    assert again.stages["S_V"] == rec and again.to_json() == pooled


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ({"heldout": {"ts": {"nll": "low"}}}, "`recommendation.heldout.ts.nll` is a str where a number belongs"),
        ({"comparison": {"n": "60"}}, "`recommendation.comparison.n` is a str where an int belongs"),
        ({"comparison": {"against_reference": {"ts": {"mean": 1}}}},
         "`recommendation.comparison.against_reference.ts.lo` is missing"),
        ({"stages": {"S_V": []}}, "`recommendation.stages.S_V` is a list where an object belongs"),
    ],
)
def test_a_damaged_recommendation_is_refused_by_its_dotted_key(damage: dict, problem: str) -> None:
    data = {"results": [], "recommendation": {**_written_recommendation(), **damage}}
    with pytest.raises(RunFileError, match=re.escape(problem)):
        RunResults.from_json(data)


def test_an_older_recommendation_without_comparison_reads() -> None:
    """Runs written before the paired comparison: `comparison` {} and no decision."""
    old = {"variant": "ts", "reason": "ts: S_V NLL 1.0", "heldout": {"ts": {"nll": 1.0, "acc": 0.5, "ece": 0.1}}}
    rec = RunResults.from_json({"results": [], "recommendation": {**old, "comparison": {}}}).recommendation
    assert rec is not None and rec.comparison is None and rec.reference == "base" and not rec.pooled
    assert rec.heldout["ts"].kept_accuracy and rec.heldout["ts"].confidence is None


def test_a_newer_writers_keys_in_nested_records_survive_a_rewrite() -> None:
    """Keys a record does not type, one level down too (the final evaluation's progress, a
    stop's candidate, a recommendation, its comparison and a variant's figures), are read
    into `extra` and written back: `update_status` rewrites status.json on every beat."""
    status = {"state": "running", "final": {"done": 1, "total": 4, "a_newer_count": 2},
              "selection": {"selected_step": 4, "selected": {"step": 4, "score": 0.9, "a_newer_score": 1.0}}}
    assert RunStatus.from_json(status).to_json()["final"] == status["final"]
    assert RunStatus.from_json(status).to_json()["selection"]["selected"] == status["selection"]["selected"]
    recommendation = {"variant": "ts", "a_newer_reason": "r", "heldout": {"ts": {"nll": 1.0, "a_newer_figure": 3}},
                      "comparison": {"n": 10, "a_newer_test": "t"}}
    written = RunResults.from_json({"results": [], "recommendation": recommendation}).to_json()["recommendation"]
    assert written["a_newer_reason"] == "r" and written["heldout"]["ts"]["a_newer_figure"] == 3
    assert written["comparison"]["a_newer_test"] == "t"
