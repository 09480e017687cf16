"""The run explorer telling the truth about what it could not show: when the sidecar cannot answer (a
database away: 503 with a message and Retry-After, or no answer at all) a read that failed is said as
such, never drawn as a run without values, and the page comes back by itself once the reads succeed
(the failures are the browser's: Playwright routes answer as the sidecar does, and each phase starts
and ends when the test says so); a number or a run id never breaks the layout; a run whose step
history no default chart draws (an evaluation's alone) is charted, not called empty."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests.sidecar.conftest import SidecarProcess, grpo_spans, request_pb
from tests.sidecar.test_web import (CHROMIUM, MAIN, OTHER, _card, _hash, _legend, _overlay,  # noqa: F401
                                    _seed_explorer, browser, chart, new_page, open_run, series, wait)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make system-deps)")]
LONG_ID = "x" * 128
SICK = "store unavailable: QueryCanceled: canceling statement due to statement timeout"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[SimpleNamespace]:
    """One sidecar for the module: MAIN has steps 0-19 (test_web's explorer data); "tiny-kl" a KL of 1.9e-8;
    LONG_ID's id is 128 characters; "eval-only" only evaluations' values, "own-columns" only columns no
    panel names (both from Telemetry.log_metrics, as a trainer logs them)."""
    proc = SidecarProcess(tmp_path_factory.mktemp("errors") / "sidecar.db").start()
    try:
        _seed_explorer(proc.url, SimpleNamespace(spans=grpo_spans, request=request_pb))
        for run, kl in (("tiny-kl", 1.9e-8), (LONG_ID, 0.25)):  # a KL of a hyphen's width, a run id of 128 characters
            spans = grpo_spans(run, range(3), samples=2, metrics=lambda step, kl=kl: {"kl": kl, "reward": 0.5})
            assert httpx.post(proc.url + "/v1/traces", content=request_pb(spans).SerializeToString(),
                              headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        _log(proc.url, tmp_path_factory.mktemp("eval"), "eval-only",
             lambda s: ({"reward": 0.1 * s, "kl": 0.01 * s}, True))
        _log(proc.url, tmp_path_factory.mktemp("own"), "own-columns",
             lambda s: ({"learning_rate": 1e-6 * (1 + s), "custom/score": s % 3 + 0.5}, False))
        yield SimpleNamespace(url=proc.url)
    finally:
        proc.stop()


def _log(url: str, spill, run: str, record) -> None:
    """Steps 0, 10, ... 40 of `run` through Telemetry.log_metrics(step, *record(step)) into the sidecar."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        tel = Telemetry(TelemetrySettings(run_id=run, output_dir=spill, metrics_exporters=["none"],
                                          traces_exporters=["otlp"]))
        try:
            for step in range(0, 50, 10):
                values, evaluation = record(step)
                tel.log_metrics(step, values, evaluation=evaluation)
            assert tel.flush(10)  # exported: the sidecar answered once it committed them
        finally:
            tel.finish()


def _unavailable(route) -> None:
    """What the sidecar answers while its database does not: 503, its message, Retry-After."""
    route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="application/json",
                  body=json.dumps({"detail": SICK}))


def _chart_reads(url: str) -> bool:
    return "/steps?" in url  # the charts' rows (a run's /sample-steps has no "?")


def test_a_chart_whose_rows_could_not_be_read_says_so_and_recovers(site, new_page):
    page = new_page()
    kl = _card("KL to the reference")
    note = f"{kl}.querySelector('.chart-error')"
    page.route(_chart_reads, _unavailable)
    open_run(page, f"{site.url}/#/run/{MAIN}")
    wait(page, f"!!{note}")
    text = page.evaluate(f"{kl}.textContent")
    assert f"could not load these steps: HTTP 503: {SICK}" in text and "no finite value" not in text
    assert page.evaluate(f"{kl}.querySelectorAll('canvas').length") == 0

    page.unroute(_chart_reads, _unavailable)
    page.evaluate("window.otelGrpoRefresh()")  # what the live view's timer calls
    assert len(chart(page, kl)["series"]) >= 1
    assert page.evaluate(f"{note}") is None

    # A refresh whose rows fail keeps the chart drawn from the rows before, the note above it.
    page.route(_chart_reads, _unavailable)
    page.evaluate("window.otelGrpoRefresh()")
    wait(page, f"!!{note}")
    assert page.evaluate(f"{kl}.querySelectorAll('canvas').length") >= 1
    page.unroute(_chart_reads, _unavailable)
    page.evaluate("window.otelGrpoRefresh()")
    # this refresh's own rows came and the chart is drawn from them, the note gone (drawn after the rows arrive)
    wait(page, f"runData.rows.size > 0 && {note} === null && {kl}.dataset.drawn === '1'")


def _api(url: str) -> bool:
    return "/api/" in url


def test_a_live_refresh_that_fails_says_so_and_clears_once_one_succeeds(site, new_page):
    page = new_page()
    kl = _card("KL to the reference")
    open_run(page, f"{site.url}/#/run/{MAIN}")
    chart(page, kl)
    note = "document.getElementById('refresh-note')"
    assert page.evaluate(f"{note}.hidden") is True

    page.route(_api, _unavailable)
    page.evaluate("window.otelGrpoRefresh()")  # what the live view's timer calls
    assert page.evaluate(f"{note}.hidden") is False and page.locator("#refresh-note").is_visible()
    text = page.evaluate(f"{note}.textContent")
    assert text.startswith(f"could not refresh: HTTP 503: {SICK}; retrying") and "as read at" in text
    assert page.evaluate(f"{kl}.querySelectorAll('canvas').length") >= 1  # what was shown stays

    page.unroute(_api, _unavailable)
    page.evaluate("window.otelGrpoRefresh()")
    assert page.evaluate(f"{note}.hidden") is True and page.evaluate(f"{note}.textContent") == ""
    assert not page.locator("#refresh-note").is_visible()


def _no_answer(route) -> None:
    route.abort("connectionrefused")


def test_an_error_page_tries_again_by_itself_and_shows_the_page_once_it_can(site, new_page):
    """Opened while the database is away: the error page says what the server said and when it tries
    again (its Retry-After, then doubling); once a read succeeds, the page asked for is shown."""
    page = new_page()
    page.route(_api, _unavailable)
    page.goto(f"{site.url}/#/run/{MAIN}?step=2")
    wait(page, "document.body.dataset.ready === 'error'")
    assert SICK in page.text_content("#error-message")
    assert page.text_content("#retry-when") == "trying again in 1 s"  # the server's Retry-After
    wait(page, "document.getElementById('retry-when')?.textContent === 'trying again in 2 s'")  # it tried: 1 s more
    page.unroute(_api, _unavailable)
    wait(page, "document.body.dataset.ready === 'run'")
    assert page.text_content("#view-title") == f"Run {MAIN}" and page.input_value("#step-select") == "2"
    assert page.locator("#error-message").count() == 0


def test_no_answer_at_all_is_tried_again_too(site, new_page):
    page = new_page()
    page.route(_api, _no_answer)
    page.goto(f"{site.url}/#/")
    wait(page, "document.body.dataset.ready === 'error'")
    assert page.text_content("#error-message").startswith("the sidecar did not answer")
    assert page.locator("#retry-when").count() == 1
    page.unroute(_api, _no_answer)
    page.click("#retry-now")  # or wait: the same path, sooner
    wait(page, "document.body.dataset.ready === 'runs'")
    assert page.locator("#runs-table").count() == 1


def test_a_compared_run_unreadable_in_an_outage_is_kept_and_drawn_once_it_can_be(site, new_page):
    """A link comparing OTHER, opened while OTHER's reads answer 503: the page waits for it (the error page,
    tried again) and then draws it; it is not taken for a run that is not there and dropped from the link.
    Ticking it in the compare list during an outage goes the same way."""
    other = lambda url: f"/api/runs/{OTHER}" in url  # noqa: E731
    page = new_page()
    page.route(other, _unavailable)
    page.goto(f"{site.url}/#/run/{MAIN}?step=2&vs={OTHER}")
    wait(page, "document.body.dataset.ready === 'error'")
    assert SICK in page.text_content("#error-message")
    page.unroute(other, _unavailable)
    wait(page, "document.body.dataset.ready === 'run'")
    assert _legend(page) == [MAIN, OTHER] and _overlay(page) == [OTHER]
    assert "no such run" not in (page.text_content("#link-note") or "")

    page.goto(f"{site.url}/#/run/{MAIN}?step=2")
    wait(page, "document.body.dataset.ready === 'run' && document.querySelector('#compare input[data-run]')")
    page.route(other, _unavailable)
    page.click("#compare summary")
    page.click(f'#compare input[data-run="{OTHER}"]')
    wait(page, "document.body.dataset.ready === 'error'")
    page.unroute(other, _unavailable)
    wait(page, "document.body.dataset.ready === 'run'")
    assert _legend(page) == [MAIN, OTHER] and _overlay(page) == [OTHER]


def test_an_unknown_run_stays_an_error_and_is_not_tried_again(site, new_page):
    page = new_page()
    page.goto(f"{site.url}/#/run/no-such-run")
    wait(page, "document.body.dataset.ready === 'error'")
    assert "HTTP 404" in page.text_content("#error-message")
    assert page.locator("#retry-when").count() == 0 and page.locator("#retry-now").count() == 0
    assert page.evaluate("retryTimer") is None


# The distinct line tops of an element's text: 1 for text on one line.
LINES = "(e) => { const r = document.createRange(); r.selectNodeContents(e); " \
        "return new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size; }"


@pytest.mark.parametrize("width", [1280, 390])
def test_numbers_stay_on_one_line_and_a_long_run_id_widens_nothing(site, new_page, width):
    """A KL of 1.9e-8 broke after "1.9e-" (a hyphen is a break opportunity); a run id of 128 characters
    made the page 1788 px wide at 1280: a number is one line, an id breaks within the view."""
    page = new_page(viewport={"width": width, "height": 900})
    page.goto(site.url + "/#/")
    wait(page, "document.body.dataset.ready === 'runs'")
    kl = page.locator("#runs-table td.latest-kl", has_text="1.9e-8")
    assert kl.count() == 1 and kl.evaluate(LINES) == 1
    assert page.eval_on_selector_all("#runs-table td.num", f"(tds) => tds.filter((td) => ({LINES})(td) > 1).length") == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    link = page.locator(f"#runs-table a[title='{LONG_ID}']")
    assert link.count() == 1 and link.text_content() == LONG_ID  # broken, not cut: the whole id, on hover too

    page.goto(f"{site.url}/#/run/{LONG_ID}")
    wait(page, "document.body.dataset.ready === 'run'")
    assert page.text_content("#view-title") == f"Run {LONG_ID}"
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def _titles(page) -> list[str]:
    return page.eval_on_selector_all(".plot-card h3", "(hs) => hs.map((h) => h.textContent)")


def test_a_run_of_evaluations_alone_is_charted(site, new_page):
    page = new_page()
    open_run(page, f"{site.url}/#/run/eval-only")
    assert "no step history yet" not in page.text_content("#plots")
    assert _titles(page) == ["Evaluation"]
    drawn = chart(page, _card("Evaluation"))
    assert sorted(s["name"] for s in drawn["series"]) == ["grpo.eval/kl", "grpo.eval/reward"]
    reward = next(s for s in drawn["series"] if s["name"] == "grpo.eval/reward")
    assert reward["values"] == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0])


def test_a_run_whose_columns_no_default_chart_draws_charts_its_own(site, new_page):
    page = new_page()
    open_run(page, f"{site.url}/#/run/own-columns")
    columns = [c["name"] for c in httpx.get(f"{site.url}/api/runs/own-columns/metrics").json()]
    assert len(columns) == 2 and "no step history yet" not in page.text_content("#plots")
    assert _titles(page) == columns
    for column in columns:
        assert len(series(page, _card(column), column)[0]["values"]) == 5
    page.click(f".plot-card[data-chart='{columns[0]}'] button.chart-remove")  # laid out as the panels are
    wait(page, "document.querySelectorAll('.plot-card').length === 1")
    assert _titles(page) == columns[1:] and _hash(page)["hide"] == columns[0]


def test_a_page_opened_while_the_database_is_stopped_comes_back_with_it(server, tmp_path, new_page):
    """The same against the real thing: a sidecar on PostgreSQL whose server is stopped (SIGSTOP) when the page
    opens answers 503 with Retry-After; once the server runs again the page shows the run, with no reload."""
    url = server.new_database()
    proc = SidecarProcess(url, {"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "2"}).start()
    try:
        spans = grpo_spans("frozen", range(3), samples=2, metrics=lambda step: {"kl": 0.1, "reward": 0.5})
        assert httpx.post(proc.url + "/v1/traces", content=request_pb(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        page = new_page()
        server.freeze()
        try:
            page.goto(f"{proc.url}/#/run/frozen")
            wait(page, "document.body.dataset.ready === 'error'")
            assert "store unavailable" in page.text_content("#error-message")
            assert page.locator("#retry-when").count() == 1
        finally:
            server.thaw()
        wait(page, "document.body.dataset.ready === 'run'")
        assert page.text_content("#view-title") == "Run frozen"
    finally:
        proc.stop()


def test_a_sidecar_that_answers_nothing_is_given_up_on_and_tried_again(tmp_path, new_page):
    """A stopped sidecar (SIGSTOP: the connection is accepted, nothing comes back) is a read with no answer after
    the bound the sidecar wrote into the page, not a page loading for ever (fetch itself would wait minutes or
    for good, and every retry behind it); once the sidecar runs again, the page comes back by itself."""
    proc = SidecarProcess(tmp_path / "sidecar.db", {"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "0.5"}).start()
    try:
        spans = grpo_spans("silent", range(3), samples=2, metrics=lambda step: {"kl": 0.1, "reward": 0.5})
        assert httpx.post(proc.url + "/v1/traces", content=request_pb(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        page = new_page()
        open_run(page, f"{proc.url}/#/run/silent")
        proc.proc.send_signal(signal.SIGSTOP)
        try:
            page.evaluate("() => { location.hash = '#/'; }")
            wait(page, "document.body.dataset.ready === 'error'")
            # 5 x (0.5 s + the client's 1 s): five of the sidecar's bounded waits on the database
            assert page.text_content("#error-message") == "the sidecar did not answer (nothing for 7.5 s)"
            assert page.locator("#retry-when").count() == 1
        finally:
            proc.proc.send_signal(signal.SIGCONT)
        wait(page, "document.body.dataset.ready === 'runs'")
        assert page.locator("#runs-table").count() == 1
    finally:
        proc.stop()


def test_a_compare_search_that_fails_says_so_not_no_other_runs(site, new_page):
    """The "compare runs" search while the database is away: its message, the runs overlaid kept; not "no other
    runs". Typing again once reads work finds them."""
    page = new_page()
    open_run(page, f"{site.url}/#/run/{MAIN}?vs={OTHER}")
    searches = lambda url: "/api/runs?" in url and "q=" in url  # noqa: E731
    page.route(searches, _unavailable)
    typed = ("(q) => { const s = document.querySelector('#compare-search'); s.value = q; "
             "s.dispatchEvent(new Event('input')); }")
    page.evaluate(typed, "tiny")
    wait(page, "document.getElementById('compare-error')")
    assert page.text_content("#compare-error") == f"cannot search runs: HTTP 503: {SICK}; edit the search to try again"
    assert page.evaluate("[...document.querySelectorAll('#compare input[data-run]')].map(i => i.dataset.run)") == [OTHER]
    assert "no other runs" not in page.text_content("#compare-list")
    page.unroute(searches, _unavailable)
    page.evaluate(typed, "tiny-")
    wait(page, "!document.getElementById('compare-error') && "
               "[...document.querySelectorAll('#compare input[data-run]')].some(i => i.dataset.run === 'tiny-kl')")


class _SlowProxy:
    """A proxy in front of a sidecar that answers every request `delay_s` late, as a slow database that still
    answers within the sidecar's bound would, many requests at once (a thread each)."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (stdlib name)
                time.sleep(delay_s)
                answer = httpx.get(upstream + self.path, headers={k: v for k, v in self.headers.items()
                                                                  if k.lower() == "authorization"})
                self.send_response(answer.status_code)
                for name in ("Content-Type", "X-Total-Count", "Retry-After", "Content-Security-Policy"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                try:
                    self.wfile.write(answer.content)
                except (BrokenPipeError, ConnectionResetError):  # a read the page gave up on
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_reads_answered_in_time_are_never_given_up_on_while_many_wait(tmp_path, new_page):
    """A run page comparing 8 runs asks for tens of reads at once; through a sidecar that answers each 0.8 s late
    (a slow database within its bound) every one is shown, none given up as unanswered: the page keeps 6 in
    flight and counts the bound (5.05 s here) from each one's start, not from its wait behind the others (the
    browser queues past 6 a host, where reads in time were cut)."""
    proc = SidecarProcess(tmp_path / "sidecar.db", {"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "0.01"}).start()
    proxy = _SlowProxy(proc.url, 0.8)
    try:
        runs = [f"slow-{i}" for i in range(9)]
        for run in runs:
            spans = grpo_spans(run, range(3), samples=2, metrics=lambda step: {"kl": 0.1, "reward": 0.5})
            assert httpx.post(proc.url + "/v1/traces", content=request_pb(spans).SerializeToString(),
                              headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        page = new_page()
        reads: list[str] = []
        page.on("request", lambda r: "/api/" in r.url and reads.append(r.url))
        page.goto(f"{proxy.url}/#/run/{runs[0]}?" + "&".join(f"vs={run}" for run in runs[1:]))
        wait(page, "document.body.dataset.ready === 'run'")
        page.wait_for_load_state("networkidle", timeout=120_000)
        assert len(reads) > 48, reads  # more than eight rounds of 6: the last would wait past the bound
        assert "did not answer" not in page.text_content("main")
        assert page.locator(".plot-card canvas").count() >= 1
    finally:
        proxy.close()
        proc.stop()


def test_a_step_picked_while_the_sidecar_is_away_is_shown_once_a_read_works(site, new_page):
    """Step 2 picked with no answer from the sidecar: the table says it could not read it and holds no rows of
    step 1 under the picker's step 2; the first live refresh that works shows step 2's rows, the error gone."""
    page = new_page()
    open_run(page, f"{site.url}/#/run/{MAIN}?step=1")
    first_step = "document.querySelector('#samples-table tbody tr td:nth-child(2)')?.textContent"
    assert page.evaluate(first_step) == "1"
    page.route(_api, _no_answer)
    page.select_option("#step-select", "2")
    wait(page, "document.getElementById('samples').dataset.error === '1'")
    assert page.text_content("#samples-note").startswith("cannot show these samples: the sidecar did not answer")
    assert page.locator("#samples-table").count() == 0
    assert page.text_content("#samples") == "no rows shown: they could not be read"
    assert page.input_value("#step-select") == "2" and _hash(page) == {"step": "2"}
    page.evaluate("window.otelGrpoRefresh()")  # still away: nothing changes but the refresh's note
    assert page.locator("#samples-table").count() == 0
    assert not page.evaluate("document.getElementById('refresh-note').hidden")
    page.unroute(_api, _no_answer)
    page.evaluate("window.otelGrpoRefresh()")
    wait(page, f"{first_step} === '2' && !document.getElementById('samples').ariaBusy")
    assert page.locator("#samples-table tbody tr").count() == 8
    assert "cannot" not in page.text_content("#samples-note")
    assert page.evaluate("document.getElementById('samples').dataset.error") is None


def _samples_reads(url: str) -> bool:
    return "/samples" in url


@pytest.mark.parametrize("second", ["sort-again", "live-retry"])
def test_sorts_refused_while_the_sidecar_is_away_keep_the_rows_shown(site, new_page, second):
    """A sort clicked while the sidecar does not answer the samples' reads and, before that read fails, either
    (`sort-again`) the same header clicked again or (`live-retry`) the live refresh, which asks again for a read
    the outage failed before: the table keeps the rows it showed, sorted as they were, and says what it could
    not show. The second sort's way back went to the first sort, never shown, and cleared the table; the
    retry's read superseded the sort's and, refused, had no way back."""
    page = new_page()
    open_run(page, f"{site.url}/#/run/{MAIN}?step=1")
    rows = "[...document.querySelectorAll('#samples-table tbody tr')].map((r) => r.textContent)"
    shown = page.evaluate(rows)
    assert len(shown) == 8
    held = []

    def hold(route) -> None:  # unanswered until the test fails it, oldest first
        held.append(route)

    page.route(_samples_reads, hold)
    refused = "document.getElementById('samples').dataset.error === '1'"
    if second == "live-retry":  # a sort refused first: the rows stay, and a refresh that works asks again
        page.click('th[data-col="reward"]')
        wait(page, f"{len(held)} >= 0 && document.getElementById('samples').ariaBusy === 'true'")
        page.wait_for_timeout(200)
        held.pop(0).abort("connectionrefused")
        wait(page, refused + " && document.getElementById('samples').dataset.retry === '1'")
        assert page.evaluate(rows) == shown
    page.click('th[data-col="reward"]')
    page.wait_for_timeout(200)
    if second == "sort-again":
        page.click('th[data-col="reward"]')
    else:
        page.evaluate("() => { window.otelGrpoRefresh(); }")  # the timer's, while the sort is read: not awaited
    page.wait_for_timeout(500)
    for route in list(held):
        route.abort("connectionrefused")
        page.wait_for_timeout(200)
    page.unroute(_samples_reads, hold)
    wait(page, f"!document.getElementById('samples').ariaBusy && {refused}")
    assert page.text_content("#samples-note").startswith("cannot show these samples")
    assert page.evaluate(rows) == shown
    assert page.evaluate("document.querySelector('th[data-col=\"reward\"]').getAttribute('aria-sort')") == "none"
    assert "sort" not in _hash(page)
