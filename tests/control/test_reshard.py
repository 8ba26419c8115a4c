"""Online slot moves through etcd: real etcd, node processes, a controller, the xshard CLI.

A move copies a slot's streams with their groups to the target shard, follows the source's
writes, pauses the slot for the switch and flips the slot map in one etcd transaction; the
source then answers -MOVED and drops the keys. These tests check what arrives (XINFO STREAM
FULL, on the target's replica too), what is left behind (nothing), the CLI, and moves under
a write and read load.
"""

from __future__ import annotations

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from base.records import owners
from tests.support.cluster import keys_in_slots, run_cli
from tests.support.procs import wait_until
from tests.support.streamload import StreamLoad

pytestmark = pytest.mark.etcd


def full(c, key: str) -> list:
    return c.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0")


def fill(rc: RedisCluster, keys: list[str]) -> None:
    for n, k in enumerate(keys):
        for i in range(1, 40):
            rc.xadd(k, {"i": str(i), "v": "x" * (i % 7)}, id=f"{i}-{n}")
        rc.xgroup_create(k, "g", "0")
        rc.xreadgroup("g", "c1", {k: ">"}, count=5)
        rc.xack(k, "g", f"2-{n}")
        rc.xdel(k, f"3-{n}")


def node_client(cluster, nid: str) -> redis.Redis:
    return cluster.nodes[nid].client()


def test_move_slots_cli(xcluster) -> None:
    c = xcluster(shards=2, replicas=1)
    h = c.nodes["s0n0"]
    rc = RedisCluster(host=h.host, port=h.port)
    try:
        owner = owners(c.view().slots.value)
        slots = [s for s in range(16384) if owner[s] == "0"][-5:]
        keys = keys_in_slots(slots, per_slot=2)
        fill(rc, keys)
        src = node_client(c, "s0n0")
        before = {k: full(src, k) for k in keys}
        spec = ",".join(str(s) for s in slots)
        r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                    "--slots", spec, "--wait", "--timeout", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "done: 5 slots moved" in r.stdout
        # The progress line (on stderr; redrawn in place on a terminal) ends full.
        assert f"[{'#' * 30}] 5/5 slots, " in r.stderr and " MB/s" in r.stderr, r.stderr
        v = c.view()
        owner = owners(v.slots.value)
        assert all(owner[s] == "1" for s in slots) and not v.migrations
        # Everything arrived, on the target primary and its replica, and left the source.
        dst = node_client(c, c.primary_id("1"))
        for k in keys:
            assert full(dst, k) == before[k]
        for nid in ("s0n0", "s0n1"):  # dropped just after the flip (DELs reach the replica)
            nc = node_client(c, nid)
            wait_until(lambda nc=nc: sum(nc.execute_command("CLUSTER", "COUNTKEYSINSLOT", s)
                                         for s in slots) == 0, 10, what="keys dropped")
        p1 = node_client(c, c.primary_id("1"))
        assert p1.wait(1, 5000) == 1
        rep = node_client(c, "s1n1" if c.primary_id("1") == "s1n0" else "s1n0")
        rep.execute_command("READONLY")
        for k in keys:
            assert full(rep, k) == before[k]
        # The source redirects.
        with pytest.raises(redis.exceptions.MovedError):
            node_client(c, c.primary_id("0")).xlen(keys[0])
    finally:
        rc.close()


def test_second_migration_refused(xcluster) -> None:
    c = xcluster(shards=2, replicas=0, controller=False)  # nothing starts the moves
    r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                "--slots", "10-12")
    assert r.returncode == 0, r.stderr
    r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                "--slots", "12")
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "xshard move-slots: slot 12 is already moving from shard 0 to shard 1 (queued); a "
        "second migration of it is refused (--resume waits for moves already queued to the "
        "same shard)")
    assert len(c.view().migrations) == 3
    r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1", "--slots",
                "10-12", "--resume")
    assert r.returncode == 0 and "already queued" in r.stdout
    for bad, msg in ((["--to", "9", "--slots", "1"], "unknown shard '9'"),
                     (["--to", "1", "--slots", "5-99999"], "outside 0-16383"),
                     (["--to", "1", "--from", "0"], "--from needs --count")):
        r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, *bad)
        assert r.returncode == 1 and msg in r.stderr, r.stderr


def test_moves_under_load(xcluster) -> None:
    """Writers (XADD + WAIT 1) and XREADGROUP BLOCK consumers through RedisCluster while
    slots move 0 -> 1 and back: every acknowledged entry is there once, every entry is
    delivered to the group exactly once (the long version: tests/control/
    test_reshard_load.py)."""
    c = xcluster(shards=2, replicas=1)
    h = c.nodes["s0n0"]
    owner = owners(c.view().slots.value)
    slots = [s for s in range(16384) if owner[s] == "0"][-12:]

    def connect() -> RedisCluster:
        return RedisCluster(host=h.host, port=h.port,
                            retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), 30))

    load = StreamLoad(connect, keys_in_slots(slots), writers=2, consumers=3)
    load.setup()
    load.start()
    try:
        wait_until(lambda: len(load.acked) >= 50, 30, what="writes acknowledged")
        spec = ",".join(map(str, slots))
        for to in ("1", "0"):
            r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", to,
                        "--slots", spec, "--wait", "--timeout", "90", timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
    finally:
        load.stop()
    load.drain()
    rc = connect()
    try:
        load.check(rc)
    finally:
        rc.close()
    log = c.nodes["s0n0"].log + c.nodes["s1n0"].log
    pauses = [float(x.split("writes paused ")[1].split(" ms")[0])
              for x in log.splitlines() if "writes paused" in x]
    print(f"moves: {len(pauses)}, longest write pause {max(pauses):.1f} ms, "
          f"errors seen by clients: {len(load.errors)}: {load.errors[:3]}")


def test_rebalance_by_memory(xcluster) -> None:
    """Slots even by count but not by bytes: `rebalance` has nothing to do, `rebalance --by
    memory` moves a few heavy slots and leaves the shards' key bytes within one slot's
    worth of each other."""
    import asyncio

    from control.reshardctl import slot_weights

    c = xcluster(shards=2, replicas=0)
    owner = owners(c.view().slots.value)
    heavy = [s for s in range(16384) if owner[s] == "0"][:6]
    p = c.nodes["s0n0"].client().pipeline(transaction=False)
    for k in keys_in_slots(heavy):
        for i in range(3000):
            p.xadd(k, {"payload": "x" * 40, "i": str(i)})
    p.execute()
    args = ("--etcd", c.url, "--cluster", c.name)
    r = run_cli("rebalance", "--dry-run", *args)
    assert r.returncode == 0 and r.stdout.strip().endswith("0 moves (dry run: nothing queued)")
    r = run_cli("rebalance", "--by", "memory", "--dry-run", *args)
    assert r.returncode == 0, r.stderr
    planned = int(r.stdout.strip().splitlines()[-1].split()[0])
    assert 0 < planned < 100, r.stdout[-500:]
    r = run_cli("rebalance", "--by", "memory", "--wait", "--timeout", "60", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    v = c.view()
    w = asyncio.run(slot_weights(v))
    owner = owners(v.slots.value)
    load = {sid: sum(b for s, b in w.items() if owner[s] == sid) for sid in ("0", "1")}
    assert abs(load["0"] - load["1"]) <= max(w.values()), load
    assert sum(1 for s in heavy if owner[s] == "1") in (2, 3, 4), load
