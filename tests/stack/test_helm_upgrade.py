"""`helm upgrade` of deploy/helm/otel-grpo patches its objects in place, and some fields cannot be patched:
a Deployment's (or StatefulSet's, DaemonSet's) `spec.selector`, a StatefulSet's `serviceName` and
`volumeClaimTemplates`, a Job's selector and pod template. A change to one fails the upgrade ("field is
immutable"), so none may depend on the chart's version or on a value an upgrade changes: the selectors are
the fixed set of templates/_helpers.tpl ("otel-grpo.selectorLabels"), checked here against a render with a
new chart version and the values people change, and against the previous chart version in git history.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from otel_grpo.generate._kubernetes import CHART
from tests.stack.test_helm_chart import FOLLOWER, _template

pytestmark = pytest.mark.integration

IMMUTABLE = {"Deployment": ("selector",), "StatefulSet": ("selector", "serviceName", "volumeClaimTemplates"),
             "DaemonSet": ("selector",), "Job": ("selector", "template")}
SELECTOR_LABELS = {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}
TOKENS = ("tokens.otlpToken=a", "tokens.sidecarToken=b", "tokens.sidecarReadToken=c")
# What an upgrade commonly changes: images, labels and annotations of yours, sizes, scheduling, options.
UPGRADE = ("global.imageRegistry=registry.example/ml", "collector.image.tag=0.145.0", "sidecar.image.tag=0.2.0",
           "follower.image.digest=sha256:" + "0" * 64, "sidecar.image.pullPolicy=Always",
           "commonLabels.team=rl", "podLabels.tier=observability", "podAnnotations.a=b", "collector.podAnnotations.c=d",
           "collector.replicas=2", "collector.resources.limits.memory=1Gi", "collector.memoryLimitMiB=800",
           "sidecar.resources.requests.cpu=1", "sidecar.nodeSelector.pool=cpu", "collector.priorityClassName=high",
           "sidecar.tolerations[0].key=gpu", "sidecar.tolerations[0].operator=Exists",
           "sidecar.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
           "sidecar.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference"
           ".matchExpressions[0].key=pool",
           "sidecar.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference"
           ".matchExpressions[0].operator=Exists",
           "sidecar.env.OTEL_GRPO_SIDECAR_RETENTION_MAX_RUNS=200", "follower.env.OTEL_GRPO_FOLLOW_JSONL=/follow/other.jsonl",
           "networkPolicy.enabled=true", "collector.podDisruptionBudget.minAvailable=1", "monitoring.labels.release=kps",
           "tokens.otlpToken=x", "tokens.sidecarToken=y", "tokens.sidecarReadToken=z")


def _immutable(docs: list[dict]) -> dict[str, dict]:
    """"Kind/name" -> the fields of its spec that an upgrade cannot change, for each object that has some."""
    return {f"{d['kind']}/{d['metadata']['name']}": {f: d["spec"].get(f) for f in IMMUTABLE[d["kind"]]}
            for d in docs if d["kind"] in IMMUTABLE}


def _chart_copy(root: Path, tmp_path: Path, version: str) -> Path:
    chart = tmp_path / "otel-grpo"
    shutil.copytree(root / CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    (chart / "Chart.yaml").write_text(yaml.safe_dump({**meta, "version": version, "appVersion": version}))
    return chart


def test_no_immutable_field_moves_with_the_chart_version_or_the_values_an_upgrade_changes(helm, root, tmp_path):
    before = _template(helm, root, *FOLLOWER, *TOKENS)
    after = _template(helm, root, *FOLLOWER, *UPGRADE, chart=_chart_copy(root, tmp_path, "9.9.9"))
    assert {d["metadata"]["labels"]["helm.sh/chart"] for d in after} == {"otel-grpo-9.9.9"}  # the new version rendered
    assert _immutable(after) == _immutable(before)
    assert len(_immutable(before)) == 3  # collector, sidecar, follower
    for d in after:
        if d["kind"] in IMMUTABLE:
            selector = d["spec"]["selector"]["matchLabels"]
            assert set(selector) == SELECTOR_LABELS and set(d["spec"]["selector"]) == {"matchLabels"}
            assert selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("key", sorted(SELECTOR_LABELS | {"app.kubernetes.io/version", "helm.sh/chart"}))
@pytest.mark.parametrize("values", ["commonLabels", "podLabels"])
def test_labels_of_yours_cannot_take_a_label_the_chart_sets(helm, root, values, key):
    """A second value for a selector label left the pods outside their Deployment's selector (a duplicate
    key in the pod's labels): refused with one line naming the value."""
    escaped = key.replace(".", "\\.")
    err = _template(helm, root, f"{values}.{escaped}=x", ok=False)
    assert f"{values}.{key}: the chart sets that label itself" in err


def _previous_chart(root: Path, tmp_path: Path) -> tuple[str, Path]:
    """The chart as the last commit with another Chart.yaml version left it: (that version, its folder)."""
    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            pytest.skip(f"needs the repository's git history: git {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    current = yaml.safe_load((root / CHART / "Chart.yaml").read_text())["version"]
    for commit in git("log", "--format=%H", "--", f"{CHART}/Chart.yaml").split():
        version = yaml.safe_load(git("show", f"{commit}:{CHART}/Chart.yaml"))["version"]
        if version != current:
            archive = subprocess.run(["git", "-C", str(root), "archive", commit, CHART], capture_output=True, timeout=60)
            assert archive.returncode == 0, archive.stderr
            subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True, timeout=60)
            return version, tmp_path / CHART
    pytest.skip(f"no earlier chart version than {current} in git history (a shallow clone?)")


@pytest.mark.parametrize("release", ["grpo", "r" * 46], ids=["short", "46"])
def test_an_upgrade_from_the_previous_chart_version_changes_no_immutable_field(helm, root, tmp_path, release):
    """Each component's workload keeps its immutable fields from the previous chart version on, by
    component: a release name of 46 characters got new object names in 0.2.1 (docs/operations.md says
    which; a renamed object is replaced, not patched), and keeps its selectors all the same."""
    version, previous = _previous_chart(root, tmp_path)

    def by_component(docs: list[dict]) -> dict[str, dict]:
        return {f"{d['kind']}/{d['metadata']['labels']['app.kubernetes.io/component']}": fields
                for d in docs if d["kind"] in IMMUTABLE for fields in [_immutable([d]).popitem()[1]]}

    old = by_component(_template(helm, root, *TOKENS, release=release, chart=previous))
    new = by_component(_template(helm, root, *TOKENS, release=release))
    assert set(old) == set(new) == {"Deployment/collector", "Deployment/sidecar"}
    assert new == old, f"chart {version} -> now"
