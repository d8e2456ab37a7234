"""The studio under N concurrent browser sessions: Monitor latency, server memory, job speed.

    PYTHONPATH=$PWD .venv/bin/python bench/studio_load.py [--sessions 1 4 8] [--seconds 60]
        [--model tiny|embedded] [--chart-seconds 3 15] [--json bench/results/studio_load.json]

One `streamlit run app/main.py` on a free loopback port over a temporary workspace
(tests/test_browser.py `running_studio`), and one training job in it (launched as the
Train page launches, `launch_training`): the tiny random Llama of tests/conftest.py by
default, or the embedded model; `select last`, no periodic evaluation and no checkpoints,
so every step costs the same, and steps enough to outlast the bench (it is killed at the
end). Then, one window of `--seconds` each:

- `alone`: no browser; the job's s/step with the server idle.
- for each N of `--sessions`: N Chromium contexts (Debian chromium, headless, each its
  own Streamlit session) open the Monitor on the job, and one more context launches short
  runs from the Train page again and again (they wait `queued`: one job slot; they are
  cancelled when the window ends).
- `alone again`: as the first, to tell load from drift.

Measured per window: for each step the job writes, the time from the bench seeing its
line in metrics.jsonl (polled every `POLL_S`) to each watching page's progress line
showing that step or a later one (a MutationObserver in the page notes when its
"step k/N" changes; browser and bench share the machine's clock), as p50 / p95 over
steps x pages; the steps a page never showed (by `SHOW_GRACE_S` after the window); the
peak RSS of the studio server's process tree (streamlit and its children, training jobs
excluded), sampled every `RSS_EVERY_S`; the job's s/step from the `elapsed` of its records. The
Monitor polls every 3 s (app/pages/monitor/monitor.py POLL_SECONDS), so the latency of an idle
studio is spread over 0-3 s by design: what matters is how it grows with N. Also per
window: the CPU seconds per minute of the studio server (jobs left out) and of the browsers
(all Chromium processes: here they share the job's 2 cores; a real shared studio's browsers
run on its users' machines). The whole is done once per `--chart-seconds` value, each a
fresh studio with CALM_MONITOR_CHART_SECONDS set (the Monitor's chart redraw interval; its
progress line keeps the 3 s poll), so the cadences are compared side by side. At the end,
what one poll spends reading the job's metrics.jsonl, whole (`RunDir.read_metrics`) and
through a primed `MetricsTail` (what the Monitor does since issue 22).

Prints a table and writes `--json`. Bounded: `--seconds` per window and `--timeout` over all.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POLL_S = 0.025  # the bench's own look at metrics.jsonl: the reference time of each step
RSS_EVERY_S = 0.5
SHOW_GRACE_S = 5.0  # after a window, before reading what the pages showed: over one Monitor poll (3 s)
EXTRA_CHROMIUM_ARGS = ["--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                       "--disable-backgrounding-occluded-windows"]  # every page polls as if in front
LAUNCHED_STEPS, LAUNCHED_EVAL_ITEMS = 12, 20  # the launcher's runs (they stay queued)
LAUNCH_S = 15  # about one launch's page work: no new launch starts closer than this to a window's end
PAGE_WAIT_MS = 240_000  # a page's load under the heaviest window
JOB_MARK = "--run-dir"  # in a training job's command line (calm_core.runs.jobs.RUN_DIR_OPTION)
OBSERVER_JS = """() => {
    window.__shown = [];
    let last = null;
    const check = () => {
        const bar = document.querySelector('[data-testid="stProgress"]');
        const found = bar && bar.innerText.match(/step (\\d+)\\//);
        if (found && found[1] !== last) { last = found[1]; window.__shown.push([Date.now() / 1000, Number(last)]); }
    };
    new MutationObserver(check).observe(document.body, {subtree: true, childList: true, characterData: true});
    check();
}"""


# ---------------------------------------------------------------------------- pure parts (tests/test_studio_load.py)

def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between order statistics
    (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def step_latencies(written: dict[int, float], shown: list[tuple[float, int]]) -> tuple[list[float], int]:
    """(seconds from each step's write to the first time the page showed it or a later
    step, how many steps it never showed). `written`: step -> time first seen in
    metrics.jsonl; `shown`: (time, step shown) as the page changed, in time order."""
    latencies, missed = [], 0
    for step, at in sorted(written.items()):
        first = next((t for t, k in shown if k >= step), None)
        if first is None:
            missed += 1
        else:
            latencies.append(first - at)
    return latencies, missed


def vmrss_kb(status_text: str) -> int:
    """VmRSS (kB) from /proc/<pid>/status text; 0 when absent (a zombie, a kernel thread)."""
    found = re.search(r"^VmRSS:\s+(\d+)\s+kB", status_text, re.MULTILINE)
    return int(found.group(1)) if found else 0


def stat_ppid(stat_text: str) -> int:
    """The parent pid from /proc/<pid>/stat text (the command name in parentheses may hold
    spaces and parentheses itself, so fields are counted after its last ')')."""
    return int(stat_text.rsplit(")", 1)[1].split()[1])


def tree_pids(root: int, parents: dict[int, int], skip: set[int] = frozenset()) -> set[int]:
    """`root` and its descendants under `parents` (pid -> ppid), without the subtrees of `skip`."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found or pid in skip:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    return found


def stat_cpu_ticks(stat_text: str) -> int:
    """utime + stime (clock ticks) from /proc/<pid>/stat text: fields 14 and 15, counted
    after the command name's last ')' as stat_ppid does."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def seconds_per_step(records: list[dict]) -> float | None:
    """Wall seconds per step over consecutive records (the job's own `elapsed` clock)."""
    if len(records) < 2 or records[-1]["step"] == records[0]["step"]:
        return None
    return (records[-1]["elapsed"] - records[0]["elapsed"]) / (records[-1]["step"] - records[0]["step"])


# ---------------------------------------------------------------------------- /proc

def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _processes() -> dict[int, int]:
    """pid -> ppid of every process on the machine (Linux /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            text = _read(f"/proc/{entry}/stat")
            if text:
                parents[int(entry)] = stat_ppid(text)
    return parents


def _cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace("\0", " ")


def _ticks(pids: set[int]) -> dict[int, int]:
    texts = {pid: _read(f"/proc/{pid}/stat") for pid in pids}
    return {pid: stat_cpu_ticks(text) for pid, text in texts.items() if text}


def cpu_snapshot(server_pid: int) -> tuple[dict[int, int], dict[int, int]]:
    """({pid: CPU ticks so far} of the studio server's tree without the jobs, of every
    Chromium process): `cpu_used` of two snapshots is a window's CPU use."""
    parents = _processes()
    jobs = {pid for pid in parents if JOB_MARK in _cmdline(pid)}
    browsers = {pid for pid in parents if "chrom" in _read(f"/proc/{pid}/comm")}
    return _ticks(tree_pids(server_pid, parents, jobs)), _ticks(browsers)


def cpu_used(before: dict[int, int], after: dict[int, int]) -> float:
    """CPU seconds between two {pid: ticks} snapshots: each process alive at the end, less
    what it had at the start (0 if it started since). A process that ended inside the
    window takes its seconds with it, so this is a lower bound."""
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items()) / os.sysconf("SC_CLK_TCK")


def server_rss_mb(server_pid: int) -> float:
    """RSS of the studio server and its children, training jobs (and theirs) left out."""
    parents = _processes()
    jobs = {pid for pid in parents if JOB_MARK in _cmdline(pid)}
    return sum(vmrss_kb(_read(f"/proc/{pid}/status")) for pid in tree_pids(server_pid, parents, jobs)) / 1024


def _streamlit_pid() -> int:
    """The bench's own child running streamlit (running_studio starts it)."""
    parents = _processes()
    for pid, ppid in parents.items():
        if ppid == os.getpid() and "streamlit" in _cmdline(pid):
            return pid
    raise RuntimeError("no streamlit child process found")


# ---------------------------------------------------------------------------- watching the job

@dataclass
class Window:
    """What the bench's own threads saw during one measured window."""

    written: dict[int, float] = field(default_factory=dict)  # step -> time its line was first seen
    records: list[dict] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    seconds: float = 0.0  # how long it lasted
    server_cpu_s: float = 0.0  # CPU seconds of the studio server (jobs left out) in the window
    browser_cpu_s: float = 0.0  # of every Chromium process


class Watcher:
    """Two threads for the whole bench: one polls metrics.jsonl (MetricsTail) and notes when
    each step appears, one samples the server's RSS; `window()` collects into a fresh Window."""

    def __init__(self, metrics_path: Path, server_pid: int) -> None:
        from calm_core.runs.metrics_lines import MetricsTail

        self.tail, self.server_pid = MetricsTail(metrics_path), server_pid
        self.current: Window | None = None
        self.last_step = -1
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._poll_metrics, daemon=True),
                        threading.Thread(target=self._poll_rss, daemon=True)]
        for thread in self.threads:
            thread.start()

    def _poll_metrics(self) -> None:
        seen = 0
        while not self.done.wait(POLL_S):
            now = time.time()
            records = self.tail.read()
            new, seen = records[seen:] if len(records) >= seen else records, len(records)
            for record in new:
                if record["step"] > self.last_step:
                    self.last_step = record["step"]
                    if self.current is not None:
                        self.current.written[record["step"]] = now
                        self.current.records.append(record)

    def _poll_rss(self) -> None:
        while not self.done.wait(RSS_EVERY_S):
            window = self.current
            if window is not None:
                window.peak_rss_mb = max(window.peak_rss_mb, server_rss_mb(self.server_pid))

    def window(self, seconds: float, during: Callable[[float], None] | None = None) -> Window:
        """Collect for `seconds` (longer if `during(deadline)`, the launcher, runs over)."""
        self.current = window = Window()
        cpu_before = cpu_snapshot(self.server_pid)
        started = time.monotonic()
        deadline = started + seconds
        if during is not None:
            during(deadline)
        while time.monotonic() < deadline:
            time.sleep(0.1)
        self.current = None
        window.seconds = time.monotonic() - started
        cpu_after = cpu_snapshot(self.server_pid)
        window.server_cpu_s, window.browser_cpu_s = (cpu_used(b, a) for b, a in zip(cpu_before, cpu_after))
        return window

    def wait_for_steps(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.last_step < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job logged no step {n} within {timeout_s:.0f} s")
            time.sleep(0.5)

    def stop(self) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join()


# ---------------------------------------------------------------------------- the studio and the browser

def launch_job(model: str, runs: Path):
    """The measured job, launched as the Train page launches (one path: launch_training)."""
    from calm_core.training.config import TrainConfig
    from calm_core.launch import launch_training

    cfg = TrainConfig(model=model, steps=100_000, select="last", eval_every=0, eval_dense_until=0,
                      checkpoint_every=0, eval_limit=20, heldout_limit=20, lora={"layers": 1}, device="cpu",
                      name="load-watched")
    run, _ = launch_training(cfg, runs)
    return run


def open_monitor(context, url: str, run_id: str):
    """A page on the Monitor showing `run_id`, with the step observer installed."""
    from playwright.sync_api import expect

    page = context.new_page()
    page.set_default_navigation_timeout(PAGE_WAIT_MS)  # 8 cold pages on 2 cores take minutes
    page.goto(f"{url}/monitor")
    chosen = page.locator(".st-key-monitor_select").get_by_role("combobox")
    chosen.wait_for(timeout=180_000)
    if not chosen.input_value().startswith(run_id):  # a newer (launched) run is listed first
        chosen.click()
        page.keyboard.type(run_id)
        page.keyboard.press("Enter")
    # the picker shows `id · state · method on S_T · start time` (runs.listing.run_label)
    expect(chosen).to_have_value(re.compile("^" + re.escape(run_id)), timeout=60_000)
    page.locator('[data-testid="stProgress"]').first.wait_for(timeout=120_000)
    page.evaluate(OBSERVER_JS)
    return page


def launcher(context, url: str, model_dir: Path | None, tag: str) -> tuple[dict, Callable[[float], None]]:
    """(what it did: `runs` launched and `refused` forms, a `during(deadline)` that keeps
    launching short runs from the Train page until the deadline). A form whose Launch
    button stays disabled (no evaluation set chosen) or that times out is counted as
    refused and opened afresh."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    from tests.test_browser import fill_short_tiny_run

    done: dict = {"runs": [], "refused": 0}

    def launch_once(page) -> None:
        page.goto(f"{url}/train")
        page.get_by_role("heading", name="Train").first.wait_for(timeout=180_000)
        fill_short_tiny_run(page, model_dir, LAUNCHED_STEPS, LAUNCHED_EVAL_ITEMS, f"{tag}-{len(done['runs'])}")
        button = page.get_by_role("button", name="Launch training")
        try:
            expect(button).to_be_enabled(timeout=30_000)
        except AssertionError:
            done["refused"] += 1
            return
        button.click()
        page.get_by_text("Follow it on the Monitor page").wait_for(timeout=180_000)
        text = page.locator('[data-testid="stAlert"]').filter(has_text="Run ").first.inner_text()
        found = re.search(r"Run\s+(\S+)\s+(started|queued)", text)
        done["runs"].append(found.group(1) if found else "?")

    def during(deadline: float) -> None:
        page = context.new_page()
        while not (done["runs"] or done["refused"]) or time.monotonic() < deadline - LAUNCH_S:
            try:
                launch_once(page)
            except PlaywrightTimeout:
                done["refused"] += 1
        page.close()

    return done, during


def stop_launched(runs: Path, keep: str) -> None:
    """Cancel the launcher's queued runs; kill one that started anyway (not `keep`)."""
    from calm_core.runs.jobs import kill
    from calm_core.runs.queue import cancel
    from calm_core.runs.listing import list_runs
    from calm_core.runs.rundir import RunDir

    for summary in list_runs(runs):
        if summary.run_id == keep:
            continue
        if summary.state == "queued":
            cancel(RunDir(summary.path))
        elif summary.state in ("running", "stopping"):
            kill(RunDir(summary.path))


def measure_sessions(browser, n: int, url: str, job, watcher: Watcher, seconds: float,
                     model_dir: Path | None) -> dict:
    """One window with `n` watching contexts and one launching context."""
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1400}) for _ in range(n + 1)]
    try:
        pages = [open_monitor(context, url, job.run_id) for context in contexts[:n]]
        launched, during = launcher(contexts[n], url, model_dir, f"load-n{n}")
        window = watcher.window(seconds, during)
        time.sleep(SHOW_GRACE_S)  # the window's last steps get their poll too
        shown = [[tuple(x) for x in page.evaluate("() => window.__shown")] for page in pages]
    except Exception as error:  # noqa: BLE001 - a window that breaks is a measured result, not the bench's end
        _screenshots(contexts, f"failure-n{n}")
        return {"window": f"{n} watching", "error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
    finally:
        for context in contexts:
            context.close()
        stop_launched(job.path.parent, job.run_id)
    latencies, missed = [], 0
    for page_shown in shown:
        got, lost = step_latencies(window.written, page_shown)
        latencies += got
        missed += lost
    return row(f"{n} watching", window, latencies, missed, launched=len(launched["runs"]),
               refused=launched["refused"])


def _screenshots(contexts, prefix: str) -> None:
    """Every open page, to $CALM_SCREENSHOTS (default: a temporary folder), named in the output."""
    from tests.test_browser import _shots

    folder = _shots()
    for i, context in enumerate(contexts):
        for j, page in enumerate(context.pages):
            try:
                page.screenshot(path=str(folder / f"{prefix}-{i}-{j}.png"), full_page=True)
            except Exception as error:  # noqa: BLE001 - a page that cannot be drawn is noted, not fatal
                print(f"no screenshot of context {i} page {j}: {error}")
    print(f"screenshots in {folder}")


def row(name: str, window: Window, latencies: list[float] | None = None, missed: int = 0, launched: int = 0,
        refused: int = 0) -> dict:
    latencies = latencies or []
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    spp = seconds_per_step(window.records)
    return {"window": name, "seconds": round(window.seconds, 1), "steps": len(window.written),
            "seconds_per_step": spp and round(spp, 4),
            "latency_p50_s": p50 and round(p50, 3), "latency_p95_s": p95 and round(p95, 3),
            "latency_samples": len(latencies), "steps_never_shown": missed, "runs_launched": launched,
            "launch_forms_refused": refused,
            "server_peak_rss_mb": round(window.peak_rss_mb, 1),
            "server_cpu_s_per_min": round(60 * window.server_cpu_s / window.seconds, 1),
            "browser_cpu_s_per_min": round(60 * window.browser_cpu_s / window.seconds, 1)}


def reader_costs(path: Path, repeats: int = 20) -> dict:
    """What one Monitor poll spends reading metrics.jsonl at its length now: the whole file
    (`RunDir.read_metrics`, as before) against a primed `MetricsTail` (nothing new since the
    last poll), median of `repeats` each, in ms."""
    from calm_core.runs.metrics_lines import MetricsTail
    from calm_core.runs.rundir import RunDir

    def median_ms(read: Callable[[], list]) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            read()
            times.append(time.perf_counter() - started)
        return round(1000 * percentile(times, 50), 3)

    tail = MetricsTail(path)
    records = tail.read()
    return {"records": len(records), "bytes": path.stat().st_size,
            "full_read_ms": median_ms(RunDir(path.parent).read_metrics), "tail_read_ms": median_ms(tail.read)}


# ---------------------------------------------------------------------------- main

def _table(rows: list[dict]) -> str:
    """One line per window; `vs alone` against the first `alone` window of the same studio
    (the same chart cadence), so each cadence is compared with its own idle job."""
    lines = ["| charts every | window | job s/step | vs alone | Monitor latency p50 / p95 s (samples, never shown) "
             "| server CPU s/min | browsers CPU s/min | server peak RSS MB | runs launched (forms refused) |",
             "|---|---|---|---|---|---|---|---|---|"]
    alone: dict = {}
    for r in rows:
        every = f"{r['chart_seconds']:g} s"
        if "error" in r:
            lines.append(f"| {every} | {r['window']} | broke: {r['error']} | | | | | | |")
            continue
        base = alone.setdefault(r["chart_seconds"], r["seconds_per_step"])
        ratio = f"{r['seconds_per_step'] / base:.2f}x" if base and r["seconds_per_step"] else "-"
        latency = (f"{r['latency_p50_s']} / {r['latency_p95_s']} ({r['latency_samples']}, {r['steps_never_shown']})"
                   if r["latency_samples"] else "-")
        watching = r["window"].endswith("watching")
        launched = f"{r['runs_launched']} ({r['launch_forms_refused']} refused)" if watching else "-"
        lines.append(f"| {every} | {r['window']} | {r['seconds_per_step']} | {ratio} | {latency} "
                     f"| {r['server_cpu_s_per_min']} | {r['browser_cpu_s_per_min']} | {r['server_peak_rss_mb']} "
                     f"| {launched} |")
    return "\n".join(lines)


def _machine() -> dict:
    cpu = re.search(r"^model name\s*:\s*(.+)$", _read("/proc/cpuinfo"), re.MULTILINE)
    return {"cpu": cpu.group(1) if cpu else platform.processor(), "cores": os.cpu_count(),
            "python": platform.python_version(), "load_average_at_start": os.getloadavg()}


def _timeout(seconds: int) -> None:
    def expire(signum, frame):
        raise TimeoutError(f"studio_load.py ran past --timeout {seconds} s")

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8], help="watching sessions per window")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each measured window")
    parser.add_argument("--model", choices=["tiny", "embedded"], default="tiny", help="the watched job's model")
    parser.add_argument("--chart-seconds", type=float, nargs="+", default=[3.0, 15.0],
                        help="the Monitor's chart redraw intervals to compare (CALM_MONITOR_CHART_SECONDS), "
                             "one studio each; 3 s was the single poll before issue 22's fix")
    parser.add_argument("--timeout", type=int, help="hard limit over everything (default: windows + 15 min)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "studio_load.json")
    args = parser.parse_args()
    if any(n < 1 or n > 16 for n in args.sessions):
        parser.error(f"Expected --sessions between 1 and 16, but got {args.sessions}")
    _timeout(args.timeout or len(args.chart_seconds) * (int(args.seconds * (len(args.sessions) + 2)) + 900))
    machine, reads, rows = _machine(), {}, []
    for every in args.chart_seconds:
        with tempfile.TemporaryDirectory(prefix="calm-studio-load-") as scratch:
            rows += [{"chart_seconds": every, **r} for r in _bench(Path(scratch), args, reads, every)]
    print("\n" + _table(rows))
    print(f"\none poll's read of the job's metrics.jsonl ({reads['records']} records, {reads['bytes']} bytes): "
          f"whole file {reads['full_read_ms']} ms, MetricsTail {reads['tail_read_ms']} ms")
    result = {"command": " ".join(["bench/studio_load.py", *sys.argv[1:]]), "machine": machine, "model": args.model,
              "seconds_per_window": args.seconds, "chart_seconds": args.chart_seconds, "rows": rows,
              "metrics_read_per_poll": reads}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


def _bench(scratch: Path, args: argparse.Namespace, reads: dict, chart_seconds: float) -> list[dict]:
    """One studio whose Monitor redraws its charts every `chart_seconds`: its windows."""
    from playwright.sync_api import sync_playwright

    from bench.streaming import tiny_model
    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, running_studio
    from tests.test_browser_sessions import _stop_leftover_jobs

    workspace = scratch / "workspace"
    os.environ["CALM_WORKSPACE"] = str(workspace)  # the job and the bench's own reads
    os.environ["CALM_MAX_JOBS"] = "1"  # the launcher's runs wait queued behind the job
    model_dir = tiny_model(scratch) if args.model == "tiny" else None
    rows: list[dict] = []
    with running_studio(scratch, workspace, CALM_MAX_JOBS="1", CALM_MONITOR_CHART_SECONDS=str(chart_seconds)) as url:
        job = launch_job(str(model_dir) if model_dir else "embedded", workspace / "runs")
        watcher = Watcher(job.metrics_path, _streamlit_pid())
        try:
            watcher.wait_for_steps(3, timeout_s=600)
            rows.append(row("alone", watcher.window(args.seconds)))
            print(chart_seconds, rows[-1], flush=True)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + EXTRA_CHROMIUM_ARGS,
                                             headless=True)
                try:
                    for n in args.sessions:
                        rows.append(measure_sessions(browser, n, url, job, watcher, args.seconds, model_dir))
                        print(chart_seconds, rows[-1], flush=True)
                finally:
                    browser.close()
            rows.append(row("alone again", watcher.window(args.seconds)))
            print(chart_seconds, rows[-1], flush=True)
            reads.update(reader_costs(job.metrics_path))
        finally:
            watcher.stop()
            _stop_leftover_jobs(workspace / "runs")
    return rows


if __name__ == "__main__":
    sys.exit(main())
