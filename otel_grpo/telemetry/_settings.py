"""`TelemetrySettings`: every knob of the emission layer, from code or `OTEL_GRPO_*` / `OTEL_*` variables.

    settings = TelemetrySettings(run_id="exp-42", metrics_exporters=["prometheus"])
    settings = TelemetrySettings()          # everything from the environment

Fields read `OTEL_GRPO_<FIELD>`; the fields that mirror a standard OpenTelemetry
variable (`otlp_endpoint`, `otlp_protocol`, ...) read that variable as well, so a
collector configured the usual way needs no otel-grpo specific set-up.
"""

from __future__ import annotations

import math
import os
import urllib.parse
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

from .. import catalog
from .._setting_errors import SettingsError
from .._setting_lists import comma_list

Exporter = Literal["otlp", "prometheus", "console", "none"]
Protocol = Literal["grpc", "http/protobuf"]

# The SDK drops span events beyond 128 per span (oldest first); chunks stay below it.
SDK_EVENT_LIMIT = 128


def is_http_url(value: str) -> bool:
    """`value` is an http:// or https:// URL with a host (what an OTLP/HTTP endpoint must be)."""
    parts = urllib.parse.urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{uuid.uuid4().hex[:6]}"


def _env_alias(field: str, *standard: str) -> AliasChoices:
    """Our prefixed variable first, then the standard OTel ones (the first set wins)."""
    return AliasChoices(f"OTEL_GRPO_{field.upper()}", *standard)


def _exporter_list(value: object) -> object:
    # Environment values arrive as "otlp,prometheus" (any case); code passes lists.
    value = comma_list(value)
    return [part.lower() if isinstance(part, str) else part for part in value] if isinstance(value, list) else value


def _parse_pairs(value: object) -> object:
    # Same syntax as OTEL_RESOURCE_ATTRIBUTES: "key=value,key2=value2". An item that is not key=value is an
    # error, not left out: `kl:1` for `kl=1` silently switched a threshold off.
    if isinstance(value, str):
        out = {}
        for item in filter(str.strip, value.split(",")):
            key, sep, said = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"{item.strip()!r} is not key=value (items are separated by commas)")
            out[key.strip()] = said.strip()
        return out
    return value


class TelemetrySettings(BaseSettings):
    """Configuration of `Telemetry`; see each field. Validated on construction."""

    # An empty variable is unset, as the OpenTelemetry specification has it for its own (compose's
    # `${RUN_ID:-}` sets one empty when the user gave none).
    model_config = SettingsConfigDict(
        env_prefix="OTEL_GRPO_", extra="forbid", populate_by_name=True, validate_default=True, env_ignore_empty=True
    )

    def __init__(self, **values: Any) -> None:
        """Raises `SettingsError` (a ValueError), one line naming the argument or variable that is wrong."""
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise SettingsError.of(error, type(self), values) from None

    run_id: str = Field(default_factory=_new_run_id)
    """Identifies the run: attribute `run_id` on every data point, `grpo.run_id` on spans; 1-128 characters,
    `/` allowed, no `..` (it names the run directory; rules: `catalog.spans.check_run_id`)."""
    service_name: str = Field(
        default_factory=lambda: os.environ.get("OTEL_SERVICE_NAME") or "grpo-trainer",
        validation_alias=_env_alias("service_name"),
    )
    """Resource `service.name`; defaults to `OTEL_SERVICE_NAME`, else "grpo-trainer"."""
    model_name: str | None = None
    """Resource `grpo.model` (the policy being trained), when known."""

    metrics_exporters: Annotated[list[Exporter], NoDecode] = ["otlp"]
    """Where metrics go: any of otlp, prometheus (pull endpoint), console; or ["none"]."""
    traces_exporters: Annotated[list[Exporter], NoDecode] = ["otlp"]
    """Where spans (step history, phases, samples) go: any of otlp, console; or ["none"]."""

    # The protocols come before the endpoints: the endpoints' check reads them.
    otlp_protocol: Protocol = Field(
        "http/protobuf", validation_alias=_env_alias("otlp_protocol", "OTEL_EXPORTER_OTLP_PROTOCOL")
    )
    """OTLP transport (`OTEL_EXPORTER_OTLP_PROTOCOL`): http/protobuf (the OpenTelemetry
    specification's default, and what the sidecar speaks) or grpc (the collector's 4317)."""
    otlp_traces_protocol: Protocol | None = Field(
        None, validation_alias=_env_alias("otlp_traces_protocol", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    )
    """Traces-only transport (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`); None: `otlp_protocol`."""
    otlp_metrics_protocol: Protocol | None = Field(
        None, validation_alias=_env_alias("otlp_metrics_protocol", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
    )
    """Metrics-only transport (`OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`); None: `otlp_protocol`."""
    otlp_endpoint: str | None = Field(
        None, validation_alias=_env_alias("otlp_endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    """Base OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`). HTTP appends `/v1/traces`, `/v1/metrics`.
    None: the SDK default (localhost:4318 for HTTP, localhost:4317 for grpc). Where an OTLP/HTTP
    exporter uses an endpoint, it must be an http:// or https:// URL (refused otherwise, at once)."""
    otlp_traces_endpoint: str | None = Field(
        None, validation_alias=_env_alias("otlp_traces_endpoint", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
    """Full traces endpoint, used as is (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); wins over the base."""
    otlp_metrics_endpoint: str | None = Field(
        None, validation_alias=_env_alias("otlp_metrics_endpoint", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    )
    """Full metrics endpoint, used as is (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`)."""
    resource_attributes: Annotated[dict[str, str], NoDecode] = {}
    """Extra resource attributes ("k=v,k2=v2"); merged over `OTEL_RESOURCE_ATTRIBUTES`, which
    the SDK reads as well."""
    metric_export_interval_ms: int = Field(
        10_000, ge=100, validation_alias=_env_alias("metric_export_interval_ms", "OTEL_METRIC_EXPORT_INTERVAL")
    )
    """Push interval of the OTLP / console metric readers in ms (`OTEL_METRIC_EXPORT_INTERVAL`)."""

    prometheus_host: str = "127.0.0.1"
    """Bind address of the Prometheus pull endpoint (`/metrics`)."""
    prometheus_port: int = Field(9464, ge=0, le=65535)
    """Port of the Prometheus pull endpoint; with `export_all_ranks` each rank adds its local rank."""
    prometheus_linger_s: float = Field(catalog.END_WAIT_S, ge=0, le=300)
    """After `finish()` (or a preemption), wait at most this long for the run's end (`grpo.run.finished` = 1,
    `grpo.run.preempted` = 1) to reach Prometheus: the pull endpoint keeps serving `/metrics` until one more
    scrape has read it (about one scrape interval; at most 2.5 s for an endpoint never scraped yet, and not at
    all once it has been served 60 s without a scrape: nobody watches it), and OTLP metrics wait for an
    endpoint that takes no connection (a collector restarting) to take the final export.

    Without it Prometheus never learns how the run ended, and GRPOMetricsAbsent pages a crash: so the bound
    must exceed the longest scrape interval (60 s). A run whose end did not get through says so in one
    warning. A crash (no `finish()`) does not wait.
    """

    output_dir: Path | None = None
    """Run directory; samples spill to `<output_dir>/samples/step_<step>.jsonl`. None: `runs/<run_id>`. A relative
    path is made absolute against the working directory when the settings are made, once: a later `os.chdir`
    moves no spill."""
    spill_samples: bool = True
    """Append every selected sample to the local JSONL spill (nothing is lost when export fails)."""

    top_k: int = Field(4, ge=0)
    """Samples with the highest `score` kept per step."""
    bottom_k: int = Field(4, ge=0)
    """Samples with the lowest `score` kept per step."""
    random_k: int = Field(4, ge=0)
    """Further samples drawn uniformly from the rest of the step."""
    score: str = "reward"
    """Column that ranks samples for top/bottom-k (rows without a finite score are only drawn at random)."""
    seed: int | None = None
    """Seed of the random sample draw (None: nondeterministic)."""
    sample_reduce: Literal["global", "per_rank"] = "global"
    """Which rows compete for top/bottom/random: "global" selects once per step over every row of
    every rank (torchforge's global_reduce: every rank must enter `step()`, which then runs two
    small collectives; rank 0 exports the kept rows); "per_rank" selects among each exporting
    rank's own rows (torchforge's per_rank_reduce), with no collective. Either way a kept row's `sample_index` is
    unique within its step (`Selected.index`), across the step's records too (`_numbering`)."""
    keep_anomalous_steps: bool = True
    """Keep every sample row of an anomalous step (skipped update, a non-finite scalar, a scalar above
    `anomaly_thresholds`, a reward or KL outlier against the last `anomaly_window` steps), not only
    top/bottom/random, while `anomaly_rows_budget` lasts."""
    anomaly_thresholds: Annotated[dict[str, float], NoDecode] = {"kl": 1.0, "mismatch_k3_kl": 0.01}
    """Catalog key -> value beyond which a step is anomalous ("kl=1.0,mismatch_k3_kl=0.01" in the environment;
    beyond is below for a step check that says so, the effective sample size). Defaults: the alert rules'
    `kl_threshold` and `mismatch_kl_threshold`. With `rule_settings`, the thresholds that file sets for
    this run replace these (+inf there: off)."""
    rule_settings: Path | None = None
    """The alert rules' settings file (`otel-grpo dashboards --rule-settings`, the same variable
    `OTEL_GRPO_RULE_SETTINGS`): the step-check thresholds it gives this `run_id` (its `overrides`
    entry, else the file's setting) are the run's `anomaly_thresholds`, so a run whose KL alert
    bound is 2.0, or off, keeps steps whole by that bound. Read once, at construction."""
    anomaly_window: int = Field(20, ge=5, le=10_000)
    """Recent steps the reward and KL outlier test compares a step with."""
    anomaly_z: float = Field(6.0, gt=0)
    """Robust z-score (distance to the window's median over 1.4826 x MAD; KL in log10) that makes an outlier."""
    anomaly_rows_budget: int = Field(20_000, ge=0)
    """Most rows the run keeps beyond the usual selection (all ranks together). The storage this
    costs is at most rows x (prompt + completion, each cut at `max_text_chars` on export) plus
    the numeric columns: ~20 MB for the demo's short texts."""
    max_text_chars: int = Field(4096, ge=16)
    """Text columns longer than this are cut on spans (not in the spill) and marked `truncated`. A
    long-context run may raise it: the sidecar's run explorer reads pages of rows with each text cut
    (`text_chars`) and one sample whole on demand."""
    max_events_per_span: int = Field(64, ge=1, lt=SDK_EVENT_LIMIT)
    """Sample events per `grpo.samples` chunk span; below the SDK's 128-event limit."""
    max_span_attributes: int = Field(2048, ge=128)
    """Attribute limit of the tracer provider we build (a step carries every scalar it recorded)."""

    export_all_ranks: bool = False
    """Export from every rank (data points get a `rank` attribute). Default: rank 0 only."""
    shutdown_timeout_s: float = Field(10.0, gt=0, le=86_400)
    """Upper bound on `Telemetry.shutdown()`: drain, flush and close the exporters (at most a day: the threads'
    waits take no longer, and `inf` raised at the end of training)."""
    emit_in: Literal["thread", "process"] = "thread"
    """How step records travel to the one backend that makes spans, metrics, sample events and spill
    lines from them (the telemetry is the same either way). "thread": a thread of the training process.
    "process": a child process (`python -m otel_grpo.telemetry._child`), so that the backend's and the
    exporters' GIL time (benchmarks/README.md, trl) is not paid by a Python-bound training loop; the
    training thread pickles each step record. Needs providers built from these settings. If the child
    dies, acknowledges nothing for a while as steps wait (stopped, hung), or holds more unacknowledged steps
    than its bound (slower than training), this process takes over (one warning) and loses no sample."""
    emit_nice: int = Field(10, ge=0, le=19)
    """With `emit_in="process"`: how much lower the child's CPU priority is than the training process's
    (added to its nice value; 0: the same). On a node whose cores are all busy (data loaders, reward
    workers, a CPU-bound step) the training threads then get the CPU first and the child runs in the
    gaps; it needs a few percent of one core, which a priority 10 lower still gets from a busy core."""
    git_revision: str | None = None
    """Resource `vcs.revision`; None: `git rev-parse HEAD` of the working directory, if any."""

    @classmethod
    def with_defaults(cls, defaults: dict[str, Any], **given: Any) -> TelemetrySettings:
        """Settings from `given`, then the environment, then `defaults`, then the fields' own defaults.

        `defaults` are what an integration derives from its trainer (TRL's run name and output
        dir, the model's name): a user's `OTEL_GRPO_RUN_ID` or `OTEL_GRPO_MODEL_NAME` must win
        over them, which it cannot when they are passed as arguments (arguments win over the
        environment). A None default is no default."""
        taken = cls.environment().keys() | given.keys()
        return cls(**{k: v for k, v in defaults.items() if v is not None and k not in taken}, **given)

    @classmethod
    def environment(cls) -> dict[str, Any]:
        """The fields that variables set (`OTEL_GRPO_*` and the standard ones fields alias), by field name, as
        pydantic-settings reads them (not yet validated)."""
        names = {}
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            for choice in alias.choices if isinstance(alias, AliasChoices) else ([alias] if alias else []):
                names[choice] = name
        return {names.get(key, key): value for key, value in EnvSettingsSource(cls)().items()}

    @field_validator("metrics_exporters", "traces_exporters", mode="before")
    @classmethod
    def _lists_from_env(cls, value: object) -> object:
        return _exporter_list(value)

    @field_validator("run_id")
    @classmethod
    def _run_id_names_a_run(cls, value: str) -> str:
        return catalog.spans.check_run_id(value)

    @field_validator("resource_attributes", mode="before")
    @classmethod
    def _pairs_from_env(cls, value: object) -> object:
        return _parse_pairs(value)

    @field_validator("anomaly_thresholds", mode="before")
    @classmethod
    def _thresholds_from_env(cls, value: object) -> object:
        return _parse_pairs(value)

    @field_validator("anomaly_thresholds")
    @classmethod
    def _thresholds_are_catalog_keys(cls, value: dict[str, float]) -> dict[str, float]:
        for key, limit in value.items():
            try:
                catalog.get(key)
            except KeyError:
                raise ValueError(f"anomaly_thresholds: {key!r} is not a catalog key") from None
            if not math.isfinite(limit):
                raise ValueError(f"anomaly_thresholds: {key}={limit} is not a finite number")
        return value

    @field_validator("rule_settings")
    @classmethod
    def _rule_settings_readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            catalog.run_thresholds(catalog.load_rule_settings(value), "")  # ValueError naming the file or setting
        return value

    @field_validator("otlp_endpoint", "otlp_traces_endpoint", "otlp_metrics_endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        """An endpoint an OTLP/HTTP exporter will use must be an http(s) URL with a host: `collector:4318`
        (the scheme forgotten) would fail every export of the run, and only at the first export."""
        if value is None:
            return value
        data = info.data
        signals = [s for s in ("traces", "metrics") if info.field_name in ("otlp_endpoint", f"otlp_{s}_endpoint")]
        http = [s for s in signals if "otlp" in data.get(f"{s}_exporters", ())
                and (data.get(f"otlp_{s}_protocol") or data.get("otlp_protocol")) == "http/protobuf"]
        if "://" in value and not is_http_url(value):
            raise ValueError(f"{value!r} is no http:// or https:// URL with a host")
        if http and "://" not in value:
            raise ValueError(f"{value!r} has no http:// or https:// (OTLP/HTTP {' and '.join(http)} need a URL, "
                             f"e.g. http://{value})")
        return value

    @field_validator("otlp_protocol", "otlp_traces_protocol", "otlp_metrics_protocol", mode="before")
    @classmethod
    def _protocol_lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_exporters(self) -> TelemetrySettings:
        for field in ("metrics_exporters", "traces_exporters"):
            chosen = getattr(self, field)
            if not chosen:
                raise ValueError(f"{field} is empty: use ['none'] to disable export")
            if "none" in chosen and len(chosen) > 1:
                raise ValueError(f"{field}: 'none' cannot be combined with {chosen}")
            if len(set(chosen)) != len(chosen):
                raise ValueError(f"{field} lists an exporter twice: {chosen}")
        if "prometheus" in self.traces_exporters:
            raise ValueError("traces_exporters: prometheus exports metrics only")
        # Absolute once, here: the spill opens its files by this path at every write, so a relative one followed
        # the process's working directory (an os.chdir mid-run split the spill in two), and both sinks (the
        # process sink's child gets these settings) must write where the run began.
        out = self.output_dir or Path("runs") / self.run_id
        try:
            self.output_dir = out.absolute()
        except OSError:  # the working directory was removed: the path stays relative, the spill says it fails
            self.output_dir = out
        if self.rule_settings is not None:
            try:
                own = catalog.run_thresholds(catalog.load_rule_settings(self.rule_settings), self.run_id)
            except ValueError as e:  # the file changed since the field's check, or this run's override is bad
                raise ValueError(f"rule_settings: {e}") from None
            self.anomaly_thresholds = {**self.anomaly_thresholds, **own}
        return self

    def protocol_for(self, signal: Literal["traces", "metrics"]) -> Protocol:
        """The OTLP transport of one signal: its own setting, else `otlp_protocol`."""
        own = self.otlp_traces_protocol if signal == "traces" else self.otlp_metrics_protocol
        return own or self.otlp_protocol

    @property
    def samples_per_step(self) -> int:
        """Most samples selected per step: top_k + bottom_k + random_k."""
        return self.top_k + self.bottom_k + self.random_k
