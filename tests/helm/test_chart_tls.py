"""The chart's TLS values (tls.*): what each rendered process is told, parsed by the program's
own parsers, and what the Services, policies, Secret mounts, Certificate and NOTES say.
(Rendering, strict lint and validation of the "tls" and "tls-only" variants are in
test_chart.py with every other variant; test_wiring.py runs the TLS variant.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.chart import (
    VARIANTS,
    assert_rejected,
    by_kind,
    containers,
    helm,
    is_xshard,
    manifests,
    render,
)
from tests.helm.test_chart import _command_lines, _parse

MOUNT = "/etc/xshard/tls"
FILES = {"tls_cert_file": f"{MOUNT}/tls.crt", "tls_key_file": f"{MOUNT}/tls.key",
         "tls_ca_cert_file": f"{MOUNT}/ca.crt"}


def _files(a: Any) -> dict[str, str]:
    return {k: getattr(a, k) for k in FILES}


@pytest.mark.parametrize("variant, plain", [("tls", True), ("tls-only", False)])
def test_every_process_listens_and_links_over_tls(variant: str, plain: bool) -> None:
    docs = manifests(VARIANTS[variant])
    auth = VARIANTS[variant]["tls"].get("authClients", "yes")
    ports = {f"{d['metadata']['name']}/{c['name']}": {p["name"]: p["containerPort"]
                                                     for p in c.get("ports", [])}
             for d, _s, c in containers(docs)}
    seen = set()
    for where, argv, env in _command_lines(variant):
        a = _parse(argv, env)
        cmd = argv[0]
        seen.add(cmd)
        key = "/".join(where.split(" ")[0].split("/")[1:])
        if cmd == "create":  # writes etcd only: it opens no connection to a node
            assert not any(x.startswith("--tls") for x in argv), argv
            continue
        assert _files(a) == FILES, where
        assert a.tls_cluster in (True, "yes"), where  # links to the nodes over TLS
        if cmd in ("node", "router"):
            assert a.tls_port == ports[key]["resp-tls"] and a.tls_auth_clients == auth
            # TLS only: no plain RESP listener (--port 0) and no port named for one.
            assert (a.port != 0) is plain and ("resp" in ports[key]) is plain, where
            assert ports[key]["metrics"] != a.tls_port
        if cmd == "node":
            assert a.tls_replication is True
    assert seen == {"node", "router", "controller", "create", "failover"}


@pytest.mark.parametrize("variant", ["tls", "tls-only"])
def test_the_secret_is_mounted_read_only_into_every_xshard_container(variant: str) -> None:
    docs = manifests(VARIANTS[variant])
    secret = VARIANTS[variant]["tls"].get("existingSecret") or "rel-xshard-tls"
    n = 0
    for d, spec, c in containers(docs):
        if not is_xshard(c):
            assert "tls" not in {m["name"] for m in c.get("volumeMounts", [])}
            continue
        (m,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
        assert m == {"name": "tls", "mountPath": MOUNT, "readOnly": True}, d["metadata"]
        (v,) = [v for v in spec["volumes"] if v["name"] == "tls"]
        assert v["secret"] == {"secretName": secret, "defaultMode": 0o440}
        n += 1
    assert n >= 5
    assert not [c for _d, _s, c in containers(manifests())
                if "tls" in {m["name"] for m in c.get("volumeMounts", [])}]


@pytest.mark.parametrize("variant, plain", [("tls", True), ("tls-only", False)])
def test_services_and_policies_name_the_tls_ports(variant: str, plain: bool) -> None:
    docs = manifests(VARIANTS[variant])
    for s in by_kind(docs, "Service"):
        comp = s["metadata"]["labels"]["app.kubernetes.io/component"]
        if comp not in ("node", "router"):
            continue
        got = {p["name"]: (p["port"], p["targetPort"]) for p in s["spec"]["ports"]}
        want = {"resp-tls": (6380, "resp-tls")} | ({"resp": (6379, "resp")} if plain else {})
        assert got == want, s["metadata"]["name"]
    for p in by_kind(docs, "NetworkPolicy"):
        if p["metadata"]["name"] in ("rel-xshard-router", "rel-xshard-node"):
            names = [x["port"] for x in p["spec"]["ingress"][0]["ports"]]
            assert names == (["resp", "resp-tls"] if plain else ["resp-tls"])


def test_probes_stay_plain_http_on_the_metrics_port() -> None:
    for d, _s, c in containers(manifests(VARIANTS["tls-only"])):
        if d["kind"] == "Job" or not is_xshard(c):
            continue
        for k in ("livenessProbe", "readinessProbe", "startupProbe"):
            if k in c:
                assert c[k]["httpGet"]["port"] == "metrics" and "scheme" not in c[k]["httpGet"]


def test_cert_manager_certificate_names_the_router_and_every_node() -> None:
    docs = manifests(VARIANTS["tls-only"])
    (cert,) = by_kind(docs, "Certificate")
    spec = cert["spec"]
    assert spec["secretName"] == "rel-xshard-tls"
    assert spec["issuerRef"] == {"name": "ca-issuer", "kind": "ClusterIssuer",
                                 "group": "cert-manager.io"}
    assert {"server auth", "client auth"} <= set(spec["usages"])
    dom = "ns.svc.cluster.local"
    assert set(spec["dnsNames"]) == {
        "rel-xshard-router", "rel-xshard-router.ns", f"rel-xshard-router.{dom}",
        "xshard.example.com", *(f"*.rel-xshard-shard-{i}.{dom}" for i in range(3))}
    # Every node announces a name the certificate covers.
    for _where, argv, _env in _command_lines("tls-only"):
        if argv[0] == "node":
            host = argv[argv.index("--announce-host") + 1]
            assert any(n.startswith("*.") and host.endswith(n[1:]) for n in spec["dnsNames"])
    assert not by_kind(manifests(VARIANTS["tls"]), "Certificate")
    assert not by_kind(manifests(), "Certificate")


def test_notes_show_the_tls_redis_cli_line() -> None:
    notes = render(VARIANTS["tls-only"])["xshard/templates/NOTES.txt"]
    assert "redis-cli --tls --cacert ca.crt --cert client.crt --key client.key" in notes
    assert "secret rel-xshard-tls" in notes and "no plain RESP port" in notes
    assert "redis-cli -p 6379" not in notes
    assert "xshard status --cluster rel-xshard --tls-cluster yes" in notes
    both = render(VARIANTS["tls"])["xshard/templates/NOTES.txt"]
    assert "redis-cli -p 6379 --askpass" in both and "--tls" in both
    assert "--tls" not in render()["xshard/templates/NOTES.txt"]


def test_auth_clients_accepts_a_yaml_boolean() -> None:
    """`authClients: yes` unquoted in a values file is a YAML boolean: it means yes."""
    for value, flag in ((True, "yes"), (False, "no")):
        docs = manifests({"tls": {"enabled": True, "existingSecret": "s",
                                  "authClients": value}})
        (router,) = [c for _d, _s, c in containers(docs) if c["name"] == "router"]
        assert router["args"][router["args"].index("--tls-auth-clients") + 1] == flag


@pytest.mark.parametrize("values, where, words", [
    ({"tls": {"authClients": "maybe"}}, "/tls/authClients", "'yes', 'no', 'optional'"),
    ({"tls": {"plainPort": "no"}}, "/tls/plainPort", "boolean"),
    ({"tls": {"certManager": {"issuerRef": {"kind": "Issuers"}}}},
     "/tls/certManager/issuerRef/kind", "'Issuer', 'ClusterIssuer'"),
    ({"tls": {"certManager": {"duration": "90 days"}}}, "/tls/certManager/duration",
     "pattern"),
    ({"node": {"tlsPort": 0}}, "/node/tlsPort", "minimum"),
    ({"router": {"service": {"tlsPort": 70000}}}, "/router/service/tlsPort", "maximum"),
    ({"tls": {"enable": True}}, "/tls", "'enable' not allowed"),
])
def test_schema_rejects_bad_tls_values_clearly(values: dict, where: str, words: str) -> None:
    assert_rejected(values, where, words)


def test_tls_needs_a_certificate_source() -> None:
    with pytest.raises(helm.HelmRenderError, match="tls.existingSecret"):
        render({"tls": {"enabled": True}})
    with pytest.raises(helm.HelmRenderError, match="tls.certManager.issuerRef.name"):
        render({"tls": {"enabled": True, "certManager": {"enabled": True}}})


def test_tls_and_external_etcd_tls_mount_side_by_side() -> None:
    """The etcd client options (etcd.external.tls) keep their own Secret and mount."""
    values = VARIANTS["external-etcd"] | {"tls": VARIANTS["tls"]["tls"]}
    lines = _command_lines(values)
    for _d, spec, c in containers(manifests(values)):
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["tls"] == MOUNT and mounts["etcd-tls"] == "/etc/xshard/etcd-tls"
        assert {v["name"] for v in spec["volumes"]} >= {"tls", "etcd-tls"}
    for where, argv, env in lines:
        if "preStop" in where:  # the hook finds etcd's options in the pod's environment
            continue
        a = _parse(argv, {**env, "XSHARD_ETCD_PASSWORD": "pw"})
        assert a.etcd_cacert == "/etc/xshard/etcd-tls/ca.crt", where
