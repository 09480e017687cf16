"""TelemetrySettings: environment names, defaults, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.telemetry._providers import _otlp_target

_OTEL_VARS = (
    "OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in _OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


def test_defaults():
    s = TelemetrySettings()
    assert s.run_id.startswith("run-")
    assert s.service_name == "grpo-trainer"
    assert s.metrics_exporters == ["otlp"] and s.traces_exporters == ["otlp"]
    assert (s.prometheus_host, s.prometheus_port) == ("127.0.0.1", 9464)
    assert s.output_dir == Path.cwd() / "runs" / s.run_id
    assert s.score == "reward"
    assert TelemetrySettings().run_id != s.run_id


def test_local_stack_environment(monkeypatch):
    # Exactly what the local stack sets for the trainer.
    monkeypatch.setenv("OTEL_GRPO_METRICS_EXPORTERS", "prometheus")
    monkeypatch.setenv("OTEL_GRPO_TRACES_EXPORTERS", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:8000/v1/traces")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "demo")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "2500")
    s = TelemetrySettings(run_id="exp-1")
    assert s.metrics_exporters == ["prometheus"] and s.traces_exporters == ["otlp"]
    assert s.otlp_protocol == "http/protobuf"
    assert s.service_name == "demo"
    assert s.metric_export_interval_ms == 2500
    assert _otlp_target(s, "traces") == "http://127.0.0.1:8000/v1/traces"
    assert _otlp_target(s, "metrics") == "http://localhost:4318/v1/metrics"


def test_compose_environment(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    s = TelemetrySettings()
    assert _otlp_target(s, "traces") == "http://otel-collector:4317"  # grpc: no signal path
    http = TelemetrySettings(otlp_protocol="http/protobuf", otlp_endpoint="http://c:4318/")
    assert _otlp_target(http, "metrics") == "http://c:4318/v1/metrics"


def test_per_signal_protocol(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    s = TelemetrySettings()
    assert s.protocol_for("traces") == "http/protobuf" and s.protocol_for("metrics") == "grpc"
    assert _otlp_target(s, "traces") == "http://c:4317/v1/traces"
    assert _otlp_target(s, "metrics") == "http://c:4317"


def test_default_protocol_is_the_specifications_http_protobuf(monkeypatch):
    """Following `up --help` with no protocol set must reach the sidecar (OTLP/HTTP), not try gRPC."""
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:8000/v1/traces")
    s = TelemetrySettings()
    assert s.otlp_protocol == "http/protobuf" and s.protocol_for("traces") == "http/protobuf"
    assert _otlp_target(s, "traces") == "http://127.0.0.1:8000/v1/traces"
    assert _otlp_target(s, "metrics") == "http://localhost:4318/v1/metrics"


def test_prefixed_variables_and_lists(monkeypatch):
    monkeypatch.setenv("OTEL_GRPO_METRICS_EXPORTERS", "Prometheus, console")
    monkeypatch.setenv("OTEL_GRPO_TOP_K", "2")
    monkeypatch.setenv("OTEL_GRPO_RESOURCE_ATTRIBUTES", "team=rl,cluster=a")
    monkeypatch.setenv("OTEL_GRPO_EXPORT_ALL_RANKS", "true")
    s = TelemetrySettings()
    assert s.metrics_exporters == ["prometheus", "console"]
    assert s.top_k == 2 and s.export_all_ranks
    assert s.resource_attributes == {"team": "rl", "cluster": "a"}


def test_unprefixed_field_names_are_not_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("SERVICE_NAME", "wrong")
    monkeypatch.setenv("TOP_K", "99")
    s = TelemetrySettings()
    assert s.service_name == "grpo-trainer" and s.top_k == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"metrics_exporters": ["none", "otlp"]},
        {"metrics_exporters": []},
        {"metrics_exporters": ["otlp", "otlp"]},
        {"metrics_exporters": ["statsd"]},
        {"traces_exporters": ["prometheus"]},
        {"otlp_protocol": "http/json"},
        {"max_events_per_span": 128},
        {"top_k": -1},
        {"max_text_chars": 0},
        {"shutdown_timeout_s": 0},
        {"shutdown_timeout_s": float("inf")},  # accepted, it raised OverflowError in finish(): training's end
        {"anomaly_thresholds": "kl:1"},  # a typo left out switched the KL threshold off without a word
        {"anomaly_thresholds": "kl=1,mismatch_k3_kl"},
        {"resource_attributes": "team=rl,=x"},
        {"otlp_endpoint": "collector:4318"},  # the scheme forgotten: every export of the run would fail
        {"otlp_traces_endpoint": "ftp://sidecar/v1/traces"},
        {"otlp_metrics_endpoint": "http://"},
    ],
)
def test_invalid_settings_are_rejected(kwargs):
    with pytest.raises(ValueError) as error:
        TelemetrySettings(**kwargs)
    message = str(error.value)
    assert "\n" not in message and next(iter(kwargs)) in message  # one line, naming the argument


@pytest.mark.parametrize("run_id, problem", [
    ("../elsewhere", "'..' part"), ("/srv/runs/exp", "empty"), ("team//exp", "empty"), ("exp/", "empty"),
    ("exp/./1", "'.'"), ("exp\n1", "control character"), ("x" * 129, "1 to 128"), ("", "1 to 128"),
    ("exp/steps", "ends in '/steps'"), ("exp/metrics", "ends in '/metrics'"), ("exp/sample-steps", "ends in"),
    (".*", "every run"),
])
def test_a_run_id_that_would_leave_the_runs_directory_or_the_sidecars_reach_is_refused(run_id, problem, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as error:
        Telemetry.from_env(run_id=run_id, metrics_exporters=["none"], traces_exporters=["none"])
    message = str(error.value)
    assert "\n" not in message and message.startswith("run_id=") and problem in message
    monkeypatch.setenv("OTEL_GRPO_RUN_ID", run_id)
    if run_id:  # an empty variable is unset: a generated id
        with pytest.raises(ValueError, match=r"^OTEL_GRPO_RUN_ID="):
            TelemetrySettings()
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


@pytest.mark.parametrize("run_id", ["exp-42", "team/exp 1", "a|b", "steps", "exp/steps/2", "qwen2.5-7b@lr=1e-6"])
def test_a_run_id_may_hold_slashes_and_any_printable_text_and_names_its_directory_below_runs(run_id):
    settings = TelemetrySettings(run_id=run_id)
    assert settings.run_id == run_id and settings.output_dir == Path.cwd() / "runs" / run_id


def test_a_misspelt_argument_is_refused_not_ignored(monkeypatch):
    monkeypatch.setenv("OTEL_GRPO_FOLLOW_POLL", "1")  # other components' variables share the prefix: still fine
    with pytest.raises(ValueError, match=r"^runid: not a setting of TelemetrySettings$"):
        Telemetry.from_env(runid="exp-1")
    assert TelemetrySettings(run_id="exp-1").run_id == "exp-1"


def test_a_bad_variable_is_named_as_the_user_set_it(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "foo")  # the standard variable, not OTEL_GRPO_OTLP_PROTOCOL
    with pytest.raises(ValueError, match=r"^OTEL_EXPORTER_OTLP_PROTOCOL=foo: Input should be"):
        TelemetrySettings()
    monkeypatch.setenv("OTEL_GRPO_TOP_K", "-3")
    with pytest.raises(ValueError, match=r"^OTEL_EXPORTER_OTLP_PROTOCOL=foo: .* \(and 1 more problem\)$"):
        TelemetrySettings()
    with pytest.raises(ValueError, match=r"^top_k=-1: "):  # an argument is named as the argument
        TelemetrySettings(top_k=-1, otlp_protocol="grpc")


def test_an_integrations_defaults_fill_only_what_neither_the_call_nor_the_environment_sets(monkeypatch):
    """`instrument` and `otel-grpo train` derive a run id and model name from the trainer: a user's variable
    (prefixed, or the standard one a field reads) must win over them, and an argument over both."""
    derived = {"run_id": "from-trainer", "model_name": "trainer-model", "otlp_endpoint": "http://derived:4318",
               "top_k": 7, "seed": None}
    s = TelemetrySettings.with_defaults(derived)
    assert (s.run_id, s.model_name, s.otlp_endpoint, s.top_k, s.seed) == (
        "from-trainer", "trainer-model", "http://derived:4318", 7, None)
    monkeypatch.setenv("OTEL_GRPO_RUN_ID", "from-env")
    monkeypatch.setenv("otel_grpo_model_name", "env-model")  # variables are read case-insensitively
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    s = TelemetrySettings.with_defaults(derived)
    assert (s.run_id, s.model_name, s.otlp_endpoint, s.top_k) == (
        "from-env", "env-model", "http://collector:4318", 7)
    tel = Telemetry.from_env(run_id="call", defaults=derived, traces_exporters=["none"], metrics_exporters=["none"])
    assert tel.run_id == "call"
    tel.shutdown()


def test_an_empty_variable_is_unset_as_the_opentelemetry_specification_says(monkeypatch):
    """Compose's `${RUN_ID:-}` and job templates set variables empty when the user gave nothing."""
    for name in ("OTEL_GRPO_RUN_ID", "OTEL_GRPO_TOP_K", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_GRPO_MODEL_NAME"):
        monkeypatch.setenv(name, "")
    s = TelemetrySettings.with_defaults({"run_id": "from-trainer", "model_name": "m"})
    assert (s.run_id, s.top_k, s.otlp_endpoint, s.model_name) == ("from-trainer", 4, None, "m")
    assert TelemetrySettings().run_id.startswith("run-")


def test_an_endpoint_without_a_scheme_is_named_as_set_and_fine_where_no_otlp_http_exporter_uses_it(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    with pytest.raises(ValueError, match=r"^OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318: .* e\.g\. http://collector:4318"):
        TelemetrySettings()
    assert TelemetrySettings(otlp_protocol="grpc").otlp_endpoint == "collector:4318"  # gRPC takes host:port
    assert TelemetrySettings(metrics_exporters=["prometheus"], traces_exporters=["none"])  # no OTLP exporter


@pytest.mark.parametrize("emit_in", ["thread", "process"])
@pytest.mark.parametrize("given", [None, "spill/here"])
def test_a_chdir_mid_run_moves_no_spill(tmp_path, monkeypatch, emit_in, given):
    """A relative output dir (the default `runs/<run_id>` too) is the one below the working directory the
    settings were made in: a script that changes directory mid-run keeps one spill, from either sink."""
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(start)
    tel = Telemetry(TelemetrySettings(run_id="moved", output_dir=given, emit_in=emit_in, metrics_exporters=["none"],
                                      traces_exporters=["none"], top_k=2, bottom_k=0, random_k=0))
    for step in range(4):
        if step == 2:
            monkeypatch.chdir(elsewhere)
        with tel.step(step) as s:
            s.record({"kl": 0.01})
            s.samples([{"prompt": "p", "completion": "c", "reward": i} for i in range(3)])
    tel.finish()
    run = start / (given or "runs/moved")
    assert tel.settings.output_dir == run
    assert len((run / "steps.jsonl").read_text().splitlines()) == 4
    assert sorted(p.name for p in (run / "samples").iterdir()) == [f"step_{i}.jsonl" for i in range(4)]
    assert list(elsewhere.iterdir()) == []


def test_settings_made_in_a_removed_working_directory_keep_a_relative_output_dir(tmp_path, monkeypatch):
    """A job's scratch directory cleaned up under it: making the settings must not fail (the path cannot be made
    absolute); it stays relative, and the spill says where it fails if it does."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    settings = TelemetrySettings(run_id="cwd-gone", metrics_exporters=["none"], traces_exporters=["none"])
    assert settings.output_dir == Path("runs/cwd-gone")
