"""The emitting loop: poll every source, pair a step's scalars with its samples, emit, flush, save.

    follower = Follower(telemetry, [VerlMetrics(path, total_steps=100), VerlRollouts(dir)], State.load(p))
    ended = follower.run(stop_event)        # True once the files show the run ended

Order of a batch: records go to `Telemetry` (one `grpo.step` span each, scalars, timing
phases, sample rows), `Telemetry.flush()` pushes them to the exporters, and only then is
each source's resume point saved. A flush that fails saves nothing: once an export
failed, every source goes back to its saved point and what was sent since is read and
sent again. The start position is saved at start-up, so a follower killed before its
first batch resumes where it began. A stop (Ctrl-C, SIGTERM) ends after the current batch.
While it runs, the folders given as `writes` (where the job saves its checkpoints) are watched
with `Telemetry.beat_while_writing`: a change there is a heartbeat.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from otel_grpo.telemetry import _clock as clock

from ._records import BadInput, Record, finite_or_none
from ._state import State

if TYPE_CHECKING:  # the sources and `start` are used before the exporters' modules are loaded (`otel-grpo follow`)
    from otel_grpo._stop_request import StopRequest
    from otel_grpo.telemetry import Telemetry

logger = logging.getLogger("otel_grpo.follow")


class Source(Protocol):
    name: str
    source: str | None
    """The peer whose names the files use (`catalog.PEERS`: "verl", "trl"), for the catalog's resolver."""
    holds: str
    """"scalars", "samples" or "both": a peer's scalars source and samples source pair by step."""
    ended: bool
    """The files show the run ended."""
    behind: bool
    """The last poll stopped at its limit: more is ready to read."""
    bad: BadInput
    attempt: int | None
    """The job's attempt this source reads now (`grpo.attempt`), for a partner's record that goes out alone;
    None: each record says its own, or the follower's own is used (`State.attempt`)."""

    def restore(self, saved: dict[str, Any] | None, from_start: bool) -> None:
        """Resume at `saved` (None: the start, or the end with `from_start` False); forgets what was read
        since (the follower calls it again after a failed flush)."""
    def poll(self, max_records: int) -> list[Record]: ...
    def mark_done(self, record: Record) -> None: ...
    def cursor(self) -> dict[str, Any]: ...


class _Values(dict):
    """Scalars with the per-sample vectors `Step.record` reads from a `samples` attribute (histograms)."""

    __slots__ = ("samples",)

    def __init__(self, values: dict[str, float], samples: dict[str, list[float]]) -> None:
        super().__init__(values)
        self.samples = samples


def _histograms(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for column, key in (("reward", "sample_reward"), ("advantage", "sample_advantage")):
        values = [v for row in rows if (v := finite_or_none(row.get(column))) is not None]
        if values:
            out[key] = values
    return out


@dataclass(slots=True)
class FollowOptions:
    poll_s: float = 0.5
    """Seconds between polls when nothing new was read."""
    batch: int = 1000
    """Most records emitted between two flushes (and state saves)."""
    max_spans: int = 1024
    """Most spans started between two flushes: below the SDK's span queue (2048 by default), which
    drops spans when full (reading a backlog emits far faster than its exporter drains)."""
    pair_wait_s: float = 10.0
    """How long a step's scalars wait for its samples file (and samples for scalars) before going alone."""
    look_every_s: float | None = None
    """Seconds between two looks at the folders the job writes its checkpoints into (`writes`); None:
    `Telemetry.beat_while_writing`'s default (5)."""


class Follower:
    """Emits every source's records; a peer's scalars and samples sources (verl's metrics and rollouts), when
    both are followed, pair by step (one `grpo.step` span per step: the sidecar keeps one row per step)."""

    def __init__(self, telemetry: Telemetry, sources: Sequence[Source], state: State,
                 options: FollowOptions | None = None, *, from_start: bool = False,
                 writes: Sequence[str | os.PathLike[str]] = ()) -> None:
        if not sources:
            raise ValueError("sources: follow at least one file or directory")
        self.tel = telemetry
        self.sources = list(sources)
        self.state = state
        self.options = options or FollowOptions()
        # A job's files show no work between two logged steps but the checkpoints it writes: a change in
        # these folders is a heartbeat, so a long save is no stall (a hung job writes nothing)
        self._writes = list(writes)
        # The training steps this follower sent, for the exit line: each once, though TRL's step goes out as
        # two spans (samples, then scalars) and a relaunched job's again; an evaluation is no step. One int
        # per step of the run, as the sidecar keeps a row per step.
        self._steps_sent: set[int] = set()
        self.failed_flushes = 0
        self._warned_slow = False
        self._failures_at_save = telemetry.export_health.failures
        self._pending: dict[str, deque[Record]] = {s.name: deque() for s in self.sources}
        self._partners = _pairs(self.sources)
        for source in self.sources:
            if not state.sources.get(source.name):
                source.restore(None, from_start)
        if state.attempt is None:  # the first follower of these files: its own attempt, saved with `start`
            state.attempt = telemetry.attempt
        start(self.sources, state)  # saved positions restored; every position saved at once

    @property
    def emitted(self) -> int:
        """Training steps sent so far by this follower, each counted once (evaluations are none)."""
        return len(self._steps_sent)

    @property
    def malformed(self) -> int:
        return sum(s.bad.count for s in self.sources)

    def run(self, stop: StopRequest, *, drain: bool = False) -> bool:
        """Follow until `stop` is set or the run ended; True if it ended (the caller then finishes the run).

        `drain`: the run is known to be over (`--finished`): read what the files hold, pair
        without waiting, and return True once nothing new arrives.
        """
        with ExitStack() as watching:
            for path in self._writes:
                watching.enter_context(self.tel.beat_while_writing(path, self.options.look_every_s))
            return self._follow(stop, drain)

    def _follow(self, stop: StopRequest, drain: bool) -> bool:
        quiet_polls = 0
        while not stop.is_set():
            read = self._poll()
            emitted = self._emit_ready(force=drain and not read)
            if emitted and not self._commit() and self.failed_flushes:
                stop.wait(self.options.poll_s)  # the exporters are down: send again after a pause
                continue
            busy = read or emitted or self._has_pending()
            quiet_polls = 0 if busy else quiet_polls + 1
            if (drain or self._ended()) and not self._has_pending() and quiet_polls >= 2:
                return True
            if not read:
                stop.wait(self.options.poll_s if not drain else 0.05)
        return False

    def _ended(self) -> bool:
        return any(s.ended for s in self.sources)

    def _has_pending(self) -> bool:
        return any(self._pending.values())

    def _poll(self) -> int:
        count = 0
        for source in self.sources:
            room = self.options.batch - len(self._pending[source.name])
            if room > 0:
                records = source.poll(room)
                self._pending[source.name].extend(records)
                count += len(records)
        return count

    def _emit_ready(self, force: bool) -> int:
        """Emit, in order per source, every record whose partner has arrived or waited long enough."""
        now = time.monotonic()
        wait = 0.0 if force else self.options.pair_wait_s
        done: list[tuple[Source, Record]] = []
        emitted = spans = 0
        for source in self.sources:
            queue = self._pending[source.name]
            paired = source.name in self._partners
            while queue and emitted < self.options.batch and spans < self.options.max_spans:
                record = queue[0]
                partner = self._partner(record, source) if paired else None
                if paired and partner is None and not self._passed(record, source) and (
                        now - record.read_at < wait or self._other(source).behind):
                    break  # the partner may come: wait (always while the other side has unread files)
                queue.popleft()
                spans += self._emit(record, partner, self._attempt(record, source, partner, paired))
                done.append((source, record))
                emitted += 1
                if partner is not None:
                    done.append(partner)
        for source, record in done:
            source.mark_done(record)
        return emitted

    def _partner(self, record: Record, source: Source) -> tuple[Source, Record] | None:
        """The same step's record from the other side of the pair, removed from its queue."""
        other = self._other(source)
        queue = self._pending[other.name]
        for i, candidate in enumerate(queue):
            if candidate.step == record.step:
                if other.holds == "scalars" and i != 0:
                    return None  # scalars leave in file order
                del queue[i]
                return other, candidate
        return None

    def _other(self, source: Source) -> Source:
        return self._partners[source.name]

    def _passed(self, record: Record, source: Source) -> bool:
        """The other side already shows a later step: this step's partner is not coming."""
        return any(r.step > record.step for r in self._pending[self._other(source).name])

    def _attempt(self, record: Record, source: Source, partner: tuple[Source, Record] | None,
                 paired: bool) -> int | None:
        """The attempt a step goes out as: its scalars side's (verl's metrics file), so that both halves of a
        step carry the same one whether they go out together or apart; else the record's own."""
        if not paired:
            return record.attempt
        if source.holds == "scalars":
            return record.attempt
        if partner is not None:
            return partner[1].attempt
        other = self._other(source).attempt
        return record.attempt if other is None else other

    def _emit(self, record: Record, partner: tuple[Source, Record] | None, attempt: int | None = None) -> int:
        """One `grpo.step` span with the record's (and its partner's) content, as attempt `attempt` (None:
        the follower's own, `State.attempt`); returns the spans it started."""
        scalars, phases, rows = dict(record.scalars), list(record.phases), record.rows
        if partner is not None:
            other = partner[1]
            scalars.update(other.scalars)
            phases += other.phases
            rows = rows if rows is not None else other.rows
        if not scalars and not phases and not rows:
            return 0  # e.g. a TRL parquet repeating the previous generation batch
        # A logged step: `grpo.steps` advances by the steps since the previous one (a TRL step whose
        # samples and scalars arrive apart goes out twice and counts once; logging_steps > 1 counts all).
        evaluation = record.evaluation and (partner is None or partner[1].evaluation)
        attempt = self.state.attempt if attempt is None else attempt
        with self.tel.logged_step(record.step, evaluation=evaluation, attempt=attempt) as s:
            if scalars or rows:
                s.record(_Values(scalars, _histograms(rows or ())))
            end = clock.now_ns()
            start = end - int(sum(sec for _, sec in phases) * 1e9)
            for name, seconds in phases:  # laid end to end, ending now, in the order timed
                start += int(seconds * 1e9)
                s.record_phase(name, seconds, end_ns=start)
            if rows:
                s.samples(rows)
        if not evaluation:
            self._steps_sent.add(record.step)
        chunks = -(-len(rows or ()) // self.tel.settings.max_events_per_span)
        return 1 + len(phases) + chunks

    def _commit(self) -> bool:
        """Flush to the exporters, then save where each source stands (never the other way round).

        Saved only when the flush completed and no export failed since the last save. A flush
        that is only slow saves nothing yet (the next one covers this batch too); an export
        that failed sends every source back to its saved point, so what was sent since is
        read and sent again (a re-sent step is stored once by the sidecar).
        """
        flushed = self.tel.flush()
        health = self.tel.export_health
        if health.failures != self._failures_at_save:
            if not self.failed_flushes:
                logger.warning("otel-grpo follow: exports failed; nothing is saved, and what was sent since the "
                               "last save is sent again until the exporters take it")
            self.failed_flushes += 1
            self._failures_at_save = health.failures
            for source in self.sources:
                self._pending[source.name].clear()
                source.restore(self.state.sources.get(source.name), False)
            return False
        if not flushed:
            if not self._warned_slow:
                self._warned_slow = True
                logger.warning("otel-grpo follow: the exporters did not flush in time; the position is saved once "
                               "they do")
            return False
        if self.failed_flushes:
            logger.info("otel-grpo follow: exports work again after %d failed batches", self.failed_flushes)
            self.failed_flushes = 0
        self._save()
        return True

    def _save(self) -> None:
        for source in self.sources:
            self.state.sources[source.name] = source.cursor()
        self.state.save()


def start(sources: Sequence[Source], state: State) -> None:
    """Save where each source starts, at once: a follower killed before its first batch resumes there, not
    at the files' new end. A saved position wins; a source without one keeps where its
    `restore(None, from_start)` put it, which `otel-grpo follow` calls first thing at launch (a stat
    of each file), so that lines written while the exporters are set up are not skipped.
    """
    for source in sources:
        saved = state.sources.get(source.name)
        if saved:
            source.restore(saved, False)
        state.sources[source.name] = source.cursor()
    state.save()


def _pairs(sources: Sequence[Source]) -> dict[str, Source]:
    """Source name -> the source it pairs with: per peer, its one scalars source and its one samples source."""
    partners: dict[str, Source] = {}
    for peer in {s.source for s in sources if s.source is not None}:
        scalars = [s for s in sources if s.source == peer and s.holds == "scalars"]
        samples = [s for s in sources if s.source == peer and s.holds == "samples"]
        if len(scalars) == 1 and len(samples) == 1:
            partners[scalars[0].name], partners[samples[0].name] = samples[0], scalars[0]
    return partners
