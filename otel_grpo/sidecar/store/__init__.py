"""SQLite (WAL) store: runs, per-step scalar history, phase durations, samples, alerts."""

from ._schema import SCHEMA_VERSION, SchemaError
from ._queries import SAMPLE_CORE_COLUMNS, SampleQuery
from ._store import Store

__all__ = ["SAMPLE_CORE_COLUMNS", "SCHEMA_VERSION", "SampleQuery", "SchemaError", "Store"]
