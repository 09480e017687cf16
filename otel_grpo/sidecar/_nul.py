"""NUL (U+0000) in text the sidecar stores: one rule, on both stores.

PostgreSQL's text and jsonb cannot hold a NUL, SQLite's text can. Passed on as it came, a NUL in a
step metric's name failed the whole OTLP request on PostgreSQL (every other span of it lost), and one
in a sample attribute was stored as JSON's `\\u0000` there, which every read that takes the row's JSON
apart (sorting or filtering by a dynamic column) then failed on. So each NUL is written as U+FFFD, the
replacement character: by ingest (`otlp._extract`) in every key and string it keeps, whatever the
backend, so that both stores hold and answer the same; by the alert webhook (`schemas.AlertText`) in every
string of an alert (labels and annotations, names and values), likewise; and by PostgreSQL's statements
(`store._pg_connection.clean`) in the other text that reaches them (a run id in a URL).
"""

from __future__ import annotations

NUL = "\x00"


def without_nul(text: str) -> str:
    """`text` with each NUL as U+FFFD (hot paths test `NUL in text` first: the common text has none)."""
    return text.replace(NUL, "\ufffd")
