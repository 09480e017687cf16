"""The web page in headless Chromium (Debian's package), driven by Playwright."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from types import SimpleNamespace
from urllib.parse import quote

import httpx
import pytest

from otel_grpo import catalog
from tests.sidecar.conftest import SidecarProcess, grpo_spans, request_pb

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make system-deps)")]
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
WAIT_MS = 60_000  # a bound on waits on a loaded machine, not an assertion on speed


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    """One headless Chromium for the module (Debian's, not a downloaded one); each test opens its own contexts."""
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--hide-scrollbars"])
        yield chromium
        chromium.close()


class Site:
    """A sidecar shared by the module's tests (one per store backend): each data set is seeded once."""

    def __init__(self, proc: SidecarProcess) -> None:
        self.proc, self.url = proc, proc.url
        self._seeded: set = set()

    def seed(self, seeder) -> None:
        """`seeder(url, otlp)`, unless it has run against this sidecar already."""
        if seeder not in self._seeded:
            seeder(self.url, SimpleNamespace(spans=grpo_spans, request=request_pb))
            self._seeded.add(seeder)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, tmp_path_factory) -> Iterator[Site]:
    """One sidecar process per backend for the whole module (a start costs more than most tests)."""
    db = (tmp_path_factory.mktemp("web") / "sidecar.db" if request.param == "sqlite"
          else request.getfixturevalue("pg_server").new_database())
    proc = SidecarProcess(db).start()
    try:
        yield Site(proc)
    finally:
        proc.stop()


@pytest.fixture
def new_page(browser) -> Iterator:
    """`new_page(**context options)`: a page in a fresh context (its own storage, viewport, touch), closed after the test."""
    contexts = []

    def make(**options) -> sync_api.Page:
        context = browser.new_context(**{"viewport": {"width": 1400, "height": 1600}, **options})
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def wait(page, expression: str):
    """Until `expression` is truthy in the page (a page between documents counts as "not yet"); its value."""
    return page.wait_for_function(f"() => {{ try {{ return {expression}; }} catch (e) {{ return false; }} }}",
                                  timeout=WAIT_MS).json_value()


def console_problems(page) -> list[str]:
    """What goes wrong in `page` from now on, as it happens: dialogs (dismissed: an injected alert()),
    uncaught errors and console errors (a failed request included)."""
    problems: list[str] = []
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda e: problems.append(f"error: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text} {m.location.get('url')}"))
    return problems


def open_run(page, url: str) -> None:
    """A fresh load of `url` (through about:blank: a new hash alone is no reload), until the page is ready."""
    page.goto("about:blank")
    page.goto(url)
    wait(page, "document.body.dataset.ready === 'run'")


def step_point(page, card: str, step: float, domain: tuple[float, float]) -> tuple[float, float]:
    """Viewport coordinates of `step` on the chart of `card` (the chart's x range is `domain`): on
    uPlot's plotting area (`.u-over`), which spans the range."""
    page.evaluate(f"{card}.querySelector('.u-over').scrollIntoView({{block: 'center'}})")
    box = page.evaluate(f"(() => {{ const b = {card}.querySelector('.u-over').getBoundingClientRect(); "
                        "return [b.left, b.top, b.width, b.height]; })()")
    x = box[0] + (step - domain[0]) / (domain[1] - domain[0]) * box[2]
    return x, box[1] + box[3] / 2


def chart(page, card: str) -> dict:
    """What the chart of `card` draws (plot.js's inspect): scale, ticks, axis labels, each series' values.
    Scrolled into view first: a chart is drawn (its rows asked for) as it nears the view."""
    page.evaluate(f"{card}.scrollIntoView({{block: 'center'}})")
    wait(page, f"{card}.dataset.drawn === '1' && !!Plot.inspect({card})")
    return page.evaluate(f"Plot.inspect({card})")


def every_chart(page) -> list[dict]:
    """What every chart of the page draws, each scrolled to in turn."""
    count = page.locator(".plot-card").count()
    return [chart(page, f"document.querySelectorAll('.plot-card')[{i}]") for i in range(count)]


def series(page, card: str, name: str, **where) -> list[dict]:
    return [s for s in chart(page, card)["series"] if s["name"] == name and all(s[k] == v for k, v in where.items())]


def click_step(page, card: str, step: float, domain: tuple[float, float]) -> None:
    x, y = step_point(page, card, step, domain)
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.up()


def drag_steps(page, card: str, a: float, b: float, domain: tuple[float, float]) -> None:
    (xa, y), (xb, _) = step_point(page, card, a, domain), step_point(page, card, b, domain)
    page.mouse.move(xa, y)
    page.mouse.down()
    page.mouse.move(xb, y, steps=5)
    page.mouse.up()


class Touch:
    """Real touch input (CDP Input.dispatchTouchEvent, which Playwright's tap cannot do: drags, pinches)."""

    def __init__(self, page) -> None:
        self.cdp = page.context.new_cdp_session(page)

    def __call__(self, kind: str, points: list[tuple[float, float]], at: float) -> None:
        """The fingers down after this event, at time `at` (s)."""
        self.cdp.send("Input.dispatchTouchEvent", {"type": kind, "timestamp": at, "touchPoints": [
            {"x": x, "y": y, "id": i} for i, (x, y) in enumerate(points)]})


def _png(page, path) -> bytes:
    png = page.screenshot(path=str(path), full_page=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return png


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


def test_run_page_plots_sorts_escapes_and_screenshots(site, otlp, tmp_path, new_page):
    site.seed(_seed)
    page = new_page()
    page.goto(site.url + "/#/run/web-run")
    wait(page, "document.body.dataset.ready === 'run'")
    titles = page.evaluate("[...document.querySelectorAll('.plot-card h3')].map(e => e.textContent)")
    for title in ("Reward (mean and quantiles)", "KL to the reference (log scale)", "Clip ratios",
                  "Phase durations", "IS weights (mean, min, max) (log scale)", "Effective sample size"):
        assert title in titles
    assert sum(len(c["series"]) for c in every_chart(page)) >= 8
    assert page.locator(".plot-card canvas").count() >= 8  # uPlot draws on canvases
    # KL on log10: step 0's KL of exactly 0 is left out (a gap) rather than drawn at -infinity.
    card = "[...document.querySelectorAll('.plot-card')].find(c => c.querySelector('h3').textContent.startsWith('%s'))"
    kl, reward = card % "KL to the reference", card % "Reward (mean"
    assert chart(page, kl)["scale"] == "log" and chart(page, reward)["scale"] == "linear"
    values = series(page, kl, "grpo.kl")[0]["values"]
    assert values[0] == "gap" and all(isinstance(v, float) and v > 0 for v in values[1:])
    ticks = [float(t) for t in chart(page, kl)["ticks"]["y"]]
    assert len(ticks) >= 2 and all(t > 0 for t in ticks) and ticks == sorted(ticks)
    assert page.locator("#alerts").text_content().count("GrpoKlDrift") == 1

    # Sorting: click the reward header (ascending), then again (descending).
    column = "[...document.querySelectorAll('#samples-table tbody tr')].map(r => +r.children[%d].textContent)"
    idx = page.evaluate("[...document.querySelectorAll('#samples-table th')].findIndex(t => t.dataset.col === 'reward')")
    page.click('th[data-col="reward"]')
    wait(page, "document.querySelector('th[data-col=\"reward\"]').classList.contains('sorted-asc')")
    rewards = page.evaluate(column % idx)
    assert rewards == sorted(rewards) and len(rewards) == 5
    page.click('th[data-col="reward"]')
    wait(page, "document.querySelector('th[data-col=\"reward\"]').classList.contains('sorted-desc')")
    assert page.evaluate(column % idx) == sorted(rewards, reverse=True)

    # Escaping: the completion's markup is text, nothing ran, nothing was parsed into elements.
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.querySelectorAll('#samples-table script, #samples-table img, #alerts b').length") == 0
    assert XSS in page.locator("#samples-table").text_content()

    # Long text is cut, and expands on click.
    assert "END" not in page.locator("#samples-table").text_content()
    page.locator("#samples-table tr", has_text="long answer").locator("button.more").click()
    assert " END" in page.locator("#samples-table").text_content()

    # Picking another step reloads the table.
    page.select_option("#step-select", "0")
    wait(page, "document.querySelector('#samples-table').textContent.includes('answer 0 of step 0')")

    # Live refresh: a new step shows up in the plots, the samples table stays as arranged.
    assert chart(page, reward)["steps"] == list(range(6))
    more = otlp.request(otlp.spans("web-run", [6], samples=5)).SerializeToString()
    assert httpx.post(site.url + "/v1/traces", content=more,
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    page.evaluate("window.otelGrpoRefresh()")
    wait(page, f"Plot.inspect({reward}).steps.length === 7")
    assert page.evaluate("document.querySelectorAll('#step-select option').length") == 7
    assert page.evaluate("document.querySelector('#samples-table').textContent.includes('answer 0 of step 0')")

    out = tmp_path / "sidecar-run-page.png"
    _png(page, out)
    if os.environ.get("OTEL_GRPO_SCREENSHOT"):
        shutil.copy(out, os.environ["OTEL_GRPO_SCREENSHOT"])

    page.goto(site.url + "/#/")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert "web-run" in page.locator("#runs-table a").all_text_contents()  # (the module's other runs too)
    # its summary: the latest step's reward mean and KL (four significant digits, the full value on hover)
    last = httpx.get(site.url + "/api/runs/web-run/steps").json()[-1]
    row = page.locator("#runs-table tbody tr", has=page.locator("a", has_text="web-run"))
    for cell, column in (("latest-reward", "grpo.reward.mean"), ("latest-kl", "grpo.kl")):
        assert float(row.locator(f"td.{cell}").get_attribute("title")) == last[column]
        assert float(row.locator(f"td.{cell}").text_content()) == pytest.approx(last[column], rel=1e-3)


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


def _shot(page, tmp_path, name: str) -> None:
    _png(page, tmp_path / name)
    if os.environ.get("OTEL_GRPO_SCREENSHOT_DIR"):
        shutil.copy(tmp_path / name, os.environ["OTEL_GRPO_SCREENSHOT_DIR"])


def test_plots_stay_readable_on_a_bad_run(site, tmp_path, new_page):
    site.seed(_seed_tricky)
    page = new_page(viewport={"width": 1347, "height": 1400})
    page.goto(site.url + "/#/run/" + RUN.replace("/", "%2F"))
    wait(page, "document.body.dataset.ready === 'run'")
    assert page.locator("main h1").first.text_content() == "Run " + RUN
    titles = page.evaluate("[...document.querySelectorAll('.plot-card h3')].map(e => e.textContent)")
    assert {"Loss", "Gradient norm (log scale)"} <= set(titles)  # apart: a loss spike flattens nothing

    kl = _card("KL to the reference")
    assert 2 <= len(chart(page, kl)["ticks"]["y"]) <= 6  # 1e-6 .. 1e22, readable
    assert chart(page, kl)["yLabel"] == "nat"  # the catalog's {nat}
    # One name per signal: the catalog name (the API's column), the Prometheus series beside it.
    legend = page.evaluate(f"[...{kl}.querySelectorAll('.legend span')].map(s => [s.textContent, s.title])")
    assert ["grpo.kl grpo_kl", catalog.get("kl").description] in legend
    rows = httpx.get(f"{site.url}/api/runs/{RUN.replace('/', '%2F')}/steps").json()
    assert rows[3]["grpo.kl"] == _metrics(3)["kl"]

    mis = _card("IS mismatch: KL")
    assert chart(page, mis)["scale"] == "symlog"
    # 11 of 12 steps drawn, zeros and negatives too; the NaN a gap (null), not bridged
    values = series(page, mis, "grpo.mismatch.kl")[0]["values"]
    assert len(values) == 12 and values[5] == "gap" and all(isinstance(v, (int, float)) for i, v in enumerate(values) if i != 5)
    assert 0 in values and any(v < 0 for v in values if v != "gap")
    ticks = chart(page, mis)["ticks"]["y"]
    assert "0" in ticks and any(t.startswith("-") for t in ticks)

    weights = _card("IS weights")
    assert len(chart(page, weights)["series"]) == 3  # min and max too
    labels = chart(page, weights)["ticks"]["y"]
    assert len(labels) >= 2 and len(set(labels)) == len(labels)

    charts = every_chart(page)
    x_ticks = [",".join(c["ticks"]["x"]) for c in charts]
    assert len(set(x_ticks)) == 1 and x_ticks[0].startswith("0,")  # one x range for every chart
    assert all(c["xLabel"] == "step" for c in charts)

    # The samples table fits the 1347 px view; long text expands in place.
    assert page.evaluate("document.querySelector('#samples-table').scrollWidth <= document.querySelector('#samples').clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1347
    _shot(page, tmp_path, "run-page-bad-run.png")

    # Sorting by a column no sort can name: the error stays in the samples box.
    header = "[...document.querySelectorAll('#samples-table th')].find(t => t.dataset.col === %s)"
    page.locator(f"#samples-table th[data-col={json.dumps(QUOTED)}]").click()
    wait(page, "document.querySelector('#samples').dataset.error === '1'")
    assert "cannot show these samples" in page.locator("#samples-note").text_content()
    assert page.locator("#samples-table tbody tr").count() == 6  # still there
    assert page.locator("#plots .plot-card").count() >= 8  # the charts stay
    page.locator(f"#samples-table th[data-col={json.dumps(ODD)}]").click()
    wait(page, f"{header % json.dumps(ODD)}.classList.contains('sorted-asc')")
    col = page.evaluate(f"[...document.querySelectorAll('#samples-table th')].findIndex(t => t.dataset.col === {json.dumps(ODD)})")
    odd = page.evaluate(f"[...document.querySelectorAll('#samples-table tbody tr')].map(r => +r.children[{col}].textContent)")
    assert odd == sorted(odd) and len(odd) == 6

    # Search filters as you type, over every step.
    page.fill("#search", "answer 4 of")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 12")
    texts = page.evaluate("[...document.querySelectorAll('#samples-table tbody tr')].map(r => r.textContent)")
    assert all("answer 4 of step" in t for t in texts)
    page.fill("#search", "")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 6")

    # Clicking a plot point opens that step's samples.
    click_step(page, _card("Reward (mean"), 4, (0, 11))
    wait(page, "document.querySelector('#step-select').value === '4'")
    wait(page, "[...document.querySelectorAll('#samples-table tbody tr')].every(r => r.textContent.includes('of step 4 '))")

    # The group view: every stored completion of the prompt's group, side by side, ranked by reward.
    page.locator("#samples-table tbody tr:nth-child(5) button.group-open").click()
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 3")
    cards = page.evaluate("[...document.querySelectorAll('#group-view .group-card')].map(c => Object.fromEntries([...c.querySelectorAll('.group-stats tr')].map(r => [r.children[0].textContent, r.children[1].textContent])))")
    # row 5 in the table sorted by ODD (5 - i) is sample 1: group 0 of step 4 is samples 0, 1, 2
    assert [float(c["reward"]) for c in cards] == [1.0, 0.5, 0.0]
    assert [c["sample"] for c in cards] == ["2", "1", "0"]
    assert {"reward.correct", "reward.format", "advantage", "length"} <= cards[0].keys()
    assert page.locator("#group-view .picked .rank").text_content() == "#2"
    page.locator("#group-view").scroll_into_view_if_needed()
    _shot(page, tmp_path, "run-page-group-view.png")


MAIN, OTHER = "explore-a", "explore-b"
EXPLORER_RUNBOOK = "https://github.com/otel-grpo/otel-grpo/blob/main/docs/operations.md#grpoklspike"


def _explorer_metrics(step: int) -> dict:
    out = {"kl": 1e-3 * (1 + step % 3) if step != 12 else 5.0, "loss": 0.1 * (step % 4), "learning_rate": 1e-6 * (1 + step)}
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


def sidecar_with_runs(sidecar_factory, tmp_path, count: int) -> SidecarProcess:
    """A sidecar over `count` runs without steps, `exp-00000` first (SQLite, no ingest workers): the runs list."""
    from otel_grpo.sidecar.store import open_store

    db = tmp_path / "runs.db"
    store = open_store(db)
    with store._tx() as conn:
        conn.executemany("INSERT INTO runs (run_id, model, first_seen, last_update) VALUES (?, 'tiny', ?, ?)",
                         [(f"exp-{i:05d}", 1000.0 + i, 1000.0 + i) for i in range(count)])
    store.close()
    return sidecar_factory(db=db, env={"OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"})


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
             "annotations": {"summary": "KL spiked", "runbook_url": EXPLORER_RUNBOOK}, "startsAt": fired, "fingerprint": "kl12"}
    assert httpx.post(url + "/api/alerts", json={"version": "4", "alerts": [alert]}).status_code == 200


def _download(page, folder, kind: str) -> tuple[str, list[int]]:
    """Clicks the page's CSV or JSONL download: the file's name and the sample indexes of its rows."""
    with page.expect_download() as download:
        page.click(f"#download-{kind}")
    path = folder / download.value.suggested_filename
    download.value.save_as(path)
    text = path.read_text()
    rows = list(csv.DictReader(io.StringIO(text))) if kind == "csv" else [json.loads(x) for x in text.splitlines()]
    return path.name, [int(r["sample_index"]) for r in rows]


def _hash(page) -> dict:
    """The page's URL state: the query of `#/run/<id>?...` as a dict."""
    return page.evaluate("Object.fromEntries(new URLSearchParams(location.hash.split('?')[1] || ''))")


def test_an_older_samples_answer_arriving_late_does_not_replace_the_newer_one(site, new_page):
    """Sort descending (the KL column's first click), then at once ascending: the first answer, held
    back, arrives last. The table keeps the rows of the latest request (a slow store under load
    showed one order's rows under the other's header)."""
    site.seed(_seed_explorer)
    page = new_page()
    page.goto(f"{site.url}/#/run/{MAIN}?step=12")
    wait(page, "document.body.dataset.ready === 'run' && !!document.querySelector('#samples-table')")
    # answers to descending sorts come 1.5 s late (the page fetches through window.fetch); window.__late
    # settles once the held answer has been read (a task after its body, which the page reads too)
    page.evaluate("""() => { const fetch0 = window.fetch; window.fetch = (url, ...rest) => {
        const late = String(url).includes('/samples') && String(url).includes('order_by') && String(url).includes('desc=true');
        if (!late) return fetch0(url, ...rest);
        const held = new Promise((ok) => setTimeout(() => ok(fetch0(url, ...rest)), 1500));
        window.__late = held.then((r) => r.clone().text()).then(() => new Promise((ok) => setTimeout(ok, 100)));
        return held; }; }""")
    th = "document.querySelector('th[data-col=\"kl_ref_mean\"]')"
    page.click('th[data-col="kl_ref_mean"]')  # descending: held back
    page.click('th[data-col="kl_ref_mean"]')  # ascending, at once: answered first
    wait(page, f"{th}.classList.contains('sorted-asc')")
    page.evaluate("window.__late")  # the descending answer has arrived meanwhile
    assert page.evaluate(f"{th}.className").endswith("sorted-asc")
    assert page.evaluate("document.querySelector('#samples-table tbody tr').dataset.sample") == "0"


def test_run_explorer_from_a_bad_step_to_its_completions(site, tmp_path, new_page):
    site.seed(_seed_explorer)
    page = new_page(viewport={"width": 1366, "height": 900}, accept_downloads=True)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    page.goto(f"{site.url}/#/run/{MAIN}")
    wait(page, "document.body.dataset.ready === 'run'")
    kl, entropy = _card("KL to the reference"), _card("Entropy")

    # A metric logged every other step is one line, not ten dots: its ten steps, no gap between them.
    assert chart(page, entropy)["steps"] == list(range(0, 20, 2))
    assert all(isinstance(v, (int, float)) for v in series(page, entropy, "grpo.policy.entropy")[0]["values"])

    # The alert sits on the step axis: step 12 in the table and a mark on every chart, labelled with its
    # name, linked to its row in the alerts table and to its runbook.
    assert page.locator("#alerts a.alert-step").text_content() == "12"
    assert chart(page, kl) and page.evaluate(f"{kl}.querySelector('.mark-alert').dataset.step") == "12"
    assert page.locator(".plot-card[data-drawn] .mark-alert").count() == page.locator(".plot-card[data-drawn]").count() >= 2
    mark = page.locator(f'.plot-card[data-chart="kl"] .mark-alert')
    assert mark.locator("button.mark-label").text_content() == "GRPOKLSpike"
    assert mark.locator("a.mark-runbook").get_attribute("href") == EXPLORER_RUNBOOK
    mark.locator("button.mark-label").click()
    wait(page, "document.querySelector('#alert-0').classList.contains('flash')")
    assert page.evaluate("(() => { const b = document.querySelector('#alert-0').getBoundingClientRect(); "
                         "return b.top >= 0 && b.bottom <= innerHeight; })()")

    # Hover: the values of every series at the step under the pointer.
    x, y = step_point(page, kl, 12, (0, 19))
    page.mouse.move(x, y)
    tip = wait(page, f"!{kl}.querySelector('.plot-tip').hidden && {kl}.querySelector('.plot-tip').textContent")
    assert tip.startswith("step 12") and "grpo.kl 5" in tip

    # Clicking the spike opens step 12's samples; the URL links to it; sort by the per-sample KL.
    click_step(page, kl, 12, (0, 19))
    wait(page, "document.querySelector('#step-select').value === '12'")
    assert _hash(page)["step"] == "12"
    # A diagnostic sorts worst first: the first click puts the largest KL on top.
    page.click('th[data-col="kl_ref_mean"]')
    wait(page, "document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-desc')")
    assert page.evaluate("document.querySelector('#samples-table tbody tr').dataset.sample") == "3"
    assert _hash(page) == {"step": "12", "sort": "kl_ref_mean", "desc": "1"}
    # From the keyboard: the focus stays on the header across the redraw, Enter and Space sort.
    page.keyboard.press("Enter")
    wait(page, "document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-asc')")
    assert page.evaluate("document.activeElement.closest('th').dataset.col") == "kl_ref_mean"
    page.keyboard.press(" ")
    wait(page, "document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-desc')")
    assert page.evaluate("document.querySelector('#samples-table tbody tr').dataset.sample") == "3"

    # Full headers: no header is cut, whatever its length; the page does not scroll sideways.
    cut = page.evaluate("[...document.querySelectorAll('#samples-table th')].filter(t => t.scrollWidth > t.clientWidth + 1).map(t => t.dataset.col)")
    assert cut == []
    headers = page.evaluate("[...document.querySelectorAll('#samples-table th')].map(t => t.textContent)")
    assert {"completion_length", "length_clipped", "kl_ref_mean", "log_ratio_absmax", "is_weight_max", "entropy_mean",
            "reward.correct"} <= set(headers)
    assert "policy_version" not in headers  # bookkeeping hidden until picked
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    _shot(page, tmp_path, "explorer-1366.png")

    # The column picker shows a hidden column.
    page.click("#column-picker summary")
    page.click('#column-picker input[data-col="policy_version"]')
    wait(page, "!!document.querySelector('#samples-table th[data-col=\"policy_version\"]')")
    page.click("#column-picker summary")

    # Range filter on a diagnostic column: only the sample with an IS weight above 10.
    page.select_option("#filter-col", "is_weight_max")
    page.fill("#filter-min", "10")
    page.dispatch_event("#filter-min", "change")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 1")
    assert "1 of 8 rows" in page.locator("#samples-note").text_content()
    assert _hash(page)["fcol"] == "is_weight_max" and _hash(page)["fmin"] == "10"

    # Downloads are what the table selects: the filtered row alone, then (the filter cleared) every row
    # of the step in the page's order, as CSV and as JSONL.
    assert _download(page, downloads, "jsonl") == (f"{MAIN}-step-12-filtered.jsonl", [3])
    page.select_option("#filter-col", "")  # no column: no filter (a column alone keeps its rows with a number)
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 8")
    assert _download(page, downloads, "jsonl") == (f"{MAIN}-step-12.jsonl", [3, 7, 6, 5, 4, 2, 1, 0])  # KL descending
    assert _download(page, downloads, "csv") == (f"{MAIN}-step-12.csv", [3, 7, 6, 5, 4, 2, 1, 0])
    assert "kl_ref_mean" in (downloads / f"{MAIN}-step-12.csv").read_text().splitlines()[0]

    # Smoothing draws a smoothed line over the raw one, which stays, faded (raw values stay in the hover box).
    raw = series(page, kl, "grpo.kl")[0]
    page.fill("#smooth", "0.8")
    wait(page, f"Plot.inspect({kl}).series.length === 2")
    [faded], [smoothed] = series(page, kl, "grpo.kl", raw=True), series(page, kl, "grpo.kl", raw=False)
    assert faded["values"] == raw["values"] and smoothed["values"] != raw["values"]
    assert faded["stroke"].startswith("rgba(") and faded["stroke"].endswith(", 0.28)") and smoothed["stroke"] == raw["color"]
    # Smoothed on the log scale (logs averaged): the spike's step stays above its neighbours, which stay near 1e-3.
    assert smoothed["values"][12] > smoothed["values"][14] and smoothed["values"][14] < 0.1  # a linear EMA: 0.64
    assert _hash(page)["smooth"] == "0.8"
    # Another weight redraws the same charts (their canvases stay) with new values.
    page.evaluate(f"{kl}.querySelector('canvas').dataset.kept = '1'")
    page.fill("#smooth", "0.5")
    wait(page, f"Plot.inspect({kl}).series[1].values[14] !== {json.dumps(smoothed['values'][14])}")
    assert page.evaluate(f"{kl}.querySelector('canvas').dataset.kept") == "1" and _hash(page)["smooth"] == "0.5"

    # Overlay another run, aligned by step: its lines in a colour of their own, the run legend says which.
    page.click("#compare summary")
    page.click(f'#compare input[data-run="{OTHER}"]')
    wait(page, f"Plot.inspect({kl}).series.some(s => s.run === {json.dumps(OTHER)})")
    mine, other = series(page, kl, "grpo.kl", run=MAIN, raw=False)[0], series(page, kl, "grpo.kl", run=OTHER, raw=False)[0]
    assert mine["color"] != other["color"] and mine["dash"] == other["dash"]
    assert _hash(page)["vs"] == OTHER
    assert page.evaluate("[...document.querySelectorAll('#run-legend span')].map(s => s.dataset.run)") == [MAIN, OTHER]
    legend_colors = page.evaluate("[...document.querySelectorAll('#run-legend line')].map(l => l.getAttribute('stroke'))")
    assert legend_colors == [mine["color"], other["color"]]
    phases = page.evaluate(f"[...{_card('Phase durations')}.querySelectorAll('.legend code')].map(c => c.textContent)")
    assert 'grpo_phase_duration_seconds{phase="rollout"}' in phases
    page.click("#compare summary")

    # Drag to zoom: every panel shows steps 5..15; double-click shows all steps again.
    drag_steps(page, kl, 5, 15, (0, 19))
    wait(page, "location.hash.includes('from=')")
    state = _hash(page)
    assert 4 <= int(state["from"]) <= 6 and 14 <= int(state["to"]) <= 16
    x_ticks = [[float(t) for t in c["ticks"]["x"] if t] for c in every_chart(page)]
    assert all(min(t) >= int(state["from"]) and max(t) <= int(state["to"]) for t in x_ticks if t)
    assert page.locator("#zoom-reset").is_visible()
    x, y = step_point(page, kl, 10, (int(state["from"]), int(state["to"])))
    before = page.evaluate("window.scrollY")
    page.mouse.dblclick(x, y)
    wait(page, "!location.hash.includes('from=')")
    page.wait_for_timeout(500)  # past the double-click window: the first click must not have picked a step
    assert page.evaluate("window.scrollY") == before and _hash(page)["step"] == "12"

    # Links: a sample link marks its row; a group link opens the group view; both survive a reload.
    open_run(page, f"{site.url}/#/run/{MAIN}?step=12&sample=3&sort=kl_ref_mean&desc=1")
    assert page.evaluate("document.querySelector('#samples-table tr.linked').dataset.sample") == "3"
    assert page.evaluate("document.querySelector('th[data-col=\"kl_ref_mean\"]').classList.contains('sorted-desc')")
    open_run(page, f"{site.url}/#/run/{MAIN}?step=12&group=0")
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 4")
    stats = page.evaluate("[...document.querySelectorAll('#group-view .group-card .group-stats th')].map(t => t.textContent)")
    assert {"KL to ref", "IS weight max", "entropy"} <= set(stats)

    # A phone: nothing wider than the screen but the table's own box, which scrolls sideways.
    phone = new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True)
    open_run(phone, f"{site.url}/#/run/{MAIN}?step=12&sort=kl_ref_mean&desc=1&vs={OTHER}")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    assert phone.evaluate("document.querySelector('#plots .plot-card canvas').getBoundingClientRect().width") <= 390
    assert phone.evaluate("document.querySelector('#samples').scrollWidth > document.querySelector('#samples').clientWidth")
    _shot(phone, tmp_path, "explorer-phone.png")


def test_a_group_link_keeps_the_view(site, new_page):
    """The group view's link opens the group in the same view (as a sample's link does): the compared
    run, the zoom, the table's order, filter and columns come with it."""
    site.seed(_seed_explorer)
    page = new_page(viewport={"width": 1366, "height": 900})
    view = f"sort=kl_ref_mean&desc=1&fcol=kl_ref_mean&fmax=1&showcol=policy_version&vs={OTHER}&from=2&to=18"
    open_run(page, f"{site.url}/#/run/{MAIN}?step=12&{view}")
    page.locator("#samples-table tbody tr:first-child button.group-open").click()
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 4")
    link = page.evaluate("document.querySelector('#group-view a.group-link').getAttribute('href')")
    open_run(page, site.url + "/" + link)
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 4")
    kept = {k: v for k, v in _hash(page).items() if k not in ("step", "groupof")}
    assert kept == dict(pair.split("=") for pair in view.split("&"))
    assert _legend(page) == [MAIN, OTHER] and "policy_version" in _headers(page)


def test_any_step_column_is_a_chart_and_the_layout_is_in_the_url(site, tmp_path, new_page):
    """Every step column can be found by search and charted; charts can be removed and rescaled; the
    layout is in the URL, so a reload (a link) shows it again; every chart's cursor follows the pointer."""
    site.seed(_seed_explorer)
    page = new_page(viewport={"width": 1366, "height": 900})
    open_run(page, f"{site.url}/#/run/{MAIN}")
    columns = [c["name"] for c in httpx.get(f"{site.url}/api/runs/{MAIN}/metrics").json()]
    assert "grpo.learning_rate" in columns and page.locator('.plot-card[data-chart="grpo.learning_rate"]').count() == 0
    found = page.evaluate("""(names) => names.filter((n) => {
        const input = document.querySelector('#chart-search'); input.value = n; input.dispatchEvent(new Event('input'));
        return [...document.querySelectorAll('#chart-results button.chart-add')].some((b) => b.dataset.col === n); })""", columns)
    assert found == columns
    page.fill("#chart-search", "learning rate optimizer")  # words of its description find it too
    assert page.locator("#chart-results button.chart-add").all_text_contents() == ["grpo.learning_rate grpo_learning_rateadd chart"]

    # Enter charts the first match; the URL says so.
    page.press("#chart-search", "Enter")
    wait(page, "!!document.querySelector('.plot-card[data-chart=\"grpo.learning_rate\"]')")
    assert _hash(page)["add"] == "grpo.learning_rate"
    lr = _card("grpo.learning_rate")
    assert series(page, lr, "grpo.learning_rate")[0]["values"] == pytest.approx([1e-6 * (1 + s) for s in range(20)])
    assert chart(page, lr)["yLabel"] == "lr"
    page.select_option('.plot-card[data-chart="grpo.learning_rate"] select.chart-scale', "log")
    wait(page, f"Plot.inspect({lr}).scale === 'log'")
    assert _hash(page)["scale"] == "grpo.learning_rate:log"
    page.click('.plot-card[data-chart="loss"] button.chart-remove')
    wait(page, "!document.querySelector('.plot-card[data-chart=\"loss\"]')")
    assert _hash(page)["hide"] == "loss"

    # A reload of that URL shows the same charts.
    open_run(page, page.url)
    assert page.locator('.plot-card[data-chart="loss"]').count() == 0
    assert chart(page, _card("grpo.learning_rate"))["scale"] == "log"
    # The removed panel comes back through search; "default charts" undoes the rest.
    page.fill("#chart-search", "grpo.loss")
    page.click('#chart-results button.chart-add[data-col="grpo.loss"]')
    wait(page, "!!document.querySelector('.plot-card[data-chart=\"loss\"]')")
    assert "hide" not in _hash(page)
    page.click("#charts-reset")
    wait(page, "!document.querySelector('.plot-card[data-chart=\"grpo.learning_rate\"]')")
    assert not {"add", "hide", "scale"} & _hash(page).keys()

    # Cursor sync: the pointer on the KL chart at step 12 puts every chart's cursor on step 12.
    kl = _card("KL to the reference")
    page.mouse.move(*step_point(page, kl, 12, (0, 19)))
    wait(page, "[...document.querySelectorAll('.plot-card[data-drawn]')].every(c => Plot.inspect(c).cursor === 12)")
    assert page.locator(".plot-card[data-drawn]").count() >= 2
    _shot(page, tmp_path, "charts-cursor-sync.png")


def test_touch_zoom_and_tap_on_a_phone(site, tmp_path, new_page):
    """The mouse's zoom with fingers, at the phone width: drag, pinch, double tap, and a tap that picks;
    nothing loaded from outside the sidecar."""
    site.seed(_seed_explorer)
    page = new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True)
    touch = Touch(page)
    open_run(page, f"{site.url}/#/run/{MAIN}")
    kl, t = _card("KL to the reference"), time.time()

    # A finger down shows the values at its step; lifted, it picks that step's samples.
    x, y = step_point(page, kl, 12, (0, 19))
    touch("touchStart", [(x, y)], t)
    tip = wait(page, f"!{kl}.querySelector('.plot-tip').hidden && {kl}.querySelector('.plot-tip').textContent")
    assert tip.startswith("step 12") and "grpo.kl 5" in tip
    touch("touchEnd", [], t + 0.05)
    wait(page, "document.querySelector('#step-select').value === '12'")
    # ... shown once loaded, and scrolled to (the drag below scrolls back to the plot after that)
    wait(page, "[...document.querySelectorAll('#samples-table tbody tr')].every(r => r.textContent.includes('of step 12'))")

    # One finger dragged sideways zooms every plot to the steps it crossed.
    (xa, y), (xb, _) = step_point(page, kl, 5, (0, 19)), step_point(page, kl, 15, (0, 19))
    touch("touchStart", [(xa, y)], t + 1)
    for i in range(1, 6):
        touch("touchMove", [(xa + (xb - xa) * i / 5, y)], t + 1 + i / 50)
    touch("touchEnd", [], t + 1.2)
    wait(page, "location.hash.includes('from=')")
    state = _hash(page)
    assert 4 <= int(state["from"]) <= 6 and 14 <= int(state["to"]) <= 16
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    # A double tap shows every step again, and picks nothing.
    x, y = step_point(page, kl, 10, (int(state["from"]), int(state["to"])))
    for at in (t + 2, t + 2.1):
        touch("touchStart", [(x, y)], at)
        touch("touchEnd", [], at + 0.02)
    wait(page, "!location.hash.includes('from=')")
    page.wait_for_timeout(500)  # past the double-tap window: the first tap must not have picked a step
    assert _hash(page)["step"] == "12"

    # Two fingers on steps 8 and 12, spread to where steps 1 and 18 were: the view is steps 8..12.
    (a0, y), (b0, _) = step_point(page, kl, 8, (0, 19)), step_point(page, kl, 12, (0, 19))
    (a1, _), (b1, _) = step_point(page, kl, 1, (0, 19)), step_point(page, kl, 18, (0, 19))
    touch("touchStart", [(a0, y), (b0, y)], t + 3)
    for i in range(1, 6):
        touch("touchMove", [(a0 + (a1 - a0) * i / 5, y), (b0 + (b1 - b0) * i / 5, y)], t + 3 + i / 50)
    touch("touchEnd", [], t + 3.2)
    wait(page, "location.hash.includes('from=')")
    assert (_hash(page)["from"], _hash(page)["to"]) == ("8", "12")
    x_ticks = [int(t) for t in chart(page, kl)["ticks"]["x"] if t]
    assert x_ticks and min(x_ticks) >= 8 and max(x_ticks) <= 12

    # Pinching in over the whole view shows all steps again.
    touch("touchStart", [(a1, y), (b1, y)], t + 4)
    touch("touchMove", [(a0, y), (b0, y)], t + 4.05)
    touch("touchEnd", [], t + 4.1)
    wait(page, "!location.hash.includes('from=')")
    _shot(page, tmp_path, "explorer-phone-touch.png")

    # Offline and light: everything the page loaded (scripts, styles, API calls) came from the
    # sidecar, no CDN; its own code is small.
    loaded = page.evaluate("[location.href, ...performance.getEntriesByType('resource').map(e => [e.name, e.encodedBodySize])]")
    href, resources = loaded[0], loaded[1:]
    assert href.startswith(site.url + "/") and resources
    assert all(name.startswith(site.url + "/") for name, _ in resources), resources
    static = {name.rsplit("/", 1)[1]: size for name, size in resources if "/static/" in name}
    vendor = {"uPlot.iife.min.js", "uPlot.min.css"}  # uPlot 1.6.32, served from /static/vendor/
    assert static.keys() == {"util.js", "touch.js", "scales.js", "interact.js", "plot.js", "charts.js", "table.js", "group.js",
                             "app.js", "style.css"} | vendor
    assert all(name.startswith(f"{site.url}/static/vendor/") for name, _ in resources if name.rsplit("/", 1)[1] in vendor)
    # A few KB above what is served (the commit that last moved the bound says how much that is).
    assert sum(size for name, size in static.items() if name not in vendor) < 150_000  # 146.5 KB with a read's stall bound
    assert sum(static[name] for name in vendor) < 60_000


LONG, LONG_STEPS, LONG_SPIKE, LONG_EVAL = "long-run", 1500, 777, 50


def _long_metrics(step: int) -> dict:
    """KL with a one-step spike; an evaluation logged once, early (the latest steps never carry it)."""
    return {"kl": 5.0 if step == LONG_SPIKE else 1e-3 * (1 + step % 3),
            **({"eval_accuracy": 0.625} if step == LONG_EVAL else {})}


def _seed_long(url: str, otlp) -> None:
    for run_id in (LONG, "long-other"):
        for first in range(0, LONG_STEPS, 250):  # exports of the size a trainer sends, not one of 1500 steps
            spans = otlp.spans(run_id, range(first, first + 250), samples=0, metrics=_long_metrics)
            assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(), timeout=60,
                              headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def test_a_long_run_is_downsampled_and_its_spike_drawn(site, new_page):
    """More steps than the page asks for: the request carries `points`, the one-step KL spike is
    still drawn, and a zoom asks the server for its range, for the run shown and the run overlaid."""
    site.seed(_seed_long)
    page = new_page(viewport={"width": 1366, "height": 900})
    open_run(page, f"{site.url}/#/run/{LONG}?vs=long-other")
    steps_requests = "performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/steps?'))"
    kl = _card("KL to the reference")
    assert len(chart(page, kl)["steps"]) <= 1366 < LONG_STEPS
    # A request per chart and run, naming only the chart's columns: the KL chart's asks for grpo.kl.
    asked = page.evaluate(steps_requests)
    assert asked and all("points=1366" in n and "metrics=" in n and "fields=step" in n for n in asked)  # rows: step, columns
    for run in (LONG, "long-other"):
        assert [n for n in asked if f"/{run}/steps?metrics=grpo.kl&" in n]
    top = f"Math.max(...Plot.inspect({kl}).ticks.y.map(Number))"
    assert page.evaluate(top) >= 1  # the spike (5 nat) sets the axis; the other steps are ~1e-3

    drag_steps(page, kl, 700, 850, (0, LONG_STEPS - 1))
    zoomed = f"{steps_requests}.filter(n => n.includes('step_min=') && n.includes('metrics=grpo.kl&'))"
    wait(page, f"{zoomed}.length == 2")
    zoomed = page.evaluate(zoomed)
    assert all("points=1366" in n and "step_max=" in n for n in zoomed)
    assert any("/long-other/steps" in n for n in zoomed) and any(f"/{LONG}/steps" in n for n in zoomed)
    wait(page, f"{top} >= 1")


def test_a_column_logged_only_early_in_a_long_run_is_found_and_charted(site, new_page):
    """The column search finds every column the run ever logged: one logged only at step 50 of 1,500
    is found, charted, and its one value drawn."""
    site.seed(_seed_long)
    page = new_page(viewport={"width": 1366, "height": 900})
    open_run(page, f"{site.url}/#/run/{LONG}")
    page.fill("#chart-search", "eval_acc")
    found = page.locator("#chart-results button.chart-add")
    assert [found.nth(i).get_attribute("data-col") for i in range(found.count())] == ["eval_accuracy"]
    page.press("#chart-search", "Enter")
    card = _card("eval_accuracy")
    wait(page, f"!!{card}")
    assert _hash(page)["add"] == "eval_accuracy"
    drawn = chart(page, card)
    assert drawn["steps"] == [LONG_EVAL] and [s["values"] for s in drawn["series"]] == [[0.625]]


def test_a_chart_is_drawn_and_its_rows_asked_for_once_scrolled_to(site, new_page):
    """Off-screen charts cost nothing until they near the view: no canvas, no rows asked for."""
    site.seed(_seed_explorer)
    page = new_page(viewport={"width": 800, "height": 600})  # one chart a row
    open_run(page, f"{site.url}/#/run/{MAIN}")
    last = "[...document.querySelectorAll('.plot-card')].at(-1)"
    columns = page.evaluate(f"{last}.columns")
    assert page.evaluate(f"{last}.getBoundingClientRect().top") > 600 + 400  # well below the view
    asked = "performance.getEntriesByType('resource').map(e => decodeURIComponent(e.name)).filter(n => n.includes('/steps?'))"
    mine = f"{asked}.filter(n => {json.dumps(columns)}.every(c => n.includes(c)))"
    assert page.evaluate(f"{last}.dataset.drawn") is None and page.evaluate(f"Plot.inspect({last})") is None
    assert page.evaluate(f"{last}.querySelectorAll('canvas').length") == 0 and page.evaluate(mine) == []
    assert page.locator(".plot-card[data-drawn]").count() >= 2  # those in view are drawn
    page.evaluate(f"{last}.scrollIntoView({{block: 'center'}})")
    wait(page, f"{last}.dataset.drawn === '1'")
    assert page.evaluate(f"{last}.querySelectorAll('canvas').length") >= 1 and len(page.evaluate(mine)) == 1


def _keyboard_on_kl(site, new_page):
    """The explorer's run page with the keyboard's focus on the KL chart: (page, its card, its box), as JS."""
    site.seed(_seed_explorer)
    page = new_page(viewport={"width": 1366, "height": 900})
    open_run(page, f"{site.url}/#/run/{MAIN}")
    kl = _card("KL to the reference")
    chart(page, kl)
    page.evaluate(f"{kl}.querySelector('.u-over').focus()")
    return page, kl, f"{kl}.querySelector('.plot-tip')"


def test_the_keyboard_moves_a_charts_cursor(site, new_page):
    """Tab to a chart; Left/Right move its cursor a step, Home/End to the first and last step, with the
    hover's box of values; every chart's cursor follows; Enter opens that step's samples."""
    page, kl, tip = _keyboard_on_kl(site, new_page)
    seen = []
    for key, step in (("End", 19), ("ArrowLeft", 18), ("ArrowLeft", 17), ("Home", 0), ("ArrowRight", 1), ("ArrowLeft", 0),
                      ("ArrowLeft", 0)):
        page.keyboard.press(key)
        wait(page, f"Plot.inspect({kl}).cursor === {step} && !{tip}.hidden")
        seen.append(page.evaluate(f"{tip}.textContent"))
    assert seen[0].startswith("step 19") and "grpo.kl" in seen[0]
    assert seen[3].startswith("step 0") and seen[-1].startswith("step 0")
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")  # step 18: the entropy chart has even steps only
    wait(page, "[...document.querySelectorAll('.plot-card[data-drawn]')].every(c => Plot.inspect(c).cursor === 18)")
    page.keyboard.press("Enter")
    wait(page, "document.querySelector('#step-select').value === '18'")
    # the focus goes with the view once the samples are in (a focus of the chart before would lose it to them),
    # and the chart it leaves hides its box
    wait(page, f"document.activeElement === document.getElementById('samples-heading') && {tip}.hidden")
    page.evaluate(f"{kl}.querySelector('.u-over').focus()")
    page.keyboard.press("Home")
    wait(page, f"!{tip}.hidden")
    page.evaluate(f"{kl}.querySelector('.u-over').blur()")
    wait(page, f"{tip}.hidden")


def test_a_live_refresh_keeps_the_keyboards_chart_and_cursor(site, new_page):
    """A live run's page draws every chart again every 10 s: a keyboard user stays on the chart, at the step."""
    page, kl, tip = _keyboard_on_kl(site, new_page)
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    wait(page, f"Plot.inspect({kl}).cursor === 18 && !{tip}.hidden")
    page.evaluate(f"{kl}.querySelector('.u-over').dataset.before = '1'")
    page.evaluate("window.otelGrpoRefresh()")
    over = f"{kl}.querySelector('.u-over')"
    wait(page, f"{over} && !{over}.dataset.before")  # drawn again: a new chart
    wait(page, f"document.activeElement === {over} && Plot.inspect({kl}).cursor === 18 && !{tip}.hidden")
    page.keyboard.press("ArrowLeft")  # the keys go on from there
    wait(page, f"Plot.inspect({kl}).cursor === 17 && !{tip}.hidden")


def test_the_page_runs_under_its_content_security_policy_and_refuses_frames(site, new_page):
    response = httpx.get(site.url + "/")
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert response.headers["X-Frame-Options"] == "DENY"
    site.seed(_seed)
    page = new_page()
    problems = console_problems(page)
    page.add_init_script("window.__violations = []; document.addEventListener('securitypolicyviolation', "
                         "e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));")
    open_run(page, site.url + "/#/run/web-run")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length > 0")
    assert sum(len(c["series"]) for c in every_chart(page)) >= 8
    # The table's widths are set through the CSSOM, which the policy allows (a style attribute it refuses).
    assert page.evaluate("document.querySelector('#samples-table').style.minWidth").endswith("px")
    assert page.evaluate("window.__violations") == []
    assert problems == []  # nothing failed, not even a favicon the sidecar does not serve


RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: what follows it on the line is drawn reversed until closed
BIDI_RUN, BIDI_FN, BIDI_TEXT = f"exp-{RLO}lave", f"judge-{RLO}ssap", f"{RLO}fdp.exe"
QUOTED_FN = 'judge "strict" \\ v2'  # a reward function's name as a user wrote it: quotes and a backslash


def _seed_bidi(url: str, otlp) -> None:
    """A run whose id, reward function name and a completion hold an unclosed override (a model writes
    any character; run ids and function names come from users' configs), and a run to compare it with."""
    for run in (BIDI_RUN, "bidi-other"):
        spans = otlp.spans(run, range(3), samples=3,
                           metrics=lambda step: {f"reward_fn_mean/{BIDI_FN}": 12.5, f"reward_fn_mean/{QUOTED_FN}": 1.0},
                           completion=lambda s, i: BIDI_TEXT if i == 1 else f"{XSS} answer {i}",
                           extra=lambda s, i: {f"reward.{BIDI_FN}": 12.5})
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def seen(page, element: str) -> str:
    """The text of `element` as drawn, left to right, line by line (each character where the browser
    put it): what a reader sees, not the DOM's logical order."""
    return page.evaluate(f"""(() => {{
      const el = {element}, at = [];
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {{
        for (let i = 0; i < node.data.length; i += node.data.codePointAt(i) > 0xffff ? 2 : 1) {{
          const range = document.createRange();
          range.setStart(node, i);
          range.setEnd(node, i + (node.data.codePointAt(i) > 0xffff ? 2 : 1));
          const box = range.getBoundingClientRect();
          if (box.width > 0) at.push([Math.round(box.top / 4), box.left, range.toString()]);
        }}
      }}
      at.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      return at.map((c) => c[2]).join("");
    }})()""")


def test_a_bidi_override_in_data_reorders_nothing_else(site, new_page):
    """An override in a run id, a reward function's name or a completion is shown (as its code point)
    and reorders nothing: not the page's own words after the run id, not the numbers beside the
    function's name, not the completion itself. Its markup is text; nothing runs; links round-trip."""
    site.seed(_seed_bidi)
    page = new_page(viewport={"width": 1366, "height": 1200})
    problems = console_problems(page)
    open_run(page, f"{site.url}/#/run/{quote(BIDI_RUN, safe='')}?vs=bidi-other")
    assert "(this run)" in seen(page, "document.querySelector('#run-legend [data-run]')")
    assert seen(page, "document.querySelector('main h1')") == "Run exp-⟨U+202E⟩lave"
    card = _card("Reward per function")
    chart(page, card)
    page.evaluate(f"{card}.querySelector('.u-over').focus()")
    page.keyboard.press("Home")
    tip = f"{card}.querySelector('.plot-tip')"
    wait(page, f"!{tip}.hidden")
    values = seen(page, tip)
    assert "judge-⟨U+202E⟩ssap 12.5" in values and "judge-⟨U+202E⟩ssap [bidi-other] 12.5" in values
    legend = f"[...{card}.querySelectorAll('.legend span')].find(s => s.textContent.includes('ssap'))"
    assert seen(page, legend).endswith('{reward_fn="judge-⟨U+202E⟩ssap"}')
    cell = "document.querySelector('#samples-table tr[data-sample=\"1\"] td.text')"
    assert seen(page, cell).startswith("⟨U+202E⟩fdp.exe")
    header = f"document.querySelector('#samples-table th[data-col={json.dumps('reward.' + BIDI_FN)}]')"
    assert page.evaluate(f"{header}.textContent") == "reward.judge-⟨U+202E⟩ssap"
    # The stored values are what the page links to and copies: a reload of its address is the same view.
    assert page.evaluate("location.hash").startswith("#/run/" + quote(BIDI_RUN, safe="") + "?")
    open_run(page, page.url)
    assert page.evaluate("document.querySelector('#run-legend [data-run]').dataset.run") == BIDI_RUN
    assert page.evaluate("document.querySelector('#samples-table tr[data-sample=\"0\"] td.text span').textContent") \
        == f"{XSS} answer 0"
    assert page.evaluate("window.__pwned") is None and problems == []


def test_a_legends_prometheus_selector_quotes_the_label_value(site, new_page):
    """Beside each reward function's line, its Prometheus series as a query Prometheus reads: the
    function's name as a PromQL string (quotes and backslashes escaped), not cut at its first quote."""
    site.seed(_seed_bidi)
    page = new_page()
    open_run(page, f"{site.url}/#/run/bidi-other")
    card = _card("Reward per function")
    selectors = page.evaluate(f"[...{card}.querySelectorAll('.legend code.prom')].map(c => c.textContent)")
    assert 'grpo_reward_fn_mean{reward_fn="judge \\"strict\\" \\\\ v2"}' in selectors
    assert 'grpo_reward_fn_mean{reward_fn="format"}' in selectors


TABLE_RUN, KL_SPIKE_ROW = "table-run", 7
KEPT = ("kl spike: grpo.kl 5.2 is above 3 x the median of the last 50 steps (0.012); every sample of the "
        "step kept")
RUNBOOK = "https://github.com/otel-grpo/otel-grpo/blob/main/docs/operations.md#grpoklspike"


def _table_row(step: int, i: int) -> dict:
    """An anomalous step's sample as the trainer writes it: long-digit diagnostics, the reason it was kept."""
    out = {"group": i // 8, "kl_ref_mean": 12.345678901 if i == KL_SPIKE_ROW else 0.011234567 * (1 + i / 1000),
           "kl_ref_max": 0.0123456789, "log_ratio_absmax": -0.000123456789 * (i + 1), "is_weight_max": 1.00001234567,
           "entropy_mean": 1.23456789e-5 * (i + 1), "length_clipped": float(i % 5 == 0)}
    if step == 1:
        out["kept_because"] = KEPT
    return out


def _seed_table(url: str, otlp) -> None:
    long = "the model starts over " * 20  # wider than the completion column at any width
    for steps, samples in (([0], 4), ([1], 120)):  # 120: the SDK keeps 128 events a span
        spans = otlp.spans(TABLE_RUN, steps, samples=samples, extra=_table_row,
                           completion=lambda s, i: long if i % 3 == 0 else f"short {i}")
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    fired = httpx.get(f"{url}/api/runs/{TABLE_RUN}/steps").json()[-1]["time"]
    alerts = [{"status": "firing", "labels": {"alertname": "GRPOKLSpike", "run_id": TABLE_RUN, "severity": "critical"},
               "annotations": {"summary": "KL to the reference jumped to 5.2 nat, 400 x its median over the last 50 steps",
                               "runbook_url": RUNBOOK}, "startsAt": fired, "fingerprint": "t1"},
              {"status": "firing", "labels": {"alertname": "Odd", "run_id": TABLE_RUN, "severity": "warning"},
               "annotations": {"summary": "a runbook that is no web address", "runbook_url": "javascript:alert(1)"},
               "startsAt": fired, "fingerprint": "t2"}]
    assert httpx.post(url + "/api/alerts", json={"version": "4", "alerts": alerts}).status_code == 200


CELL = "[...document.querySelectorAll('#samples-table th')].findIndex(t => t.dataset.col === %s)"


def test_tables_people_can_read(site, tmp_path, new_page):
    """An anomalous step at 1280 px: numbers whole (value as stored on hover and copy), one-line rows
    with long text opening in place, the shared reason said once, a loading state on a step change."""
    site.seed(_seed_table)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{TABLE_RUN}?step=1")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 120")

    # No number is cut: every numeric cell shows all its text, at four significant digits.
    cut = page.evaluate("[...document.querySelectorAll('#samples-table td.num')].filter(td => td.scrollWidth > td.clientWidth)"
                        ".map(td => td.textContent)")
    assert cut == []
    kl = page.evaluate(f"(() => {{ const i = {CELL % json.dumps('kl_ref_mean')}; const td = "
                       "document.querySelector('#samples-table tbody tr').children[i]; return [td.textContent, td.title]; })()")
    assert kl == ["0.01123", "0.011234567"]
    assert page.evaluate(f"document.querySelector('#samples-table tbody tr').children[{CELL % json.dumps('entropy_mean')}].textContent") == "1.235e-5"
    # A copy of cells gives the values as stored, tab-separated.
    copied = page.evaluate(f"""() => {{
        const i = {CELL % json.dumps('kl_ref_mean')}, row = document.querySelector('#samples-table tbody tr');
        const range = document.createRange();
        range.setStart(row.children[i], 0);
        range.setEnd(row.children[i + 1], row.children[i + 1].childNodes.length);
        getSelection().removeAllRanges();
        getSelection().addRange(range);
        const data = new DataTransfer();
        row.children[i].dispatchEvent(new ClipboardEvent('copy', {{clipboardData: data, bubbles: true, cancelable: true}}));
        return data.getData('text/plain'); }}""")
    assert copied.startswith("0.011234567\t")

    # Compact rows: every row one line of one height, whatever its text; 15+ rows in the table's box.
    heights = page.evaluate("[...document.querySelectorAll('#samples-table tbody tr')].map(r => r.getBoundingClientRect().height)")
    assert len(set(heights)) == 1 and heights[0] <= 32
    assert page.evaluate("(() => { const box = document.querySelector('#samples').getBoundingClientRect(); return "
                         "[...document.querySelectorAll('#samples-table tbody tr')].filter(r => r.getBoundingClientRect().bottom"
                         " <= box.bottom).length; })()") >= 15
    # The reason every sample of the step was kept is said once, not on 120 rows.
    assert page.locator("#samples-common").text_content() == "kept_because: " + KEPT
    assert page.locator('#samples-table th[data-col="kept_because"]').count() == 0
    # A cut completion opens in place: its row grows, the others stay.
    row = page.locator("#samples-table tbody tr").first
    more = row.locator("td.text button.more")
    assert more.is_visible() and "the model starts over" in row.locator("td.text").text_content()
    more.click()
    assert row.bounding_box()["height"] > heights[0] * 2
    assert page.locator("#samples-table tbody tr").nth(1).bounding_box()["height"] == heights[0]
    _shot(page, tmp_path, "table-1280.png")

    # Worst first: the KL column's first click puts the spiking sample on top; reward starts lowest.
    page.click('th[data-col="kl_ref_mean"]')
    wait(page, "document.querySelector('th[data-col=\"kl_ref_mean\"]').getAttribute('aria-sort') === 'descending'")
    assert page.evaluate("document.querySelector('#samples-table tbody tr').dataset.sample") == str(KL_SPIKE_ROW)
    # Headers by keyboard: Tab from one header's button to the next, its focus drawn; Enter sorts.
    page.focus('th[data-col="kl_ref_mean"] button')
    page.keyboard.press("Tab")
    nxt = page.evaluate("document.activeElement.closest('th').dataset.col")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    page.keyboard.press("Enter")
    wait(page, f"document.querySelector('th[data-col=\"{nxt}\"]').getAttribute('aria-sort') !== 'none'")
    assert page.evaluate("document.activeElement.closest('th').dataset.col") == nxt

    # A step change under latency: the old rows stay dimmed and busy, the status says what is coming.
    held = []
    page.route("**/samples?*", lambda route: held.append(route) if "step=0" in route.request.url else route.continue_())
    page.select_option("#step-select", "0")
    wait(page, "document.querySelector('#samples').getAttribute('aria-busy') === 'true'")
    assert page.locator("#samples-status").text_content() == "loading step 0…"
    assert float(page.evaluate("getComputedStyle(document.querySelector('#samples-table tbody')).opacity")) < 1
    while not held:
        page.wait_for_timeout(50)
    held[0].continue_()
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 4")
    assert page.evaluate("document.querySelector('#samples').getAttribute('aria-busy')") is None
    assert page.locator("#samples-status").text_content() == ""
    assert page.locator("#samples-common").text_content() == ""  # step 0 was not kept for a reason
    page.unroute("**/samples?*")

    # Alerts: a runbook link where the annotation is a web address, none where it is not.
    assert page.locator("#alerts a.runbook").count() == 1
    assert page.locator("#alerts a.runbook").get_attribute("href") == RUNBOOK
    assert page.locator("#alerts tr", has_text="Odd").locator("a.runbook").count() == 0
    assert page.locator('#alerts a[href^="javascript"]').count() == 0


def test_alerts_and_rows_on_a_phone(site, tmp_path, new_page):
    """390 px: every alert readable without scrolling sideways, its runbook one tap away; rows one line."""
    site.seed(_seed_table)
    page = new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True)
    open_run(page, f"{site.url}/#/run/{TABLE_RUN}?step=1")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate("(() => { const a = document.querySelector('#alerts'); return a.scrollWidth <= a.clientWidth; })()")
    hidden = page.evaluate("[...document.querySelectorAll('#alerts td')].filter(td => td.scrollWidth > td.clientWidth + 1)"
                           ".map(td => td.dataset.label)")
    assert hidden == []
    summary = page.locator("#alerts tr", has_text="GRPOKLSpike").locator("td.alert-summary")
    assert "400 x its median" in summary.inner_text() and summary.bounding_box()["x"] + summary.bounding_box()["width"] <= 390
    link = page.locator("#alerts a.runbook")
    link.scroll_into_view_if_needed()
    box = link.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    heights = page.evaluate("[...document.querySelectorAll('#samples-table tbody tr')].map(r => r.getBoundingClientRect().height)")
    assert len(set(heights)) == 1 and heights[0] <= 32
    page.locator("#alerts").scroll_into_view_if_needed()
    _shot(page, tmp_path, "alerts-390.png")


PIPE_RUN = "pipe|lr=1e-5"
"""A run id with `|`, which the dashboards' `run_id=a|b` reads as two runs (`pipe`, `lr=1e-5`)."""


def _seed_pipe(url: str, otlp) -> None:
    for run in (PIPE_RUN, "pipe"):
        spans = otlp.spans(run, range(2), samples=1)
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    alerts = [{"status": "firing", "labels": {"alertname": f"Of{run}", "run_id": run}, "annotations": {},
               "startsAt": "2026-11-22T05:00:00Z", "fingerprint": f"fp-{run}"} for run in ("pipe", "lr=1e-5")]
    assert httpx.post(url + "/api/alerts", json={"version": "4", "alerts": alerts}).status_code == 200


def test_a_run_whose_id_holds_a_pipe_shows_its_own_alerts_alone(site, new_page):
    """The page of `pipe|lr=1e-5` showed the alerts of runs `pipe` and `lr=1e-5`: it has none; `pipe` has its one."""
    site.seed(_seed_pipe)
    page = new_page()
    open_run(page, f"{site.url}/#/run/{quote(PIPE_RUN, safe='')}")
    assert page.locator("#alerts").text_content() == "no alerts for this run"
    open_run(page, f"{site.url}/#/run/pipe")
    assert page.locator("#alerts-table tbody tr").count() == 1 and "Ofpipe" in page.locator("#alerts").text_content()


def test_a_wrong_read_token_is_told_from_a_missing_one(sidecar_factory, new_page):
    """A sidecar with a read token: the page asks for it in a masked field, and says when the one given is wrong."""
    sidecar = sidecar_factory(env={"OTEL_GRPO_SIDECAR_READ_TOKEN": "right-token"})
    page = new_page()
    page.add_init_script("window.__prompts = 0; window.prompt = () => { window.__prompts += 1; return null; };")
    page.goto(sidecar.url + "/#/")
    wait(page, "document.body.dataset.ready === 'error'")
    assert "needs a token" in page.locator("main").text_content()
    field = page.locator("#token-form input[name=token]")
    assert field.is_visible() and field.get_attribute("type") == "password"
    assert page.evaluate("document.activeElement.id") == "token-input"

    field.fill("wrong-token")
    field.press("Enter")
    wait(page, "document.body.dataset.ready === 'error'")
    message = page.locator("main").text_content()
    assert "refused" in message and "needs a token" not in message and "wrong-token" not in message
    assert page.locator("#token-form").is_visible() and page.locator("#token-status").text_content() == "refused"

    field.fill("right-token")
    page.click("#token-form button[type=submit]")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert not page.locator("#token-form").is_visible()
    assert page.evaluate("window.__prompts") == 0


def test_ten_thousand_runs_come_a_page_at_a_time_searched_by_the_server(sidecar_factory, tmp_path, new_page):
    """The runs page draws one page of 50 rows of 10,000 runs, pages on, and its search asks the server
    (SQLite only: the listing's SQL runs on both backends in test_runs_api; this is the page)."""
    proc = sidecar_with_runs(sidecar_factory, tmp_path, 10_000)
    page = new_page()
    rows = "[...document.querySelectorAll('#runs-table tbody tr a')].map(a => a.textContent)"
    count = "document.querySelector('#runs-count').textContent"
    page.goto(proc.url + "/#/")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert page.evaluate(rows) == [f"exp-{i:05d}" for i in range(9999, 9949, -1)]  # the 50 most recently updated
    assert page.evaluate(count) == "1–50 of 10,000" and page.evaluate("document.querySelector('#runs-prev').disabled")
    assert page.evaluate("[...document.querySelectorAll('#runs-table tbody tr')][0].children[1].textContent") == "idle"

    page.click("#runs-next")
    wait(page, f"{count} === '51–100 of 10,000'")
    assert page.evaluate(rows)[0] == "exp-09949" and page.evaluate("location.hash") == "#/?page=2"

    # The search goes to the server (it filters every run, not the page at hand) and starts at page 1.
    page.fill("#runs-search", "EXP-0012")
    wait(page, f"{count} === '1–10 of 10'")
    assert page.evaluate(rows) == [f"exp-{i:05d}" for i in range(129, 119, -1)]
    assert page.evaluate("document.querySelector('#runs-next').disabled")
    assert page.evaluate("location.hash") == "#/?q=EXP-0012"
    page.select_option("#runs-status", "active")
    wait(page, f"{count} === 'no runs match'")

    # The list's view is a link: opened afresh, the same page of the same search.
    page.goto("about:blank")
    page.goto(proc.url + "/#/?q=exp-01&page=3")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert page.evaluate(count) == "101–150 of 1,000" and page.evaluate(rows)[0] == "exp-01899"
    assert page.evaluate("document.querySelector('#runs-search').value") == "exp-01"

    # A run's "compare runs" offers the first runs and finds any other through the same search.
    open_run(page, proc.url + "/#/run/exp-00005")
    offered = "[...document.querySelectorAll('#compare input[data-run]')].map(i => i.dataset.run)"
    assert len(page.evaluate(offered)) == 20 and "exp-00005" not in page.evaluate(offered)
    # (the box sits in the folded "compare runs" panel: typed into as the page's script would see it)
    page.evaluate("(() => { const s = document.querySelector('#compare-search'); s.value = '0000'; "
                  "s.dispatchEvent(new Event('input')); })()")
    wait(page, f"{offered}.length === 9 && {offered}[0] === 'exp-00009'")


# ---- run ids with commas, overlaid runs' columns, steps of many rows, a runs page past the last ------
COMMA = "lr=1e-6,bs=32"  # a Hydra-style run id: its value holds a comma (and "=")
PLAIN, WIDE = "plain-cmp", "wide-cmp"


def _seed_compare(url: str, otlp) -> None:
    """Three runs of 6 steps; only WIDE logs `only_in_wide` and the learning rate (columns the run
    shown does not have)."""
    for run, extra in ((PLAIN, {}), (COMMA, {}), (WIDE, {"only_in_wide": 1.0, "learning_rate": 1e-6})):
        spans = otlp.spans(run, range(6), samples=2, metrics=lambda s, extra=extra: {"kl": 0.01 * (s + 1), **{
            k: v * s for k, v in extra.items()}})
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def _legend(page) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('#run-legend [data-run]')].map(s => s.dataset.run)")


def test_a_comparison_with_a_comma_in_a_run_id_survives_a_reload(site, new_page):
    """Overlaid runs are a repeated `vs` parameter (a value may hold commas): a reload, or the link,
    shows the same runs."""
    site.seed(_seed_compare)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{PLAIN}")
    page.click("#compare summary")
    for run in (COMMA, WIDE):
        page.check(f'#compare-list input[data-run="{run}"]')
        wait(page, f"[...document.querySelectorAll('#run-legend [data-run]')].some(s => s.dataset.run === {json.dumps(run)})")
    assert _legend(page) == [PLAIN, COMMA, WIDE]
    assert page.evaluate("new URLSearchParams(location.hash.split('?')[1]).getAll('vs')") == [COMMA, WIDE]
    open_run(page, page.url)
    assert _legend(page) == [PLAIN, COMMA, WIDE]
    assert page.evaluate("[...document.querySelectorAll('#compare-list input:checked')].map(i => i.dataset.run)") == [COMMA, WIDE]


def _seed_comma_parts(url: str, otlp) -> None:
    """Runs named after the parts of COMMA: split on its comma, the id would name these instead."""
    for run in COMMA.split(","):
        spans = otlp.spans(run, range(3), samples=0)
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def _overlay(page) -> list[str]:
    """The runs the page overlays, as its URL says (the repeated `vs`)."""
    return page.evaluate("new URLSearchParams(location.hash.split('?')[1]).getAll('vs')")


def test_an_old_comparison_link_with_commas_still_compares_those_runs(site, new_page):
    """Links from before `vs` was repeated join the runs with commas (`vs=b,c`): read as those runs, and
    the URL rewritten to the repeated form. A value that names a run stays that run, though its
    comma-separated parts are runs too (Hydra's `lr=1e-6,bs=32`, beside runs `lr=1e-6` and `bs=32`)."""
    site.seed(_seed_compare)
    site.seed(_seed_comma_parts)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{COMMA}?step=5&vs={PLAIN},{WIDE}")
    assert _legend(page) == [COMMA, PLAIN, WIDE] and _overlay(page) == [PLAIN, WIDE]
    assert "vs=plain-cmp&vs=wide-cmp" in page.evaluate("location.hash") and _hash(page)["step"] == "5"
    assert page.evaluate("history.length") == 2  # rewritten in place (about:blank, the link): no entry added
    checked = "[...document.querySelectorAll('#compare-list input:checked')].map(i => i.dataset.run)"
    assert page.evaluate(checked) == [PLAIN, WIDE]
    # The comma id, written as an old link would (unencoded) and as the page writes it: one run.
    for value in (COMMA, "lr%3D1e-6%2Cbs%3D32"):
        open_run(page, f"{site.url}/#/run/{PLAIN}?vs={value}")
        assert _legend(page) == [PLAIN, COMMA] and _overlay(page) == [COMMA]
    # A part that names no run: the value is read whole, names no run, and is said and left out.
    open_run(page, f"{site.url}/#/run/{PLAIN}?vs={WIDE},no-such-run")
    assert _overlay(page) == [] and page.locator("#run-legend").count() == 0
    assert f"vs={WIDE},no-such-run (no such run): not overlaid" in page.locator("#link-note").text_content()


def test_an_overlaid_runs_columns_are_found_and_charted(site, new_page):
    """The column search covers every run shown: a column only a compared run logged is found, with
    its description, and its chart draws it for the runs that have it."""
    site.seed(_seed_compare)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{PLAIN}?vs={WIDE}")
    own = len(httpx.get(f"{site.url}/api/runs/{PLAIN}/metrics").json())
    union = {c["name"] for run in (PLAIN, WIDE) for c in httpx.get(f"{site.url}/api/runs/{run}/metrics").json()}
    assert len(union) > own
    assert page.evaluate("document.querySelector('#chart-search').placeholder") == f"find a step column ({len(union)})…"
    page.fill("#chart-search", "learning rate optimizer")  # the catalog's description of WIDE's column
    assert page.evaluate("[...document.querySelectorAll('#chart-results button.chart-add')].map(b => b.dataset.col)") == [
        "grpo.learning_rate"]
    page.fill("#chart-search", "only_in_wide")
    page.click('#chart-results button.chart-add[data-col="only_in_wide"]')
    card = "document.querySelector('.plot-card[data-chart=\"only_in_wide\"]')"
    wait(page, f"!!{card}")
    assert _hash(page)["add"] == "only_in_wide"
    drawn = chart(page, card)["series"]
    assert [(s["name"], s["values"]) for s in drawn if s["name"] == "only_in_wide"] == [
        ("only_in_wide", [float(s) for s in range(6)])]
    # Linked: the reload charts it again; without the compared run it has no line (no card).
    open_run(page, page.url)
    wait(page, f"!!{card}")
    open_run(page, f"{site.url}/#/run/{PLAIN}?add=only_in_wide")
    assert page.evaluate(f"{card}") is None


BIG, BIG_ROWS, BIG_EXPORTS = "big-step", 720, 6


def _seed_big(url: str, otlp) -> None:
    """Step 0 of BIG has 720 samples (an anomalous step keeps every row), sent in 6 exports of 120
    (the SDK keeps 128 events a span); sample i has kl_ref_mean i / 1000."""
    per = BIG_ROWS // BIG_EXPORTS
    for k in range(BIG_EXPORTS):
        spans = otlp.spans(BIG, range(1), samples=per, extra=lambda s, i, k=k: {
            "sample_index": k * per + i, "group": (k * per + i) // 16, "kl_ref_mean": 0.001 * (k * per + i)})
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def _rows(page) -> list[int]:
    return page.evaluate("[...document.querySelectorAll('#samples-table tbody tr')].map(t => +t.dataset.sample)")


def _note(page) -> str:
    return page.evaluate("document.getElementById('samples-note').textContent")


def test_a_step_of_more_rows_than_a_page_is_shown_truthfully(site, new_page):
    """A 720-row step: the table says how many of the step's rows it shows, the range filter and the
    sort cover the whole step (the server's), "more" loads the rest, and a link to a sample past the
    first page lands on it."""
    site.seed(_seed_big)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{BIG}?step=0")
    assert _rows(page) == list(range(500)) and _note(page) == "500 of 720 rows"
    page.click("#samples-more")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 720")
    assert _rows(page) == list(range(720)) and _note(page) == ""

    # The range filter is the server's: every row of the step within it, however far down.
    open_run(page, f"{site.url}/#/run/{BIG}?step=0&fcol=kl_ref_mean&fmin=0.6")
    assert _rows(page) == list(range(600, 720)) and _note(page) == "120 of 720 rows pass the filter"
    page.fill("#filter-max", "0.65")
    page.dispatch_event("#filter-max", "change")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 51")
    assert _rows(page) == list(range(600, 651)) and _hash(page)["fmax"] == "0.65"

    # The sort is the server's; a sample's link keeps the order, so the sample is on the page it opens.
    open_run(page, f"{site.url}/#/run/{BIG}?step=0")
    page.click('#samples-table th[data-col="kl_ref_mean"] button')  # first click: largest first
    wait(page, "document.querySelector('#samples-table tbody tr').dataset.sample === '719'")
    href = page.evaluate("document.querySelector('#samples-table tbody tr .sample-link').getAttribute('href')")
    assert "sort=kl_ref_mean" in href and "desc=1" in href and "sample=719" in href
    open_run(page, site.url + "/" + href)
    assert page.evaluate("[...document.querySelectorAll('#samples-table tr.linked')].map(t => t.dataset.sample)") == ["719"]

    # A link to a sample beyond the first page (in the step's order) fetches that sample and marks it.
    open_run(page, f"{site.url}/#/run/{BIG}?step=0&sample=650")
    assert page.evaluate("[...document.querySelectorAll('#samples-table tr.linked')].map(t => t.dataset.sample)") == ["650"]
    assert _rows(page)[0] == 650 and _note(page).startswith("500 of 720 rows")
    assert page.evaluate("document.querySelector('#samples-table tr.linked').getBoundingClientRect().top") >= 0
    page.click("#samples-more")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 720")
    assert sorted(_rows(page)) == list(range(720))  # the linked sample once, not twice


def test_a_download_is_the_rows_the_range_filter_keeps(site, tmp_path, new_page):
    """Filtered to 120 of a step's 720 rows, a download holds those 120 (every one, not only the rows
    loaded) in the table's order: the download asks with the table's own parameters."""
    site.seed(_seed_big)
    page = new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    open_run(page, f"{site.url}/#/run/{BIG}?step=0&fcol=kl_ref_mean&fmin=0.6&sort=kl_ref_mean&desc=1")
    assert _note(page) == "120 of 720 rows pass the filter"
    for kind in ("csv", "jsonl"):
        assert _download(page, tmp_path, kind) == (f"{BIG}-step-0-filtered.{kind}", list(range(719, 599, -1)))
    asked = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)"
                          ".filter(n => n.includes('/samples.'))")
    assert len(asked) == 2 and all("filter_col=kl_ref_mean&filter_min=0.6" in url for url in asked)


SPARSE = "sparse-judge"


def _seed_sparse(url: str, otlp) -> None:
    """One step of 6 samples; only the even ones have a `judge` score (i)."""
    spans = otlp.spans(SPARSE, range(1), samples=6, extra=lambda s, i: {"judge": float(i)} if i % 2 == 0 else {})
    assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def _filter_shown(page) -> list[str]:
    return page.evaluate("['#filter-col', '#filter-min', '#filter-max'].map(s => document.querySelector(s).value)")


def test_the_range_filter_shown_is_the_one_applied(site, new_page):
    """The filter the controls show is the one the rows passed: a column picked without bounds keeps the
    rows that have a number there (as the API's filter_col does); a link's bound that a number box cannot
    show (or that has no column to bound) filters nothing and leaves the address."""
    site.seed(_seed_sparse)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{SPARSE}?step=0&fcol=judge")
    assert _rows(page) == [0, 2, 4] and _note(page) == "3 of 6 rows pass the filter"
    assert _filter_shown(page) == ["judge", "", ""]
    open_run(page, f"{site.url}/#/run/{SPARSE}?step=0&fcol=judge&fmin=abc&fmax=2")
    assert _rows(page) == [0, 2] and _filter_shown(page) == ["judge", "", "2"]
    assert _hash(page) == {"step": "0", "fcol": "judge", "fmax": "2"}
    for link in ("fmin=1", "fcol=judge&fmin=0x1&fmax=1e999"):  # no column; not a number box's numbers
        open_run(page, f"{site.url}/#/run/{SPARSE}?step=0&{link}")
        assert _filter_shown(page)[1:] == ["", ""] and not {"fmin", "fmax"} & _hash(page).keys()
    # Back to no column: the bounds typed go too (they would bound nothing).
    open_run(page, f"{site.url}/#/run/{SPARSE}?step=0&fcol=judge&fmin=1")
    assert _rows(page) == [2, 4]
    page.select_option("#filter-col", "")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 6")
    assert _filter_shown(page) == ["", "", ""] and _hash(page) == {"step": "0"}


def _typed(page, box: str, text: str) -> None:
    """`text` typed into the number box `box` (over what it held) and the box left, as a user does."""
    page.click(box)
    page.keyboard.press("Control+A")
    page.keyboard.type(text)
    page.keyboard.press("Tab")


def _rows_shown(page, n: int) -> None:
    wait(page, f"document.querySelectorAll('#samples-table tbody tr').length === {n}")


def _boxes_marked(page) -> list[list]:
    """Each range bound box: [whether aria-invalid, its title, whether it is drawn in its invalid colour]."""
    return page.evaluate("['#filter-min', '#filter-max'].map(s => document.querySelector(s)).map(b => ["
                         "b.getAttribute('aria-invalid') === 'true', b.title, "
                         "getComputedStyle(b).borderColor === 'rgb(185, 28, 28)'])")


def test_a_number_box_never_shows_a_bound_it_does_not_apply(site, tmp_path, new_page):
    """Text a number box cannot read as a finite number ("1e999", "--3": Chromium keeps it shown while
    the box's value is "") is marked as ignored, and the table, the address and the download are the
    rows without that bound; a readable number clears the mark. Before, such text stayed shown,
    unmarked, over rows it did not bound."""
    site.seed(_seed_sparse)
    page = new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    ignored, fine = [True, "not a number: ignored", True], [False, "", False]
    open_run(page, f"{site.url}/#/run/{SPARSE}?step=0&fcol=judge&fmin=1&fmax=3")
    assert _rows(page) == [2] and _boxes_marked(page) == [fine, fine]
    _typed(page, "#filter-min", "1e999")
    _rows_shown(page, 2)
    assert _rows(page) == [0, 2] and _hash(page) == {"step": "0", "fcol": "judge", "fmax": "3"}
    assert _boxes_marked(page) == [ignored, fine] and _note(page) == "2 of 6 rows pass the filter"
    assert _download(page, tmp_path, "csv") == (f"{SPARSE}-step-0-filtered.csv", [0, 2])
    _typed(page, "#filter-max", "--3")
    _rows_shown(page, 3)
    assert _hash(page) == {"step": "0", "fcol": "judge"} and _boxes_marked(page) == [ignored, ignored]
    _typed(page, "#filter-min", "2")
    _rows_shown(page, 2)
    assert _rows(page) == [2, 4] and _hash(page) == {"step": "0", "fcol": "judge", "fmin": "2"}
    assert _boxes_marked(page) == [fine, ignored]
    # No column: the bounds go, their marks with them.
    page.select_option("#filter-col", "")
    _rows_shown(page, 6)
    assert _filter_shown(page) == ["", "", ""] and _boxes_marked(page) == [fine, fine]
    # Typed into an empty box, such text changes no value (no change event): marked as it is typed.
    page.select_option("#filter-col", "judge")
    _rows_shown(page, 3)
    _typed(page, "#filter-max", "--3")
    assert _boxes_marked(page) == [fine, ignored] and _hash(page) == {"step": "0", "fcol": "judge"}
    assert _rows(page) == [0, 2, 4]


PROMPT_GROUPS = "prompt-groups"


def _seed_prompt_groups(url: str, otlp) -> None:
    """Rows without a `group` attribute (a verl or TRL dump): the page groups them by prompt, samples
    3 i to 3 i + 2 sharing prompt i, at steps 0 and 1."""
    spans = otlp.spans(PROMPT_GROUPS, range(2), samples=9,
                       extra=lambda s, i: {"prompt": f"prompt {i // 3} of step {s}"})
    assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def _group_shown(page) -> list:
    """The group view's prompt and the sample index of each of its cards (in order)."""
    return page.evaluate("[document.querySelector('#group-view .prompt')?.textContent ?? null, "
                         "[...document.querySelectorAll('#group-view .group-card')].map(c => +[...c.querySelectorAll('tr')]"
                         ".find(r => r.children[0].textContent === 'sample').children[1].textContent).sort((a, b) => a - b)]")


def test_a_group_without_a_group_attribute_reopens_on_reload(site, new_page):
    """A group of rows that carry no `group` attribute (grouped by their prompt) is in the address too,
    by one of its samples: a reload, or the group view's link, shows the same group with the same
    sample marked. Before, the address lost it and a reload showed no group."""
    site.seed(_seed_prompt_groups)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{PROMPT_GROUPS}?step=1")
    page.locator('#samples-table tbody tr[data-sample="4"] button.group-open').click()
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 3")
    opened = ["prompt 1 of step 1", [3, 4, 5]]
    picked = "document.querySelector('#group-view .picked .rank').textContent"
    assert _group_shown(page) == opened
    marked = page.evaluate(picked)
    link = page.evaluate("document.querySelector('#group-view a.group-link').getAttribute('href')")
    open_run(page, page.url)
    assert _group_shown(page) == opened and page.evaluate(picked) == marked
    assert _hash(page) == {"step": "1", "groupof": "4"}
    open_run(page, f"{site.url}/#/run/{PROMPT_GROUPS}?step=0")
    open_run(page, site.url + "/" + link)
    assert _group_shown(page) == opened and _hash(page) == {"step": "1", "groupof": "4"}
    page.click("#group-view .group-close")
    assert _hash(page) == {"step": "1"}


def _headers(page) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('#samples-table th[data-col]')].map(t => t.dataset.col)")


def test_the_columns_picked_survive_a_reload(site, new_page):
    """The column picker's choices are in the URL (showcol, hidecol): a reload or a sample's link shows
    the same columns; a column picked back to its default leaves the URL."""
    site.seed(_seed_sparse)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{SPARSE}?step=0")
    assert "advantage" in _headers(page) and "selection" not in _headers(page)  # the defaults
    page.click("#column-picker summary")
    page.click('#column-picker input[data-col="selection"]')
    page.click('#column-picker input[data-col="advantage"]')
    wait(page, "!document.querySelector('#samples-table th[data-col=\"advantage\"]')")
    assert _hash(page) == {"step": "0", "showcol": "selection", "hidecol": "advantage"}
    picked = _headers(page)
    assert "selection" in picked and "advantage" not in picked
    open_run(page, page.url)
    assert _headers(page) == picked
    assert page.evaluate("document.querySelector('#column-picker input[data-col=\"advantage\"]').checked") is False
    link = page.evaluate("document.querySelector('#samples-table tbody tr .sample-link').getAttribute('href')")
    open_run(page, site.url + "/" + link)
    assert _headers(page) == picked
    page.click("#column-picker summary")
    page.click('#column-picker input[data-col="advantage"]')
    wait(page, "!!document.querySelector('#samples-table th[data-col=\"advantage\"]')")
    assert "hidecol" not in _hash(page) and _hash(page)["showcol"] == "selection"


def test_the_runs_status_shown_is_the_one_applied(site, new_page):
    """A link's status that the status select cannot show (a typo, or the API's `firing,active`) does not
    filter the list under "any status", nor fail it: the list is every run and the address says so."""
    site.seed(_seed_compare)
    page = new_page()
    every = len(httpx.get(site.url + "/api/runs", params={"limit": 50}).json())
    rows = "document.querySelectorAll('#runs-table tbody tr').length"
    for status, shown in (("idle", "idle"), ("activ", ""), ("firing,idle", "")):
        page.goto("about:blank")
        page.goto(f"{site.url}/#/?status={status}")
        assert wait(page, "document.body.dataset.ready") == "runs"
        assert page.evaluate("document.querySelector('#runs-status').value") == shown
        assert page.evaluate("location.hash") == ("#/?status=idle" if shown else "#/")
        if not shown:
            assert page.evaluate(rows) == every


def test_a_runs_page_past_the_last_says_so_and_links_the_first(site, new_page):
    site.seed(_seed_compare)
    page = new_page()
    page.goto(site.url + "/#/?page=999")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert page.evaluate("document.querySelector('#runs-count').textContent") == "no runs on this page"
    page.click("#runs-first")
    wait(page, "!!document.querySelector('#runs-table')")
    assert page.evaluate("location.hash") == "#/"


LONG_PROMPT = "long-prompt"


def _seed_long_prompt(url: str, otlp) -> None:
    """One group of 3 completions whose prompt is 10,000 lines (a long context, a whole document)."""
    spans = otlp.spans(LONG_PROMPT, range(1), samples=3,
                       extra=lambda s, i: {"prompt": "\n".join(f"line {n} of the document" for n in range(10_000))})
    assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(),
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def test_a_long_prompt_leaves_the_group_cards_in_view(site, new_page):
    """The group view shows its prompt above the completions. A prompt of thousands of lines scrolls in a box of
    its own, as a completion does, so the cards being compared stay on the first screen. Before, the box grew
    with the text and the cards began tens of thousands of pixels down."""
    site.seed(_seed_long_prompt)
    page = new_page(viewport={"width": 1280, "height": 900})
    open_run(page, f"{site.url}/#/run/{LONG_PROMPT}?step=0")
    page.locator('#samples-table tbody tr[data-sample="0"] button.group-open').click()
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 3")
    prompt = page.locator("#group-view .prompt")
    page.locator("#group-view button.show-all").click()  # the page holds its first characters until then
    wait(page, "document.querySelector('#group-view .prompt').textContent.split('\\n').length === 10000")
    assert prompt.text_content().count("\n") == 9_999  # all of it is there, to scroll through
    box = page.evaluate("(() => { const p = document.querySelector('#group-view .prompt');"
                        " return [p.clientHeight, p.scrollHeight]; })()")
    assert box[0] <= 400 < box[1], box
    card = page.locator("#group-view .group-card").first
    card.scroll_into_view_if_needed()
    top = page.evaluate("document.querySelector('#group-view .group-card').getBoundingClientRect().top"
                        " - document.querySelector('#group-view .prompt').getBoundingClientRect().top")
    assert top < 600, top


LONG_CONTEXT = "long-context"
LONG_COMPLETION = 200_000  # characters: a long-context run raises the telemetry's max_text_chars


def _long_completion(index: int) -> str:
    return (f"completion {index} " + "y" * LONG_COMPLETION)[:LONG_COMPLETION - 4] + " END"


def _seed_long_context(url: str, otlp) -> None:
    """50 samples of one step, each completion 200,000 characters (10 MB of text)."""
    for first in range(0, 50, 10):
        spans = otlp.spans(LONG_CONTEXT, range(1), samples=10, first_index=first,
                           completion=lambda s, i, first=first: _long_completion(first + i))
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(), timeout=60,
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def test_a_long_context_runs_samples_come_cut_and_show_all_on_demand(site, new_page):
    """50 completions of 200,000 characters: the table's page of rows was their whole text (growing
    with every row loaded); now each text comes cut (the API's text_chars), says so with its full length,
    and "show all" reads that one sample whole, in the table and in the group view."""
    site.seed(_seed_long_context)
    page = new_page(viewport={"width": 1280, "height": 900})
    pages: list[int] = []
    page.on("requestfinished", lambda r: "/samples?" in r.url and pages.append(r.sizes()["responseBodySize"]))
    open_run(page, f"{site.url}/#/run/{LONG_CONTEXT}?step=0")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 50")
    assert pages and max(pages) < 200_000, pages
    cell = page.locator('#samples-table tbody tr[data-sample="3"] td.text').last
    button = cell.locator("button.more")
    assert button.text_content() == "show all"
    assert button.get_attribute("title") == "200,000 characters; the first 2,000 are loaded"
    assert page.locator('#samples-table th[data-col="texts_cut"]').count() == 0
    button.click()
    wait(page, "document.querySelector('#samples-table tbody tr[data-sample=\"3\"] td.text.open') !== null")
    assert cell.locator("span.clip").text_content() == _long_completion(3)
    assert button.text_content() == "less"

    page.locator('#samples-table tbody tr[data-sample="5"] button.group-open').click()
    wait(page, "document.querySelectorAll('#group-view .group-card').length === 5")  # one prompt, 5 samples
    card = page.locator("#group-view .group-card.picked")
    assert len(card.locator("pre.completion").text_content()) < 3000
    card.locator("button.show-all").click()
    wait(page, "document.querySelector('#group-view .picked pre.completion').textContent.endsWith(' END')")
    assert card.locator("pre.completion").text_content() == _long_completion(5)
    assert card.locator("button.show-all").count() == 0


TWO_ATTEMPTS = "two-attempts"
CRASHED_NS, RELAUNCH_NS = 1_733_580_000_123_456_789, 1_733_580_060_987_654_321  # Telemetry starts: past 2**53


def _two_attempts_completion(tag: str, index: int) -> str:
    return (f"{tag} {index} " + "z" * 3000) + f" END {tag}"


def _seed_two_attempts(url: str, otlp) -> None:
    """Step 3 as a relaunch leaves it: the crashed attempt's training rows and the relaunch's evaluation rows
    (`grpo.writer_attempt`), both numbered from 0, each text longer than the page loads; each attempt's two rows
    answer one prompt of its own (a group each)."""
    for tag, said in (("crashed", {"attempt": CRASHED_NS}), ("eval", {"writer_attempt": RELAUNCH_NS})):
        spans = otlp.spans(TWO_ATTEMPTS, [3], samples=2, completion=lambda s, i, tag=tag: _two_attempts_completion(tag, i),
                           extra=lambda s, i, tag=tag: {"prompt": f"{tag} prompt"}, **said)
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(), timeout=60,
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def test_show_all_reads_the_row_of_its_own_attempt_where_two_share_an_index(site, new_page):
    """Two rows of step 3 are sample 0, one each attempt's: "show all" on the evaluation's reads the evaluation's
    text whole, not the crashed attempt's row of that index (attempts are ns, beyond a double's exact integers)."""
    site.seed(_seed_two_attempts)
    page = new_page()
    open_run(page, f"{site.url}/#/run/{TWO_ATTEMPTS}?step=3")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 4")
    assert page.locator('#samples-table tbody tr[data-sample="0"]').count() == 2
    for tag in ("eval", "crashed"):
        cell = page.locator('#samples-table tbody tr[data-sample="0"]', has_text=f"{tag} 0 ").locator("td.text").last
        cell.locator("button.more").click()
        wait(page, f"[...document.querySelectorAll('#samples-table td.text.open')].some("
                   f"t => t.textContent.includes(' END {tag}'))")
        assert cell.locator("span.clip").text_content() == _two_attempts_completion(tag, 0)


# Whose sample 0 each row the page marks as linked is: its completion's first words ("eval 0 ", "crashed 0 ").
LINKED_ROWS = ("[...document.querySelectorAll('#samples-table tr.linked')]"
               ".map(tr => (tr.textContent.match(/(eval|crashed) \\d+ /) || [''])[0])")


def _linked_rows(page) -> list[str]:
    """The linked rows (LINKED_ROWS) of a page opened by a link, once it has shown them."""
    wait(page, "document.body.dataset.ready === 'run' && !document.getElementById('samples').ariaBusy"
               " && !!document.querySelector('#samples-table tr.linked')")
    return page.evaluate(LINKED_ROWS)


def test_a_link_to_a_sample_or_its_group_names_the_row_of_its_attempt(site, new_page):
    """Two rows of step 3 are sample 0, one each attempt's: the page's URL once a row is linked (its "#") or its
    group opened, opened in a fresh page, shows that row and that group, not the other attempt's of that index
    (attempts are ns, beyond a double's exact integers: the link carries the exact one)."""
    site.seed(_seed_two_attempts)
    page = new_page()
    open_run(page, f"{site.url}/#/run/{TWO_ATTEMPTS}?step=3")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 4")
    for tag, attempt in (("eval", RELAUNCH_NS), ("crashed", CRASHED_NS)):
        row = page.locator('#samples-table tbody tr[data-sample="0"]', has_text=f"{tag} 0 ")
        row.locator("a.sample-link").click()
        wait(page, "location.hash.includes('sample=')")
        shared = new_page()
        open_run(shared, page.url)
        assert _linked_rows(shared) == [f"{tag} 0 "]
        assert _linked_rows(page) == [f"{tag} 0 "]
        assert f"sample=0@{attempt}&" in page.url + "&"  # exact: the API's digits, not a double's

        row.locator("button.group-open").click()
        wait(page, f"document.querySelector('#group-view .prompt')?.textContent === '{tag} prompt'")
        shared = new_page()
        open_run(shared, page.url)
        wait(shared, "document.querySelectorAll('#group-view .group-card').length === 2")
        assert shared.locator("#group-view .prompt").text_content() == f"{tag} prompt"
        picked = shared.locator("#group-view .group-card.picked pre.completion")
        assert picked.count() == 1 and picked.text_content().startswith(f"{tag} 0 ")
        assert f"groupof=0@{attempt}&" in page.url + "&"
    # A link from before attempts names the index alone: one row of it is linked, the first.
    open_run(page, f"{site.url}/#/run/{TWO_ATTEMPTS}?step=3&sample=0")
    assert len(_linked_rows(page)) == 1


ONE_GROUP_NUMBER = "two-attempts-one-group-number"


def _seed_two_attempts_one_group_number(url: str, otlp) -> None:
    """_seed_two_attempts' rows of step 3 (short), each attempt's two carrying the same `group` attribute, 0."""
    for tag, said in (("crashed", {"attempt": CRASHED_NS}), ("eval", {"writer_attempt": RELAUNCH_NS})):
        spans = otlp.spans(ONE_GROUP_NUMBER, [3], samples=2, completion=lambda s, i, tag=tag: f"{tag} {i} done",
                           extra=lambda s, i, tag=tag: {"prompt": f"{tag} prompt", "group": 0}, **said)
        assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(), timeout=60,
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def test_a_group_number_two_attempts_share_opens_one_attempts_group(site, new_page):
    """Each attempt's rows of step 3 are group 0: a row's group shows its own attempt's two completions, not the
    other attempt's beside them, and the page's URL reopens that group in a fresh page."""
    site.seed(_seed_two_attempts_one_group_number)
    page = new_page()
    open_run(page, f"{site.url}/#/run/{ONE_GROUP_NUMBER}?step=3")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 4")
    shown = "[...document.querySelectorAll('#group-view pre.completion')].map(p => p.textContent).sort().join()"
    for tag in ("eval", "crashed"):
        page.locator('#samples-table tbody tr[data-sample="1"]', has_text=f"{tag} 1 ").locator("button.group-open").click()
        wait(page, f"document.querySelector('#group-view .prompt')?.textContent === '{tag} prompt'")
        assert page.evaluate(shown) == f"{tag} 0 done,{tag} 1 done"
        shared = new_page()
        open_run(shared, page.url)
        wait(shared, f"document.querySelector('#group-view .prompt')?.textContent === '{tag} prompt'")
        assert shared.evaluate(shown) == f"{tag} 0 done,{tag} 1 done"


RANKS = "two-ranks-groups"


def _seed_ranks_numbering_groups_from_0(url: str, otlp) -> None:
    """One step's rows of two ranks as global selection exports them (rank 0's rows first, each with its
    `source_rank`), each rank numbering its groups of two from 0 as the demo trainer does."""
    def extra(step, i):
        rank, local = divmod(i, 4)
        return {"prompt": f"rank {rank} prompt {local // 2}", "group": local // 2, "source_rank": rank}

    spans = otlp.spans(RANKS, [0], samples=8, extra=extra, attempt=CRASHED_NS,
                       completion=lambda s, i: f"rank {i // 4} answer {i % 4}")
    assert httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(), timeout=60,
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200


def test_a_group_is_of_one_rank_where_each_rank_numbers_its_own(site, new_page):
    """Rank 1's group 0 shows rank 1's two completions of its prompt, not rank 0's group 0 beside them."""
    site.seed(_seed_ranks_numbering_groups_from_0)
    page = new_page()
    open_run(page, f"{site.url}/#/run/{RANKS}?step=0")
    page.locator('#samples-table tbody tr[data-sample="4"] button.group-open').click()
    wait(page, "document.querySelector('#group-view .prompt')?.textContent === 'rank 1 prompt 0'")
    shown = "[...document.querySelectorAll('#group-view pre.completion')].map(p => p.textContent).sort().join()"
    assert page.evaluate(shown) == "rank 1 answer 0,rank 1 answer 1"


def test_back_and_forward_keep_the_linked_row_of_its_attempt(site, new_page):
    """Linking one attempt's sample 0, then the other's, is two steps of the history: back and forward mark the
    row each step linked, not the first row of that index."""
    site.seed(_seed_two_attempts)
    page = new_page()
    open_run(page, f"{site.url}/#/run/{TWO_ATTEMPTS}?step=3")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 4")
    hashes = []
    for tag in ("crashed", "eval"):
        before = page.evaluate("location.hash")
        page.locator('#samples-table tbody tr[data-sample="0"]', has_text=f"{tag} 0 ").locator("a.sample-link").click()
        wait(page, f"location.hash !== {json.dumps(before)}")
        hashes.append(page.evaluate("location.hash"))
    assert hashes[0] != hashes[1]
    for move, tag, at in ((page.go_back, "crashed", 0), (page.go_forward, "eval", 1), (page.go_back, "crashed", 0)):
        move()
        wait(page, f"location.hash === {json.dumps(hashes[at])} && !document.getElementById('samples').ariaBusy")
        wait(page, f"JSON.stringify({LINKED_ROWS}) === {json.dumps(json.dumps([f'{tag} 0 ']))}")
