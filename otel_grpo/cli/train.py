"""`otel-grpo train`: run the demo GRPO trainer (single process, or under torchrun)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from .._extras import require
from ._app import app, fail
from ._paths import os_error_line, path_problem


def _overrides(
    sets: list[str], preset_steps: int | None, output_dir: Path | None, run_id: str | None, resume: bool,
    faults: list[str], telemetry: bool | None, seed: int | None, progress: bool | None, step_delay: float | None,
) -> list[str]:
    """Common flags as `key=value` overrides, applied after `--config` and before `--set`."""
    out: list[str] = []
    # An empty run id is "none given" (compose passes `--run-id "${RUN_ID:-}"`): one is generated.
    flags = {"steps": preset_steps, "output_dir": output_dir, "run_id": run_id or None, "seed": seed,
             "telemetry": telemetry, "progress": progress, "min_step_seconds": step_delay}
    for key, value in flags.items():
        if value is not None:
            out.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    if resume:
        out.append("resume=true")
    if faults:
        out.append("faults.inject=[" + ",".join(repr(f) for f in faults) + "]")
    return out + list(sets)


@app.command()
def train(
    preset: Annotated[Optional[str], typer.Option(help="Starting point: demo (CPU, ~1-2 min), gpu (bigger, bf16), or tiny (tests).")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML file of TrainConfig fields.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override KEY=VALUE (dotted, repeatable): --set grpo.beta=0.04")] = [],
    steps: Annotated[Optional[int], typer.Option(help="GRPO steps.")] = None,
    output_dir: Annotated[Optional[Path], typer.Option(help="Run directory: metrics.jsonl, samples, checkpoint.")] = None,
    run_id: Annotated[Optional[str], typer.Option(help="Run id (default: generated, or the checkpoint's).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the checkpoint in --output-dir (or runs/<--run-id>): its weights, step and run id. Without a checkpoint there, an error naming the directory; leave --resume off to start a fresh run.")] = False,
    fault: Annotated[list[str], typer.Option(help="Inject KIND@STEP (repeatable): kl-spike, rollout-drift, stall, nan, bad-batch.")] = [],
    telemetry: Annotated[Optional[bool], typer.Option("--telemetry/--no-telemetry", help="Emit through OpenTelemetry.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed.")] = None,
    progress: Annotated[Optional[bool], typer.Option("--progress/--no-progress", help="Show progress: a bar on a terminal, else a line every 10 s (step, reward, KL, clip ratio).")] = None,
    step_delay: Annotated[Optional[float], typer.Option(help="Minimum seconds per step (so scrapers see each step).")] = None,
) -> None:
    """Train a small transformer with GRPO on a verifiable digit task, fully instrumented."""
    if output_dir is not None and (problem := path_problem(output_dir, "--output-dir", directory=True)):
        fail(problem)  # before torch loads: seconds sooner
    require("trainer")
    from otel_grpo.trainer import ConfigError, GRPOTrainer, load_config

    overrides = _overrides(set_, steps, output_dir, run_id, resume, fault, telemetry, seed, progress, step_delay)
    try:
        cfg = load_config(preset=preset, yaml_path=config, overrides=overrides)
    except ConfigError as exc:
        fail(f"invalid config: {exc}", 2)
    # The run directory (output_dir from --config or --set, else under runs/) must be one we can write.
    where, flag = (output_dir, "--output-dir") if output_dir is not None else (
        (Path(cfg.output_dir), "output_dir") if cfg.output_dir else (Path("runs"), "output_dir (runs/<run_id>)"))
    if problem := path_problem(where, flag, directory=True):
        fail(problem)
    try:
        trainer = GRPOTrainer(cfg)  # also a ConfigError: a device this machine lacks, --resume without a checkpoint
    except ConfigError as exc:
        fail(f"invalid config: {exc}", 2)
    except OSError as exc:  # what path_problem cannot foresee: /proc refusing a directory, a race
        fail(os_error_line(exc, where, flag))
    result = trainer.train()
    ranks = trainer.acc.num_processes
    # Leave the process group only after train() returned: a rank that raised may leave a peer inside a collective.
    trainer.acc.end_training()
    if result.history and result.is_main:
        last = result.history[-1]
        typer.echo(
            f"run {result.run_id}: steps {result.start_step}..{result.last_step}, reward {last.get('reward', float('nan')):.3f}, "
            f"kl {last.get('kl', float('nan')):.4f}{' (interrupted)' if result.interrupted else ''} -> {result.output_dir}",
            err=True,
        )
    if ranks > 1:
        end_rank_process()


def end_rank_process() -> NoReturn:
    """End a torchrun rank's process now, without the interpreter's teardown.

    Call it once the run is written (`train()` returned: telemetry shut down, files closed); logging
    and stdio are flushed here. Leaving the process group is not enough to exit cleanly: torch keeps a
    DDP model's gloo group, and its worker threads, alive past `destroy_process_group`, and a C++
    thread that touches a Python object while the interpreter finalizes aborts the rank (SIGABRT,
    "terminate called without an active exception", pytorch/pytorch#190489), after which torchrun
    fails the whole job. Seen under load only.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
