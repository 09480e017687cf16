"""The few SQL fragments that differ between SQLite and PostgreSQL; everything else is shared.

Shared statements are written with `?` placeholders (SQLite's); the PostgreSQL connection
rewrites them (see _postgres). A statement that cannot be written once for both goes here.
"""

from __future__ import annotations

from dataclasses import dataclass

MIXED_ORDER = ("boolean", "number", "string", "json")
"""The kinds of value a dynamic sample column holds, in the order an ascending sort gives them: booleans (false, true),
numbers by value (as 64-bit floats), strings by text (code point by code point, whatever the database's collation),
then arrays and objects (`json`) by their JSON text as stored; a null or a missing key comes last both ways. A
descending sort reverses all but the last; ties go by the row's id. `Dialect.json_ordered_ids` writes it for either
database."""


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    step_time: str
    """ISO-8601 UTC text of `end_time` (epoch seconds), millisecond precision, `Z`-suffixed."""
    json_at: str
    """Where a dynamic sample column's value is read (`{json}` in `json_type` and `json_value`): the `data` JSON text,
    whose key SQLite's functions take as a path `?`, or (PostgreSQL) the JSON value at key `?`, parsed once a row
    where an ordering reads it several times (`json_ordered_ids`)."""
    json_type: str
    """The JSON type of the value at `{json}`: the database's name for it (`json_types`); NULL where it is missing."""
    json_types: tuple[tuple[str, tuple[str, ...]], ...]
    """Each kind of `MIXED_ORDER`, in that order, with the names `json_type` gives its values (JSON null: none)."""
    json_value: str
    """The value at `{json}` as SQL: a string's text, a number (or its text), an array's or object's JSON text as
    stored (both databases keep its bytes: orjson's compact form), a boolean so that false sorts before true
    (SQLite: 0 and 1; PostgreSQL: 'false' and 'true')."""
    real: str
    """The SQL type of a 64-bit float."""
    byte_order: str
    """The collation that compares text code point by code point (SQLite's BINARY on UTF-8, PostgreSQL's "C"):
    PostgreSQL's default is the database's, which an en_US one orders `a` < `Z` < `é` (SQLite: `Z` < `a` < `é`)."""
    unfolded: str
    """Ends a subquery so that the database computes its columns once a row rather than folding it into the outer
    query (PostgreSQL evaluates a folded column once for each use: `json_ordered_ids` parsed `data` up to ten times
    a row, three times as long as once)."""
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
        """The bound parameter that addresses `column` in `json_at`, `json_type` and `json_value`."""
        # SQLite takes a path: the quoted form works for any key without `"` (COLUMN_RE).
        return f'$."{column}"' if self.name == "sqlite" else column

    def json_number(self, column: str, params: list) -> str:
        """Dynamic `column`'s value where it is a JSON number, as a float, else NULL; appends its parameters.
        Unguarded, a string would compare greater than any number in both databases."""
        return self._bind(self._number.replace("{json}", self.json_at), column, params)

    def json_ordered_ids(self, column: str, desc: bool, source: str, params: list) -> tuple[str, list]:
        """The ids of the rows that `source` (`FROM ... WHERE ...`, its parameters `params`) selects, in the order of
        `MIXED_ORDER` by dynamic `column`, ties by id: a total order, so pages neither repeat nor skip a row.

        Three keys before the id: the kind (NULL for a null or a missing key: last both ways), a number's value, the
        text (or boolean) of the rest; each reads the column's value `v`, which the subquery gives."""
        d = " DESC" if desc else " ASC"
        kinds = dict(self.json_types)
        rank = " ".join(f"WHEN '{name}' THEN {i}" for i, kind in enumerate(MIXED_ORDER) for name in kinds[kind])
        texts = ", ".join(f"'{name}'" for kind in MIXED_ORDER if kind != "number" for name in kinds[kind])
        terms = (f"(CASE {self.json_type} {rank} END){d} NULLS LAST",
                 f"{self._number}{d}",
                 f"(CASE WHEN {self.json_type} IN ({texts}) THEN {self.json_value} END) COLLATE {self.byte_order}{d}")
        at_params: list = []
        at = self._bind(self.json_at, column, at_params)
        order_params: list = []
        order = ", ".join(self._bind(term.replace("{json}", "v"), column, order_params) for term in terms)
        return (f"SELECT id FROM (SELECT id, {at} AS v {source}{self.unfolded}) AS s ORDER BY {order}, id{d}",
                [*at_params, *params, *order_params])

    @property
    def _number(self) -> str:
        numbers = ", ".join(f"'{name}'" for name in dict(self.json_types)["number"])
        return f"(CASE WHEN {self.json_type} IN ({numbers}) THEN CAST({self.json_value} AS {self.real}) END)"

    def _bind(self, sql: str, column: str, params: list) -> str:
        """`sql`, each of whose `?` addresses dynamic `column`, with those parameters appended to `params`."""
        params += [self.json_key(column)] * sql.count("?")
        return sql


SQLITE = Dialect(
    name="sqlite",
    step_time="strftime('%Y-%m-%dT%H:%M:%fZ', end_time, 'unixepoch')",
    json_at="data",
    json_type="json_type({json}, ?)",
    json_types=(("boolean", ("false", "true")), ("number", ("integer", "real")), ("string", ("text",)),
                ("json", ("array", "object"))),
    json_value="json_extract({json}, ?)",
    real="REAL",
    byte_order="BINARY",
    unfolded="",  # SQLite keeps the last `data` it parsed: folded, its functions read it once a row anyway
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
    # json, not jsonb: it gives an array's or object's text as stored (jsonb's is reformatted, its keys
    # reordered), as SQLite's json_extract does.
    json_at="(data::json -> ?)",
    json_type="json_typeof({json})",
    json_types=(("boolean", ("boolean",)), ("number", ("number",)), ("string", ("string",)),
                ("json", ("array", "object"))),
    json_value="({json} #>> '{}')",
    real="float8",
    byte_order='"C"',
    unfolded=" OFFSET 0",
    like="ILIKE",
    step_index_hint="",  # PostgreSQL's planner picks the (run_id, step, uid) index by itself
    data_keys="SELECT DISTINCT jsonb_object_keys(data::jsonb) FROM samples WHERE id IN ({ids})",
    add_step_columns=("INSERT INTO step_columns (run_id, key) SELECT ?, json_array_elements_text(?::json) "
                      "ON CONFLICT (run_id, key) DO NOTHING"),
)
