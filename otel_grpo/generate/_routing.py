"""Who hears of an alert: the routing settings every Alertmanager config renders from.

    routing = Routing.from_yaml(Path("alertmanager/routing.yml"))
    alertmanager_config("http://sidecar:8000", routing, secrets_dir="/secrets")

Each alert has one *class*, given by its `severity` label (`CLASSES`):

- `page` (critical): a person must act now (a run diverged, crashed or hangs; the stack lost data);
- `notify` (warning): the run's owner should look (drift, spikes, a preemption, a degraded stack);
- `record` (anything else): stored, shown next to the run, sent to no one.

Every receiver also posts to the sidecar's webhook, so whatever notifies is recorded. The
Watchdog goes to the dead man's switch. A class without a destination in `alertmanager/routing.yml`
reaches the sidecar only: nothing leaves the host until an operator names a receiver there.
Destinations read their URL from a file (a secret), never from the config itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

CLASSES = {"critical": "page", "warning": "notify"}
"""`severity` -> class; any other severity is `record` (the Watchdog's `none` goes to `deadman`)."""
RECORD, DEADMAN = "record", "deadman"
WATCHDOG = "GRPOWatchdog"
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_KINDS = ("webhook", "slack")


@dataclass(kw_only=True, slots=True, frozen=True)
class Destination:
    """One place a class of alerts goes besides the sidecar: a webhook (chat bridge, paging service) or Slack."""

    kind: str
    """`webhook` (Alertmanager's JSON payload, version 4, POSTed to the URL) or `slack` (an incoming webhook)."""
    url_file: str
    """The file holding the URL, relative to the deployment's secrets directory (compose: the `secrets`
    volume, filled from ./secrets; local: `--secrets-dir`; Helm: the `alerting.secret` Secret). A URL
    is a credential: it never appears in a generated file."""
    channel: str | None = None
    """Slack only: the channel to post in (default: the webhook's own)."""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"destination kind must be one of {_KINDS}, got {self.kind!r}")
        if not self.url_file or self.url_file.startswith("/") or ".." in Path(self.url_file).parts:
            raise ValueError(f"url_file must be a file name inside the secrets directory, got {self.url_file!r}")
        if self.channel is not None and self.kind != "slack":
            raise ValueError("channel is for kind: slack only")


@dataclass(kw_only=True, slots=True, frozen=True)
class Routing:
    """Receivers and repeat intervals per class (docs/operations.md, "Routing, receivers and inhibitions")."""

    page: Destination | None = None
    """Where `critical` alerts page (None: the sidecar only)."""
    notify: Destination | None = None
    """Where `warning` alerts notify the run's owner (None: the sidecar only)."""
    deadman: Destination | None = None
    """The dead man's switch the Watchdog pings every `deadman_repeat` (None: the sidecar only, which shows
    when it last arrived)."""
    page_repeat: str = "12h"
    """A page still firing is sent again after this: a crash nobody resumed pages at once, then once more
    the next shift; it resolves when the run is resumed or forgotten (`absent_window`, 1d)."""
    notify_repeat: str = "24h"
    record_repeat: str = "4h"
    """The sidecar's copy of record-only alerts is refreshed this often (it survives a sidecar's restart)."""
    deadman_repeat: str = "5m"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_repeat") and not _DURATION.match(value):
                raise ValueError(f"{f.name}: {value!r} is not a duration (e.g. 12h)")

    @classmethod
    def from_yaml(cls, path: Path) -> "Routing":
        """Routing from a YAML mapping (`page: {kind: slack, url_file: page_url, channel: "#grpo-oncall"}`);
        ValueError naming the file and the bad key."""
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ValueError(f"routing {path}: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"routing {path}: expected a mapping of {[f.name for f in fields(cls)]}")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"routing {path}: unknown settings {sorted(unknown)}")
        try:
            for name in ("page", "notify", DEADMAN):
                if data.get(name) is not None:
                    data[name] = Destination(**data[name])
            return cls(**data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"routing {path}: {e}") from None


def class_of(labels: dict[str, str]) -> str:
    """The class of an alert with these labels: the receiver the routing tree sends it to."""
    if labels.get("alertname") == WATCHDOG:
        return DEADMAN
    return CLASSES.get(labels.get("severity", ""), RECORD)


ROUTING_FILE = "alertmanager/routing.yml"
"""The one file an operator edits to name receivers; `otel-grpo dashboards` renders compose's and the Helm
chart's Alertmanager config from it, `otel-grpo up --routing` the local one."""


def load_routing(root: Path) -> Routing:
    """The routing of the checkout at `root` (its `ROUTING_FILE`), the defaults where it has none."""
    path = root / ROUTING_FILE
    return Routing.from_yaml(path) if path.exists() else Routing()


__all__ = ["CLASSES", "DEADMAN", "RECORD", "ROUTING_FILE", "Destination", "Routing", "class_of", "load_routing"]
