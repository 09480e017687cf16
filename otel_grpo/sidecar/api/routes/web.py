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


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8")


@router.get("/api/panels", response_model=list[Panel], response_class=FastJSON)
def panels() -> FastJSON:
    """The web page's plots: titles, groups and series (catalog keys or key prefixes) with descriptions."""
    return FastJSON(PANELS)
