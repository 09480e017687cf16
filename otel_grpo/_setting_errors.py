"""One readable line for a settings error, naming what the user set: the argument or the variable.

    try:
        super().__init__(**values)
    except ValidationError as error:
        raise SettingsError.of(error, type(self), values) from None
    # SettingsError: OTEL_EXPORTER_OTLP_PROTOCOL=foo: Input should be 'grpc' or 'http/protobuf'

pydantic's own message lists every problem over several lines and names a field by its first
alias (`OTEL_GRPO_OTLP_PROTOCOL`), even when the value came from `OTEL_EXPORTER_OTLP_PROTOCOL`.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from pydantic import AliasChoices, ValidationError


class SettingsError(ValueError):
    """A bad setting; the message is one line: `where=value: what is wrong`."""

    @classmethod
    def of(cls, error: ValidationError, settings_cls: type, given: Mapping[str, Any]) -> SettingsError:
        first = error.errors()[0]
        loc = str(first["loc"][0]) if first["loc"] else ""
        field, names = _field(settings_cls, loc)
        where = field or loc or settings_cls.__name__
        if field in given:  # an argument wins over the environment
            where = f"{field}={given[field]!r}"
        else:
            env = {k.upper(): v for k, v in os.environ.items()}
            set_here = next((n for n in names if n.upper() in env), None)
            if set_here is not None:
                where = f"{set_here}={env[set_here.upper()]}"
        more = len(error.errors()) - 1
        tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        message = first["msg"].removeprefix("Value error, ")  # our own validators' messages name the field
        if first["type"] == "extra_forbidden":  # a misspelt argument: pydantic's "Extra inputs are not permitted"
            message = f"not a setting of {settings_cls.__name__}"
        return cls(f"{where}: {message}{tail}")


def _field(settings_cls: type, loc: str) -> tuple[str | None, list[str]]:
    """The field `loc` names (its name or one of its aliases), and the variables that set it."""
    prefix = getattr(settings_cls, "model_config", {}).get("env_prefix", "")
    for name, info in getattr(settings_cls, "model_fields", {}).items():
        alias = info.validation_alias
        names = [str(c) for c in alias.choices] if isinstance(alias, AliasChoices) else [str(alias)] if alias else []
        if not names:
            names = [f"{prefix}{name}".upper()]
        if loc == name or loc in names:
            return name, names
    return None, []
