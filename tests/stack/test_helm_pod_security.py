"""Every pod deploy/helm/otel-grpo makes meets the Pod Security Standards' "restricted" level, as the API
server's PodSecurity admission judges it: scripts/pod-security runs that admission's own evaluator
(k8s.io/pod-security-admission, built by `scripts/build-backends.sh pod-security`) on `helm template`, so a
namespace labelled `pod-security.kubernetes.io/enforce: restricted` admits the chart. The `helm test` pod is
one of them; the chart has no init containers.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.stack.test_helm_chart import ALL_ON, FOLLOWER, YOURS, _template

pytestmark = pytest.mark.integration

RENDERS = {"defaults": (), "every-optional-piece": ALL_ON, "follower": FOLLOWER, "collector-of-yours": (*YOURS, *FOLLOWER)}


def _check(pod_security: str, docs: list[dict]) -> tuple[int, set[str], int]:
    """(exit code, the "Kind/name" of each pod with a finding, how many pods it checked)."""
    out = subprocess.run([pod_security, "-level", "restricted", "-version", "latest"], input=yaml.safe_dump_all(docs),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    checked = re.search(r"(\d+) pods checked", out.stderr)
    assert checked, out.stderr
    return out.returncode, {line.split(":", 1)[0] for line in out.stdout.splitlines()}, int(checked.group(1))


def _pod_objects(docs: list[dict]) -> set[str]:
    return {f"{d['kind']}/{d['metadata']['name']}" for d in docs if d["kind"] in ("Deployment", "Pod")}


@pytest.mark.parametrize("sets", RENDERS.values(), ids=RENDERS.keys())
def test_every_pod_meets_the_restricted_level(helm, root, pod_security, sets):
    docs = _template(helm, root, *sets)
    code, broken, checked = _check(pod_security, docs)
    assert (code, broken) == (0, set())
    assert checked == len(_pod_objects(docs)) >= 3  # the evaluator saw each pod, the `helm test` pod included
    for pod in [d["spec"]["template"]["spec"] if d["kind"] == "Deployment" else d["spec"]
                for d in docs if d["kind"] in ("Deployment", "Pod")]:
        assert "initContainers" not in pod  # what this file's docstring says; a new one is checked all the same


def test_values_that_break_the_level_are_reported_for_every_pod(helm, root, pod_security):
    """The check can fail: one container setting shared by every pod, changed, breaks each of them."""
    docs = _template(helm, root, *FOLLOWER, "securityContext.allowPrivilegeEscalation=true")
    code, broken, _ = _check(pod_security, docs)
    assert code == 1 and broken == _pod_objects(docs)
