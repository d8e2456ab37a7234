"""No silence (issue 40): the first `bash scripts/studio.sh` printed nothing for about 4
minutes (pip, then the model conversion). Every set-up stage now says what it does and,
while it runs, a line every `TICK_S` seconds: scripts/ticker.sh for pip's stages and
scoring/progress.py's `Ticker` for the conversion and the quiz. Here both run a stubbed
long step with a short tick and the gaps between the printed lines are measured; the
whole first run on a fresh clone is bench/studio_silence.py's (minutes: a bench, not a test).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from calm_core.scoring.progress import TICK_S, Ticker

ROOT = Path(__file__).resolve().parent.parent
PROMISED_GAP_S = 20.0  # the bar: a line at least every 20 s


def _timed_lines(command: list[str], env: dict[str, str] | None = None) -> tuple[list[tuple[float, str]], int, float]:
    """(seconds since start, line) for each line `command` prints, its exit status, and
    how long after its last line its output closed."""
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    lines = [(time.monotonic() - start, line.rstrip("\n")) for line in process.stdout]
    closed = time.monotonic() - start
    return lines, process.wait(), closed - (lines[-1][0] if lines else 0.0)


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times[:-1], times[1:], strict=True)]


def test_the_ticks_are_within_the_promise_and_the_shells_waits_for_pythons() -> None:
    shell = float(re.search(r"CALM_TICK_S:-(\d+)\}", (ROOT / "scripts" / "ticker.sh").read_text())[1])
    assert 0 < TICK_S < shell < PROMISED_GAP_S  # a step that ticks itself is not doubled by the shell


def test_a_line_arriving_when_the_shells_tick_is_due_is_kept_whole() -> None:
    """The first bench run cut Python's tick in two ("c", then the shell's tick, then "alm: still ...")."""
    slow_line = "sleep 0.3; printf 'calm: still'; sleep 0.6; echo ' converting'; sleep 0.2"
    script = f'source scripts/ticker.sh; CALM_TICK_S=0.5 ticking "x" bash -c "{slow_line}"'
    lines, status, _ = _timed_lines(["bash", "-c", script])
    assert status == 0 and [text for _, text in lines] == ["setup: x", "calm: still converting"]


def test_a_long_shell_step_says_a_line_every_tick_and_keeps_its_status() -> None:
    script = ('source scripts/ticker.sh; CALM_TICK_S=0.5 ticking "a stub step" sleep 2.2; '
              'CALM_TICK_S=0.5 TICK_PREFIX=studio ticking "a failing step" bash -c "sleep 0.7; exit 3"')
    lines, status, lingered = _timed_lines(["bash", "-c", script])
    texts = [text for _, text in lines]
    assert status == 3  # the failing step's status is the script's
    assert texts[0] == "setup: a stub step" and texts[-2] == "studio: a failing step"
    assert sum(t.startswith("setup: still a stub step (") for t in texts) >= 3
    assert max(_gaps([0.0] + [t for t, _ in lines])) < 0.5 + 0.4  # the tick, and scheduling slack
    assert lingered < 0.4  # the script's end is seen at once: nothing of the ticker holds its output open


def test_a_step_that_speaks_for_itself_is_passed_through_not_doubled() -> None:
    """The model conversion prints its own lines (and its own ticks): while they come more
    often than the tick, the shell's ticker adds nothing; when they stop, it speaks."""
    chatty = "for i in 1 2 3 4 5 6; do sleep 0.2; echo step \\$i >&2; done; sleep 1.3; printf last"
    script = f'source scripts/ticker.sh; CALM_TICK_S=0.5 ticking "chat" bash -c "{chatty}"'
    lines, status, _ = _timed_lines(["bash", "-c", script])
    texts = [text for _, text in lines]
    assert status == 0
    assert texts[:7] == ["setup: chat", *(f"step {i}" for i in range(1, 7))]  # stderr too, in order
    assert texts[-1] == "last" and 2 <= sum(t.startswith("setup: still chat (") for t in texts) <= 3
    assert max(_gaps([0.0] + [t for t, _ in lines])) < 0.5 + 0.4


def test_setup_runs_every_install_under_the_ticker() -> None:
    """A pip stage added without `ticking` would be a silent minute on a fresh clone."""
    logical = (ROOT / "scripts" / "setup.sh").read_text().replace("\\\n", " ").splitlines()
    installs = [line for line in logical if re.search(r"\bquiet_pip install|-m venv", line)]
    assert len(installs) >= 6 and all("ticking " in line for line in installs), installs


def test_the_floors_job_ticks_through_the_same_ticker() -> None:
    """scripts/test_floors.sh had its own heartbeat loop, a second copy of the rule: its pip
    stages and its tests now go through scripts/ticker.sh's `ticking`, with no loop of its own."""
    text = (ROOT / "scripts" / "test_floors.sh").read_text()
    assert "source scripts/ticker.sh" in text and "TICK_PREFIX=floors" in text
    assert not re.search(r"\bsleep\b|kill -0", text), "a heartbeat loop of its own"
    logical = text.replace("\\\n", " ").splitlines()
    steps = [line for line in logical if re.search(r"\bquiet_pip install|-m venv|-m pytest", line)]
    assert len(steps) >= 6 and all("ticking " in line for line in steps), steps


def test_a_long_python_step_says_a_line_every_tick_with_its_progress() -> None:
    said: list[tuple[float, str]] = []
    start = time.monotonic()
    with Ticker(every=0.2, say=lambda line: said.append((time.monotonic() - start, line))) as ticker:
        ticker.step(2, 4, "de-quantizing 272 tensors")
        time.sleep(0.5)
        update = ticker.progress("scoring Learn's quiz")
        ticker.stage("scoring Learn's quiz")
        for done in range(1, 5):
            update(done, 40)
            time.sleep(0.15)
    texts = [text for _, text in said]
    assert texts[0] == "converting [2/4] de-quantizing 272 tensors"
    assert "still converting [2/4] de-quantizing 272 tensors (0 s)" in texts  # rounded: the stage is 0.2 s old
    assert any(re.fullmatch(r"still scoring Learn's quiz \([1-4]/40 done\) \(\d s\)", t) for t in texts)
    assert max(_gaps([0.0] + [t for t, _ in said])) < 0.2 + 0.15
    assert len(texts) <= 2 + (0.5 + 0.6) / 0.2 + 1  # progress updates add no lines of their own
    count = len(said)
    time.sleep(0.3)
    assert len(said) == count  # the ticker stops with its block


def test_the_quiz_setup_says_each_stage(tiny_lm, tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    import calm_core.scoring.score_cache as score_cache

    monkeypatch.setattr(score_cache, "scores_root", lambda: tmp_path / "scores")
    monkeypatch.setattr(score_cache, "load_model", lambda name: tiny_lm)
    said: list[str] = []
    with Ticker(every=60, say=said.append) as ticker:
        score_cache.prepare_learn_quiz(score_cache.Quiz("builtin/chemical_symbols/test", limit=4), tiny_model_dir, ticker)
    assert said == ["loading the embedded model to score Learn's quiz once (4 questions)", "scoring Learn's quiz"]


@pytest.mark.parametrize("step", ["print_step", "own"])
def test_the_command_lines_conversion_ticks_and_a_callers_own_step_is_kept(step: str, tmp_path: Path,
                                                                           monkeypatch, capsys) -> None:
    """`named_model_dir` with the default step (the CLI) runs the conversion under a
    Ticker; a caller's own step function (the studio's progress) is called as it was."""
    import calm_core.scoring.named_models as models
    from calm_core.scoring import gguf_convert

    monkeypatch.setenv("CALM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("calm_core.scoring.progress.TICK_S", 0.1)
    calls = []

    def slow_convert(gguf, target, label, step_fn, extra):
        step_fn(2, 4, "de-quantizing")
        time.sleep(0.35)
        calls.append(step_fn)

    monkeypatch.setattr(models, "convert_gguf", slow_convert)
    own = [] if step == "own" else None
    models.named_model_dir("embedded", **({"step": lambda *a: own.append(a)} if own is not None else {}))
    err = capsys.readouterr().err
    if own is None:
        assert "calm: converting [2/4] de-quantizing" in err and "calm: still converting [2/4] de-quantizing" in err
        assert gguf_convert.print_step not in calls
    else:
        assert own == [(2, 4, "de-quantizing")] and "still" not in err
