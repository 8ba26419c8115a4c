"""The cluster-shaped targets of e2e_bench.py: a real Redis Cluster and a real xshard cluster
(etcd, controller, router), each 3 shards x (primary + replica) with `appendonly yes` and
`appendfsync everysec`, started into a router_bench `Procs` so that every server process is
measured and stopped like the single-process targets.

The client's port is the owning primary of the benchmark's stream (a cluster-aware client's
path), found by asking a primary and following its MOVED, or a router in front of the shards.
"""

from __future__ import annotations

import subprocess
import sys
import time

import hiredis

from base.store import read_view
from benchmarks import harness
from benchmarks.router_bench import Procs
from control.etcd import EtcdProcess
from control.ports import CLUSTER_MAX_PORT, port_in_use

AOF = ("--appendonly", "yes", "--appendfsync", "everysec")
SHARDS = 3
CLUSTER = "e2e"


def owner_port(port: int, key: bytes) -> int:
    """The port of the primary that owns `key`'s slot, asked of the node on `port`."""
    try:
        with harness.Conn(port) as c:
            c.call(b"EXISTS", key)
    except hiredis.ReplyError as e:
        if str(e).startswith("MOVED "):
            return int(str(e).rsplit(":", 1)[1])
        raise
    return port


def _cluster_port() -> int:
    """A free port that redis-server's cluster mode accepts, with its bus port free too."""
    while True:
        p = harness.free_port()
        if p <= CLUSTER_MAX_PORT and not port_in_use(p + 10000):
            return p


def _wait(pred, timeout: float, what: str) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (OSError, ConnectionError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not within {timeout:.0f} s")


def _info(port: int, section: bytes, cmd: bytes = b"INFO") -> str:
    with harness.Conn(port) as c:
        r = c.call(*cmd.split(), section) if section else c.call(*cmd.split())
    return r.decode() if isinstance(r, bytes) else str(r)


def redis_cluster(procs: Procs, key: bytes) -> int:
    """6 redis-servers in cluster mode joined by `redis-cli --cluster create
    --cluster-replicas 1`; returns the port of the primary that owns `key`."""
    ports = []
    for i in range(2 * SHARDS):
        port = _cluster_port()
        d = procs.dir / f"rc{i}"
        d.mkdir()
        procs.start(f"rc{i}", ["redis-server", "--port", str(port), "--bind", harness.HOST,
                               "--save", "", "--dir", str(d), "--daemonize", "no",
                               "--cluster-enabled", "yes", "--cluster-config-file",
                               str(d / "nodes.conf"), *AOF], port)
        ports.append(port)
    subprocess.run(["redis-cli", "--cluster", "create",
                    *[f"{harness.HOST}:{p}" for p in ports], "--cluster-replicas", "1",
                    "--cluster-yes"], check=True, capture_output=True, timeout=60)
    _wait(lambda: all("cluster_state:ok" in _info(p, b"", b"CLUSTER INFO") for p in ports), 30,
          "the Redis Cluster's state ok")
    own = owner_port(ports[0], key)
    # Its replica has finished the first sync (else the load meets a full resync).
    _wait(lambda: "connected_slaves:1" in _info(own, b"replication")
          and "state=online" in _info(own, b"replication"), 30, "the owner's replica")
    return own


class XshardCluster:
    """An etcd, `xshard create --shards 3`, a node per (shard, role), a controller and a
    router (none with `router=False`: a cluster-aware client's deployment), all started into
    `procs` (etcd and the controller too: their CPU counts)."""

    def __init__(self, procs: Procs, router: bool = True) -> None:
        self.procs = procs
        self.etcd = EtcdProcess(procs.dir / "etcd")
        self.url = self.etcd.start()
        assert self.etcd.proc is not None
        procs.procs.append(self.etcd.proc)
        self.cli("create", "--shards", str(SHARDS), "--replicas", "1")
        self.primaries: list[int] = []
        for s in range(SHARDS):
            self.primaries.append(self.node(s, 0))
        _wait(lambda: all(self.serves(p) for p in self.primaries), 30, "the primaries")
        self.replicas = [self.node(s, 1) for s in range(SHARDS)]
        _wait(lambda: all("connected_slaves:1" in _info(p, b"replication")
                          for p in self.primaries), 30, "the replicas")
        with open(procs.dir / "controller.log", "wb") as log:
            procs.procs.append(subprocess.Popen(
                self._argv("controller", "--id", "ctl0"), cwd=harness.REPO_ROOT, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        # Elected before the load starts: its start-up (imports, lease, campaign, ~0.5 s of
        # CPU) would otherwise count as the run's, ~25 us per entry at 2,000/s for 10 s.
        _wait(lambda: read_view(self.url, CLUSTER).leader is not None, 30,
              "the controller's election")
        self.router = 0
        if router:
            rport = harness.free_port()
            self.router = procs.start("router", self._argv("router", "--port", str(rport)),
                                      rport)

    def _argv(self, *argv: str) -> list[str]:
        return [sys.executable, "-m", "control.cli", *argv, "--etcd", self.url, "--cluster",
                CLUSTER]

    def cli(self, *argv: str) -> str:
        """`xshard ARGV` against this cluster, run to completion; its stdout."""
        return subprocess.run(self._argv(*argv), cwd=harness.REPO_ROOT, check=True,
                              capture_output=True, text=True, timeout=60).stdout

    def node(self, shard: int, i: int) -> int:
        port = harness.free_port()
        nid = f"s{shard}n{i}"
        d = self.procs.dir / nid
        d.mkdir()
        return self.procs.start(nid, self._argv("node", "--port", str(port), "--dir", str(d),
                                                "--shard", str(shard), "--node-id", nid, *AOF),
                                port)

    @staticmethod
    def serves(port: int) -> bool:
        """The node took its role: it answers a write of a key in its slots."""
        return "role:master" in _info(port, b"replication")

    def owner(self, key: bytes) -> int:
        own = owner_port(self.primaries[0], key)
        _wait(lambda: "state=online" in _info(own, b"replication"), 30, "the owner's replica")
        return own

    def pstream(self, key: bytes, partitions: int) -> int:
        """Make `key` a partitioned stream; return the router's port once the router resolves
        the name (a group made through it lands on the partitions, not on a plain key)."""
        self.cli("stream", "create", key.decode(), "--partitions", str(partitions))
        plain = owner_port(self.primaries[0], key)

        def resolved() -> bool:
            with harness.Conn(self.router) as c:
                c.call(b"XGROUP", b"CREATE", key, b"g", b"$", b"MKSTREAM")
            with harness.Conn(plain) as c:
                if c.call(b"EXISTS", key) == 0:
                    return True
                c.call(b"DEL", key)  # made as a plain stream before the router knew
                return False

        _wait(resolved, 30, "the router resolving the partitioned stream")
        return self.router
