"""Sample selection across ranks: ours (scores, then the kept rows) vs gathering every row, per step.

    .venv/bin/python benchmarks/samples.py [--ranks 2] [--rows 256] [--chars 2000] [--repeat 30]

Starts `--ranks` processes (torchrun, gloo, CPU). Every rank holds `--rows` sample rows
of about `--chars` characters of text each. Ours: `select_across_ranks` (an all-gather of
the scores and rank 0's seed, the same top/bottom/random selection on every rank, a gather
of the kept rows to rank 0). Peer: the straightforward way, `all_gather_object` of every
row, then the same selection. Both keep the same rows (asserted). Runs alternate; rank 0
prints the medians (wall ms per step) and the ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

N_KEPT = dict(top_k=4, bottom_k=4, random_k=4)


def _rows(rank: int, n: int, chars: int) -> list[dict]:
    rng = random.Random(rank)
    return [{"prompt": "p" * (chars // 4), "completion": "c" * (chars - chars // 4), "reward": rng.random(),
             "rank": rank} for _ in range(n)]


def _worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from otel_grpo.telemetry import TelemetrySettings
    from otel_grpo.telemetry._exchange import current_group, select_across_ranks
    from otel_grpo.telemetry._samples import select_indices

    dist.init_process_group("gloo")
    group = current_group()
    settings = TelemetrySettings(metrics_exporters=["none"], traces_exporters=["none"], **N_KEPT)
    rows = _rows(group.rank, args.rows, args.chars)
    calls = [(0, rows, None)]

    def ours(seed: int) -> list | None:
        return select_across_ranks(calls, settings, random.Random(seed), group)

    def every_row(seed: int) -> list | None:
        gathered: list = [None] * group.world
        dist.all_gather_object(gathered, rows)
        flat = [r for part in gathered for r in part]
        rng = random.Random(random.Random(seed).getrandbits(63))
        picked = select_indices([r["reward"] for r in flat], rng=rng, **N_KEPT)
        return [flat[i] for i, _ in picked] if group.rank == 0 else None

    times: dict[str, list[float]] = {"ours": [], "every row": []}
    for i in range(args.repeat + 3):
        for name, fn in (("ours", ours), ("every row", every_row)):
            dist.barrier()
            start = time.perf_counter()
            kept = fn(i)
            if i >= 3:  # warm-up runs are not counted
                times[name].append((time.perf_counter() - start) * 1e3)
            if group.rank == 0 and name == "ours":
                ours_rows = [p.row["completion"] for p in kept]
            elif group.rank == 0:
                assert [r["completion"] for r in kept] == ours_rows
    if group.rank == 0:
        ours_ms, peer_ms = (statistics.median(times[k]) for k in ("ours", "every row"))
        print(f"# {group.world} ranks (gloo), {args.rows} rows of ~{args.chars} chars per rank, "
              f"{sum(N_KEPT.values())} kept, medians of {args.repeat} steps")
        print(f"ours {ours_ms:.2f} ms  every row {peer_ms:.2f} ms  ratio {peer_ms / ours_ms:.1f}x  (same rows: yes)")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.ranks),
           __file__, "--worker", "--rows", str(args.rows), "--chars", str(args.chars), "--repeat", str(args.repeat)]
    raise SystemExit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
