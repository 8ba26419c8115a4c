"""The Helm chart (helm/xshard) rendered and linted by the Helm v4 engine (helm-python-sdk),
every object validated against the Kubernetes schemas, and every xshard command line in it
parsed by the program's own parsers."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    NAMESPACE,
    VARIANTS,
    assert_rejected,
    by_kind,
    container_env,
    containers,
    expand,
    helm,
    is_xshard,
    load,
    manifests,
    pod_spec,
    pyproject_version,
    render,
)

kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (dev)")
import jsonschema  # noqa: E402 - kubernetes-validate's dependency

CRDS = Path(__file__).parent / "crds"

# The oldest Kubernetes the chart supports and the newest the validator knows.
KUBE_VERSIONS = ("1.30.0", kv.utils.latest_version())
COMPONENTS = {"etcd", "node", "router", "controller"}


def test_app_version_is_the_package_version() -> None:
    with load() as chart:
        assert chart.metadata["apiVersion"] == "v2"
        assert chart.metadata["appVersion"] == pyproject_version()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_renders_and_lints_strictly(variant: str) -> None:
    values = VARIANTS[variant]
    assert manifests(values)
    for kube in KUBE_VERSIONS:
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE,
                           kube_version=f"v{kube}")
        bad = [m for m in report["messages"] if m["severity"] >= 2]
        assert (report["errors"], bad) == ([], []), report


def validate(d: dict[str, Any], kube: str) -> None:
    """Strict validation: Kubernetes' own kinds by kubernetes-validate, the Prometheus
    Operator's and cert-manager's by the schemas vendored under tests/helm/crds
    (tools/helm_crd_schemas.py)."""
    crd = {"monitoring.coreos.com/v1": "monitoring-v1",
           "cert-manager.io/v1": "cert-manager-v1"}.get(d["apiVersion"])
    if crd:
        schema = json.loads((CRDS / f"{d['kind'].lower()}-{crd}.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(d)
    else:
        kv.validate(d, kube, strict=True)


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_validates_strictly(variant: str, kube: str) -> None:
    docs = manifests(VARIANTS[variant])
    for d in docs:
        try:
            validate(d, kube)
        except jsonschema.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{d['kind']}/{d['metadata']['name']} on {kube}: {path}: {e.message}")


def test_validation_refuses_unknown_fields() -> None:
    """Not vacuous: a misspelt field fails, for a built-in kind and for a CRD's."""
    docs = manifests(VARIANTS["metrics"])
    (sm,) = by_kind(docs, "ServiceMonitor")
    sm["spec"]["endpoints"][0]["relabellings"] = []
    with pytest.raises(jsonschema.ValidationError, match="relabellings"):
        validate(sm, KUBE_VERSIONS[0])
    (job,) = by_kind(docs, "Job")
    job["spec"]["template"]["spec"]["containers"][0]["securitycontext"] = {}
    with pytest.raises(jsonschema.ValidationError, match="securitycontext"):
        validate(job, KUBE_VERSIONS[0])


@pytest.mark.parametrize("values, where, words", [
    ({"shards": 0}, "/shards", "minimum"),
    ({"replicasPerShard": -1}, "/replicasPerShard", "minimum"),
    ({"node": {"appendfsync": "sometimes"}}, "/node/appendfsync", "'always', 'everysec', 'no'"),
    ({"shards": "3"}, "/shards", "integer"),
    ({"etcd": {"image": {"tag": "v3.5.2"}}}, "/etcd/image/tag", "pattern"),
    ({"etcd": {"replicas": 2}}, "/etcd/replicas", "1, 3, 5, 7"),
    ({"node": {"antiAffinity": "strict"}}, "/node/antiAffinity", "'soft', 'hard', 'none'"),
    ({"sharsd": 3}, "", "'sharsd' not allowed"),
])
def test_schema_rejects_bad_values_clearly(values: dict, where: str, words: str) -> None:
    assert_rejected(values, where, words)


def test_required_secrets_are_asked_for() -> None:
    with pytest.raises(helm.HelmRenderError, match="auth.password or auth.existingSecret"):
        render({"auth": {"enabled": True}})
    with pytest.raises(helm.HelmRenderError, match="etcd.external.existingSecret"):
        render({"etcd": {"external": {"endpoints": ["http://e:2379"], "user": "u"}}})


# --- the command lines -----------------------------------------------------------------------

def _parse(argv: list[str], env: dict[str, str] | None = None) -> Any:
    """Parse an `xshard ...` command line with the parser the program itself uses, in the
    container's environment (secrets come from there); a flag it does not know fails here."""
    with mock.patch.dict(os.environ, env or {}):
        return _parse_in_env(argv)


def _parse_in_env(argv: list[str]) -> Any:
    from control import clusterctl
    from node.main import parse_args as node_args
    from router.main import parse_args as router_args

    cmd, rest = argv[0], argv[1:]
    if cmd == "node":
        return node_args(rest)[0]
    if cmd == "router":
        return router_args(rest)
    if cmd in ("--version", "-V"):
        assert rest == []
        return None
    parser = {"create": clusterctl.create_parser, "failover": clusterctl.failover_parser,
              "controller": clusterctl.controller_parser}[cmd]()
    return parser.parse_args(rest)


def _command_lines(variant: str | dict[str, Any]) -> list[tuple[str, list[str], dict[str, str]]]:
    """(where, argv after `xshard`, env) of every xshard container, probe and hook of a
    variant (or of values), with the container's $(VAR)s expanded as the kubelet would (each
    variable's value is <NAME>)."""
    out = []
    values = VARIANTS[variant] if isinstance(variant, str) else variant
    for d, _spec, c in containers(manifests(values)):
        if not is_xshard(c):
            continue
        where = f"{d['kind']}/{d['metadata']['name']}/{c['name']}"
        assert "command" not in c, f"{where}: the image's entrypoint is xshard"
        env = {e["name"]: f"<{e['name']}>" for e in c.get("env", [])}
        out.append((where, [expand(a, env) for a in c["args"]], env))
        handlers = [(k, c[k]) for k in ("livenessProbe", "readinessProbe", "startupProbe")
                    if k in c]
        handlers += list(c.get("lifecycle", {}).items())
        for name, h in handlers:
            if "exec" not in h:
                continue
            cmd = h["exec"]["command"]
            if cmd[:2] == ["sh", "-c"]:  # a shell only to read the environment
                cmd = shlex.split(cmd[2].replace('"$POD_NAME"', "<POD_NAME>"))
                assert cmd[0] == "exec", cmd
                cmd = cmd[1:]
            assert cmd[0] == "xshard", (where, name, cmd)
            out.append((f"{where} {name}", cmd[1:], env))
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_command_line_parses_with_the_real_parsers(variant: str) -> None:
    lines = _command_lines(variant)
    assert {argv[0] for _w, argv, _e in lines} >= {"node", "router", "controller", "create",
                                                   "failover"}
    for where, argv, env in lines:
        try:
            _parse(argv, env)
        except SystemExit as e:  # argparse's usage error (printed on stderr above)
            pytest.fail(f"{where}: {argv} refused (exit {e.code})")
        except Exception as e:  # noqa: BLE001 - node.main's UsageError and the like
            pytest.fail(f"{where}: {argv}: {e}")


def test_node_command_line_follows_the_values() -> None:
    docs = manifests({"shards": 2, "replicasPerShard": 2, "node": {"appendfsync": "always"},
                      "auth": {"enabled": True, "password": "pw"}})
    sets = [d for d in by_kind(docs, "StatefulSet")
            if d["metadata"]["labels"]["app.kubernetes.io/component"] == "node"]
    assert [d["spec"]["replicas"] for d in sets] == [3, 3]
    for shard, d in enumerate(sets):
        c = pod_spec(d)["containers"][0]
        env = container_env(c, {"metadata.name": f"{d['metadata']['name']}-1"},
                            {("rel-xshard-auth", "password"): "pw"})
        cfg = _parse([expand(a, env) for a in c["args"]], env)  # the passwords: from env
        assert cfg.shard == str(shard) and cfg.dir == "/data" and cfg.bind == "0.0.0.0"
        assert cfg.appendonly is True and cfg.appendfsync == "always"
        assert cfg.requirepass == cfg.masterauth == "pw"
        assert cfg.node_id == env["POD_NAME"]
        # The pod's DNS name through the StatefulSet's governing (headless) Service.
        svc = d["spec"]["serviceName"]
        assert cfg.announce_host == f"{env['POD_NAME']}.{svc}.{NAMESPACE}.svc.cluster.local"
        headless = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == svc]
        assert headless and headless[0]["spec"]["clusterIP"] == "None"
        assert cfg.etcd == f"http://rel-xshard-etcd.{NAMESPACE}.svc.cluster.local:2379"
        for name in ("XSHARD_NODE_PASSWORD", "XSHARD_REQUIREPASS", "XSHARD_MASTERAUTH"):
            secret = c["env"][[e["name"] for e in c["env"]].index(name)]
            assert secret["valueFrom"]["secretKeyRef"]["name"] == "rel-xshard-auth"


def test_external_etcd_replaces_the_chart_etcd() -> None:
    docs = manifests(VARIANTS["external-etcd"])
    assert not [d for d in docs if d["metadata"]["labels"].get(
        "app.kubernetes.io/component") == "etcd"]
    for _d, spec, c in containers(docs):
        env = {e["name"]: e for e in c["env"]}
        a = _parse([expand(x, {"POD_NAME": "p", "POD_IP": "10.0.0.1"}) for x in c["args"]],
                   {"XSHARD_ETCD_PASSWORD": "pw"})
        assert a.etcd == "https://etcd-a.example:2379,https://etcd-b.example:2379"
        assert (a.etcd_user, a.etcd_cacert, a.etcd_cert) == (
            "xshard", "/etc/xshard/etcd-tls/ca.crt", "/etc/xshard/etcd-tls/tls.crt")
        assert env["XSHARD_ETCD_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "etcd-auth", "key": "password"}
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        vols = {v["name"]: v for v in spec["volumes"]}
        assert mounts["etcd-tls"] == "/etc/xshard/etcd-tls"
        assert vols["etcd-tls"]["secret"]["secretName"] == "etcd-tls"


def test_the_chart_etcd_is_three_members_of_a_safe_version() -> None:
    docs = manifests()
    (sts,) = [d for d in by_kind(docs, "StatefulSet")
              if d["metadata"]["labels"]["app.kubernetes.io/component"] == "etcd"]
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["volumeClaimTemplates"]
    (c,) = pod_spec(sts)["containers"]
    repo, tag = c["image"].rsplit(":", 1)
    assert repo in ("gcr.io/etcd-development/etcd", "quay.io/coreos/etcd")
    assert tuple(int(x) for x in tag.lstrip("v").split(".")[:3]) >= (3, 5, 3)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ETCD_INITIAL_CLUSTER"].count("=http://") == 3
    names = {s["metadata"]["name"] for s in by_kind(docs, "Service")}
    assert {"rel-xshard-etcd", "rel-xshard-etcd-peer"} <= names
    pdbs = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "PodDisruptionBudget")}
    assert pdbs["rel-xshard-etcd"] == {"maxUnavailable": 1, "selector": {
        "matchLabels": sts["spec"]["selector"]["matchLabels"]}}


def test_create_job_is_an_idempotent_post_install_hook() -> None:
    (job,) = by_kind(manifests({"shards": 4, "replicasPerShard": 2}), "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install"
    a = _parse(pod_spec(job)["containers"][0]["args"])
    assert (a.shards, a.replicas, a.exist_ok) == (4, 2, True)
    (plain,) = by_kind(manifests({"create": {"hook": False}}), "Job")
    assert "annotations" not in plain["metadata"]
    assert plain["metadata"]["name"] == "rel-xshard-create-1"  # a Job per revision


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_probes_use_the_metrics_endpoint_the_process_serves(variant: str) -> None:
    """Liveness on /healthz, readiness on /readyz, on the port given to --metrics-port (and
    bound on every address, or the kubelet could not reach it)."""
    for d, _spec, c in containers(manifests(VARIANTS[variant])):
        if not is_xshard(c) or d["kind"] == "Job":
            continue
        env = {e["name"]: f"<{e['name']}>" for e in c.get("env", [])}
        a = _parse([expand(x, env) for x in c["args"]], env)
        port = {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]
        assert a.metrics_port == port
        bind = a.bind.split()[0]
        assert bind == "0.0.0.0", (d["metadata"]["name"], bind)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        if "startupProbe" in c:
            assert c["startupProbe"]["httpGet"]["port"] == "metrics"


def test_prestop_hook_hands_over_only_from_the_primary() -> None:
    for d in by_kind(manifests({"shards": 2}), "StatefulSet"):
        if d["metadata"]["labels"]["app.kubernetes.io/component"] != "node":
            continue
        c = pod_spec(d)["containers"][0]
        cmd = c["lifecycle"]["preStop"]["exec"]["command"]
        argv = shlex.split(cmd[2].replace('"$POD_NAME"', "pod-1"))[2:]
        a = _parse(argv)
        assert a.shard == d["metadata"]["labels"]["xshard/shard"] and not a.force
        assert a.if_primary == "pod-1" and a.cluster == "rel-xshard"


# --- what every workload must have ------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_is_locked_down_with_probes_and_resources(variant: str) -> None:
    docs = manifests(VARIANTS[variant])
    seen = 0
    for d, spec, c in containers(docs):
        where = f"{d['kind']}/{d['metadata']['name']}/{c['name']}"
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True, where
        assert sc["capabilities"]["drop"] == ["ALL"], where
        assert sc["allowPrivilegeEscalation"] is False, where
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec["securityContext"]["runAsUser"] > 0, where
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], where
        # Kubernetes refuses probes on init containers: they run to completion first.
        if d["kind"] != "Job" and c not in spec.get("initContainers", []):
            assert "livenessProbe" in c and "readinessProbe" in c, where
        seen += 1
    assert seen >= 5


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_workload_carries_its_component_label(variant: str) -> None:
    docs = manifests(VARIANTS[variant])
    found = set()
    for d in docs:
        spec = pod_spec(d)
        if spec is None:
            continue
        comp = d["metadata"]["labels"]["app.kubernetes.io/component"]
        assert comp in COMPONENTS, d["metadata"]["name"]
        assert d["spec"]["template"]["metadata"]["labels"][
            "app.kubernetes.io/component"] == comp
        found.add(comp)
    expected = COMPONENTS - ({"etcd"} if variant == "external-etcd" else set())
    assert found == expected


def test_shape_of_5_shards_by_2_replicas() -> None:
    docs = manifests(VARIANTS["5x2"])
    nodes = [d for d in by_kind(docs, "StatefulSet")
             if d["metadata"]["labels"]["app.kubernetes.io/component"] == "node"]
    assert [d["spec"]["replicas"] for d in nodes] == [3] * 5
    pdbs = [p for p in by_kind(docs, "PodDisruptionBudget")
            if p["metadata"]["labels"]["app.kubernetes.io/component"] == "node"]
    assert len(pdbs) == 5 and all(p["spec"]["maxUnavailable"] == 1 for p in pdbs)
    for d in nodes:  # hard anti-affinity keeps one shard's pods on different machines
        term, = pod_spec(d)["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["labelSelector"]["matchLabels"] == d["spec"]["selector"]["matchLabels"]
        assert pod_spec(d)["topologySpreadConstraints"][0]["labelSelector"][
            "matchLabels"] == d["spec"]["selector"]["matchLabels"]
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "rel-xshard-router"
    (dep,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == hpa[
        "spec"]["scaleTargetRef"]["name"]]
    assert "replicas" not in dep["spec"]
    svc = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-xshard-router"]
    assert svc[0]["spec"]["type"] == "LoadBalancer"


def test_notes_say_how_to_connect() -> None:
    notes = render()["xshard/templates/NOTES.txt"]
    assert "port-forward svc/rel-xshard-router" in notes and "xshard status" in notes


def test_a_flag_the_program_does_not_know_is_caught() -> None:
    """The check above is not vacuous: an unknown option in a rendered command line fails."""
    lines = _command_lines("default")
    where, argv, env = next(x for x in lines if x[1][0] == "node")
    with pytest.raises(Exception, match="unknown option 'no-such-option'"):
        _parse([*argv, "--no-such-option", "1"], env)
    where, argv, env = next(x for x in lines if x[1][0] == "router")
    with pytest.raises(SystemExit):
        _parse([*argv, "--no-such-option", "1"], env)


# --- metrics -----------------------------------------------------------------------------------

def test_rendered_rules_and_dashboard_are_the_files() -> None:
    """The one copy of each under files/ (the observability tests check those), templated."""
    docs = manifests(VARIANTS["metrics"])
    rules_file = CHART / "files" / "rules" / "xshard-rules.yml"
    (rule,) = by_kind(docs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(rules_file.read_text())
    dashboards = [c for c in by_kind(manifests(), "ConfigMap")
                  if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert len(dashboards) == 1, "the dashboard renders with the default values"
    text = (CHART / "files" / "dashboards" / "xshard.json").read_text()
    assert dashboards[0]["data"]["xshard.json"] == text.rstrip("\n")
    assert json.loads(dashboards[0]["data"]["xshard.json"]) == json.loads(text)
    assert not list((CHART / "templates").rglob("*.json")), "never a copy in templates/"


@pytest.mark.parametrize("variant", ["metrics", "podmonitor"])
def test_scrapes_select_the_xshard_pods_and_add_the_labels_the_rules_use(variant: str) -> None:
    docs = manifests(VARIANTS[variant])
    (mon,) = by_kind(docs, "ServiceMonitor") + by_kind(docs, "PodMonitor")
    (ep,) = mon["spec"].get("endpoints") or mon["spec"]["podMetricsEndpoints"]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    targets = {r["targetLabel"]: r for r in ep["relabelings"]}
    assert set(targets) == {"cluster", "kind", "shard", "node"}
    assert targets["cluster"]["replacement"] == "rel-xshard"
    assert targets["shard"]["sourceLabels"] == ["__meta_kubernetes_pod_label_xshard_shard"]
    sel = mon["spec"]["selector"]["matchLabels"]
    if mon["kind"] == "ServiceMonitor":
        (svc,) = [s for s in by_kind(docs, "Service") if sel.items() <= s["metadata"][
            "labels"].items()]
        sel = svc["spec"]["selector"]
    scraped = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs
               if pod_spec(d) is not None and sel.items() <= d["spec"]["template"][
                   "metadata"]["labels"].items()}
    assert scraped == {"node", "router", "controller"}
    if variant == "metrics":
        assert mon["metadata"]["labels"]["release"] == "prom"


def test_network_policies_let_in_the_release_clients_and_prometheus() -> None:
    docs = manifests(VARIANTS["network-policy"])
    pols = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "NetworkPolicy")}
    assert set(pols) == {f"rel-xshard-{n}" for n in ("internal", "router", "metrics", "node")}
    assert pols["rel-xshard-internal"]["ingress"] == [{"from": [{"podSelector": {
        "matchLabels": pols["rel-xshard-internal"]["podSelector"]["matchLabels"]}}]}]
    assert "from" not in pols["rel-xshard-router"]["ingress"][0]  # clients from anywhere
    assert pols["rel-xshard-metrics"]["ingress"][0]["from"][0]["namespaceSelector"]
    assert pols["rel-xshard-node"]["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app": "spark"}}}]
    assert not by_kind(manifests(), "NetworkPolicy")
