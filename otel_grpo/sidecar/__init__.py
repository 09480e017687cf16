"""The sidecar: OTLP/HTTP trace ingest into SQLite, a read API, a web page and its own metrics.

    from otel_grpo.sidecar import SidecarSettings, create_app
    app = create_app(SidecarSettings(db="sidecar.db"))      # or: otel-grpo sidecar --db sidecar.db

Endpoints:
    POST /v1/traces                        OTLP/HTTP (protobuf or JSON, gzip); ingest token
    POST /api/alerts                       Alertmanager webhook (version 4); ingest token
    GET  /api/runs, /api/runs/{run_id}     runs (paged, filtered): steps range, last update, sample count, status
    GET  /api/runs/{run_id}/steps          per-step scalars by catalog name (grpo.kl, grpo.phase.duration/<phase>)
    GET  /api/runs/{run_id}/metrics        a run's step columns: catalog name, Prometheus name, key, unit
    GET  /api/runs/{run_id}/samples[.csv|.jsonl], /sample-steps
    GET  /api/runs/{run_id}/alerts         a run's stored alerts (its id exactly: no `a|b` selection)
    GET  /api/steps                        several runs' step history (at most max_runs runs a response)
    GET  /api/alerts, /api/panels          stored alerts; the web page's plot layout
    GET  /, /static/...                    the web page
    GET  /metrics, /healthz, /readyz       the sidecar's own health
"""

from .._extras import require

require("sidecar", "otel_grpo.sidecar")  # one line naming the extra, not fastapi's ModuleNotFoundError

from ._app import create_app  # noqa: E402
from ._settings import SidecarSettings  # noqa: E402
from .store import Store  # noqa: E402

__all__ = ["SidecarSettings", "Store", "create_app"]
