"""A cluster that speaks TLS only: nodes with `--port 0 --tls-port P` (tls-replication and
tls-cluster on), a controller and a router that reach them with --tls-cluster, and clients
on the router's TLS port. One cluster for the module; the failover test runs last.

What it shows: nodes register their TLS port in etcd and replicate over TLS; the router
forwards XADD/XREAD over TLS; RedisCluster follows CLUSTER SLOTS and -MOVED to TLS ports
(through the router and straight to the nodes); redis-cli -c --tls follows a redirection;
`xshard status` reads offsets over TLS; the controller promotes a replica over TLS.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from base.store import read_view
from node.slots import key_slot
from tests.conftest import REPO, _node_env
from tests.support.cluster import run_cli
from tests.support.ioredis import ioredis_dir
from tests.support.procs import ServerProcess, wait_until
from tests.support.tls import Certs, tls_certs, tls_ping

__all__ = ["ioredis_dir", "tls_certs"]

pytestmark = [pytest.mark.etcd, pytest.mark.slow]

REDIS_CLI = shutil.which("redis-cli")


@dataclass
class TlsCluster:
    url: str
    name: str
    certs: Certs
    base: Path
    nodes: dict[str, ServerProcess] = field(default_factory=dict)
    procs: list[ServerProcess] = field(default_factory=list)
    router_port: int = 0

    @property
    def tls(self) -> tuple[str, ...]:
        return (*self.certs.server_args("yes"), "--tls-cluster", "yes")

    def etcd(self) -> tuple[str, ...]:
        return ("--etcd", self.url, "--cluster", self.name)

    def start(self, name: str, argv: list[str], tls_probe: bool = True) -> ServerProcess:
        p = ServerProcess(name, lambda port: [a.replace("{port}", str(port)) for a in argv],
                          self.base / f"{name}.log", cwd=REPO, env=_node_env(),
                          probe=(lambda _h, port: tls_ping(self.certs, port)) if tls_probe
                          else (lambda _h, _p: True))
        p.start()
        self.procs.append(p)
        return p

    def start_node(self, shard: str, nid: str) -> ServerProcess:
        d = self.base / nid
        d.mkdir(exist_ok=True)
        self.nodes[nid] = self.start(nid, [
            sys.executable, "-m", "control.cli", "node", "--port", "0", "--tls-port", "{port}",
            "--dir", str(d), *self.etcd(), "--shard", shard, "--node-id", nid, *self.tls,
            "--tls-replication", "yes"])
        return self.nodes[nid]

    def client(self, port: int) -> redis.Redis:
        return self.certs.client(port)

    def primary(self, shard: str) -> str | None:
        return read_view(self.url, self.name).shards[shard].value.primary

    def ready(self) -> bool:
        v = read_view(self.url, self.name)
        return all(v.live(e.value.primary) for e in v.shards.values()) and all(
            n in v.nodes for n in self.nodes)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture(scope="module")
def tc(tmp_path_factory: pytest.TempPathFactory, etcd_url: str,
       tls_certs: Certs) -> Iterator[TlsCluster]:
    base = tmp_path_factory.mktemp("tls-cluster")
    c = TlsCluster(etcd_url, f"tls{base.name[-6:]}", tls_certs, base)
    try:
        r = run_cli("create", *c.etcd(), "--shards", "2", "--replicas", "1")
        assert r.returncode == 0, r.stderr
        for i in range(2):
            for s in ("0", "1"):
                c.start_node(s, f"s{s}n{i}")
            wait_until(c.ready, 30, what="the TLS-only nodes registered")
        t = tls_certs.good  # the controller has no listener: client-side options only
        c.start("controller", [sys.executable, "-m", "control.cli", "controller", *c.etcd(),
                               "--id", "ctl0", "--tls-cluster", "yes", "--tls-cert-file",
                               str(t.client_cert), "--tls-key-file", str(t.client_key),
                               "--tls-ca-cert-file", str(t.ca)], tls_probe=False)
        router = c.start("router", [sys.executable, "-m", "control.cli", "router", "--port",
                                    "0", "--tls-port", "{port}", *c.etcd(), *c.tls])
        c.router_port = router.port
        yield c
    finally:
        c.stop()


def _keys_per_shard(c: TlsCluster) -> dict[str, str]:
    """One key per shard, by the slot map in etcd."""
    v = read_view(c.url, c.name)
    owner = {}
    assert v.slots is not None
    for start, end, sid in v.slots.value:
        owner.update(dict.fromkeys(range(start, end + 1), str(sid)))
    out: dict[str, str] = {}
    i = 0
    while len(out) < 2:
        k = f"tls{i}"
        out.setdefault(owner[key_slot(k.encode())], k)
        i += 1
    return out


def test_nodes_register_their_tls_port_and_replicate_over_tls(tc: TlsCluster) -> None:
    v = read_view(tc.url, tc.name)
    for nid, proc in tc.nodes.items():
        rec = v.nodes[nid].value
        assert (rec.port, rec.tls_port) == (0, proc.port)
    for s in ("0", "1"):
        primary = tc.nodes[tc.primary(s)]  # type: ignore[index]
        info = tc.client(primary.port).info("replication")
        assert info["connected_slaves"] == 1 and info["slave0"]["state"] == "online"


def test_router_over_tls_serves_xadd_and_xread(tc: TlsCluster) -> None:
    r = tc.client(tc.router_port)
    keys = _keys_per_shard(tc)
    for k in keys.values():
        r.xadd(k, {"a": "1"}, id="1-1")
        r.xgroup_create(k, "g", id="0")
    got = r.xread({k: "0" for k in keys.values()})
    assert sorted(name for name, _ in got) == sorted(k.encode() for k in keys.values())
    k = keys["1"]
    assert r.xreadgroup("g", "c", {k: ">"}) == [[k.encode(), [(b"1-1", {b"a": b"1"})]]]
    assert r.xack(k, "g", "1-1") == 1
    assert r.info("server")["tcp_port"] == tc.router_port
    # The router asks for client certificates too (tls-auth-clients yes).
    with pytest.raises(redis.ConnectionError):
        tc.certs.client(tc.router_port, cert=False).ping()


def test_redis_cluster_over_tls_through_the_router_and_the_nodes(tc: TlsCluster) -> None:
    t = tc.certs.good
    kw = {"ssl": True, "ssl_ca_certs": str(t.ca), "ssl_certfile": str(t.client_cert),
          "ssl_keyfile": str(t.client_key)}
    keys = _keys_per_shard(tc)
    for port in (tc.router_port, tc.nodes["s0n0"].port):
        rc = RedisCluster(host="127.0.0.1", port=port, **kw)  # type: ignore[arg-type]
        for k in keys.values():
            rc.xadd(f"{{{k}}}rc", {"p": port})
            assert rc.xlen(f"{{{k}}}rc") >= 1
        rc.close()
    # A node tells TLS clients TLS ports: CLUSTER SHARDS has tls-port and no plain port.
    shards = tc.client(tc.nodes["s0n0"].port).cluster("SHARDS")
    nodes = [n for sh in shards for n in sh[b"nodes"]]
    assert {n[b"tls-port"] for n in nodes} == {p.port for p in tc.nodes.values()}
    assert all(b"port" not in n for n in nodes)


IOREDIS_TLS = r"""
const fs = require("fs");
const Redis = require("ioredis");
const [port, ca, cert, key, k0, k1] = process.argv.slice(2);
const tls = {ca: fs.readFileSync(ca), cert: fs.readFileSync(cert), key: fs.readFileSync(key)};
const cluster = new Redis.Cluster([{host: "127.0.0.1", port: Number(port)}],
                                  {redisOptions: {tls, maxRetriesPerRequest: 3}});
(async () => {
  const ids = [];
  for (const k of [k0, k1]) ids.push(await cluster.xadd(`{${k}}io`, "*", "f", "v"));
  const lens = [];
  for (const k of [k0, k1]) lens.push(await cluster.xlen(`{${k}}io`));
  console.log(JSON.stringify({ids, lens}));
  cluster.disconnect();
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


def test_ioredis_cluster_over_tls_through_the_router_and_the_nodes(
        tc: TlsCluster, ioredis_dir: Path) -> None:
    script = ioredis_dir / "tls_cluster.js"
    script.write_text(IOREDIS_TLS)
    t = tc.certs.good
    keys = _keys_per_shard(tc)
    for port in (tc.router_port, tc.nodes[tc.primary("0")].port):  # type: ignore[index]
        res = subprocess.run(["node", str(script), str(port), str(t.ca), str(t.client_cert),
                              str(t.client_key), keys["0"], keys["1"]], cwd=ioredis_dir,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr[-1000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert len(out["ids"]) == 2 and all(n >= 1 for n in out["lens"]), out


@pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed")
def test_redis_cli_cluster_mode_follows_moved_over_tls(tc: TlsCluster) -> None:
    keys = _keys_per_shard(tc)
    other = tc.nodes[tc.primary("1")]  # type: ignore[index]
    first = tc.nodes[tc.primary("0")]  # type: ignore[index]
    assert other.port != first.port
    r = subprocess.run([REDIS_CLI, "-c", "-p", str(first.port), *tc.certs.redis_cli_args(),
                        "XADD", f"{{{keys['1']}}}cli", "*", "k", "v"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and "-" in r.stdout.strip(), r.stdout + r.stderr
    assert tc.client(other.port).xlen(f"{{{keys['1']}}}cli") == 1


def test_xshard_status_reads_offsets_over_tls(tc: TlsCluster) -> None:
    t = tc.certs.good
    r = run_cli("status", *tc.etcd(), "--tls-cluster", "yes", "--tls-cert-file",
                str(t.client_cert), "--tls-key-file", str(t.client_key), "--tls-ca-cert-file",
                str(t.ca))
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith(("s0n", "s1n"))
            or " s0n" in line or " s1n" in line]
    assert rows and not any(" ? " in f" {line} " for line in rows), r.stdout
    assert all(f"127.0.0.1:{p.port}" in r.stdout for p in tc.nodes.values()), r.stdout
    r = run_cli("status", *tc.etcd())  # without --tls-cluster: no offsets, and no crash
    assert r.returncode == 0 and " ? " in r.stdout, r.stdout + r.stderr


def test_slots_move_between_tls_only_nodes(tc: TlsCluster) -> None:
    """move-slots --wait with --tls-cluster: the source node copies the slot to the target's
    TLS port (tls-cluster on the nodes), the command follows the progress over TLS; and
    rebalance --by memory sizes the keys over TLS."""
    t = tc.certs.good
    cli_tls = ("--tls-cluster", "yes", "--tls-cert-file", str(t.client_cert), "--tls-key-file",
               str(t.client_key), "--tls-ca-cert-file", str(t.ca))
    key = next(k for k in (f"m{i}" for i in range(100000)) if key_slot(k.encode()) == 1)
    r = tc.client(tc.router_port)
    ids = [r.xadd(key, {"i": i}) for i in range(20)]
    res = run_cli("move-slots", *tc.etcd(), "--to", "1", "--slots", "0-1", "--wait",
                  *cli_tls, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    target = tc.client(tc.nodes[tc.primary("1")].port)  # type: ignore[index]
    assert [e for e, _ in target.xrange(key)] == ids
    assert [e for e, _ in r.xrange(key)] == ids
    res = run_cli("rebalance", *tc.etcd(), "--by", "memory", "--dry-run", *cli_tls)
    assert res.returncode == 0 and "dry run" in res.stdout, res.stdout + res.stderr


def test_a_primary_killed_is_replaced_over_tls_and_acked_writes_survive(tc: TlsCluster) -> None:
    keys = _keys_per_shard(tc)
    k = f"{{{keys['0']}}}fo"
    victim = tc.primary("0")
    assert victim is not None
    p = tc.client(tc.nodes[victim].port)
    acked = [p.xadd(k, {"i": i}) for i in range(50)]
    assert p.wait(1, 10000) == 1
    p.close()
    tc.nodes[victim].kill()
    wait_until(lambda: tc.primary("0") not in (None, victim), 30,
               what="the controller named a new primary over TLS")
    r = tc.client(tc.router_port)
    wait_until(lambda: _writes(r, k), 30, what="writes through the router again")
    got = {e for e, _ in r.xrange(k)}
    assert set(acked) <= got
    # The old primary comes back as a replica and catches up over TLS.
    tc.nodes[victim].start()
    new = tc.client(tc.nodes[tc.primary("0")].port)  # type: ignore[index]
    wait_until(lambda: new.wait(1, 1000) == 1, 30, what="the old primary replicates again")
    old = tc.client(tc.nodes[victim].port)
    old.execute_command("READONLY")
    assert old.xlen(k) == r.xlen(k)


def _writes(r: redis.Redis, key: str) -> bool:
    try:
        r.xadd(key, {"after": 1})
        return True
    except redis.RedisError:
        return False
