"""The pure parts of bench/studio_load.py: percentiles, step latencies, /proc parsing, s/step.

    .venv/bin/python -m pytest tests/test_studio_load.py -q
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from bench import studio_load as bench


@pytest.mark.parametrize("values", [[3.0], [1.0, 2.0], [0.4, 2.9, 1.1, 0.0, 7.5, 2.2, 1.0]])
@pytest.mark.parametrize("q", [0, 50, 95, 100])
def test_percentile_matches_numpy(values: list[float], q: float) -> None:
    assert bench.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_percentile_of_nothing_is_none() -> None:
    assert bench.percentile([], 50) is None


def test_step_latency_is_the_first_time_the_page_shows_that_step_or_a_later_one() -> None:
    written = {5: 10.0, 6: 10.5, 7: 11.0, 8: 14.0, 9: 20.0}
    shown = [(9.0, 4), (12.0, 6), (13.0, 7), (15.5, 8)]  # the page jumped from 4 to 6: step 5 shows at 12.0
    latencies, missed = bench.step_latencies(written, shown)
    assert latencies == pytest.approx([2.0, 1.5, 2.0, 1.5])
    assert missed == 1  # step 9 was never shown


def test_vmrss_from_proc_status() -> None:
    text = "Name:\tstreamlit\nVmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nRssAnon:\t 100000 kB\n"
    assert bench.vmrss_kb(text) == 123456
    assert bench.vmrss_kb("Name:\tkthreadd\nState:\tS (sleeping)\n") == 0


def test_ppid_from_proc_stat_with_a_name_holding_spaces_and_parentheses() -> None:
    assert bench.stat_ppid("4242 (python3 (x) y) S 17 4242 4242 0 -1 4194560 5 0") == 17


def test_this_process_parses_from_the_real_proc() -> None:
    with open(f"/proc/{os.getpid()}/stat") as handle:
        assert bench.stat_ppid(handle.read()) == os.getppid()
    with open(f"/proc/{os.getpid()}/status") as handle:
        assert bench.vmrss_kb(handle.read()) > 1000


def test_tree_leaves_out_the_training_jobs_subtree() -> None:
    parents = {10: 1, 11: 10, 12: 11, 13: 10, 14: 13, 20: 1}  # 13 is a job, 14 its worker
    assert bench.tree_pids(10, parents) == {10, 11, 12, 13, 14}
    assert bench.tree_pids(10, parents, skip={13}) == {10, 11, 12}


def test_seconds_per_step_from_elapsed() -> None:
    records = [{"step": 3, "elapsed": 1.5}, {"step": 4, "elapsed": 2.0}, {"step": 7, "elapsed": 3.9}]
    assert bench.seconds_per_step(records) == pytest.approx(0.6)
    assert bench.seconds_per_step(records[:1]) is None


def test_reader_costs_counts_the_records_of_the_file(tmp_path) -> None:
    from calm_core.runs.rundir import RunDir

    run = RunDir(tmp_path)
    for step in range(1, 6):
        run.append_metrics({"step": step, "elapsed": 0.1 * step})
    costs = bench.reader_costs(run.metrics_path, repeats=3)
    assert costs["records"] == 5 and costs["bytes"] == run.metrics_path.stat().st_size
    assert costs["full_read_ms"] >= 0 and costs["tail_read_ms"] >= 0


def test_cpu_ticks_are_utime_plus_stime_after_a_name_with_parentheses() -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    text = "4242 (python3 (x) y) S 17 4242 4242 0 -1 4194560 5 0 1 0 120 35 9 9 20 0"
    assert bench.stat_cpu_ticks(text) == 155


def test_this_process_cpu_seconds_grow_with_work() -> None:
    with open(f"/proc/{os.getpid()}/stat") as handle:
        before = bench.stat_cpu_ticks(handle.read())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    with open(f"/proc/{os.getpid()}/stat") as handle:
        after = bench.stat_cpu_ticks(handle.read())
    assert (after - before) / os.sysconf("SC_CLK_TCK") == pytest.approx(0.3, abs=0.1)


def test_the_table_compares_each_cadence_with_its_own_idle_job_and_shows_a_broken_window() -> None:
    def r(every: float, window: str, spp: float) -> dict:
        return {"chart_seconds": every, "window": window, "seconds_per_step": spp, "latency_p50_s": None,
                "latency_p95_s": None, "latency_samples": 0, "steps_never_shown": 0, "runs_launched": 0,
                "launch_forms_refused": 0, "server_peak_rss_mb": 70.0, "server_cpu_s_per_min": 1.0,
                "browser_cpu_s_per_min": 0.0}

    rows = [r(3, "alone", 0.5), r(3, "4 watching", 2.0), r(15, "alone", 0.4), r(15, "4 watching", 0.8),
            {"chart_seconds": 15, "window": "8 watching", "error": "TimeoutError: Page.goto"}]
    lines = bench._table(rows).splitlines()
    assert "| 4.00x |" in lines[3] and "| 2.00x |" in lines[5]
    assert "broke: TimeoutError: Page.goto" in lines[6]


def test_cpu_used_counts_new_processes_whole_and_drops_ended_ones() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    before = {1: 100, 2: 50}  # 2 ends inside the window, 3 starts in it
    after = {1: 100 + 2 * tick, 3: tick}
    assert bench.cpu_used(before, after) == pytest.approx(3.0)
