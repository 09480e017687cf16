"""`otel-grpo` command line: one module per command group, registered on one typer app."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from .._extras import MissingExtra
from .._setting_errors import SettingsError
from ._app import app, speaker
from . import sidecar as _sidecar, stack as _stack, train as _train  # noqa: F401  (register commands)
from . import follow as _follow  # noqa: F401  (register the command)
from . import replay as _replay  # noqa: F401  (register the command)

__all__ = ["app", "main"]


def _one_line(error: ValidationError) -> str:
    """The first problem of a settings error, as `name: message` (flags and env vars share names)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or error.title
    return f"invalid setting {where}: {first['msg']}"


def main() -> None:
    """Console-script entry point: a bad flag or setting ends in one readable line and exit 2, a missing
    extra in one line naming it and exit 1: neither a traceback nor click's usage box."""
    if not sys.argv[1:]:
        app()  # no command: the help (typer's own handling)
    try:
        code = app(standalone_mode=False)  # click's errors come here, not to typer's box
        raise SystemExit(code if isinstance(code, int) else 0)
    except typer.Abort:
        print(f"{speaker()}: aborted", file=sys.stderr)
        raise SystemExit(1) from None
    except typer.TyperException as error:  # a usage error: unknown option, bad value, missing argument
        message = " ".join(error.format_message().split())
        print(f"{speaker()}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(getattr(error, "exit_code", 2)) from None
    except ValidationError as error:
        print(f"{speaker()}: {_one_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    except SettingsError as error:  # names the variable the user set (OTEL_EXPORTER_OTLP_PROTOCOL=foo)
        print(f"{speaker()}: invalid setting {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except MissingExtra as error:
        print(f"{speaker()}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
