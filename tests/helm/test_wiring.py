"""The chart's wiring, proven by running it: the rendered etcd, node, controller, router and
create-Job containers start here as local processes, with their command lines and environment
as the kubelet would build them, and the cluster they form serves XADD/XREAD through the router
(also with tls.enabled: TLS only, certificates from control/certs.py).

What stands in for Kubernetes, and nothing more:
- each pod gets its own loopback address (127.X.Y.Z), its "pod IP": `0.0.0.0` in a pod means
  the pod's own addresses, so it becomes that address here;
- DNS: a pod's name under its StatefulSet's headless Service resolves to its address, and a
  ClusterIP Service to its first pod's (no kube-proxy here);
- each volume mount is a directory of the pod, a Secret volume's holding its keys as files;
  fieldRefs and Secrets come from the rendered objects (and the Secrets a user creates before
  the install, e.g. the TLS certificates, from the test);
- `xshard` and `etcd` on PATH run this checkout (python -m control.cli) and the etcd the tests
  use (control/etcd.py), as the image's entrypoints would.
The probes are the rendered ones, sent to each pod's address."""

from __future__ import annotations

import base64
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from control.etcd import EtcdError, find_etcd
from control.ports import free_port, port_in_use
from tests.conftest import REPO
from tests.helm.chart import NAMESPACE, by_kind, container_env, manifests, pod_spec
from tests.support.procs import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.etcd]

DOMAIN = f"{NAMESPACE}.svc.cluster.local"
PASSWORD = "wiring-pw"


@dataclass
class Pod:
    name: str
    ip: str
    workload: dict[str, Any]
    container: dict[str, Any]
    root: Path
    proc: subprocess.Popen | None = None
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.root / "log"

    def port(self, name: str | int) -> int:
        if isinstance(name, int):
            return name
        return {p["name"]: p["containerPort"] for p in self.container["ports"]}[name]

    def probe(self, kind: str) -> bool:
        """The rendered probe (httpGet or tcpSocket) against this pod's address."""
        spec = self.container[kind]
        if "httpGet" in spec:
            h = spec["httpGet"]
            url = f"http://{self.ip}:{self.port(h['port'])}{h['path']}"
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    return 200 <= r.status < 400
            except (OSError, urllib.error.URLError):
                return False
        import socket

        try:
            with socket.create_connection((self.ip, self.port(spec["tcpSocket"]["port"])), 2):
                return True
        except OSError:
            return False

    def tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-25:])
        except OSError:
            return ""


class FakeKubelet:
    """Pods of the rendered workloads as local processes (see the module docstring)."""

    def __init__(self, docs: list[dict[str, Any]], base: Path,
                 user_secrets: dict[str, dict[str, bytes]] | None = None) -> None:
        """`user_secrets`: the Secrets the user creates before the install (name -> key ->
        content), beside the ones the chart renders."""
        self.docs, self.base = docs, base
        self.pods: list[Pod] = []
        self.dns: dict[str, str] = {}
        self.files = {s["metadata"]["name"]: {k: base64.b64decode(v) for k, v in
                                              s["data"].items()}
                      for s in by_kind(docs, "Secret")} | (user_secrets or {})
        self.secrets = {(name, k): v.decode() for name, data in self.files.items()
                        for k, v in data.items()}
        net = f"127.{random.randint(100, 250)}.{random.randint(0, 250)}"
        self.bin = base / "bin"
        self.bin.mkdir()
        etcd_bin, _ = find_etcd()
        self._shim("xshard", f'exec "{sys.executable}" -m control.cli "$@"')
        self._shim("etcd", f'exec "{etcd_bin}" "$@"')
        n = 0
        for d in docs:
            spec = pod_spec(d)
            if spec is None:
                continue
            (c,) = spec["containers"]
            for name in self._pod_names(d):
                n += 1
                root = base / name
                root.mkdir()
                self.pods.append(Pod(name, f"{net}.{n}", d, c, root))
                if d["kind"] == "StatefulSet":
                    self.dns[f"{name}.{d['spec']['serviceName']}.{DOMAIN}"] = f"{net}.{n}"
        for s in by_kind(docs, "Service"):
            if s["spec"].get("clusterIP") != "None":
                sel = s["spec"]["selector"]
                first = next(p for p in self.pods if sel.items() <= self.labels(p).items())
                self.dns[f"{s['metadata']['name']}.{DOMAIN}"] = first.ip

    def _shim(self, name: str, line: str) -> None:
        p = self.bin / name
        p.write_text(f"#!/bin/sh\n{line}\n")
        p.chmod(0o755)

    @staticmethod
    def _pod_names(d: dict[str, Any]) -> list[str]:
        name = d["metadata"]["name"]
        if d["kind"] == "Job":
            return [name]
        return [f"{name}-{i}" for i in range(d["spec"].get("replicas", 1))]

    @staticmethod
    def labels(p: Pod) -> dict[str, str]:
        return p.workload["spec"]["template"]["metadata"]["labels"]

    def component(self, comp: str) -> list[Pod]:
        return [p for p in self.pods if p.workload["kind"] != "Job"
                and self.labels(p)["app.kubernetes.io/component"] == comp]

    def localize(self, text: str, pod: Pod) -> str:
        for host in sorted(self.dns, key=len, reverse=True):
            text = text.replace(host, self.dns[host])
        text = text.replace("0.0.0.0", pod.ip)
        for m in pod.container.get("volumeMounts", []):
            # A path under the mount, also inside a shell line (the preStop hook's).
            text = re.sub(rf"(?<![\w/.-]){re.escape(m['mountPath'])}(?=/|\s|\"|$)",
                          str(pod.root / m["name"]), text)
        return text

    def prepare(self, pod: Pod) -> None:
        c = pod.container
        env = container_env(c, {"metadata.name": pod.name, "status.podIP": pod.ip},
                            self.secrets)
        pod.env = {k: self.localize(v, pod) for k, v in env.items()}
        from tests.helm.chart import expand

        cmd = c.get("command") or ["xshard"]  # the image's entrypoint
        pod.argv = [self.localize(expand(a, env), pod) for a in cmd + c.get("args", [])]
        volumes = {v["name"]: v for v in pod_spec(pod.workload).get("volumes", [])}
        for m in c.get("volumeMounts", []):
            d = pod.root / m["name"]
            d.mkdir(exist_ok=True)
            secret = volumes.get(m["name"], {}).get("secret")
            if secret:  # a Secret volume: one file per key, mode from defaultMode
                for key, data in self.files[secret["secretName"]].items():
                    (d / key).write_bytes(data)
                    (d / key).chmod(secret.get("defaultMode", 0o644))

    def proc_env(self, pod: Pod) -> dict[str, str]:
        keep = {k: os.environ[k] for k in ("HOME", "LANG", "SYSTEMROOT") if k in os.environ}
        return {**keep, **pod.env, "PATH": f"{self.bin}:{os.environ['PATH']}",
                "PYTHONPATH": str(REPO)}

    def start(self, pod: Pod) -> None:
        self.prepare(pod)
        log = open(pod.log, "ab")  # noqa: SIM115 - closed with the process
        pod.proc = subprocess.Popen(pod.argv, env=self.proc_env(pod), cwd=pod.root,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        log.close()

    def run_job(self, pod: Pod) -> subprocess.CompletedProcess:
        """restartPolicy OnFailure: run until it succeeds, at most backoffLimit + 1 times."""
        self.prepare(pod)
        tries = pod.workload["spec"]["backoffLimit"] + 1
        for i in range(tries):
            r = subprocess.run(pod.argv, env=self.proc_env(pod), cwd=pod.root, text=True,
                               capture_output=True, timeout=60)
            if r.returncode == 0 or i == tries - 1:
                return r
            time.sleep(0.5)
        raise AssertionError("unreachable")

    def exec(self, pod: Pod, command: list[str]) -> subprocess.CompletedProcess:
        """An exec handler (preStop) inside the pod: its environment, no $(VAR) expansion."""
        return subprocess.run([self.localize(a, pod) for a in command],
                              env=self.proc_env(pod), cwd=pod.root, text=True,
                              capture_output=True, timeout=60)

    def stop_all(self, pods: list[Pod] | None = None) -> dict[str, int]:
        """SIGTERM, then SIGKILL after the grace period, as the kubelet; the exit codes."""
        pods = self.pods if pods is None else pods
        for p in pods:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
        codes = {}
        for p in pods:
            if p.proc is None:
                continue
            try:
                p.proc.wait(30)  # Kubernetes' default terminationGracePeriodSeconds
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait(10)
            codes[p.name] = p.proc.returncode
        return codes

    def install(self, job_runs: int = 1) -> tuple[list[Pod], list[Pod], list[Pod], list[Pod]]:
        """What `helm install` sets off: etcd's members bootstrap together (podManagement
        Policy: Parallel), then the xshard pods start and the post-install Job runs (again
        with job_runs 2: a reinstall over etcd's data must pass too); ready when all are.
        Returns (etcd, nodes, controllers, routers)."""
        etcd, nodes = self.component("etcd"), self.component("node")
        controllers, routers = self.component("controller"), self.component("router")
        for p in etcd:
            self.start(p)
        self.wait_ready(etcd, 60)
        for p in nodes + controllers + routers:
            self.start(p)
        self.wait_ready(nodes + controllers + routers, 60, "livenessProbe")
        (job,) = [p for p in self.pods if p.workload["kind"] == "Job"]
        for _ in range(job_runs):
            r = self.run_job(job)
            assert r.returncode == 0, (r.stdout, r.stderr)
        self.wait_ready(etcd + nodes + controllers + routers, 90)
        return etcd, nodes, controllers, routers

    def stop_all_cleanly(self) -> None:
        """Every xshard process stops with 0 on the kubelet's SIGTERM (etcd may stop first)."""
        codes = self.stop_all()
        bad = {n: c for n, c in codes.items() if c != 0 and "etcd" not in n}
        assert bad == {}, "\n".join(f"--- {p.name}: {codes[p.name]}\n{p.tail()}"
                                     for p in self.pods if p.name in bad)

    def wait_ready(self, pods: list[Pod], timeout: float, kind: str = "readinessProbe") -> None:
        def ready() -> bool:
            for p in pods:
                if p.proc is not None and p.proc.poll() is not None:
                    raise AssertionError(f"{p.name} exited {p.proc.returncode}:\n{p.tail()}")
            return all(p.probe(kind) for p in pods)

        try:
            wait_until(ready, timeout, interval=0.2, what=f"{kind} of {[p.name for p in pods]}")
        except TimeoutError:
            bad = [p for p in pods if not p.probe(kind)]
            raise AssertionError("\n".join(f"--- {p.name} ({p.argv})\n{p.tail()}"
                                           for p in bad)) from None


def _ports_values() -> dict[str, Any]:
    """Ports from the values, as a user sets them (each pod has an address of its own)."""
    ports = {k: free_port() for k in ("node", "router", "metrics", "client", "peer",
                                      "emetrics", "ntls", "rtls")}
    return {
        "auth": {"enabled": True, "password": PASSWORD},
        "node": {"port": ports["node"], "tlsPort": ports["ntls"]},
        "router": {"replicas": 1, "port": ports["router"], "tlsPort": ports["rtls"]},
        "metrics": {"port": ports["metrics"]},
        "etcd": {"clientPort": ports["client"], "peerPort": ports["peer"],
                 "metricsPort": ports["emetrics"]},
    }


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _kubelet(values: dict[str, Any], base: Path,
             user_secrets: dict[str, dict[str, bytes]] | None = None) -> FakeKubelet:
    try:
        find_etcd()
    except EtcdError as e:
        pytest.skip(f"no etcd: {e}")
    k = FakeKubelet(manifests(_merge(_ports_values(), values)), base, user_secrets)
    for p in k.pods:
        for c in p.container.get("ports", []):
            assert not port_in_use(c["containerPort"], p.ip), (p.name, c)
    return k


@pytest.fixture
def kubelet(tmp_path: Path) -> Any:
    k = _kubelet({"shards": 2, "replicasPerShard": 1}, tmp_path)
    try:
        yield k
    finally:
        k.stop_all()


def test_rendered_processes_form_a_cluster_that_serves_through_the_router(kubelet) -> None:  # noqa: ANN001
    k = kubelet
    # The post-install hook runs twice: a rerun (a reinstall over etcd's data) still passes.
    etcd, nodes, controllers, routers = k.install(job_runs=2)
    assert (len(etcd), len(nodes), len(controllers), len(routers)) == (3, 4, 2, 1)

    (router,) = routers
    rc = redis.Redis(router.ip, router.port("resp"), password=PASSWORD, decode_responses=True)
    keys = [f"events:{i}" for i in range(40)]
    ids = {key: rc.xadd(key, {"n": str(i)}) for i, key in enumerate(keys)}
    got = rc.xread(dict.fromkeys(keys, "0"))
    assert {s: [(e[0], e[1]) for e in entries] for s, entries in got} == {
        key: [(ids[key], {"n": str(i)})] for i, key in enumerate(keys)}
    # Both shards hold some of them: the slot map of `xshard create` is in use.
    sizes = []
    for p in nodes:
        nc = redis.Redis(p.ip, p.port("resp"), password=PASSWORD, decode_responses=True)
        if nc.execute_command("ROLE")[0] == "master":
            sizes.append(nc.dbsize())
    assert len(sizes) == 2 and all(sizes) and sum(sizes) == len(keys), sizes

    # The preStop hook of a replica moves nothing. (`kubectl exec ... xshard status` finds
    # etcd from the pod's environment.)
    args = nodes[0].argv
    status = k.exec(nodes[0], ["xshard", "status", "--cluster", args[args.index("--cluster") + 1]])
    assert status.returncode == 0, status
    print(status.stdout)
    replica = next(p for p in nodes if f"{p.name}  replica" in status.stdout)
    hook = replica.container["lifecycle"]["preStop"]["exec"]["command"]
    r = k.exec(replica, hook)
    assert r.returncode == 0 and "is not the primary" in r.stdout, (r.stdout, r.stderr)
    # The primary's hook switches its shard over before the pod stops; the router follows.
    shard = replica.workload["metadata"]["labels"]["xshard/shard"]
    primary = next(p for p in nodes if p.workload is replica.workload and p is not replica)
    r = k.exec(primary, hook)
    assert r.returncode == 0 and f"{replica.name} is the new primary" in r.stdout, (
        r.stdout, r.stderr)
    primary.proc.send_signal(signal.SIGTERM)
    assert primary.proc.wait(30) == 0, primary.tail()
    more = {key: rc.xadd(key, {"after": shard}) for key in keys}
    got = dict(rc.xread(dict.fromkeys(keys, "0")))
    assert all([e[0] for e in got[key]] == [ids[key], more[key]] for key in keys)
    # Every xshard process stops cleanly on the kubelet's SIGTERM (PID 1 in a container
    # ignores the signals it does not handle), also when etcd stops with them (helm
    # uninstall), well within the grace period.
    k.stop_all_cleanly()


@pytest.fixture
def tls_kubelet(tmp_path: Path) -> Any:
    """The TLS-only chart (tls.enabled, plainPort false, client certificates required) with
    a Secret of certificates from control/certs.py: one shard of a primary and a replica."""
    certs = pytest.importorskip("control.certs")
    pytest.importorskip("cryptography")
    t = certs.make_tls(tmp_path / "certs")
    secret = {"tls.crt": t.server_cert.read_bytes(), "tls.key": t.server_key.read_bytes(),
              "ca.crt": t.ca.read_bytes()}
    values = {"shards": 1, "replicasPerShard": 1, "etcd": {"replicas": 1},
              "controller": {"replicas": 1},
              "tls": {"enabled": True, "existingSecret": "wiring-tls"}}
    (tmp_path / "pods").mkdir()
    k = _kubelet(values, tmp_path / "pods", {"wiring-tls": secret})
    try:
        yield k, t
    finally:
        k.stop_all()


def test_rendered_tls_processes_serve_redis_py_over_tls(tls_kubelet) -> None:  # noqa: ANN001
    """TLS only: the nodes replicate over TLS, the router reaches them over TLS, redis-py
    with ssl=True writes and reads through the router, and the preStop hook hands a shard
    over through the nodes' TLS ports."""
    k, tls = tls_kubelet
    etcd, nodes, controllers, routers = k.install()
    assert (len(etcd), len(nodes), len(controllers), len(routers)) == (1, 2, 1, 1)

    def client(p: Pod, **kw: Any) -> redis.Redis:
        return redis.Redis(p.ip, p.port("resp-tls"), password=PASSWORD, decode_responses=True,
                           ssl=True, ssl_ca_certs=str(tls.ca), ssl_certfile=str(tls.client_cert),
                           ssl_keyfile=str(tls.client_key), ssl_check_hostname=False,
                           socket_timeout=10, **kw)

    (router,) = routers
    assert "resp" not in {c["name"] for c in router.container["ports"]}  # TLS only
    rc = client(router)
    keys = [f"tls:{i}" for i in range(20)]
    ids = {key: rc.xadd(key, {"n": str(i)}) for i, key in enumerate(keys)}
    got = rc.xread(dict.fromkeys(keys, "0"))
    assert {s: [(e[0], e[1]) for e in entries] for s, entries in got} == {
        key: [(ids[key], {"n": str(i)})] for i, key in enumerate(keys)}
    # Without a client certificate the router refuses the handshake (authClients yes).
    bare = redis.Redis(router.ip, router.port("resp-tls"), ssl=True, ssl_ca_certs=str(tls.ca),
                       ssl_check_hostname=False, socket_timeout=5)
    with pytest.raises(redis.ConnectionError):
        bare.ping()
    # The replica has them: it synced over TLS from its primary.
    roles = {p.name: client(p).execute_command("ROLE")[0] for p in nodes}
    primary = next(p for p in nodes if roles[p.name] == "master")
    replica = next(p for p in nodes if p is not primary)
    wait_until(lambda: client(replica).dbsize() == len(keys), 30, "the replica's copy")
    # The primary's preStop hook switches over, through the nodes' TLS ports.
    hook = primary.container["lifecycle"]["preStop"]["exec"]["command"]
    r = k.exec(primary, hook)
    assert r.returncode == 0 and f"{replica.name} is the new primary" in r.stdout, (
        r.stdout, r.stderr)
    primary.proc.send_signal(signal.SIGTERM)
    assert primary.proc.wait(30) == 0, primary.tail()
    more = {key: rc.xadd(key, {"after": "switchover"}) for key in keys}
    got = dict(rc.xread(dict.fromkeys(keys, "0")))
    assert all([e[0] for e in got[key]] == [ids[key], more[key]] for key in keys)
    k.stop_all_cleanly()
