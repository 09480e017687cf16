"""One router per resource."""

from . import alerts, ingest, ops, runs, samples, steps, web

__all__ = ["alerts", "ingest", "ops", "runs", "samples", "steps", "web"]
