"""Compose, collector and Alertmanager files: validated by the real tools where they exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from otel_grpo.stack import StackSettings, write_local_configs


def test_amtool_checks_compose_and_local_configs(root, amtool, tmp_path):
    local = write_local_configs(StackSettings(dir=tmp_path))["alertmanager"]
    for path in (root / "alertmanager/alertmanager.yml", local):
        out = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


def test_alertmanager_routes_by_severity_to_the_sidecar(root):
    am = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    routes = {r["matchers"][0]: r["receiver"] for r in am["route"]["routes"]}
    assert routes == {'severity="critical"': "sidecar-critical", 'severity="warning"': "sidecar-warning"}
    for receiver in am["receivers"]:
        assert [w["url"] for w in receiver["webhook_configs"]] == ["http://sidecar:8000/api/alerts"]


def test_local_prometheus_config_passes_promtool(promtool, tmp_path):
    path = write_local_configs(StackSettings(dir=tmp_path))["prometheus"]
    out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    cfg = yaml.safe_load(path.read_text())
    targets = {j["job_name"]: j["static_configs"][0]["targets"][0] for j in cfg["scrape_configs"]}
    assert targets["trainer"] == "127.0.0.1:9464" and targets["sidecar"] == "127.0.0.1:8000"


def _compose_config(root, *profiles: str) -> dict:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose not on PATH (apt-get install docker-compose)")
    argv = [binary, "-f", str(root / "docker-compose.yml")]
    for p in profiles:
        argv += ["--profile", p]
    env = {**os.environ, "GRAFANA_ADMIN_PASSWORD": "test-only"}
    out = subprocess.run(argv + ["config"], capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_file_is_valid_with_each_profile(root):
    # docker-compose 1.29's `config` lists every service; the profiles decide what `up` starts.
    services = _compose_config(root)["services"]
    assert services["trainer"]["profiles"] == ["gpu"] and services["trainer-cpu"]["profiles"] == ["cpu"]
    assert services["follower"]["profiles"] == ["follow"]
    assert services["follower"]["command"] == ["follow"]
    assert any(v.endswith(":/follow:ro") for v in services["follower"]["volumes"])  # the job's files, read-only
    assert all("profiles" not in s for n, s in services.items() if not n.startswith("trainer") and n != "follower")
    gpu = _compose_config(root, "gpu")["services"]
    assert gpu["trainer"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    cpu = _compose_config(root, "cpu")["services"]
    assert "deploy" not in cpu["trainer-cpu"]


def test_compose_pins_images_uses_volumes_and_health_ordering(root):
    services = _compose_config(root, "gpu", "cpu")["services"]
    for name, svc in services.items():
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), (name, image)
    healthy = {n for n, s in services.items() if "healthcheck" in s}
    assert {"sidecar", "prometheus", "alertmanager", "grafana"} <= healthy
    for name, svc in services.items():
        for dep, cond in svc.get("depends_on", {}).items():
            want = "service_healthy" if dep in healthy else "service_started"
            assert cond["condition"] == want, (name, dep)
    env = services["grafana"]["environment"]
    assert "yesoreyeram-infinity-datasource" in env["GF_PLUGINS_PREINSTALL"]
    assert "yesoreyeram-infinity-datasource" in env["GF_INSTALL_PLUGINS"]
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer" and env["GF_SECURITY_ADMIN_PASSWORD"] == "test-only"
    trainer = services["trainer-cpu"]["environment"]
    assert trainer["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"
    assert trainer["OTEL_GRPO_METRICS_EXPORTERS"] == "otlp"


def test_compose_fails_without_an_admin_password(root):
    binary = shutil.which("docker-compose") or pytest.skip("docker-compose not on PATH")
    env = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}
    out = subprocess.run([binary, "-f", str(root / "docker-compose.yml"), "config", "-q"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert out.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in out.stderr


def test_collector_pipelines(root):
    cfg = yaml.safe_load((root / "collector/config.yaml").read_text())
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    image = compose["services"]["otel-collector"]["image"]
    assert image == "otel/opentelemetry-collector-contrib:0.144.0"  # key names below are 0.144's
    for pipeline in cfg["service"]["pipelines"].values():
        assert pipeline["receivers"] == ["otlp"]
        assert pipeline["processors"] == ["memory_limiter", "batch"]
    assert cfg["service"]["pipelines"]["metrics"]["exporters"] == ["prometheus"]
    assert cfg["exporters"]["prometheus"]["endpoint"] == "0.0.0.0:8889"
    sidecar = cfg["exporters"][cfg["service"]["pipelines"]["traces"]["exporters"][0]]
    assert cfg["service"]["pipelines"]["traces"]["exporters"][0].split("/")[0] == "otlp_http"
    assert sidecar["traces_endpoint"] == "http://sidecar:8000/v1/traces"
    assert sidecar["retry_on_failure"]["enabled"] and sidecar["sending_queue"]["enabled"]
    assert cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "0.0.0.0:4318"
    assert "health_check" in cfg["service"]["extensions"]
    prom = yaml.safe_load((root / "prometheus/prometheus.yml").read_text())
    collector_job = next(j for j in prom["scrape_configs"] if j["job_name"] == "otel-collector")
    assert collector_job["honor_labels"] is True
    assert collector_job["static_configs"][0]["targets"] == ["otel-collector:8889"]


def test_compose_commands_use_flags_the_cli_has(root):
    """Every `--flag` a compose service passes to `otel-grpo` exists on that command."""
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    for name, svc in compose["services"].items():
        command = svc.get("command")
        if not command or not svc["image"].startswith("otel-grpo"):
            continue
        sub, flags = command[0], [a for a in command[1:] if a.startswith("--")]
        out = subprocess.run([sys.executable, "-m", "otel_grpo.cli", sub, "--help"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, (name, out.stderr)
        for flag in flags:
            assert flag in out.stdout, (name, sub, flag)
