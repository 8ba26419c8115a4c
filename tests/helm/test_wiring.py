"""The chart's wiring, proven by running it: the rendered etcd, node, controller, router and
create-Job containers start here as local processes, with their command lines and environment
as the kubelet would build them, and the cluster they form serves XADD/XREAD through the router.

What stands in for Kubernetes, and nothing more:
- each pod gets its own loopback address (127.X.Y.Z), its "pod IP": `0.0.0.0` in a pod means
  the pod's own addresses, so it becomes that address here;
- DNS: a pod's name under its StatefulSet's headless Service resolves to its address, and a
  ClusterIP Service to its first pod's (no kube-proxy here);
- each volume mount is a directory of the pod; fieldRefs and Secrets come from the rendered
  objects;
- `xshard` and `etcd` on PATH run this checkout (python -m control.cli) and the etcd the tests
  use (control/etcd.py), as the image's entrypoints would.
The probes are the rendered ones, sent to each pod's address."""

from __future__ import annotations

import base64
import os
import random
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

    def __init__(self, docs: list[dict[str, Any]], base: Path) -> None:
        self.docs, self.base = docs, base
        self.pods: list[Pod] = []
        self.dns: dict[str, str] = {}
        self.secrets = {(s["metadata"]["name"], k): base64.b64decode(v).decode()
                        for s in by_kind(docs, "Secret") for k, v in s["data"].items()}
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
            if text == m["mountPath"] or text.startswith(m["mountPath"] + "/"):
                text = str(pod.root / m["name"]) + text[len(m["mountPath"]):]
        return text

    def prepare(self, pod: Pod) -> None:
        c = pod.container
        env = container_env(c, {"metadata.name": pod.name, "status.podIP": pod.ip},
                            self.secrets)
        pod.env = {k: self.localize(v, pod) for k, v in env.items()}
        from tests.helm.chart import expand

        cmd = c.get("command") or ["xshard"]  # the image's entrypoint
        pod.argv = [self.localize(expand(a, env), pod) for a in cmd + c.get("args", [])]
        for m in c.get("volumeMounts", []):
            (pod.root / m["name"]).mkdir(exist_ok=True)

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


@pytest.fixture
def kubelet(tmp_path: Path) -> Any:
    try:
        find_etcd()
    except EtcdError as e:
        pytest.skip(f"no etcd: {e}")
    # Ports from the values, as a user sets them; each pod has an address of its own.
    ports = {k: free_port() for k in ("node", "router", "metrics", "client", "peer", "emetrics")}
    values = {
        "shards": 2, "replicasPerShard": 1,
        "auth": {"enabled": True, "password": PASSWORD},
        "node": {"port": ports["node"]},
        "router": {"replicas": 1, "port": ports["router"]},
        "metrics": {"port": ports["metrics"]},
        "etcd": {"clientPort": ports["client"], "peerPort": ports["peer"],
                 "metricsPort": ports["emetrics"]},
    }
    k = FakeKubelet(manifests(values), tmp_path)
    for p in k.pods:
        for c in p.container.get("ports", []):
            assert not port_in_use(c["containerPort"], p.ip), (p.name, c)
    try:
        yield k
    finally:
        k.stop_all()


def test_rendered_processes_form_a_cluster_that_serves_through_the_router(kubelet) -> None:  # noqa: ANN001
    k = kubelet
    etcd, nodes = k.component("etcd"), k.component("node")
    controllers, routers = k.component("controller"), k.component("router")
    assert (len(etcd), len(nodes), len(controllers), len(routers)) == (3, 4, 2, 1)
    # etcd's members bootstrap together (podManagementPolicy: Parallel).
    for p in etcd:
        k.start(p)
    k.wait_ready(etcd, 60)
    for p in nodes + controllers + routers:
        k.start(p)
    k.wait_ready(nodes + controllers + routers, 60, "livenessProbe")
    # The post-install hook; it may run again (a reinstall over etcd's data) and still pass.
    (job,) = [p for p in k.pods if p.workload["kind"] == "Job"]
    for _ in range(2):
        r = k.run_job(job)
        assert r.returncode == 0, (r.stdout, r.stderr)
    k.wait_ready(etcd + nodes + controllers + routers, 90)

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
    codes = k.stop_all()
    bad = {n: c for n, c in codes.items() if c != 0 and "etcd" not in n}
    assert bad == {}, "\n".join(f"--- {p.name}: {codes[p.name]}\n{p.tail()}"
                                 for p in k.pods if p.name in bad)
