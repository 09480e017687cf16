"""deploy/helm/otel-grpo: `helm lint` / `helm template` (helm built from its Go module) and the
Prometheus Operator's CRD schemas (from its Go module) on what it renders.

No cluster here: the objects are checked against the CRDs' openAPIV3Schema (types, required
fields, and, as the API server's strict field validation does, no unknown field), the rules and
dashboards against what `otel-grpo dashboards` generates, and the collector's config with the
collector itself.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from otel_grpo.sidecar import SidecarSettings
from otel_grpo.stack import RuleSettings
from otel_grpo.generate._configs import COMPOSE, prometheus_config
from otel_grpo.generate._kubernetes import CHART, SCRAPE_JOBS, prometheus_rule_spec
from otel_grpo.stack._process import bin_cache, backend_versions
from otel_grpo.generate.dashboards import dashboards
from tests.stack.conftest import need

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def helm() -> str:
    return need("helm")


@pytest.fixture(scope="session")
def crds(helm) -> dict[str, dict]:
    """kind -> the served version's openAPIV3Schema (scripts/build-backends.sh crds)."""
    d = bin_cache() / f"prometheus-operator-crds-{backend_versions()['prometheus-operator']}"
    if not d.is_dir():
        out = subprocess.run([str(Path(__file__).resolve().parents[2] / "scripts/build-backends.sh"), "crds"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0 and d.is_dir(), out.stderr[-2000:]
    schemas = {}
    for path in d.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    assert {"PrometheusRule", "ServiceMonitor", "PodMonitor"} <= set(schemas)
    return schemas


def _template(helm: str, root: Path, *sets: str, ok: bool = True) -> list[dict] | str:
    argv = [helm, "template", "grpo", str(root / CHART), "--namespace", "ml"]
    for s in sets:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if not ok:
        assert out.returncode != 0
        return out.stderr
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _objects(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _unknown_fields(obj, schema: dict, path: str = "") -> list[str]:
    """Fields the schema does not declare (the API server's strict validation refuses them)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out = []
    if isinstance(obj, dict) and "properties" in schema:
        for k, v in obj.items():
            if k in schema["properties"]:
                out += _unknown_fields(v, schema["properties"][k], f"{path}.{k}")
            elif "additionalProperties" not in schema:
                out.append(f"{path}.{k}")
    elif isinstance(obj, list) and "items" in schema:
        for i, v in enumerate(obj):
            out += _unknown_fields(v, schema["items"], f"{path}[{i}]")
    return out


def test_helm_lint_passes_strict(helm, root):
    out = subprocess.run([helm, "lint", "--strict", str(root / CHART)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("sets", [
    (),
    ("follower.enabled=true", "follower.logs.persistentVolumeClaim.claimName=verl-logs",
     "follower.env.OTEL_GRPO_FOLLOW_VERL_METRICS=/follow/p/exp.jsonl", "collector.queue.persistence.enabled=true"),
    ("sidecar.replicas=3", "sidecar.database=postgresql://grpo@pg:5432/grpo", "tokens.existingSecret=mine",
     "sidecar.databasePasswordSecret.name=pg", "sidecar.databasePasswordSecret.key=password"),
], ids=["defaults", "follower", "postgres-replicas"])
def test_every_operator_object_matches_its_crd_schema(helm, root, crds, sets):
    docs = _template(helm, root, *sets)
    operator = [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {d["kind"] for d in operator} == {"PrometheusRule", "ServiceMonitor"}
    for d in operator:
        schema = crds[d["kind"]]
        errors = [f"{e.instance_path}: {e.message}" for e in jsonschema_rs.validator_for(schema).iter_errors(d)]
        assert errors == [], (d["kind"], d["metadata"]["name"], errors[:5])
        assert _unknown_fields(d, schema) == [], d["metadata"]["name"]
        assert d["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # what its selectors pick


def test_the_strict_check_catches_a_misspelt_field(crds):
    """The schema check above can fail: a typo is an unknown field, a wrong type an error."""
    bad = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "x"},
           "spec": {"selector": {}, "endpoints": [{"port": "http", "honorlabels": True, "interval": 15}]}}
    assert _unknown_fields(bad, crds["ServiceMonitor"]) == [".spec.endpoints[0].honorlabels"]
    assert not jsonschema_rs.validator_for(crds["ServiceMonitor"]).is_valid(bad)


def test_the_prometheus_rule_is_the_generated_rules(helm, root):
    (rule,) = _objects(_template(helm, root), "PrometheusRule").values()
    assert rule["spec"] == prometheus_rule_spec(RuleSettings())
    # `{{ $labels.run_id }}` reaches Prometheus as written (the rule file is not templated by helm).
    summaries = [r["annotations"]["summary"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert any("{{ $labels.run_id }}" in s for s in summaries)


def test_no_alert_selects_by_job_and_the_monitors_set_composes_jobs(helm, root):
    """The alerts' job-name independence: no alert selects by `job` (the Prometheus Operator names jobs
    after namespace and service), and the ServiceMonitors still relabel `job` to compose's names so
    dashboards and ad-hoc queries read the same series in both deployments."""
    docs = _template(helm, root)
    set_jobs = {r["replacement"] for sm in _objects(docs, "ServiceMonitor").values()
                for ep in sm["spec"]["endpoints"] for r in ep["relabelings"] if r["targetLabel"] == "job"}
    assert set_jobs == set(SCRAPE_JOBS.values())
    compose_jobs = {j["job_name"] for j in prometheus_config(COMPOSE)["scrape_configs"]}
    assert set(SCRAPE_JOBS.values()) <= compose_jobs
    text = yaml.safe_dump(prometheus_rule_spec(RuleSettings()))
    assert not re.findall(r'\bjob\s*(=|!=|=~|!~)', text)


def test_dashboards_are_configmaps_grafana_discovers(helm, root):
    maps = _objects(_template(helm, root), "ConfigMap")
    boards = {n: m for n, m in maps.items() if m["metadata"]["labels"].get("grafana_dashboard") == "1"}
    got = {k: json.loads(v) for m in boards.values() for k, v in m["data"].items()}
    assert got == dashboards(RuleSettings())


def test_the_infinity_datasource_reaches_the_sidecar_with_the_read_token(helm, root):
    docs = _template(helm, root)
    secrets = _objects(docs, "Secret")
    tokens = secrets["grpo-otel-grpo-tokens"]["data"]
    assert set(tokens) == {"otlp_token", "sidecar_token", "sidecar_read_token"}
    (ds,) = [s for s in secrets.values() if s["metadata"]["labels"].get("grafana_datasource") == "1"]
    (source,) = yaml.safe_load(ds["stringData"]["otel-grpo-datasource.yaml"])["datasources"]
    assert source["uid"] == "infinity" and source["url"] == "http://grpo-otel-grpo-sidecar.ml.svc:8000"
    assert source["secureJsonData"]["bearerToken"] == base64.b64decode(tokens["sidecar_read_token"]).decode()
    sidecar = _objects(docs, "Deployment")["grpo-otel-grpo-sidecar"]["spec"]["template"]["spec"]["containers"][0]
    allowed = json.loads(next(e["value"] for e in sidecar["env"] if e["name"] == "OTEL_GRPO_SIDECAR_ALLOWED_HOSTS"))
    assert "grpo-otel-grpo-sidecar.ml.svc" in allowed  # Grafana's dotted name passes the sidecar's Host check


def test_pods_run_as_non_root_with_tokens_from_the_secret(helm, root):
    docs = _template(helm, root, "follower.enabled=true", "follower.logs.emptyDir.medium=")
    for name, dep in _objects(docs, "Deployment").items():
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001, name
        (c,) = pod["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] and not c["securityContext"]["allowPrivilegeEscalation"]
        for e in c.get("env", []):
            if re.search("TOKEN|PASSWORD", e["name"]):
                assert "secretKeyRef" in e["valueFrom"], (name, e)
    follower = _objects(docs, "Deployment")["grpo-otel-grpo-follower"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in follower["env"]}
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == "authorization=Bearer%20$(OTEL_GRPO_OTLP_TOKEN)"
    assert list(env).index("OTEL_GRPO_OTLP_TOKEN") < list(env).index("OTEL_EXPORTER_OTLP_HEADERS")  # $(VAR) order


def test_the_collector_runs_the_same_config_and_it_validates(helm, root, otelcol, tmp_path):
    (cm,) = [m for n, m in _objects(_template(helm, root), "ConfigMap").items() if n.endswith("-collector")]
    text = cm["data"]["config.yaml"]
    assert text.split("\n", 1)[1] == (root / "collector/config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(text)
    out = subprocess.run([otelcol, "validate", f"--config={tmp_path / 'config.yaml'}"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("sets,message", [
    (("sidecar.replicas=2",), "sidecar.replicas > 1 needs sidecar.database"),
    (("follower.enabled=true",), "follower.enabled needs follower.logs"),
])
def test_impossible_values_fail_with_a_message(helm, root, sets, message):
    assert message in _template(helm, root, *sets, ok=False)


def test_the_sidecar_settings_the_chart_gives_are_valid(helm, root, monkeypatch):
    """The sidecar's pod environment (tokens resolved from the chart's Secret) makes valid settings:
    listening on 0.0.0.0 with both tokens, serving Grafana's dotted in-cluster name."""
    docs = _template(helm, root, "sidecar.env.OTEL_GRPO_SIDECAR_RETENTION_MAX_RUNS=200")
    tokens = {k: base64.b64decode(v).decode() for k, v in _objects(docs, "Secret")["grpo-otel-grpo-tokens"]["data"].items()}
    (c,) = _objects(docs, "Deployment")["grpo-otel-grpo-sidecar"]["spec"]["template"]["spec"]["containers"]
    for name in [k for k in os.environ if k.startswith("OTEL_GRPO_SIDECAR_")]:
        monkeypatch.delenv(name)
    for e in c["env"]:
        value = e["value"] if "value" in e else tokens[e["valueFrom"]["secretKeyRef"]["key"]]
        monkeypatch.setenv(e["name"], value)
    args = dict(zip(c["args"][1::2], c["args"][2::2]))
    s = SidecarSettings(host=args["--host"], port=int(args["--port"]))
    assert (s.host, s.ingest_token, s.read_token) == ("0.0.0.0", tokens["sidecar_token"], tokens["sidecar_read_token"])
    assert str(s.db) == "/data/sidecar.db" and s.retention_max_runs == 200
    assert s.allowed_hosts == ["grpo-otel-grpo-sidecar.ml.svc", "grpo-otel-grpo-sidecar.ml.svc.cluster.local"]


@pytest.mark.parametrize("sets", [(), ("tokens.existingSecret=mine", "alerting.secret=pager-urls")],
                         ids=["defaults", "named-secrets"])
def test_the_alertmanager_config_secret_is_compose_routing_for_this_release(helm, root, amtool, tmp_path, sets):
    """The chart's Alertmanager config: amtool accepts it, and it routes and inhibits as compose's does,
    with the release's sidecar Service and the Secrets kube-prometheus-stack's Alertmanager mounts."""
    secret = _objects(_template(helm, root, *sets), "Secret")["grpo-otel-grpo-alertmanager"]
    text = secret["stringData"]["alertmanager.yaml"]
    (tmp_path / "alertmanager.yaml").write_text(text)
    out = subprocess.run([amtool, "check-config", str(tmp_path / "alertmanager.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "@" not in text.replace("{{", "")  # every placeholder replaced
    config, compose = yaml.safe_load(text), yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    assert config["route"] == compose["route"] and config["inhibit_rules"] == compose["inhibit_rules"]
    tokens = "mine" if sets else "grpo-otel-grpo-tokens"
    for receiver in config["receivers"]:
        hook = receiver["webhook_configs"][0]
        assert hook["url"] == "http://grpo-otel-grpo-sidecar.ml.svc:8000/api/alerts"
        assert hook["http_config"]["authorization"]["credentials_file"] == \
            f"/etc/alertmanager/secrets/{tokens}/sidecar_token"
    assert "alertmanager.yaml" not in str(_template(helm, root, "alerting.enabled=false"))
