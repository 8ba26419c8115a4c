"""A cluster whose every process runs on a host of its own (tests/support/netns.py).

`start_net_cluster(base, net, shards, replicas, controllers, routers)` is
tests/support/cluster.py's `start_cluster` with etcd, each node, each controller and each
router in a namespace of its own, bound to that namespace's address, so a test can cut any
pair apart (`net.cut(c.hosts["s0n0"], c.hosts["etcd"])`) while the test process, in the root
namespace, still reaches all of them. Stop it with `Cluster.stop()` (then `net.close()`).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from control.etcd import EtcdError, EtcdProcess, healthy
from control.ports import free_port
from tests.conftest import REPO, NodeHandle, _node_env
from tests.support.cluster import Cluster, populate
from tests.support.netns import Host, Net
from tests.support.procs import ServerProcess

__all__ = ["NetCluster", "start_net_cluster"]


class NsEtcd(EtcdProcess):
    """A single-member etcd inside `host`'s namespace, on its address."""

    def __init__(self, data_dir: Path, host: Host) -> None:
        # Any port is free in a namespace of its own; free_port keeps to the allowed range.
        super().__init__(data_dir, free_port(), peer_port=free_port(), host=host.ip, fast=True)
        self.ns_host = host

    def _argv(self) -> list[str]:
        return self.ns_host.wrap(super()._argv())

    def start(self, timeout: float = 20.0) -> str:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if healthy(self.url):
                return self.url
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise EtcdError(f"etcd did not start in {self.ns_host.ns}: {tail[-300:]}")


class NetCluster(Cluster):
    """Cluster (tests/support/cluster.py) with one namespace per process: `hosts[name]`."""

    def __init__(self, base: Path, net: Net, shards: int, replicas: int,
                 node_args: tuple[str, ...] = ()) -> None:
        self.net = net
        self.hosts: dict[str, Host] = {}
        base.mkdir(parents=True, exist_ok=True)
        self.etcd = NsEtcd(base / "etcd" / "data", self._host("etcd"))
        self.etcd.start()
        super().__init__(base, shards, replicas, self.etcd.url, node_args=node_args)

    def _host(self, name: str) -> Host:
        h = self.hosts[name] = self.net.host(name)
        return h

    def start_node(self, shard: str, nid: str, *extra: str) -> NodeHandle:
        h = self._host(nid)
        data = self.base / nid / "data"
        data.mkdir(parents=True, exist_ok=True)
        args = ("--etcd", self.url, "--cluster", self.name, "--shard", shard, "--node-id", nid,
                "--bind", h.ip, "--dir", str(data), *self.node_args, *extra)

        def argv(port: int) -> list[str]:
            return h.wrap([sys.executable, "-m", "control.cli", "node", "--port", str(port),
                           *args])

        proc = ServerProcess(nid, argv, self.base / nid / "node.log", host=h.ip,
                             port=free_port(), cwd=REPO, env=_node_env()).start()
        handle = NodeHandle(nid, h.ip, proc.port, proc, data)
        self.nodes[nid] = handle
        self.node_shard[nid] = shard
        return handle

    def start_controller(self, *args: str) -> ServerProcess:
        i = len(self.controllers)
        h = self._host(f"ctl{i}")
        url = self.url
        p = ServerProcess(
            f"controller{i}",
            lambda port: h.wrap([sys.executable, "-m", "control.cli", "controller", "--etcd",
                                 url, "--cluster", self.name, "--id", f"ctl{i}", *args]),
            self.base / f"controller{i}.log", host=h.ip, port=free_port(), cwd=REPO,
            env=_node_env(), probe=lambda _h, _p: True)
        p.start()
        self.controllers.append(p)
        return p

    def start_router(self, *args: str, router_id: str = "") -> NodeHandle:
        i = len(self.routers)
        h = self._host(f"router{i}")
        extra = ("--router-id", router_id) if router_id else ()

        def argv(port: int) -> list[str]:
            return h.wrap([sys.executable, "-m", "control.cli", "router", "--port", str(port),
                           "--bind", h.ip, "--etcd", str(self.url), "--cluster", self.name,
                           *extra, *args])

        proc = ServerProcess(f"router{i}", argv, self.base / f"router{i}.log", host=h.ip,
                             port=free_port(), cwd=REPO, env=_node_env()).start()
        handle = NodeHandle(f"router{i}", h.ip, proc.port, proc)
        self.routers.append(handle)
        return handle

    def host_of(self, nid: str) -> Host:
        return self.hosts[nid]

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.etcd.stop()


def start_net_cluster(base: Path, net: Net, shards: int = 1, replicas: int = 1, *,
                      controllers: int = 1, routers: int = 0,
                      node_args: tuple[str, ...] = (),
                      router_args: tuple[str, ...] = ()) -> NetCluster:
    """Start etcd, the nodes, controllers and routers, each in its namespace; return once
    every shard has its primary. On any failure, stop what started."""
    return populate(NetCluster(base, net, shards, replicas, node_args), controllers, routers,
                    router_args)
