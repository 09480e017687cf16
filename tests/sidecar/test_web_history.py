"""The run explorer's history and links: each view a user moves to (a step, a sample, a sort) is one
press of the back button away, back and forward and a reload show what the URL says, an answer that
arrives after a newer view asked for its own changes nothing, and a link with what is not there (an
unknown run, a step beyond the run, an unknown column, garbage in any parameter) says so in one line
and shows the rest."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest

from tests.sidecar.conftest import SidecarProcess, grpo_spans, request_pb
from tests.sidecar.test_web import (CHROMIUM, MAIN, OTHER, _hash, _seed_explorer, browser,  # noqa: F401
                                    console_problems, new_page, open_run, sidecar_with_runs, wait)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make system-deps)")]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[SimpleNamespace]:
    """One sidecar for the module: MAIN has steps 0-19, 8 samples each (test_web's explorer data)."""
    proc = SidecarProcess(tmp_path_factory.mktemp("history") / "sidecar.db").start()
    try:
        _seed_explorer(proc.url, SimpleNamespace(spans=grpo_spans, request=request_pb))
        yield SimpleNamespace(url=proc.url)
    finally:
        proc.stop()


def _view(page) -> dict:
    """What the run page shows once it is ready: the step, the linked sample, the sort, the rows' order."""
    wait(page, "document.body.dataset.ready === 'run' && !document.getElementById('samples').ariaBusy")
    return page.evaluate("""(() => { const sorted = document.querySelector('#samples-table th[aria-sort=ascending], '
                                                                       + '#samples-table th[aria-sort=descending]');
        return { title: document.querySelector('main h1, main h2').textContent,
                 crumb: document.getElementById('crumb').textContent,
                 step: document.getElementById('step-select').value,
                 sample: document.querySelector('#samples-table tr.linked')?.dataset.sample || null,
                 sort: sorted ? [sorted.dataset.col, sorted.getAttribute('aria-sort')] : null,
                 rows: [...document.querySelectorAll('#samples-table tbody tr')].map((tr) => tr.dataset.sample).join(),
                 history: history.length }; })()""")


def _settled(page, view: dict) -> dict:
    """`view`, less the history's length, checked against the URL: every state shows what its URL says."""
    url = _hash(page)
    assert url.get("step") == view["step"] and url.get("sample") == view["sample"]
    assert ([url["sort"], "descending" if url.get("desc") == "1" else "ascending"] if "sort" in url else None) == view["sort"]
    return {k: v for k, v in view.items() if k != "history"}


def test_back_and_forward_retrace_run_step_sample_sort(site, new_page):
    page = new_page(viewport={"width": 1280, "height": 900})
    problems = console_problems(page)
    page.goto(site.url + "/#/")
    wait(page, "document.body.dataset.ready === 'runs'")
    page.click(f"#runs-table a[href='#/run/{MAIN}']")
    run = _view(page)
    page.select_option("#step-select", "12")
    wait(page, "location.hash.includes('step=12')")
    step = _view(page)
    page.click("#samples-table tr[data-sample='3'] a.sample-link")
    wait(page, "location.hash.includes('sample=3')")
    sample = _view(page)
    page.click("#samples-table th[data-col='kl_ref_mean'] button")
    wait(page, "location.hash.includes('sort=kl_ref_mean')")
    ordered = _view(page)
    # One entry per view: the back button never needs two presses.
    assert [step["history"], sample["history"], ordered["history"]] == [run["history"] + i for i in (1, 2, 3)]
    assert ordered["sort"] == ["kl_ref_mean", "descending"] and ordered["rows"].startswith("3,")
    assert sample["sample"] == "3" and sample["rows"] != ordered["rows"]

    shown = []
    for move in (page.go_back, page.go_back, page.go_forward):
        move()
        shown.append(_settled(page, _view(page)))
    assert shown == [{k: v[k] for k in v if k != "history"} for v in (sample, step, sample)]
    page.reload()
    assert _settled(page, _view(page)) == shown[-1]
    page.go_back()
    page.go_back()
    assert _settled(page, _view(page)) == {k: v for k, v in run.items() if k != "history"}
    page.go_back()
    wait(page, "document.body.dataset.ready === 'runs'")
    assert problems == []


def test_an_answer_arriving_after_a_newer_view_changes_nothing(site, new_page):
    """A run page still loading (its sample steps held back) when the user moves on to another run:
    once its answer comes, the newer view (its title, charts, rows) and its URL stay."""
    page = new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script("""{ const fetch0 = window.fetch; window.__held = []; window.__flying = 0;
        window.fetch = (url, ...rest) => {
          window.__flying += 1;
          const go = () => fetch0(url, ...rest).finally(() => { window.__flying -= 1; });
          if (!String(url).includes('/sample-steps') || window.__held.length) return go();
          return new Promise((done) => window.__held.push(() => done(go())));  // the first only
        }; }""")
    page.goto(f"{site.url}/#/run/{OTHER}?step=12&sort=reward")
    wait(page, "window.__held.length === 1")
    page.evaluate(f"location.hash = '#/run/{MAIN}?step=4&sample=2'")
    newer = _view(page)
    assert newer["step"] == "4" and newer["sample"] == "2" and newer["title"] == f"Run {MAIN}"
    charts = page.evaluate("document.querySelectorAll('.plot-card').length")
    page.evaluate("window.__held[0]()")
    wait(page, "window.__flying === 0")
    assert _view(page) == newer and _hash(page) == {"step": "4", "sample": "2"}
    assert page.evaluate("document.querySelectorAll('.plot-card').length") == charts


# A link, and what the page says of it (in #link-note, or the error for a run not there).
MALFORMED = {
    f"#/run/{MAIN}?step=999": "step 999 has no samples (this run has samples at steps",
    f"#/run/{MAIN}?step=-3": "step -3 has no samples",
    f"#/run/{MAIN}?step=2.5": "step=2.5 (not a step number): ignored",
    f"#/run/{MAIN}?step=1e400": "step=1e400 (not a step number): ignored",
    f"#/run/{MAIN}?step=4&sort=nope&desc=1": 'no column "nope" in these samples to sort by: not sorted',
    f"#/run/{MAIN}?step=4&desc=yes": "desc=yes (not 1 or 0): ignored",
    f"#/run/{MAIN}?step=4&sample=-1": "sample=-1 (not a sample index): ignored",
    f"#/run/{MAIN}?step=4&sample=99999999999999999999999": "(not a sample index): ignored",
    f"#/run/{MAIN}?step=4&sample=abc": "sample=abc (not a sample index): ignored",
    f"#/run/{MAIN}?step=4&sample=77": "sample 77 is not at step 4",
    f"#/run/{MAIN}?step=4&groupof=x": "groupof=x (not a sample index): ignored",
    f"#/run/{MAIN}?step=4&group=99": "group 99 is not at step 4",
    f"#/run/{MAIN}?step=4&groupof=77": "no group of sample 77 at step 4",
    f"#/run/{MAIN}?step=999&group=0&sample=2": "): step 19 is shown, not its sample=2, group=0",
    f"#/run/{MAIN}?step=4&add=no.such.column": "add=no.such.column (no step column of that name): no chart",
    f"#/run/{MAIN}?step=4&from=abc&to=9": "from=abc (not a number): ignored",
    f"#/run/{MAIN}?step=4&smooth=7": "smooth=7 (not within 0–0.99): ignored",
    f"#/run/{MAIN}?step=4&scale=kl:weird": "scale=kl:weird (not <chart>:linear, log or symlog): ignored",
    f"#/run/{MAIN}?step=4&bogus=1": "bogus=1 (not a setting of this page): ignored",
}


def test_a_link_with_what_is_not_there_says_so_once_and_shows_the_rest(site, new_page):
    page = new_page(viewport={"width": 1280, "height": 900})
    problems = console_problems(page)
    said = {}
    for link, note in MALFORMED.items():
        page.goto("about:blank")
        page.goto(site.url + "/" + link)
        view = _view(page)
        said[link] = page.locator("#link-note").text_content()
        assert note in said[link], (link, said[link])
        assert page.get_by_role("status").filter(has_text="This link asked for").count() == 1
        # The URL now says what is shown: the parts not understood are gone from it, the rows are there.
        _settled(page, view)
        assert view["rows"] and view["step"] in {"4", "19", "0"}
        assert not set(_hash(page)) - {"step"}, (link, _hash(page))
    assert problems == []

    # A group named twice: the group shown is the one group= names, and the other is said.
    page.goto("about:blank")
    page.goto(f"{site.url}/#/run/{MAIN}?step=4&group=0&groupof=5")
    _view(page)
    wait(page, "document.querySelectorAll('#group-view .group-card').length > 0")
    assert page.locator("#link-note").text_content() == (
        "This link asked for what is not here: groupof=5 (group= names the group): ignored.")
    assert _hash(page) == {"step": "4", "group": "0"}

    # Filtering by a column no row has: said where the rows would be, the filter kept (it may be
    # another step's).
    page.goto("about:blank")
    page.goto(f"{site.url}/#/run/{MAIN}?step=4&fcol=nope&fmin=1")
    _view(page)
    assert page.locator("#samples-note").text_content() == 'none of the 8 rows has a number in column "nope"'

    # What cannot be shown at all: one message, a title, a way back; one request refused, nothing else.
    for link, message in (("#/run/no-such-run", "run 'no-such-run' not found"),
                          ("#/run/%E0%A4%A", 'this link\'s run id "%E0%A4%A" is not valid percent-encoding')):
        problems.clear()
        page.goto("about:blank")
        page.goto(site.url + "/" + link)
        wait(page, "document.body.dataset.ready === 'error'")
        assert page.locator("main h1").text_content() == "Cannot show this page"
        assert page.get_by_role("alert").text_content().endswith(message)
        assert page.locator("main a[href='#/']").count() == 1
        assert [p for p in problems if "Failed to load resource" not in p] == [] and len(problems) <= 1

    # The runs list reads its link the same way.
    page.goto("about:blank")
    page.goto(site.url + "/#/?status=bogus&page=-4&zz=1")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert page.locator("#link-note").text_content() == (
        "This link asked for what is not here: zz=1 (not a setting of this page): ignored; "
        "status=bogus (not firing, active or idle): ignored; page=-4 (not a page number): ignored.")
    assert page.evaluate("location.hash") == "#/" and page.locator("#runs-table tbody tr").count() == 2
    # Past what the read API pages (it skips 10^9 runs at most) and searches (128 characters): said, not an error
    # page; the box takes no more than the API does.
    long_q = "x" * 129
    page.goto("about:blank")
    page.goto(site.url + f"/#/?page=20000002&q={long_q}")
    wait(page, "document.body.dataset.ready === 'runs'")
    assert page.locator("#link-note").text_content() == (
        "This link asked for what is not here: page=20000002 (past the last page any store has (20000001)): "
        f"ignored; q={long_q} (a search of more than 128 characters): ignored.")
    assert page.locator("#runs-table tbody tr").count() == 2
    page.fill("#runs-search", long_q)
    assert page.input_value("#runs-search") == long_q[:128]

    # A run with no samples at all: the sample and group a link names are said, not dropped unsaid.
    body = request_pb(grpo_spans("bare", range(2), samples=0)).SerializeToString()
    assert httpx.post(site.url + "/v1/traces", content=body,
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    page.goto("about:blank")
    page.goto(site.url + "/#/run/bare?group=0&sample=1")
    wait(page, "document.body.dataset.ready === 'run'")
    assert page.locator("#link-note").text_content() == (
        "This link asked for what is not here: sample=1, group=0 (this run has no samples): not shown.")
    assert _hash(page) == {}

    # A link rewritten as it is read is no entry of the history: one back press leaves it.
    page.goto(site.url + "/#/")
    wait(page, "document.body.dataset.ready === 'runs'")
    page.evaluate(f"location.hash = '#/run/{MAIN}?step=2.5&sort=nope'")
    _view(page)
    page.go_back()
    wait(page, "document.body.dataset.ready === 'runs'")


def test_each_page_of_runs_is_a_step_of_the_history(sidecar_factory, tmp_path, new_page):
    """Paging through the runs list, then back, shows the page before (it added no entry: back left the list);
    a status chosen is an entry too, typing a search is not; reload shows the page the URL names."""
    proc = sidecar_with_runs(sidecar_factory, tmp_path, 120)
    page = new_page()
    problems = console_problems(page)

    def shown() -> tuple[str, str, str]:
        wait(page, "document.body.dataset.ready === 'runs' && !!document.querySelector('#runs-table')")
        return (page.evaluate("location.hash"), page.evaluate("document.querySelector('#runs-count').textContent"),
                page.evaluate("document.querySelector('#runs-table tbody tr a').textContent"))

    page.goto(proc.url + "/#/")
    first, length = shown(), page.evaluate("history.length")
    views = [first]
    for _ in range(2):
        page.click("#runs-next")
        wait(page, f"document.querySelector('#runs-count').textContent !== {views[-1][1]!r}")
        views.append(shown())
    assert [v[:2] for v in views] == [("#/", "1–50 of 120"), ("#/?page=2", "51–100 of 120"),
                                      ("#/?page=3", "101–120 of 120")], views
    assert page.evaluate("history.length") == length + 2

    def showing(view: tuple[str, str, str]) -> bool:
        """Until the list shows `view` (back, forward and reload are navigations: the old list stays a moment)."""
        wait(page, f"location.hash === {view[0]!r} && document.querySelector('#runs-count')?.textContent === "
                   f"{view[1]!r} && document.querySelector('#runs-table tbody tr a').textContent === {view[2]!r}")
        return shown() == view

    for move, view in ((page.go_back, views[1]), (page.go_back, views[0]), (page.go_forward, views[1]),
                       (page.reload, views[1])):
        move()
        assert showing(view), (move, view)

    page.select_option("#runs-status", "idle")
    count = "document.querySelector('#runs-count').textContent"
    wait(page, f"location.hash === '#/?status=idle' && {count} === '1–50 of 120'")
    page.fill("#runs-search", "exp-001")
    wait(page, f"location.hash === '#/?q=exp-001&status=idle' && {count} === '1–20 of 20'")
    page.go_back()  # the search replaced the status' entry: back is the page before it
    assert showing(views[1])
    assert problems == []


def _post(url: str, spans) -> None:
    assert httpx.post(url + "/v1/traces", content=request_pb(spans).SerializeToString(),
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200


STEP_OPTIONS = "[...document.querySelectorAll('#step-select option')].map(o => o.text).join()"
FIRST_ROW_STEP = "document.querySelector('#samples-table tbody tr td:nth-child(2)')?.textContent"


def test_the_step_picker_offers_the_steps_retention_keeps(sidecar_factory, tmp_path, new_page):
    """A sidecar that keeps a run's latest 3 steps: once the run moves on, a live refresh offers the steps that
    have samples now, as many as before (the step shown stays, marked, until another is picked)."""
    proc = sidecar_factory(db=tmp_path / "kept.db", env={"OTEL_GRPO_SIDECAR_RETENTION_MAX_STEPS": "3",
                                                          "OTEL_GRPO_SIDECAR_RETENTION_INTERVAL_S": "1"})
    _post(proc.url, grpo_spans("kept", range(0, 3), samples=4))
    page = new_page()
    open_run(page, f"{proc.url}/#/run/kept")
    assert page.evaluate(STEP_OPTIONS) == "step 2,step 1,step 0"
    _post(proc.url, grpo_spans("kept", range(3, 6), samples=4))
    deadline = time.monotonic() + 60
    while httpx.get(f"{proc.url}/api/runs/kept/sample-steps").json() != [5, 4, 3]:
        assert time.monotonic() < deadline, "retention did not drop steps 0-2"
        time.sleep(0.2)
    page.evaluate("window.otelGrpoRefresh()")
    wait(page, f"{STEP_OPTIONS} === 'step 5,step 4,step 3,step 2 (no samples now)'")
    assert page.input_value("#step-select") == "2"
    page.select_option("#step-select", "4")
    wait(page, f"{FIRST_ROW_STEP} === '4' && !document.getElementById('samples').ariaBusy")
    assert page.evaluate(STEP_OPTIONS) == "step 5,step 4,step 3" and _hash(page) == {"step": "4"}


def test_a_group_view_closes_when_a_sample_or_a_step_is_picked(site, new_page):
    """The URL drops the group when a sample's "#" or another step is picked: so does the page."""
    page = new_page()
    open_run(page, f"{site.url}/#/run/{MAIN}?step=3")
    for pick in (lambda: page.click("#samples-table tr[data-sample='5'] a.sample-link"),
                 lambda: page.select_option("#step-select", "1")):
        page.locator("#samples-table tbody tr >> nth=0").locator("button.group-open").click()
        wait(page, "!!document.querySelector('#group-view h3') && location.hash.includes('groupof=')")
        pick()
        wait(page, "!location.hash.includes('groupof=') && !document.getElementById('samples').ariaBusy")
        assert page.evaluate("document.getElementById('group-view').children.length") == 0


def test_a_live_run_opened_before_its_first_samples_shows_them_once_they_come(site, new_page):
    """Opened while the trainer has sent steps but no samples: the refresh after its first samples shows its
    latest step's rows, the picker and the URL naming that step."""
    _post(site.url, grpo_spans("early", range(0, 3), samples=0))
    page = new_page()
    open_run(page, f"{site.url}/#/run/early")
    assert page.locator("#samples").text_content() == "no samples" and _hash(page) == {}
    _post(site.url, grpo_spans("early", range(3, 6), samples=4))
    page.evaluate("window.otelGrpoRefresh()")
    wait(page, f"{FIRST_ROW_STEP} === '5' && !document.getElementById('samples').ariaBusy")
    assert page.locator("#samples-table tbody tr").count() == 4
    assert page.input_value("#step-select") == "5" and _hash(page) == {"step": "5"}


def test_a_group_opened_from_a_search_row_of_another_step_links_that_step(site, new_page):
    """Search over every step while step 0 is picked, open the group of a found row of step 3: the picker and
    the URL say step 3, and a reload shows the same group (its prompt), not step 0's group of that index."""
    prompt = lambda step, i: {"group": i // 2, "prompt": f"prompt of step {step} group {i // 2}",  # noqa: E731
                              "completion": f"step{step} needle{i}" if step == 3 else f"plain {step}/{i}"}
    _post(site.url, grpo_spans("searched", range(0, 5), samples=4, extra=prompt))
    page = new_page()
    open_run(page, f"{site.url}/#/run/searched?step=0")
    page.fill("#search", "needle")
    wait(page, "document.querySelectorAll('#samples-table tbody tr').length === 4 && location.hash.includes('q=needle')")
    page.locator("#samples-table tbody tr", has_text="needle2").locator("button.group-open").click()
    shown = "document.querySelector('#group-view pre.prompt')?.textContent"
    wait(page, f"{shown} === 'prompt of step 3 group 1'")
    assert _hash(page) == {"step": "3", "groupof": "2", "q": "needle"} and page.input_value("#step-select") == "3"
    open_run(page, page.url)
    wait(page, f"{shown} === 'prompt of step 3 group 1'")
    assert page.input_value("#step-select") == "3" and page.locator("#link-note").text_content() == ""
