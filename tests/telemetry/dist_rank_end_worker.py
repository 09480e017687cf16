"""Run under `torchrun --nproc_per_node 2` (gloo, CPU): a run that steps until it is stopped; rank 1 falls as `how`
says ("raise": an exception at step 3, as CUDA out of memory raises one; "first": one in its first step, before
the step's collective; anything else: it waits for the test to kill it or to stop the job). Rank 0 exports over
OTLP/HTTP to `port`; each rank writes its pid to `<out>/rank<r>`.
A collective per step, then a pause in Python (long from step 3 on): where rank 0 is when the launcher's SIGTERM
comes, as in a step's Python or generation between two collectives. Not a test module.
"""

import logging
import os
import sys
import time

import torch
import torch.distributed as dist

from otel_grpo.telemetry import Telemetry, TelemetrySettings


def main(out: str, port: str, how: str) -> None:
    logging.basicConfig(stream=sys.stderr, format="%(message)s")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(f"{out}/rank{rank}", "w") as f:
        f.write(str(os.getpid()))
    tel = Telemetry(TelemetrySettings(run_id="ranked", output_dir=f"{out}/run", otlp_protocol="http/protobuf",
                                      otlp_endpoint=f"http://127.0.0.1:{port}", metrics_exporters=["otlp"],
                                      traces_exporters=["none"], metric_export_interval_ms=500))
    for step in range(10_000):
        with tel.step(step) as s:
            if how == "first" and step == 0:  # rank 1 falls in its first step (its first generation)
                if rank == 1:
                    raise RuntimeError("CUDA out of memory (as the test says)")
                time.sleep(30)  # rank 0 is in Python when the launcher's SIGTERM comes
            dist.all_reduce(torch.ones(1))
            s.record({"kl": 0.1})
        if rank == 1 and step == 3 and how == "raise":
            raise RuntimeError("CUDA out of memory (as the test says)")
        time.sleep(0.3 if step < 3 else 30)


if __name__ == "__main__":
    main(*sys.argv[1:])
