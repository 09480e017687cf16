"""The public surface other packages import."""

import otel_grpo
import otel_grpo.telemetry as telemetry


def test_every_promised_name_imports():
    for name in telemetry.__all__:
        assert getattr(telemetry, name) is not None
    assert otel_grpo.Telemetry is telemetry.Telemetry
    assert otel_grpo.TelemetrySettings is telemetry.TelemetrySettings


def test_telemetry_takes_providers_as_keywords():
    import inspect

    params = inspect.signature(telemetry.Telemetry).parameters
    assert params["meter_provider"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["tracer_provider"].kind is inspect.Parameter.KEYWORD_ONLY
