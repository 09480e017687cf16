"""TRL's files under `GRPOConfig.output_dir`: completions parquet (samples), trainer state (scalars, the end).

Formats, from TRL 1.16's `GRPOTrainer.log` and transformers' `Trainer`:
- `completions/completions_<global_step:05d>.parquet` (with `log_completions=True`, main
  process only): `step`, `prompt`, `completion`, one column per reward function (named
  after it), the reward functions' extra columns, `advantage`. It holds the last
  generation batch, so with `steps_per_generation > 1` consecutive files repeat the same
  rows: a file whose rows equal the previous file's is not sent again.
- `trainer_state.json` (at each checkpoint, `checkpoint-<n>/`, and where the script calls
  `trainer.save_state()`, the output dir): `global_step`, `max_steps` and `log_history`,
  one dict per logged step; the end of training adds one with `train_loss` (`is_train_summary`).

The run has ended when a trainer state holds the end-of-training summary
(`train_loss`), or its `global_step` reached `max_steps` (the final checkpoint).

A job relaunched into the same output dir (a fresh start, or a resume from a checkpoint) writes
its steps again from an earlier one, and either of its two streams can show it first:
- completions: within one attempt TRL writes them in step order and rewrites only the latest one
  (at the same `global_step`, an evaluation's `log` writes the evaluation's rows and the
  end-of-training summary's the same rows again), so a file written for a step below the latest
  one read is a relaunch from that step; one written again at the latest step is told by the next
  trainer state that reaches it: each `log` writes the file once and appends one history entry at the
  step, so fewer entries there than writes seen is a relaunch from that step (`_unexplained`), whose
  completions from there on go out again;
- trainer states (the only stream without `log_completions`): within one attempt each state written
  holds the previous one's log history and goes further (transformers writes one at each checkpoint
  and in `save_state`, the end's summary at the same step), so a state written after the one read
  whose training entries differ from it at some step (a resume from an earlier checkpoint, or a fresh
  start with other numbers), or that ends below it (a fresh start), is a relaunch from the first
  such step (evaluation rows and the summary do not count).
Either way (`_relaunched`, one mechanism): from that step on, the records are a newer attempt
(`grpo.attempt`: the sidecar replaces the crashed attempt's samples and scalars of each step the
relaunch sends), its logged scalars are read again from that step, and only trainer states
written since count (docs/follow.md, "Relaunched and resumed jobs").
"""

from __future__ import annotations

import bisect
import hashlib
import importlib.util
import json
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from otel_grpo._extras import install_command
from otel_grpo.catalog import is_evaluation, is_train_summary
from otel_grpo.catalog.spans import check_step
from otel_grpo.integrations.trl._chat import chat_text  # the renderer instrument uses: same text
from otel_grpo.integrations.trl._keys import map_logs
from otel_grpo.telemetry import _clock as clock

from ._records import PARSE_ERRORS, BadInput, Record, finite_or_none, numbers
from ._tail import open_regular

_PARQUET = re.compile(r"^completions_(\d+)\.parquet$")
_REWARD_MEAN = re.compile(r"^rewards/(.+)/mean$")
SOURCE = "trl"
MAX_STATE_BYTES = 256 << 20  # a trainer state larger than this is not TRL's (its log history is a few MB)

logger = logging.getLogger("otel_grpo.follow")
_FIXED = {"step", "prompt", "completion", "advantage"}


def trl_row(entry: dict[str, Any], weights: Sequence[float] | None,
            reward_columns: Sequence[str] | None = None) -> dict[str, Any]:
    """A parquet row as a sample row: the reward functions' columns as `rewards`, the other columns as they are.

    `reward_columns`: the reward functions' columns (TRL writes them after `completion`, before
    the `log_extra` columns); None: every numeric non-fixed column. `reward` is their weighted
    sum, with TRL's default weights of 1 unless `weights` is given.
    """
    row: dict[str, Any] = {"prompt": chat_text(entry.get("prompt")), "completion": chat_text(entry.get("completion"))}
    rewards: dict[str, float] = {}
    for key, value in entry.items():
        if key in _FIXED:
            continue
        number = finite_or_none(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if number is not None and (reward_columns is None or key in reward_columns):
            rewards[key] = number
        elif value is not None:
            row[key] = value
    if rewards:
        row["rewards"] = rewards
        w = dict(zip(reward_columns or rewards, weights or ())) if weights else {}
        row["reward"] = sum(w.get(name, 1.0) * r for name, r in rewards.items())
    advantage = finite_or_none(entry.get("advantage"))
    if advantage is not None:
        row["advantage"] = advantage
    return row


def reward_columns(columns: Sequence[str], names: Sequence[str], count: int | None) -> list[str] | None:
    """The reward functions' columns of a parquet: those named in the trainer state's `rewards/<f>/mean`
    keys (`names`), else the `count` columns after `completion` (`--trl-reward-weights` has one weight
    per function), else None (unknown: every numeric column counts)."""
    if names:
        return [c for c in columns if c in names]
    if count and "completion" in columns:
        start = list(columns).index("completion") + 1
        return [c for c in columns[start:start + count] if c != "advantage"]
    return None


class TrlOutput:
    """Follows one TRL output dir; records are handed out once and marked done once emitted."""

    name = "trl-output"
    source = SOURCE
    holds = "both"

    def __init__(self, output_dir: str | os.PathLike[str], reward_weights: Sequence[float] | None = None) -> None:
        if importlib.util.find_spec("pyarrow") is None:
            raise ValueError(f"output_dir: reading TRL's parquet needs pyarrow ({install_command('follow')})")
        self.dir = Path(output_dir)
        self.weights = list(reward_weights) if reward_weights else None
        self.bad = BadInput(self.name)
        self.ended = False
        self.behind = False
        self._done: dict[str, list[int]] = {}  # file name -> [inode, size, mtime ns] once emitted
        self._handed: set[str] = set()
        self._digest = ""
        self._handed_digest = ""
        self._scalar_step = -1
        self._handed_scalar_step = -1
        self._reward_names: list[str] = []
        self._warned_columns = False
        self._steps: dict[Path, tuple[tuple[int, int, int], int]] = {}  # trainer state -> (version, global_step)
        self._newest: tuple[Path, tuple[int, int, int], dict[str, Any]] | None = None
        self.attempt: int | None = None
        """The job's attempt read now (`grpo.attempt`); None: the follower's own (`State.attempt`) until
        a relaunch shows, then the time it was seen, in ns, so that its steps replace the earlier attempt's."""
        self._since = 0  # mtime (ns) of the attempt's first file: trainer states older than it are an earlier one's
        self._top = -1  # the latest completions step read in this attempt
        self._done_attempt: tuple[int | None, int] = (None, 0)  # (attempt, since) of the emitted records
        self._done_top = -1  # the latest completions step emitted in that attempt
        self._writes: dict[int, list[int]] = {}
        """Step -> mtimes (ns) of the writes of its completions file handed out in this attempt, for the latest step
        and for the steps written more than once that no trainer state has explained yet (`_unexplained`)."""
        self._done_writes: dict[int, list[int]] = {}  # the same for the emitted records: saved
        self._logged: dict[int, str] = {}
        """The history of the trainer state last handed out, as step -> digest of its training entries up to that
        step (`_chain`), less the steps a relaunch has since replaced: what a later state must agree with to be the
        same attempt's. Saved in part (`_saved_chain`): a restarted follower compares with those steps."""
        self._logged_from: tuple[Path, tuple[int, int, int]] | None = None
        """That state's (path, version): a new version is read again; only states written after it are compared."""
        self._checked: set[tuple[Path, tuple[int, int, int]]] = set()  # state versions compared with `_logged`
        self._unsaved: tuple[dict[int, dict[str, Any]], tuple[Path, tuple[int, int, int]] | None] | None = None
        """`_logged` before a relaunch not yet saved: a failed flush goes back to the earlier attempt, and its
        states must show the relaunch again."""

    def restore(self, saved: dict[str, Any] | None, from_start: bool) -> None:
        self._handed = set()
        if self._unsaved is not None:  # the relaunch seen since the last save is seen again
            (self._logged, self._logged_from), self._unsaved, self._checked = self._unsaved, None, set()
        elif saved and saved.get("logged_from") and not self._logged:  # a restarted follower: what it had read
            path, *key = saved["logged_from"]
            self._logged = {int(step): digest for step, digest in saved.get("logged", {}).items()}
            self._logged_from = (self.dir / path, tuple(int(k) for k in key))
        if saved:
            self._done = {k: list(v) for k, v in saved.get("done", {}).items()}
            self._digest = self._handed_digest = saved.get("digest", "")
            self._scalar_step = self._handed_scalar_step = int(saved.get("scalar_step", -1))
            attempt = saved.get("attempt")
            self._done_attempt = (None if attempt is None else int(attempt), int(saved.get("since", 0)))
            self._done_top = int(saved.get("top", _latest(self._done)))
            self._done_writes = {int(step): [int(t) for t in times] for step, times in saved.get("writes", {}).items()}
        elif not from_start:
            for _, path in self._parquets():
                self._done[path.name] = _identity(path.stat())
            self._done_top = _latest(self._done)
            state = self._state()
            if state:
                self._scalar_step = self._handed_scalar_step = _global_step(state)
        (self.attempt, self._since), self._top = self._done_attempt, self._done_top
        self._writes = {step: list(times) for step, times in self._done_writes.items()}

    def cursor(self) -> dict[str, Any]:
        attempt, since = self._done_attempt
        if self._done_attempt == (self.attempt, self._since):
            self._unsaved = None
        logged, logged_from = self._unsaved or (self._logged, self._logged_from)  # the saved attempt's
        return {"done": dict(self._done), "digest": self._digest, "scalar_step": self._scalar_step,
                "attempt": attempt, "since": since, "top": self._done_top,
                "writes": {str(step): times for step, times in self._done_writes.items()},
                **self._saved_chain(logged, logged_from)}

    def _saved_chain(self, logged: dict[int, str], logged_from: tuple[Path, tuple[int, int, int]] | None
                     ) -> dict[str, Any]:
        """What a restarted follower compares later trainer states with: `logged`'s digests at the last logged step
        of each trainer state on disk (a relaunch resumes from one of them, so its first step is told exactly) and at
        the latest step: an entry per checkpoint on disk, however long the history."""
        if not logged or logged_from is None:
            return {}
        steps = sorted(logged)
        ends = {global_step for _, global_step in self._steps.values()} | {steps[-1]}
        kept = {steps[i] for end in ends if (i := bisect.bisect_right(steps, end) - 1) >= 0}
        path, key = logged_from
        return {"logged": {str(step): logged[step] for step in sorted(kept)},
                "logged_from": [str(path.relative_to(self.dir)), *key]}

    def mark_done(self, record: Record) -> None:
        kind, value = record.cursor
        if kind == "parquet":
            name, identity, digest, since = value
            self._done[name] = identity
            self._handed.discard(name)
            self._digest = digest or self._digest
        else:
            since = value[1]
        if (record.attempt, since) != self._done_attempt:  # a relaunch's first record: its steps from here on
            self._done_attempt, self._done_top = (record.attempt, since), record.step - 1
            self._scalar_step = min(self._scalar_step, record.step - 1)
            self._done_writes = {s: t for s, t in self._done_writes.items() if s < record.step}
        if kind == "parquet":
            self._done_top = max(self._done_top, record.step)
            self._done_writes = _noted(self._done_writes, record.step, identity[2])
        else:
            self._scalar_step = max(self._scalar_step, record.step)

    def _parquets(self) -> list[tuple[int, Path]]:
        completions = self.dir / "completions"
        try:
            names = os.listdir(completions)
        except FileNotFoundError:
            return []
        except OSError as exc:  # not a directory, no permission: said once, tried again on every poll
            self.bad.unreadable(completions, f"{type(exc).__name__}: {exc}")
            return []
        self.bad.readable(completions)
        return sorted((int(m.group(1)), self.dir / "completions" / n) for n in names if (m := _PARQUET.match(n)))

    def poll(self, max_records: int) -> list[Record]:
        state = self._state()
        if state is not None:
            self._learn_reward_names(state)
        since = self._since
        out = self._poll_parquet(max_records)
        if self._since != since:  # a relaunch: from now on only its own trainer states count
            state = self._state()
        if state is not None:
            out.extend(self._poll_state(state))
            assert self._newest is not None
            if self._newest[:2] != self._logged_from:  # once per version: a long history is not walked every poll
                self._logged, self._logged_from = _chain(state), self._newest[:2]
        # In step order: TRL writes a step's completions as it logs, its scalars only at a checkpoint, so a step's
        # completions come before the scalars of the steps below it, which would then be late records, whose
        # values stay current beside the latest step's (its invalid ones, a metric only they logged).
        out.sort(key=lambda record: record.step)
        return out

    def _learn_reward_names(self, state: dict[str, Any]) -> None:
        """The reward functions' names, from the `rewards/<name>/mean` keys TRL logs for each of them."""
        for entry in _history(state):
            for key in entry:
                if (m := _REWARD_MEAN.match(key)) and m.group(1) not in self._reward_names:
                    self._reward_names.append(m.group(1))

    def _poll_parquet(self, max_records: int) -> list[Record]:
        files = self._parquets()
        out: list[Record] = []
        digest = self._handed_digest
        for i, (step, path) in enumerate(files):
            if len(out) >= max_records:
                break
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            name, identity = path.name, _identity(stat)
            if _same(self._done.get(name), identity) or name in self._handed:
                continue
            rows = self._read(path, identity, is_last=i == len(files) - 1)
            if rows is None:
                break  # keep file order: wait for this one
            if step < self._top:  # written again below the latest step: the job was relaunched
                self._relaunched(step, stat.st_mtime_ns, f"completions of step {step} written again after "
                                                         f"step {self._top}")
                digest = ""  # its first batch repeats none of the earlier attempt's
            elif step == self._top and self._newest is not None:  # an evaluation's or a relaunch's: a trainer
                path_read, key, doc = self._newest  # state already written after it tells (a restarted follower)
                found = self._unexplained(doc, key[2], {step: _noted(self._writes, step, stat.st_mtime_ns)[step]})
                if found is not None:
                    self._relaunched(found[0], found[1], _rewritten(found, path_read.relative_to(self.dir)))
                    digest = ""
            self._top = max(self._top, step)
            self._writes = _noted(self._writes, step, stat.st_mtime_ns)
            new_digest = _digest(rows)
            fresh = rows if new_digest != digest else []  # a reused generation batch is sent once
            digest = self._handed_digest = new_digest
            self._handed.add(name)
            # at step 0, before the first optimizer step, only an evaluation (`eval_on_start`) logs completions
            out.append(Record(step, rows=fresh, cursor=("parquet", (name, identity, new_digest, self._since)),
                              evaluation=step == 0, attempt=self.attempt))
        return out

    def _relaunched(self, step: int, since_ns: int, seen: str, *, reread: bool = False) -> None:
        """A newer attempt from `step` on, whose first file (completions or trainer state) was written at
        `since_ns` (its mtime); `seen`: what showed it, for the log. `reread`: the completions files from `step`
        on, already handed out, are the relaunch's (it began at the latest step read): they go out again as its."""
        logger.warning("otel-grpo follow: %s: %s: the job was relaunched; its steps from %d replace the earlier "
                       "attempt's", self.dir, seen, step)
        self.attempt, self._since, self._top = clock.now_ns(), since_ns, step - 1
        self._writes = {s: times for s, times in self._writes.items() if s < step}
        if reread:
            self._done = {name: i for name, i in self._done.items() if _step_of(name) < step}
            self._handed = {name for name in self._handed if _step_of(name) < step}
        self._handed_scalar_step = min(self._handed_scalar_step, step - 1)
        self._handed_digest = ""  # its first batch repeats none of the earlier attempt's
        if self._unsaved is None:
            self._unsaved = self._logged, self._logged_from
        self._logged = {s: e for s, e in self._logged.items() if s < step}  # what the relaunch has not replaced

    def _went_back(self, doc: dict[str, Any]) -> int | None:
        """The step from which a trainer state written after the one read is another attempt's: its first training
        step after the last one at which both histories agree up to there (the first entry that differs, where all
        of the read history is known; after a restart, the step after the saved point it still agrees with), else
        the step after its last one if that is below the latest read (a fresh start that logged the same numbers so
        far); None: the same attempt's, further on."""
        chain = _chain(doc)
        agreed = -1
        for step in sorted(chain):
            if step in self._logged:
                if chain[step] != self._logged[step]:
                    return min(s for s in chain if s > agreed)
                agreed = step
        if chain and self._logged and max(chain) < max(self._logged):
            return max(chain) + 1
        return None

    def _unexplained(self, doc: dict[str, Any], written_ns: int, writes: dict[int, list[int]]
                     ) -> tuple[int, int, int, int] | None:
        """The first step whose completions file was written (`writes`: the mtimes of the writes handed out) more
        often than the trainer state `doc`, written at `written_ns`, logs entries at it: (step, mtime of the
        relaunch's first write there, writes, entries); None: none. Within one attempt each `log` call appends one
        entry at the step to the log history and writes the step's completions file once (TRL's `GRPOTrainer.log`),
        so a state written after a step's writes holds an entry for each; a write it does not explain is another
        attempt's, and its own are the last `entries` ones. Steps the state explains, other than the latest one read,
        are forgotten: a later write there is below the latest step, a relaunch without counting."""
        counts = Counter(e["step"] for e in _history(doc) if isinstance(e.get("step"), int))
        for step in sorted(writes):
            times = sorted(writes[step])
            if step > _global_step(doc) or written_ns <= times[-1]:
                continue  # the state does not cover the step, or was written before a write seen there
            entries = counts[step]
            if len(times) > entries:
                return step, times[-entries] if entries else times[-1] + 1, len(times), entries
            if step != self._top:
                self._writes.pop(step, None)
                self._done_writes.pop(step, None)
        return None

    def _read(self, path: Path, identity: list[int], is_last: bool) -> list[dict[str, Any]] | None:
        import pyarrow.parquet as pq

        try:
            fp = open_regular(path)  # a FIFO or a device is refused before pyarrow opens it
        except (OSError, ValueError) as exc:
            self.bad.skip(str(path), f"{type(exc).__name__}: {exc}")
            return []
        try:
            with fp:
                table = pq.read_table(fp)
                if _identity(os.fstat(fp.fileno())) != identity:
                    return None  # written while read: read once the write is over, so one write counts once
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            if is_last:
                return None  # pandas may still be writing it: its footer comes last
            self.bad.skip(str(path), f"{type(exc).__name__}: {exc}")
            return []
        columns = reward_columns(table.column_names, self._reward_names, len(self.weights) if self.weights else None)
        if columns is None and not self._warned_columns:
            self._warned_columns = True
            logger.warning("otel-grpo follow: %s: which columns are reward functions is not known yet (no trainer "
                           "state; give --trl-reward-weights): every numeric column counts, log_extra ones too",
                           self.dir)
        return [trl_row(e, self.weights, columns) for e in table.to_pylist()]

    def _state(self) -> dict[str, Any] | None:
        """The newest trainer state in the output dir or its checkpoints (largest global_step; of two at one step,
        the later written: `save_state` after the final checkpoint adds the summary).

        Each file is parsed once per version (inode, size, mtime): a long log history is not parsed
        again on every poll, and only the newest state is kept in memory.
        """
        candidates = [self.dir / "trainer_state.json", *self.dir.glob("checkpoint-*/trainer_state.json")]
        fresh: dict[Path, dict[str, Any]] = {}
        best: tuple[int, int, Path] | None = None  # (global_step, mtime, path)
        for path in candidates:
            try:
                info = os.stat(path)
            except OSError:
                continue
            if info.st_mtime_ns < self._since:
                continue  # an earlier attempt's (a relaunch resumed from it, or left it behind)
            key = (info.st_ino, info.st_size, info.st_mtime_ns)
            seen = self._steps.get(path)
            if seen is None or seen[0] != key:
                doc = self._read_state(path)
                if doc is None:
                    continue  # being written, or not a state: read on a later poll
                fresh[path] = doc
                seen = self._steps[path] = (key, _global_step(doc))
            if best is None or (seen[1], key[2]) >= best[:2]:  # a tie: the later write (save_state's summary)
                best = (seen[1], key[2], path)
        self._steps = {p: v for p, v in self._steps.items() if p in candidates}
        if self._relaunch_in(fresh):
            return self._state()  # chosen again among the relaunch's own states
        if best is None:
            return None
        path, key = best[2], self._steps[best[2]][0]
        if self._newest is None or self._newest[:2] != (path, key):
            doc = fresh.get(path) or self._read_state(path)
            if doc is None:
                return None
            self._newest = (path, key, doc)
        return self._newest[2]

    def _relaunch_in(self, fresh: dict[Path, dict[str, Any]]) -> bool:
        """Compare each trainer state of this attempt not compared yet (once per version) with what was read: the
        history of the state read (`_went_back`) and the completions written since it (`_unexplained`); True if
        one shows a relaunch (the attempt changed)."""
        versions = {(path, key) for path, (key, _) in self._steps.items()}
        self._checked &= versions
        for path, key in sorted(versions - self._checked, key=lambda v: v[1][2]):  # in the order written
            if key[2] < self._since:
                continue  # an earlier attempt's
            doc = fresh.get(path) or self._read_state(path)
            if doc is None:
                continue  # being written: compared once whole
            self._checked.add((path, key))
            went_back = self._went_back(doc) if self._logged and self._logged_from is not None and (
                key[2] > self._logged_from[1][2]) else None  # a state written before the one read: nothing to compare
            found = self._unexplained(doc, key[2], self._writes)
            if found is not None and (went_back is None or found[0] < went_back):
                self._relaunched(found[0], found[1], _rewritten(found, path.relative_to(self.dir)), reread=True)
                return True
            if went_back is not None:
                self._relaunched(went_back, key[2], f"{path.relative_to(self.dir)} logs step {went_back} again")
                return True
        return False

    @staticmethod
    def _read_state(path: Path) -> dict[str, Any] | None:
        try:
            with open_regular(path) as fp:
                if os.fstat(fp.fileno()).st_size > MAX_STATE_BYTES:
                    return None
                doc = json.loads(fp.read())
        except PARSE_ERRORS + (OSError,):
            return None  # absent, being written or not a regular file
        return doc if isinstance(doc, dict) else None

    def _poll_state(self, state: dict[str, Any]) -> list[Record]:
        """TRL's logged scalars of the steps not yet handed out; `null` (TRL's NaN) counts as non-finite."""
        out = []
        for entry in _history(state):
            step = entry.get("step")
            if not isinstance(step, int) or isinstance(step, bool) or step <= self._handed_scalar_step:
                continue
            if is_train_summary(entry):
                self.ended = True
            try:
                scalars = numbers({k: v for k, v in entry.items() if k != "step"})
                check_step(step)
            except ValueError as exc:
                self.bad.skip(f"{self.dir}/trainer_state.json:log_history step {str(step)[:40]}", str(exc))
                self._handed_scalar_step = step
                continue
            # as the callbacks map TRL's log dict: signals (less TRL's 0.0 for lengths no completion has) and,
            # for a training step, every number as logged (grpo.trl.logged)
            out.append(Record(step, map_logs(scalars), cursor=("scalars", (step, self._since)),
                              evaluation=is_evaluation(scalars), attempt=self.attempt))
        if out:
            self._handed_scalar_step = out[-1].step
        max_steps = state.get("max_steps")
        if any(is_train_summary(e) for e in _history(state)) or (
                isinstance(max_steps, int) and 0 < max_steps <= _global_step(state)):
            self.ended = True
        return out


def _history(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The state's log history entries (what is not a dict is left out: the file may not be TRL's)."""
    history = doc.get("log_history")
    return [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []


def _training(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A state's training log entries by step: neither an evaluation's (`eval_` keys) nor the end's summary."""
    return {e["step"]: e for e in _history(doc) if isinstance(e.get("step"), int) and not isinstance(e["step"], bool)
            and not is_train_summary(e) and not is_evaluation(e)}


def _chain(doc: dict[str, Any]) -> dict[int, str]:
    """Each training step of a state -> a digest of its training entries up to that step: two histories agree up
    to a step where their digests are equal, and differ from their first differing entry on (so a few saved digests
    tell where a relaunch began). NaN, as JSON writes it, digests alike on every read."""
    chain, h = {}, hashlib.sha1()
    for step, entry in sorted(_training(doc).items()):
        h.update(json.dumps(entry, sort_keys=True, default=str).encode())
        chain[step] = h.copy().hexdigest()[:16]
    return chain


def _global_step(doc: dict[str, Any]) -> int:
    step = doc.get("global_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else -1


def _noted(writes: dict[int, list[int]], step: int, written_ns: int) -> dict[int, list[int]]:
    """`writes` with one more write of `step`'s completions, the latest step's: of the earlier steps only those
    written more than once are kept (a later trainer state must explain those); a later step's were an earlier
    attempt's (the write is a relaunch's, below them)."""
    kept = {s: times for s, times in writes.items() if s < step and len(times) > 1}
    times = writes.get(step, [])
    kept[step] = times if written_ns in times else [*times, written_ns]
    return kept


def _rewritten(found: tuple[int, int, int, int], state: Path) -> str:
    """What showed a relaunch at the latest step read, for the log."""
    step, _, writes, entries = found
    return (f"completions of step {step} written {writes} times, {state} logs {entries} "
            f"entr{'y' if entries == 1 else 'ies'} there")


def _step_of(name: str) -> int:
    m = _PARQUET.match(name)
    return int(m.group(1)) if m else -1


def _latest(done: dict[str, list[int]]) -> int:
    """The latest step among completions files' names; -1: none."""
    return max((int(m.group(1)) for name in done if (m := _PARQUET.match(name))), default=-1)


def _identity(stat: os.stat_result) -> list[int]:
    """What tells one write of a file from another: TRL rewrites a step's file in place (same inode)."""
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns]


def _same(done: list[int] | None, identity: list[int]) -> bool:
    """`done` (a saved identity; [inode, size] from an earlier version) is this write of the file."""
    return done is not None and done == identity[:len(done)]


def _digest(rows: list[dict[str, Any]]) -> str:
    h = hashlib.sha1()
    for row in rows:
        h.update(json.dumps([row.get("prompt"), row.get("completion"), row.get("advantage")], default=str).encode())
    return h.hexdigest()
