"""Fixtures for the control plane: one real etcd per session, clusters of real node processes.

- `etcd_url` (session): an etcd started through control/etcd.py (the wheel's or PATH's), with
  `--unsafe-no-fsync` for speed; always stopped at the end.
- `xcluster` (function): factory `xcluster(shards=1, replicas=1, controller=True)` -> Cluster:
  creates a uniquely named cluster in that etcd (so tests never see each other's keys),
  starts the nodes (first node of each shard first, so it becomes primary) and a controller,
  and stops them all at teardown.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from control.etcd import EtcdError, EtcdProcess
from control.store import View, read_view
from tests.conftest import REPO, NodeHandle
from tests.support.procs import ServerProcess, wait_until

_names = itertools.count()


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    base = tmp_path_factory.mktemp("etcd")
    proc = None
    try:
        proc = EtcdProcess(base / "data", fast=True)
        proc.start()
    except EtcdError as e:
        pytest.skip(f"no etcd: {e}")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def etcd_url(etcd: EtcdProcess) -> str:
    return etcd.url


def run_cli(*args: str, timeout: float = 60, cwd: Path | None = None):  # noqa: ANN201
    import subprocess

    return subprocess.run([sys.executable, "-m", "control.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO)


class Cluster:
    def __init__(self, url: str, name: str, xnode: Callable[..., NodeHandle], base: Path) -> None:
        self.url = url
        self.name = name
        self.xnode = xnode
        self.base = base
        self.nodes: dict[str, NodeHandle] = {}
        self.node_shard: dict[str, str] = {}
        self.controllers: list[ServerProcess] = []

    def view(self) -> View:
        return read_view(self.url, self.name)

    def start_node(self, shard: str, nid: str, *extra: str) -> NodeHandle:
        h = self.xnode("--etcd", self.url, "--cluster", self.name, "--shard", shard,
                       "--node-id", nid, *extra, name=nid)
        self.nodes[nid] = h
        self.node_shard[nid] = shard
        return h

    def start_controller(self) -> ServerProcess:
        i = len(self.controllers)
        p = ServerProcess(
            f"controller{i}",
            lambda port: [sys.executable, "-m", "control.cli", "controller", "--etcd", self.url,
                          "--cluster", self.name, "--id", f"ctl{i}"],
            self.base / f"controller{i}.log", cwd=REPO, probe=lambda h, p: True)
        p.start()
        self.controllers.append(p)
        return p

    def primary_id(self, shard: str) -> str | None:
        v = self.view()
        e = v.shards.get(shard)
        return e.value.primary if e else None

    def wait_for(self, pred: Callable[[View], bool], timeout: float, what: str) -> View:
        box: list[View] = []

        def check() -> bool:
            v = self.view()
            box[:] = [v]
            return pred(v)

        try:
            wait_until(check, timeout, interval=0.1, what=what)
        except TimeoutError:
            logs = "\n".join(f"--- {c.name}\n{c.log_tail(30)}" for c in self.controllers)
            raise AssertionError(f"timed out waiting for {what}; last view {box}\n{logs}") from None
        return box[0]

    def wait_ready(self, timeout: float = 20.0) -> View:
        """Every shard has a live primary and every started node is registered and a member
        of its shard."""
        return self.wait_for(
            lambda v: all(v.live(e.value.primary) for e in v.shards.values())
            and all(n in v.nodes and n in v.shards[s].value.members()
                    for n, s in self.node_shard.items()), timeout, "cluster ready")

    def stop(self) -> None:
        for c in self.controllers:
            c.stop()


@pytest.fixture
def xcluster(etcd_url: str, xnode: Callable[..., NodeHandle],
             tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def factory(shards: int = 1, replicas: int = 1, controller: bool = True,
                extra: tuple[str, ...] = ()) -> Cluster:
        name = f"t{next(_names)}-{tmp_path.name[:20]}"
        r = run_cli("create", "--etcd", etcd_url, "--cluster", name, "--shards", str(shards),
                    "--replicas", str(replicas))
        assert r.returncode == 0, r.stderr
        c = Cluster(etcd_url, name, xnode, tmp_path)
        made.append(c)
        for i in range(1 + replicas):
            for s in range(shards):
                c.start_node(str(s), f"s{s}n{i}", *extra)
            if i == 0:
                c.wait_ready()
        if controller:
            c.start_controller()
        c.wait_ready()
        return c

    yield factory
    for c in made:
        c.stop()
