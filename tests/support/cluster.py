"""One cluster factory for the router, control, Spark and Helm-wiring tests.

`start_cluster` starts real processes and `Cluster.stop` stops every one of them:
- N shards x R replicas of `xshard node` (nodes are named `s<shard>n<i>`; `n0` starts first);
- with an etcd URL, the nodes join that etcd as cluster members (a uniquely named cluster made
  with `xshard create`, so tests sharing one etcd never see each other's keys), and controllers
  can be started; without one, replicas follow their shard's `n0` with --replicaof and the
  routers read a static topology file written here (primaries `n0`);
- any number of routers (`xshard router`), in front of either.

Nodes and routers are `NodeHandle`s, so `.client()`, `.kill()`, `.start()` and the log tails
on failure work as for any other test server. The `xcluster` fixture (tests/conftest.py) is the
function-scoped factory; a module that wants one cluster for all its tests calls
`start_cluster` itself and stops it in its fixture's teardown.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import redis

from base.store import View, even_slots, read_view
from node.slots import key_slot, keys_in_slots
from tests.conftest import REPO, NodeHandle, _node_env, spawn_node
from tests.support.procs import LOCALHOST, ServerProcess, wait_until

__all__ = ["Cluster", "keys_in_slots", "populate", "run_cli", "start_cluster"]

_names = itertools.count()


def run_cli(*args: str, timeout: float = 60,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`xshard ARGS` as a subprocess of this interpreter, output captured as text."""
    return subprocess.run([sys.executable, "-m", "control.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO)


class Cluster:
    """Shards of real nodes, optionally etcd membership and controllers, and routers."""

    def __init__(self, base: Path, shards: int, replicas: int, etcd_url: str | None = None,
                 name: str = "", node_args: tuple[str, ...] = ()) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.shards = shards
        self.replicas = replicas
        self.url = etcd_url
        self.name = name or f"t{next(_names)}-{base.name[:20]}"
        self.node_args = node_args
        self.nodes: dict[str, NodeHandle] = {}
        self.node_shard: dict[str, str] = {}
        self.controllers: list[ServerProcess] = []
        self.routers: list[NodeHandle] = []
        self.slots = even_slots([str(s) for s in range(shards)])
        self.topology_file: Path | None = None

    # --- nodes ---------------------------------------------------------------------------------
    def start_node(self, shard: str, nid: str, *extra: str) -> NodeHandle:
        args: tuple[str, ...] = (*self.node_args, *extra)
        if self.url is not None:
            args = ("--etcd", self.url, "--cluster", self.name, "--shard", shard,
                    "--node-id", nid, *args)
        elif not nid.endswith("n0"):
            primary = self.nodes[f"s{shard}n0"]
            args = ("--replicaof", f"{primary.host} {primary.port}", *args)
        h = spawn_node(self.base / nid, *args, name=nid)
        self.nodes[nid] = h
        self.node_shard[nid] = shard
        return h

    def primary(self, shard: int | str) -> NodeHandle:
        """The shard's primary: from etcd when the cluster has one, else `s<shard>n0`."""
        if self.url is not None:
            pid = self.primary_id(str(shard))
            assert pid is not None, f"shard {shard} has no primary"
            return self.nodes[pid]
        return self.nodes[f"s{shard}n0"]

    def primaries(self) -> list[NodeHandle]:
        return [self.primary(s) for s in range(self.shards)]

    def shard_of(self, key: bytes | str) -> int:
        """The shard that owns `key` in the initial, even slot split."""
        s = key_slot(key.encode() if isinstance(key, str) else key)
        return next(int(sid) for a, b, sid in self.slots if a <= s <= b)

    def keys_on_each_shard(self, prefix: str = "k") -> list[str]:
        """One key per shard, in shard order."""
        out: dict[int, str] = {}
        i = 0
        while len(out) < self.shards:
            k = f"{prefix}{i}"
            out.setdefault(self.shard_of(k), k)
            i += 1
        return [out[s] for s in range(self.shards)]

    def keys_in_other_slots(self, key: str, n: int, prefix: str = "o") -> list[str]:
        """`n` keys on `key`'s shard, each in a slot of its own that differs from `key`'s."""
        shard, slots = self.shard_of(key), {key_slot(key.encode())}
        out: list[str] = []
        i = 0
        while len(out) < n:
            k = f"{prefix}{i}"
            if self.shard_of(k) == shard and key_slot(k.encode()) not in slots:
                slots.add(key_slot(k.encode()))
                out.append(k)
            i += 1
        return out

    # --- etcd membership -----------------------------------------------------------------------
    def view(self) -> View:
        assert self.url is not None, "a cluster without etcd has no view"
        return read_view(self.url, self.name)

    def primary_id(self, shard: str) -> str | None:
        e = self.view().shards.get(shard)
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

    def start_controller(self, *args: str) -> ServerProcess:
        assert self.url is not None, "a controller needs etcd"
        i = len(self.controllers)
        url = self.url
        p = ServerProcess(
            f"controller{i}",
            lambda port: [sys.executable, "-m", "control.cli", "controller", "--etcd", url,
                          "--cluster", self.name, "--id", f"ctl{i}", *args],
            self.base / f"controller{i}.log", cwd=REPO, env=_node_env(),
            probe=lambda h, p: True)
        p.start()
        self.controllers.append(p)
        return p

    # --- routers -------------------------------------------------------------------------------
    def _write_topology(self) -> Path:
        """The static map a router reads without etcd: `n0` primaries, the rest replicas."""
        nodes, shards = {}, {}
        for s in range(self.shards):
            members = [n for n, sh in self.node_shard.items() if sh == str(s)]
            for nid in members:
                h = self.nodes[nid]
                nodes[nid] = {"id": nid, "host": h.host, "port": h.port, "shard": str(s),
                              "role": "primary" if nid.endswith("n0") else "replica"}
            shards[str(s)] = {"primary": f"s{s}n0",
                              "replicas": [n for n in members if not n.endswith("n0")],
                              "epoch": 1}
        path = self.base / "topology.json"
        path.write_text(json.dumps({"nodes": nodes, "shards": shards, "slots": self.slots}))
        return path

    def start_router(self, *args: str, router_id: str = "") -> NodeHandle:
        i = len(self.routers)
        if self.url is not None:
            source: tuple[str, ...] = ("--etcd", self.url, "--cluster", self.name)
        else:
            if self.topology_file is None:
                self.topology_file = self._write_topology()
            source = ("--topology", str(self.topology_file))
        if router_id:
            source += ("--router-id", router_id)

        def argv(port: int) -> list[str]:
            return [sys.executable, "-m", "control.cli", "router", "--port", str(port),
                    *source, *args]

        proc = ServerProcess(f"router{i}", argv, self.base / f"router{i}.log", cwd=REPO,
                             env=_node_env()).start()
        h = NodeHandle(f"router{i}", LOCALHOST, proc.port, proc)
        self.routers.append(h)
        return h

    @property
    def router(self) -> NodeHandle:
        return self.routers[0]

    def client(self, router: int = 0, **kw: object) -> redis.Redis:
        """A redis-py client to a router (closed when the cluster stops)."""
        return self.routers[router].client(**kw)  # type: ignore[arg-type]

    def handles(self) -> list[NodeHandle]:
        """Every node and router, for log tails on failure."""
        return [*self.nodes.values(), *self.routers]

    def stop(self) -> None:
        for r in self.routers:
            r.close()
        for c in self.controllers:
            c.stop()
        for h in self.nodes.values():
            h.close()


def start_cluster(base: Path, shards: int = 1, replicas: int = 0, *,
                  etcd_url: str | None = None, controller: bool = False, routers: int = 0,
                  node_args: tuple[str, ...] = (), router_args: tuple[str, ...] = ()) -> Cluster:
    """Start a cluster and return it once it serves; on any failure, stop what started."""
    return populate(Cluster(base, shards, replicas, etcd_url, node_args=node_args),
                    int(controller), routers, router_args)


def populate(c: Cluster, controllers: int = 0, routers: int = 0,
             router_args: tuple[str, ...] = ()) -> Cluster:
    """Create `c` in etcd (when it has one), start its nodes (the `n0` first: they become the
    primaries), controllers and routers, and return it once it serves; on any failure, stop
    what started."""
    try:
        if c.url is not None:
            r = run_cli("create", "--etcd", c.url, "--cluster", c.name, "--shards",
                        str(c.shards), "--replicas", str(c.replicas))
            assert r.returncode == 0, r.stderr
        for i in range(1 + c.replicas):
            for s in range(c.shards):
                c.start_node(str(s), f"s{s}n{i}")
            if i == 0 and c.url is not None:
                c.wait_ready()  # the n0 nodes become the primaries
        for _ in range(controllers):
            c.start_controller()
        if c.url is not None:
            c.wait_ready()
        for _ in range(routers):
            c.start_router(*router_args)
    except BaseException:
        c.stop()
        raise
    return c
