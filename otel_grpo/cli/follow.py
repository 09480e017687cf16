"""`otel-grpo follow`: re-emit a running job's own log files (verl, TRL, any step JSONL) as otel-grpo telemetry."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from .._stop_request import StopRequest
from ._app import app, fail, speaker

_STATE_DIR = Path(".otel-grpo-follow")
JsonlNames = Literal["none", "trl", "verl", "maxent"]
"""--source's choices: none, or one of the catalog's peers (`catalog.PEERS`, which a test holds this to; not imported
here, so that every `otel-grpo` command starts without loading the catalog)."""


def _weights(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        weights = [math.nan]
    if not all(map(math.isfinite, weights)):  # a NaN weight makes every total reward NaN
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of finite numbers",
                                 param_hint="--trl-reward-weights")
    return weights


def _default_run_id(verl_metrics: Path | None, trl_output: Path | None, jsonl: Path | None) -> str:
    """verl's experiment name (its file logger writes `<experiment>.jsonl`), else the TRL dir's or JSONL's name."""
    for path in (verl_metrics, jsonl):
        if path is not None:
            return path.stem
    assert trl_output is not None
    return trl_output.resolve().name


@app.command()
def follow(
    verl_metrics: Annotated[Optional[Path], typer.Option(envvar="OTEL_GRPO_FOLLOW_VERL_METRICS", readable=False, help="verl's file-logger JSONL (trainer.logger=[...,'file']; VERL_FILE_LOGGER_PATH, or <VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl).")] = None,
    verl_rollouts: Annotated[Optional[Path], typer.Option(envvar="OTEL_GRPO_FOLLOW_VERL_ROLLOUTS", readable=False, help="verl's trainer.rollout_data_dir: <step>.jsonl generation dumps, sent as sample records.")] = None,
    verl_total_steps: Annotated[Optional[int], typer.Option(envvar="OTEL_GRPO_FOLLOW_VERL_TOTAL_STEPS", min=1, help="The job's total training steps (verl prints 'Total training steps: N'): the run is finished once its metrics reach this step.")] = None,
    trl_output: Annotated[Optional[Path], typer.Option(envvar="OTEL_GRPO_FOLLOW_TRL_OUTPUT", readable=False, help="A TRL GRPOConfig.output_dir: completions/*.parquet (log_completions=True) and trainer_state.json.")] = None,
    trl_reward_weights: Annotated[Optional[str], typer.Option(envvar="OTEL_GRPO_FOLLOW_TRL_REWARD_WEIGHTS", help="TRL's reward_weights, comma-separated, for the total reward of a sample (default: 1 each, TRL's default).")] = None,
    jsonl: Annotated[Optional[Path], typer.Option(envvar="OTEL_GRPO_FOLLOW_JSONL", readable=False, help="Any JSONL of {\"step\": N, name: number, ...} lines.")] = None,
    jsonl_source: Annotated[JsonlNames, typer.Option("--source", envvar="OTEL_GRPO_FOLLOW_SOURCE", help="Whose names --jsonl's lines use: none (our keys and OTel names, as log_metrics takes them), or trl, verl, maxent (that framework's logged names, through the catalog's aliases; with trl, each training line's numbers also as logged, grpo.trl.logged, and a line of eval_ keys is an evaluation).")] = "none",
    checkpoints: Annotated[Optional[Path], typer.Option(envvar="OTEL_GRPO_FOLLOW_CHECKPOINTS", readable=False, help="The folder the job saves its checkpoints into (verl's trainer.default_local_dir; --trl-output's folder is watched anyway): a change there, looked for every 5 s, is a heartbeat, so a long save is not taken for a stall.")] = None,
    run_id: Annotated[Optional[str], typer.Option(envvar="OTEL_GRPO_FOLLOW_RUN_ID", help="Run id (default: OTEL_GRPO_RUN_ID, else the verl experiment / JSONL file name, or the TRL output dir's name).")] = None,
    from_start: Annotated[bool, typer.Option("--from-start", envvar="OTEL_GRPO_FOLLOW_FROM_START", help="Read what the files already hold; by default only what is written from now on (a saved state always wins).")] = False,
    finished: Annotated[bool, typer.Option("--finished", envvar="OTEL_GRPO_FOLLOW_FINISHED", help="The run is over: read everything (implies --from-start), mark it finished (grpo.run.finished) and exit.")] = False,
    state: Annotated[Optional[Path], typer.Option(envvar="OTEL_GRPO_FOLLOW_STATE", help="Where the resume offsets are kept (default .otel-grpo-follow/<run id>.json).")] = None,
    poll: Annotated[float, typer.Option(envvar="OTEL_GRPO_FOLLOW_POLL", min=0.01, max=60.0, help="Seconds between polls when nothing is new (at most 60: a longer one reads a live job's steps late).")] = 0.5,
    pair_wait: Annotated[float, typer.Option(envvar="OTEL_GRPO_FOLLOW_PAIR_WAIT", min=0.0, max=3600.0, help="Seconds a verl step's metrics wait for its rollout dump (and the reverse), at most 3600.")] = 10.0,
) -> None:
    """Follow a job's own log files and re-emit them through Telemetry, with no change to its code.

    Scalars go out as gauges (verl and TRL names through the catalog aliases; unknown names
    as grpo.extra.*), verl's timing_s/* as phases, rollout dumps and TRL completions as sample
    records. Exporters come from the OTEL_GRPO_* / OTEL_* environment, as for a trainer.

    Resumes from the saved state after a restart (one follower per state file; the position is
    saved only once the exporters took what was sent); Ctrl-C or SIGTERM stops after flushing.

    The run is marked finished only when the files show it ended (verl reaching
    --verl-total-steps, TRL's end-of-training summary or final checkpoint) or with --finished.
    A change in the folder the job saves checkpoints into (--checkpoints, and --trl-output's)
    is a heartbeat: a long save is work to the stall alerts, a hung job writes nothing.

    Every option can also come from OTEL_GRPO_FOLLOW_<OPTION> (e.g. OTEL_GRPO_FOLLOW_VERL_METRICS).
    """
    from otel_grpo.integrations.follow import (FollowOptions, Follower, JsonlStream, State, TrlOutput, VerlMetrics,
                                               VerlRollouts, start)

    if not (verl_metrics or verl_rollouts or trl_output or jsonl):
        fail("nothing to follow: give --verl-metrics, --verl-rollouts, --trl-output or --jsonl", 2)
    for flag, given, directory in (("--verl-metrics", verl_metrics, False), ("--verl-rollouts", verl_rollouts, True),
                                   ("--trl-output", trl_output, True), ("--jsonl", jsonl, False),
                                   ("--checkpoints", checkpoints, True)):
        if given is not None and given.exists() and given.is_dir() != directory:  # not yet there is fine (live)
            fail(f"{flag} {given}: is a {'file' if directory else 'directory'}, not a "
                 f"{'directory' if directory else 'file'}", 2)
    if jsonl_source != "none" and jsonl is None:
        fail(f"--source {jsonl_source}: says whose names --jsonl's lines use; give --jsonl (--verl-metrics and "
             "--trl-output know their own)", 2)
    weights = _weights(trl_reward_weights)
    if weights is not None and trl_output is None:
        fail("--trl-reward-weights: weighs the reward functions of --trl-output's completions; give --trl-output", 2)
    if finished:
        for given, directory in ((verl_metrics, False), (verl_rollouts, True), (trl_output, True), (jsonl, False)):
            if given is not None and not given.exists():
                fail(f"--finished: {given} does not exist (a finished run's files are all there)", 2)
            if given is not None and not directory and not given.is_file():  # /dev/null, a FIFO: no finished file
                fail(f"--finished: {given} is not a regular file (a finished run's files are all there)", 2)
    sources = []
    if verl_metrics:
        sources.append(VerlMetrics(verl_metrics, total_steps=verl_total_steps))
    if verl_rollouts:
        sources.append(VerlRollouts(verl_rollouts, settle_s=0.0 if finished else 2.0))
    if trl_output:
        try:
            sources.append(TrlOutput(trl_output, weights))
        except ValueError as exc:
            fail(str(exc), 2)
    if jsonl:
        sources.append(JsonlStream("jsonl", jsonl, source=None if jsonl_source == "none" else jsonl_source))
    # Where the files end now, before the slow set-up below (the exporters' modules, the exporters): lines the
    # job writes from here on are read. Saved with the run's state as soon as it is known (a saved state wins).
    for source in sources:
        source.restore(None, from_start or finished)

    from otel_grpo.catalog.spans import check_run_id
    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    run_id = run_id or TelemetrySettings.environment().get("run_id")  # --run-id, else OTEL_GRPO_RUN_ID
    if verl_rollouts and not (verl_metrics or run_id):
        fail("--verl-rollouts alone needs --run-id", 2)
    run = run_id or _default_run_id(verl_metrics, trl_output, jsonl)
    try:  # before its state file, which it names, is touched
        check_run_id(run)
    except ValueError as exc:
        fail(f"{exc}; give another with --run-id", 2)
    state_path = state or _STATE_DIR / f"{run}.json"
    try:
        saved = State.load(state_path)
        saved.lock()
    except ValueError as exc:
        fail(str(exc), 2)
    if saved.run_id not in (None, run):
        fail(f"state file {state_path} belongs to run {saved.run_id!r}, not {run!r} (give --state)", 2)
    saved.run_id = run
    start(sources, saved)
    tel = Telemetry.from_env(run_id=run, defaults={"output_dir": str(state_path.parent / run)})
    writes = [path for path in (checkpoints, trl_output) if path is not None]  # TRL saves into its output dir
    follower = Follower(tel, sources, saved, FollowOptions(poll_s=poll, pair_wait_s=pair_wait),
                        from_start=from_start or finished, writes=writes)
    for given in (verl_metrics, verl_rollouts, trl_output, jsonl):
        if given is not None and not given.exists():  # a live run may not have written it yet; a typo never will
            typer.echo(f"{speaker()}: {given} does not exist yet; waiting for it (read from its start)", err=True)
    if checkpoints is not None and not checkpoints.exists():  # before the job's first save; a typo stays silent
        typer.echo(f"{speaker()}: {checkpoints} does not exist yet; saves into it will be heartbeats once it does",
                   err=True)
    with StopRequest().installed() as stop:
        ended = follower.run(stop, drain=finished)
    if ended:
        tel.finish()
    else:
        tel.shutdown()
    how = "run finished" if ended else "stopped; the run stays live"
    typer.echo(f"{speaker()}: run {run}: {follower.emitted} steps emitted, "
               f"{follower.malformed} bad lines or files skipped; {how}", err=True)
