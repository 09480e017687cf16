"""The TRL integration's stats on hand-built tensors and settings, without TRL: exact values."""

from __future__ import annotations

import dataclasses
import math

import pytest
import numpy as np
import torch

from otel_grpo import signals
from otel_grpo.signals import _validate
from otel_grpo.integrations.trl._accumulate import Accumulator
from otel_grpo.integrations.trl._generation import (Generation, generation_stats, tool_spans, truncated_flags,
                                                    weighted_totals)
from otel_grpo.integrations.trl._generation_rows import (GENERATION_TABLE, SampleBatch, attach_generation,
                                                         generation_values, sample_rows)
from otel_grpo.integrations.trl._micro_batch import MicroBatch, policy_table
from otel_grpo.integrations.trl._policy_rows import COLUMNS, KIND_ENTROPY, attach, policy_values
from otel_grpo.integrations.trl._settings import TrlSettings
from tests.signals.test_host_transfers import host_transfers  # noqa: F401 (a fixture)

L2 = math.log(2.0)
K3_LOG2 = 2.0 - L2 - 1.0  # k3 where log pi_ref - log pi_theta = log 2


def settings(**kw) -> TrlSettings:
    base = {"reward_names": ("fmt",), "reward_weights": (1.0,), "num_generations": 2, "epsilon_low": 0.2,
            "epsilon_high": 0.2, "beta": 0.04, "stop_ids": frozenset({0, 1})}
    return TrlSettings(**(base | kw))


def reduced(stats: signals.Stats) -> signals.ReducedStats:
    return signals.reduce_stats(stats)


def policy(st: TrlSettings, batches: list[MicroBatch]) -> dict[str, float]:
    """The policy stats of `batches` as a logged step finishes them: one table, its host rows."""
    values, _ = policy_values(st, policy_table(st, batches).reshape(-1).tolist())
    return values


# Two rows of two tokens (the second row's second token is padding): ratios 2 and 1/2 on row 0, 1 on row 1.
LOGPS = torch.tensor([[0.0, -L2], [-1.0, 0.0]])
OLD = torch.tensor([[-L2, 0.0], [-1.0, 0.0]])
REF = torch.tensor([[0.0, 0.0], [-1.0 + L2, 0.0]])
MASK = torch.tensor([[1, 1], [1, 0]])


def micro_batch(**kw) -> MicroBatch:
    return MicroBatch(**({"logps": LOGPS, "old": OLD, "advantages": torch.tensor([1.0, -1.0]), "mask": MASK,
                          "ref": REF} | kw))


def test_policy_stats_token_clips_and_trl_kl_with_and_without_bias_correction():
    got = policy(settings(use_bias_correction_kl=False), [micro_batch()])
    assert got["clip_ratio_high_mean"] == pytest.approx(1 / 3)  # ratio 2 > 1.2 with a positive advantage
    assert got["clip_ratio_low_mean"] == 0.0  # ratio 1/2 has a positive advantage: not clipped low
    assert got["trl_kl"] == pytest.approx((0.0 + K3_LOG2 + K3_LOG2) / 3)  # k3 of (ref - logps) = 0, log 2, log 2
    corrected = policy(settings(use_bias_correction_kl=True), [micro_batch()])
    assert corrected["trl_kl"] == pytest.approx((0.0 * 2 + K3_LOG2 * 0.5 + K3_LOG2 * 1.0) / 3)


def test_policy_stats_follow_the_loss_type_and_level():
    assert "clip_ratio_high_mean" not in policy(settings(loss_type="sapo"), [micro_batch()])
    seq = policy(settings(importance_sampling_level="sequence"), [micro_batch()])
    # row 0: exp(mean(log 2, -log 2)) = 1 (not clipped); row 1: ratio 1: sequences count once each
    assert seq["clip_ratio_region_mean"] == 0.0 and seq["clip_ratio_high_max"] == 0.0
    high = micro_batch(logps=torch.tensor([[0.0, 0.0], [0.0, 0.0]]))  # row 0: exp(mean(log 2, 0)) = 1.41 > 1.2
    assert policy(settings(importance_sampling_level="sequence"), [high])["clip_ratio_high_mean"] == 0.5


def test_delta_caps_the_ratio_before_the_clip_test_as_trl():
    """Two-sided GRPO: TRL caps the ratio at delta, then flags it; the policy ratio itself stays uncapped."""
    assert policy(settings(delta=1.5), [micro_batch()])["clip_ratio_high_mean"] == pytest.approx(1 / 3)
    capped = policy(settings(delta=1.1), [micro_batch()])  # min(2, 1.1) is inside [0.8, 1.2]
    assert capped["clip_ratio_high_mean"] == capped["clip_ratio_high_max"] == 0.0
    assert capped["policy_ratio_max"] == pytest.approx(2.0)
    high = micro_batch(logps=torch.tensor([[0.0, 0.0], [0.0, 0.0]]))  # row 0's sequence ratio: 1.41
    assert policy(settings(importance_sampling_level="sequence", delta=1.1), [high])["clip_ratio_high_mean"] == 0.0


def test_policy_stats_of_two_micro_batches_equal_one_of_their_concatenation():
    a, b = micro_batch(), micro_batch(logps=LOGPS - 0.1)
    whole = micro_batch(logps=torch.cat([LOGPS, LOGPS - 0.1]), old=torch.cat([OLD, OLD]),
                        advantages=torch.tensor([1.0, -1.0, 1.0, -1.0]), mask=torch.cat([MASK, MASK]),
                        ref=torch.cat([REF, REF]))
    assert policy(settings(), [a, b]) == policy(settings(), [whole])  # bit for bit: the same rows, fsum-ed


def test_a_nan_in_the_tensors_reaches_the_stats_it_feeds():
    """A NaN log-prob is an anomaly to report (grpo.nonfinite), never a row left out as if its tensor were absent."""
    for at in ((0, 0), (1, 0)):  # the NaN row first or last: Python's max would depend on the order
        logps = LOGPS.clone()
        logps[at] = math.nan
        got = policy(settings(), [micro_batch(logps=logps)])
        assert all(math.isnan(got[k]) for k in ("kl", "kl_max", "policy_ratio_mean", "policy_ratio_max", "trl_kl")), got


@pytest.mark.parametrize("split", [[6], [2, 4], [1, 2, 3]])
def test_policy_stats_from_the_table_are_the_public_signals_policy_stats(split):
    """The host-finished table gives `signals.policy_stats`' keys and values (float64 inputs: the same
    arithmetic per token), whatever the split of the rows over micro-batches; plus TRL's own `kl`."""
    g = torch.Generator().manual_seed(7)
    logps, old, ref = (-torch.rand(6, 5, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    entropy = torch.rand(6, 5, generator=g, dtype=torch.float64)
    mask = (torch.arange(5)[None] < torch.tensor([5, 3, 0, 1, 4, 2])[:, None]).int()
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0], dtype=torch.float64)
    want = reduced(signals.policy_stats(logps, old, adv, mask, 0.2, 0.2, ref_logprobs=ref, entropy=entropy))
    at = [0]
    for n in split:
        at.append(at[-1] + n)
    parts = [MicroBatch(logps[i:j], old[i:j], adv[i:j], mask[i:j], ref[i:j], entropy[i:j]) for i, j in zip(at, at[1:])]
    values, invalid = policy_values(settings(), policy_table(settings(), parts).reshape(-1).tolist())
    assert set(values) - {"trl_kl"} == set(want) and invalid == set(want.invalid)
    assert values == pytest.approx({**want, "trl_kl": want["kl"]}, rel=1e-12, abs=1e-15)


def generation(rewards: torch.Tensor, lengths=(1, 2, 1, 2)) -> Generation:
    """This rank's rows (one per length; rows 1 and 3 truncated) with every rank's `rewards` [N_all, F]."""
    n = len(lengths)
    ids = torch.tensor([[5, 1], [5, 6], [7, 0], [7, 7]])[:n]
    mask = torch.arange(2)[None] < torch.tensor(lengths)[:, None]
    advantages = torch.tensor([0.5, -0.5, 0.5, -0.5])[:n]
    return Generation(rewards, advantages, ids, mask, list(lengths), [False, True, False, True][:n], None, None, None)


def generation_table(st: TrlSettings, gens: list[Generation]) -> list[float]:
    """This rank's generation table of `gens`, flat, as the host gets it."""
    return reduced(generation_stats(st, gens)).tables[GENERATION_TABLE]


def test_generation_table_holds_this_ranks_rows_of_the_gathered_rewards():
    rewards = torch.tensor([[1.0], [3.0], [10.0], [30.0]])  # two groups of 2, gathered from 2 ranks
    rank1 = generation_table(settings(rank=1, world=2), [generation(rewards, lengths=(1, 2))])
    assert rank1 == [10.0, 0.5, 1.0, 0.0, 10.0, 30.0, -0.5, 2.0, 1.0, 30.0]  # reward, advantage, length, cut, fmt
    rank0 = generation_table(settings(rank=0, world=2), [generation(rewards, lengths=(1, 2))])
    both, _, samples = generation_values(settings(world=2), rank0 + rank1, [2])
    alone, _, _ = generation_values(settings(), generation_table(settings(), [generation(rewards)]), [4])
    assert both == alone  # two ranks' rows are one process's rows
    assert alone["reward"] == 11.0 and alone["completions_clipped_ratio"] == 0.5 and alone["samples"] == 4.0
    assert alone["reward_group_std"] == pytest.approx((math.sqrt(2.0) + math.sqrt(200.0)) / 2)
    assert sorted(samples["sample_reward"]) == [1.0, 3.0, 10.0, 30.0]


@pytest.mark.parametrize("world", [1, 2])
def test_generation_values_are_the_public_signals_stats_of_the_batches_together(world):
    """The host-finished table gives `signals.reward_stats`', `advantage_stats`' and `length_stats`' keys and
    values on the batches taken together, whatever their split over batches and ranks; groups straddle ranks."""
    g = torch.Generator().manual_seed(3)
    n_all, group = 16, 4
    rewards = torch.rand(n_all, 2, generator=g, dtype=torch.float64)
    rewards[3, 1] = rewards[7] = math.nan  # a function that scored no value; a row none scored
    rewards[8:12, 0] = 0.5  # a group whose first function gives each row the same reward
    rewards[8:12, 1] = 0.25
    lengths = torch.randint(0, 6, (n_all,), generator=g)
    advantages = torch.randn(n_all, generator=g, dtype=torch.float64)
    truncated = lengths == 5
    st = settings(reward_names=("a", "b"), reward_weights=(1.0, 0.5), num_generations=group, world=world)
    totals = weighted_totals(st.reward_weights, rewards)
    mask = torch.arange(6)[None] < lengths[:, None]
    want = reduced(signals.reward_stats(totals, group, {"a": rewards[:, 0], "b": rewards[:, 1]})
                   | signals.advantage_stats(advantages) | signals.length_stats(mask, truncated))
    per_rank = n_all // world  # two generation batches, each of n_all / 2 rows over the ranks
    table = []
    for rank in range(world):
        gens = []
        for b in range(2):
            rows = [b * n_all // 2 + rank * per_rank // 2 + i for i in range(per_rank // 2)]
            gens.append(Generation(rewards[b * n_all // 2 : (b + 1) * n_all // 2], advantages[rows],
                                   torch.zeros(len(rows), 6, dtype=torch.int64), mask[rows],
                                   lengths[rows].tolist(), truncated[rows].tolist(), None, None, None))
        table += generation_table(dataclasses.replace(st, rank=rank), gens)
    values, invalid, samples = generation_values(st, table, [per_rank // 2] * 2)
    assert set(values) == set(want) and invalid == set(want.invalid)
    assert values == pytest.approx(dict(want), rel=1e-12, abs=1e-15)
    assert {k: sorted(v) for k, v in samples.items()} == {k: sorted(v) for k, v in want.samples.items()}
    assert values["frac_reward_zero_std"] == 0.25  # the group of equal rewards


def test_distinct_n_counts_the_tokens_the_model_wrote_around_tool_answers():
    """TRL's host tool mask -> the runs of a tool's answer; distinct-n counts the model's tokens around them, in
    each batch of a step, whatever TRL's loss mask (here zeroed, as `mask_truncated_completions` zeroes it)."""
    tool_mask = [[1, 0, 0, 1, 1], [1, 1, 0], [1, 1]]
    assert tool_spans(tool_mask) == [(0, 1, 3), (1, 2, 3)]
    ids = torch.tensor([[5, 6, 6, 5, 7], [5, 5, 6, 0, 0], [7, 8, 0, 0, 0]])
    rewards = torch.ones(3, 1)
    gens = [Generation(rewards[:2], torch.zeros(2), ids[:2], torch.zeros(2, 5), [3, 2], [False, True], None, None,
                       None, tool_spans=tool_spans(tool_mask[:2])),
            Generation(rewards[2:], torch.zeros(1), ids[2:, :2], torch.zeros(1, 2), [2], [False], None, None, None,
                       tool_spans=tool_spans(tool_mask[2:]))]
    got = reduced(generation_stats(settings(), gens))
    model = torch.tensor([[1, 0, 0, 1, 1], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]]).bool()  # {5, 5, 7}, {5, 5}, {7, 8}
    want = reduced(signals.diversity_stats(ids, model))
    assert got["distinct_1"] == want["distinct_1"] == 3 / 7 and got["distinct_2"] == want["distinct_2"]


def test_weighted_totals_and_truncation():
    rewards = torch.tensor([[1.0, 2.0], [math.nan, 4.0], [math.nan, math.nan]])
    totals = weighted_totals((1.0, 0.5), rewards)
    assert totals[:2].tolist() == [2.0, 2.0] and math.isnan(totals[2])  # no function scored row 2
    assert truncated_flags([[5, 1], [5, 6], []], frozenset({0, 1})) == [False, True, False]


def test_settings_name_the_bad_argument():
    with pytest.raises(ValueError, match="reward_weights"):
        settings(reward_weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="rank"):
        settings(rank=2, world=2)
    with pytest.raises(ValueError, match="importance_sampling_level"):
        settings(importance_sampling_level="word")
    with pytest.raises(Exception):  # frozen: taken once
        settings().beta = 0.0


def batch_of(gen: Generation, st: TrlSettings, prompts=("p0", "p0", "p1", "p1")) -> SampleBatch:
    n = gen.advantages.shape[0]
    return SampleBatch(list(prompts[:n]), [f"c{i}" for i in range(n)], gen.lengths, gen.truncated, st.rank * n, 3,
                       pending=n)


def test_sample_rows_are_this_ranks_rows_with_their_rewards_and_diagnostics_from_the_reduction():
    rewards = torch.tensor([[1.0, 2.0], [3.0, math.nan], [10.0, 20.0], [30.0, math.nan]])  # ranks 0 and 1, gathered
    st = settings(rank=1, world=2, reward_names=("fmt", "len"), reward_weights=(1.0, 0.5))
    batch = batch_of(generation(rewards, lengths=(1, 2)), st, prompts=("p1", [{"role": "user", "content": "hi"}]))
    table = generation_table(st, [generation(rewards, lengths=(1, 2))])
    attach_generation(np.array(table).reshape(2, -1), [(2, batch)])
    loss_row = dict.fromkeys(COLUMNS, 0.0) | {"tokens": 2.0, "entropy": 1.0, "kind": KIND_ENTROPY, "position": 0}
    attach(np.array([list(loss_row.values())]), [(1, batch)])  # row 0's first loss pass: entropy 1.0 over 2 tokens
    rows = sample_rows(batch, st.reward_names, st.num_generations)
    assert [(r["reward"], r["rewards"]["fmt"], r["advantage"], r["group"], r["policy_version"], r["completion_length"])
            for r in rows] == [(20.0, 10.0, 0.5, 1, 3, 1), (30.0, 30.0, -0.5, 1, 3, 2)]  # its own length wins
    assert rows[0]["rewards"]["len"] == 20.0 and math.isnan(rows[1]["rewards"]["len"])  # the function scored none
    assert rows[0]["entropy_mean"] == 0.5 and rows[1]["prompt"] == "user: hi" and not rows[1]["terminated"]
    assert not any(k.startswith("rewards/") for r in rows for k in r)  # the carrier columns are not row columns


def first_pass(rows: list[int], logps, old, ref=None, entropy=None, sampling=None, mask=None) -> MicroBatch:
    mask = torch.ones_like(logps, dtype=torch.bool) if mask is None else mask
    return MicroBatch(logps, old, torch.zeros(len(rows)), mask, ref, entropy, sampling, torch.tensor(rows))


def feed(acc: Accumulator, st: TrlSettings, gen: Generation, passes=()) -> SampleBatch:
    """Into `acc` as the capture feeds it: the generation batch, then each loss pass over its rows."""
    batch = gen.batch = batch_of(gen, st)
    acc.capture(gen)
    acc.batches.append(batch)
    for mb in passes:
        mb.batch = batch
        batch.pending -= len(mb.rows)
        acc.capture(mb)
    return batch


def sample_rows_of(acc: Accumulator, st: TrlSettings, final: bool = True) -> list[dict]:
    """The sample rows a logged step of `acc` sends, as the callback builds them."""
    logged = acc.take(acc.merged(final=final))
    return [r for b in logged.batches for r in sample_rows(b, st.reward_names, st.num_generations)]


def test_loss_numbers_put_the_shuffled_rows_back_in_order():
    st = settings()
    acc = Accumulator(st)
    passes = []
    # TRL's shuffle: rows 2, 0 in the first micro-batch, 3, 1 in the second; row r has log ratio r / 10
    for rows in ([2, 0], [3, 1]):
        r = torch.tensor(rows, dtype=torch.float32)[:, None] / 10
        logps = torch.full((2, 2), -1.0)
        passes.append(first_pass(rows, logps, logps - r, ref=logps, entropy=torch.tensor(rows)[:, None]
                                 .float().expand(2, 2)))
    feed(acc, st, generation(torch.zeros(4, 1)), passes)
    got = sample_rows_of(acc, st)
    assert [row["log_ratio_mean"] for row in got] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert [row["is_weight_max"] for row in got] == pytest.approx([math.exp(r / 10) for r in range(4)])
    assert [row["entropy_mean"] for row in got] == [0.0, 1.0, 2.0, 3.0]
    assert [row["kl_ref_max"] for row in got] == [0.0] * 4  # ref == policy
    assert [row["length_clipped"] for row in got] == [0.0, 1.0, 0.0, 1.0]


LOSS_NUMBERS = {"log_ratio_mean", "log_ratio_absmax", "is_weight_mean", "is_weight_max", "kl_ref_mean", "kl_ref_max",
                "entropy_mean"}


def test_loss_numbers_use_the_samplers_logprobs_and_rows_no_pass_reached_have_none():
    st = settings(beta=0.0)
    acc = Accumulator(st)
    logps = torch.zeros(2, 2)
    sampling = torch.tensor([[-L2, math.nan], [0.0, 0.0]])  # vLLM's unscored token: pi_old, as TRL
    feed(acc, st, generation(torch.zeros(4, 1)), [first_pass([1, 0], logps, logps, sampling=sampling)])
    got = sample_rows_of(acc, st)
    assert got[1]["is_weight_max"] == pytest.approx(2.0) and got[1]["is_weight_mean"] == pytest.approx(1.5)
    assert got[0]["log_ratio_absmax"] == 0.0 and "kl_ref_mean" not in got[0] and "entropy_mean" not in got[0]
    # rows no pass reached: the generation's columns only
    assert not LOSS_NUMBERS & set(got[2]) and got[2]["length_clipped"] == 0.0


def test_loss_numbers_of_batches_of_different_widths_at_once_equal_each_alone():
    st = settings()

    def made(acc: Accumulator, width: int) -> None:
        logps = -torch.rand(4, width, generator=torch.Generator().manual_seed(width))
        feed(acc, st, generation(torch.zeros(4, 1)),
             [first_pass([2, 3, 0, 1], logps, logps * 0.9, ref=logps * 1.1, entropy=-logps)])

    alone = []
    for width in (2, 3):
        acc = Accumulator(st)
        made(acc, width)
        alone += sample_rows_of(acc, st)
    acc = Accumulator(st)
    for width in (2, 3):
        made(acc, width)
    together = sample_rows_of(acc, st)
    assert len(together) == 8 and together == alone and all(LOSS_NUMBERS <= set(r) for r in together)


@pytest.mark.parametrize("factors", [(4, 4, 4), (1, 2, 4)])
def test_the_logged_loss_is_the_mean_of_each_steps_loss_times_its_factor(factors):
    """transformers logs each optimizer step's loss times its gradient accumulation factor; a run whose
    factor changes (the last, shorter accumulation of an epoch) mixes them in one logged step."""
    acc = Accumulator(settings())
    values = (0.5, -1.5, 2.0)
    for value, factor in zip(values, factors):
        acc.loss(torch.tensor(value), factor)
    logged = acc.take(acc.merged())
    assert logged.finish()["loss"] == pytest.approx(sum(v * f for v, f in zip(values, factors)) / 3)


def test_rows_wait_for_their_first_loss_pass_and_go_out_at_the_end_regardless():
    st = settings()
    acc = Accumulator(st)
    half = first_pass([0, 1], torch.zeros(2, 2), torch.zeros(2, 2), ref=torch.zeros(2, 2))
    batch = feed(acc, st, generation(torch.zeros(4, 1)), [half])
    logged = acc.take(acc.merged())
    assert logged.batches == [] and acc.batches == [batch]  # half its rows passed
    # the generation's numbers of every row and the pass's of its rows wait with the batch, on the host
    numbers = batch.numbers(st.reward_names)
    assert set(numbers) == {0, 1, 2, 3} and "is_weight_mean" in numbers[1]
    assert "is_weight_mean" not in numbers[2]
    rows = sample_rows_of(acc, st)
    assert acc.batches == []
    assert [r.get("is_weight_mean") for r in rows] == [1.0, 1.0, None, None]


def test_a_logged_step_reads_the_device_once_for_its_stats_and_its_rows(host_transfers, monkeypatch):
    """The rows' rewards and diagnostics ride in reduce_stats' copy: no host read of their own (as on a GPU: value
    checks deferred), and the host's numbers (lengths, truncation) reach the device without a blocking copy."""
    monkeypatch.setattr(_validate, "EAGER_VALUE_CHECK_DEVICES", set())
    st = settings()

    def logged_step() -> Accumulator:
        acc = Accumulator(st)
        for _ in range(2):  # two generation batches in one logged step, each through the loss in two micro-batches
            passes = []
            for rows in ([3, 0], [1, 2]):
                logps = -torch.rand(2, 2)
                passes.append(first_pass(rows, logps, logps - 0.1, ref=logps + 0.1, entropy=-logps, mask=torch.ones(2, 2)))
            feed(acc, st, generation(torch.rand(4, 1)), passes)
        return acc

    warm = logged_step()  # the first logged step makes the few constants cached per device (a copy each, once)
    warm.take(warm.merged())
    acc = logged_step()
    host_transfers.clear()
    logged = acc.take(acc.merged())
    assert host_transfers == ["numpy"]  # the logged step's one reduce_stats
    rows = [r for b in logged.batches for r in sample_rows(b, st.reward_names, st.num_generations)]
    assert host_transfers == ["numpy"]  # the rows' rewards and advantages came with it
    assert len(rows) == 8 and all(r["is_weight_mean"] == pytest.approx(math.exp(0.1)) for r in rows)
    assert [r["advantage"] for r in rows] == [0.5, -0.5] * 4


def test_the_logged_steps_stats_pass_runs_in_one_cpu_thread_and_gives_the_threads_back():
    """On the CPU every torch op of the pass runs with one intra-op thread (MKL's vector math would start the
    whole thread team for each small exp), and the trainer's thread count is back for its next step."""
    from torch.overrides import TorchFunctionMode

    seen: set[int] = set()

    class ThreadsAtEachOp(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.add(torch.get_num_threads())
            return func(*args, **(kwargs or {}))

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        st = settings()
        acc = Accumulator(st)
        feed(acc, st, generation(torch.rand(4, 1)),
             [first_pass([1, 0, 3, 2], -torch.rand(4, 2), -torch.rand(4, 2), ref=-torch.rand(4, 2))])
        with ThreadsAtEachOp():
            logged = acc.take(acc.merged())
        assert seen == {1} and "kl" in logged.finish()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_batches_of_different_widths_concatenate_padded_with_the_fill():
    from otel_grpo.integrations.trl._rows import cat_rows

    a, b = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[4.0], [5.0]])
    assert cat_rows([a, b], math.nan).tolist()[0] == [1.0, 2.0, 3.0]
    got = cat_rows([a, b], -1.0)
    assert got.tolist() == [[1.0, 2.0, 3.0], [4.0, -1.0, -1.0], [5.0, -1.0, -1.0]]
    masks = cat_rows([torch.tensor([[True]]), torch.tensor([[True, True]])], False)
    assert masks.dtype == torch.bool and masks.tolist() == [[True, False], [True, True]]
    assert cat_rows([torch.tensor([1, 2]), torch.tensor([3])], 0).tolist() == [1, 2, 3]  # rows of [B] values
    assert cat_rows([a], 0.0) is a
