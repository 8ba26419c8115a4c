"""Rendering the chart in tests: helm-python-sdk (the Helm v4 engine, no helm binary) renders
and lints it offline; these helpers turn the output into manifests and containers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk (the dev extra)")

CHART = REPO / "helm" / "xshard"
RELEASE, NAMESPACE = "rel", "ns"

def _side(name: str) -> dict[str, Any]:
    """A container as the lock-down tests require every one to be."""
    return {"name": name, "image": "busybox:1.36", "command": ["sleep", "infinity"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                          "limits": {"memory": "32Mi"}},
            "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True,
                                "allowPrivilegeEscalation": False, "privileged": False,
                                "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}}}


def extras(comp: str) -> dict[str, Any]:
    """A component's Bitnami values, each naming the component so a test can find it."""
    probe = {"exec": {"command": ["true"]}}
    return {
        "podLabels": {"pod-of": comp},
        "extraEnvVars": [{"name": "EXTRA_" + comp.upper(), "value": comp}],
        "extraVolumes": [{"name": f"extra-{comp}", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": f"extra-{comp}", "mountPath": f"/extra/{comp}"}],
        "initContainers": [_side(f"init-{comp}")],
        "sidecars": [{**_side(f"side-{comp}"), "livenessProbe": probe, "readinessProbe": probe}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "pool", "operator": "In", "values": [comp]}]}]}}},
    }


# The variants of the issue; each renders, lints strictly and validates.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "external-etcd": {"etcd": {"external": {
        "endpoints": ["https://etcd-a.example:2379", "https://etcd-b.example:2379"],
        "user": "xshard", "existingSecret": "etcd-auth",
        "tls": {"enabled": True, "existingSecret": "etcd-tls", "clientCert": True}}}},
    "auth": {"auth": {"enabled": True, "password": "s3cret"}},
    "auth-existing-secret": {"auth": {"enabled": True, "existingSecret": "mine",
                                      "existingSecretPasswordKey": "pw"}},
    "5x2": {"shards": 5, "replicasPerShard": 2, "node": {"antiAffinity": "hard"},
            "router": {"autoscaling": {"enabled": True}, "service": {
                "type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8"]}}},
    "1x0": {"shards": 1, "replicasPerShard": 0, "etcd": {"replicas": 1},
            "node": {"persistence": {"enabled": False}, "zoneSpread": ""}},
    "network-policy": {"networkPolicy": {"enabled": True, "nodeFrom": [
        {"podSelector": {"matchLabels": {"app": "spark"}}}], "metricsFrom": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}},
    "create-plain-job": {"create": {"hook": False}},
    "metrics": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                            "prometheusRule": {"enabled": True}}},
    "podmonitor": {"metrics": {"podMonitor": {"enabled": True},
                               "dashboard": {"enabled": False}}},
    # TLS beside the plain ports, from a Secret of the user's, with AUTH too.
    "tls": {"tls": {"enabled": True, "existingSecret": "xshard-tls", "plainPort": True},
            "auth": {"enabled": True, "password": "s3cret"}},
    # TLS only, the certificate from cert-manager, the network policies on.
    "tls-only": {"tls": {"enabled": True, "authClients": "optional", "certManager": {
        "enabled": True, "issuerRef": {"name": "ca-issuer", "kind": "ClusterIssuer"},
        "extraDnsNames": ["xshard.example.com"]}},
        "networkPolicy": {"enabled": True, "nodeFrom": [
            {"podSelector": {"matchLabels": {"app": "spark"}}}]}},
    # Bitnami's common values, every one set (tests/helm/test_common_values.py).
    "bitnami": {"commonLabels": {"team": "streams"}, "commonAnnotations": {"owner": "ops"},
                "serviceAccount": {"name": "xs-account", "annotations": {"iam": "role-1"}},
                "auth": {"enabled": True, "password": "s3cret"},
                **{comp: extras(comp) for comp in ("node", "router", "controller")}},
}


def load() -> Any:
    return helm.Chart.load(CHART)


def render(values: dict[str, Any] | None = None, **kw: Any) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included)."""
    with load() as chart:
        return chart.render(values or {}, name=kw.get("name", RELEASE),
                            namespace=kw.get("namespace", NAMESPACE), is_install=True)


def assert_rejected(values: dict[str, Any], where: str, words: str) -> None:
    """The schema refuses `values` with an error that names the path `where` and says
    `words` (the user sees which value is wrong and why)."""
    with pytest.raises(helm.HelmValuesError) as e:
        render(values)
    assert f"at '{where}'" in str(e.value) and words in str(e.value), str(e.value)


def manifests(values: dict[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders, in template order."""
    out = []
    for path, text in sorted(render(values, **kw).items()):
        if path.endswith(".txt"):
            continue
        out += [d for d in yaml.safe_load_all(text) if d]
    return out


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet"):
        return doc["spec"]["template"]["spec"]
    return None


def containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict, dict, dict]]:
    """(workload, pod spec, container) for every container, init containers included."""
    for d in docs:
        spec = pod_spec(d)
        if spec is None:
            continue
        for c in spec.get("initContainers", []) + spec["containers"]:
            yield d, spec, c


def is_xshard(c: dict[str, Any]) -> bool:
    return c["image"].split(":")[0].rsplit("/", 1)[-1] == "xshard"


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command, args and env values (an unknown one stays)."""
    return _VAR.sub(lambda m: env.get(m[1], m[0]), text)


def container_env(c: dict[str, Any], fields: dict[str, str],
                  secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: fieldRefs from `fields`
    (e.g. {"metadata.name": "pod-0"}), secretKeyRefs from `secrets`, $(VAR) expanded."""
    env: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
            continue
        src = e["valueFrom"]
        if "fieldRef" in src:
            env[e["name"]] = fields[src["fieldRef"]["fieldPath"]]
        else:
            ref = src["secretKeyRef"]
            env[e["name"]] = secrets[(ref["name"], ref["key"])]
    return env


def pyproject_version() -> str:
    m = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert m
    return m[1]


def chart_files() -> list[Path]:
    return sorted(p for p in CHART.rglob("*") if p.is_file())
