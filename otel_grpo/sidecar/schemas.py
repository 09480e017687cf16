"""Request and response models of the read API and the alert webhook (OpenAPI documents these)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ._nul import without_nul

AlertText = Annotated[str, AfterValidator(without_nul)]
"""A string of an Alertmanager alert that the store keeps or matches, with each NUL as U+FFFD (`_nul`) as it enters,
whatever the backend. Stored as it came, a NUL stayed in SQLite, and in PostgreSQL's labels JSON as `\\u0000`, while
PostgreSQL's plain columns took U+FFFD: the backends answered differently, and on PostgreSQL the alert's stored
fingerprint no longer matched the notification's, which resolved the alert as soon as it fired."""


class RunPublic(BaseModel):
    run_id: str
    service_name: str | None = None
    model: str | None = None
    host: str | None = None
    first_step: int | None = Field(None, description="Smallest step with data.")
    last_step: int | None = Field(None, description="Largest step with data.")
    first_seen: str = Field(description="When the sidecar first heard of the run (ISO 8601, UTC).")
    last_update: str = Field(description="When the run last sent data (ISO 8601, UTC).")
    sample_count: int
    status: Literal["firing", "active", "idle"] = Field(description=(
        "`firing`: an alert of the run is firing; else `active`: it sent data within the sidecar's "
        "`run_active_s` (600 s by default); else `idle`."))
    latest_reward: float | None = Field(None, description=(
        "The reward mean (`grpo.reward.mean`) at the latest of the run's last 8 steps that logged one; null: "
        "none did, or it is not finite."))
    latest_kl: float | None = Field(None, description=(
        "The KL (`grpo.kl`, else TRL's logged `grpo.trl.kl`) at the latest of the run's last 8 steps that logged "
        "one; null: none did, or it is not finite."))


class StepRow(BaseModel):
    """One step: `run_id`, `step`, `time`, then one column per scalar, named by the catalog
    (`grpo.kl`, `grpo.reward.mean`, `grpo.reward_fn.mean/<fn>`, ...), and
    `grpo.phase.duration/<phase>` in seconds. `StepColumn` gives each one's Prometheus name.
    A column the step did not log is missing; a non-finite value (NaN, +-inf) is null. `fields`
    (`/api/runs/{run_id}/steps`) may leave `run_id`, `step` or `time` out of every row (a chart
    asks `fields=step`); they are always there otherwise."""

    model_config = ConfigDict(extra="allow")
    run_id: str | None = Field(None, description="The run; left out where `fields` does not name it.")
    step: int | None = Field(None, description="The step; left out where `fields` does not name it.")
    time: str | None = Field(None, description="End of the step span (ISO 8601, UTC); left out where `fields` "
                                               "does not name it.")


class StepColumn(BaseModel):
    """A step column: one signal under its names (the catalog's, the Prometheus series beside it)."""

    name: str = Field(description="The column of `/steps`: the catalog's OTel name, e.g. `grpo.kl` "
                                  "(templated: `grpo.reward_fn.mean/<fn>`); a scalar the catalog does not know keeps its own.")
    prometheus: str | None = Field(description='Its Prometheus series, e.g. `grpo_kl` or `grpo_reward_fn_mean{reward_fn="fmt"}`; '
                                               "None where the catalog does not know the scalar (it reaches no metric).")
    key: str = Field(description="The catalog key (the telemetry's stats key, `kl`) as the trainer records it.")
    unit: str | None = None
    description: str | None = None


class SampleRow(BaseModel):
    """One sample; besides these, every other attribute of its `grpo.sample` event is a column."""

    model_config = ConfigDict(extra="allow")
    run_id: str
    step: int
    sample_index: int | None = None
    reward: float | None = None
    advantage: float | None = None
    completion_length: float | None = None
    prompt: str | None = None
    completion: str | None = None
    time: str | None = None
    attempt: int | None = Field(None, description=(
        "The attempt of the process that wrote the row (its `grpo.attempt` or `grpo.writer_attempt`: a `Telemetry`'s "
        "start in ns); null where the sender named none. A step's rows are told apart by it and `sample_index`: a "
        "relaunch's evaluation at the step the crashed attempt trained numbers its rows from 0 as that training did."))
    texts_cut: dict[str, int] | None = Field(None, description=(
        "Where `text_chars` cut a text of the row: its column and full length in characters; absent otherwise."))


class AlertmanagerAlert(BaseModel):
    """One alert of an Alertmanager webhook (version 4)."""

    status: Literal["firing", "resolved"]
    labels: dict[AlertText, AlertText] = {}
    annotations: dict[AlertText, AlertText] = {}
    startsAt: AlertText = Field(min_length=1, max_length=64)
    endsAt: AlertText | None = Field(None, max_length=64)
    generatorURL: AlertText | None = None
    fingerprint: AlertText = Field(min_length=1, max_length=128)


class AlertmanagerWebhook(BaseModel):
    """Alertmanager's webhook payload, version 4."""

    version: Literal["4"]
    groupKey: str | None = None
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"] | None = None
    receiver: str | None = None
    groupLabels: dict[AlertText, AlertText] = {}
    """Matched against the stored alerts' labels (`store._alerts`), so their NULs are replaced as those are."""
    commonLabels: dict[str, str] = {}
    commonAnnotations: dict[str, str] = {}
    externalURL: str | None = None
    alerts: list[AlertmanagerAlert] = Field(max_length=10000)


class AlertsAccepted(BaseModel):
    stored: int


class AlertPublic(BaseModel):
    fingerprint: str
    status: str
    alertname: str | None = None
    run_id: str | None = None
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    ends_at: str | None = None
    generator_url: str | None = None
    received_at: str
    step: int | None = None
    """The run's step the alert belongs to: the last to end at or before `starts_at` (its data
    made the rule fire), the run's first step where none had ended yet; null without a run or
    steps, or where `starts_at` is not an RFC 3339 time. `starts_at` is on Prometheus's clock and
    the steps' ends on the trainer's: the alert's `clock_offset_seconds` annotation (the rules' estimate
    of the run's offset) moves the one onto the other; an alert without it (older rules), or with one that is
    no clock's offset (not a number, or beyond 100 years either way), is placed as if the two clocks agreed."""


class Panel(BaseModel):
    """A plot of the web page: signals (their step columns) against step."""

    title: str
    group: str
    scale: str
    """linear, log or symlog (log-like with a linear part around 0: zero and negative values show)."""
    unit: str
    """The y axis unit, from the catalog."""
    series: list[dict[str, str]]
    """One per signal: `name` (the catalog's OTel name, e.g. `grpo.kl`: the step column of
    `/api/runs/{run_id}/steps`), `prometheus` (its Prometheus series, `grpo_kl`), `key` (the catalog
    key, `kl`), `unit`, `description`; a templated signal adds `attribute` (its label) and has one
    column `<name>/<value>` per value of it."""


class Message(BaseModel):
    detail: str | list
