"""Each run's step columns, `step_columns`: every stat key a step of the run has carried, one row each.

    new = writer.known_columns.new(run_id, first_seen, keys)  # in the write: the keys to insert
    writer.known_columns.written(run_id, first_seen, new)   # once committed

Listing a run's columns then reads its keys alone (`Reads.metric_keys`), whatever its length: a
column logged at one step of 100,000 is found. The insert leaves keys already there alone, but it
still probes the index once per key at every write (a run has ~110); so each writer keeps, per
run it wrote lately, the keys it knows are stored, and inserts only the others (none, after a
run's first steps). What it knows is per run identity (`first_seen`): a run deleted and made
again, by any writer, is written whole again. Another writer's inserts are unknown to this one,
which at worst inserts a key again (a no-op).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

RUNS_KNOWN = 256
"""Runs whose stored keys a writer remembers, the most recently written; another run's write inserts
all its keys (correct, a little slower)."""


class KnownColumns:
    """The stat keys this writer knows `step_columns` holds for each recently written run; thread-safe."""

    def __init__(self, runs: int = RUNS_KNOWN) -> None:
        self.runs = runs
        self._known: OrderedDict[str, tuple[object, frozenset[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def new(self, run_id: str, identity: object, keys: set[str]) -> set[str]:
        """Of `keys`, those not known to be stored for the run (`identity`: its `first_seen`; None: unknown,
        all of them)."""
        with self._lock:
            held = self._known.get(run_id)
        return set(keys) if held is None or identity is None or held[0] != identity else keys - held[1]

    def written(self, run_id: str, identity: object, keys: set[str]) -> None:
        """`keys` of the run are stored (call once the write has committed)."""
        if identity is None:
            return
        with self._lock:
            held = self._known.pop(run_id, None)
            known = held[1] | keys if held is not None and held[0] == identity else frozenset(keys)
            self._known[run_id] = (identity, known)  # last: the most recently written
            while len(self._known) > self.runs:
                self._known.popitem(last=False)
