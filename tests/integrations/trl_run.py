"""A real TRL GRPOTrainer run, instrumented, with what TRL computed recorded beside it (not a test module).

`Recording` is a GRPOTrainer subclass that keeps, per generation batch and per
micro-batch, the tensors TRL itself produced (outputs of `_generate_and_score_completions`,
`_calculate_rewards`' arguments and result, the loss pass's log-probs), so tests can
compute the expected values with `otel_grpo.signals` directly. With `sampling=True`
it adds vLLM-like sampler log-probs (and TRL's corrected IS ratio) to the outputs.

`python trl_run.py OUT [key=value ...]` runs it under torchrun: each rank saves its
records to OUT/rank<r>.pt and writes the step spans and sample events it exported to
OUT/exported<r>.json. `otlp=PORT` instead lets `instrument` build the telemetry (from a
child process), exporting over OTLP/HTTP to a receiver on that port. `fail_rank=R` breaks rank R's capture of generation batches (`fail_at=capture`,
the default) or their stats at the logged step (`fail_at=stats`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_support"))

from tiny_trl import make_grpo_trainer  # noqa: E402


def recording_class(sampling: bool = False) -> type:
    import torch
    from trl import GRPOTrainer

    class Recording(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self.records["generations"].append({"prompts": list(prompts), "completions": list(completions),
                                                "rewards_per_func": rewards.detach().clone(),
                                                "step": self.state.global_step})
            return rewards

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            if sampling and out.get("old_per_token_logps") is not None:
                gen = torch.Generator().manual_seed(len(self.records["generations"]))
                noise = 0.2 * torch.randn(out["old_per_token_logps"].shape, generator=gen)
                out["sampling_per_token_logps"] = (out["old_per_token_logps"] + noise) * out["completion_mask"]
                out["importance_sampling_ratio"] = torch.exp(noise).clamp(max=1.1) * out["completion_mask"]
            gen_record = self.records["generations"][-1]
            gen_record.update({k: v.detach().clone() for k, v in out.items() if torch.is_tensor(v)})
            gen_record["logged_step"] = None
            return out

        def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
            if kwargs.get("compute_entropy"):
                self._loss_pass = (logps.detach().clone(), entropies.detach().clone())
            return logps, entropies, aux

        def _compute_loss(self, model, inputs):
            loss = super()._compute_loss(model, inputs)
            logps, entropies = self._loss_pass
            self.records["micro_batches"].append({
                "logps": logps, "entropies": entropies, "step": self.state.global_step,
                **{k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)}})
            return loss

    return Recording


def make_recording_trainer(output_dir: Path, sampling: bool = False, **config: Any):
    trainer = make_grpo_trainer(output_dir, trainer_class=recording_class(sampling), **config)
    trainer.records = {"generations": [], "micro_batches": []}
    return trainer


def in_memory_telemetry(output_dir: Path, **settings: Any):
    """A Telemetry exporting into memory: (telemetry, metric reader, span exporter)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2048))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tel = Telemetry(TelemetrySettings(**{"run_id": "trl-test", "output_dir": output_dir, **settings}),
                    meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider)
    return tel, reader, exporter


def metrics_by_name(reader) -> dict[str, Any]:
    """What an in-memory metric reader holds now, by metric name."""
    data = reader.get_metrics_data()
    return {m.name: m for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics for m in sm.metrics}


def exported(exporter) -> dict[str, Any]:
    """Step scalars by step (as the sidecar stores them), sample events, phase spans."""
    steps: dict[int, dict[str, float]] = {}
    samples, phases = [], []
    for span in exporter.get_finished_spans():
        attrs = dict(span.attributes or {})
        if span.name == "grpo.step":
            values = steps.setdefault(int(attrs["grpo.step"]), {})
            values.update({k[len("grpo.metric."):]: v for k, v in attrs.items() if k.startswith("grpo.metric.")})
        elif span.name == "grpo.samples":
            samples += [{**dict(e.attributes), "step": attrs["grpo.step"]} for e in span.events]
        elif span.name.startswith("grpo.phase."):
            phases.append((attrs["grpo.phase"], int(attrs["grpo.step"])))
    return {"steps": {str(k): v for k, v in sorted(steps.items())}, "samples": samples, "phases": phases}


def train_instrumented(trainer: Any, directory: Path) -> dict[int, dict[str, float]]:
    """Trains `trainer` under `instrument` with an in-memory telemetry in `directory`: the exported steps' scalars
    by step."""
    from otel_grpo.integrations import instrument

    tel, _, exporter = in_memory_telemetry(directory)
    instrument(trainer, telemetry=tel)
    trainer.train()
    return {int(k): v for k, v in exported(exporter)["steps"].items()}


def main(out: Path, config: dict[str, Any]) -> None:
    import torch

    from otel_grpo.cli.train import end_rank_process
    from otel_grpo.integrations import instrument

    rank = int(os.environ.get("RANK", "0"))
    fail_at = config.pop("fail_at", "capture")
    if config.pop("fail_rank", None) == rank:  # this rank's capture of generation batches breaks
        from otel_grpo.integrations.trl import _accumulate, _capture

        def broken(*args: Any) -> Any:
            raise RuntimeError("injected capture failure")

        if fail_at == "capture":  # in the hook, during the step
            _capture.Capture._add_generation = broken
        else:  # computing their stats, in the logged step's flush
            _accumulate.generation_stats = broken
    otlp_port = config.pop("otlp", None)
    trainer = make_recording_trainer(out / "train", model_dir=out / "model", **config)
    if otlp_port is None:
        tel, _, exporter = in_memory_telemetry(out / "telemetry")
        instrument(trainer, telemetry=tel)
    else:  # as a user writes it: the telemetry instrument builds, exporting to the test's receiver
        exporter = None
        tel = instrument(trainer, run_id="trl-test", output_dir=str(out / "telemetry"), otlp_protocol="http/protobuf",
                         otlp_endpoint=f"http://127.0.0.1:{otlp_port}", metrics_exporters=["otlp"],
                         traces_exporters=["otlp"])
    trainer.train()
    torch.save(trainer.records, out / f"rank{rank}.pt")
    result = {**(exported(exporter) if exporter is not None else {}), "exporting": tel.exporting,
              "emitter": type(tel._sink).__name__, "log_history": trainer.state.log_history}
    (out / f"exported{rank}.json").write_text(json.dumps(result, default=str))
    trainer.accelerator.end_training()
    end_rank_process()  # torch keeps the DDP model's gloo threads to teardown, where they can abort a rank


if __name__ == "__main__":
    main(Path(sys.argv[1]), {k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])})
