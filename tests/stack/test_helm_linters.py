"""deploy/helm/otel-grpo through kube-score (built from its Go module, `scripts/build-backends.sh kube-score`),
as a platform team's CI runs it on `helm template`: with the default values, with every optional piece on,
and with several replicas.

What the chart does on purpose (no CPU limit, IfNotPresent, one replica, Recreate, network policies off by
default and egress open) it declares in the annotation kube-score reads, `kube-score/ignore`
(templates/_helpers.tpl, "otel-grpo.lintIgnores", says why). A second run with those annotations disabled
holds the declarations to the findings: each declared check fires, nothing else does.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.stack.test_helm_chart import ALL_ON, _template

pytestmark = pytest.mark.integration

RENDERS = {
    "defaults": (),
    "every-optional-piece": ALL_ON,
    "replicas": ("collector.replicas=3", "sidecar.replicas=2", "sidecar.database=postgresql://grpo@db:5432/grpo"),
}
# The Kubernetes version kube-score judges API versions against (its default, v1.18, predates policy/v1).
KUBERNETES = "v1.30"


def _findings(kube_score: str, docs: list[dict], *flags: str) -> dict[str, dict[str, str]]:
    """kube-score's findings, "Kind/name" -> {check id: its worst grade, CRITICAL or WARNING}."""
    out = subprocess.run([kube_score, "score", "--kubernetes-version", KUBERNETES, "--output-format", "json", *flags, "-"],
                         input=yaml.safe_dump_all(docs), capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr  # 1: findings
    found: dict[str, dict[str, str]] = {}
    for obj in json.loads(out.stdout):
        for check in obj["checks"]:
            if not check["skipped"] and check["grade"] < 7:  # 7 and 10 are OK
                grade = "CRITICAL" if check["grade"] == 1 else "WARNING"
                seen = found.setdefault(f"{obj['type_meta']['kind']}/{obj['object_meta']['name']}", {})
                seen[check["check"]["id"]] = min(seen.get(check["check"]["id"], grade), grade)
    return found


def _declared(docs: list[dict]) -> dict[str, set[str]]:
    """The checks each object declares deliberate (its kube-score/ignore annotation)."""
    return {f"{d['kind']}/{d['metadata']['name']}": set(d["metadata"]["annotations"]["kube-score/ignore"].split(","))
            for d in docs if "kube-score/ignore" in d["metadata"].get("annotations", {})}


@pytest.mark.parametrize("sets", RENDERS.values(), ids=RENDERS.keys())
def test_kube_score_finds_nothing(helm, root, kube_score, sets):
    docs = _template(helm, root, *sets)
    assert _findings(kube_score, docs) == {}


@pytest.mark.parametrize("sets", RENDERS.values(), ids=RENDERS.keys())
def test_the_declared_exceptions_are_exactly_the_findings_they_silence(helm, root, kube_score, sets):
    """With the annotations disabled, every object's findings are the checks it declares (container-resources
    aside: it stands for the missing CPU limit alone, which --ignore-container-cpu-limit leaves out), so a
    declaration hides nothing else and none is stale. With network policies on, the one left is egress."""
    docs = _template(helm, root, *sets)
    found = _findings(kube_score, docs, "--disable-ignore-checks-annotations", "--ignore-container-cpu-limit")
    declared = _declared(docs)
    pods = {f"{d['kind']}/{d['metadata']['name']}" for d in docs if d["kind"] in ("Deployment", "Pod")}
    assert set(declared) == pods
    assert {k: set(v) for k, v in found.items()} == {k: v - {"container-resources"} for k, v in declared.items()}
    if "networkPolicy.enabled=true" in sets:
        assert {v["pod-networkpolicy"] for v in found.values()} == {"WARNING"}  # egress; ingress is covered


def test_a_missing_memory_limit_is_still_reported(helm, root, kube_score):
    """The CPU-limit exception is declared only while requests and a memory limit are set: take the
    sidecar's memory limit away and kube-score reports it."""
    docs = _template(helm, root, "sidecar.resources.limits.memory=null")
    assert _findings(kube_score, docs) == {"Deployment/grpo-otel-grpo-sidecar": {"container-resources": "CRITICAL"}}
