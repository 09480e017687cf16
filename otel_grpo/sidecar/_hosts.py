"""Host-header check against DNS rebinding.

A web page on `evil.example` can make its own name resolve to the sidecar's address (127.0.0.1
or a LAN/container address) and then read `/api/...` as a same-origin page. The browser still
sends `Host: evil.example`, so the sidecar answers only to names that cannot be rebound from
outside: IP literals, `localhost` (and `*.localhost`), single-label names (compose service names
such as `sidecar`, the machine's short name) and the names in `allowed_hosts` (`*`: any;
`*.example.org`: any one label before `example.org`, as a Kubernetes Ingress host reads it).

    app.add_middleware(HostCheckMiddleware, allowed=["sidecar.example.org"])
"""

from __future__ import annotations

import ipaddress
import json


def _hostname(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [v6]:port
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Whether a request with this Host header may be served."""
    if "*" in allowed:
        return True
    name = _hostname(host).rstrip(".")
    if not name or name in allowed:
        return True
    # `*.example.org` as a Kubernetes Ingress host (the chart copies those here): exactly one label
    # in place of `*`, so `a.example.org` matches and neither `example.org` nor `a.b.example.org` does.
    label, _, parent = name.partition(".")
    if label and parent and f"*.{parent}" in allowed:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return "." not in name or name == "localhost" or name.endswith(".localhost")


class HostCheckMiddleware:
    """Answers 421 to a request whose Host header names a host the sidecar does not serve."""

    def __init__(self, app, allowed: list[str]) -> None:
        self.app = app
        self.allowed = frozenset(a.strip().lower().rstrip(".") for a in allowed)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not host_allowed(host, self.allowed):
                body = json.dumps({"detail": f"Host {host!r} is not served here (DNS rebinding guard): add it to "
                                             "OTEL_GRPO_SIDECAR_ALLOWED_HOSTS"}).encode()
                await send({"type": "http.response.start", "status": 421,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
