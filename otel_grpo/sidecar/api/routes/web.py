"""`/`: the web page (static, vendored JS), and `/api/panels`, the plot layout it draws."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from ..._panels import PANELS
from ...schemas import Panel
from ..deps import FastJSON

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


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@router.get("/api/panels", response_model=list[Panel], response_class=FastJSON)
def panels() -> FastJSON:
    """The web page's plots: titles, groups and series (catalog keys or key prefixes) with descriptions."""
    return FastJSON(PANELS)
