"""Cluster clients connected to the nodes themselves (no router) while slots move:

- a slot in CLUSTER SETSLOT MIGRATING/IMPORTING state (as redis-cli --cluster reshard drives
  it): redis-py's RedisCluster and ioredis's Cluster follow -ASK with ASKING to the target for
  keys the source lacks, and keep reading the keys the source still has from the source;
- `redis-cli --cluster reshard` (IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE): the importing
  node records the new owner in etcd at SETSLOT NODE, so the moved streams stay there (before,
  the owner was only set in the node and the next view dropped the keys MIGRATE had brought);
- a slot moved by the controller: readers blocked on the source get -MOVED to the new owner at
  the switch; a RedisCluster reader re-issues its read there and gets the next entry.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import redis

from base.records import owners
from tests.control.test_reshard_router import Reader, blocked, half_moved
from tests.router.test_router_core import ioredis_dir  # noqa: F401 - a fixture
from tests.support.cluster import keys_in_slots, run_cli
from tests.support.procs import wait_until

pytestmark = pytest.mark.etcd

IOREDIS_ASK = r"""
const Redis = require("ioredis");
const [port, fresh, kept] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const cluster = new Redis.Cluster([{host: "127.0.0.1", port}],
                                  {redisOptions: {maxRetriesPerRequest: 3}});
(async () => {
  const id = await cluster.xadd(fresh, "*", "by", "ioredis");
  const fresh_rows = await cluster.xrange(fresh, "-", "+");
  const kept_rows = await cluster.xrange(kept, "-", "+");
  console.log(JSON.stringify({id, fresh_rows, kept_rows}));
  cluster.disconnect();
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


def serves(node_client: redis.Redis, slot: int, port: int) -> bool:
    """The node's CLUSTER SLOTS gives `slot` to the primary at `port`."""
    return any(e[0] <= slot <= e[1] and e[2][1] == port
               for e in node_client.execute_command("CLUSTER", "SLOTS"))


def test_cluster_clients_follow_ask_to_the_importing_node(xcluster, ioredis_dir: Path  # noqa: ANN001, F811
                                                          ) -> None:
    c = xcluster(shards=2, replicas=0, controller=False)
    slot, (kept, by_py, by_io), src, dst = half_moved(c)  # keep `dst` open
    seed = c.nodes["s1n0"]  # the clients' map says shard 0 owns the slot: they go to s0n0
    rc = redis.RedisCluster(host=seed.host, port=seed.port)
    try:
        sid = rc.xadd(by_py, {"by": "redis-py"})  # -ASK, then ASKING + XADD at the target
        assert rc.xrange(by_py) == [(sid, {b"by": b"redis-py"})]
        assert rc.xrange(kept) == [(b"1-0", {b"a": b"1"})]  # the source still serves it
    finally:
        rc.close()
    script = ioredis_dir / "ask.js"
    script.write_text(IOREDIS_ASK)
    res = subprocess.run(["node", str(script), str(seed.port), by_io, kept], cwd=ioredis_dir,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-1000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["fresh_rows"] == [[out["id"], ["by", "ioredis"]]]
    assert out["kept_rows"] == [["1-0", ["a", "1"]]]
    # The new keys are on the target only (so the clients did take the -ASK).
    assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 1
    other = c.nodes["s1n0"].client()  # not the importer's connection
    p = other.pipeline(transaction=False)
    for k in (by_py, by_io):
        p.execute_command("ASKING")
        p.xlen(k)
    assert p.execute() == [True, 1, True, 1]


def test_redis_cli_cluster_reshard_moves_slots_for_good(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=1)
    owner = owners(c.view().slots.value)
    mine = [s for s in range(16384) if owner[s] == "0"]
    slots, other = mine[:3], mine[-1]
    keys = keys_in_slots(slots, per_slot=2, prefix="rcli")
    src_h, dst_h = c.primary("0"), c.primary("1")
    src, dst = src_h.client(), dst_h.client()
    for k in keys:
        for i in range(1, 30):
            src.xadd(k, {"i": str(i)}, id=f"{i}-1")
        src.xgroup_create(k, "g", "0")
        src.xreadgroup("g", "c1", {k: ">"}, count=5)
    full = {k: src.execute_command("XINFO", "STREAM", k, "FULL", "COUNT", "0") for k in keys}
    ids = [x.execute_command("CLUSTER", "MYID") for x in (src, dst)]
    r = subprocess.run(["redis-cli", "--cluster", "reshard", f"{src_h.host}:{src_h.port}",
                        "--cluster-from", ids[0], "--cluster-to", ids[1], "--cluster-slots",
                        str(len(slots)), "--cluster-yes"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    v = c.wait_for(lambda v: all(owners(v.slots.value)[s] == "1" for s in slots), 10,
                   "the slots given to shard 1 in etcd")
    assert not v.migrations
    # Another move (by the controller) makes every node take a new view and sweep what it
    # does not own: the hand-moved keys stay.
    done = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                   "--slots", str(other), "--wait", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    wait_until(lambda: serves(dst, other, dst_h.port), 10, what="the target's new view")
    for k in keys:
        assert dst.execute_command("XINFO", "STREAM", k, "FULL", "COUNT", "0") == full[k]
    assert sum(src.execute_command("CLUSTER", "COUNTKEYSINSLOT", s) for s in slots) == 0
    rc = redis.RedisCluster(host=src_h.host, port=src_h.port)
    try:
        assert all(rc.xlen(k) == 29 for k in keys)
    finally:
        rc.close()


def test_readers_blocked_on_the_source_get_moved_at_the_switch(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=0)
    owner = owners(c.view().slots.value)
    slot = next(s for s in range(16384) if owner[s] == "0")
    k = keys_in_slots([slot], prefix="blk")[0]
    src_h, dst_h = c.nodes["s0n0"], c.nodes["s1n0"]
    src, dst = src_h.client(), dst_h.client()
    first = src.xadd(k, {"n": "0"})
    src.xgroup_create(k, "g", "$")
    rc = redis.RedisCluster(host=src_h.host, port=src_h.port)
    readers = [
        Reader(src_h.client(), "XREADGROUP", "GROUP", "g", "alice", "BLOCK", 0, "STREAMS", k,
               ">"),
        Reader(src_h.client(), "XREAD", "BLOCK", 0, "STREAMS", k, "$"),
        Reader(rc, "XREAD", "BLOCK", 0, "STREAMS", k, first),  # re-issued at the new owner
    ]
    for r in readers:
        r.start()
    try:
        wait_until(lambda: blocked(src) == 3, 10, what="reads blocked at the source")
        r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                    "--slots", str(slot), "--wait", "--timeout", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        for rd in readers[:2]:
            rd.join(20)
            assert isinstance(rd.got, redis.exceptions.MovedError), rd.got
            assert str(rd.got) == f"{slot} {dst_h.host}:{dst_h.port}"
        wait_until(lambda: blocked(dst) == 1, 20, what="the cluster client's read re-issued")
        new = dst.xadd(k, {"n": "1"})
        readers[2].join(20)
        assert readers[2].got == [[k.encode(), [(new, {b"n": b"1"})]]], readers[2].got
        assert blocked(src) == 0
    finally:
        rc.close()
