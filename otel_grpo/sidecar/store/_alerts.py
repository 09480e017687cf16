"""Alerts as Alertmanager has them: one row per (fingerprint, episode), resolved when it is.

An episode is one firing period of an alert (its fingerprint). Alertmanager may send a
firing alert again with another `startsAt` (a re-evaluation after a Prometheus
restart, a flap inside `resolve_timeout`): keyed by (fingerprint, startsAt) alone,
the older row stayed firing forever next to a resolved copy. So a firing alert
updates its fingerprint's open episode, a resolved one closes it, and a notification
of a group, which lists every alert Alertmanager holds in that group, closes the
open episodes of that group it no longer lists.

Plain SQL with `?` parameters and ON CONFLICT: the statements of both stores.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

_OPEN = "SELECT starts_at FROM alerts WHERE fingerprint = ? AND status = 'firing' ORDER BY starts_at LIMIT 1"
_CLOSE = "UPDATE alerts SET status = 'resolved', ends_at = ?, received_at = ? WHERE fingerprint = ? AND status = 'firing'"
_UPSERT = """
INSERT INTO alerts (fingerprint, starts_at, status, alertname, run_id, labels, annotations, ends_at,
                    generator_url, received_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (fingerprint, starts_at) DO UPDATE SET
    status = excluded.status, alertname = excluded.alertname, run_id = excluded.run_id,
    labels = excluded.labels, annotations = excluded.annotations, ends_at = excluded.ends_at,
    generator_url = excluded.generator_url, received_at = excluded.received_at
"""
_FIRING = "SELECT fingerprint, labels FROM alerts WHERE status = 'firing'"


def upsert_episodes(conn: Any, alerts: list[dict], group: Mapping[str, str] | None, now: float,
                    ended_at: str) -> None:
    """Apply one webhook notification in the caller's transaction (`ended_at`: ISO time for closed rows)."""
    for a in alerts:
        labels = a.get("labels", {})
        fingerprint, starts = a["fingerprint"], a["startsAt"]
        if a["status"] == "resolved":
            if conn.execute(_CLOSE, (a.get("endsAt") or ended_at, now, fingerprint)).rowcount:
                continue  # closed the open episode; a resolution never seen firing gets its own row
        else:
            found = conn.execute(_OPEN, (fingerprint,)).fetchone()
            starts = found[0] if found else starts  # the episode keeps the start it was first seen with
        conn.execute(_UPSERT, (fingerprint, starts, a["status"], labels.get("alertname"), labels.get("run_id"),
                               json.dumps(labels), json.dumps(a.get("annotations", {})), a.get("endsAt"),
                               a.get("generatorURL"), now))
    if group:  # the group's alerts Alertmanager no longer holds are resolved there
        listed = {a["fingerprint"] for a in alerts}
        for fingerprint, labels in conn.execute(_FIRING).fetchall():
            if fingerprint not in listed and group.items() <= json.loads(labels).items():
                conn.execute(_CLOSE, (ended_at, now, fingerprint))


__all__ = ["upsert_episodes"]
