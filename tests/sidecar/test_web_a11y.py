"""The run explorer for a reviewer with a screen reader or a keyboard alone: axe-core finds no serious or
critical violation on any view at a desktop's and a phone's width, and the main task (open a run, chart a
column found by search, jump to an alert's step, sort by per-sample KL, open a long completion, copy a
number) is done with Tab, Enter and the arrows, the focus always visible."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest

from tests._support.npm_cache import npm_packages
from tests.sidecar.conftest import SidecarProcess, grpo_spans, request_pb
from tests.sidecar.test_web import CHROMIUM, _diagnostics, _explorer_metrics, browser, new_page, wait  # noqa: F401

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make system-deps)")]
AXE = "4.10.3"  # axe-core, pinned: its rules decide what fails here
RUN, TOKEN = "a11y-run", "read-token"
LONG = "a long completion " + "y" * 400 + " THE END"


@pytest.fixture(scope="module")
def axe_source() -> str:
    """axe.min.js, installed by npm once per machine into a cache outside the repository."""
    return (npm_packages(f"axe-core-{AXE}", f"axe-core@{AXE}") / "axe-core/axe.min.js").read_text()


def _seed(url: str) -> None:
    """Steps 0-9 of RUN, 6 samples each (sample 2 of each a long completion), an alert at step 6."""
    for steps in (range(7), range(7, 10)):
        spans = grpo_spans(RUN, steps, samples=6, metrics=_explorer_metrics, extra=_diagnostics,
                           completion=lambda step, i: LONG if i == 2 else f"answer {i} of step {step}")
        assert httpx.post(url + "/v1/traces", content=request_pb(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        time.sleep(0.05)  # step 7 ends well after step 6 (step times have millisecond precision): the alert is on 6
    fired = next(s["time"] for s in httpx.get(f"{url}/api/runs/{RUN}/steps", headers=_auth()).json() if s["step"] == 6)
    alert = {"status": "firing", "labels": {"alertname": "GRPOKLSpike", "run_id": RUN, "severity": "warning"},
             "annotations": {"summary": "KL spiked", "runbook_url": "https://example.org/runbook"}, "startsAt": fired,
             "fingerprint": "a11y"}
    assert httpx.post(url + "/api/alerts", json={"version": "4", "alerts": [alert]}).status_code == 200


def _auth() -> dict:
    return {"Authorization": "Bearer " + TOKEN}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[SimpleNamespace]:
    """One sidecar for the module, with a read token (so the token prompt is a view too)."""
    proc = SidecarProcess(tmp_path_factory.mktemp("a11y") / "sidecar.db",
                          {"OTEL_GRPO_SIDECAR_READ_TOKEN": TOKEN}).start()
    try:
        _seed(proc.url)
        yield SimpleNamespace(url=proc.url)
    finally:
        proc.stop()


def _reader(new_page, **options):
    """A page whose browser holds the read token (as one that typed it once)."""
    page = new_page(**options)
    page.add_init_script(f"try {{ localStorage.setItem('otel-grpo-read-token', '{TOKEN}'); }} catch (e) {{}}")
    return page


def _axe(page, axe_source: str) -> list[str]:
    """axe's serious and critical violations on the page as it is: 'rule: element' lines."""
    page.evaluate(axe_source)
    return page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']})).violations
        .filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(' ')}`))""")


def _open(page, url: str, ready: str) -> None:
    page.goto("about:blank")
    page.goto(url)
    wait(page, f"document.body.dataset.ready === '{ready}'")


# The views, each as a URL and what is done there before axe looks: every state a reviewer meets.
VIEWS = {
    "runs list": ("#/", "runs", None),
    "run: charts, alerts, samples": (f"#/run/{RUN}", "run", None),
    "step's samples sorted and filtered": (f"#/run/{RUN}?step=6&sort=kl_ref_mean&desc=1&fcol=reward&fmin=0", "run", None),
    "sample alone, its completion open": (f"#/run/{RUN}?step=6&sample=2", "run", "tr.linked button.more"),
    "group of a sample": (f"#/run/{RUN}?step=6&group=0", "run", None),
    "pickers open, chart search listing": (f"#/run/{RUN}", "run", "pickers"),
    "link with what is not there": (f"#/run/{RUN}?step=99&sort=nope&sample=-1", "run", None),
    "error: unknown run": ("#/run/no-such-run", "error", None),
}


@pytest.mark.parametrize("width", [1280, 390])
def test_axe_finds_no_serious_violation_on_any_view(site, axe_source, new_page, width):
    found = {}
    page = _reader(new_page, viewport={"width": width, "height": 900})
    for name, (path, ready, action) in VIEWS.items():
        _open(page, site.url + "/" + path, ready)
        if action == "pickers":
            page.evaluate("document.getElementById('column-picker').open = true; document.getElementById('compare').open = true")
            page.fill("#chart-search", "kl")
        elif action:
            page.click(action)
        page.evaluate("document.querySelectorAll('.plot-card').forEach((c) => c.scrollIntoView())")  # every chart drawn
        found[name] = _axe(page, axe_source)
    # The token prompt: a browser without the token.
    page = new_page(viewport={"width": width, "height": 900})
    _open(page, site.url + "/#/", "error")
    assert page.locator("#token-input").is_visible()
    found["token prompt"] = _axe(page, axe_source)
    assert {name: v for name, v in found.items() if v} == {}


def test_the_loading_state_is_announced(site, axe_source, new_page):
    """While a view loads, the page says so to a screen reader (a live region) and marks the view busy;
    once ready it says which view it is."""
    page = _reader(new_page)
    # The run's sample steps are held back until the test lets them go.
    page.add_init_script("""{ const fetch0 = window.fetch; window.__held = [];
        window.fetch = (url, ...rest) => String(url).includes('/sample-steps')
          ? new Promise((go) => window.__held.push(() => go(fetch0(url, ...rest)))) : fetch0(url, ...rest); }""")
    page.goto(f"{site.url}/#/run/{RUN}")
    wait(page, "window.__held.length === 1")
    assert page.evaluate("[document.querySelector('main').getAttribute('aria-busy'), "
                         "document.getElementById('announce').textContent]") == ["true", "loading…"]
    assert page.get_by_role("status").filter(has_text="loading…").count() == 1
    assert _axe(page, axe_source) == []
    page.evaluate("window.__held.forEach((go) => go())")
    wait(page, "document.body.dataset.ready === 'run'")
    assert page.evaluate("[document.querySelector('main').hasAttribute('aria-busy'), "
                         "document.getElementById('announce').textContent]") == [False, f"Run {RUN}"]


def _focused(page) -> dict:
    """The focused element: what it is, and whether its focus is drawn (an outline or a ring)."""
    return page.evaluate("""(() => { const e = document.activeElement, s = getComputedStyle(e);
        return { tag: e.tagName, id: e.id, cls: e.className, col: e.dataset.col || e.closest('[data-col]')?.dataset.col || null,
                 text: e.textContent.trim().slice(0, 80), label: e.getAttribute('aria-label'),
                 ring: e.matches(':focus-visible') && ((s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0)
                                                       || s.boxShadow !== 'none') }; })()""")


def _tab_to(page, matches: str, limit: int = 200, key: str = "Tab") -> dict:
    """Presses Tab (or `key`: Shift+Tab) until the focused element matches the CSS selector `matches`;
    every stop on the way must show its focus."""
    for _ in range(limit):
        page.keyboard.press(key)
        now = _focused(page)
        assert now["ring"], f"no visible focus on {now}"
        if page.evaluate(f"document.activeElement.matches({matches!r})"):
            return now
    raise AssertionError(f"{matches} not reached in {limit} Tab presses")


def test_the_main_task_by_keyboard_alone(site, new_page):
    page = _reader(new_page, viewport={"width": 1280, "height": 900})
    page.add_init_script("document.addEventListener('copy', (e) => { window.__copied = e.clipboardData.getData('text/plain'); });")
    _open(page, site.url + "/#/", "runs")

    # Open the run from the list: the focus lands on the new view's title.
    _tab_to(page, f"#runs-table a[href='#/run/{RUN}']")
    page.keyboard.press("Enter")
    wait(page, "document.body.dataset.ready === 'run'")
    assert _focused(page)["id"] == "view-title"

    # Find a chart by search and add it.
    _tab_to(page, "#chart-search")
    page.keyboard.type("learning rate")
    wait(page, "!!document.querySelector('#chart-results button.chart-add')")
    page.keyboard.press("ArrowDown")
    assert _focused(page)["col"] == "grpo.learning_rate"
    page.keyboard.press("Enter")
    wait(page, "!!document.querySelector('.plot-card[data-chart=\"grpo.learning_rate\"]')")

    # Jump to the step of an alert mark: its label shows the alert's row and takes the focus to its
    # step, which opens that step's samples; the focus goes with them.
    assert _focused(page)["id"] == "chart-search"  # back in the box, the list gone with its button
    mark = _tab_to(page, "button.mark-label")
    assert mark["text"] == "GRPOKLSpike"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.matches('#alerts-table a.alert-step')")
    page.keyboard.press("Enter")
    wait(page, "document.activeElement.id === 'samples-heading' && !document.getElementById('samples').ariaBusy")
    assert page.evaluate("document.getElementById('step-select').value") == "6"

    # Sort by the per-sample KL, worst first.
    _tab_to(page, "#samples-table th[data-col='kl_ref_mean'] button")
    page.keyboard.press("Enter")
    wait(page, "document.querySelector('#samples-table th[data-col=kl_ref_mean]').getAttribute('aria-sort') === 'descending'"
               " && !document.getElementById('samples').ariaBusy")
    kls = page.evaluate("[...document.querySelectorAll('#samples-table tbody tr')].map((tr) => "
                        "+tr.cells[[...document.querySelectorAll('#samples-table thead th')].findIndex("
                        "(th) => th.dataset.col === 'kl_ref_mean')].textContent)")
    assert kls == sorted(kls, reverse=True) and len(kls) == 6
    assert _focused(page)["col"] == "kl_ref_mean"  # the focus stays on the header across the redraw

    # Open the long completion.
    _tab_to(page, "#samples-table button.more:not([hidden])")
    page.keyboard.press("Enter")
    wait(page, "document.activeElement.getAttribute('aria-expanded') === 'true'")
    assert page.evaluate("document.activeElement.closest('td').textContent").count("THE END") == 1

    # Copy a number: the table's cells are one Tab stop (before the rows' buttons: back from here),
    # the arrows move between them, Ctrl+C copies the value as stored.
    _tab_to(page, "#samples-table td[tabindex='0']", key="Shift+Tab")
    col = lambda: page.evaluate("document.querySelectorAll('#samples-table thead th')"  # noqa: E731
                                "[document.activeElement.cellIndex].dataset.col")
    while col() != "kl_ref_mean":
        page.keyboard.press("ArrowRight")
        assert _focused(page)["ring"]
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Control+C")
    shown = page.evaluate("document.activeElement.textContent")
    copied = page.evaluate("window.__copied")
    assert copied == page.evaluate("document.activeElement.title") and float(copied) == pytest.approx(float(shown), rel=1e-3)


def test_a_live_refresh_that_adds_steps_keeps_the_focus_on_the_step_picker(site, new_page):
    """A keyboard user on the step picker when the trainer's next steps come: the refresh adds them to the
    picker under the focus, and the arrows go on picking steps."""
    run = "a11y-live"
    post = lambda steps: httpx.post(site.url + "/v1/traces", headers={"Content-Type": "application/x-protobuf"},  # noqa: E731
                                    content=request_pb(grpo_spans(run, steps, samples=2)).SerializeToString())
    assert post(range(3)).status_code == 200
    page = _reader(new_page)
    page.goto(f"{site.url}/#/run/{run}")
    wait(page, "document.body.dataset.ready === 'run' && !document.getElementById('samples').ariaBusy")
    page.focus("#step-select")
    assert post(range(3, 5)).status_code == 200
    page.evaluate("window.otelGrpoRefresh()")
    wait(page, "document.querySelectorAll('#step-select option').length === 5")
    assert page.evaluate("document.activeElement.id") == "step-select"
    page.keyboard.press("ArrowDown")  # from step 2, the latest when the page opened
    wait(page, "location.hash.includes('step=1') && !document.getElementById('samples').ariaBusy")
    assert page.evaluate("document.activeElement.id") == "step-select"
