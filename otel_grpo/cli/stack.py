"""`otel-grpo up`, `otel-grpo demo` and `otel-grpo dashboards`: the stack without Docker."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

import typer

from .._extras import require
from .._stop_request import StopRequest
from ._app import app, fail
from ._paths import os_error_line, path_problem

_DIR = typer.Option(Path(".demo"), "--dir", help="Generated configs, data and logs.")
_SIDECAR = typer.Option(8000, help="Sidecar port.")
_PROM = typer.Option(9090, help="Prometheus port.")
_AM = typer.Option(9093, help="Alertmanager port.")
_TRAINER = typer.Option(9464, help="Port of the trainer's /metrics endpoint (scraped by Prometheus).")


def _settings(dir: Path, sidecar_port: int, prometheus_port: int, alertmanager_port: int, trainer_port: int,
              routing: Optional[Path] = None, secrets_dir: Path = Path("secrets")):
    from otel_grpo.generate import Routing
    from otel_grpo.stack import StackSettings

    try:
        receivers = Routing.from_yaml(routing) if routing else Routing()
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--routing") from None
    try:
        return StackSettings(dir=dir, sidecar_port=sidecar_port, prometheus_port=prometheus_port,
                             alertmanager_port=alertmanager_port, trainer_metrics_port=trainer_port,
                             routing=receivers, secrets_dir=secrets_dir)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def _start(settings, stop: StopRequest):
    """Start the stack, or exit 1 with the one-line reason (e.g. how to install Prometheus); 130 once `stop` is
    requested (Ctrl-C, or a supervisor's SIGTERM, even mid-start), having stopped the components started so
    far (the default action would leave them running orphaned)."""
    from otel_grpo.stack import LocalStack, StackError

    problem = path_problem(settings.dir, "--dir", directory=True)
    if problem:
        fail(problem)
    stack = LocalStack(settings)
    # A loaded machine takes a minute or more to get all three ready: say so before the wait.
    typer.echo(f"starting the sidecar, Alertmanager and Prometheus (logs: {settings.dir / 'logs'}) ...")
    try:
        return stack.start(stop)
    except StackError as e:
        fail(str(e))
    except KeyboardInterrupt:
        stack.stop()  # idempotent: start() stops what it started
        typer.echo("interrupted.", err=True)
        raise typer.Exit(130) from None
    except OSError as e:  # /proc/foo: the kernel refuses what looked writable
        stack.stop()
        fail(os_error_line(e, settings.dir, "--dir"))


def _print_urls(stack) -> None:
    """What the stack runs (which Prometheus and Alertmanager, their versions) and its URLs."""
    typer.echo(f"otel-grpo stack is up, {stack.backends_line()}:")
    for name, url in stack.urls.items():
        typer.echo(f"  {name:<16} {url}")


def _print_trainer_env(stack) -> None:
    """The environment block that points a trainer using otel_grpo.telemetry at this stack."""
    typer.echo("Point a trainer at it (paste into its shell):")
    for key, value in stack.settings.trainer_env().items():
        typer.echo(f"  export {key}={value}")


def _serve_until_interrupted(stack, stop: StopRequest) -> None:
    """Block until Ctrl-C or SIGTERM (`stop`), checking that the components stay up."""
    from otel_grpo.stack import StackError

    typer.echo("The stack serves these until Ctrl-C.")
    try:
        while not stop.wait(1.0):
            stack.check_alive()
    except StackError as e:
        fail(str(e))


@app.command()
def up(dir: Path = _DIR, sidecar_port: int = _SIDECAR, prometheus_port: int = _PROM,
       alertmanager_port: int = _AM, trainer_metrics_port: int = _TRAINER,
       routing: Optional[Path] = typer.Option(
           None, envvar="OTEL_GRPO_ROUTING",
           help="Who receives which alerts: alertmanager/routing.yml, the file compose's and the Helm chart's "
                "Alertmanager configs are rendered from (docs/operations.md). Default: every alert to the "
                "sidecar only."),
       secrets_dir: Path = typer.Option(Path("secrets"), help="Where the routing's url_file names are.")) -> None:
    """Start the sidecar, Prometheus and Alertmanager on 127.0.0.1 until Ctrl-C.

    It prints the environment that points a trainer at it: step history and samples go to the
    sidecar over OTLP/HTTP (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:<sidecar port>/v1/traces), metrics to
    a /metrics endpoint on the trainer that Prometheus scrapes (OTEL_GRPO_METRICS_EXPORTERS=prometheus,
    OTEL_GRPO_PROMETHEUS_PORT=<trainer metrics port>).
    """
    require("sidecar")
    settings = _settings(dir, sidecar_port, prometheus_port, alertmanager_port, trainer_metrics_port, routing,
                         secrets_dir)
    with StopRequest().installed() as stop:
        stack = _start(settings, stop)
        try:
            _print_urls(stack)
            _print_trainer_env(stack)
            _serve_until_interrupted(stack, stop)
        finally:
            stack.stop()
            typer.echo("stopped.")


@app.command()
def demo(
    steps: Optional[int] = typer.Option(None, help="Training steps (default: the preset's)."),
    fault: List[str] = typer.Option([], "--fault", help="Inject a fault, KIND@STEP (kl-spike, rollout-drift, stall, nan, bad-batch); repeatable."),
    run_id: Optional[str] = typer.Option(None, help="Run id (default: demo-<UTC time>)."),
    exit_: bool = typer.Option(False, "--exit", help="Stop the stack when the run ends instead of waiting for Ctrl-C."),
    trainer_log: Optional[Path] = typer.Option(None, help="Write the trainer's output here instead of the terminal."),
    trainer_arg: List[str] = typer.Option([], "--trainer-arg", help="Pass an argument on to `otel-grpo train` (write --trainer-arg=--flag); repeatable."),
    dir: Path = _DIR, sidecar_port: int = _SIDECAR, prometheus_port: int = _PROM,
    alertmanager_port: int = _AM, trainer_metrics_port: int = _TRAINER,
) -> None:
    """Start the stack, train the demo GRPO model against it, print a summary."""
    require("sidecar")
    require("trainer")
    from otel_grpo.stack import DemoSettings, format_summary, run_demo

    settings = _settings(dir, sidecar_port, prometheus_port, alertmanager_port, trainer_metrics_port)
    try:
        demo_settings = DemoSettings(steps=steps, faults=tuple(fault), trainer_log=trainer_log,
                                     trainer_args=tuple(trainer_arg),
                                     **({"run_id": run_id} if run_id else {}))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if trainer_log is not None and (problem := path_problem(trainer_log, "--trainer-log")):
        fail(problem, 2)  # before the stack starts: the log is opened once it is up
    with StopRequest().installed() as stop:
        stack = _start(settings, stop)
        try:
            _print_urls(stack)
            summary = run_demo(stack, demo_settings, stop)
            typer.echo("")
            typer.echo(format_summary(summary, live=not exit_))  # live: the run's pages, served below
            if not exit_:
                _serve_until_interrupted(stack, stop)
            if summary.trainer_exit_code != 0:
                raise typer.Exit(summary.trainer_exit_code)
        except KeyboardInterrupt:  # `stop` requested while the demo trained
            typer.echo("interrupted.")
        finally:
            stack.stop()
            typer.echo("stopped.")


_GENERATED_MARK = "by `otel-grpo dashboards`"  # docs/signals.md's second line, in every folder it generated


def _root_problem(root: Path) -> str | None:
    """Why `dashboards` must not write into `root`, or None: it writes into an otel-grpo checkout (its
    pyproject.toml names otel-grpo), a folder it generated before (its docs/signals.md says so) or an empty one,
    never over the same-named files of a project of the user's own (prometheus/prometheus.yml, docs/alerts.md)."""
    pyproject, signals = root / "pyproject.toml", root / "docs" / "signals.md"
    if pyproject.is_file() and re.search(r'^name\s*=\s*"otel-grpo"\s*$', pyproject.read_text(errors="replace"), re.M):
        return None
    if signals.is_file() and _GENERATED_MARK in signals.read_text(errors="replace")[:500]:
        return None
    if not any(root.iterdir()):
        return None
    return (f"--root {root}: not an otel-grpo checkout (no pyproject.toml of otel-grpo there) nor a folder it "
            "generated into; to generate the files elsewhere, give --root an empty directory")


@app.command()
def dashboards(
    root: Path = typer.Option(Path("."), exists=True, file_okay=False,
                              help="Where to write: an otel-grpo checkout, a folder generated into before, or an "
                                   "empty directory (to generate the files elsewhere); any other folder is refused."),
    check: bool = typer.Option(False, help="Only compare; exit 1 if a committed file is out of date."),
    rule_settings: Optional[Path] = typer.Option(
        None, envvar="OTEL_GRPO_RULE_SETTINGS",
        help="YAML of alert thresholds and windows (RuleSettings fields, `overrides` per run_id); "
             "see docs/operations.md. The training process reads the same variable (adaptive retention). "
             "Default: the documented defaults."),
) -> None:
    """Regenerate the Grafana dashboards, the Prometheus/Alertmanager files, the promtool tests, the Helm chart's files and the generated docs (docs/signals.md, docs/integrations.md, docs/alerts.md) from the catalog."""
    from otel_grpo.generate import RuleSettings, generated_files

    try:
        settings = RuleSettings.from_yaml(rule_settings) if rule_settings else None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--rule-settings") from None
    problem = _root_problem(root)
    if problem:
        fail(problem, 2)
    stale = []
    for rel, text in generated_files(root.resolve(), settings).items():
        path = root / rel
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(rel)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    verb = "out of date" if check else "written"
    typer.echo(f"{len(stale)} file(s) {verb}" + (": " + ", ".join(stale) if stale else ""))
    if check and stale:
        raise typer.Exit(1)
