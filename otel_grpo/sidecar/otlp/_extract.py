"""From a decoded ExportTraceServiceRequest to the records the store keeps.

The span contract is `otel_grpo.catalog.spans` (written by `otel_grpo.telemetry`). run_id falls
back to the resource's `grpo.run_id`; a span whose run id could not be addressed (`check_run_id`: `a/steps`,
`../x`) is rejected with the reason. Other spans are accepted and ignored.

Every key and string kept has its NULs as U+FFFD (`sidecar._nul`), on both stores alike; but a run id's, which
`check_run_id` refuses (a control character) with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from otel_grpo.catalog.spans import (ATTEMPT_ATTR, METRIC_PREFIX, PHASE_ATTR, PHASE_PREFIX, RUN_ID_ATTR, SAMPLE_EVENT,
                                     SAMPLES_SPAN, STEP_ATTR, STEP_SPAN, WRITER_ATTEMPT_ATTR, check_run_id)

from .._nul import NUL, without_nul

# Columns every step row carries; a stat key of the same name (the catalog has `step`) is
# stored as `stat.<key>` so a row never has two fields of one name.
RESERVED_STEP_KEYS = frozenset({"run_id", "step", "time"})
# Columns the sidecar fills in every sample row itself (its writer's attempt, the event's time): a row's own
# column of such a name is stored as `data.<key>`, read back under that name, never hidden by the sidecar's.
RESERVED_SAMPLE_KEYS = frozenset({"run_id", "step", "time", "attempt"})
PHASE_COLUMN = "phase_duration/"


@dataclass(slots=True)
class StepRecord:
    run_id: str
    step: int
    span_id: bytes
    start: float
    end: float
    metrics: dict[str, float | None]
    attempt: int | None = None
    """The attempt of the process that wrote it (None: not said; merged as before)."""
    claims: bool = False
    """It claims its step for `attempt` (`grpo.attempt`), rather than merging into the step (`grpo.writer_attempt`)."""


@dataclass(slots=True)
class PhaseRecord:
    span_id: bytes
    parent_span_id: bytes
    name: str
    duration: float
    run_id: str | None
    step: int | None
    attempt: int | None = None
    claims: bool = False


@dataclass(slots=True)
class SampleRecord:
    run_id: str
    step: int
    uid: str
    """The row's name within its step (`samples`' unique (run_id, step, uid)): its `sample_index` (else its span's
    id and its place there), then `@<attempt>` where its writer said one. Each writer attempt's rows are its own:
    a relaunch's evaluation at the step the crashed attempt trained, numbered from 0 as that attempt's training
    was, goes in beside those rows (whatever the attempt rules keep of them), and the same rows sent again are one
    row (a retried export, a replayed spill)."""
    sample_index: int | None
    reward: float | None
    advantage: float | None
    completion_length: float | None
    prompt: str | None
    completion: str | None
    time: float
    data: dict
    attempt: int | None = None
    claims: bool = False


@dataclass(slots=True)
class Batch:
    """What one request contributes; `rejected` spans could not be taken (reasons in `errors`)."""

    runs: dict[str, dict[str, str]] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    phases: list[PhaseRecord] = field(default_factory=list)
    samples: list[SampleRecord] = field(default_factory=list)
    spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def reject(self, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:  # the partial-success message stays short
            self.errors.append(message)


def _finite(x: float) -> float | None:
    # JSON (and the browser) cannot carry NaN/inf; the telemetry layer never sends them anyway.
    return x if math.isfinite(x) else None


def value_of(v):
    """AnyValue -> a JSON-able Python value."""
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return _text(v.string_value)
    if kind == "double_value":
        return _finite(v.double_value)
    if kind == "int_value":
        return v.int_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {_text(kv.key): value_of(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return None


def _text(text: str) -> str:
    return without_nul(text) if NUL in text else text


_PLAIN = frozenset(("int_value", "bool_value"))


def _attrs(kvs) -> dict:
    """Attributes -> dict. The hot loop of ingest (every attribute of every sample event), so
    the scalar kinds are read inline (one WhichOneof, one getattr) rather than through value_of."""
    out = {}
    for kv in kvs:
        key, v = kv.key, kv.value
        if NUL in key:
            key = without_nul(key)
        kind = v.WhichOneof("value")
        if kind == "string_value":
            text = v.string_value
            out[key] = without_nul(text) if NUL in text and key != RUN_ID_ATTR else text
        elif kind in _PLAIN:
            out[key] = getattr(v, kind)
        elif kind == "double_value":
            x = v.double_value
            out[key] = x if x - x == 0.0 else None  # x - x is nan for nan and inf
        else:
            out[key] = value_of(v)
    return out


def _int(value) -> int | None:
    """An int64 from an int, an integral float or a decimal string; None otherwise (SQLite's range)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 21:
        value = int(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    return None


def _num(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def extract(request) -> Batch:
    """Walk every span of the request once and collect runs, steps, phases and samples."""
    batch = Batch()
    for rs in request.resource_spans:
        resource = _attrs(rs.resource.attributes)
        default_run = resource.get(RUN_ID_ATTR)
        default_run = str(default_run) if default_run not in (None, "") else None
        info = {k: str(resource[k]) for k in ("service.name", "grpo.model", "host.name") if k in resource}
        n_steps, n_samples, n_phases = len(batch.steps), len(batch.samples), len(batch.phases)
        for ss in rs.scope_spans:
            for span in ss.spans:
                batch.spans += 1
                name = span.name
                if name == STEP_SPAN:
                    _step_span(batch, span, default_run)
                elif name == SAMPLES_SPAN:
                    _samples_span(batch, span, default_run)
                elif name.startswith(PHASE_PREFIX):
                    _phase_span(batch, span)
        for record in (*batch.steps[n_steps:], *batch.samples[n_samples:], *batch.phases[n_phases:]):
            if record.run_id is not None and record.run_id not in batch.runs:  # a phase's too: the store reads
                # the run's newest attempt with its row (`_attempts`)
                batch.runs[record.run_id] = info
    return batch


def _run_and_step(batch: Batch, span, attrs: dict, default_run: str | None) -> tuple[str, int] | None:
    run_id = attrs.get(RUN_ID_ATTR) or default_run
    step = _int(attrs.get(STEP_ATTR))
    if not run_id or step is None:
        batch.reject(f"span {span.name!r} {span.span_id.hex()} lacks grpo.run_id or an integer grpo.step")
        return None
    run_id = _run_id(batch, span, run_id)
    return None if run_id is None else (run_id, step)


def _run_id(batch: Batch, span, run_id) -> str | None:
    """`run_id` as the store keeps it, or None with the span rejected: one the API could not address."""
    try:
        return check_run_id(str(run_id))
    except ValueError as error:
        batch.reject(f"span {span.name!r} {span.span_id.hex()}: {error}")
        return None


def _step_span(batch: Batch, span, default_run: str | None) -> None:
    attrs = _attrs(span.attributes)
    key = _run_and_step(batch, span, attrs, default_run)
    if key is None:
        return
    metrics = {}
    for name, value in attrs.items():
        if name.startswith(METRIC_PREFIX):
            stat = name[len(METRIC_PREFIX):]
            metrics["stat." + stat if stat in RESERVED_STEP_KEYS else stat] = _num(value)
    batch.steps.append(StepRecord(key[0], key[1], bytes(span.span_id), span.start_time_unix_nano / 1e9,
                                  span.end_time_unix_nano / 1e9, metrics, *_attempt(attrs)))


def _phase_span(batch: Batch, span) -> None:
    attrs = _attrs(span.attributes)
    phase = attrs.get(PHASE_ATTR) or _text(span.name[len(PHASE_PREFIX):])
    step = _int(attrs.get(STEP_ATTR))
    run_id = attrs.get(RUN_ID_ATTR)
    if not span.parent_span_id and (step is None or not run_id):
        batch.reject(f"phase span {span.span_id.hex()} has no parent step span")
        return
    if run_id and step is not None:
        run_id = _run_id(batch, span, run_id)
        if run_id is None:
            return
    duration = max(0.0, (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9)
    batch.phases.append(PhaseRecord(bytes(span.span_id), bytes(span.parent_span_id), str(phase), duration,
                                    str(run_id) if run_id and step is not None else None,
                                    step if run_id else None, *_attempt(attrs)))


def _samples_span(batch: Batch, span, default_run: str | None) -> None:
    attrs = _attrs(span.attributes)
    key = _run_and_step(batch, span, attrs, default_run)
    if key is None:
        return
    run_id, step = key
    attempt, claims = _attempt(attrs)
    writer = "" if attempt is None else f"@{attempt}"
    span_hex = None
    append = batch.samples.append
    for i, event in enumerate(span.events):
        if event.name != SAMPLE_EVENT:
            continue
        data = _attrs(event.attributes)
        index = data.pop("sample_index", None)
        for key in RESERVED_SAMPLE_KEYS.intersection(data):
            data["data." + key] = data.pop(key)
        if type(index) is not int:  # the telemetry layer sends an int; anything else goes the slow way
            index = _int(index)
        if index is None:
            span_hex = span_hex or span.span_id.hex()
            uid = f"{span_hex}:{i}{writer}"  # stable across retries of the same export
        else:
            uid = f"{index}{writer}"
        append(SampleRecord(
            run_id, step, uid, index, _take_num(data, "reward"), _take_num(data, "advantage"),
            _take_num(data, "completion_length"), _take_text(data, "prompt"), _take_text(data, "completion"),
            event.time_unix_nano / 1e9, data, attempt, claims,
        ))


def _attempt(attrs: dict) -> tuple[int | None, bool]:
    """A span's writer attempt, a non-negative int64, and whether it claims its step: `grpo.attempt` does,
    `grpo.writer_attempt` does not; (None, False) where neither is said (stored as before, merged)."""
    for name, claims in ((ATTEMPT_ATTR, True), (WRITER_ATTEMPT_ATTR, False)):
        attempt = _int(attrs.get(name))
        if attempt is not None and attempt >= 0:
            return attempt, claims
    return None, False


def _take_num(data: dict, key: str) -> float | None:
    """Move a numeric attribute out of `data` into its own column (bools and the rest stay in JSON)."""
    value = data.get(key)
    kind = type(value)
    if kind is float or kind is int:
        del data[key]
        return float(value)
    return None


def _take_text(data: dict, key: str) -> str | None:
    value = data.get(key)
    if type(value) is str:
        del data[key]
        return value
    return None
