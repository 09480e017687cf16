"""Each rank's end in the job's store, so that a launcher's SIGTERM after another rank fell ends the run as a crash.

    ends = RankEnds.join(run_id, group)  # every rank of a job, its process group up (Telemetry made, or a step)
    ends.record("stopped")               # as the rank's run ends: "finished", "preempted" or "stopped"
    ends.fallen()                        # on SIGTERM: the ranks that ended on their own before it

torchrun and `accelerate launch` stop every worker with SIGTERM when one fails: the signal a scheduler's
preemption sends. Only rank 0 exports the run's liveness, so another rank's crash (CUDA out of memory, the
kernel's OOM killer) reached the alerts as a preemption (GRPORunPreempted, a warning that says "resume it")
rather than as the crash it was (GRPOMetricsAbsent, a page). So every rank writes into the job's store (the
default process group's, which a launcher keeps across its restarts: the keys name the run and the restart round,
`TORCHELASTIC_RESTART_COUNT`):
- `proc/<rank>`: its host and pid, when it joins (its Telemetry is made, or a step begins, with the group up);
- `end/<rank>`: "running" as it joins, how its run ended as it ends. A rank that ended "stopped" (an exception,
  an exit without `finish()`) also counts itself into `fallen`, before its process exits, so before the launcher
  stops the rest.
On SIGTERM each rank looks at the ranks of its own host: one whose process is gone without an end was killed
(SIGKILL: nothing ran in it) and is counted into `fallen` too, where the ranks of another host (rank 0's) find
it. Every rank of a job handles SIGTERM (`_preemption`) and writes its end before it dies, so in a preemption
no rank is gone without one; a rank blocked in a collective is alive and says nothing. Only evidence counts:
a rank that says nothing leaves the preemption as it was.

Store calls run on a thread of their own with a bound: a store whose host died (rank 0's, or the launcher's)
must not hold a rank's exit or its signal handler.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from ._bounded import bounded
from ._exchange import ProcessGroup

_BOUND_S = 2.0
"""At most this long for one batch of store calls: a healthy store answers in milliseconds."""

T = TypeVar("T")


def _bounded(calls: Callable[[], T]) -> T | None:
    """`calls()` within `_BOUND_S`; None when the store failed or did not answer in time (the rank's end is then
    unknown, as before this module)."""
    return bounded(calls, "otel-grpo-rank-ends", _BOUND_S).value


def _gone(pid: int) -> bool:
    """The process `pid` has exited (a zombie not yet reaped by its launcher included)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True
    except (OSError, IndexError):  # no procfs (macOS): nothing is known
        return False


@dataclass(frozen=True)
class RankEnds:
    """This rank's handle on the job's record of how its ranks ended."""

    store: Any
    prefix: str
    rank: int
    local: range
    """The ranks on this host, as the launcher numbers them (`LOCAL_RANK`, `LOCAL_WORLD_SIZE`)."""
    host: str
    pid: int

    @classmethod
    def join(cls, run_id: str, group: ProcessGroup) -> RankEnds | None:
        """This rank's handle, its host and pid written; None where the group has no store that answers."""
        try:
            store = group.dist.distributed_c10d._get_default_store()
        except Exception:  # a process group made without a store (a custom backend): nothing to write into
            return None
        local_rank = int(os.environ.get("LOCAL_RANK", "-1"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
        first = group.rank - local_rank
        local = range(first, first + local_world) if 0 <= local_rank < local_world else range(group.rank,
                                                                                               group.rank + 1)
        round_ = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restart's processes are new ranks
        ends = cls(store, f"otel-grpo/{run_id}/{round_}/", group.rank, local, socket.gethostname(), os.getpid())
        return ends if _bounded(ends._running) else None

    def _running(self) -> bool:
        """This rank runs (again): its host and pid written, an end of an earlier run of this id in the job undone."""
        self.store.set(f"{self.prefix}proc/{self.rank}", f"{self.host} {self.pid}")
        self.store.set(f"{self.prefix}end/{self.rank}", "running")  # not every store can delete a key
        return True

    def record(self, how: str) -> None:
        """This rank's run ended `how`: "finished", "preempted" or "stopped" (anything else: a crash)."""
        if os.getpid() != self.pid:  # a forked child's exit is not the rank's end
            return

        def write() -> None:
            self.store.set(f"{self.prefix}end/{self.rank}", how)
            if how == "stopped":
                self._fall(self.rank, "raised", self.pid)

        _bounded(write)

    def fallen(self) -> list[tuple[int, str]]:
        """On SIGTERM: the ranks that ended on their own before it, with how ("raised": its run stopped without
        finishing; "killed": its process is gone without an end), ranks of this host found killed counted in."""
        if os.getpid() != self.pid:
            return []

        def look() -> list[tuple[int, str]]:
            for rank in self.local:
                if rank != self.rank and (pid := self._killed(rank)) is not None:
                    self._fall(rank, "killed", pid)
            count = int(self.store.add(f"{self.prefix}fallen", 0))
            found: dict[int, str] = {}
            for n in range(1, count + 1):
                key = f"{self.prefix}fallen/{n}"
                if self.store.check([key]):  # else counted, not yet written: a get would wait for it
                    rank, how, pid = self.store.get(key).decode().split()
                    if self._still(int(rank), how, pid):
                        found.setdefault(int(rank), how)
            return sorted(found.items())

        return _bounded(look) or []

    def _end(self, rank: int) -> str | None:
        key = f"{self.prefix}end/{rank}"
        return self.store.get(key).decode() if self.store.check([key]) else None

    def _proc(self, rank: int) -> tuple[str, str] | None:
        key = f"{self.prefix}proc/{rank}"
        if not self.store.check([key]):
            return None
        host, pid = self.store.get(key).decode().split()
        return host, pid

    def _killed(self, rank: int) -> str | None:
        """The pid of `rank`'s process where it is of this host, gone, and ended nothing; else None."""
        proc = self._proc(rank)
        if proc is None or proc[0] != self.host or self._end(rank) != "running" or not _gone(int(proc[1])):
            return None
        return proc[1]

    def _still(self, rank: int, how: str, pid: str) -> bool:
        """A fallen entry still holds: the rank's process is the one that fell (not one that joined since, in a
        notebook's next `train()` under the id) and its end still says so."""
        proc = self._proc(rank)
        return proc is not None and proc[1] == pid and self._end(rank) == ("stopped" if how == "raised" else "running")

    def _fall(self, rank: int, how: str, pid: int | str) -> None:
        n = self.store.add(f"{self.prefix}fallen", 1)
        self.store.set(f"{self.prefix}fallen/{n}", f"{rank} {how} {pid}")
