"""`SpillReader`: a spill as `otel-grpo replay` reads it, a step at a time, from what the real writer wrote."""

from __future__ import annotations

import json
import math

from otel_grpo.telemetry._spill import SampleSpill, SpillReader, spilled_value


def test_steps_come_in_order_with_every_ranks_files_and_every_line_of_a_resumed_step(tmp_path):
    rank0, rank1 = SampleSpill(tmp_path), SampleSpill(tmp_path, suffix="_rank1")
    for step in (10, 2, 11):  # the run resumed from a checkpoint at step 10: steps 10 and 11 again
        rank0.write_step("exp", step, 1, 2, {"kl": step / 100}, {"rollout": 0.5})
    rank0.write_step("exp", 10, 3, 4, {"kl": 0.2}, {})
    rank0.write(2, [{"run_id": "exp", "step": 2, "sample_index": i} for i in range(3)])
    rank1.write(2, [{"run_id": "exp", "step": 2, "sample_index": 10 + i} for i in range(2)])
    rank0.write(7, [{"run_id": "other", "step": 7, "sample_index": 0}])  # samples of a step without a step line

    spill = SpillReader(tmp_path)
    assert spill.steps == [2, 7, 10, 11]
    assert [line["metrics"]["kl"] for line in spill.step_lines(10)["exp"]] == [0.1, 0.2]
    assert spill.step_lines(7) == {}
    assert sorted(r["sample_index"] for r in spill.samples(2)) == [0, 1, 2, 10, 11]
    assert spill.samples(7) == [{"run_id": "other", "step": 7, "sample_index": 0}]
    assert spill.unreadable == {}


def test_a_line_without_its_run_and_step_is_counted_per_file_and_a_file_named_otherwise_comes_last(tmp_path):
    spill = SampleSpill(tmp_path)
    spill.write_step("exp", 1, 1, 2, {"kl": 0.1}, {})
    with spill.steps_path.open("a") as fh:
        fh.write('{"run_id": "exp", "step": "2"}\n\n[]\n{"run_id": "exp", "st')  # a string step; blank; a list; cut
    spill.write(1, [{"run_id": "exp", "step": 1, "sample_index": 0}])
    odd = tmp_path / "samples" / "step_final.jsonl"
    odd.write_text(json.dumps({"run_id": "exp", "step": 1, "sample_index": 5}) + "\n" + '{"step": 1}\n')

    reader = SpillReader(tmp_path)
    assert reader.steps == [1, None]
    assert reader.samples(None) == [{"run_id": "exp", "step": 1, "sample_index": 5}]
    assert reader.unreadable == {spill.steps_path: 3, odd: 1}


def test_a_step_spilled_twice_by_the_child_and_the_trainer_that_took_over_is_read_once(tmp_path):
    # The telemetry process spilled the step, then died before it acknowledged it: the trainer emits it
    # again. An evaluation at the same step, and another attempt's rows, are no copies and stay.
    child, trainer = SampleSpill(tmp_path), SampleSpill(tmp_path)
    for spill in (child, trainer):
        spill.write_step("exp", 4, 1, 2, {"kl": 0.4}, {"rollout": 0.5}, attempt=7)
        spill.write(4, [{"run_id": "exp", "step": 4, "sample_index": i, "source_rank": 0, "grpo.attempt": 7}
                        for i in range(3)])
    trainer.write_step("exp", 4, 3, 4, {"eval_reward": 0.9}, {}, attempt=7)
    trainer.write(4, [{"run_id": "exp", "step": 4, "sample_index": 0, "source_rank": 0, "grpo.attempt": 8},
                      {"run_id": "exp", "step": 4, "prompt": "no index"}, {"run_id": "exp", "step": 4, "prompt": "no index"}])

    spill = SpillReader(tmp_path)
    assert [line["metrics"] for line in spill.step_lines(4)["exp"]] == [{"kl": 0.4}, {"eval_reward": 0.9}]
    rows = spill.samples(4)
    assert [(r.get("sample_index"), r.get("grpo.attempt")) for r in rows] == \
        [(0, 7), (1, 7), (2, 7), (0, 8), (None, None), (None, None)]


def _strict(line: str) -> dict:
    """JSON as jq or a browser reads it: NaN and Infinity are no JSON."""
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")
    return json.loads(line, parse_constant=refuse)


def test_a_non_finite_number_in_a_list_column_is_strict_json_and_reads_back(tmp_path):
    """A row's list of numbers (per-token log-probs) with a NaN in it: the line stays JSON a strict reader takes,
    and reads back as the number it was, as a NaN column does."""
    spill = SampleSpill(tmp_path)
    spill.write(0, [{"run_id": "r", "step": 0, "reward": float("nan"), "token_logprobs": (0.1, float("nan"), -math.inf)}])
    (line,) = (tmp_path / "samples" / "step_0.jsonl").read_text().splitlines()
    row = _strict(line)
    back = spilled_value(row["token_logprobs"])
    assert back[0] == 0.1 and math.isnan(back[1]) and back[2] == -math.inf
    assert math.isnan(spilled_value(row["reward"]))


def test_each_writers_max_text_chars_is_read_from_its_step_lines(tmp_path):
    """Where each process's export cut texts: its step lines say it, a relaunch with another setting its own; a
    step line of an earlier release says none, and neither does a writer with no step line."""
    SampleSpill(tmp_path, max_text_chars=100).write_step("exp", 0, 1, 2, {"kl": 0.1}, {}, attempt=7)
    SampleSpill(tmp_path, max_text_chars=300).write_step("exp", 1, 1, 2, {"kl": 0.1}, {}, attempt=9, claims=False)
    SampleSpill(tmp_path, max_text_chars=50).write_step("exp", 1, 1, 2, {"kl": 0.1}, {})  # a record of no attempt
    SampleSpill(tmp_path).write_step("old", 0, 1, 2, {"kl": 0.1}, {}, attempt=7)  # a release that said none
    spill = SpillReader(tmp_path)
    assert [spill.cut("exp", a) for a in (7, 9, None, 8)] == [100, 300, 50, None]
    assert (spill.cut("old", 7), spill.cut("exp", "7")) == (None, None)
    assert [line.get("max_text_chars") for line in spill.step_lines(1)["exp"]] == [300, 50]
