"""verl 0.9.1's generation dumps: `<trainer.rollout_data_dir>/<step>.jsonl`, one JSON line per sample.

From `RayPPOTrainer._write_generations` (`verl/trainer/ppo/ray_trainer.py`): written in one
go by a background thread, with `input`, `output`, `gts`, `score`, `step` and each entry of
the reward's extra info; opened with "w", so a job relaunched into the same directory
rewrites `1.jsonl`, `2.jsonl`, ... in place.

A file counts as done by (inode, size, mtime): a rewritten file is read again, and the
steps remembered only by number (`floor`, past `KEEP` files) are done only while their
mtime is not newer than the newest of them. Reading streams line by line and stops once
`max_pending_bytes` of files are read and not yet emitted (memory stays bounded whatever
the backlog); a file over `max_dump_bytes`, or not a regular file, is reported once and
left out. The directory is listed when it changed and every `RESCAN_S` seconds (in-place
rewrites change no directory entry); in between only files not yet done are looked at.
"""

from __future__ import annotations

import os
import re
import stat
import statistics
import time
from pathlib import Path
from typing import Any

from ._records import PARSE_ERRORS, BadInput, Record, carried, finite_or_none, json_line
from ._tail import LineTail, open_regular
from ._verl import VERL

_ROLLOUT_FILE = re.compile(r"^(\d+)\.jsonl$")
_ROLLOUT_COLUMNS = {"input": "prompt", "output": "completion", "score": "reward", "gts": "ground_truth"}
ZERO_STD = 1e-8  # a group whose reward std (n - 1) is at most this gives no learning signal (as TRL and ours)


def rollout_row(entry: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """One dumped sample as a sample row: input/output/score/gts renamed, numeric extra info as rewards;
    and how many of its numbers were too large for a float (kept as +-inf: `carried`)."""
    row: dict[str, Any] = {}
    rewards: dict[str, float] = {}
    too_large = 0
    for key, value in entry.items():
        if key == "step":
            continue
        value, huge = carried(value)
        too_large += huge
        if key in _ROLLOUT_COLUMNS:
            row[_ROLLOUT_COLUMNS[key]] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and finite_or_none(value) is not None:
            rewards[key] = float(value)  # reward_extra_info: the reward function's components
        else:
            row[key] = value
    if rewards:
        row["rewards"] = rewards
    return row, too_large


def group_spread(rows: list[dict[str, Any]]) -> dict[str, float]:
    """`frac_reward_zero_std` over the dump's prompt groups (rows sharing an `input`, two or more with a
    finite score): verl's metrics file has no per-group statistic, its dumps have every score."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        score = finite_or_none(row.get("reward"))
        if score is not None and isinstance(row.get("prompt"), str):
            groups.setdefault(row["prompt"], []).append(score)
    sized = [g for g in groups.values() if len(g) > 1]
    if not sized:
        return {}
    return {"frac_reward_zero_std": sum(statistics.stdev(g) <= ZERO_STD for g in sized) / len(sized)}


class VerlRollouts:
    """`<dir>/<step>.jsonl` generation dumps. A file is read once it ends in a newline and either a
    later step's file exists or its size has not changed for `settle_s` (verl writes it in one go);
    `settle_s=0` reads the newest file at once (the run is over: `--finished`)."""

    name = "verl-rollouts"
    source = VERL
    holds = "samples"
    KEEP = 256  # files remembered individually; older steps count as done by number and mtime
    RESCAN_S = 30.0
    attempt = None  # each dump's own: its mtime (a relaunched job rewrites it); paired, the metrics' attempt

    def __init__(self, directory: str | os.PathLike[str], settle_s: float = 2.0, *,
                 max_pending_bytes: int = 64 << 20, max_dump_bytes: int = 256 << 20) -> None:
        self.dir = Path(directory)
        self.settle_s = settle_s
        self.max_pending_bytes = max_pending_bytes
        self.max_dump_bytes = max_dump_bytes
        self.bad = BadInput(self.name)
        self.ended = False
        self.behind = False
        """The last poll stopped before the end (budget): records of later steps are still unread."""
        self._done: dict[str, list[int]] = {}  # file name -> [inode, size, mtime_ns] when emitted
        self._floor = (-1, -1)  # (step, mtime_ns): files of steps <= step, not modified since, are done
        self._restart()

    def _restart(self) -> None:
        self._sizes: dict[str, tuple[int, float]] = {}
        self._handed: dict[str, list[int]] = {}  # read and given to the follower, not yet emitted
        self._listing: list[tuple[int, str]] = []
        self._listed: tuple[int, float] = (-1, -1.0)  # (directory mtime_ns, monotonic time of the listing)

    def restore(self, saved: dict[str, Any] | None, from_start: bool) -> None:
        """Resume at `saved` (also after a failed flush: what was handed out since is read again)."""
        self._restart()
        if saved:
            self._done = {k: list(v) for k, v in saved.get("done", {}).items()}
            floor = saved.get("floor", -1)
            self._floor = (int(floor), 2**63) if isinstance(floor, int) else (int(floor[0]), int(floor[1]))
        elif not from_start:
            for step, name in self._list():
                info = self._stat(name)
                if info is not None:
                    self._floor = (max(self._floor[0], step), max(self._floor[1], info.st_mtime_ns))

    def cursor(self) -> dict[str, Any]:
        return {"done": dict(self._done), "floor": list(self._floor)}

    def mark_done(self, record: Record) -> None:
        name, key = record.cursor
        self._done[name] = key
        self._handed.pop(name, None)
        if len(self._done) > self.KEEP:
            by_step = sorted(self._done, key=lambda n: int(n.split(".")[0]))
            step, mtime = self._floor
            for old in by_step[: len(self._done) - self.KEEP]:
                entry = self._done.pop(old)
                step, mtime = max(step, int(old.split(".")[0])), max(mtime, entry[2] if len(entry) > 2 else 2**63)
            self._floor = (step, mtime)

    def _list(self) -> list[tuple[int, str]]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.bad.unreadable(self.dir, f"{type(exc).__name__}: {exc}")
            return []
        self.bad.readable(self.dir)
        return sorted((int(m.group(1)), n) for n in names if (m := _ROLLOUT_FILE.match(n)))

    def _stat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(self.dir / name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.bad.unreadable(self.dir / name, f"{type(exc).__name__}: {exc}")
            return None

    def _candidates(self) -> tuple[list[tuple[int, str]], bool]:
        """The files to look at this poll and whether that is every file (a full scan)."""
        now = time.monotonic()
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except OSError:
            mtime = -1
        # A directory modified within the last 2 s may change again within its mtime's granularity.
        unchanged = mtime == self._listed[0] and time.time_ns() - mtime > 2_000_000_000
        if unchanged and now - self._listed[1] < self.RESCAN_S:
            floor = self._floor[0]
            return [(s, n) for s, n in self._listing if s > floor and n not in self._done], False
        self._listing, self._listed = self._list(), (mtime, now)
        return self._listing, True

    def poll(self, max_records: int) -> list[Record]:
        files, _ = self._candidates()
        last_step = self._listing[-1][0] if self._listing else None
        pending = sum(key[1] for key in self._handed.values())
        out: list[Record] = []
        self.behind = False
        for step, name in files:
            if len(out) >= max_records or pending >= self.max_pending_bytes:
                self.behind = True
                break
            info = self._stat(name)
            if info is None:
                continue
            key = [info.st_ino, info.st_size, info.st_mtime_ns]
            done = self._done.get(name)
            if done is not None and done == key[:len(done)] or self._handed.get(name) == key:
                continue  # (a state saved before mtimes were kept holds [inode, size])
            if name not in self._done and step <= self._floor[0] and info.st_mtime_ns <= self._floor[1]:
                continue
            if step == last_step and not self._settled(name, info.st_size):
                continue  # the newest file may still be written; a later step's file means it is complete
            record = self._read(step, self.dir / name, info, key)
            if record is not None:
                self._sizes.pop(name, None)
                self._handed[name] = key
                pending += info.st_size
                out.append(record)
        return out

    def _settled(self, name: str, size: int) -> bool:
        if self.settle_s <= 0:
            return True
        now = time.monotonic()
        seen = self._sizes.get(name)
        if seen is None or seen[0] != size:
            self._sizes[name] = (size, now)
            return False
        return now - seen[1] >= self.settle_s

    def _read(self, step: int, path: Path, info: os.stat_result, key: list[int]) -> Record | None:
        """The dump's rows, streamed line by line; None while it is still being written."""
        cursor = (path.name, key)
        if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_dump_bytes:
            why = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"over {self.max_dump_bytes} bytes"
            self.bad.skip(str(path), f"{why}; its samples are left out")
            return Record(step, rows=[], cursor=cursor)
        if not self._complete(path, info.st_size):
            return None  # still being written (verl's last line ends in a newline), or unreadable now
        tail = LineTail(path, bad=self.bad, max_line=self.max_dump_bytes)
        rows: list[dict[str, Any]] = []
        too_large = 0
        try:
            while True:
                for line, end in tail.read():
                    if not line.strip():
                        continue
                    try:
                        entry = json_line(line)
                        if not isinstance(entry, dict):
                            raise TypeError(f"a {type(entry).__name__}, not an object")
                    except PARSE_ERRORS as exc:
                        self.bad.skip(f"{path}:{end - len(line) - 1}", f"{type(exc).__name__}: {str(exc)[:200]}")
                        continue
                    row, huge = rollout_row(entry)
                    rows.append(row)
                    too_large += huge
                if tail.at_eof or not tail.is_open:
                    break
        finally:
            tail.close()
        if not tail.at_eof:
            return None  # became unreadable while read (reported): read again on a later poll
        if too_large:
            self.bad.values(str(path), too_large, "too large for a float, sent as non-finite (+-inf)")
        return Record(step, scalars=group_spread(rows), rows=rows, cursor=cursor, attempt=info.st_mtime_ns)

    def _complete(self, path: Path, size: int) -> bool:
        """The file ends in a newline (or is empty)."""
        if not size:
            return True
        try:
            with open_regular(path) as fp:
                return os.pread(fp.fileno(), 1, size - 1) == b"\n"
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            self.bad.unreadable(path, f"{type(exc).__name__}: {exc}")
            return False
