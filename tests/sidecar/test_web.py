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

from otel_grpo import catalog

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

    def mouse(self, kind: str, x: float, y: float, **kw) -> None:
        """A real pointer event (Input.dispatchMouseEvent), at viewport coordinates."""
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **kw)

    def touch(self, kind: str, points: list[tuple[float, float]], at: float) -> None:
        """Real touch input (Input.dispatchTouchEvent): the fingers down after this event, at time `at` (s)."""
        self.call("Input.dispatchTouchEvent", type=kind, timestamp=at,
                  touchPoints=[{"x": x, "y": y, "id": i} for i, (x, y) in enumerate(points)])

    def step_point(self, card: str, step: float, domain: tuple[float, float]) -> tuple[float, float]:
        """Viewport coordinates of `step` on the plot of `card` (the plot's x range is `domain`).

        The plot's SVG is 440 units wide with 62 on the left and 10 on the right around the data."""
        self.eval(f"{card}.querySelector('svg').scrollIntoView({{block: 'center'}})")
        box = self.eval(f"(() => {{ const b = {card}.querySelector('svg').getBoundingClientRect(); "
                        "return [b.left, b.top, b.width, b.height]; })()")
        x = box[0] + (62 + (step - domain[0]) / (domain[1] - domain[0]) * (440 - 72)) / 440 * box[2]
        return x, box[1] + box[3] / 2

    def click_step(self, card: str, step: float, domain: tuple[float, float]) -> None:
        x, y = self.step_point(card, step, domain)
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, button="left", clickCount=1)
        self.mouse("mouseReleased", x, y, button="left", clickCount=1)

    def drag_steps(self, card: str, a: float, b: float, domain: tuple[float, float]) -> None:
        (xa, y), (xb, _) = self.step_point(card, a, domain), self.step_point(card, b, domain)
        self.mouse("mouseMoved", xa, y)
        self.mouse("mousePressed", xa, y, button="left", clickCount=1)
        for i in range(1, 6):
            self.mouse("mouseMoved", xa + (xb - xa) * i / 5, y, buttons=1)
        self.mouse("mouseReleased", xb, y, button="left", clickCount=1)

    def open(self, url: str) -> None:
        """A fresh load of `url` (through about:blank: a new hash alone is no reload), until the page is ready."""
        self.call("Page.navigate", url="about:blank")
        self.wait_for("location.href === 'about:blank'")
        self.call("Page.navigate", url=url)
        self.wait_for("document.body.dataset.ready === 'run'")

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


RUN = "team/exp-1"  # a run id with a slash: the page must read it back like any other
QUOTED, ODD = 'score "raw"', "reward (v2)?"  # a column no sort can name, and one with odd characters


def _metrics(step: int) -> dict:
    return {
        "kl": 10.0 ** (-6 + 28 * step / 11),  # 1e-6 .. 1e22: a blow-up on a log axis
        "mismatch_kl": float("nan") if step == 5 else (-2e-4, 0.0, 3e-4, 1e-5)[step % 4],  # <= 0 often; one gap
        "rollout_is_mean": 1 + 1e-5 * (step % 3), "rollout_is_min": 0.99998 + 1e-6 * step,
        "rollout_is_max": 1.00004 + 1e-6 * step,  # weights that sit near 1: a tight axis
        "loss": 1000.0 if step == 7 else 0.1 + 0.01 * step, "grad_norm": 1.0 + 0.1 * step,
    }


def _seed_tricky(url: str, otlp) -> None:
    spans = otlp.spans(RUN, range(12), samples=6, metrics=_metrics,
                       completion=lambda s, i: f"answer {i} of step {s} " + "words " * (40 if i == 0 else 3),
                       extra=lambda s, i: {"group": i // 3, QUOTED: float(i), ODD: float(5 - i),
                                           "reward.correct": float(i % 2)})
    body = otlp.request(spans).SerializeToString()
    assert httpx.post(url + "/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def _card(title: str) -> str:
    return f"[...document.querySelectorAll('.plot-card')].find(c => c.querySelector('h3').textContent.startsWith({json.dumps(title)}))"


def _shot(chrome, tmp_path, name: str) -> None:
    png = base64.b64decode(chrome.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / name).write_bytes(png)
    if os.environ.get("OTEL_GRPO_SCREENSHOT_DIR"):
        shutil.copy(tmp_path / name, os.environ["OTEL_GRPO_SCREENSHOT_DIR"])


def test_plots_stay_readable_on_a_bad_run(sidecar, otlp, tmp_path, port):
    _seed_tricky(sidecar.url, otlp)
    chrome = Chromium(tmp_path / "chromium-profile", port)
    try:
        chrome.call("Emulation.setDeviceMetricsOverride", width=1347, height=1400, deviceScaleFactor=1, mobile=False)
        chrome.call("Page.navigate", url=sidecar.url + "/#/run/" + RUN.replace("/", "%2F"))
        chrome.wait_for("document.body.dataset.ready === 'run'")
        assert chrome.eval("document.querySelector('main h2').textContent") == "Run " + RUN
        titles = chrome.eval("[...document.querySelectorAll('.plot-card h3')].map(e => e.textContent)")
        assert {"Loss", "Gradient norm (log scale)"} <= set(titles)  # apart: a loss spike flattens nothing

        kl = _card("KL to the reference")
        assert 2 <= chrome.eval(f"{kl}.querySelectorAll('text.y-tick').length") <= 6  # 1e-6 .. 1e22, readable
        assert chrome.eval(f"{kl}.querySelector('text.y-label').textContent") == "nat"  # the catalog's {nat}
        # One name per signal: the catalog name (the API's column), the Prometheus series beside it.
        legend = chrome.eval(f"[...{kl}.querySelectorAll('.legend span')].map(s => [s.textContent, s.title])")
        assert ["grpo.kl grpo_kl", catalog.get("kl").description] in legend
        rows = httpx.get(f"{sidecar.url}/api/runs/{RUN.replace('/', '%2F')}/steps").json()
        assert rows[3]["grpo.kl"] == _metrics(3)["kl"]

        mis = _card("IS mismatch: KL")
        assert chrome.eval(f"{mis}.querySelector('svg').dataset.scale") == "symlog"
        d = chrome.eval(f"{mis}.querySelector('path[data-label=\"grpo.mismatch.kl\"]').getAttribute('d')")
        assert d.count("M") == 2 and d.count("L") == 9  # 11 of 12 steps drawn, zeros and negatives too; no bridge
        ticks = chrome.eval(f"[...{mis}.querySelectorAll('text.y-tick')].map(t => t.textContent)")
        assert "0" in ticks and any(t.startswith("-") for t in ticks)

        weights = _card("IS weights")
        assert chrome.eval(f"{weights}.querySelectorAll('path.series').length") == 3  # min and max too
        labels = chrome.eval(f"[...{weights}.querySelectorAll('text.y-tick')].map(t => t.textContent)")
        assert len(labels) >= 2 and len(set(labels)) == len(labels)

        x_ticks = chrome.eval("[...document.querySelectorAll('svg.plot')].map(s => [...s.querySelectorAll('text.x-tick')].map(t => t.textContent).join())")
        assert len(set(x_ticks)) == 1 and x_ticks[0].startswith("0,")  # one x range for every panel
        assert chrome.eval("[...document.querySelectorAll('svg.plot')].every(s => s.querySelector('text.x-label').textContent === 'step')")

        # The samples table fits the 1347 px view; long text expands in place.
        assert chrome.eval("document.querySelector('#samples-table').scrollWidth <= document.querySelector('#samples').clientWidth")
        assert chrome.eval("document.documentElement.scrollWidth") <= 1347
        _shot(chrome, tmp_path, "run-page-bad-run.png")

        # Sorting by a column no sort can name: the error stays in the samples box.
        header = "[...document.querySelectorAll('#samples-table th')].find(t => t.dataset.col === %s)"
        chrome.eval(f"{header % json.dumps(QUOTED)}.click()")
        chrome.wait_for("document.querySelector('#samples').dataset.error === '1'")
        assert "cannot show these samples" in chrome.eval("document.querySelector('#samples-note').textContent")
        assert chrome.eval("document.querySelectorAll('#samples-table tbody tr').length") == 6  # still there
        assert chrome.eval("document.querySelectorAll('#plots svg.plot').length") >= 8
        chrome.eval(f"{header % json.dumps(ODD)}.click()")
        chrome.wait_for(f"{header % json.dumps(ODD)}.classList.contains('sorted-asc')")
        col = chrome.eval(f"[...document.querySelectorAll('#samples-table th')].findIndex(t => t.dataset.col === {json.dumps(ODD)})")
        odd = chrome.eval(f"[...document.querySelectorAll('#samples-table tbody tr')].map(r => +r.children[{col}].textContent)")
        assert odd == sorted(odd) and len(odd) == 6

        # Search filters as you type, over every step.
        chrome.eval("{ const s = document.querySelector('#search'); s.value = 'answer 4 of'; s.dispatchEvent(new Event('input')); }")
        chrome.wait_for("document.querySelectorAll('#samples-table tbody tr').length === 12")
        texts = chrome.eval("[...document.querySelectorAll('#samples-table tbody tr')].map(r => r.textContent)")
        assert all("answer 4 of step" in t for t in texts)
        chrome.eval("{ const s = document.querySelector('#search'); s.value = ''; s.dispatchEvent(new Event('input')); }")
        chrome.wait_for("document.querySelectorAll('#samples-table tbody tr').length === 6")

        # Clicking a plot point opens that step's samples.
        chrome.click_step(_card("Reward (mean"), 4, (0, 11))
        chrome.wait_for("document.querySelector('#step-select').value === '4'")
        chrome.wait_for("[...document.querySelectorAll('#samples-table tbody tr')].every(r => r.textContent.includes('of step 4 '))")

        # The group view: every stored completion of the prompt's group, side by side, ranked by reward.
        chrome.eval("document.querySelector('#samples-table tbody tr:nth-child(5) button.group-open').click()")
        chrome.wait_for("document.querySelectorAll('#group-view .group-card').length === 3")
        cards = chrome.eval("[...document.querySelectorAll('#group-view .group-card')].map(c => Object.fromEntries([...c.querySelectorAll('.group-stats tr')].map(r => [r.children[0].textContent, r.children[1].textContent])))")
        # row 5 in the table sorted by ODD (5 - i) is sample 1: group 0 of step 4 is samples 0, 1, 2
        assert [float(c["reward"]) for c in cards] == [1.0, 0.5, 0.0]
        assert [c["sample"] for c in cards] == ["2", "1", "0"]
        assert {"reward.correct", "reward.format", "advantage", "length"} <= cards[0].keys()
        assert chrome.eval("document.querySelector('#group-view .picked .rank').textContent") == "#2"
        chrome.eval("document.querySelector('#group-view').scrollIntoView()")
        _shot(chrome, tmp_path, "run-page-group-view.png")
    finally:
        chrome.close()


MAIN, OTHER = "explore-a", "explore-b"


def _explorer_metrics(step: int) -> dict:
    out = {"kl": 1e-3 * (1 + step % 3) if step != 12 else 5.0, "loss": 0.1 * (step % 4)}
    if step % 2 == 0:  # logged every other step (as TRL logs some metrics): one line, not dots
        out["entropy"] = 2.0 - 0.05 * step
    return out


def _diagnostics(step: int, i: int) -> dict:
    """Per-sample columns as the trainer writes them; sample 3 of step 12 drove that step's KL spike."""
    spike = step == 12 and i == 3
    return {"group": i // 4, "kl_ref_mean": 40.0 if spike else 0.001 * (i + 1), "kl_ref_max": 90.0 if spike else 0.01,
            "log_ratio_mean": 0.01 * i, "log_ratio_absmax": 3.5 if spike else 0.02 * i,
            "is_weight_mean": 1.0 + 0.01 * i, "is_weight_max": 33.0 if spike else 1.05, "entropy_mean": 1.5 - 0.1 * i,
            "length_clipped": float(i == 5), "reward.correct": float(i % 2), "policy_version": step}


def _seed_explorer(url: str, otlp) -> None:
    for run, steps in ((MAIN, range(13)), (MAIN, range(13, 20)), (OTHER, range(0, 16))):
        spans = otlp.spans(run, steps, samples=8, metrics=_explorer_metrics, extra=_diagnostics)
        body = otlp.request(spans).SerializeToString()
        assert httpx.post(url + "/v1/traces", content=body,
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        time.sleep(0.05)  # step 13 ends well after step 12 (step times have millisecond precision)
    # An alert that fired just after step 12 ended: the page places it on step 12.
    steps = httpx.get(f"{url}/api/runs/{MAIN}/steps").json()
    fired = next(s["time"] for s in steps if s["step"] == 12)
    alert = {"status": "firing", "labels": {"alertname": "GRPOKLSpike", "run_id": MAIN, "severity": "warning"},
             "annotations": {"summary": "KL spiked"}, "startsAt": fired, "fingerprint": "kl12"}
    assert httpx.post(url + "/api/alerts", json={"version": "4", "alerts": [alert]}).status_code == 200


def _hash(chrome) -> dict:
    """The page's URL state: the query of `#/run/<id>?...` as a dict."""
    return chrome.eval("Object.fromEntries(new URLSearchParams(location.hash.split('?')[1] || ''))")


def test_an_older_samples_answer_arriving_late_does_not_replace_the_newer_one(sidecar, otlp, tmp_path, port):
    """Sort ascending, then at once descending: the first answer, held back, arrives last. The table
    keeps the rows of the latest request (a slow store under load showed the ascending rows under a
    descending header)."""
    _seed_explorer(sidecar.url, otlp)
    chrome = Chromium(tmp_path / "chromium-profile", port)
    try:
        chrome.call("Page.navigate", url=f"{sidecar.url}/#/run/{MAIN}?step=12")
        chrome.wait_for("document.body.dataset.ready === 'run' && !!document.querySelector('#samples-table')")
        # answers to ascending sorts come 1.5 s late (the page fetches through window.fetch)
        chrome.eval("""(() => { const fetch0 = window.fetch; window.fetch = (url, ...rest) => {
            const late = String(url).includes('/samples') && String(url).includes('order_by') && !String(url).includes('desc=true');
            return late ? new Promise((ok) => setTimeout(() => ok(fetch0(url, ...rest)), 1500)) : fetch0(url, ...rest); }; })()""")
        th = "document.querySelector('th[data-col=\"kl_ref_mean\"]')"
        chrome.eval(f"{th}.click()")  # ascending: held back
        chrome.eval(f"{th}.click()")  # descending, at once: answered first
        chrome.wait_for(f"{th}.classList.contains('sorted-desc')")
        time.sleep(2.5)  # the ascending answer has arrived meanwhile
        assert chrome.eval(f"{th}.className").endswith("sorted-desc")
        assert chrome.eval("document.querySelector('#samples-table tbody tr').dataset.sample") == "3"
    finally:
        chrome.close()


def test_run_explorer_from_a_bad_step_to_its_completions(sidecar, otlp, tmp_path, port):
    _seed_explorer(sidecar.url, otlp)
    chrome = Chromium(tmp_path / "chromium-profile", port)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    try:
        chrome.call("Emulation.setDeviceMetricsOverride", width=1366, height=900, deviceScaleFactor=1, mobile=False)
        chrome.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        chrome.call("Page.navigate", url=f"{sidecar.url}/#/run/{MAIN}")
        chrome.wait_for("document.body.dataset.ready === 'run'")
        kl, entropy = _card("KL to the reference"), _card("Entropy")

        # A metric logged every other step is one line (one M, nine L), not ten dots.
        d = chrome.eval(f"{entropy}.querySelector('path[data-label=\"grpo.policy.entropy\"]').getAttribute('d')")
        assert d.count("M") == 1 and d.count("L") == 9
        assert chrome.eval(f"{entropy}.querySelectorAll('circle.lone').length") == 0

        # The alert sits on the step axis: step 12 in the table and a mark on every plot.
        assert chrome.eval("document.querySelector('#alerts a.alert-step').textContent") == "12"
        assert chrome.eval(f"{kl}.querySelector('line.mark-alert').dataset.step") == "12"

        # Hover: the values of every series at the step under the pointer.
        x, y = chrome.step_point(kl, 12, (0, 19))
        chrome.mouse("mouseMoved", x, y)
        tip = chrome.wait_for(f"!{kl}.querySelector('.plot-tip').hidden && {kl}.querySelector('.plot-tip').textContent")
        assert tip.startswith("step 12") and "grpo.kl 5" in tip

        # Clicking the spike opens step 12's samples; the URL links to it; sort by the per-sample KL.
        chrome.click_step(kl, 12, (0, 19))
        chrome.wait_for("document.querySelector('#step-select').value === '12'")
        assert _hash(chrome)["step"] == "12"
        chrome.eval("document.querySelector('th[data-col=\"kl_ref_mean\"]').click()")
        chrome.wait_for("document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-asc')")
        chrome.eval("document.querySelector('th[data-col=\"kl_ref_mean\"]').click()")
        chrome.wait_for("document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-desc')")
        assert chrome.eval("document.querySelector('#samples-table tbody tr').dataset.sample") == "3"
        assert _hash(chrome) == {"step": "12", "sort": "kl_ref_mean", "desc": "1"}

        # Full headers: no header is cut, whatever its length; the page does not scroll sideways.
        cut = chrome.eval("[...document.querySelectorAll('#samples-table th')].filter(t => t.scrollWidth > t.clientWidth + 1).map(t => t.dataset.col)")
        assert cut == []
        headers = chrome.eval("[...document.querySelectorAll('#samples-table th')].map(t => t.textContent)")
        assert {"completion_length", "length_clipped", "kl_ref_mean", "log_ratio_absmax", "is_weight_max", "entropy_mean",
                "reward.correct"} <= set(headers)
        assert "policy_version" not in headers  # bookkeeping hidden until picked
        assert chrome.eval("document.documentElement.scrollWidth") <= 1366
        _shot(chrome, tmp_path, "explorer-1366.png")

        # The column picker shows a hidden column.
        chrome.eval("document.querySelector('#column-picker').open = true")
        chrome.eval("document.querySelector('#column-picker input[data-col=\"policy_version\"]').click()")
        chrome.wait_for("!!document.querySelector('#samples-table th[data-col=\"policy_version\"]')")

        # Range filter on a diagnostic column: only the sample with an IS weight above 10.
        chrome.eval("""(() => { const c = document.querySelector('#filter-col'); c.value = 'is_weight_max';
            const m = document.querySelector('#filter-min'); m.value = '10';
            m.dispatchEvent(new Event('change')); })()""")
        chrome.wait_for("document.querySelectorAll('#samples-table tbody tr').length === 1")
        assert "1 of 8 rows" in chrome.eval("document.querySelector('#samples-note').textContent")
        assert _hash(chrome)["fcol"] == "is_weight_max" and _hash(chrome)["fmin"] == "10"

        # Downloads: every row of the step (the filter is the page's), as CSV and as JSONL.
        chrome.eval("document.querySelector('#download-csv').click()")
        chrome.eval("document.querySelector('#download-jsonl').click()")
        deadline = time.monotonic() + 60
        while len([p for p in downloads.iterdir() if not p.name.endswith(".crdownload")]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        csv_file, jsonl_file = downloads / f"{MAIN}-step-12.csv", downloads / f"{MAIN}-step-12.jsonl"
        lines = csv_file.read_text().splitlines()
        assert len(lines) == 9 and "kl_ref_mean" in lines[0]
        rows = [json.loads(line) for line in jsonl_file.read_text().splitlines()]
        assert [r["sample_index"] for r in rows] == [3, 7, 6, 5, 4, 2, 1, 0]  # in the page's order: KL descending
        chrome.eval("""(() => { const m = document.querySelector('#filter-min'); m.value = '';
            m.dispatchEvent(new Event('change')); })()""")
        chrome.wait_for("document.querySelectorAll('#samples-table tbody tr').length === 8")

        # Smoothing redraws the lines (raw values stay in the hover box).
        before = chrome.eval(f"{kl}.querySelector('path[data-label=\"grpo.kl\"]').getAttribute('d')")
        chrome.eval("(() => { const s = document.querySelector('#smooth'); s.value = '0.8'; s.dispatchEvent(new Event('input')); })()")
        chrome.wait_for(f"{kl}.querySelector('path[data-label=\"grpo.kl\"]').getAttribute('d') !== {json.dumps(before)}")
        assert _hash(chrome)["smooth"] == "0.8"

        # Overlay another run, aligned by step: its lines are dashed.
        chrome.eval("document.querySelector('#compare').open = true")
        chrome.eval(f"document.querySelector('#compare input[data-run=\"{OTHER}\"]').click()")
        chrome.wait_for(f"!!{kl}.querySelector('path[data-run=\"{OTHER}\"]')")
        assert chrome.eval(f"{kl}.querySelector('path[data-run=\"{OTHER}\"]').getAttribute('stroke-dasharray')")
        assert chrome.eval(f"{kl}.querySelector('path[data-run=\"{MAIN}\"]').getAttribute('stroke-dasharray')") is None
        assert _hash(chrome)["vs"] == OTHER
        assert chrome.eval("[...document.querySelectorAll('#run-legend span')].map(s => s.dataset.run)") == [MAIN, OTHER]
        phases = chrome.eval(f"[...{_card('Phase durations')}.querySelectorAll('.legend code')].map(c => c.textContent)")
        assert 'grpo_phase_duration_seconds{phase="rollout"}' in phases
        chrome.eval("document.querySelector('#compare').open = false")

        # Drag to zoom: every panel shows steps 5..15; double-click shows all steps again.
        chrome.drag_steps(kl, 5, 15, (0, 19))
        chrome.wait_for("location.hash.includes('from=')")
        state = _hash(chrome)
        assert 4 <= int(state["from"]) <= 6 and 14 <= int(state["to"]) <= 16
        x_ticks = chrome.eval("[...document.querySelectorAll('svg.plot')].map(s => [...s.querySelectorAll('text.x-tick')].map(t => +t.textContent))")
        assert all(min(t) >= int(state["from"]) and max(t) <= int(state["to"]) for t in x_ticks if t)
        assert not chrome.eval("document.querySelector('#zoom-reset').hidden")
        x, y = chrome.step_point(kl, 10, (int(state["from"]), int(state["to"])))
        before = chrome.eval("window.scrollY")
        for count in (1, 2):
            chrome.mouse("mousePressed", x, y, button="left", clickCount=count)
            chrome.mouse("mouseReleased", x, y, button="left", clickCount=count)
        chrome.wait_for("!location.hash.includes('from=')")
        time.sleep(0.5)  # past the double-click window: the first click must not have picked a step
        assert chrome.eval("window.scrollY") == before and _hash(chrome)["step"] == "12"

        # Links: a sample link marks its row; a group link opens the group view; both survive a reload.
        chrome.open(f"{sidecar.url}/#/run/{MAIN}?step=12&sample=3&sort=kl_ref_mean&desc=1")
        assert chrome.eval("document.querySelector('#samples-table tr.linked').dataset.sample") == "3"
        assert chrome.eval("document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-desc')")
        chrome.open(f"{sidecar.url}/#/run/{MAIN}?step=12&group=0")
        chrome.wait_for("document.querySelectorAll('#group-view .group-card').length === 4")
        stats = chrome.eval("[...document.querySelectorAll('#group-view .group-card .group-stats th')].map(t => t.textContent)")
        assert {"KL to ref", "IS weight max", "entropy"} <= set(stats)

        # A phone: nothing wider than the screen but the table's own box, which scrolls sideways.
        chrome.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
        chrome.open(f"{sidecar.url}/#/run/{MAIN}?step=12&sort=kl_ref_mean&desc=1&vs={OTHER}")
        assert chrome.eval("document.documentElement.scrollWidth") <= 390
        assert chrome.eval("document.querySelector('#plots svg.plot').getBoundingClientRect().width") <= 390
        assert chrome.eval("document.querySelector('#samples').scrollWidth > document.querySelector('#samples').clientWidth")
        _shot(chrome, tmp_path, "explorer-phone.png")
    finally:
        chrome.close()


def test_touch_zoom_and_tap_on_a_phone(sidecar, otlp, tmp_path, port):
    """The mouse's zoom with fingers, at the phone width: drag, pinch, double tap, and a tap that picks;
    nothing loaded from outside the sidecar."""
    _seed_explorer(sidecar.url, otlp)
    chrome = Chromium(tmp_path / "chromium-profile", port)
    try:
        chrome.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
        chrome.call("Emulation.setTouchEmulationEnabled", enabled=True, maxTouchPoints=2)
        chrome.open(f"{sidecar.url}/#/run/{MAIN}")
        kl, t = _card("KL to the reference"), time.time()

        # A finger down shows the values at its step; lifted, it picks that step's samples.
        x, y = chrome.step_point(kl, 12, (0, 19))
        chrome.touch("touchStart", [(x, y)], t)
        tip = chrome.wait_for(f"!{kl}.querySelector('.plot-tip').hidden && {kl}.querySelector('.plot-tip').textContent")
        assert tip.startswith("step 12") and "grpo.kl 5" in tip
        chrome.touch("touchEnd", [], t + 0.05)
        chrome.wait_for("document.querySelector('#step-select').value === '12'")
        # ... shown once loaded, and scrolled to (the drag below scrolls back to the plot after that)
        chrome.wait_for("[...document.querySelectorAll('#samples-table tbody tr')].every(r => r.textContent.includes('of step 12'))")

        # One finger dragged sideways zooms every plot to the steps it crossed.
        (xa, y), (xb, _) = chrome.step_point(kl, 5, (0, 19)), chrome.step_point(kl, 15, (0, 19))
        chrome.touch("touchStart", [(xa, y)], t + 1)
        for i in range(1, 6):
            chrome.touch("touchMove", [(xa + (xb - xa) * i / 5, y)], t + 1 + i / 50)
        chrome.touch("touchEnd", [], t + 1.2)
        chrome.wait_for("location.hash.includes('from=')")
        state = _hash(chrome)
        assert 4 <= int(state["from"]) <= 6 and 14 <= int(state["to"]) <= 16
        assert chrome.eval("document.documentElement.scrollWidth") <= 390

        # A double tap shows every step again, and picks nothing.
        x, y = chrome.step_point(kl, 10, (int(state["from"]), int(state["to"])))
        for at in (t + 2, t + 2.1):
            chrome.touch("touchStart", [(x, y)], at)
            chrome.touch("touchEnd", [], at + 0.02)
        chrome.wait_for("!location.hash.includes('from=')")
        time.sleep(0.5)  # past the double-tap window: the first tap must not have picked a step
        assert _hash(chrome)["step"] == "12"

        # Two fingers on steps 8 and 12, spread to where steps 1 and 18 were: the view is steps 8..12.
        (a0, y), (b0, _) = chrome.step_point(kl, 8, (0, 19)), chrome.step_point(kl, 12, (0, 19))
        (a1, _), (b1, _) = chrome.step_point(kl, 1, (0, 19)), chrome.step_point(kl, 18, (0, 19))
        chrome.touch("touchStart", [(a0, y), (b0, y)], t + 3)
        for i in range(1, 6):
            chrome.touch("touchMove", [(a0 + (a1 - a0) * i / 5, y), (b0 + (b1 - b0) * i / 5, y)], t + 3 + i / 50)
        chrome.touch("touchEnd", [], t + 3.2)
        chrome.wait_for("location.hash.includes('from=')")
        assert (_hash(chrome)["from"], _hash(chrome)["to"]) == ("8", "12")
        x_ticks = chrome.eval(f"[...{kl}.querySelectorAll('text.x-tick')].map(t => +t.textContent)")
        assert x_ticks and min(x_ticks) >= 8 and max(x_ticks) <= 12

        # Pinching in over the whole view shows all steps again.
        chrome.touch("touchStart", [(a1, y), (b1, y)], t + 4)
        chrome.touch("touchMove", [(a0, y), (b0, y)], t + 4.05)
        chrome.touch("touchEnd", [], t + 4.1)
        chrome.wait_for("!location.hash.includes('from=')")
        _shot(chrome, tmp_path, "explorer-phone-touch.png")

        # Offline and light: everything the page loaded (scripts, styles, API calls) came from the
        # sidecar, no CDN; its own code is small.
        loaded = chrome.eval("[location.href, ...performance.getEntriesByType('resource').map(e => [e.name, e.encodedBodySize])]")
        page, resources = loaded[0], loaded[1:]
        assert page.startswith(sidecar.url + "/") and resources
        assert all(name.startswith(sidecar.url + "/") for name, _ in resources), resources
        static = {name.rsplit("/", 1)[1]: size for name, size in resources if "/static/" in name}
        assert static.keys() == {"util.js", "plot.js", "table.js", "app.js", "style.css"}
        assert sum(static.values()) < 100_000
    finally:
        chrome.close()


LONG, LONG_STEPS, LONG_SPIKE = "long-run", 1500, 777


def test_a_long_run_is_downsampled_and_its_spike_drawn(sidecar, otlp, tmp_path, port):
    """More steps than the page asks for: the request carries `points`, the one-step KL spike is
    still drawn, and a zoom asks the server for its range, for the run shown and the run overlaid."""
    for run_id in (LONG, "long-other"):
        for first in range(0, LONG_STEPS, 250):  # exports of the size a trainer sends, not one of 1500 steps
            spans = otlp.spans(run_id, range(first, first + 250), samples=0,
                               metrics=lambda s: {"kl": 5.0 if s == LONG_SPIKE else 1e-3 * (1 + s % 3)})
            assert httpx.post(sidecar.url + "/v1/traces", content=otlp.request(spans).SerializeToString(), timeout=60,
                              headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    chrome = Chromium(tmp_path / "chromium-profile", port)
    try:
        chrome.call("Emulation.setDeviceMetricsOverride", width=1366, height=900, deviceScaleFactor=1, mobile=False)
        chrome.open(f"{sidecar.url}/#/run/{LONG}?vs=long-other")
        steps_requests = "performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/steps?'))"
        asked = chrome.eval(steps_requests)
        assert len(asked) == 2 and all("points=1366" in n for n in asked)  # the run and the one overlaid
        assert int(chrome.eval("document.querySelector('#plots').dataset.steps")) <= 1366 < LONG_STEPS
        kl = _card("KL to the reference")
        top = f"Math.max(...[...{kl}.querySelectorAll('text.y-tick')].map(t => +t.textContent))"
        assert chrome.eval(top) >= 1  # the spike (5 nat) sets the axis; the other steps are ~1e-3

        chrome.drag_steps(kl, 700, 850, (0, LONG_STEPS - 1))
        chrome.wait_for(f"{steps_requests}.some(n => n.includes('step_min='))")
        chrome.wait_for(f"{steps_requests}.filter(n => n.includes('step_min=')).length == 2")
        zoomed = [n for n in chrome.eval(steps_requests) if "step_min=" in n]
        assert all("points=1366" in n and "step_max=" in n for n in zoomed)
        assert any("/long-other/steps" in n for n in zoomed) and any(f"/{LONG}/steps" in n for n in zoomed)
        chrome.wait_for(f"{top} >= 1")
    finally:
        chrome.close()


def test_the_page_runs_under_its_content_security_policy_and_refuses_frames(sidecar, otlp, tmp_path, port):
    page = httpx.get(sidecar.url + "/")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    _seed(sidecar.url, otlp)
    chrome = Chromium(tmp_path / "chromium-profile", port)
    try:
        chrome.call("Page.enable")
        chrome.call("Page.addScriptToEvaluateOnNewDocument", source=(
            "window.__violations = []; document.addEventListener('securitypolicyviolation', "
            "e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"))
        chrome.open(sidecar.url + "/#/run/web-run")
        chrome.wait_for("document.querySelectorAll('#samples-table tbody tr').length > 0")
        assert chrome.eval("document.querySelectorAll('svg.plot path.series').length") >= 8
        # The table's widths are set through the CSSOM, which the policy allows (a style attribute it refuses).
        assert chrome.eval("document.querySelector('#samples-table').style.minWidth").endswith("px")
        assert chrome.eval("window.__violations") == []
    finally:
        chrome.close()


def test_ten_thousand_runs_come_a_page_at_a_time_searched_by_the_server(sidecar_factory, tmp_path, port):
    """The runs page draws one page of 50 rows of 10,000 runs, pages on, and its search asks the server
    (SQLite only: the listing's SQL runs on both backends in test_runs_api; this is the page)."""
    from otel_grpo.sidecar.store import open_store

    db = tmp_path / "runs.db"
    store = open_store(db)
    with store._tx() as conn:
        conn.executemany("INSERT INTO runs (run_id, model, first_seen, last_update) VALUES (?, 'tiny', ?, ?)",
                         [(f"exp-{i:05d}", 1000.0 + i, 1000.0 + i) for i in range(10_000)])
    store.close()
    proc = sidecar_factory(db=db, env={"OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"})
    chrome = Chromium(tmp_path / "chromium-profile", port)
    rows = "[...document.querySelectorAll('#runs-table tbody tr a')].map(a => a.textContent)"
    count = "document.querySelector('#runs-count').textContent"
    try:
        chrome.call("Page.navigate", url=proc.url + "/#/")
        chrome.wait_for("document.body.dataset.ready === 'runs'")
        shown = chrome.eval(rows)
        assert shown == [f"exp-{i:05d}" for i in range(9999, 9949, -1)]  # the 50 most recently updated
        assert chrome.eval(count) == "1–50 of 10,000" and chrome.eval("document.querySelector('#runs-prev').disabled")
        assert chrome.eval("[...document.querySelectorAll('#runs-table tbody tr')][0].children[1].textContent") == "idle"

        chrome.eval("document.querySelector('#runs-next').click()")
        chrome.wait_for(f"{count} === '51–100 of 10,000'")
        assert chrome.eval(rows)[0] == "exp-09949" and chrome.eval("location.hash") == "#/?page=2"

        # The search goes to the server (it filters every run, not the page at hand) and starts at page 1.
        chrome.eval("(() => { const s = document.querySelector('#runs-search'); s.value = 'EXP-0012'; "
                    "s.dispatchEvent(new Event('input')); })()")
        chrome.wait_for(f"{count} === '1–10 of 10'")
        assert chrome.eval(rows) == [f"exp-{i:05d}" for i in range(129, 119, -1)]
        assert chrome.eval("document.querySelector('#runs-next').disabled")
        assert chrome.eval("location.hash") == "#/?q=EXP-0012"
        chrome.eval("(() => { const s = document.querySelector('#runs-status'); s.value = 'active'; "
                    "s.dispatchEvent(new Event('change')); })()")
        chrome.wait_for(f"{count} === 'no runs match'")

        # The list's view is a link: opened afresh, the same page of the same search.
        chrome.call("Page.navigate", url="about:blank")
        chrome.wait_for("location.href === 'about:blank'")
        chrome.call("Page.navigate", url=proc.url + "/#/?q=exp-01&page=3")
        chrome.wait_for("document.body.dataset.ready === 'runs'")
        assert chrome.eval(count) == "101–150 of 1,000" and chrome.eval(rows)[0] == "exp-01899"
        assert chrome.eval("document.querySelector('#runs-search').value") == "exp-01"

        # A run's "compare runs" offers the first runs and finds any other through the same search.
        chrome.open(proc.url + "/#/run/exp-00005")
        offered = "[...document.querySelectorAll('#compare input[data-run]')].map(i => i.dataset.run)"
        assert len(chrome.eval(offered)) == 20 and "exp-00005" not in chrome.eval(offered)
        chrome.eval("(() => { const s = document.querySelector('#compare-search'); s.value = '0000'; "
                    "s.dispatchEvent(new Event('input')); })()")
        chrome.wait_for(f"{offered}.length === 9 && {offered}[0] === 'exp-00009'")
    finally:
        chrome.close()
