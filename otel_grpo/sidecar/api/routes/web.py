"""`/`: the web page (static, vendored JS), and `/api/panels`, the plot layout it draws."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ..._panels import PANELS
from ..._settings import SidecarSettings
from ...schemas import Panel
from ..deps import FastJSON, SettingsDep

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
router = APIRouter(tags=["web"])


# The page runs only its own scripts and styles and talks only to this server: an injected tag in a
# sample's text (shown as text anyway) could load nothing, and no other site may frame the page
# (clickjacking its buttons). X-Frame-Options for browsers that predate frame-ancestors.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


PAGE = (WEB_DIR / "index.html").read_text(encoding="utf-8")
READ_STALL_MARK = "{read_stall_s}"


def read_stall_s(settings: SidecarSettings) -> float:
    """How long the page waits for a byte of a read before it gives the read up as unanswered and
    tries again (a stopped sidecar or a proxy holding the connection answers nothing, and a browser's
    fetch waits minutes or for ever): five times what this sidecar lets one wait on the database take
    (`db_timeout_s`, plus the client's one second on a silent server), as a read before its first byte
    waits for a connection and runs up to three statements, each bounded alone, with one to spare. A
    read the sidecar is still working on is not cut; the page counts from the read's start, not from
    its wait behind the page's other reads (util.js)."""
    return 5 * (settings.db_timeout_s + 1)


@router.get("/", include_in_schema=False)
async def index(settings: SettingsDep) -> HTMLResponse:
    return HTMLResponse(PAGE.replace(READ_STALL_MARK, f"{read_stall_s(settings):g}"), headers=PAGE_HEADERS)


@router.get("/api/panels", response_model=list[Panel], response_class=FastJSON)
def panels() -> FastJSON:
    """The web page's plots: titles, groups and series (catalog keys or key prefixes) with descriptions."""
    return FastJSON(PANELS)
