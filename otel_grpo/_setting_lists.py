"""A list setting from its environment variable: a comma list, as the OpenTelemetry variables write them.

    comma_list("sidecar.example.org, grafana.example.org")   # ['sidecar.example.org', 'grafana.example.org']
    comma_list('["sidecar.example.org"]')                     # a JSON array too (the Helm chart writes one)

pydantic-settings reads a `list[...]` field's variable as JSON only, so `OTEL_GRPO_SIDECAR_ALLOWED_HOSTS=a.example`
would be refused as "error parsing value"; a field annotated `NoDecode` gets the text and this splits it.
"""

from __future__ import annotations

import json


def comma_list(value: object) -> object:
    """The items of "a,b" (blanks dropped) or of a JSON array; anything but text passes unchanged."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError(f"{value!r} is neither a JSON array nor a comma list") from None
    return [part.strip() for part in value.split(",") if part.strip()]
