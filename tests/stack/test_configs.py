"""Compose, collector and Alertmanager files: validated by the real tools where they exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from otel_grpo.stack import StackSettings, write_local_configs
from otel_grpo.generate import Destination, RuleSettings, Routing, alertmanager_config, alerts, class_of
from otel_grpo.generate._configs import COMPOSE, SECRETS, retarget
from otel_grpo.stack._process import backend_versions


CONFIGURED = Routing(page=Destination(kind="slack", url_file="page_url", channel="#grpo-oncall"),
                     notify=Destination(kind="webhook", url_file="notify_url"),
                     deadman=Destination(kind="webhook", url_file="deadman_url"))


def test_amtool_checks_compose_local_and_configured_configs(root, amtool, tmp_path):
    local = write_local_configs(StackSettings(dir=tmp_path / "local"))["alertmanager"]
    configured = write_local_configs(StackSettings(dir=tmp_path / "configured", routing=CONFIGURED,
                                                   secrets_dir=tmp_path))["alertmanager"]
    for path in (root / "alertmanager/alertmanager.yml", local, configured):
        out = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


def _urls(receiver: dict) -> list[str]:
    return [h.get("url") or h.get("url_file") for h in receiver.get("webhook_configs", [])] + \
           [h["api_url_file"] for h in receiver.get("slack_configs", [])]


def test_by_default_every_class_reaches_the_sidecar_and_nothing_leaves_the_host(root):
    am = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    assert {r["receiver"]: r["matchers"] for r in am["route"]["routes"]} == {
        "deadman": ['alertname="GRPOWatchdog"'], "page": ['severity="critical"'], "notify": ['severity="warning"']}
    assert am["route"]["receiver"] == "record"
    receivers = {r["name"]: r for r in am["receivers"]}
    assert set(receivers) == {"page", "notify", "record", "deadman"}
    for name, receiver in receivers.items():
        assert set(receiver) == {"name", "webhook_configs"}, name  # no Slack, no e-mail: the sidecar only
        (hook,) = receiver["webhook_configs"]
        assert hook["url"] == "http://sidecar:8000/api/alerts", name
        assert hook["http_config"]["authorization"]["credentials_file"] == f"{SECRETS}/sidecar_token"
    # A crash nobody resumes pages at once, then twice a day at most, not hourly.
    assert {r["receiver"]: r["repeat_interval"] for r in am["route"]["routes"]}["page"] == "12h"


def test_a_configured_destination_is_added_to_its_class_with_its_url_in_a_file(tmp_path):
    am = alertmanager_config("http://sidecar:8000", CONFIGURED, secrets_dir="/secrets", token_file="/secrets/t")
    receivers = {r["name"]: r for r in am["receivers"]}
    assert _urls(receivers["page"]) == ["http://sidecar:8000/api/alerts", "/secrets/page_url"]
    assert receivers["page"]["slack_configs"][0]["channel"] == "#grpo-oncall"
    assert _urls(receivers["notify"]) == ["http://sidecar:8000/api/alerts", "/secrets/notify_url"]
    assert _urls(receivers["record"]) == ["http://sidecar:8000/api/alerts"]
    assert _urls(receivers["deadman"]) == ["http://sidecar:8000/api/alerts", "/secrets/deadman_url"]
    # The sidecar's token goes to the sidecar only, never to an operator's URL.
    for receiver in receivers.values():
        assert [h for h in receiver["webhook_configs"] if "http_config" in h] == receiver["webhook_configs"][:1]
    # One file names them all: the YAML an operator writes renders the same config.
    (tmp_path / "routing.yml").write_text(yaml.safe_dump({
        "page": {"kind": "slack", "url_file": "page_url", "channel": "#grpo-oncall"},
        "notify": {"kind": "webhook", "url_file": "notify_url"}, "deadman": {"kind": "webhook", "url_file": "deadman_url"}}))
    assert Routing.from_yaml(tmp_path / "routing.yml") == CONFIGURED
    (tmp_path / "bad.yml").write_text("page: {kind: email, url_file: x}\n")
    with pytest.raises(ValueError, match="bad.yml: destination kind must be one of"):
        Routing.from_yaml(tmp_path / "bad.yml")
    with pytest.raises(ValueError, match="inside the secrets directory"):
        Destination(kind="webhook", url_file="/etc/passwd")


def test_every_alert_has_one_class_from_its_severity():
    """The routing tree sends an alert by severity alone: critical pages, warning notifies, the Watchdog to the
    dead man's switch; no rule carries another severity, so nothing is record-only by accident."""
    classes = {}
    for rule in alerts(RuleSettings()):
        classes.setdefault(rule["alert"], set()).add(class_of({"alertname": rule["alert"], **rule["labels"]}))
    assert classes["GRPOWatchdog"] == {"deadman"}
    assert classes["GRPONonFiniteValues"] == {"page", "notify"}  # loss / grad norm page, other signals notify
    assert {a for a, c in classes.items() if c == {"notify"}} >= {
        "GRPOKLSpike", "GRPOKLJump", "GRPORolloutISDrift", "GRPOEntropyCollapse", "GRPONoLearningSignal",
        "GRPOGradNormSpike", "GRPORunPreempted", "GRPOCollectorRefusing", "GRPOCollectorQueueFull"}
    assert all(c <= {"page", "notify", "deadman"} for c in classes.values()), classes


def test_inhibitions_pair_only_alerts_of_one_run(root):
    am = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    for rule in am["inhibit_rules"]:
        assert rule["equal"] == ["run_id"], rule
        assert 'run_id=~".+"' in rule["source_matchers"] and 'run_id=~".+"' in rule["target_matchers"], rule


def test_inhibition_sources_fire_only_while_their_cause_holds(root):
    """An alert that keeps firing after its condition ended (`keep_firing_for`) inhibits nothing: a KL jump 30
    minutes after GRPOKLHigh's KL came back down is a new cause, not one the page explains (its rule holds its
    symptoms back while its condition holds instead: _alerts.WITHHELD)."""
    am = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    rules = yaml.safe_load((root / "prometheus/rules/grpo_alerts.yml").read_text())
    keeps = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r and "keep_firing_for" in r}
    sources = {m.split('"')[1] for r in am["inhibit_rules"] for m in r["source_matchers"] if m.startswith("alertname=")}
    assert sources and not sources & keeps, sources & keeps


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
    out = subprocess.run(argv + ["config"], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_file_is_valid_with_each_profile(root):
    # docker-compose 1.29's `config` lists every service; the profiles decide what `up` starts.
    services = _compose_config(root)["services"]
    assert services["trainer"]["profiles"] == ["gpu"] and services["trainer-cpu"]["profiles"] == ["cpu"]
    assert services["follower"]["profiles"] == ["follow"]
    assert services["follower"]["command"] == ["follow"]
    assert any(v.endswith(":/follow:ro") for v in services["follower"]["volumes"])  # the job's files, read-only
    assert services["postgres"]["profiles"] == ["postgres"]
    assert all("profiles" not in s for n, s in services.items()
               if not n.startswith("trainer") and n not in ("follower", "postgres"))
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
    assert {"sidecar", "prometheus", "alertmanager", "grafana", "otel-collector"} <= healthy
    for name, svc in services.items():
        for dep, cond in svc.get("depends_on", {}).items():
            want = ("service_completed_successfully" if dep == "init" else
                    "service_healthy" if dep in healthy else "service_started")
            assert cond["condition"] == want, (name, dep)
    env = services["grafana"]["environment"]
    # pinned, and installed in the background: a Grafana without internet still starts (the _SYNC variant
    # makes a failed download fail Grafana's start)
    plugin, _, version = env["GF_PLUGINS_PREINSTALL"].partition("@")
    assert plugin == "yesoreyeram-infinity-datasource" and version
    assert not any(k.startswith("GF_PLUGINS_PREINSTALL_SYNC") for k in env)
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer" and env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == f"{SECRETS}/grafana_admin_password"
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    trainer = services["trainer-cpu"]["environment"]
    assert trainer["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"
    assert trainer["OTEL_GRPO_METRICS_EXPORTERS"] == "otlp"


def test_compose_limits_memory_rotates_logs_and_wires_tokens(root):
    services = _compose_config(root, "gpu", "cpu")["services"]
    for name, svc in services.items():
        assert svc["logging"]["options"] == {"max-size": "10m", "max-file": "3"}, name
        if name != "trainer":  # the GPU trainer's memory is the host's
            assert "mem_limit" in svc, name
    collector = services["otel-collector"]
    assert collector["environment"]["GOMEMLIMIT"] == "400MiB"
    assert any(v.endswith(":/var/lib/otelcol/file_storage") or "file_storage" in str(v) for v in collector["volumes"])
    gpu = services["trainer"]
    assert gpu["ipc"] == "host" and gpu["stop_grace_period"] == "2m"
    assert set(gpu["depends_on"]) == {"init", "otel-collector", "sidecar"}  # not gated on Alertmanager
    assert gpu["build"]["target"] == "trainer" and services["trainer-cpu"]["build"]["target"] == "trainer"
    assert gpu["command"][-2:] == ["--run-id", ""]  # empty: a unique generated id
    env = services["sidecar"]["environment"]
    assert env["OTEL_GRPO_SIDECAR_TOKEN_FILE"] == f"{SECRETS}/sidecar_token"
    assert env["OTEL_GRPO_SIDECAR_READ_TOKEN_FILE"] == f"{SECRETS}/sidecar_read_token"
    assert services["sidecar"]["build"]["target"] == "sidecar"


@pytest.mark.parametrize("target", ["sidecar", "follow"])
def test_the_sidecar_and_follow_image_targets_install_no_torch(root, target):
    text = (root / "Dockerfile").read_text()
    stage = text.split(f"FROM base AS {target}", 1)[1].split("FROM ", 1)[0]
    pip = [line for line in stage.splitlines() if line.startswith("RUN pip install")]
    assert pip == [f'RUN pip install ".[{target}]"'] and "torch" not in "".join(pip)


def test_the_sidecar_command_runs_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from otel_grpo.cli import main\nsys.argv = ['otel-grpo', 'sidecar', '--help']\nmain()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--db" in out.stdout, out.stderr


def _collector_base_image(root) -> str:
    """The contrib image compose's collector image (Dockerfile target `collector`) takes its binary from."""
    (line,) = [x for x in (root / "Dockerfile").read_text().splitlines() if x.startswith("ARG OTELCOL_IMAGE=")]
    return line.partition("=")[2]


def _defaults(node):
    """The collector config as compose runs it: `${env:NAME:-default}` -> default."""
    if isinstance(node, dict):
        return {k: _defaults(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_defaults(v) for v in node]
    return re.sub(r"\$\{env:\w+:-([^}]*)\}", r"\1", node) if isinstance(node, str) else node


def test_collector_pipelines(root):
    cfg = _defaults(yaml.safe_load((root / "collector/config.yaml").read_text()))
    assert _collector_base_image(root) == "otel/opentelemetry-collector-contrib:0.144.0"  # key names below are 0.144's
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
    for protocol in cfg["receivers"]["otlp"]["protocols"].values():  # no request without the OTLP token
        assert protocol["auth"] == {"authenticator": "bearertokenauth/otlp"}
    assert cfg["extensions"]["bearertokenauth/otlp"]["filename"] == f"{SECRETS}/otlp_token"
    assert cfg["service"]["extensions"] == ["health_check", "file_storage", "bearertokenauth/otlp",
                                            "bearertokenauth/sidecar"]
    # An explicit limit: a percentage would be of the host's memory outside a container.
    assert (cfg["processors"]["memory_limiter"]["limit_mib"], cfg["processors"]["memory_limiter"]["spike_limit_mib"]) == ("400", "80")
    queue = sidecar["sending_queue"]
    assert queue["storage"] == "file_storage" and queue["sizer"] == "bytes" and queue["queue_size"] >= 2**20
    assert cfg["exporters"]["prometheus"]["translation_strategy"] == "UnderscoreEscapingWithSuffixes"
    assert sidecar["auth"] == {"authenticator": "bearertokenauth/sidecar"} and "headers" not in sidecar
    assert cfg["extensions"]["bearertokenauth/sidecar"]["filename"] == f"{SECRETS}/sidecar_token"
    reader = cfg["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    assert (reader["host"], reader["port"]) == ("0.0.0.0", "8888")
    prom = yaml.safe_load((root / "prometheus/prometheus.yml").read_text())
    collector_job = next(j for j in prom["scrape_configs"] if j["job_name"] == "otel-collector")
    assert collector_job["honor_labels"] is True
    assert collector_job["static_configs"][0]["targets"] == ["otel-collector:8889"]


def test_compose_commands_use_flags_the_cli_has(root):
    """Every `--flag` a compose service passes to `otel-grpo` exists on that command."""
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    for name, svc in compose["services"].items():
        command = svc.get("command")
        if not command or not svc["image"].startswith("otel-grpo") or svc["image"] == "otel-grpo:collector":
            continue
        sub, flags = command[0], [a for a in command[1:] if a.startswith("--")]
        out = subprocess.run([sys.executable, "-m", "otel_grpo.cli", sub, "--help"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, (name, out.stderr)
        for flag in flags:
            assert flag in out.stdout, (name, sub, flag)


def test_retarget_replaces_only_compose_addresses(root):
    text = (root / "prometheus/prometheus.yml").read_text()
    moved = retarget(text, {COMPOSE.sidecar: "127.0.0.1:5000", COMPOSE.metrics: "127.0.0.1:5001"})
    diff = [(a, b) for a, b in zip(text.splitlines(), moved.splitlines()) if a != b]
    assert sorted(diff) == [("    - otel-collector:8889", "    - 127.0.0.1:5001"), ("    - sidecar:8000", "    - 127.0.0.1:5000")]
    with pytest.raises(ValueError, match="not a compose target"):
        retarget(text, {"evil:1": "127.0.0.1:1"})


def test_compose_and_builder_pin_the_versions_the_tests_build(root):
    versions = backend_versions()
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())["services"]
    assert compose["prometheus"]["image"] == f"prom/prometheus:v{versions['prometheus']}"
    assert compose["alertmanager"]["image"] == f"prom/alertmanager:v{versions['alertmanager']}"
    assert _collector_base_image(root) == f"otel/opentelemetry-collector-contrib:{versions['otelcol']}"
    manifest = yaml.safe_load((root / "collector/builder-config.yaml").read_text())
    assert manifest["dist"]["version"] == versions["otelcol"]
    for kind in ("receivers", "processors", "exporters", "extensions"):
        for component in manifest[kind]:
            assert component["gomod"].endswith(f" v{versions['otelcol']}"), component


def test_the_built_collector_accepts_compose_config(root, otelcol):
    out = subprocess.run([otelcol, "validate", f"--config={root / 'collector/config.yaml'}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    components = subprocess.run([otelcol, "components"], capture_output=True, text=True, timeout=60).stdout
    for name in ("otlp", "memory_limiter", "batch", "prometheus", "otlp_http", "debug", "health_check", "file_storage",
                 "bearertokenauth"):
        assert f"name: {name}\n" in components, name


def test_the_built_backends_report_the_pinned_versions(promtool, prometheus_bin, alertmanager_bin, amtool, otelcol):
    versions = backend_versions()
    for binary, version in ((promtool, versions["prometheus"]), (prometheus_bin, versions["prometheus"]),
                            (alertmanager_bin, versions["alertmanager"]), (amtool, versions["alertmanager"]),
                            (otelcol, versions["otelcol"])):
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
        assert f"version {version}" in out.stdout + out.stderr, binary


def test_local_alertmanager_uses_the_same_routing_with_its_own_secrets_dir(tmp_path):
    am = yaml.safe_load(write_local_configs(StackSettings(dir=tmp_path, routing=CONFIGURED,
                                                          secrets_dir=tmp_path / "s"))["alertmanager"].read_text())
    receivers = {r["name"]: r for r in am["receivers"]}
    assert receivers["page"]["slack_configs"][0]["api_url_file"] == str(tmp_path / "s/page_url")
    assert receivers["page"]["webhook_configs"][0]["url"] == "http://127.0.0.1:8000/api/alerts"
    assert (am["route"]["group_wait"], am["route"]["group_interval"]) == ("1s", "5s")


def test_build_backends_without_go_says_so_and_succeeds(root, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OTEL_GRPO_BIN_CACHE": str(tmp_path / "bin")}
    out = subprocess.run([str(root / "scripts/build-backends.sh")], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and "go not found" in out.stderr
    assert not (tmp_path / "bin").exists()


def test_build_backends_rejects_an_unknown_target(root, tmp_path):
    if shutil.which("go") is None:
        pytest.skip("Go is not installed")
    out = subprocess.run([str(root / "scripts/build-backends.sh"), "grafana"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "OTEL_GRPO_BIN_CACHE": str(tmp_path)})
    assert out.returncode == 2 and "unknown target 'grafana'" in out.stderr
