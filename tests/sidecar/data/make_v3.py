"""How tests/sidecar/data/sidecar-v3.db.gz was made: by the release before the PostgreSQL store
(commit d0326e9, schema version 3), run from the repository root, then `gzip -9` (it is mostly
empty 32 KiB pages). Kept for the record; the upgrade test reads the committed file."""
import sqlite3, sys
from pathlib import Path
sys.path.insert(0, "tests/sidecar")
from conftest import grpo_spans, request_pb
from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import Store, SCHEMA_VERSION
assert SCHEMA_VERSION == 3
path = Path("tests/sidecar/data/sidecar-v3.db")
path.unlink(missing_ok=True)
store = Store.open(path)
store.write_batch(extract(request_pb(grpo_spans("old-run", range(3), samples=4))), now=1_700_000_000.0)
store.write_batch(extract(request_pb(grpo_spans("old/run-b", range(2), samples=2))), now=1_700_000_100.0)
store.upsert_alerts([{"fingerprint": "f1", "startsAt": "2023-11-14T22:13:20Z", "status": "firing",
    "labels": {"alertname": "GRPOKLHigh", "run_id": "old-run"}, "annotations": {"summary": "kl"},
    "endsAt": None, "generatorURL": None}], now=1_700_000_050.0)
store.close()
conn = sqlite3.connect(path)
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
conn.execute("PRAGMA journal_mode = DELETE")
conn.execute("VACUUM")
conn.close()
print(path.stat().st_size)
