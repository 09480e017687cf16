"""Run explorer benchmark: the run page's render time in Chromium at 10k and 100k steps.

    .venv/bin/python benchmarks/explorer.py                          # this checkout's page
    git archive <commit> | tar -x -C /tmp/before                     # and another version's, interleaved:
    .venv/bin/python benchmarks/explorer.py --source /tmp/before --source .

One SQLite store per size holds a run of N steps with COLUMNS scalars each (the catalog's per-step
gauges, a KL spike at two thirds) and an alert at the spike; it is built once into --db-dir and
reused, so two versions of the page read the same rows. A sidecar started from --source serves it;
Debian's Chromium (Playwright, 1366x900, the tests' launch) loads the run page ROUNDS times after a
warm-up load, taking the sources in turn (a sidecar each, on the same store). Per load:

- ready: navigation start to the page's `data-ready="run"` (the charts in view, alerts and the
  samples box drawn; the steps API's downsampling to about 1366 rows per request included), ms
- after data: from the last steps answer's end to ready: the page's own work on the rows, ms
  (a page that asks per chart draws each chart as its rows come: this is then the last one's)
- main CPU: the CPU time of the page's main thread over the load (CDP Performance.getMetrics
  ThreadTime): scripting, style, layout and paint, ms; on a shared machine steadier than times
- smooth: smoothing turned on, until the second frame after it (every chart drawn, or only those
  in view where the page draws charts as they scroll near, drawn again from the rows at hand, no
  request), ms, and the main thread's CPU time for it
- resmooth: the smoothing weight changed again (uPlot: the same charts given new values), the same
- steps requests and the bytes they carried.

Prints a table of medians.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from otel_grpo import catalog  # noqa: E402
from otel_grpo.sidecar.otlp._extract import Batch, StepRecord  # noqa: E402
from otel_grpo.sidecar.store import open_store  # noqa: E402

RUN = "bench"
COLUMNS = 110  # a real run's step columns: ~112 (issue 66)
WRITE_STEPS = 2000  # steps per store transaction while filling
READY = """window.__ready = null; new MutationObserver(() => {
  if (window.__ready === null && document.body && document.body.dataset.ready === 'run') window.__ready = performance.now();
}).observe(document, {attributes: true, subtree: true, attributeFilter: ['data-ready']});"""
SMOOTH = """async (weight) => { const s = document.querySelector('#smooth'); const t0 = performance.now();
  s.value = weight; s.dispatchEvent(new Event('input'));
  await new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
  return performance.now() - t0; }"""


def step_keys() -> list[str]:
    """COLUMNS stored keys: the catalog's per-step gauges without a label, and two reward functions."""
    keys = [s.key for s in catalog.SIGNALS if s.kind.value == "gauge" and not s.label]
    return keys[:COLUMNS - 2] + ["reward_fn_mean/format", "reward_fn_mean/correct"]


def build_store(db: Path, steps: int, seed: int = 0) -> None:
    """A run of `steps` steps through the store API (no HTTP), WRITE_STEPS a transaction."""
    rng, keys, spike = random.Random(seed), step_keys(), steps * 2 // 3
    store = open_store(db, "NORMAL")
    t0 = time.time() - steps
    for first in range(0, steps, WRITE_STEPS):
        batch = Batch()
        batch.runs[RUN] = {"grpo.model": "bench"}
        for step in range(first, min(steps, first + WRITE_STEPS)):
            metrics = {k: rng.random() for k in keys}
            metrics["kl"] = 5.0 if step == spike else 1e-3 * (1 + rng.random())
            batch.steps.append(StepRecord(RUN, step, rng.randbytes(8), t0 + step, t0 + step + 0.5, metrics))
        store.write_batch(batch, time.time())
    store.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sidecar(source: Path, db: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(source)}
    proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "sidecar", "--port", str(port), "--db", str(db),
                             "--log-level", "warning"], cwd=source, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("sidecar did not start")


def seed_alert(url: str, steps: int) -> None:
    rows = httpx.get(f"{url}/api/runs/{RUN}/steps", params={"step_min": steps * 2 // 3, "step_max": steps * 2 // 3,
                                                            "metrics": "grpo.kl"}, timeout=600).json()
    alert = {"status": "firing", "labels": {"alertname": "GRPOKLSpike", "run_id": RUN, "severity": "critical"},
             "annotations": {"summary": "KL spiked", "runbook_url": "https://example.org/runbook#grpoklspike"},
             "startsAt": rows[0]["time"], "fingerprint": "bench"}
    httpx.post(url + "/api/alerts", json={"version": "4", "alerts": [alert]}, timeout=600).raise_for_status()


def cpu_ms(cdp) -> float:
    """The page's main thread CPU time so far (Chromium's ThreadTime), ms."""
    return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "ThreadTime") * 1000


def load(page, cdp, url: str) -> dict:
    page.goto("about:blank")
    page.goto(f"{url}/#/run/{RUN}")  # a new document: its ThreadTime starts again from 0
    page.wait_for_function("() => window.__ready !== null", timeout=600_000)  # a function: the CSP refuses eval
    page.evaluate("new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)))")
    out = {"ready": page.evaluate("window.__ready")}
    out["after"] = out["ready"] - page.evaluate("Math.max(...performance.getEntriesByType('resource')"
                                                ".filter(e => e.name.includes('/steps?')).map(e => e.responseEnd))")
    t = out["main"] = cpu_ms(cdp)
    for key, weight in (("smooth", "0.6"), ("resmooth", "0.3")):
        out[key] = page.evaluate(SMOOTH, weight)
        out[key + "_cpu"], t = cpu_ms(cdp) - t, cpu_ms(cdp)
    steps = page.evaluate("performance.getEntriesByType('resource').filter(e => e.name.includes('/steps?'))"
                          ".map(e => e.encodedBodySize)")
    return out | {"requests": len(steps), "kib": sum(steps) / 1024}


def measure(sources: list[Path], db: Path, steps: int, rounds: int) -> list[dict]:
    """Medians per source; the sources' loads alternate, so they share the machine's load."""
    from playwright.sync_api import sync_playwright

    servers = []
    try:
        for source in sources:
            servers.append(start_sidecar(source, db))
        seed_alert(servers[0][1], steps)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"),
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
            page.add_init_script(READY)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            for _, url in servers:
                load(page, cdp, url)  # warm-up: the sidecar's step cache, Chromium's code cache
            runs = [[] for _ in servers]
            for _ in range(rounds):
                for i, (_, url) in enumerate(servers):
                    runs[i].append(load(page, cdp, url))
            browser.close()
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=30)
    return [{k: statistics.median(r[k] for r in rs) for k in rs[0]} for rs in runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--source", type=Path, action="append", help="a tree whose sidecar serves the page (repeat to compare; "
                                                                 "default: this checkout)")
    ap.add_argument("--db-dir", type=Path, default=Path(tempfile.gettempdir()) / "otel-grpo-explorer-bench")
    args = ap.parse_args()
    args.db_dir.mkdir(parents=True, exist_ok=True)
    sources = [s.resolve() for s in args.source or [ROOT]]
    print(f"{COLUMNS} columns, {args.rounds} loads per page (medians), sources in turn")
    print("| steps | page from | ready ms | after data ms | main CPU ms | smooth ms (CPU) | resmooth ms (CPU) | steps requests | KiB |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for steps in args.steps:
        db = args.db_dir / f"explorer-{steps}-{COLUMNS}.db"
        done = db.with_name(db.name + ".done")
        if not done.exists():  # a store left half-built by an interrupted run is built again
            for old in args.db_dir.glob(db.name + "*"):
                old.unlink()
            t = time.perf_counter()
            build_store(db, steps)
            done.touch()
            print(f"(built {db.name} in {time.perf_counter() - t:.0f} s)", file=sys.stderr)
        for source, r in zip(sources, measure(sources, db, steps, args.rounds)):
            print(f"| {steps:,} | {source} | {r['ready']:.0f} | {r['after']:.0f} | {r['main']:.0f} | {r['smooth']:.0f} ({r['smooth_cpu']:.0f}) "
                  f"| {r['resmooth']:.0f} ({r['resmooth_cpu']:.0f}) | {r['requests']:.0f} | {r['kib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
