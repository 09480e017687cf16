"""The few SQL fragments that differ between SQLite and PostgreSQL; everything else is shared.

Shared statements are written with `?` placeholders (SQLite's); the PostgreSQL connection
rewrites them (see _postgres). A statement that cannot be written once for both goes here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    step_time: str
    """ISO-8601 UTC text of `end_time` (epoch seconds), millisecond precision, `Z`-suffixed."""
    json_field: str
    """A dynamic sample column: the value at key `?` of the `data` JSON text, typed for ordering."""
    json_number: str
    """A dynamic sample column's value where it is a JSON number, else NULL: each of its two `?` is the
    key (`json_key`). Unguarded, a string would compare greater than any number in both databases."""
    like: str
    """The case-insensitive substring operator (SQLite's LIKE already is, for ASCII)."""
    step_index_hint: str
    """Forces the (run_id, step, uid) index for step-bounded sample queries (see _queries)."""
    data_keys: str
    """Distinct keys of the `data` JSON of the samples whose ids the subquery `{ids}` selects."""
    add_step_columns: str
    """Adds a run's step columns (`?`: the run, then a JSON array of stat keys) to `step_columns`, those it
    has already left alone: one statement however many keys."""

    def json_key(self, column: str) -> str:
        """The bound parameter that addresses `column` in `json_field`."""
        # SQLite takes a path: the quoted form works for any key without `"` (COLUMN_RE).
        return f'$."{column}"' if self.name == "sqlite" else column


SQLITE = Dialect(
    name="sqlite",
    step_time="strftime('%Y-%m-%dT%H:%M:%fZ', end_time, 'unixepoch')",
    json_field="json_extract(data, ?)",
    json_number="(CASE WHEN json_type(data, ?) IN ('integer', 'real') THEN json_extract(data, ?) END)",
    like="LIKE",
    # The index SQLite builds for the UNIQUE (run_id, step, uid) constraint (its first and only one).
    step_index_hint=" INDEXED BY sqlite_autoindex_samples_1",
    data_keys="SELECT DISTINCT j.key FROM samples, json_each(samples.data) AS j WHERE samples.id IN ({ids})",
    # `WHERE true`: an upsert's SELECT needs a WHERE, or SQLite reads ON CONFLICT as a join's ON.
    add_step_columns=("INSERT INTO step_columns (run_id, key) SELECT ?, j.value FROM json_each(?) AS j WHERE true "
                      "ON CONFLICT (run_id, key) DO NOTHING"),
)

_PG_JULIAN_MS = "floor(end_time * 1000::float8 + 210866760000000::float8 + 0.5::float8)::bigint"

POSTGRES = Dialect(
    name="postgresql",
    # SQLite's milliseconds, computed as its strftime does (date.c: the julian-day milliseconds
    # (end_time * 1000 + 210866760000000) + 0.5, truncated, in doubles), so both stores write the
    # same text: to_char's MS truncated (.2567 s was .256 here, .257 in SQLite). Also cheaper than
    # to_char with MS (benchmarks/README.md, sidecar).
    step_time=("to_char(to_timestamp(" + _PG_JULIAN_MS + " / 1000 - 210866760000) AT TIME ZONE 'UTC', "
               "'YYYY-MM-DD\"T\"HH24:MI:SS.') || lpad((" + _PG_JULIAN_MS + " % 1000)::text, 3, '0') || 'Z'"),
    # jsonb orders numbers as numbers and strings as strings, as json_extract's values sort in SQLite.
    json_field="(data::jsonb -> ?)",
    json_number="(CASE WHEN jsonb_typeof(data::jsonb -> ?) = 'number' THEN (data::jsonb ->> ?)::float8 END)",
    like="ILIKE",
    step_index_hint="",  # PostgreSQL's planner picks the (run_id, step, uid) index by itself
    data_keys="SELECT DISTINCT jsonb_object_keys(data::jsonb) FROM samples WHERE id IN ({ids})",
    add_step_columns=("INSERT INTO step_columns (run_id, key) SELECT ?, json_array_elements_text(?::json) "
                      "ON CONFLICT (run_id, key) DO NOTHING"),
)
