"""Run under `torchrun --nproc_per_node 2` (gloo, CPU): two records with sample rows at one step, every rank exporting.

The first record's rows are selected across ranks (rank 0 emits the kept ones, numbered by their position among
every rank's rows); the second is a failed try of the step (it raised, so no selection across ranks: each rank
keeps and emits its own). The ranks spill under `<out>/run/`. Not a test module.
"""

import sys

import torch.distributed as dist

from otel_grpo.telemetry import Telemetry, TelemetrySettings


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tel = Telemetry(TelemetrySettings(run_id="numbered", output_dir=f"{out}/run", export_all_ranks=True,
                                      top_k=2, bottom_k=2, random_k=0, metrics_exporters=["none"],
                                      traces_exporters=["none"]))

    def rows(tag: str) -> list[dict]:
        return [{"completion": f"{tag}-rank{rank}-{i}", "reward": (i + rank) / 8} for i in range(4)]

    with tel.step(0) as s:
        s.samples(rows("selected"))
    try:
        with tel.step(0) as s:
            s.samples(rows("failed"))
            raise RuntimeError("out of memory")
    except RuntimeError:
        pass
    tel.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
