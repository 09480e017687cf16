"""`otel-grpo replay OUTPUT_DIR`: send a run's spill (step scalars and samples) to the sidecar again.

The telemetry layer spills every step it emits (`steps.jsonl`) and every selected sample
(`samples/step_<n>.jsonl`) before exporting them. When the sidecar or the collector was down,
or a process died with spans still queued, the store lacks some of them; this command sends
the whole spill again, as OTLP/HTTP spans of the same contract the trainer's exporter sends
(a `grpo.step` span per step and writer, `grpo.sample` events on a `grpo.samples` span). Replaying is
idempotent: the sidecar keeps samples unique on (run, step, sample index) and merges step
scalars, so what it already had is left as it was, and replaying twice changes nothing. Each record's scalars
and rows go under the attempt they went out with (`grpo.attempt` where the record claimed its step, else
`grpo.writer_attempt`: an evaluation's, another rank's), so a newer attempt's claim of the step, replayed or
live, keeps and removes of them what it did of the live export's.
Phase durations travel as the step's `phase_duration/<name>` scalars, the sums the sidecar
computes from phase spans, so they never add up twice. The spill keeps texts whole; a replay cuts
them at `max_text_chars` as the export did (`telemetry._samples.cut_texts`): each process's own, which
its step lines say (`SpillReader.cut`), unless `--max-text-chars` is given, so a replayed row is
the row the live export stored. The spill is read a step at a time
(`SpillReader`), so memory stays at one step's samples and one request whatever its size.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import itertools
import json
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import typer

from otel_grpo.catalog import spans

from ._app import app, fail, warn

if TYPE_CHECKING:
    from otel_grpo.telemetry._spill import SpillReader

_REQUEST_BYTES = 4 * 1024 * 1024
"""A request's encoded size, at most, unless one row alone is larger: far below the sidecar's 64 MiB body limit, and
below what the trainer's exports sent (a step of up to 64 rows a span), so whatever was exported live replays."""


@app.command()
def replay(
    ctx: typer.Context,
    output_dir: Path = typer.Argument(..., help="The run's output directory: the one holding steps.jsonl and samples/."),
    endpoint: str = typer.Option("http://127.0.0.1:8000", envvar="OTEL_GRPO_REPLAY_ENDPOINT",
                                 help="Sidecar (or OTel Collector OTLP/HTTP) base URL; spans go to "
                                      "<endpoint>/v1/traces (a URL ending in /v1/traces is taken as it is)."),
    token: Optional[str] = typer.Option(None, envvar="OTEL_GRPO_SIDECAR_TOKEN",
                                        help="Bearer token of the sidecar's ingest."),
    retries: int = typer.Option(5, min=0, help="Retries of a request answered 429/5xx or not answered at all."),
    timeout_s: float = typer.Option(30.0, min=0.1, help="Seconds to wait for each answer."),
    max_text_chars: Optional[int] = typer.Option(
        None, min=16, envvar="OTEL_GRPO_MAX_TEXT_CHARS",
        help="Cut texts longer than this (the spill keeps them whole); given, it overrides the run's own. Default: "
             "each process's max_text_chars, as its spill says; for a spill of a release that did not say it, "
             "this variable, else 4096."),
) -> None:
    """Send a run's spill to the sidecar again; what it already stored stays as it is."""
    from otel_grpo.telemetry._settings import is_http_url
    from otel_grpo.telemetry._spill import SpillReader

    if not is_http_url(endpoint):  # bad input: no retries can mend it
        fail(f"--endpoint {endpoint}: expected an http:// or https:// URL with a host", 2)
    if not output_dir.is_dir():
        fail(f"{output_dir} is not a directory")
    spill = SpillReader(output_dir)
    if not spill.steps:
        fail(f"{output_dir} holds no spill (steps*.jsonl, samples/step_*.jsonl)")
    source = ctx.get_parameter_source("max_text_chars")  # click's ParameterSource
    cut = _cuts(spill, max_text_chars, given=source is not None and source.name == "COMMANDLINE")
    # the traces URL itself (what `up` prints for a trainer) is the same place, not <it>/v1/traces
    url = endpoint.rstrip("/").removesuffix("/v1/traces") + "/v1/traces"
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    sent_steps = sent_samples = rejected = 0
    reason = ""
    with _progress(len(spill.steps)) as advance:
        for request in _requests(spill, cut):
            if request.size:
                spans_rejected, why = _post(url, gzip.compress(request.message.SerializeToString(), 5), headers,
                                            retries, timeout_s)
                rejected, reason = rejected + spans_rejected, reason or why
            sent_steps, sent_samples = sent_steps + request.steps, sent_samples + request.samples
            advance(request.done, f"{sent_samples} samples")
    if spill.unreadable:  # what these lines held is not in the store
        where = ", ".join(f"{path.relative_to(output_dir)} ({n})" for path, n in spill.unreadable.items())
        warn(f"skipped {sum(spill.unreadable.values())} line(s) that are no step or sample of a run (no JSON "
             f"object with run_id and step): {where}")
    if not sent_steps and not sent_samples:
        fail(f"{output_dir} holds no step or sample to replay")
    if rejected:  # answered 200 with a partial success: those spans are not in the store
        fail(f"{url} took the replay of {output_dir} but rejected {rejected} span(s) ({reason})")
    typer.echo(f"replayed {sent_steps} step(s) and {sent_samples} sample(s) from {output_dir} to {url}")


def _cuts(spill: SpillReader, option: int | None, given: bool) -> Callable[[dict], int]:
    """Where the export cut a row's texts (`max_text_chars`): `option` where the command line gave it, else its
    writer's own, which the spill says (`SpillReader.cut`), else (a spill of a release that said none) `option`
    from its variable, else the default."""
    from otel_grpo.telemetry._settings import TelemetrySettings
    from otel_grpo.telemetry._spill import row_attempt

    if given and option is not None:
        return lambda row: option
    fallback = option or TelemetrySettings.model_fields["max_text_chars"].default
    return lambda row: spill.cut(row["run_id"], row_attempt(row)[0]) or fallback


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int, str], None]]:
    """A progress bar of the spill's steps on a terminal's stderr; nothing where stderr is a file or pipe."""
    if not sys.stderr.isatty():
        yield lambda done, note: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[note]}"), console=Console(stderr=True)) as bar:
        task = bar.add_task("replay", total=total, note="")
        yield lambda done, note: bar.update(task, advance=done, note=note)


class _Request:
    """One ExportTraceServiceRequest being filled: a resource per run, its size, and what it carries."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.message = ExportTraceServiceRequest()
        self.runs: dict[str, Any] = {}
        self.size = self.steps = self.samples = self.done = 0
        """Serialized bytes so far; step spans; sample rows; spill steps (`SpillReader.steps`) completed."""

    def fits(self, span) -> bool:
        """Whether `span` goes in without taking the request past `_REQUEST_BYTES` (an empty one takes any)."""
        return not self.size or self.size + span.ByteSize() <= _REQUEST_BYTES

    def add(self, run_id: str, span) -> None:
        """A copy of `span` under `run_id`'s resource."""
        if run_id not in self.runs:
            self.runs[run_id] = _resource_spans(self.message, run_id)
        self.runs[run_id].append(span)
        self.size += span.ByteSize()
        if span.name == spans.STEP_SPAN:
            self.steps += 1
        else:
            self.samples += len(span.events)


def _requests(spill: SpillReader, max_chars: Callable[[dict], int]) -> Iterator[_Request]:
    """Requests of at most `_REQUEST_BYTES` in step order, each sent before a span would take it past that; a step
    larger than a request (every row of an anomalous step kept, a long-context run's texts) is sent in parts."""
    from otel_grpo.telemetry._spill import row_attempt

    request = _Request()
    for step in spill.steps:
        found_lines = {(run_id, step): found for run_id, found in spill.step_lines(step).items()}
        rows: dict[tuple[str, int], list[dict]] = defaultdict(list)
        for row in spill.samples(step):  # their own step: a file named otherwise, or edited, still goes
            rows[(row["run_id"], row["step"])].append(row)
        for run_id, number in sorted({*found_lines, *rows}):
            # A relaunched run spilled the step again, and steps after it that it never reached: what a newer
            # attempt superseded stays out, the rest goes as it went live: the claiming attempt's records under
            # its claim, each other writer's (an evaluation, another rank: they claim none) under its own attempt;
            # records that said none (older spills) go with the step's claim, else its newest writer's
            kept = [ln for ln in found_lines.get((run_id, number), [])
                    if not spill.superseded(run_id, number, *_line_attempt(ln))]
            live = [r for r in rows.get((run_id, number), []) if not spill.superseded(run_id, number, *row_attempt(r))]
            said = [_line_attempt(ln) for ln in kept] + [row_attempt(r) for r in live]
            attempt = _newest(said, claims=True)
            writer = None if attempt is not None else _newest(said, claims=False)
            line = functools.reduce(_merged, kept, None)
            end_ns = (line or {}).get("end_ns") or time.time_ns()
            steps = _step_spans(run_id, number, kept, (line or {}).get("phases") or {}, end_ns, attempt, writer)
            samples = _writers_spans(run_id, number, live, end_ns, max_chars, attempt, writer)
            for span in itertools.chain(steps, samples):
                if not request.fits(span):
                    yield request
                    request = _Request()
                request.add(run_id, span)
        request.done += 1
    if request.size or request.done:
        yield request


def _line_attempt(line: dict) -> tuple[object, bool]:
    """A step line's writer attempt, and whether it claims its step."""
    return line.get("attempt"), line.get("claims", True) is not False


def _is_attempt(said: object) -> bool:
    return isinstance(said, int) and not isinstance(said, bool)


def _newest(attempts: list[tuple[object, bool]], claims: bool) -> int | None:
    """The newest of the (attempt, claims) pairs that do (`claims`) or do not claim their step; None where none
    says one (an older spill)."""
    return max((a for a, c in attempts if c is claims and _is_attempt(a)), default=None)


def _step_spans(run_id: str, step: int, lines: list[dict], phases: dict[str, float], end_ns: int,
                attempt: int | None, writer: int | None) -> list[Any]:
    """The `grpo.step` spans of a step's lines (none superseded), each writer's scalars under the attribute they
    went out with, as the sidecar keeps each writer's apart (`store._step_scalars`) and a newer attempt's claim
    removes only the older writers' (`store._attempts`): the claiming attempt's lines, and those that said no
    attempt (older spills), under the step's claim (`attempt`, else `writer`: its newest writer's); each other
    writer's (an evaluation, another rank: claiming nothing) under its own attempt. In the order they were written
    (the last one's time is the step's, as live); `phases`: every line's phase durations summed (the sidecar sums
    the phase spans of every writer), on the step's claim's span, else the last one."""
    step_lines: list[dict] = []
    own: dict[int, list[dict]] = defaultdict(list)  # a writer that claims nothing -> its lines
    for line in lines:
        said, claims = _line_attempt(line)
        if claims or not _is_attempt(said):  # a claim kept is the step's (`attempt`): older ones are superseded
            step_lines.append(line)
        else:
            own[said].append(line)  # type: ignore[index]
    groups = ([(step_lines, attempt, writer)] if step_lines else []) + [(own[w], None, w) for w in sorted(own)]
    groups.sort(key=lambda group: max(line.get("end_ns") or 0 for line in group[0]))  # stable: ties as listed
    carrier = next((g for g in groups if g[0] is step_lines), groups[-1] if groups else None)
    out = []
    for part, group in enumerate(groups):
        group_lines, claim, by = group
        line = functools.reduce(_merged, group_lines, None)
        line["phases"] = phases if group is carrier else {}
        out.append(_step_span(run_id, step, line, end_ns, claim, by, part))
    return out


def _merged(earlier: dict | None, line: dict) -> dict:
    """Several step spans of one step: later scalars win, phase durations add up (as the sidecar does)."""
    if earlier is None:
        return {**line, "metrics": dict(line.get("metrics") or {}), "phases": dict(line.get("phases") or {})}
    earlier["metrics"].update(line.get("metrics") or {})
    for name, seconds in (line.get("phases") or {}).items():
        earlier["phases"][name] = earlier["phases"].get(name, 0.0) + seconds
    earlier["start_ns"] = earlier.get("start_ns") or line.get("start_ns")
    earlier["end_ns"] = line.get("end_ns") or earlier.get("end_ns")
    return earlier


def _resource_spans(request, run_id: str):
    rs = request.resource_spans.add()
    _set(rs.resource.attributes.add(), spans.RUN_ID_ATTR, run_id)
    scope = rs.scope_spans.add()
    scope.scope.name = "otel_grpo.replay"
    return scope.spans


def _new_span(name: str, run_id: str, step: int, start_ns: int, end_ns: int, part: int = 0,
              attempt: int | None = None, writer: int | None = None):
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    # Ids derived from what the span holds, not random: the sidecar keys a sample row without a
    # sample_index by its span's id and its place there, so a second replay of such rows stored them
    # twice. `part`: the span's first row within the step (a step span: its place among the step's);
    # `attempt`: whose rows (another attempt's spans must not share ids with these); `writer`: the
    # attempt of records that claim nothing.
    key = [run_id, step, name, part] + ([attempt] if attempt is not None else [])
    digest = hashlib.blake2b(json.dumps(key).encode(), digest_size=24).digest()
    span = Span(trace_id=digest[:16], span_id=digest[16:])
    span.name, span.start_time_unix_nano, span.end_time_unix_nano = name, start_ns, end_ns
    _set(span.attributes.add(), spans.RUN_ID_ATTR, run_id)
    _set(span.attributes.add(), spans.STEP_ATTR, step)
    if attempt is not None:  # the attempt's own: a replay of it is stored once, and never over a newer one
        _set(span.attributes.add(), spans.ATTEMPT_ATTR, attempt)
    elif writer is not None:  # merged into the step, dropped where a newer attempt took it over
        _set(span.attributes.add(), spans.WRITER_ATTEMPT_ATTR, writer)
    return span


def _step_span(run_id: str, step: int, line: dict, end_ns: int, attempt: int | None = None,
               writer: int | None = None, part: int = 0):
    from otel_grpo.telemetry._spill import spilled_value

    end_ns = line.get("end_ns") or end_ns
    span = _new_span(spans.STEP_SPAN, run_id, step, line.get("start_ns") or end_ns, end_ns, part, attempt, writer)
    scalars = {**(line.get("metrics") or {}),
               **{f"phase_duration/{name}": s for name, s in (line.get("phases") or {}).items()}}
    for key, value in scalars.items():
        value = spilled_value(value, number=True)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _set(span.attributes.add(), spans.METRIC_PREFIX + key, float(value))  # non-finite: stored as null
    return span


def _writers_spans(run_id: str, step: int, rows: list[dict], time_ns: int, max_chars: Callable[[dict], int],
                   attempt: int | None, writer: int | None) -> Iterator[Any]:
    """The `grpo.samples` spans of a step's rows (none superseded), each under the attribute it went out with, as
    the sidecar names a row by its writer's attempt (`SampleRecord.uid`): the claiming attempt's rows under its
    claim (`attempt`), each other writer's (an evaluation, another rank) under its own attempt, claiming nothing;
    rows that said none go with the step's (`attempt`, else `writer`: its newest writer's), as older spills did."""
    from otel_grpo.telemetry._spill import row_attempt

    own: dict[int, list[dict]] = defaultdict(list)  # a writer that claims nothing -> its rows
    step_rows = []
    for row in rows:
        said, claims = row_attempt(row)
        if claims:  # an older claim's rows are another attempt's, which the newer one replaced
            if said == attempt:
                step_rows.append(row)
        elif isinstance(said, int) and not isinstance(said, bool):
            own[said].append(row)
        else:
            step_rows.append(row)
    yield from _samples_spans(run_id, step, step_rows, time_ns, max_chars, attempt, writer)
    first = len(step_rows)  # each span is named by its first row's place among the step's: none shared
    for said, theirs in sorted(own.items()):
        yield from _samples_spans(run_id, step, theirs, time_ns, max_chars, None, said, first)
        first += len(theirs)


def _samples_spans(run_id: str, step: int, rows: list[dict], time_ns: int, max_chars: Callable[[dict], int],
                   attempt: int | None = None, writer: int | None = None, first: int = 0) -> Iterator[Any]:
    """The rows' `grpo.samples` spans: as many rows a span as the trainer's (`max_events_per_span`), fewer where
    their events would pass `_REQUEST_BYTES`, so that a span fits in a request (a long-context run's rows);
    `first`: the place of the first row among the step's."""
    from otel_grpo.telemetry import TelemetrySettings

    per_span = TelemetrySettings.model_fields["max_events_per_span"].default
    span, size = None, 0
    for i, row in enumerate(rows, first):
        event = _sample_event(row, time_ns, max_chars(row))
        event_size = event.ByteSize()
        if span is not None and (len(span.events) == per_span or size + event_size > _REQUEST_BYTES):
            yield span
            span = None
        if span is None:  # `part`: its first row's place among the step's, which names the span
            span, size = _new_span(spans.SAMPLES_SPAN, run_id, step, time_ns, time_ns, i, attempt, writer), 0
        span.events.append(event)
        size += event_size
    if span is not None:
        yield span


def _sample_event(row: dict, time_ns: int, max_chars: int):
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from otel_grpo.telemetry._samples import as_kept, cut_texts, in_event_order
    from otel_grpo.telemetry._spill import spilled_value

    event = Span.Event(name=spans.SAMPLE_EVENT, time_unix_nano=time_ns)
    columns = {}
    for key, value in row.items():
        if key in _NOT_COLUMNS or value is None:
            continue
        columns[key] = spilled_value(value)
    # The texts cut as the export cut them (the spill did not), and the bookkeeping, in the order of the live
    # event's attributes: of a row wider than an event holds, the SDK kept the last ones.
    attrs = {**cut_texts(columns, max_chars), **{k: row[k] for k in _BOOKKEEPING if row.get(k) is not None}}
    attrs, event.dropped_attributes_count = as_kept(in_event_order(attrs))
    for key, value in attrs.items():
        _set(event.attributes.add(), key, value)
    return event


_BOOKKEEPING = ("sample_index", "selection")
"""A spilled row's keys that the live event added beside the row's columns (`event_attributes`)."""
_NOT_COLUMNS = frozenset({"run_id", "step", spans.ATTEMPT_ATTR, spans.WRITER_ATTEMPT_ATTR, *_BOOKKEEPING})


def _set(kv, key: str, value: Any) -> None:
    kv.key = key
    _set_value(kv.value, value)


def _set_value(any_value, value: Any) -> None:
    """`value` into an OTLP AnyValue as the live export sends it: a list of numbers, texts or booleans (a row's
    list column) is an array, as the exporter's attribute; what else the spill holds (a mapping) is its JSON."""
    if isinstance(value, bool):
        any_value.bool_value = value
    elif isinstance(value, int) and -(2**63) <= value < 2**63:
        any_value.int_value = value
    elif isinstance(value, float):
        any_value.double_value = value
    elif isinstance(value, str):
        any_value.string_value = value
    elif isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value):
        for item in value:
            _set_value(any_value.array_value.values.add(), item)
    else:
        any_value.string_value = json.dumps(value, ensure_ascii=False)


def _post(url: str, body: bytes, headers: dict[str, str], retries: int, timeout_s: float) -> tuple[int, str]:
    """Send one request; the spans the receiver took but rejected (OTLP's partial success) and its reason."""
    import requests

    for attempt in range(retries + 1):
        try:
            r = requests.post(url, data=body, headers=headers, timeout=timeout_s)
        except requests.RequestException as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if r.status_code == 200:
                return _partial_success(r.content)
            problem = f"HTTP {r.status_code}: {_reason(r)}"
            if r.status_code not in (408, 429) and r.status_code < 500:
                fail(f"{url} refused the replay ({problem})")
        if attempt < retries:
            time.sleep(min(2.0 ** attempt, 30.0))
    fail(f"{url} did not take the replay after {retries + 1} attempt(s) ({problem})")


def _reason(answer) -> str:
    """What an error answer says: an OTLP/HTTP receiver's google.rpc.Status message, in protobuf (the request's
    encoding, which the sidecar answers in) or JSON; anything else (a proxy's page) as its first 200 characters.
    A Status printed as text read "D" and its other framing bytes before the message."""
    from google.protobuf.message import DecodeError
    from google.rpc.status_pb2 import Status  # googleapis-common-protos: a dependency of the OTLP exporters

    media = answer.headers.get("Content-Type", "").partition(";")[0].strip().lower()
    if media == "application/x-protobuf":
        try:
            status = Status.FromString(answer.content)
        except DecodeError:
            pass
        else:
            return status.message or f"google.rpc.Status code {status.code}"
    elif media == "application/json":
        try:
            message = answer.json().get("message")
        except (ValueError, AttributeError):  # not JSON, or not an object
            message = None
        if isinstance(message, str) and message:
            return message
    return answer.text[:200]


def _partial_success(answer: bytes) -> tuple[int, str]:
    """Rejected spans and the reason from an ExportTraceServiceResponse (protobuf, as the request was)."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    try:
        partial = ExportTraceServiceResponse.FromString(answer).partial_success
    except DecodeError:  # a 200 without the OTLP answer (a proxy's page): nothing said against the spans
        return 0, ""
    return partial.rejected_spans, partial.error_message
