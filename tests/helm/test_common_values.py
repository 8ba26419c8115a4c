"""Bitnami's common values (commonLabels, commonAnnotations, serviceAccount.*, and per
component podLabels, extraEnvVars, extraVolumes, extraVolumeMounts, initContainers, sidecars,
affinity), each found in the rendered manifests; and no secret on any process's command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO
from tests.helm.chart import (
    CHART,
    RELEASE,
    VARIANTS,
    by_kind,
    containers,
    extras,
    manifests,
    pod_spec,
)

COMPONENT_VALUES = ("podLabels", "extraEnvVars", "extraVolumes", "extraVolumeMounts",
                    "initContainers", "sidecars", "affinity")
COMMON_VALUES = ("commonLabels", "commonAnnotations", "serviceAccount.create",
                 "serviceAccount.name", "serviceAccount.annotations")
# The options that carry a password; none of them may appear on a command line.
SECRET_OPTIONS = ("--requirepass", "--masterauth", "--node-password", "--etcd-password",
                  "--tls-key-file-pass", "--tls-client-key-file-pass")
PASSWORDS = ("s3cret", "pw")


# --- secrets ------------------------------------------------------------------------------------

def _argvs(c: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(what, argv) of a container: its command and args, and its probes' and hooks' exec."""
    out = [("command+args", [*c.get("command", []), *c.get("args", [])])]
    handlers = [(k, c[k]) for k in ("livenessProbe", "readinessProbe", "startupProbe") if k in c]
    handlers += list(c.get("lifecycle", {}).items())
    out += [(k, h["exec"]["command"]) for k, h in handlers if "exec" in h]
    return out


def secrets_on_argv(docs: list[dict[str, Any]]) -> list[str]:
    """Every place a secret reaches a process's argv: a password option, a known password, or
    a variable that holds a Secret's key, as $(VAR) (the kubelet expands it into argv) or as
    $VAR / ${VAR} in a shell line (the shell does)."""
    bad = []
    for d, _spec, c in containers(docs):
        secret_vars = {e["name"] for e in c.get("env", [])
                       if "secretKeyRef" in e.get("valueFrom", {})}
        for what, argv in _argvs(c):
            where = f"{d['kind']}/{d['metadata']['name']}/{c['name']} {what}"
            for arg in argv:
                refs = set(re.findall(r"\$\(([A-Za-z_]\w*)\)|\$\{?([A-Za-z_]\w*)", arg))
                names = {a or b for a, b in refs}
                if names & secret_vars:
                    bad.append(f"{where}: {arg!r} expands {sorted(names & secret_vars)}")
                if any(p in arg for p in PASSWORDS):
                    bad.append(f"{where}: {arg!r} holds a password")
                if any(re.search(rf"(^|\s){o}(=|\s|$)", arg) for o in SECRET_OPTIONS):
                    bad.append(f"{where}: {arg!r} is a password option")
    return bad


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_container_gets_a_secret_on_its_command_line(variant: str) -> None:
    """`ps` and /proc/PID/cmdline show argv to anyone who can see the pod's processes: the
    passwords go in the environment, from the Secret."""
    docs = manifests(VARIANTS[variant])
    assert secrets_on_argv(docs) == []
    if VARIANTS[variant].get("auth", {}).get("enabled"):
        env = {(d["metadata"]["name"], c["name"]): {e["name"] for e in c.get("env", [])}
               for d, _s, c in containers(docs)}
        for (name, cname), names in env.items():
            if cname == "node":
                assert {"XSHARD_REQUIREPASS", "XSHARD_MASTERAUTH"} <= names, name
            if cname == "router":
                assert {"XSHARD_REQUIREPASS", "XSHARD_NODE_PASSWORD"} <= names, name
            if cname == "controller":
                assert "XSHARD_NODE_PASSWORD" in names, name


def test_the_secret_check_finds_a_password_on_argv() -> None:
    """Not vacuous: each way of putting a password on argv is caught."""
    for extra in (["--requirepass", "$(XSHARD_REQUIREPASS)"], ["--masterauth", "x"],
                  ["--maxclients", "$(XSHARD_NODE_PASSWORD)"], ["--dir", "/s3cret"]):
        docs = manifests({"auth": {"enabled": True, "password": "s3cret"},
                          "node": {"extraArgs": extra}})
        assert secrets_on_argv(docs), extra
    docs = manifests({"auth": {"enabled": True, "password": "s3cret"}, "router": {"sidecars": [
        {"name": "leak", "image": "busybox", "command": ["sh", "-c", "echo $XSHARD_NODE_PASSWORD"],
         "env": [{"name": "XSHARD_NODE_PASSWORD", "valueFrom": {"secretKeyRef": {
             "name": "rel-xshard-auth", "key": "password"}}}]}]}})
    assert any("leak" in b for b in secrets_on_argv(docs))


# --- Bitnami's values ---------------------------------------------------------------------------

def _component(d: dict[str, Any]) -> str:
    return d["metadata"]["labels"]["app.kubernetes.io/component"]


def _workloads(docs: list[dict[str, Any]], comp: str) -> list[dict[str, Any]]:
    return [d for d in docs if pod_spec(d) is not None and _component(d) == comp
            and d["kind"] != "Job"]


def test_common_labels_and_annotations_reach_every_object() -> None:
    docs = manifests(VARIANTS["bitnami"])
    assert len(docs) > 10
    for d in docs:
        name = f"{d['kind']}/{d['metadata']['name']}"
        assert d["metadata"]["labels"]["team"] == "streams", name
        assert d["metadata"]["annotations"]["owner"] == "ops", name
        if pod_spec(d) is not None:
            assert d["spec"]["template"]["metadata"]["labels"]["team"] == "streams", name
    # An object's own annotations stay, merged with the common ones.
    (job,) = by_kind(docs, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install"
    docs = manifests({**VARIANTS["bitnami"], "router": {"service": {"annotations": {"lb": "1"}}}})
    (svc,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == "rel-xshard-router"]
    assert svc["metadata"]["annotations"] == {"owner": "ops", "lb": "1"}
    # Nothing set: no empty annotations anywhere.
    assert all("annotations" not in d["metadata"] for d in manifests({})
               if d["kind"] != "Job" and d["kind"] != "ConfigMap")


@pytest.mark.parametrize("values, account, made", [
    ({}, f"{RELEASE}-xshard", True),
    ({"serviceAccount": {"name": "xs-account", "annotations": {"iam": "role-1"}}},
     "xs-account", True),
    ({"serviceAccount": {"create": False, "name": "theirs"}}, "theirs", False),
    ({"serviceAccount": {"create": False}}, "default", False),
])
def test_service_account_create_name_and_annotations(values: dict, account: str,
                                                     made: bool) -> None:
    docs = manifests(values)
    sas = by_kind(docs, "ServiceAccount")
    assert [s["metadata"]["name"] for s in sas] == ([account] if made else [])
    if made:
        want = values.get("serviceAccount", {}).get("annotations")
        assert sas[0]["metadata"].get("annotations") == want
        assert sas[0]["automountServiceAccountToken"] is False
    for d in docs:
        spec = pod_spec(d)
        if spec is not None:
            assert spec["serviceAccountName"] == account, d["metadata"]["name"]
            assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("comp", ["node", "router", "controller"])
def test_each_component_value_reaches_the_component_pods(comp: str) -> None:
    docs = manifests(VARIANTS["bitnami"])
    want = extras(comp)
    workloads = _workloads(docs, comp)
    assert workloads
    for d in workloads:
        spec = pod_spec(d)
        name = d["metadata"]["name"]
        assert d["spec"]["template"]["metadata"]["labels"]["pod-of"] == comp, name
        main = next(c for c in spec["containers"] if c["name"] == comp)
        assert want["extraEnvVars"][0] in main["env"], name
        assert want["extraVolumeMounts"][0] in main["volumeMounts"], name
        assert want["extraVolumes"][0] in spec["volumes"], name
        assert [c["name"] for c in spec["initContainers"]] == [f"init-{comp}"], name
        assert [c["name"] for c in spec["containers"]] == [comp, f"side-{comp}"], name
        assert spec["affinity"] == want["affinity"], name
    # ...and nowhere else.
    for d in docs:
        spec = pod_spec(d)
        if spec is not None and _component(d) != comp:
            assert d["spec"]["template"]["metadata"]["labels"].get("pod-of") != comp
            assert f"side-{comp}" not in [c["name"] for c in spec["containers"]]


def test_node_affinity_replaces_the_anti_affinity_rule() -> None:
    (d, *_rest) = _workloads(manifests({}), "node")
    assert "podAntiAffinity" in pod_spec(d)["affinity"]
    aff = extras("node")["affinity"]
    for d in _workloads(manifests({"node": {"affinity": aff, "antiAffinity": "hard"}}), "node"):
        assert pod_spec(d)["affinity"] == aff


def test_every_common_value_is_in_the_schema_and_the_values_table() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = [*COMMON_VALUES, *(f"{c}.{v}" for c in ("node", "router", "controller")
                               for v in COMPONENT_VALUES)]
    r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tools'); "
                        "import helm_values_table as t; print(t.table())"], cwd=REPO,
                       capture_output=True, text=True, timeout=60, check=True)
    for name in names:
        node = schema
        for part in name.split("."):
            node = node["properties"][part]
        assert node.get("description"), name
        assert f"| `{name}` |" in r.stdout, name
