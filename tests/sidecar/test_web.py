"""The web page in headless Chromium (Debian's package), driven over the DevTools protocol."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time

import httpx
import pytest

websocket = pytest.importorskip("websocket", reason="needs websocket-client (the dev extra)")

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (make system-deps)")]
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


class Chromium:
    """A headless Chromium with one page, and a tiny CDP client over its websocket."""

    def __init__(self, profile, port: int) -> None:
        self.proc = subprocess.Popen([
            shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1400,1600", "--remote-allow-origins=*",
            f"--user-data-dir={profile}", f"--remote-debugging-port={port}", "about:blank",
        ], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ids = itertools.count(1)
        page = self._page_target(f"http://127.0.0.1:{port}")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)

    def _page_target(self, base: str) -> dict:
        deadline = time.monotonic() + 60  # start-up bound, not a speed assertion
        while time.monotonic() < deadline:
            try:
                pages = [t for t in httpx.get(base + "/json", timeout=2).json() if t["type"] == "page"]
                if pages:
                    return pages[0]
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError("chromium did not open its debugging port")

    def call(self, method: str, **params):
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, bound_s: float = 60):
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            # The document may be between pages (body still null): that counts as "not yet".
            value = self.eval(f"(() => {{ try {{ return {expression}; }} catch (e) {{ return false; }} }})()")
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"never true: {expression}")

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _seed(url: str, otlp) -> None:
    def completion(step, i):
        if i == 2:
            return "long answer " + "x" * 600 + " END"
        return f"{XSS} reward hack {i}" if i == 1 else f"answer {i} of step {step}"

    body = otlp.request(otlp.spans("web-run", range(6), samples=5, completion=completion)).SerializeToString()
    assert httpx.post(url + "/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    alert = {"status": "firing", "labels": {"alertname": "GrpoKlDrift", "run_id": "web-run", "severity": "critical"},
             "annotations": {"summary": "KL <b>0.4</b> on web-run"}, "startsAt": "2026-11-22T05:00:00Z",
             "fingerprint": "f1"}
    assert httpx.post(url + "/api/alerts", json={"version": "4", "alerts": [alert]}).status_code == 200


def test_run_page_plots_sorts_escapes_and_screenshots(sidecar, otlp, tmp_path, port):
    _seed(sidecar.url, otlp)
    chrome = Chromium(tmp_path / "chromium-profile", port)
    try:
        chrome.call("Page.enable")
        chrome.call("Page.navigate", url=sidecar.url + "/#/run/web-run")
        chrome.wait_for("document.body.dataset.ready === 'run'")
        titles = chrome.eval("[...document.querySelectorAll('.plot-card h3')].map(e => e.textContent)")
        for title in ("Reward (mean and quantiles)", "KL to the reference (log scale)", "Clip ratios",
                      "Phase durations", "IS weights (mean, min, max) (log scale)", "Effective sample size"):
            assert title in titles
        assert chrome.eval("document.querySelectorAll('svg.plot path.series').length") >= 8
        # KL on log10: step 0's KL of exactly 0 is left out rather than drawn at -infinity.
        card = "[...document.querySelectorAll('.plot-card')].find(c => c.querySelector('h3').textContent.startsWith('%s'))"
        kl, reward = card % "KL to the reference", card % "Reward (mean"
        assert chrome.eval(f"{kl}.querySelector('svg').dataset.scale") == "log"
        assert chrome.eval(f"{reward}.querySelector('svg').dataset.scale") == "linear"
        paths = chrome.eval(f"[...{kl}.querySelectorAll('path.series')].map(p => p.getAttribute('d'))")
        assert paths and all("NaN" not in d and "Infinity" not in d for d in paths)
        ticks = chrome.eval(f"[...{kl}.querySelectorAll('text.y-tick')].map(t => +t.textContent)")
        assert len(ticks) >= 2 and all(t > 0 for t in ticks) and ticks == sorted(ticks)
        assert chrome.eval("document.querySelector('#alerts').textContent").count("GrpoKlDrift") == 1

        # Sorting: click the reward header (ascending), then again (descending).
        column = "[...document.querySelectorAll('#samples-table tbody tr')].map(r => +r.children[%d].textContent)"
        idx = chrome.eval("[...document.querySelectorAll('#samples-table th')].findIndex(t => t.dataset.col === 'reward')")
        chrome.eval("document.querySelector('th[data-col=\"reward\"]').click()")
        chrome.wait_for("document.querySelector('th[data-col=\"reward\"]').classList.contains('sorted-asc')")
        rewards = chrome.eval(column % idx)
        assert rewards == sorted(rewards) and len(rewards) == 5
        chrome.eval("document.querySelector('th[data-col=\"reward\"]').click()")
        chrome.wait_for("document.querySelector('th[data-col=\"reward\"]').classList.contains('sorted-desc')")
        assert chrome.eval(column % idx) == sorted(rewards, reverse=True)

        # Escaping: the completion's markup is text, nothing ran, nothing was parsed into elements.
        assert chrome.eval("window.__pwned") is None
        assert chrome.eval("document.querySelectorAll('#samples-table script, #samples-table img, #alerts b').length") == 0
        assert XSS in chrome.eval("document.querySelector('#samples-table').textContent")

        # Long text is cut, and expands on click.
        assert "END" not in chrome.eval("document.querySelector('#samples-table').textContent")
        chrome.eval("document.querySelector('button.more').click()")
        assert " END" in chrome.eval("document.querySelector('#samples-table').textContent")

        # Picking another step reloads the table.
        chrome.eval("const s = document.querySelector('#step-select'); s.value = '0'; s.dispatchEvent(new Event('change'))")
        chrome.wait_for("document.querySelector('#samples-table').textContent.includes('answer 0 of step 0')")

        # Live refresh: a new step shows up in the plots, the samples table stays as arranged.
        assert chrome.eval("document.querySelector('#plots').dataset.steps") == "6"
        more = otlp.request(otlp.spans("web-run", [6], samples=5)).SerializeToString()
        assert httpx.post(sidecar.url + "/v1/traces", content=more,
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        chrome.eval("window.otelGrpoRefresh()")
        chrome.wait_for("document.querySelector('#plots').dataset.steps === '7'")
        assert chrome.eval("document.querySelectorAll('#step-select option').length") == 7
        assert chrome.eval("document.querySelector('#samples-table').textContent.includes('answer 0 of step 0')")

        shot = chrome.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        png = base64.b64decode(shot["data"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        out = tmp_path / "sidecar-run-page.png"
        out.write_bytes(png)
        if os.environ.get("OTEL_GRPO_SCREENSHOT"):
            shutil.copy(out, os.environ["OTEL_GRPO_SCREENSHOT"])

        chrome.call("Page.navigate", url=sidecar.url + "/#/")
        chrome.wait_for("document.body.dataset.ready === 'runs'")
        assert chrome.eval("document.querySelector('#runs-table a').textContent") == "web-run"
    finally:
        chrome.close()
