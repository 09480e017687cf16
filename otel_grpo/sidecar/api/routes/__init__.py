"""One router per resource."""

from . import alerts, ingest, ops, runs, samples, web

__all__ = ["alerts", "ingest", "ops", "runs", "samples", "web"]
