"""The sidecar: OTLP/HTTP trace ingest into SQLite, a read API, a web page and its own metrics.

    from otel_grpo.sidecar import SidecarSettings, create_app
    app = create_app(SidecarSettings(db="sidecar.db"))
"""

from ._app import create_app
from ._settings import SidecarSettings
from .store import Store

__all__ = ["SidecarSettings", "Store", "create_app"]
