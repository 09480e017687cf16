"""Local JSONL spill of every selected sample and every step's scalars: the copy that survives a
dead collector or sidecar, and that `otel-grpo replay` sends again.

    spill = SampleSpill(Path("runs/exp-42"))
    spill.write(7, [{"run_id": "exp-42", "step": 7, "prompt": "...", ...}])   # -> runs/exp-42/samples/step_7.jsonl
    spill.write_step("exp-42", 7, start_ns, end_ns, {"kl": 0.01}, {"rollout": 1.5})  # -> runs/exp-42/steps.jsonl

Every write appends whole lines or nothing: a write that fails (a full disk) is cut back to
where it began, so a reader never meets half a line. A write never raises, whatever fails (a read-only
or full file system, a row that JSON cannot hold): the spill is a copy of what the exporters send, never
a gate on it, so the step still goes out, and training goes on. Its first failure is one warning, a
recovery one info line, and the run's end says how many steps and sample rows it could not keep (`report`).
Text arrives valid (`_text`): a line holds what the sample event holds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from otel_grpo.catalog import spans

if TYPE_CHECKING:
    from ._quiet import ExportHealth

logger = logging.getLogger("otel_grpo.telemetry")


_FLOAT = "float"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _json_safe(value: Any) -> Any:
    # JSON has no NaN / Infinity; strict readers (jq, browsers) reject Python's spelling. A non-finite float is
    # an object, {"float": "nan"} ("inf", "-inf"), which no other value of a line is (a row's mappings are its
    # columns: `flatten_row`): the bare "nan" that earlier releases wrote is also a model's answer "nan".
    # A list column (a row's sequence of numbers, an OTLP array) is spelled alike element by element.
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def spilled_value(value: Any, number: bool = False) -> Any:
    """A value of a spilled line as it was before `_json_safe`: {"float": "nan"} is NaN.

    `number`: the value can only be a number (a step line's scalar), so the bare "nan", "inf" or "-inf" of a
    spill from an earlier release is one too. Elsewhere (a sample row) such a string is a text: an earlier
    release wrote a non-finite sample value (a NaN reward) and a text of that value alike, and its spill cannot
    tell them apart; read as the text, its NaN reward still stores as a null reward, and another column
    (`reward.<fn>`) holds the text "nan" where the export stored null."""
    if type(value) is dict and value.keys() == {_FLOAT}:
        return _NON_FINITE.get(value[_FLOAT], value)
    if type(value) is list:
        return [spilled_value(v) for v in value]
    if number and type(value) is str:
        return _NON_FINITE.get(value, value)
    return value


class SampleSpill:
    """Appends sample records to `<output_dir>/samples/step_<step>.jsonl`; never raises.

    `suffix` keeps ranks apart when every rank exports (`step_3_rank1.jsonl`). `exports`: the health of the
    exporters that send the same steps, so that a failure says whether what was not spilled is lost (None: no
    exporter sends them, so it is). `max_text_chars`: where the export cuts this process's texts (the spill keeps
    them whole), said on each step line so that a replay cuts them there too (`SpillReader.cut`); None: unsaid.
    """

    def __init__(self, output_dir: Path, suffix: str = "", exports: ExportHealth | None = None,
                 max_text_chars: int | None = None) -> None:
        self.directory = Path(output_dir) / "samples"
        self.steps_path = Path(output_dir) / f"steps{suffix}.jsonl"
        """One line per emitted step span: what the sidecar's step row is made of."""
        self._suffix = suffix
        self._exports = exports
        self._cut = {} if max_text_chars is None else {_CUT: max_text_chars}
        self.written = 0
        self.unwritten_steps = 0
        """Step lines that could not be written: their steps are not in the spill, and no replay sends them."""
        self.unwritten_rows = 0
        self.failing = False
        """The last write failed."""
        self.error: str | None = None
        """The first failure's cause, once one failed."""
        self._recovered = False

    def path(self, step: int) -> Path:
        return self.directory / f"step_{step}{self._suffix}.jsonl"

    def write_step(self, run_id: str, step: int, start_ns: int | None, end_ns: int | None,
                   metrics: Mapping[str, float], phases: Mapping[str, float], attempt: int | None = None,
                   claims: bool = True) -> None:
        """The step's scalars (a non-finite one as `_json_safe` spells it) and its phase durations (seconds, summed
        per phase name); `attempt`: whose (`grpo.attempt`); `claims`: False for a record that claims no attempt at
        its step (an evaluation, another rank's); and the process's `max_text_chars`. Replay sends what no newer
        attempt superseded (`SpillReader.superseded`)."""
        line = {"run_id": run_id, "step": step, "start_ns": start_ns, "end_ns": end_ns,
                "metrics": {k: _json_safe(v) for k, v in metrics.items()}, "phases": dict(phases),
                **({"attempt": attempt} if attempt is not None else {}),
                **({} if claims else {"claims": False}), **self._cut}
        if self._write(self.steps_path, [line]) is None:
            self.unwritten_steps += 1

    def write(self, step: int, records: Sequence[Mapping[str, Any]]) -> None:
        if not records:
            return
        if self._write(self.path(step), records) is None:
            self.unwritten_rows += len(records)
        else:
            self.written += len(records)

    def _write(self, path: Path, records: Sequence[Mapping[str, Any]]) -> int | None:
        """`records` appended to `path` as JSON lines, their non-finite floats as `_json_safe` spells them; None
        where anything failed, and then nothing was written (counted by the caller, said by `_failed`). Never
        raises: the one guard of the copy-not-a-gate rule (module docstring)."""
        try:
            text = "".join(json.dumps({k: _json_safe(v) for k, v in r.items()}, ensure_ascii=False, default=str)
                           + "\n" for r in records)
            self._append(path, text)
        except Exception as exc:  # an OSError (a full disk) as much as a row JSON cannot hold
            self._failed(exc)
            return None
        self._worked()
        return len(records)

    def report(self, exported: bool) -> None:
        """At the run's end, what the spill could not keep, if anything. `exported`: every export of the run's
        spans succeeded, so the receiver has them (an info line); else a warning that the rest is lost."""
        if not (self.unwritten_steps or self.unwritten_rows):
            return
        logger.log(logging.INFO if exported else logging.WARNING,
                   "otel-grpo: %d steps and %d sample rows of this run were not spilled to %s (%s), so "
                   "`otel-grpo replay` cannot send them; %s", self.unwritten_steps, self.unwritten_rows,
                   self.directory.parent, self.error,
                   "every export succeeded" if exported else "what the exporters did not deliver of them is lost")

    def _failed(self, exc: Exception) -> None:
        if self.failing:  # a full disk must not stop training, nor flood the log: counted for `report`
            return
        self.failing = True
        if self.error is not None:  # failing again after a recovery: counted for `report`, one warning a run
            return
        self.error = f"{type(exc).__name__}: {exc}"
        exports = self._exports
        fate = ("no OTLP traces exporter sends them: these steps and samples are lost" if exports is None
                else "exports fail too: these steps and samples are lost" if exports.failing
                else "they still go to the exporters, but a replay cannot send them again")
        logger.warning("otel-grpo: spilling to %s failed (%s); training continues; %s; the run's end says how "
                       "many were not spilled", self.directory.parent, self.error, fate)

    def _worked(self) -> None:
        if not self.failing:
            return
        self.failing = False
        if not self._recovered:  # once: a nearly full disk takes a step line and refuses its samples every step
            self._recovered = True
            logger.info("otel-grpo: spilling to %s works again (%d steps and %d sample rows not spilled so far; "
                        "later failures are counted, not logged)", self.directory.parent, self.unwritten_steps,
                        self.unwritten_rows)

    @staticmethod
    def _append(path: Path, text: str) -> None:
        data = text.encode("utf-8")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:  # first write, or the directory was removed: a mkdir only then, not every step
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        try:
            start = os.fstat(fd).st_size
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view):]
            except OSError:
                # A full disk took part of the lines: cut the file back to its last whole line.
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)


_SAMPLE_FILE = re.compile(r"step_(\d+)(?:_rank\d+)?\.jsonl")
_CUT = "max_text_chars"
"""A step line's key: where the export cut the texts of the process that wrote it (a release before did not say)."""


class SpillReader:
    """A run's spill, read a step at a time (`otel-grpo replay`): what is held is the step lines' places
    in their files and one step's samples, whatever the size of the spill.

        spill = SpillReader(Path("runs/exp-42"))
        for step in spill.steps:              # ascending; None last: sample files named otherwise
            lines = spill.step_lines(step)    # {run_id: [step line, ...]} (a resumed run wrote some twice)
            rows = spill.samples(step)        # the sample rows of every rank's file of that step
        spill.cut("exp-42", attempt)          # where that attempt's export cut texts (max_text_chars), if said
        spill.unreadable                      # {file: lines skipped}: no JSON object with a run id and a step

    The spill is written at least once: a step whose telemetry process died before it acknowledged
    the step is emitted again by the trainer, after the child may have spilled it. The reader makes it
    exactly once: a step line written twice, word for word, is read once, and so is a sample row
    written twice (the same run, step, attempt, rank and sample index; the first one read is kept).
    """

    def __init__(self, output_dir: Path) -> None:
        output_dir = Path(output_dir)
        self.unreadable: dict[Path, int] = {}
        self._places: dict[int, dict[str, list[tuple[Path, int]]]] = {}  # step -> run -> (file, offset)
        self._resumed: dict[str, dict[int, int]] = {}  # run -> attempt -> the first step it claimed
        self._floors: dict[str, list[tuple[int, int, int | None]]] = {}  # `_claims`, once read
        self._cuts: dict[tuple[str, int | None], int] = {}  # (run, writer attempt) -> its max_text_chars
        for path in sorted(output_dir.glob("steps*.jsonl")):
            with path.open("rb") as fh:
                offset = 0
                for raw in fh:
                    row = self._row(path, raw)
                    if row is not None:
                        self._places.setdefault(row["step"], {}).setdefault(row["run_id"], []).append((path, offset))
                        attempt, cut = row.get("attempt"), row.get(_CUT)
                        if type(cut) is int and (attempt is None or type(attempt) is int):
                            self._cuts[(row["run_id"], attempt)] = cut
                        if type(attempt) is int and row.get("claims", True) is not False:
                            firsts = self._resumed.setdefault(row["run_id"], {})
                            firsts[attempt] = min(firsts.get(attempt, row["step"]), row["step"])
                    offset += len(raw)
        self._files: dict[int | None, list[Path]] = {}
        for path in sorted((output_dir / "samples").glob("step_*.jsonl")):
            match = _SAMPLE_FILE.fullmatch(path.name)
            self._files.setdefault(int(match.group(1)) if match else None, []).append(path)
        numbered = sorted({*self._places, *(step for step in self._files if step is not None)})
        self.steps: list[int | None] = numbered + ([None] if None in self._files else [])

    def cut(self, run_id: str, attempt: object) -> int | None:
        """Where the export of the run's writer `attempt` (a sample row's: `row_attempt`) cut its texts, as its
        step lines say (the last one read, were they to differ); None where none says it (an earlier release)."""
        if attempt is not None and type(attempt) is not int:
            return None
        return self._cuts.get((run_id, attempt))

    def superseded(self, run_id: str, step: int, attempt: object, claims: bool = True) -> bool:
        """Whether a newer attempt of the run claimed `step` or a step before it: then what `attempt` (an older
        one) spilled at `step` is of a run that no longer is (the relaunch resumed from before it), as the
        sidecar holds it. `claims` False: `attempt` is the writer's of a record that claims nothing (an
        evaluation, another rank's), older where it is below the writers counted as the newer one's
        (`spans.writers_from`), as the sidecar counts them. A line or row without an attempt is superseded
        by none."""
        if type(attempt) is not int:
            return False
        return any(first <= step and (newer > attempt if claims else since is not None and attempt < since)
                   for newer, first, since in self._claims(run_id))

    def _claims(self, run_id: str) -> list[tuple[int, int, int | None]]:
        """The run's claiming attempts: (attempt, the first step it claimed, the first writer counted as its)."""
        if run_id not in self._floors:
            firsts = sorted(self._resumed.get(run_id, {}).items())
            self._floors[run_id] = [(attempt, first, spans.writers_from(firsts[i - 1][0] if i else None, attempt))
                                    for i, (attempt, first) in enumerate(firsts)]
        return self._floors[run_id]

    def step_lines(self, step: int | None) -> dict[str, list[dict]]:
        lines: dict[str, list[dict]] = {}
        for run_id, places in self._places.get(step, {}).items():  # type: ignore[arg-type]
            seen: set[bytes] = set()
            for path, offset in places:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    raw = fh.readline().strip()
                if raw not in seen:  # another line of the step (an evaluation, a resumed attempt) differs
                    seen.add(raw)
                    lines.setdefault(run_id, []).append(json.loads(raw))
        return lines

    def samples(self, step: int | None) -> list[dict]:
        rows, seen = [], set()
        for path in self._files.get(step, []):
            with path.open("rb") as fh:
                for raw in fh:
                    row = self._row(path, raw)
                    if row is None:
                        continue
                    key = _sample_key(row)
                    if key is None or key not in seen:  # a row without a sample index (an older spill) is kept
                        seen.add(key)
                        rows.append(row)
        return rows

    def _row(self, path: Path, raw: bytes) -> dict | None:
        """A line's object if it names its run and step, else None (counted; blank lines are nothing)."""
        try:
            row = json.loads(raw.decode("utf-8", errors="replace"))
        except ValueError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("run_id"), str) and row["run_id"] \
                and type(row.get("step")) is int:
            return row
        if raw.strip():
            self.unreadable[path] = self.unreadable.get(path, 0) + 1
        return None


def row_attempt(row: Mapping[str, Any]) -> tuple[object, bool]:
    """A spilled sample row's writer attempt, and whether it claims its step (the attribute it was sent under)."""
    if spans.ATTEMPT_ATTR in row:
        return row[spans.ATTEMPT_ATTR], True
    return row.get(spans.WRITER_ATTEMPT_ATTR), False


def _sample_key(row: dict) -> tuple | None:
    """What names one sample row of a spill: None where the row has no sample index to name it by."""
    index = row.get("sample_index")
    if type(index) is not int:
        return None
    return row["run_id"], row["step"], row_attempt(row)[0], row.get("source_rank"), index
