"""IS correction + mismatch metrics: otel_grpo.signals vs the seed-004 way, same inputs, same numbers.

    .venv/bin/python benchmarks/signals.py [--repeat N] [--quick] [--separate] [--threads N] [--ranks N]
                                           [--no-collectives]

Ours: rollout_correction(..., with_mismatch=True) + reduce_stats (one all_gather,
one host copy); `--separate` times rollout_correction + mismatch_stats instead.
The reference does it the way verl's mismatch helper (seed 004) does:
metrics one tensor expression at a time, one `.item()` per metric, then one
all-reduce (and `.item()`) per key to merge across ranks. By default both sides
run in one process inside a 1-rank gloo group: the reference makes its per-key
all-reduces there as the seed's code does, while ours, as with an accelerator of
one process, exchanges nothing in a group of one. `--ranks 2` starts that many
processes (torchrun, gloo, one core each) that all run the same inputs, so that
every collective crosses processes; rank 0 prints. `--no-collectives` starts no
process group and leaves out the reference's merge: the stats alone, each side as
it runs on one process (issue 63 measures this). The script asserts that both
produce the same numbers (identical inputs on every rank make the seed's per-key
averaging exact), then prints per-configuration medians (wall clock and process CPU
time, runs of the two sides interleaved so that both see the same machine load) and
the speed ratios.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "signals"))
import seed004_reference as seed  # noqa: E402  (the seed's formulas, shared with the tests)

from otel_grpo.signals import mismatch_stats, reduce_stats, rollout_correction  # noqa: E402

SHAPES = ((64, 2048), (256, 4096))
# (level, mode, veto): TIS as usually run, sequence-level rejection, everything at once
CONFIGS = (("token", "truncate", None), ("sequence", "mask", None), ("geometric", "both", (1e-4, 1e4)))
THRESHOLD = (0.5, 2.0)


def make_inputs(B: int, T: int, seed_value: int = 0):
    g = torch.Generator().manual_seed(seed_value)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
    rollout = (-torch.rand(B, T, generator=g) * 3) * mask
    train = (rollout + 0.05 * torch.randn(B, T, generator=g)) * mask
    return train, rollout, mask


def ours(train, rollout, mask, level, mode, veto):
    """One call for correction + mismatch (`with_mismatch=True` shares the mask check, log ratios, exp)."""
    weights, new_mask, stats = rollout_correction(
        train, rollout, mask, level=level, mode=mode, threshold=THRESHOLD, veto_threshold=veto, with_mismatch=True
    )
    reduced = reduce_stats(stats)
    return weights, new_mask, dict(reduced)


def ours_separate(train, rollout, mask, level, mode, veto):
    """The two public calls one after the other (what a caller without `with_mismatch` pays)."""
    weights, new_mask, stats = rollout_correction(
        train, rollout, mask, level=level, mode=mode, threshold=THRESHOLD, veto_threshold=veto
    )
    reduced = reduce_stats(stats | mismatch_stats(train, rollout, mask))
    return weights, new_mask, dict(reduced)


def seed_way(train, rollout, mask, level, mode, veto, merge: bool = True):
    """What the seed does per step on one rank: metrics, .item() each, then a collective per key (`merge`)."""
    local = {"valid": mask.any().item()}
    local.update({k: v.item() for k, v in seed.mismatch(train, rollout, mask).items()})
    weights, new_mask, metrics = seed.rollout_is(
        train, rollout, mask, level, mode, THRESHOLD[::-1], None, None if veto is None else veto[::-1]
    )
    local.update({k: v.item() for k, v in metrics.items()})
    local.pop("valid")
    return weights, new_mask, seed.merge_per_key([local], dist) if merge else local


def check_same(a: dict, b: dict, label: str, ranks: int = 1) -> None:
    """Every seed metric is ours too, with the same value (ours adds is_ratio_*, chi2, abs-diff max)."""
    assert set(b) <= set(a), (label, set(b) - set(a))
    for key in b:
        x, y = a[key], b[key]
        rel = 1e-4
        if key == "rollout_is_std":
            # the seed's float32 E[w^2] - E[w]^2 cancels for weights near 1: compare variances
            x, y = x * x, y * y
        if ranks > 1 and key.endswith("_std"):
            # ours is the sample std of the union of the ranks' (identical) rows, the seed averages
            # each rank's: they differ by Bessel's factor, ~0.4% for the 64 per-sequence values
            rel = 1e-2
        assert abs(x - y) <= rel * max(abs(x), abs(y)) + 1e-5, (label, key, x, y)


def paired_medians(seed_fn, ours_fn, repeat: int) -> dict[str, float]:
    """Median wall and CPU seconds of each side, runs interleaved so both see the same load."""
    seed_fn(), ours_fn()  # warm-up: allocator, thread pool, gloo
    runs: dict[str, list[float]] = {"seed_wall": [], "seed_cpu": [], "ours_wall": [], "ours_cpu": []}
    for _ in range(repeat):
        for side, fn in (("seed", seed_fn), ("ours", ours_fn)):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            runs[f"{side}_cpu"].append(time.process_time() - cpu)
            runs[f"{side}_wall"].append(time.perf_counter() - wall)
    return {k: statistics.median(v) for k, v in runs.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 15 pairs: at 64x2048 single runs swing 2x with the shared machine's load; fewer made medians jumpy
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="smallest shape only, 3 repeats")
    parser.add_argument("--separate", action="store_true", help="ours as two calls (no with_mismatch)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both sides)")
    parser.add_argument("--ranks", type=int, default=1, help="processes in the gloo group (>1: via torchrun)")
    parser.add_argument("--no-collectives", action="store_true",
                        help="no process group, no merge in the reference: the stats alone")
    args = parser.parse_args()
    if args.ranks < 1:
        parser.error("--ranks must be at least 1")
    if args.no_collectives and args.ranks > 1:
        parser.error("--no-collectives runs one process: leave --ranks at 1")
    if args.ranks > 1 and "RANK" not in os.environ:
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}"]
        sys.exit(subprocess.call([*torchrun, __file__, *sys.argv[1:]], env={**os.environ, "OMP_NUM_THREADS": "1"}))
    # One thread by default: on a shared 2-core machine a second intra-op thread mostly
    # waits for a core, which adds noise to both sides rather than speed.
    torch.set_num_threads(args.threads)
    shapes, repeat = (SHAPES[:1], 3) if args.quick else (SHAPES, args.repeat)
    ours_fn = ours_separate if args.separate else ours
    if args.ranks > 1:
        dist.init_process_group("gloo")  # torchrun's environment
        if dist.get_rank() != 0:  # the other ranks run the same sequence silently
            sys.stdout = open(os.devnull, "w")
    elif not args.no_collectives:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0)
    merge = not args.no_collectives
    ranks = dist.get_world_size() if merge else 1
    print(f"# ranks {ranks}{'' if merge else ' (no process group, no collectives)'}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    print(f"{'B x T':>11} {'level':>9} {'mode':>8} {'veto':>4} | {'seed ms':>8} {'ours ms':>8} {'ratio':>6} "
          f"| {'seed cpu':>8} {'ours cpu':>8} {'ratio':>6}")  # fmt: skip
    wall_ratios, cpu_ratios = [], []
    for B, T in shapes:
        inputs = make_inputs(B, T)
        for level, mode, veto in CONFIGS:
            w1, m1, a = ours_fn(*inputs, level, mode, veto)
            w2, m2, b = seed_way(*inputs, level, mode, veto, merge)
            torch.testing.assert_close(w1, w2, rtol=1e-5, atol=0)
            assert torch.equal(m1, m2)
            check_same(a, b, f"{B}x{T} {level}/{mode}", ranks)
            t = paired_medians(
                lambda: seed_way(*inputs, level, mode, veto, merge), lambda: ours_fn(*inputs, level, mode, veto),
                repeat,
            )
            wall_ratios.append(t["seed_wall"] / t["ours_wall"])
            cpu_ratios.append(t["seed_cpu"] / t["ours_cpu"])
            print(f"{B:>4} x {T:<4} {level:>9} {mode:>8} {'yes' if veto else 'no':>4} | "
                  f"{t['seed_wall'] * 1e3:>8.1f} {t['ours_wall'] * 1e3:>8.1f} {wall_ratios[-1]:>5.1f}x | "
                  f"{t['seed_cpu'] * 1e3:>8.1f} {t['ours_cpu'] * 1e3:>8.1f} {cpu_ratios[-1]:>5.1f}x")  # fmt: skip
    print(f"same numbers: yes; speed ratio (seed-way / ours), median over configurations: "
          f"wall {statistics.median(wall_ratios):.1f}x, CPU {statistics.median(cpu_ratios):.1f}x")  # fmt: skip
    if merge:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
