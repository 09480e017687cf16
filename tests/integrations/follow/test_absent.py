"""`otel-grpo follow`: a gauge the latest followed step has no value for has no data point, whatever the file."""

from __future__ import annotations

import json
import shutil

from otel_grpo._stop_request import StopRequest
from otel_grpo.integrations.follow import JsonlStream, TrlOutput
from expected import as_logged

from .test_files import Run
from .test_trl import trl_output  # noqa: F401 (the module's fixture: a real GRPOTrainer's output)


def _gauges(run: Run) -> dict[str, dict]:
    data = run.reader.get_metrics_data()
    return {m.name: {tuple(sorted(p.attributes.items())): p.value for p in m.data.data_points}
            for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics for m in sm.metrics
            if m.name.startswith("grpo.") and hasattr(m.data.data_points[0], "value")}


def test_a_jsonl_line_without_a_key_or_with_null_leaves_it_absent(tmp_path):
    path = tmp_path / "trl.jsonl"
    path.write_text('{"step": 1, "kl": 0.1, "reward": 0.5, "rewards/fmt/mean": 0.25, "my_metric": 3}\n')
    run = Run(tmp_path, [JsonlStream("jsonl", path, source="trl")])
    run.once()
    assert {"grpo.trl.kl", "grpo.reward.mean", "grpo.reward_fn.mean", "grpo.extra.my_metric"} <= set(_gauges(run))
    with open(path, "a") as fp:  # not logged at step 2 (a second-iteration step); null: TRL's None
        fp.write('{"step": 2, "kl": 0.2, "rewards/fmt/mean": null}\n')
    run.once()
    gauges = _gauges(run)
    assert list(gauges["grpo.trl.kl"].values()) == [0.2]
    assert not {"grpo.reward.mean", "grpo.reward_fn.mean", "grpo.extra.my_metric"} & set(gauges)
    assert list(gauges["grpo.step_index"].values()) == [2.0]


def test_trl_s_last_logged_step_serves_only_its_own_values(tmp_path, trl_output):  # noqa: F811
    """The last step of a real TRL output (the writer's step 4 generates nothing: no reward logged), edited as
    TRL writes such a step: every completion at the length limit (terminated lengths 0.0), a reward
    function's None."""
    out = tmp_path / "run"
    shutil.copytree(trl_output, out)
    state_path = out / "checkpoint-4" / "trainer_state.json"
    state = json.loads(state_path.read_text())
    first = next(e for e in state["log_history"] if e.get("step") == 1)
    last = next(e for e in state["log_history"] if e.get("step") == 4 and "loss" in e)
    assert {"reward", "completions/mean_terminated_length", "rewards/reward_short/mean"} <= set(first)
    assert not {"reward", "rewards/reward_words/mean", "completions/mean_length"} & set(last)
    last.update({"completions/clipped_ratio": 1.0, "completions/mean_terminated_length": 0.0,
                 "completions/min_terminated_length": 0.0, "completions/max_terminated_length": 0.0,
                 "rewards/reward_short/mean": None})
    first["my_custom"] = 7.0  # a metric only step 1 logs: read after step 4's completions, it was served as current
    state_path.write_text(json.dumps(state))
    run = Run(tmp_path, [TrlOutput(out)])
    assert run.follower.run(StopRequest()) is True
    run.tel.flush()
    gauges = _gauges(run)
    assert gauges["grpo.trl.kl"] and list(gauges["grpo.completion.clipped_ratio"].values()) == [1.0]
    for name in ("grpo.reward.mean", "grpo.reward.std", "grpo.completion.length.mean",
                 "grpo.completion.terminated_length.mean", "grpo.completion.terminated_length.max"):
        assert name not in gauges, name
    assert "grpo.reward_fn.mean" not in gauges  # reward_words not logged at step 4, reward_short None
    assert "grpo.extra.my_custom" not in gauges
    # TRL's numbers as logged: step 4's own, its 0.0 terminated lengths included, reward_short's None not
    served = {dict(k)["metric"]: v for k, v in gauges["grpo.trl.logged"].items()}
    assert served == as_logged(last) and served["completions/mean_terminated_length"] == 0.0
    assert "rewards/reward_short/mean" not in served and "reward" not in served


def test_trl_s_checkpoint_after_its_completions_serves_the_latest_step_only(tmp_path):
    """TRL writes each step's completions as it logs, its trainer state only at a checkpoint: the follower read the
    completions of steps 1 and 2 first, and step 1's scalars then came as a late record that stayed current (its
    terminated lengths and a metric logged at step 1 only) beside step 2's. Records go out in step order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "run"
    (out / "completions").mkdir(parents=True)
    (out / "checkpoint-2").mkdir()
    for step in (1, 2):
        pq.write_table(pa.table({"step": [step] * 2, "prompt": ["p0", "p1"], "completion": [f"c{step}a", f"c{step}b"],
                                 "reward_short": [0.1 * step, 0.2 * step], "advantage": [0.5, -0.5]}),
                       out / "completions" / f"completions_{step:05d}.parquet")
    history = [
        {"step": 1, "loss": 0.1, "reward": 0.5, "completions/mean_terminated_length": 50.0,
         "completions/min_terminated_length": 40.0, "completions/max_terminated_length": 60.0,
         "completions/clipped_ratio": 0.5, "kl": 0.01, "my_custom": 7.0},
        {"step": 2, "loss": 0.2, "reward": 0.6, "completions/mean_terminated_length": 0.0,
         "completions/min_terminated_length": 0.0, "completions/max_terminated_length": 0.0,
         "completions/clipped_ratio": 1.0, "kl": 0.02},
    ]
    (out / "checkpoint-2" / "trainer_state.json").write_text(
        json.dumps({"global_step": 2, "max_steps": 2, "log_history": history}))
    run = Run(tmp_path, [TrlOutput(out)])
    assert run.follower.run(StopRequest()) is True
    run.tel.flush()
    gauges = _gauges(run)
    assert list(gauges["grpo.completion.clipped_ratio"].values()) == [1.0]
    assert list(gauges["grpo.step_index"].values()) == [2.0]
    for name in ("grpo.completion.terminated_length.mean", "grpo.completion.terminated_length.min",
                 "grpo.completion.terminated_length.max", "grpo.extra.my_custom"):
        assert name not in gauges, name
