"""`calm eval --model openai:URL`: scoring through an OpenAI-compatible /v1/completions server
(echo + logprobs, as lm-evaluation-harness's local-completions), and `--export DIR`, the
check that a served merged export gives the studio's calibrated probabilities.

The server is tests/openai_standin.py, answering from the tiny random Llama (or from a
merged export folder) in vLLM's format.

    .venv/bin/python -m pytest tests/test_served.py -q
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calm_core.export.folder import export_run
from calm_core.export.merged import CHECK_TOLERANCE
from calm_core.launch import run_config_record
from calm_core.runs.layout import predictions_path
from calm_core.runs.rundir import RunDir
from calm_core.scoring.served import load_served, ServedScorer
from calm_core.scoring.served_client import CompletionsClient, ServedModelError
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.evaluate import load_mc_items
from calm_core.training.loop import train
from tests.openai_standin import StandIn
from tests.test_cli import padded_probs, run_cli
from tests.test_trainer import fresh_lm, small_config

CAPITALS = "builtin/capitals/test"
LIMIT = 8
TOLERANCE = 1e-4  # abs, on probabilities: the bound


@pytest.fixture(scope="module")
def standin(tiny_model_dir: Path):
    with StandIn(tiny_model_dir) as server:
        yield server


def _eval(model: list[str], rule: str, out: Path) -> dict:
    argv = ["eval", *model, "--data", CAPITALS, "--limit", str(LIMIT), "--scoring", rule, "--quiet",
            "--json", str(out / "eval.json"), "--save-preds", str(out)]
    rc, stdout, stderr = run_cli(argv)
    assert rc == 0, stderr
    return json.loads((out / "eval.json").read_text())


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_a_served_model_scores_as_the_same_model_loaded(standin, tiny_model_dir, tmp_path, rule) -> None:
    served = _eval(["--model", f"openai:{standin.url}"], rule, tmp_path / "served")
    local = _eval(["--model", str(tiny_model_dir), "--dtype", "float32"], rule, tmp_path / "local")
    a = pd.read_parquet(predictions_path(tmp_path / "served", "base", CAPITALS))
    b = pd.read_parquet(predictions_path(tmp_path / "local", "base", CAPITALS))
    assert list(a["id"]) == list(b["id"]) and len(a) == LIMIT
    np.testing.assert_allclose(padded_probs(a), padded_probs(b), atol=TOLERANCE, rtol=0)
    for key in ("acc", "ece", "nll", "brier"):
        assert served["results"][0][key] == pytest.approx(local["results"][0][key], abs=TOLERANCE)
    assert served["model"]["kind"] == "served" and served["model"]["served_model"] == str(tiny_model_dir)
    sent = standin.requests[-1]  # the harness's loglikelihood request, token ids as the prompt
    assert sent["echo"] is True and sent["logprobs"] == 1 and sent["max_tokens"] == 1
    assert isinstance(sent["prompt"][0], list) and isinstance(sent["prompt"][0][0], int)


def test_requests_are_batched(standin) -> None:
    items = load_mc_items(CAPITALS, 4)
    before = len(standin.requests)
    scores = ServedScorer(load_served(f"openai:{standin.url}"), batch_size=5, progress=False).score(items)
    sequences = int(scores.n_choices.sum())
    assert len(standin.requests) - before == -(-sequences // 5)
    assert [len(r["prompt"]) for r in standin.requests[before:-1]] == [5] * (len(standin.requests) - before - 1)


def test_a_server_without_prompt_logprobs_is_refused_clearly(tiny_model_dir, capsys) -> None:
    with StandIn(tiny_model_dir, prompt_logprobs=False) as server:
        rc, _, stderr = run_cli(["eval", "--model", f"openai:{server.url}", "--data", CAPITALS, "--limit", "2",
                                 "--quiet"])
    assert rc == 2
    assert "does not return prompt log-probabilities (`echo: true` with `logprobs`)" in stderr


def test_a_transient_503_is_retried(tiny_model_dir) -> None:
    items = load_mc_items(CAPITALS, 2)
    with StandIn(tiny_model_dir, fail_first=2) as server:
        served = load_served(f"openai:{server.url}")
        served.client = CompletionsClient(server.url, backoff=0.01)
        scores = ServedScorer(served, progress=False).score(items)
        assert server.statuses[1:4] == [503, 503, 200]  # after GET /v1/models
    assert np.isfinite(scores.logits[:, :2]).all()


def test_a_server_that_keeps_failing_says_so(tiny_model_dir) -> None:
    with StandIn(tiny_model_dir, fail_first=10) as server:
        client = CompletionsClient(server.url, retries=2, backoff=0.01)
        with pytest.raises(ServedModelError, match="kept failing after 3 attempts"):
            client.complete({"prompt": [[1, 2]], "echo": True, "logprobs": 1, "max_tokens": 1})
        assert server.statuses == [503, 503, 503]


def test_an_unreachable_server_fails_after_its_retries() -> None:
    client = CompletionsClient("http://127.0.0.1:9/v1", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(ServedModelError, match="kept failing after 2 attempts"):
        client.served_models()


EXPORTS = {"letter": ("letter", "vocab"), "cloze": ("cloze", "scalar")}  # a shift file to carry; a formula


@pytest.fixture(scope="module")
def exports(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root, out = tmp_path_factory.mktemp("served-runs"), {}
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        for name, (rule, scope) in EXPORTS.items():
            cfg = small_config(model=str(tiny_model_dir), scoring=rule, scope=scope, heldout_limit=10, select="last")
            run = RunDir.create(root, f"served-{name}", run_config_record(cfg))
            train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
            out[name] = export_run(run, root / f"merged-{name}", merged=True)
    return out


@pytest.mark.parametrize("name", list(EXPORTS))
def test_a_served_export_passes_its_check(exports, name, tmp_path) -> None:
    folder = exports[name]
    with StandIn(folder) as server:
        rc, stdout, stderr = run_cli(["eval", "--model", f"openai:{server.url}", "--export", str(folder),
                                      "--json", str(tmp_path / "check.json")])
    assert rc == 0, stdout + stderr
    forms = json.loads((tmp_path / "check.json").read_text())["forms"]
    assert set(forms) == ({"echo", "logit_bias"} if name == "letter" else {"echo"})
    assert all(form["ok"] and form["max_abs_diff"] <= CHECK_TOLERANCE for form in forms.values())
    if name == "letter":
        assert any("logit_bias" in r for r in server.requests)


def test_the_letter_shifts_matter_to_the_check(exports) -> None:
    """The shipped shifts move the probabilities by more than the tolerance: a request
    without them would fail the check (so passing it means they were carried)."""
    record = json.loads((exports["letter"] / "calm_export.json").read_text())
    assert record["merged"]["fold"] == "temperature"
    with StandIn(exports["letter"]) as server:
        served = load_served(f"openai:{server.url}", str(exports["letter"]))
        z = ServedScorer(served, progress=False).score(_check_items(), ScoringConfig(rule="letter")).logits
    plain = np.exp(z - z.max(1, keepdims=True))
    plain /= plain.sum(1, keepdims=True)
    reference = record["merged"]["check"]["probabilities"]
    gap = max(np.abs(plain[i, : len(row)] - row).max() for i, row in enumerate(reference))
    assert gap > 10 * CHECK_TOLERANCE


def _check_items() -> list:
    from calm_core.export.merged import CHECK_ITEMS

    return list(CHECK_ITEMS)


def test_a_server_that_drops_logit_bias_is_named_and_echo_still_checks(exports, tmp_path) -> None:
    folder = exports["letter"]
    with StandIn(folder, honour_bias=False) as server:
        rc, stdout, _ = run_cli(["eval", "--model", f"openai:{server.url}", "--export", str(folder),
                                 "--json", str(tmp_path / "check.json")])
    forms = json.loads((tmp_path / "check.json").read_text())["forms"]
    assert rc == 0 and forms["echo"]["ok"]
    assert "ignores `logit_bias`" in forms["logit_bias"]["why"] and "processed_logprobs" in stdout


@pytest.mark.parametrize("name", list(EXPORTS))
def test_the_cards_served_snippet_runs_its_self_check(exports, name) -> None:
    folder = exports[name]
    card = (folder / "README.md").read_text()
    section = card[card.index("## Serve it"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    with StandIn(folder, name="served-export") as server:
        code = code.replace('"http://127.0.0.1:8000/v1", "path/to/this/folder"', f'"{server.url}", "served-export"')
        code = code.replace('"path/to/this/folder"', repr(str(folder)))
        exec(compile(code, "card", "exec"), {})  # the card's assert is the self-check
        assert server.requests and all(r["model"] == "served-export" for r in server.requests)
