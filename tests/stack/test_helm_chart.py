"""deploy/helm/otel-grpo: `helm lint` / `helm template` (helm built from its Go module) and the
Prometheus Operator's CRD schemas (from its Go module) on what it renders.

No cluster here: the objects are checked against the CRDs' openAPIV3Schema (types, required
fields, and, as the API server's strict field validation does, no unknown field), the rules and
dashboards against what `otel-grpo dashboards` generates, and the collector's config with the
collector itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from otel_grpo.sidecar import SidecarSettings
from otel_grpo.sidecar._hosts import HostCheckMiddleware, host_allowed
from otel_grpo.stack import RuleSettings
from otel_grpo.generate._configs import COMPOSE, prometheus_config
from otel_grpo.generate._kubernetes import CHART, SCRAPE_JOBS, prometheus_rule_spec
from otel_grpo.stack._process import Managed, bin_cache, backend_versions
from otel_grpo.generate.dashboards import dashboards

from tests._support.alertmanager import INHIBITION_CASES, inhibited, serve_alertmanager

pytestmark = pytest.mark.integration


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


def _template(helm: str, root: Path, *sets: str, ok: bool = True, release: str = "grpo", values: tuple = (),
              args: tuple = (), chart: Path | None = None) -> list[dict] | str:
    """`helm template` of the chart (or `chart`) in namespace ml: the documents, or with ok=False its stderr."""
    argv = [helm, "template", release, str(chart or root / CHART), "--namespace", "ml", *args]
    for f in values:
        argv += ["-f", str(f)]
    for s in sets:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if not ok:
        assert out.returncode != 0, out.stdout[:2000]
        return out.stderr
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def doc_block(root: Path, marker: str) -> str:
    """The ```yaml block of docs/operations.md whose first line is `# <marker>`: tests run what the docs say."""
    blocks = re.findall(r"```yaml\n(.*?)```", (root / "docs/operations.md").read_text(), re.S)
    found = [b for b in blocks if b.startswith(f"# {marker}\n")]
    assert len(found) == 1, f"docs/operations.md needs one yaml block starting '# {marker}'"
    return found[0]


# A follower with its files: the volume (an emptyDir here) and what to read in it.
FOLLOWER = ("follower.enabled=true", "follower.logs.emptyDir.medium=", "follower.env.OTEL_GRPO_FOLLOW_JSONL=/follow/job.jsonl")


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


def test_helm_show_readme_names_values_and_a_guide_that_exist(helm, root):
    """The chart's README (`helm show readme`, what a registry shows) installs with values the chart has and
    sends the reader to a section of docs/operations.md that exists."""
    out = subprocess.run([helm, "show", "readme", str(root / CHART)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("# otel-grpo Helm chart"), out.stderr
    values = yaml.safe_load((root / CHART / "values.yaml").read_text())
    named = re.findall(r"`?((?:global|monitoring|tokens|sidecar|collector|follower)\.[A-Za-z.]+)", out.stdout)
    assert named
    for key in named:
        node = values
        for part in key.rstrip(".").split("."):
            assert isinstance(node, dict) and part in node, key
            node = node[part]
    section = re.search(r'section "([^"]+)"', out.stdout).group(1)
    assert f"### {section}" in (root / "docs/operations.md").read_text()


@pytest.mark.parametrize("sets", [
    (),
    ("follower.enabled=true", "follower.logs.persistentVolumeClaim.claimName=verl-logs",
     "follower.env.OTEL_GRPO_FOLLOW_VERL_METRICS=/follow/p/exp.jsonl", "collector.queue.persistence.enabled=true"),
    ("sidecar.replicas=3", "sidecar.database=postgresql://grpo@pg:5432/grpo", "tokens.existingSecret=mine",
     "monitoring.grafanaDatasource.bearerToken=$__env{READ_TOKEN}",
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
    spec = re.sub(r"/\?var-sidecar=grpo-[0-9a-f]{16}&viewPanel=", "/?viewPanel=", json.dumps(rule["spec"]))
    assert json.loads(spec) == prometheus_rule_spec(RuleSettings())
    # `{{ $labels.run_id }}` reaches Prometheus as written (the rule file is not templated by helm).
    summaries = [r["annotations"]["summary"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert any("{{ $labels.run_id }}" in s for s in summaries)


def test_the_alerts_link_to_the_clusters_grafana(helm, root):
    """Each alert's `dashboard_url` opens its panel on the Grafana `monitoring.prometheusRule.grafanaUrl` names
    (the default is compose's localhost:3000, which in a cluster is the reader's own machine)."""
    docs = _template(helm, root, "monitoring.prometheusRule.grafanaUrl=https://grafana.example.org/")
    (rule,) = _objects(docs, "PrometheusRule").values()
    (source,) = [yaml.safe_load(v)["datasources"][0] for d in docs if d["kind"] == "Secret"
                 for k, v in d.get("stringData", {}).items() if k.endswith("-datasource.yaml")]
    # with this release's sidecar picked in the dashboard's `sidecar` variable (several releases share a Grafana)
    spec = json.dumps(rule["spec"]).replace(f"/?var-sidecar={source['uid']}&viewPanel=", "/?viewPanel=")
    assert json.loads(spec) == prometheus_rule_spec(RuleSettings(grafana_url="https://grafana.example.org"))
    assert "localhost:3000" not in json.dumps(rule) and f"var-sidecar={source['uid']}&" in json.dumps(rule)


def test_name_overrides_name_every_object_and_keep_the_selectors(helm, root):
    """`fullnameOverride` and `nameOverride` as the anchor charts take them: every object's name starts with
    the override, the pods' selector labels stay the chart's (a Deployment's selector is immutable)."""
    for sets, prefix in ((("fullnameOverride=team",), "team"), (("nameOverride=grpo-stack",), "grpo-grpo-stack"),
                         (("nameOverride=rl",), "grpo-rl")):
        docs = _template(helm, root, *sets)
        names = {d["metadata"]["name"] for d in docs} - {"otel-grpo-alerting"}
        assert names and all(n == prefix or n.startswith(prefix + "-") for n in names), (sets, names)
        for dep in _objects(docs, "Deployment").values():
            assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "otel-grpo"


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
    got = {k.removeprefix("grpo-otel-grpo-ml-"): json.loads(v) for m in boards.values() for k, v in m["data"].items()}
    assert got == dashboards(RuleSettings())


def test_two_releases_give_grafana_a_sidecar_and_dashboard_files_each(helm, root):
    """Grafana's sidecar writes every release's datasource and dashboard files into one folder by key: with one
    key for all, one team's panels read the other team's sidecar, and uninstalling either removed the other's
    dashboard. Each release's keys, datasource name and uid are its own (the dashboards pick the sidecar in their
    `sidecar` variable), the same on every render."""
    def grafana_files(release: str, namespace: str) -> tuple[set[str], tuple[str, str]]:
        argv = [helm, "template", release, str(root / CHART), "--namespace", namespace]
        docs = [d for d in yaml.safe_load_all(subprocess.run(argv, capture_output=True, text=True, check=True,
                                                             timeout=120).stdout) if d]
        keys = {k for d in docs if d["kind"] in ("Secret", "ConfigMap") and {"grafana_datasource", "grafana_dashboard"}
                & set(d["metadata"]["labels"]) for k in {**d.get("data", {}), **d.get("stringData", {})}}
        (source,) = [yaml.safe_load(v)["datasources"][0] for d in docs if d["kind"] == "Secret"
                     for k, v in d.get("stringData", {}).items() if k.endswith("-datasource.yaml")]
        assert len(source["uid"]) <= 40
        return keys, (source["name"], source["uid"])

    a, b, again = grafana_files("grpo", "team-a"), grafana_files("grpo", "team-b"), grafana_files("grpo", "team-a")
    assert len(a[0]) == len(b[0]) == 2 and not a[0] & b[0]
    assert a[1][0] != b[1][0] and a[1][1] != b[1][1]
    assert again == a


ANNOTATIONS_LIMIT = 262_144
"""The API server's cap on an object's annotations, keys and values together (apimachinery ValidateAnnotations)."""


def _annotations_after_client_side_apply(obj: dict) -> int:
    """Bytes of an object's annotations once `kubectl apply` (client-side, Argo CD's default) adds
    kubectl.kubernetes.io/last-applied-configuration: the object as kubectl encodes it (Go's
    encoding/json: sorted keys, no spaces, <>& escaped, an empty `annotations` map kept) and a newline.
    Equal, byte for byte, to what kubectl's util.CreateOrUpdateAnnotation computes for each object here."""
    key = "kubectl.kubernetes.io/last-applied-configuration"
    annotations = dict(obj["metadata"].get("annotations") or {})
    obj = {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    annotations[key] = text + "\n"
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def test_every_object_can_be_applied_client_side_with_room_to_spare(helm, root):
    """docs/operations.md's `helm template ... | kubectl apply -f -`: client-side apply copies each object
    into an annotation, and the indented grpo-overview dashboard came to 290 KB there, which the API
    server refuses. Every object stays under 85% of the limit (other tools' annotations, e.g. Argo CD's
    tracking id, share it, and the dashboards grow): a failure here means splitting a dashboard."""
    for sets in ((), (*ALL_ON, "alerting.namespace=monitoring")):
        sizes = {(d["kind"], d["metadata"]["name"]): _annotations_after_client_side_apply(d)
                 for d in _template(helm, root, *sets)}
        assert {k: n for k, n in sizes.items() if n > 0.85 * ANNOTATIONS_LIMIT} == {}
        assert max(sizes.values()) > 100_000  # the dashboard ConfigMap is among them


def test_the_infinity_datasource_reaches_the_sidecar_with_the_read_token(helm, root):
    docs = _template(helm, root)
    secrets = _objects(docs, "Secret")
    tokens = secrets["grpo-otel-grpo-tokens"]["data"]
    assert set(tokens) == {"otlp_token", "sidecar_token", "sidecar_read_token"}
    (ds,) = [s for s in secrets.values() if s["metadata"]["labels"].get("grafana_datasource") == "1"]
    (source,) = yaml.safe_load(ds["stringData"]["grpo-otel-grpo-ml-datasource.yaml"])["datasources"]
    assert source["type"] == dashboards(RuleSettings())["grpo-overview.json"]["templating"]["list"][1]["query"]
    assert source["url"] == "http://grpo-otel-grpo-sidecar.ml.svc:8000"
    assert source["secureJsonData"]["bearerToken"] == base64.b64decode(tokens["sidecar_read_token"]).decode()
    sidecar = _objects(docs, "Deployment")["grpo-otel-grpo-sidecar"]["spec"]["template"]["spec"]["containers"][0]
    allowed = json.loads(next(e["value"] for e in sidecar["env"] if e["name"] == "OTEL_GRPO_SIDECAR_ALLOWED_HOSTS"))
    assert "grpo-otel-grpo-sidecar.ml.svc" in allowed  # Grafana's dotted name passes the sidecar's Host check


def test_pods_run_as_non_root_with_tokens_from_the_secret(helm, root):
    docs = _template(helm, root, *FOLLOWER)
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


def test_trls_output_directory_may_be_the_followed_volume_itself(helm, root):
    """TRL's output directory is a directory: the logs claim itself (`/follow`) is one; the other variables
    name files in it."""
    for value in ("/follow", "/follow/", "/follow/run-1"):
        docs = _template(helm, root, *FOLLOWER[:2], f"follower.env.OTEL_GRPO_FOLLOW_TRL_OUTPUT={value}")
        (dep,) = [d for n, d in _objects(docs, "Deployment").items() if n.endswith("-follower")]
        env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["OTEL_GRPO_FOLLOW_TRL_OUTPUT"] == value
    err = _template(helm, root, *FOLLOWER[:2], "follower.env.OTEL_GRPO_FOLLOW_JSONL=/follow", ok=False)
    assert "follower.env.OTEL_GRPO_FOLLOW_JSONL=/follow: not under /follow" in err


@pytest.mark.parametrize("sets,message", [
    (("sidecar.replicas=2",), "sidecar.replicas > 1 needs sidecar.database (PostgreSQL): SQLite on a volume serves one replica"),
    (("follower.enabled=true",), "follower.enabled needs follower.logs: the volume holding the job's log files"),
    (("follower.enabled=true", "follower.logs.emptyDir.medium="),
     "follower.enabled needs one of follower.env.OTEL_GRPO_FOLLOW_VERL_METRICS, _VERL_ROLLOUTS, _TRL_OUTPUT, _JSONL"),
    ((*FOLLOWER, "follower.env.OTEL_GRPO_FOLLOW_TRL_OUTPUT=/data/out"),
     "follower.env.OTEL_GRPO_FOLLOW_TRL_OUTPUT=/data/out: not under /follow, where follower.logs is mounted"),
    (("collector.replicas=2", "collector.queue.persistence.enabled=true"),
     "collector.replicas > 1 needs collector.queue.persistence.enabled=false: the queue's volume serves one pod"),
    (("tokens.otlpToken=a",), "tokens.otlpToken, .sidecarToken and .sidecarReadToken go together"),
    (("tokens.existingSecret=mine", "tokens.otlpToken=a"), "tokens.existingSecret excludes tokens.otlpToken"),
    (("tokens.existingSecret=mine",), 'monitoring.grafanaDatasource needs the read token, and tokens.existingSecret "mine" '
                                      "cannot be read here (helm template has no cluster)"),
    (("sidecar.ingress.enabled=true",), "sidecar.ingress.enabled needs sidecar.ingress.hosts"),
    (("collector.enabled=false",), "collector.enabled=false needs collector.endpoint: the OTLP/gRPC endpoint of your collector"),
    (("collector.memoryLimitMiB=512",), "collector.memoryLimitMiB=512 is not below collector.resources.limits.memory=512Mi "
                                        "(512 MiB): memory_limiter must refuse data before the container is killed"),
    (("collector.spikeLimitMiB=400",), "collector.spikeLimitMiB=400 is not below collector.memoryLimitMiB=400 "
                                       "(the collector refuses it)"),
    (("sidecar.podDisruptionBudget.minAvailable=1",),
     "sidecar.podDisruptionBudget.minAvailable=1 with 1 replica(s) lets no pod be evicted: every node drain would wait"),
    (("collector.replicas=2", "collector.queue.persistence.enabled=false", "collector.podDisruptionBudget.minAvailable=100%"),
     "collector.podDisruptionBudget.minAvailable=100% with 2 replica(s) lets no pod be evicted"),
    (("collector.podDisruptionBudget.maxUnavailable=0",),
     "collector.podDisruptionBudget.maxUnavailable=0 with 1 replica(s) lets no pod be evicted"),
    (("monitoring.prometheusRule.grafanaUrl=grafana.example.org",), "/monitoring/prometheusRule/grafanaUrl"),
    (("fullnameOverride=Team",), "/fullnameOverride"),
    (("sidecar.ingress.enabled=true", "sidecar.ingress.hosts[0].host=ml.example.org",
      "sidecar.ingress.hosts[0].paths[0].path=/grpo", "sidecar.ingress.hosts[0].paths[0].pathType=Prefix"),
     'sidecar.ingress.hosts: path "/grpo" (Prefix) of ml.example.org: the explorer is served at its host\'s root'),
    (("sidecar.ingress.enabled=true", "sidecar.ingress.hosts[0].host=ml.example.org",
      "sidecar.ingress.hosts[0].paths[0].path=/", "sidecar.ingress.hosts[0].paths[0].pathType=Exact"),
     'path "/" (Exact) of ml.example.org: the explorer is served at its host\'s root, and below it'),
    (("sidecar.podDisruptionBudget.minAvailable=50%",),  # rounded up: the one pod stays
     "sidecar.podDisruptionBudget.minAvailable=50% with 1 replica(s) lets no pod be evicted"),
    (("sidecar.extraVolumes[0].name=data", "sidecar.extraVolumes[0].emptyDir.medium=Memory"),
     'sidecar.extraVolumes: "data" is the name of a volume of the chart\'s (tmp, data); name it otherwise'),
    (("sidecar.extraVolumeMounts[0].name=pg-ca", "sidecar.extraVolumeMounts[0].mountPath=/etc/pg-ca"),
     'sidecar.extraVolumeMounts: "pg-ca" names no volume of sidecar.extraVolumes (none)'),
    (("sidecar.extraVolumes[0].name=scratch", "sidecar.extraVolumes[0].emptyDir.medium=Memory",
      "sidecar.extraVolumeMounts[0].name=scratch", "sidecar.extraVolumeMounts[0].mountPath=/tmp/"),
     "sidecar.extraVolumeMounts: /tmp/ would cover or sit in the chart's /tmp or /data; mount it elsewhere"),
    (("sidecar.extraVolumes[0].name=scratch", "sidecar.extraVolumes[0].emptyDir.medium=Memory",
      "sidecar.extraVolumeMounts[0].name=scratch", "sidecar.extraVolumeMounts[0].mountPath=/x/../data"),
     "sidecar.extraVolumeMounts: /x/../data would cover or sit in the chart's /tmp or /data"),
    (("sidecar.podDisruptionBudget.minAvailable=null", "sidecar.podDisruptionBudget.maxUnavailable=null"),
     "sidecar.podDisruptionBudget: set minAvailable or maxUnavailable (both are null: a budget that limits nothing)"),
    (("collector.image.tag=",), "collector.image.tag (or .digest) is empty: the chart's appVersion names otel-grpo's"),
    (("networkPolicy.enabled=true", "sidecar.ingress.enabled=true", "sidecar.ingress.hosts[0].host=grpo.example.org"),
     "networkPolicy.enabled admits nobody from outside the chart to the sidecar, yet sidecar.ingress is on"),
    (("networkPolicy.enabled=true", "sidecar.service.type=LoadBalancer"),
     "networkPolicy.enabled admits nobody from outside the chart to the sidecar, yet sidecar.service.type is LoadBalancer"),
])
def test_impossible_values_fail_with_one_line(helm, root, sets, message):
    """Each refusal is one line of `helm template`'s error, whole (a collector queue claim shared by
    two pods, or a sidecar SQLite file shared by two, would corrupt or block)."""
    lines = [line for line in _template(helm, root, *sets, ok=False).splitlines() if message in line]
    assert len(lines) == 1, lines


@pytest.mark.parametrize("sets,message", [
    (("sidecar.env.OTEL_GRPO_SIDECAR_ALLOWED_HOSTS=[\"grpo.internal.example\"]",),
     "sidecar.env.OTEL_GRPO_SIDECAR_ALLOWED_HOSTS: the chart sets OTEL_GRPO_SIDECAR_ALLOWED_HOSTS itself; set sidecar.allowedHosts"),
    (("sidecar.env.OTEL_GRPO_SIDECAR_TOKEN=t",), "sidecar.env.OTEL_GRPO_SIDECAR_TOKEN: the chart sets OTEL_GRPO_SIDECAR_TOKEN itself; set tokens.sidecarToken"),
    (("sidecar.env.OTEL_GRPO_SIDECAR_READ_TOKEN=t",), "set tokens.sidecarReadToken"),
    (("sidecar.env.OTEL_GRPO_SIDECAR_DB=/x.db",), "sidecar.env.OTEL_GRPO_SIDECAR_DB: the chart sets OTEL_GRPO_SIDECAR_DB itself; set sidecar.database"),
    (("sidecar.databasePasswordSecret.name=pg", "sidecar.databasePasswordSecret.key=password", "sidecar.env.PGPASSWORD=x"),
     "sidecar.env.PGPASSWORD: the chart sets PGPASSWORD itself; set sidecar.databasePasswordSecret"),
    ((*FOLLOWER, "follower.env.OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4317"),
     "follower.env.OTEL_EXPORTER_OTLP_ENDPOINT: the chart sets OTEL_EXPORTER_OTLP_ENDPOINT itself; set collector.endpoint"),
    ((*FOLLOWER, "follower.env.OTEL_GRPO_OTLP_TOKEN=t"), "set tokens.otlpToken"),
    ((*FOLLOWER, "follower.env.OTEL_SERVICE_NAME=x"), "follower.env.OTEL_SERVICE_NAME: the chart sets OTEL_SERVICE_NAME itself"),
], ids=["allowed-hosts", "token", "read-token", "db", "pgpassword", "endpoint", "otlp-token", "service-name"])
def test_extra_env_naming_a_variable_the_chart_sets_is_refused(helm, root, sets, message):
    """sidecar.env / follower.env naming a variable the chart sets in that container gave the pod two entries
    of one name (the later one won, silently dropping the chart's, e.g. its in-cluster ALLOWED_HOSTS): refused
    in one line naming the value to set instead. PGPASSWORD is the chart's only with databasePasswordSecret."""
    lines = [line for line in _template(helm, root, *sets, ok=False).splitlines() if message in line]
    assert len(lines) == 1, lines
    docs = _template(helm, root, "sidecar.env.PGPASSWORD=x")  # no databasePasswordSecret: yours to set
    (c,) = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    names = [e["name"] for e in c["env"]]
    assert "PGPASSWORD" in names and len(names) == len(set(names))


@pytest.mark.parametrize("limit,below,at", [
    ("1Gi", 1023, 1024), ("0.5Gi", 511, 512), ("600M", 572, 573), ("536870912", 511, 512), ("2048Ki", 1, 2),
], ids=["Gi", "fraction", "decimal-M", "bytes", "Ki"])
def test_the_memory_limiter_must_stay_below_the_containers_limit(helm, root, limit, below, at):
    """memory_limiter's limit (collector.memoryLimitMiB) below the container's memory limit in each
    quantity form Kubernetes takes; none set: no bound to check."""
    sets = (f"collector.resources.limits.memory={limit}", "collector.spikeLimitMiB=0")
    (dep,) = [d for n, d in _objects(_template(helm, root, *sets, f"collector.memoryLimitMiB={below}"), "Deployment").items()
              if n.endswith("-collector")]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OTELCOL_MEMORY_LIMIT_MIB"] == str(below)
    err = _template(helm, root, *sets, f"collector.memoryLimitMiB={at}", ok=False)
    assert f"collector.memoryLimitMiB={at} is not below collector.resources.limits.memory={limit}" in err, err
    _template(helm, root, "collector.resources.limits=null", "collector.memoryLimitMiB=100000")


def test_gomemlimit_stays_below_the_containers_memory_limit(helm, root):
    """A smaller collector (limits.memory 256Mi, memoryLimitMiB 200) kept GOMEMLIMIT=400MiB, above the container's
    limit: the Go runtime would not collect before the kernel killed it. GOMEMLIMIT follows memoryLimitMiB unless
    collector.goMemLimit is given, and one given not below the limit is refused in one line."""
    def gomemlimit(*sets: str) -> str:
        (dep,) = [d for n, d in _objects(_template(helm, root, *sets), "Deployment").items() if n.endswith("-collector")]
        return {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}["GOMEMLIMIT"]
    small = ("collector.resources.limits.memory=256Mi", "collector.memoryLimitMiB=200", "collector.spikeLimitMiB=40")
    assert gomemlimit(*small) == "200MiB"
    assert gomemlimit() == "400MiB"  # the defaults: as before, below 512Mi
    assert gomemlimit(*small, "collector.goMemLimit=230MiB") == "230MiB"
    for given, limit in (("256MiB", "256Mi"), ("1GiB", "256Mi"), ("262144KiB", "256Mi")):
        err = _template(helm, root, *small, f"collector.goMemLimit={given}", ok=False)
        assert [line for line in err.splitlines()
                if f"collector.goMemLimit={given} is not below collector.resources.limits.memory={limit} (256 MiB)" in line], err
    assert gomemlimit("collector.resources.limits=null", "collector.goMemLimit=2GiB") == "2GiB"  # no limit: no bound


def test_the_spike_limit_the_chart_refuses_is_the_one_the_collector_refuses(helm, root, otelcol, tmp_path):
    """spike_limit_mib must be below limit_mib (the collector exits otherwise, in CrashLoopBackOff)."""
    config = tmp_path / "config.yaml"
    config.write_text((root / "collector/config.yaml").read_text())
    for spike, ok in ((399, True), (400, False)):
        sets = ("collector.memoryLimitMiB=400", f"collector.spikeLimitMiB={spike}")
        assert isinstance(_template(helm, root, *sets, ok=ok), list) == ok
        out = subprocess.run([otelcol, "validate", f"--config={config}"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "OTELCOL_MEMORY_LIMIT_MIB": "400", "OTELCOL_MEMORY_SPIKE_MIB": str(spike)})
        assert (out.returncode == 0) == ok, out.stderr


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
    assert s.allowed_hosts == ["grpo-otel-grpo-sidecar.ml", "grpo-otel-grpo-sidecar.ml.svc",
                               "grpo-otel-grpo-sidecar.ml.svc.cluster.local"]


def test_env_numbers_from_a_values_file_reach_the_pods_as_written(helm, root, tmp_path, monkeypatch):
    """A values file hands the templates its numbers as floats, which `quote` wrote as 1.34217728e+08 from
    1,000,000 up: the sidecar's settings (ints) refused that and the pod crash-looped. Whole numbers
    reach sidecar.env and follower.env as integers, other values as given, and the settings take them."""
    values = tmp_path / "env.yaml"
    values.write_text(
        "sidecar:\n  env:\n"
        "    OTEL_GRPO_SIDECAR_MAX_BODY_BYTES: 134217728\n"
        "    OTEL_GRPO_SIDECAR_RETENTION_MAX_STEPS: 1000000\n"
        "    OTEL_GRPO_SIDECAR_RUN_ACTIVE_S: 0.5\n"
        "    OTEL_GRPO_SIDECAR_ALLOW_UNAUTHENTICATED: true\n"
        "    OTEL_GRPO_SIDECAR_SYNCHRONOUS: FULL\n"
        "follower:\n  env:\n"
        "    OTEL_GRPO_FOLLOW_VERL_TOTAL_STEPS: 1000000\n")
    docs = _template(helm, root, *FOLLOWER, values=(values,))
    pods = _pods(docs)
    (c,) = pods["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    written = {"OTEL_GRPO_SIDECAR_MAX_BODY_BYTES": "134217728", "OTEL_GRPO_SIDECAR_RETENTION_MAX_STEPS": "1000000",
               "OTEL_GRPO_SIDECAR_RUN_ACTIVE_S": "0.5", "OTEL_GRPO_SIDECAR_ALLOW_UNAUTHENTICATED": "true",
               "OTEL_GRPO_SIDECAR_SYNCHRONOUS": "FULL"}
    assert {k: env.get(k) for k in written} == written
    tokens = {k: base64.b64decode(v).decode() for k, v in _tokens(docs).items()}
    s = _sidecar_settings(c, tokens, {}, monkeypatch)
    assert (s.max_body_bytes, s.retention_max_steps, s.run_active_s, s.allow_unauthenticated, s.synchronous) == (
        134217728, 1000000, 0.5, True, "FULL")
    (f,) = pods["grpo-otel-grpo-follower"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in f["env"]}["OTEL_GRPO_FOLLOW_VERL_TOTAL_STEPS"] == "1000000"  # an int option


@pytest.mark.parametrize("sets", [(), ("tokens.existingSecret=mine", "alerting.secret=pager-urls",
                                        "monitoring.grafanaDatasource.bearerToken=$__env{READ_TOKEN}")],
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


@pytest.mark.parametrize("sets", [(), ("tokens.existingSecret=mine", "monitoring.grafanaDatasource.bearerToken=$__env{T}")],
                         ids=["chart-tokens", "existing-secret"])
def test_alerting_namespace_puts_what_alertmanager_mounts_in_its_namespace(helm, root, sets):
    """The Prometheus Operator reads alertmanagerSpec.configSecret and .secrets only from the
    Alertmanager's namespace (kube-prometheus-stack's `monitoring`, not the release's `ml`): with
    alerting.namespace the config Secret goes there, with a copy of the sidecar token under the
    tokens Secret's name (what the config's credentials_file names); everything else stays in ml."""
    import kubernetes_validate
    docs = _template(helm, root, "alerting.namespace=monitoring", *sets)
    moved = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["metadata"]["namespace"] != "ml"}
    tokens = "mine" if sets else "ml.grpo-otel-grpo-tokens"  # named for the release's namespace there
    # existingSecret: the chart cannot read it, so no copy (the docs say to make one there)
    assert set(moved) == {("Secret", "ml.grpo-otel-grpo-alertmanager")} | (set() if sets else {("Secret", tokens)})
    assert {d["metadata"]["namespace"] for d in moved.values()} == {"monitoring"}
    config = yaml.safe_load(moved["Secret", "ml.grpo-otel-grpo-alertmanager"]["stringData"]["alertmanager.yaml"])
    assert {r["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"] for r in config["receivers"]} == {
        f"/etc/alertmanager/secrets/{tokens}/sidecar_token"}
    assert {r["webhook_configs"][0]["url"] for r in config["receivers"]} == {
        "http://grpo-otel-grpo-sidecar.ml.svc:8000/api/alerts"}  # the sidecar stays in ml
    if not sets:
        (own,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "grpo-otel-grpo-tokens"
                  and d["metadata"]["namespace"] == "ml"]
        assert moved["Secret", tokens]["data"] == {"sidecar_token": own["data"]["sidecar_token"]}  # that token only
    for d in moved.values():
        kubernetes_validate.validate(d, "1.37.0", strict=True)
    for same in ((), ("alerting.namespace=ml",)):  # the release's namespace: one tokens Secret, all in ml
        docs = _template(helm, root, *same)
        assert {d["metadata"]["namespace"] for d in docs} == {"ml"}
        assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"].count("grpo-otel-grpo-tokens") == 1


def test_one_release_name_in_two_namespaces_shares_no_object_in_alertmanagers(helm, root):
    """Release `grpo` in team-a and in team-b, both with alerting.namespace=monitoring: each renders its config
    and token copy into monitoring, so those names hold the release's namespace (the second install collided
    with the first's Secrets, and would have replaced the first's token); a release in monitoring itself keeps
    its plain names. Every (kind, namespace, name) of the three renders is distinct."""
    seen: dict[tuple, str] = {}
    for namespace in ("team-a", "team-b", "monitoring"):
        out = subprocess.run([helm, "template", "grpo", str(root / CHART), "--namespace", namespace,
                              "--set", "alerting.namespace=monitoring"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        docs = [d for d in yaml.safe_load_all(out.stdout) if d]
        for d in docs:
            key = (d["kind"], d["metadata"]["namespace"], d["metadata"]["name"])
            assert key not in seen, (key, seen.get(key), namespace)
            seen[key] = namespace
        there = {d["metadata"]["name"]: d for d in docs if d["metadata"]["namespace"] == "monitoring"}
        prefix = "" if namespace == "monitoring" else f"{namespace}."
        assert set(there) >= {f"{prefix}grpo-otel-grpo-alertmanager", f"{prefix}grpo-otel-grpo-tokens"}, set(there)
        config = yaml.safe_load(there[f"{prefix}grpo-otel-grpo-alertmanager"]["stringData"]["alertmanager.yaml"])
        assert {r["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"] for r in config["receivers"]} \
            == {f"/etc/alertmanager/secrets/{prefix}grpo-otel-grpo-tokens/sidecar_token"}


# --- tokens and checksums -------------------------------------------------------------------------

GITOPS = "otel-grpo values for GitOps"
EVERYTHING = ("follower.enabled=true", "follower.env.OTEL_GRPO_FOLLOW_JSONL=/follow/job.jsonl",
              "follower.logs.persistentVolumeClaim.claimName=verl-logs",
              "sidecar.databasePasswordSecret.name=pg", "sidecar.databasePasswordSecret.key=password")


def _pods(docs: list[dict]) -> dict[str, dict]:
    """Every pod template (Deployments) and bare pod (the `helm test` pod) by name: {metadata, spec}."""
    pods = {n: d["spec"]["template"] for n, d in _objects(docs, "Deployment").items()}
    pods.update({n: {"metadata": d["metadata"], "spec": d["spec"]} for n, d in _objects(docs, "Pod").items()})
    return pods


def _tokens(docs: list[dict]) -> dict[str, str]:
    return _objects(docs, "Secret")["grpo-otel-grpo-tokens"]["data"]


def test_gitops_values_render_identically_twice(helm, root, tmp_path):
    """Argo CD and Flux run `helm template` on every sync, with no cluster for `lookup`: with the
    documented values two renders are the same, Secrets and pod checksums included, so a sync
    rotates no token and restarts no pod."""
    values = tmp_path / "gitops.yaml"
    values.write_text(doc_block(root, GITOPS))
    first, second = (_template(helm, root, *EVERYTHING, values=(values,)) for _ in range(2))
    assert first == second
    secrets = _objects(first, "Secret")
    assert "grpo-otel-grpo-tokens" not in secrets  # the Secret is the user's
    (source,) = yaml.safe_load(secrets["grpo-otel-grpo-datasource"]["stringData"]["grpo-otel-grpo-ml-datasource.yaml"])["datasources"]
    assert source["secureJsonData"]["bearerToken"] == "$__env{OTEL_GRPO_SIDECAR_READ_TOKEN}"  # not empty: Grafana's env
    for name, pod in _pods(first).items():
        refs = {e["valueFrom"]["secretKeyRef"]["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {}) and e["name"] != "PGPASSWORD"}
        refs |= {v["secret"]["secretName"] for v in pod["spec"].get("volumes", []) if "secret" in v}
        assert refs <= {yaml.safe_load(values.read_text())["tokens"]["existingSecret"]}, name


def test_without_fixed_tokens_every_render_differs(helm, root):
    """Why GitOps needs them: random tokens (kept on a real upgrade through `lookup`) differ on each
    cluster-less render, and the pods' checksums follow them."""
    a, b = _template(helm, root), _template(helm, root)
    assert _tokens(a) != _tokens(b)
    sums = [{n: p["metadata"]["annotations"]["checksum/tokens"] for n, p in _pods(d).items()
             if n.endswith(("-collector", "-sidecar"))} for d in (a, b)]
    assert all(sums[0][n] != sums[1][n] for n in sums[0])


def test_explicit_tokens_are_the_secret_and_the_datasource_token(helm, root):
    sets = ("tokens.otlpToken=o-1", "tokens.sidecarToken=s-1", "tokens.sidecarReadToken=r-1")
    docs = _template(helm, root, *sets)
    assert {k: base64.b64decode(v).decode() for k, v in _tokens(docs).items()} == {
        "otlp_token": "o-1", "sidecar_token": "s-1", "sidecar_read_token": "r-1"}
    assert _template(helm, root, *sets) == docs
    ds = _objects(docs, "Secret")["grpo-otel-grpo-datasource"]
    assert yaml.safe_load(ds["stringData"]["grpo-otel-grpo-ml-datasource.yaml"])["datasources"][0]["secureJsonData"] == {
        "bearerToken": "r-1"}


def test_every_pod_reading_a_secret_or_config_restarts_when_it_changes(helm, root, tmp_path):
    """checksum/tokens on every pod holding a token (env or volume), checksum/config on the
    collector's, checksum/database-password on the sidecar's with a password Secret: each changes
    with what it covers and only then."""
    tokens = ("tokens.otlpToken=o", "tokens.sidecarToken=s", "tokens.sidecarReadToken=r")
    base = _pods(_template(helm, root, *EVERYTHING, *tokens))
    readers = {n for n, p in base.items()
               if any("secretKeyRef" in e.get("valueFrom", {}) for c in p["spec"]["containers"] for e in c.get("env", []))
               or any("secret" in v for v in p["spec"].get("volumes", []))}
    deployments = {n for n in readers if not n.endswith("-test")}  # the test pod is made anew each `helm test`
    assert deployments == {"grpo-otel-grpo-collector", "grpo-otel-grpo-sidecar", "grpo-otel-grpo-follower"}
    for n in deployments:
        assert "checksum/tokens" in base[n]["metadata"]["annotations"], n
    assert "checksum/database-password" in base["grpo-otel-grpo-sidecar"]["metadata"]["annotations"]
    rotated = _pods(_template(helm, root, *EVERYTHING, "tokens.otlpToken=o2", *tokens[1:]))
    for n in deployments:
        assert rotated[n]["metadata"]["annotations"]["checksum/tokens"] != base[n]["metadata"]["annotations"]["checksum/tokens"]
        assert rotated[n]["spec"] == base[n]["spec"]
    # the collector's config: a changed file (a copy of the chart) changes its checksum, and nothing else's
    chart = tmp_path / "chart"
    shutil.copytree(root / CHART, chart)
    (chart / "files/collector.yaml").write_text((chart / "files/collector.yaml").read_text() + "# changed\n")
    changed = _pods(_template(helm, root, *EVERYTHING, *tokens, chart=chart))
    key = "checksum/config"
    assert changed["grpo-otel-grpo-collector"]["metadata"]["annotations"][key] != \
        base["grpo-otel-grpo-collector"]["metadata"]["annotations"][key]
    assert {n: p["metadata"] for n, p in changed.items() if n != "grpo-otel-grpo-collector"} == \
        {n: p["metadata"] for n, p in base.items() if n != "grpo-otel-grpo-collector"}
    (cm,) = [m for n, m in _objects(_template(helm, root), "ConfigMap").items() if n.endswith("-collector")]
    assert base["grpo-otel-grpo-collector"]["metadata"]["annotations"][key] == \
        hashlib.sha256(cm["data"]["config.yaml"].encode()).hexdigest()


# --- values schema and images ---------------------------------------------------------------------

@pytest.mark.parametrize("args,where", [
    (("--set-string", "collector.replicas=two"), "collector/replicas"),
    (("--set", "colector.replicas=1"), "colector"),
    (("--set", "sidecar.image.pullPolicy=Sometimes"), "sidecar/image/pullPolicy"),
    (("--set", "sidecar.image.digest=latest"), "sidecar/image/digest"),
    (("--set", "sidecar.service.type=Public"), "sidecar/service/type"),
    (("--set", "collector.queue.persistence.accessModes={ReadWriteSometimes}"), "collector/queue/persistence/accessModes"),
    (("--set", "tokens.existingSecret=true"), "tokens/existingSecret"),
    (("--set", "alerting.namespace=Monitoring"), "alerting/namespace"),
    # a count as a string: Kubernetes reads the unquoted "3" the chart writes as 3 pods, past the drain check
    (("--set", "sidecar.replicas=3", "--set", "sidecar.database=postgresql://pg/grpo",
      "--set-string", "sidecar.podDisruptionBudget.minAvailable=3"), "sidecar/podDisruptionBudget/minAvailable"),
    (("--set", "commonLabels.team=rl team"), "commonLabels/team"),
    (("--set", "sidecar.nodeSelector.pool=" + "x" * 64), "sidecar/nodeSelector/pool"),
    (("--set", "monitoring.serviceMonitors.interval=1s1m"), "monitoring/serviceMonitors/interval"),
], ids=["replicas-string", "misspelt-key", "pull-policy", "digest", "service-type", "access-mode", "secret-bool",
        "alerting-namespace", "pdb-count-string", "label-value", "label-value-length", "monitor-interval"])
def test_the_values_schema_rejects_wrong_types_and_unknown_keys(helm, root, args, where):
    err = _template(helm, root, args=args, ok=False)
    assert "values don't meet the specifications of the schema" in err and where in err, err


def test_a_label_key_kubernetes_refuses_is_refused_by_the_schema(helm, root, tmp_path):
    (tmp_path / "v.yaml").write_text('commonLabels:\n  "bad key": x\npodAnnotations:\n  "example.com/ok": "any text"\n')
    err = _template(helm, root, args=("-f", str(tmp_path / "v.yaml")), ok=False)
    assert "at '/commonLabels': additional properties 'bad key' not allowed" in err, err


def test_names_yaml_would_read_as_numbers_or_booleans_stay_strings(helm, root):
    """A secret named 0123 (octal 83 to YAML), a key "on" (true), "-" for no storage class: written as the strings
    given, as Kubernetes' schema wants them."""
    strings = ("tokens.existingSecret=0123", "sidecar.databasePasswordSecret.name=0777",
               "sidecar.databasePasswordSecret.key=on", "collector.priorityClassName=0x10")
    docs = _template(helm, root, "monitoring.grafanaDatasource.bearerToken=x", "sidecar.persistence.storageClass=-",
                     args=tuple(a for given in strings for a in ("--set-string", given)))
    (c,) = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    assert refs["OTEL_GRPO_SIDECAR_TOKEN"]["name"] == "0123" and refs["PGPASSWORD"] == {"name": "0777", "key": "on"}
    (claim,) = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["storageClassName"] == ""
    assert _pods(docs)["grpo-otel-grpo-collector"]["spec"]["priorityClassName"] == "0x10"


def test_a_dollar_in_the_database_url_reaches_the_sidecar_as_written(helm, root):
    """The kubelet expands $(VAR) and turns $$ into $ in env values: a password with a $ would not log in."""
    docs = _template(helm, root, args=("--set-string", "sidecar.database=postgresql://grpo:pa$$w$(X)@pg:5432/grpo"))
    (c,) = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    (db,) = [e["value"] for e in c["env"] if e["name"] == "OTEL_GRPO_SIDECAR_DB"]
    assert db == "postgresql://grpo:pa$$$$w$$(X)@pg:5432/grpo"  # what the kubelet makes pa$$w$(X) of


@pytest.mark.parametrize("args,where", [
    (("--set", "securityContext.readOnlyRootFileSystem=false"), "additional properties 'readOnlyRootFileSystem'"),
    (("--set", "podSecurityContext.runAsuser=20001"), "additional properties 'runAsuser'"),
    (("--set", "sidecar.tolerations[0].key=gpu", "--set", "sidecar.tolerations[0].efect=NoSchedule"),
     "additional properties 'efect'"),
    (("--set", "collector.tolerations[0].tolerationSeconds=soon"), "collector/tolerations/0/tolerationSeconds"),
    (("--set", "sidecar.affinity.nodeAfinity.x=y"), "additional properties 'nodeAfinity'"),
    (("--set", "follower.affinity.podAntiAffinity.preferredDuringScheduling[0].weight=1"),
     "additional properties 'preferredDuringScheduling'"),
    (("--set", "collector.resources.limits.memory=512 MiB"), "collector/resources/limits/memory"),
    (("--set", "sidecar.resources.requests.cpu=half"), "sidecar/resources/requests/cpu"),
    (("--set-string", "follower.resources.limits.memory=1K"), "follower/resources/limits/memory"),  # kilo is k
    (("--set-string", "collector.resources.requests.memory=1Gi5"), "collector/resources/requests/memory"),
], ids=["container", "pod", "toleration", "toleration-type", "affinity", "affinity-term", "quantity-space",
        "quantity-word", "quantity-kilo", "quantity-tail"])
def test_security_contexts_tolerations_affinity_and_resources_refuse_a_misspelt_field(helm, root, args, where):
    """securityContext, podSecurityContext, tolerations, affinity and resources were free-form objects: a
    misspelt field (readOnlyRootFileSystem, nodeAfinity) passed `helm lint --strict` and the pod ran without the
    setting meant (the API server drops fields it does not know), and a quantity Kubernetes cannot read failed
    only at install, object by object. The schema holds Kubernetes' own fields for each (the test below keeps
    them in step) and its quantity syntax, and refuses others."""
    err = _template(helm, root, args=args, ok=False)
    assert "values don't meet the specifications of the schema" in err and where in err, err


def test_the_schemas_kubernetes_objects_have_kubernetes_fields(root):
    """The field names the values schema allows in securityContext, podSecurityContext, a toleration, affinity
    (and its three kinds) and resources are Kubernetes 1.37's (kubernetes-validate's copy of its OpenAPI schema),
    neither fewer nor more."""
    import kubernetes_validate
    k8s = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema/v1.37.0-local-strict"
    schema = json.loads((root / CHART / "values.schema.json").read_text())["definitions"]
    affinity = schema["affinity"]
    for ours, theirs in ((schema["securityContext"], "securitycontext-v1.json"),
                         (schema["podSecurityContext"], "podsecuritycontext-v1.json"),
                         (schema["tolerations"]["items"], "toleration-v1.json"),
                         (affinity, "affinity-v1.json"),
                         *((affinity["properties"][kind], f"{kind.lower()}-v1.json")
                           for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity")),
                         (schema["resources"], "resourcerequirements-v1.json")):
        assert ours["additionalProperties"] is False
        assert set(ours["properties"]) == set(json.loads((k8s / theirs).read_text())["properties"]), theirs


def test_images_name_registry_repository_tag_or_digest(helm, root):
    """No otel-grpo image is published: the defaults name a registry-less image tagged with the chart's
    appVersion (the Dockerfile targets built and pushed by the user); registry, tag and digest are
    the anchors' values; the collector's tag is the version the tests build (backends.yml)."""
    app = yaml.safe_load((root / CHART / "Chart.yaml").read_text())["appVersion"]
    # the package the Dockerfile installs, and the tags the docs build and push
    assert app == re.search(r'^version = "(.+)"', (root / "pyproject.toml").read_text(), re.M).group(1)
    docs = (root / "docs/operations.md").read_text()
    assert f"-t $REGISTRY/otel-grpo-sidecar:{app} ." in docs and f"-t $REGISTRY/otel-grpo-follow:{app}  ." in docs
    sets = FOLLOWER

    def images(*more):
        return {n: (c["image"], c["imagePullPolicy"]) for n, p in _pods(_template(helm, root, *sets, *more)).items()
                for c in p["spec"]["containers"]}

    assert images() == {
        "grpo-otel-grpo-collector": (f"docker.io/otel/opentelemetry-collector-contrib:{backend_versions()['otelcol']}",
                                     "IfNotPresent"),
        "grpo-otel-grpo-sidecar": (f"otel-grpo-sidecar:{app}", "IfNotPresent"),
        "grpo-otel-grpo-follower": (f"otel-grpo-follow:{app}", "IfNotPresent"),
        "grpo-otel-grpo-test": (f"otel-grpo-sidecar:{app}", "IfNotPresent")}
    digest = "sha256:" + "ab" * 32
    got = images("global.imageRegistry=registry.example", "sidecar.image.digest=" + digest,
                 "follower.image.tag=v2", "follower.image.pullPolicy=Always")
    assert got["grpo-otel-grpo-sidecar"] == (f"registry.example/otel-grpo-sidecar@{digest}", "IfNotPresent")
    assert got["grpo-otel-grpo-follower"] == ("registry.example/otel-grpo-follow:v2", "Always")
    assert got["grpo-otel-grpo-collector"][0].startswith("registry.example/otel/opentelemetry-collector-contrib:")
    got = images("sidecar.image.registry=ghcr.io/me")
    assert got["grpo-otel-grpo-sidecar"][0] == f"ghcr.io/me/otel-grpo-sidecar:{app}"
    assert got["grpo-otel-grpo-follower"][0] == f"otel-grpo-follow:{app}"


# --- pods, service account, service links ---------------------------------------------------------

def _service_links(services: dict[str, dict]) -> dict[str, str]:
    """The docker-links variables the kubelet puts in a pod for each Service of its namespace when
    enableServiceLinks is on (pkg/kubelet/envvars): <NAME>_SERVICE_HOST, <NAME>_PORT=tcp://ip:port, ..."""
    env = {}
    for i, (name, svc) in enumerate(services.items()):
        prefix, ip = name.upper().replace("-", "_"), f"10.96.0.{i + 10}"
        first = svc["spec"]["ports"][0]["port"]
        env.update({f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(first), f"{prefix}_PORT": f"tcp://{ip}:{first}"})
        for p in svc["spec"]["ports"]:
            env[f"{prefix}_PORT_{p['port']}_TCP"] = f"tcp://{ip}:{p['port']}"
    return env


def _sidecar_settings(container: dict, tokens: dict[str, str], extra_env: dict[str, str], monkeypatch,
                      flags: bool = True) -> SidecarSettings:
    for name in [k for k in os.environ if k.startswith("OTEL_GRPO_")]:
        monkeypatch.delenv(name)
    for k, v in extra_env.items():
        monkeypatch.setenv(k, v)
    for e in container["env"]:
        monkeypatch.setenv(e["name"], e["value"] if "value" in e else tokens[e["valueFrom"]["secretKeyRef"]["key"]])
    args = dict(zip(container["args"][1::2], container["args"][2::2]))
    if not flags:  # the environment alone, as with the image's default command (`sidecar --host 0.0.0.0`)
        return SidecarSettings(host=args["--host"])
    return SidecarSettings(host=args["--host"], port=int(args["--port"]))


def test_a_release_named_otel_grpo_gets_no_service_links_that_would_crash_the_sidecar(helm, root, monkeypatch):
    """Release `otel-grpo` names the sidecar's Service `otel-grpo-sidecar`; with service links the
    kubelet would set OTEL_GRPO_SIDECAR_PORT=tcp://..., which the sidecar's settings read as its
    port: without a --port flag (the image's default command, or a pod that drops it) it refuses to
    start. Every pod turns the links off, and mounts no API token."""
    docs = _template(helm, root, *FOLLOWER, release="otel-grpo")
    services = _objects(docs, "Service")
    assert "otel-grpo-sidecar" in services
    (sa,) = _objects(docs, "ServiceAccount").values()
    assert sa["automountServiceAccountToken"] is False
    pods = _pods(docs)
    assert len(pods) == 4
    for name, pod in pods.items():
        spec = pod["spec"]
        assert spec["enableServiceLinks"] is False and spec["automountServiceAccountToken"] is False, name
        assert spec["serviceAccountName"] == sa["metadata"]["name"], name
    tokens = {k: base64.b64decode(v).decode() for k, v in _objects(docs, "Secret")["otel-grpo-tokens"]["data"].items()}
    (c,) = pods["otel-grpo-sidecar"]["spec"]["containers"]
    links = _service_links(services)
    assert links["OTEL_GRPO_SIDECAR_PORT"].startswith("tcp://")
    with pytest.raises(ValueError, match="OTEL_GRPO_SIDECAR_PORT=tcp://"):  # what the links would do
        _sidecar_settings(c, tokens, links, monkeypatch, flags=False)
    assert _sidecar_settings(c, tokens, {}, monkeypatch, flags=False).port == 8000
    assert _sidecar_settings(c, tokens, {}, monkeypatch).port == 8000


# Every optional piece of the chart on: every kind of object it can make.
ALL_ON = (*EVERYTHING, "networkPolicy.enabled=true", "networkPolicy.otlpFrom[0].namespaceSelector.matchLabels.team=rl",
          "networkPolicy.sidecarFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=ingress-nginx",
          "collector.podDisruptionBudget.enabled=true",
          "sidecar.podDisruptionBudget.enabled=true",
          "sidecar.ingress.enabled=true", "sidecar.ingress.hosts[0].host=grpo.example.org",
          "sidecar.ingress.tls[0].secretName=grpo-tls", "sidecar.ingress.tls[0].hosts[0]=grpo.example.org",
          "sidecar.service.type=LoadBalancer", "collector.queue.persistence.enabled=true",
          "collector.priorityClassName=high", "sidecar.nodeSelector.pool=cpu",
          "sidecar.tolerations[0].key=gpu", "sidecar.tolerations[0].operator=Exists",
          "commonLabels.team=rl", "podAnnotations.a=b", "collector.podAnnotations.c=d")


def test_every_core_object_matches_the_kubernetes_schema_strictly(helm, root):
    """Each object against Kubernetes' own OpenAPI schema (kubernetes-validate's strict copies: no
    unknown field), oldest and newest version kube-prometheus-stack runs on here, with every optional
    piece on; the operator's objects against its CRDs (above)."""
    import kubernetes_validate
    docs = _template(helm, root, *ALL_ON)
    kinds = {d["kind"] for d in docs}
    assert {"ServiceAccount", "NetworkPolicy", "PodDisruptionBudget", "Ingress", "Pod", "PersistentVolumeClaim",
            "Deployment", "Service", "Secret", "ConfigMap"} <= kinds
    for version in ("1.25.0", "1.37.0"):
        for d in docs:
            if d["apiVersion"].startswith("monitoring.coreos.com/"):
                continue
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{version} {d['kind']} {d['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}")
    for d in docs:
        assert d["metadata"]["labels"]["team"] == "rl", (d["kind"], d["metadata"]["name"])


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Kinds whose names are DNS subdomains (253 characters) and where the chart appends to a name
# (<fullname>-tokens, -datasource, -dashboard-<board>, <component>-data, -queue): renaming the tokens
# Secret or a claim on upgrade would rotate the tokens or leave the data behind, so they may pass 63.
SUBDOMAIN_KINDS = {"Secret", "ConfigMap", "PersistentVolumeClaim"}


@pytest.mark.parametrize("release", ["r", "r" * 40, "r" * 52, "r" * 53, "otel-grpo-" + "x" * 43],
                         ids=["1", "40", "52", "53", "53-with-chart-name"])
def test_every_name_is_distinct_and_a_dns_label_whatever_the_release_name(helm, root, release):
    """Helm allows release names of 53 characters: every object's (kind, name) stays unique, every
    component's name ends with its component and is a DNS label of at most 63 characters (the base is
    cut, not the component), and a name that fits is the whole <release>-otel-grpo-<component>."""
    docs = _template(helm, root, *ALL_ON, release=release)
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    base = release if "otel-grpo" in release else f"{release}-otel-grpo"
    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind in SUBDOMAIN_KINDS:
            assert len(name) <= 253 and all(DNS_LABEL.fullmatch(p) for p in name.split(".")), (kind, name)
        else:
            assert len(name) <= 63 and DNS_LABEL.fullmatch(name), (kind, name)
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        if kind in {"Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget", "ServiceMonitor", "Pod", "Ingress"}:
            assert name.endswith(f"-{component}") and len(name) <= 63, (kind, name)
            whole = f"{base}-{component}"
            if len(whole) <= 63:
                assert name == whole, (kind, name)
            else:  # <base cut>-<6 hex of the base's sha256>-<component>
                cut, digest = name[:-len(component) - 1].rsplit("-", 1)
                assert whole.startswith(cut) and digest == hashlib.sha256(base.encode()).hexdigest()[:6], (kind, name)


@pytest.mark.parametrize("tail", [("run01", "run02"), ("a", "b")], ids=["51", "46"])
def test_release_names_differing_only_where_the_name_is_cut_keep_names_of_their_own(helm, root, tail):
    """Two release names that differ only in their last characters: cutting the fullname to fit a component gave
    both one name (the Alertmanager Secret of two 51-character releases); each release's names are its own, for
    every object (and a name short enough is the whole one, for which the test above holds)."""
    renders = []
    for end in tail:
        release = "grpo-qwen2-7b-math-gsm8k-lr1e-6-kl0-001-sweep-" + end
        renders.append({(d["kind"], d["metadata"]["name"]) for d in _template(helm, root, *ALL_ON, release=release)})
    assert renders[0] & renders[1] == set(), sorted(renders[0] & renders[1])


@pytest.mark.parametrize("release", ["1grpo", "grpo.a"])
def test_a_release_name_no_service_may_carry_is_refused_in_one_line(helm, root, release):
    """Helm takes release names Kubernetes refuses as a Service's name (a DNS-1035 label: a letter first, no dot):
    `helm template 1grpo` rendered Services named 1grpo-otel-grpo-... that `kubectl apply` refused. Refused in one
    line naming the release; fullnameOverride (which must start with a letter) is the way out."""
    err = _template(helm, root, release=release, ok=False)
    assert len([line for line in err.splitlines() if f'release name "{release}": the objects would be named' in line
                and "install under a name starting with a letter, or set fullnameOverride" in line]) == 1, err
    docs = _template(helm, root, "fullnameOverride=grpo", release=release)
    assert all(DNS_1035.fullmatch(n) for n in _objects(docs, "Service")), list(_objects(docs, "Service"))
    assert "/fullnameOverride" in _template(helm, root, "fullnameOverride=1grpo", ok=False)


DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def test_every_object_names_the_release_namespace(helm, root):
    """`helm template -n ml | kubectl apply -f -` puts every object in ml (where the chart's URLs say
    `.ml.svc`), not in kubectl's current namespace: the chart makes namespaced objects only."""
    docs = _template(helm, root, *ALL_ON)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs if d["metadata"].get("namespace") != "ml"] == []


def test_the_strict_kubernetes_check_catches_a_misspelt_field():
    import kubernetes_validate
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
           "spec": {"enableServiceLink": False, "containers": [{"name": "c", "image": "i"}]}}
    with pytest.raises(kubernetes_validate.ValidationError, match="enableServiceLink"):
        kubernetes_validate.validate(bad, "1.37.0", strict=True)


def test_affinity_and_extended_resources_as_kubernetes_takes_them_reach_the_pods(helm, root, tmp_path):
    """What the schema holds to is still everything Kubernetes takes: a node affinity, a preferred pod
    anti-affinity, an extended resource and quantities as numbers reach the pod unchanged."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "otel-grpo"}}}}]}}
    resources = {"requests": {"cpu": 0.5, "memory": "1Gi", "example.com/dongle": 1}, "limits": {"memory": "2500M"}}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"sidecar": {"affinity": affinity, "resources": resources}}))
    pod = _pods(_template(helm, root, values=(values,)))["grpo-otel-grpo-sidecar"]
    assert pod["spec"]["affinity"] == affinity
    given = pod["spec"]["containers"][0]["resources"]  # over the chart's defaults
    for section, quantities in resources.items():
        assert quantities.items() <= given[section].items(), section


def test_a_postgresql_ca_mounted_from_a_secret_reaches_the_sidecar(helm, root, tmp_path):
    """sslmode=verify-full needs the server's CA in the sidecar's container: a Secret of the team's, mounted by
    sidecar.extraVolumes and extraVolumeMounts beside the chart's own volumes, and the pod still valid."""
    import kubernetes_validate

    url = "postgresql://grpo@pg:5432/grpo?sslmode=verify-full&sslrootcert=/etc/pg-ca/ca.crt"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"sidecar": {
        "database": url, "extraVolumes": [{"name": "pg-ca", "secret": {"secretName": "pg-ca"}}],
        "extraVolumeMounts": [{"name": "pg-ca", "mountPath": "/etc/pg-ca", "readOnly": True}]}}))
    docs = _template(helm, root, values=(values,))
    spec = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]
    container = spec["containers"][0]
    assert {"name": "pg-ca", "secret": {"secretName": "pg-ca"}} in spec["volumes"]
    assert [v["name"] for v in spec["volumes"]] == ["tmp", "pg-ca"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"},
                                         {"name": "pg-ca", "mountPath": "/etc/pg-ca", "readOnly": True}]
    assert {"name": "OTEL_GRPO_SIDECAR_DB", "value": url} in container["env"]
    deployment = _objects(docs, "Deployment")["grpo-otel-grpo-sidecar"]
    kubernetes_validate.validate(deployment, "1.37.0", strict=True)


def test_helm_lint_passes_with_every_optional_piece(helm, root):
    out = subprocess.run([helm, "lint", "--strict", str(root / CHART), "--namespace", "ml",
                          *[a for s in (*EVERYTHING, "networkPolicy.enabled=true", "sidecar.ingress.enabled=true",
                                        "sidecar.ingress.hosts[0].host=grpo.example.org",
                                        "collector.podDisruptionBudget.enabled=true") for a in ("--set", s)]],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def admits(policy: dict, pod_labels: dict, port: str) -> bool:
    """Whether the NetworkPolicy lets a pod of its own namespace with these labels in on this port."""
    return any(port in [p["port"] for p in rule.get("ports", [])] and (
        "from" not in rule or any("podSelector" in peer and "namespaceSelector" not in peer
                                  and peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
                                  for peer in rule["from"])) for rule in policy["spec"]["ingress"])


def test_the_network_policy_lets_the_collector_and_the_test_pod_reach_the_sidecar(helm, root):
    docs = _template(helm, root, "networkPolicy.enabled=true", *FOLLOWER)
    policies = _objects(docs, "NetworkPolicy")
    pods = _pods(docs)

    sidecar = policies["grpo-otel-grpo-sidecar"]
    assert sidecar["spec"]["podSelector"]["matchLabels"].items() <= pods["grpo-otel-grpo-sidecar"]["metadata"]["labels"].items()
    for client in ("grpo-otel-grpo-collector", "grpo-otel-grpo-test"):
        assert admits(sidecar, pods[client]["metadata"]["labels"], "http"), client
    assert not admits(sidecar, pods["grpo-otel-grpo-follower"]["metadata"]["labels"], "http")
    collector = policies["grpo-otel-grpo-collector"]
    assert admits(collector, {"any": "pod"}, "otlp-grpc") and not admits(collector, {"any": "pod"}, "exporter")
    assert policies["grpo-otel-grpo-follower"]["spec"].get("ingress") is None  # takes no connections
    # OTLP limited to the trainers' namespace: the test pod still gets through, other pods do not
    docs = _template(helm, root, "networkPolicy.enabled=true",
                     "networkPolicy.otlpFrom[0].namespaceSelector.matchLabels.team=rl")
    collector = _objects(docs, "NetworkPolicy")["grpo-otel-grpo-collector"]
    assert admits(collector, _pods(docs)["grpo-otel-grpo-test"]["metadata"]["labels"], "otlp-http")
    assert not admits(collector, {"any": "pod"}, "otlp-grpc")


@pytest.mark.parametrize("sets", [(), ("networkPolicy.otlpFrom[0].namespaceSelector.matchLabels.team=rl",),
                                  ("networkPolicy.otlpFrom[0].podSelector.matchLabels.app=trainer", "tests.enabled=false")],
                         ids=["anyone", "otlp-from", "otlp-from-no-test-pod"])
def test_every_pod_of_the_chart_that_sends_otlp_gets_through_the_collectors_policy(helm, root, sets):
    """The chart's own OTLP senders (found in the rendered pods: an env value naming the collector's
    Service) are let in on both OTLP ports whatever networkPolicy.otlpFrom adds; a pod the chart does
    not make is not, once otlpFrom is set."""
    docs = _template(helm, root, "networkPolicy.enabled=true", *FOLLOWER, *sets)
    (service,) = [n for n, s in _objects(docs, "Service").items()
                  if s["metadata"]["labels"]["app.kubernetes.io/component"] == "collector"]
    senders = {n: p["metadata"]["labels"] for n, p in _pods(docs).items()
               if any(re.search(f"//{service}[:.]", e.get("value", "")) for c in p["spec"]["containers"] for e in c.get("env", []))}
    assert set(senders) == {"grpo-otel-grpo-follower"} | ({"grpo-otel-grpo-test"} if "tests.enabled=false" not in sets else set())
    collector = _objects(docs, "NetworkPolicy")["grpo-otel-grpo-collector"]
    for name, labels in senders.items():
        for port in ("otlp-grpc", "otlp-http"):
            assert admits(collector, labels, port), (name, port)
    assert admits(collector, {"any": "pod"}, "otlp-grpc") == (not sets)


@pytest.mark.parametrize("given", [[], [{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]], ids=["empty", "one"])
def test_monitoring_from_empty_admits_no_one_to_the_metrics_or_the_sidecar(helm, root, tmp_path, given):
    """networkPolicy.monitoringFrom: [] (from a values file) means nobody for the collector's metrics
    ports as for the sidecar: the rule is left out, where `from: []` would let every source in."""
    values = tmp_path / "np.yaml"
    values.write_text(yaml.safe_dump({"networkPolicy": {"enabled": True, "monitoringFrom": given}}))
    policies = _objects(_template(helm, root, values=(values,)), "NetworkPolicy")
    for name, policy in policies.items():
        assert all(rule.get("from", True) for rule in policy["spec"].get("ingress", [])), name  # no `from: []`
    metrics = [r for r in policies["grpo-otel-grpo-collector"]["spec"]["ingress"]
               if {"exporter", "self"} & {p["port"] for p in r["ports"]}]
    (sidecar,) = policies["grpo-otel-grpo-sidecar"]["spec"]["ingress"]
    if given:
        assert [r["from"] for r in metrics] == [given] and given[0] in sidecar["from"]
    else:
        assert metrics == [] and not [peer for peer in sidecar["from"] if "namespaceSelector" in peer]


def test_a_trainer_keeps_to_one_collector_replica(helm, root):
    """The collector's Service sends each client's connections to one pod (while it is ready), so a trainer's
    reconnects do not spread its exports over several replicas (docs/operations.md, "Several collector
    replicas")."""
    (service,) = [s for s in _objects(_template(helm, root, "collector.replicas=3"), "Service").values()
                  if s["metadata"]["labels"]["app.kubernetes.io/component"] == "collector"]
    assert service["spec"]["sessionAffinity"] == "ClientIP"


YOURS = ("collector.enabled=false", "collector.endpoint=http://otel-collector.observability:4317")


def test_with_a_collector_of_yours_the_chart_makes_none_and_points_at_yours(helm, root, tmp_path, free_port_factory):
    """collector.enabled=false: no object of the collector (Deployment, Service, config, monitor, policy, budget);
    the follower sends to collector.endpoint, the sidecar admits what networkPolicy.sidecarFrom names (your
    collector) and not a collector pod of ours, and the `helm test` pod's command checks the sidecar alone
    (run against a real one)."""
    yours = {"podSelector": {"matchLabels": {"app": "my-collector"}}}
    docs = _template(helm, root, *YOURS, *FOLLOWER, "networkPolicy.enabled=true", "collector.podDisruptionBudget.enabled=true",
                     "networkPolicy.sidecarFrom[0].podSelector.matchLabels.app=my-collector")
    assert [(d["kind"], d["metadata"]["name"]) for d in docs
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "collector"] == []
    follower = _pods(docs)["grpo-otel-grpo-follower"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in follower["env"]}["OTEL_EXPORTER_OTLP_ENDPOINT"] == \
        "http://otel-collector.observability:4317"
    (rule,) = _objects(docs, "NetworkPolicy")["grpo-otel-grpo-sidecar"]["spec"]["ingress"]
    assert yours in rule["from"]
    assert not [peer for peer in rule["from"]
                if peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "collector"]
    assert "otel-collector.observability:4317" in _notes(helm, root, tmp_path, *YOURS)

    (pod,) = _objects(docs, "Pod").values()
    (c,) = pod["spec"]["containers"]
    assert "COLLECTOR_URL" not in {e["name"] for e in c["env"]}
    port = free_port_factory()
    sidecar = Managed("sidecar", [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--host", "127.0.0.1",
                                  "--port", str(port), "--db", str(tmp_path / "sidecar.db")],
                      f"http://127.0.0.1:{port}/readyz", tmp_path / "sidecar.log", env={"OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"})
    with sidecar.running(60):
        out = subprocess.run([sys.executable, *c["command"][1:], *c["args"]], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "SIDECAR_URL": f"http://127.0.0.1:{port}", "OTLP_TOKEN": "unused"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["sidecar /healthz: 200 (ok)"]


def test_a_real_sidecar_serves_every_in_cluster_name_a_pod_may_use(helm, root, tmp_path, free_port_factory):
    """A collector of yours in another namespace exports to `http://<svc>.<ns>:8000/v1/traces` (the URL
    docs/operations.md gives), Grafana and Alertmanager use `<svc>.<ns>.svc` (the chart's URLs), the chart's
    collector and `helm test` `<svc>`: a real sidecar, given the pod's ALLOWED_HOSTS, answers each (421 was the
    Host check refusing `<svc>.<ns>`), and still refuses a name of no one's."""
    import http.client
    docs = _template(helm, root, *YOURS)
    (c,) = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e and e["name"] != "OTEL_GRPO_SIDECAR_DB"}
    hook = _objects(docs, "Secret")["grpo-otel-grpo-alertmanager"]["stringData"]["alertmanager.yaml"]
    (alertmanager,) = {urllib.parse.urlsplit(r["webhook_configs"][0]["url"]).netloc
                       for r in yaml.safe_load(hook)["receivers"]}
    (grafana,) = [urllib.parse.urlsplit(yaml.safe_load(v)["datasources"][0]["url"]).netloc for d in docs
                  if d["kind"] == "Secret" for k, v in d.get("stringData", {}).items() if k.endswith("-datasource.yaml")]
    assert "http://<release>-otel-grpo-sidecar.<namespace>:8000/v1/traces" in (root / "docs/operations.md").read_text()
    yours = "grpo-otel-grpo-sidecar.ml:8000"
    port = free_port_factory()
    sidecar = Managed("sidecar", [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--host", "127.0.0.1",
                                  "--port", str(port), "--db", str(tmp_path / "sidecar.db")],
                      f"http://127.0.0.1:{port}/readyz", tmp_path / "sidecar.log",
                      env={**env, "OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0", "OTEL_GRPO_SIDECAR_TOKEN": "t" * 32,
                           "OTEL_GRPO_SIDECAR_READ_TOKEN": "r" * 32})
    got = {}
    with sidecar.running(60):
        for host in (yours, alertmanager, grafana, "grpo-otel-grpo-sidecar.ml.svc.cluster.local:8000",
                     "grpo-otel-grpo-sidecar:8000", "grpo-otel-grpo-sidecar.evil.example:8000"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/v1/traces", body=b"", headers={
                "Host": host, "Authorization": "Bearer " + "t" * 32, "Content-Type": "application/x-protobuf"})
            got[host] = conn.getresponse().status
            conn.close()
    assert {alertmanager, grafana} == {"grpo-otel-grpo-sidecar.ml.svc:8000"}
    assert got == {yours: 200, alertmanager: 200, "grpo-otel-grpo-sidecar.ml.svc.cluster.local:8000": 200,
                   "grpo-otel-grpo-sidecar:8000": 200, "grpo-otel-grpo-sidecar.evil.example:8000": 421}, got


def test_the_explorer_service_type_and_ingress_hosts_reach_the_host_check(helm, root, monkeypatch):
    docs = _template(helm, root, "sidecar.service.type=LoadBalancer", "sidecar.ingress.enabled=true",
                     "sidecar.ingress.className=nginx", "sidecar.ingress.hosts[0].host=grpo.example.org",
                     "sidecar.allowedHosts[0]=grpo.internal.example")
    assert _objects(docs, "Service")["grpo-otel-grpo-sidecar"]["spec"]["type"] == "LoadBalancer"
    assert _objects(docs, "Service")["grpo-otel-grpo-collector"]["spec"].get("type") is None  # ClusterIP
    (ing,) = _objects(docs, "Ingress").values()
    rule = ing["spec"]["rules"][0]
    assert rule["host"] == "grpo.example.org" and ing["spec"]["ingressClassName"] == "nginx"
    assert rule["http"]["paths"][0]["backend"]["service"] == {"name": "grpo-otel-grpo-sidecar", "port": {"name": "http"}}
    tokens = {k: base64.b64decode(v).decode() for k, v in _tokens(docs).items()}
    (c,) = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    s = _sidecar_settings(c, tokens, {}, monkeypatch)
    assert {"grpo.example.org", "grpo.internal.example", "grpo-otel-grpo-sidecar.ml.svc"} <= set(s.allowed_hosts)


def test_a_wildcard_ingress_host_is_served_by_the_sidecars_host_check(helm, root, monkeypatch):
    """The chart copies the Ingress hosts into ALLOWED_HOSTS; a wildcard host (`*.grpo.example.org`) got
    421 on every request. The sidecar's check, fed the pod's environment, serves one label in its
    place, as the Ingress routes it, and nothing more."""
    docs = _template(helm, root, "sidecar.ingress.enabled=true", "sidecar.ingress.hosts[0].host=*.grpo.example.org")
    (ing,) = _objects(docs, "Ingress").values()
    assert ing["spec"]["rules"][0]["host"] == "*.grpo.example.org"
    tokens = {k: base64.b64decode(v).decode() for k, v in _tokens(docs).items()}
    (c,) = _pods(docs)["grpo-otel-grpo-sidecar"]["spec"]["containers"]
    allowed = HostCheckMiddleware(None, _sidecar_settings(c, tokens, {}, monkeypatch).allowed_hosts).allowed
    assert host_allowed("team1.grpo.example.org", allowed) and host_allowed("grpo-otel-grpo-sidecar.ml.svc:8000", allowed)
    assert not host_allowed("grpo.example.org", allowed) and not host_allowed("a.b.grpo.example.org", allowed)


def test_probes_and_scheduling_values_reach_the_pods(helm, root):
    docs = _template(helm, root, "sidecar.priorityClassName=high", "sidecar.nodeSelector.pool=cpu",
                     "collector.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
                     "collector.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
                     ".podAffinityTerm.topologyKey=kubernetes.io/hostname",
                     "sidecar.persistence.existingClaim=my-runs", "podLabels.team=rl", "sidecar.podAnnotations.x=y")
    pods = _pods(docs)
    side, coll = pods["grpo-otel-grpo-sidecar"], pods["grpo-otel-grpo-collector"]
    assert side["spec"]["priorityClassName"] == "high" and side["spec"]["nodeSelector"] == {"pool": "cpu"}
    # the values' affinity replaces the chart's: replicas on different nodes where there is room
    assert coll["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 1
    (spread,) = side["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert spread["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= side["metadata"]["labels"].items()
    assert side["metadata"]["labels"]["team"] == "rl" == coll["metadata"]["labels"]["team"]
    assert side["metadata"]["annotations"]["x"] == "y" and "x" not in coll["metadata"]["annotations"]
    assert {v["name"]: v for v in side["spec"]["volumes"]}["data"]["persistentVolumeClaim"]["claimName"] == "my-runs"
    assert "PersistentVolumeClaim" not in {d["kind"] for d in docs}
    for pod in (side, coll):
        (c,) = pod["spec"]["containers"]
        assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(c)


def test_pod_labels_and_annotations_reach_every_pod_the_test_pod_included(helm, root):
    """podLabels / podAnnotations are documented for every pod the chart makes: the `helm test` pod
    gets them too, and keeps its hook annotations; a component's podAnnotations stay on its pods."""
    docs = _template(helm, root, *FOLLOWER, "podLabels.team=rl", "podAnnotations.a=b", "sidecar.podAnnotations.x=y")
    pods = _pods(docs)
    assert len(pods) == 4
    for name, pod in pods.items():
        assert pod["metadata"]["labels"]["team"] == "rl" and pod["metadata"]["annotations"]["a"] == "b", name
        assert ("x" in pod["metadata"]["annotations"]) == (name == "grpo-otel-grpo-sidecar"), name
    test = pods["grpo-otel-grpo-test"]["metadata"]
    assert test["annotations"]["helm.sh/hook"] == "test"
    assert test["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert test["labels"]["app.kubernetes.io/component"] == "test"  # what the NetworkPolicies select


class _StrictLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; kustomize and kubectl refuse the document."""


def _no_duplicate_keys(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {dupes}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def test_label_values_naming_one_key_render_it_once_the_more_specific_winning(helm, root):
    """commonLabels with `release` (the key monitoring.labels sets on the rule and monitors), or a key that
    podLabels names too, rendered that key twice in one map: a duplicate key kustomize refuses. Each object's
    labels are one map: monitoring.labels (and the dashboards' and datasource's labels) win over commonLabels on
    their objects, podLabels on the pods; commonLabels elsewhere. A label the chart sets is refused from any of
    them, with one line naming the value."""
    argv = [helm, "template", "grpo", str(root / CHART), "--namespace", "ml", *sum((["--set", s] for s in (
        *FOLLOWER, "commonLabels.release=platform", "commonLabels.team=ml", "podLabels.team=ml-training",
        "commonLabels.grafana_dashboard=no", "commonLabels.grafana_datasource=no")), [])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.load_all(out.stdout, Loader=_StrictLoader) if d]
    for d in docs:
        labels = d["metadata"]["labels"]
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            assert labels["release"] == "kube-prometheus-stack", d["metadata"]["name"]  # what its Prometheus selects
        else:
            assert labels["release"] == "platform", d["metadata"]["name"]
        if d["kind"] != "Pod":
            assert labels["team"] == "ml", d["metadata"]["name"]
        if labels["app.kubernetes.io/component"] == "dashboards":
            assert "1" in (labels.get("grafana_dashboard"), labels.get("grafana_datasource")), d["metadata"]["name"]
    pods = _pods(docs)
    assert pods and {p["metadata"]["labels"]["team"] for p in pods.values()} == {"ml-training"}
    for values in ("monitoring.labels", "monitoring.dashboards.labels", "monitoring.grafanaDatasource.labels"):
        err = _template(helm, root, f"{values}.app\\.kubernetes\\.io/component=x", ok=False)
        assert [line for line in err.splitlines()
                if f"{values}.app.kubernetes.io/component: the chart sets that label itself" in line], err


# --- helm test ------------------------------------------------------------------------------------

def test_the_helm_test_pod_checks_a_real_sidecar_and_collector(helm, root, otelcol, tmp_path, free_port_factory):
    """The `helm test` pod's own command, run against this checkout's sidecar and the collector built
    from its Go module with collector/config.yaml: it passes with the OTLP token and fails (naming
    the check) with a wrong one. Every probe of the collector and the sidecar answers them."""
    docs = _template(helm, root)
    (pod,) = _objects(docs, "Pod").values()
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod["spec"]["containers"]
    assert c["command"][0] == "python"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SIDECAR_URL"] == "http://grpo-otel-grpo-sidecar:8000"
    assert env["COLLECTOR_URL"] == "http://grpo-otel-grpo-collector:4318"
    assert next(e for e in c["env"] if e["name"] == "OTLP_TOKEN")["valueFrom"]["secretKeyRef"]["key"] == "otlp_token"

    ports = {k: free_port_factory() for k in ("sidecar", "grpc", "http", "exporter", "health", "self")}
    (tmp_path / "otlp_token").write_text("the-otlp-token")
    (tmp_path / "sidecar_token").write_text("the-sidecar-token")
    sidecar = Managed("sidecar", [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--host", "127.0.0.1",
                                  "--port", str(ports["sidecar"]), "--db", str(tmp_path / "sidecar.db")],
                      f"http://127.0.0.1:{ports['sidecar']}/readyz", tmp_path / "sidecar.log",
                      env={"OTEL_GRPO_SIDECAR_TOKEN": "the-sidecar-token", "OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"})
    collector = Managed("collector", [otelcol, f"--config={root / 'collector/config.yaml'}"],
                        f"http://127.0.0.1:{ports['health']}/", tmp_path / "collector.log",
                        env={"OTELCOL_BIND": "127.0.0.1", "OTELCOL_HEALTH_PORT": str(ports["health"]),
                             "OTELCOL_OTLP_GRPC_PORT": str(ports["grpc"]), "OTELCOL_OTLP_HTTP_PORT": str(ports["http"]),
                             "OTELCOL_PROMETHEUS_PORT": str(ports["exporter"]), "OTELCOL_METRICS_PORT": str(ports["self"]),
                             "OTELCOL_STORAGE_DIR": str(tmp_path / "storage"),
                             "OTEL_GRPO_SIDECAR_URL": f"http://127.0.0.1:{ports['sidecar']}",
                             "OTELCOL_SIDECAR_TOKEN_FILE": str(tmp_path / "sidecar_token"),
                             "OTELCOL_OTLP_TOKEN_FILE": str(tmp_path / "otlp_token")})
    (tmp_path / "storage").mkdir()
    urls = {"SIDECAR_URL": f"http://127.0.0.1:{ports['sidecar']}", "COLLECTOR_URL": f"http://127.0.0.1:{ports['http']}"}
    with sidecar.running(60), collector.running(60):
        ok = subprocess.run([sys.executable, *c["command"][1:], *c["args"]], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **urls, "OTLP_TOKEN": "the-otlp-token"})
        bad = subprocess.run([sys.executable, *c["command"][1:], *c["args"]], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **urls, "OTLP_TOKEN": "not-the-token"})
        for component, local in (("collector", {"health": ports["health"], "self": ports["self"]}),
                                 ("sidecar", {"http": ports["sidecar"]})):
            (container,) = _pods(docs)[f"grpo-otel-grpo-{component}"]["spec"]["containers"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                get = container[probe]["httpGet"]
                with urllib.request.urlopen(f"http://127.0.0.1:{local[get['port']]}{get['path']}", timeout=10) as r:
                    assert r.status == 200, (component, probe, get)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines() == ["sidecar /healthz: 200 (ok)", "collector OTLP with the token: 200 (ok)",
                                      "collector OTLP without a token: 401 (ok)"]
    assert bad.returncode == 1 and "collector OTLP with the token: 401 (expected 200)" in bad.stdout


def _notes(helm: str, root: Path, tmp_path: Path, *sets: str) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` renders no notes and `install --dry-run`
    wants a cluster, so a copy of the chart renders the same text wrapped in a define."""
    chart = tmp_path / "chart"
    shutil.rmtree(chart, ignore_errors=True)
    shutil.copytree(root / CHART, chart)
    notes = chart / "templates/NOTES.txt"
    (chart / "templates/zz-notes.yaml").write_text(
        '{{- define "notes-under-test" }}' + notes.read_text() + '{{ end }}\nnotes: {{ include "notes-under-test" . | toJson }}\n')
    notes.unlink()
    docs = _template(helm, root, *sets, chart=chart, args=("--show-only", "templates/zz-notes.yaml"))
    return docs[0]["notes"]


def test_notes_name_the_endpoints_and_warn_about_unpublished_images(helm, root, tmp_path):
    notes = _notes(helm, root, tmp_path)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://grpo-otel-grpo-collector.ml:4317" in notes
    assert "helm test grpo -n ml" in notes and "port-forward svc/grpo-otel-grpo-sidecar 8000" in notes
    assert "No otel-grpo image is published" in notes and "use\ntokens.existingSecret there" in notes
    notes = _notes(helm, root, tmp_path, "global.imageRegistry=registry.example", "tokens.existingSecret=t",
                   "monitoring.grafanaDatasource.bearerToken=$__env{T}", "sidecar.ingress.enabled=true",
                   "sidecar.ingress.hosts[0].host=grpo.example.org", "sidecar.ingress.tls[0].secretName=x")
    assert "No otel-grpo image is published" not in notes and "Argo CD" not in notes
    assert "https://grpo.example.org/" in notes and "secret t -o jsonpath" in notes
    # https only for a host a TLS entry covers (by name or a one-label wildcard); a LoadBalancer's DNS name needs
    # sidecar.allowedHosts
    hosts = ("grpo.example.org", "plain.example.org", "a.wild.example.org", "a.b.wild.example.org")
    notes = _notes(helm, root, tmp_path, "sidecar.ingress.enabled=true", "sidecar.service.type=LoadBalancer",
                   *(f"sidecar.ingress.hosts[{i}].host={h}" for i, h in enumerate(hosts)),
                   "sidecar.ingress.tls[0].secretName=x", "sidecar.ingress.tls[0].hosts[0]=grpo.example.org",
                   "sidecar.ingress.tls[1].secretName=y", "sidecar.ingress.tls[1].hosts[0]=*.wild.example.org")
    assert ["https://grpo.example.org/", "http://plain.example.org/", "https://a.wild.example.org/",
            "http://a.b.wild.example.org/"] == [line.strip() for line in notes.splitlines() if "://" in line
                                                and ".example.org/" in line]
    assert "or the LoadBalancer's address: kubectl -n ml get svc grpo-otel-grpo-sidecar" in notes
    assert "a DNS name for it must be in sidecar.allowedHosts" in notes


# --- the docs' kube-prometheus-stack values -------------------------------------------------------

KPS_VALUES = "kube-prometheus-stack values for otel-grpo"
KPS_DEFAULTS = Path(__file__).resolve().parent / "data/kube-prometheus-stack-88.5.3"


def _merged_kps(helm: str, root: Path, tmp_path: Path, block: str) -> dict:
    values = tmp_path / "kps-values.yaml"
    values.write_text(block.replace("<release>", "grpo").replace("<namespace>", "ml"))
    (doc,) = _template(helm, root, values=(values,), chart=KPS_DEFAULTS)
    return doc


def _check_config(amtool: str, tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "alertmanager.yaml"
    path.write_text(text)
    return subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)


def test_the_docs_kube_prometheus_stack_values_make_a_valid_alertmanager_config(helm, root, amtool, tmp_path):
    """Merged by Helm into kube-prometheus-stack's defaults (lists replaced), the docs' block is a
    configuration Alertmanager accepts, routes the GRPO alerts to the sidecar with the token file
    it mounts, and keeps the defaults' Watchdog route and inhibitions; without the "null"
    receiver (the default route's) amtool refuses it, which is what the block used to do."""
    block = doc_block(root, KPS_VALUES)
    merged = _merged_kps(helm, root, tmp_path, block)
    out = _check_config(amtool, tmp_path, merged["alertmanager_yaml"])
    assert out.returncode == 0, out.stdout + out.stderr
    config = yaml.safe_load(merged["alertmanager_yaml"])
    assert config["route"]["receiver"] == "null"
    defaults = yaml.safe_load((KPS_DEFAULTS / "values.yaml").read_text())["alertmanager"]["config"]["inhibit_rules"]
    for rule in defaults:  # kept, for every alert but the GRPO ones (the test below runs them)
        assert any(r.get("source_matchers") == rule.get("source_matchers") and r.get("equal") == rule.get("equal")
                   and set(rule["target_matchers"]) <= set(r["target_matchers"]) for r in config["inhibit_rules"]), rule
    (sidecar,) = [r for r in config["receivers"] if r["name"] == "otel-grpo-sidecar"]
    (hook,) = sidecar["webhook_configs"]
    assert hook["url"] == "http://grpo-otel-grpo-sidecar.ml.svc:8000/api/alerts"
    secret = merged["alertmanager"]["alertmanagerSpec"]["secrets"][0]
    assert hook["http_config"]["authorization"]["credentials_file"] == f"/etc/alertmanager/secrets/{secret}/sidecar_token"
    assert {r["receiver"] for r in config["route"]["routes"]} == {"null", "otel-grpo-sidecar"}
    grafana = merged["grafana"]
    assert grafana["sidecar"]["datasources"]["searchNamespace"] == "ALL"  # the chart's Secret is in another namespace
    assert "yesoreyeram-infinity-datasource" in grafana["plugins"]
    gitops = yaml.safe_load(doc_block(root, GITOPS))["monitoring"]["grafanaDatasource"]["bearerToken"]
    assert gitops == "$__env{%s}" % next(iter(grafana["envValueFrom"]))
    (grpo,) = [r for r in config["route"]["routes"] if r["receiver"] == "otel-grpo-sidecar"]
    compose = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())["route"]
    assert {k: grpo[k] for k in ("group_by", "group_wait", "group_interval")} == {
        k: compose[k] for k in ("group_by", "group_wait", "group_interval")}  # a notification per run's alert
    broken = re.sub(r'\n      - name: "null".*\n', "\n", block)
    assert broken != block
    out = _check_config(amtool, tmp_path, _merged_kps(helm, root, tmp_path, broken)["alertmanager_yaml"])
    assert out.returncode != 0 and 'undefined receiver "null"' in out.stdout + out.stderr


def test_the_docs_kube_prometheus_stack_values_hold_back_what_compose_does(helm, root, alertmanager_bin, tmp_path,
                                                                          free_port_factory):
    """A real Alertmanager on the merged configuration holds back exactly the GRPO alerts compose's does, across
    runs: kube-prometheus-stack's "critical silences warning of the same name and namespace" would let one run's
    critical GRPONonFiniteValues hide every other run's warning one (the GRPO alerts carry no namespace)."""
    merged = _merged_kps(helm, root, tmp_path, doc_block(root, KPS_VALUES))
    (tmp_path / "am.yml").write_text(merged["alertmanager_yaml"])
    port = free_port_factory()
    with serve_alertmanager(alertmanager_bin, tmp_path / "am.yml", tmp_path, port).running(60):
        cases = {**INHIBITION_CASES,  # and kube-prometheus-stack's own still hold for its alerts
                 ("KubeQuotaAlmostFull", "critical", (("namespace", "ml"),)): False,
                 ("KubeQuotaAlmostFull", "warning", (("namespace", "ml"),)): True,
                 ("KubeQuotaAlmostFull", "warning", (("namespace", "other"),)): False}
        assert inhibited(f"http://127.0.0.1:{port}", cases) == cases

