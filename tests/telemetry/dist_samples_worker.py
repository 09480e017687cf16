"""Run under `torchrun --nproc_per_node 2` (gloo, CPU): three steps of sample rows on each rank.

Writes `<out>/rank<r>.json` with the rows this rank handed over and the collectives each
step made; rank 0's Telemetry spills the kept rows under `<out>/run/samples/`. Not a test module.
"""

import json
import random
import sys

import torch.distributed as dist

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.collectives import counting_collectives

STEPS, GROUP, SEED = 3, 4, 11
SETTINGS = dict(top_k=3, bottom_k=2, random_k=2, seed=SEED, metrics_exporters=["none"], traces_exporters=["none"])
def rows_of(rank: int, step: int, n: int) -> list[dict]:
    rng = random.Random(1000 * step + rank)
    return [{"completion": f"r{rank}s{step}i{i}", "reward": round(rng.random(), 3),
             "prompt": "p" * rng.randint(1, 50)} for i in range(n)]


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tel = Telemetry(TelemetrySettings(run_id="two-ranks", output_dir=f"{out}/run", **SETTINGS))
    handed, collectives = [], []
    for step in range(STEPS):
        first, second = rows_of(rank, step, 2 * GROUP), rows_of(rank + 10, step, GROUP * (rank + 1))
        with counting_collectives() as calls:
            with tel.step(step) as s:
                s.samples(first, group_size=GROUP)  # two calls per step: one selection over both
                s.samples(second, group_size=GROUP)
        handed.append([first, second])
        collectives.append(calls)
    # An anomalous step (rank 0's KL above its threshold; rank 1 records nothing): every row of both ranks
    anomalous = rows_of(rank, STEPS, GROUP * (rank + 1))
    with tel.step(STEPS) as s:
        s.record({"kl": 5.0})
        s.samples(anomalous, group_size=GROUP)
    # two records of one step (a training step, then an evaluation at it): the second numbers on after the first
    records = [rows_of(rank + 20, STEPS + 1, 2), rows_of(rank + 30, STEPS + 1, 2)]
    with tel.step(STEPS + 1) as s:
        s.samples(records[0])
    with tel.logged_step(STEPS + 1, evaluation=True) as s:
        s.samples(records[1])
    tel.finish()
    # per-rank selection (torchforge's per_rank_reduce), every rank exporting: no collective
    own = Telemetry(TelemetrySettings(run_id="per-rank", output_dir=f"{out}/per_rank", sample_reduce="per_rank",
                                      export_all_ranks=True, **SETTINGS))
    with counting_collectives() as per_rank_calls:
        with own.step(0) as s:
            s.samples(handed[0][0] + handed[0][1], group_size=GROUP)
    with own.step(1) as s:
        s.samples(records[0])
    with own.logged_step(1, evaluation=True) as s:
        s.samples(records[1])
    own.finish()
    # global selection with every rank exporting: rank 0 alone emits the kept rows
    every = Telemetry(TelemetrySettings(run_id="all-export", output_dir=f"{out}/all_export", export_all_ranks=True,
                                        **SETTINGS))
    with every.step(0) as s:
        s.samples(handed[0][0] + handed[0][1], group_size=GROUP)
    every.finish()
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump({"handed": handed, "anomalous": anomalous, "records": records, "collectives": collectives,
                   "per_rank_collectives": per_rank_calls}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
