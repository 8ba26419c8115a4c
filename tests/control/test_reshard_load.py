"""3 -> 5 -> 3 shards under load: `rebalance` onto two new shards, then `remove-shard` of
both, while 4 writers XADD + WAIT 1 and 10 consumers XREADGROUP BLOCK, through a router or
through RedisCluster (tests/support/streamload.py).

Then: no acknowledged write is lost, every entry was delivered to its group exactly once,
and every stream's XINFO STREAM FULL (times masked) equals its replay on one real server
(oracle72: valkey, whose 7.2 streams report active-time like our 7.4 target). Through a router
the clients see no error at all.
"""

from __future__ import annotations

import time

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from base.records import owners
from tests.support.cluster import run_cli
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient
from tests.support.streamload import StreamLoad

pytestmark = [pytest.mark.etcd, pytest.mark.slow]


def _cli(c, *args: str) -> str:  # noqa: ANN001
    r = run_cli(*args, "--etcd", c.url, "--cluster", c.name, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("via", ["router", "cluster"])
def test_three_to_five_to_three_under_load(xcluster, oracle72, via: str) -> None:  # noqa: ANN001
    c = xcluster(shards=3, replicas=1, routers=1 if via == "router" else 0)
    seed = c.nodes["s0n0"]

    def connect() -> redis.Redis | redis.RedisCluster:
        if via == "router":
            return c.router.client()
        return redis.RedisCluster(host=seed.host, port=seed.port, socket_timeout=30,
                                  retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), 30))

    load = StreamLoad(connect, [f"load{i}" for i in range(24)])
    load.setup()
    load.start()
    try:
        wait_until(lambda: len(load.acked) >= 100, 60, what="writes acknowledged")
        added = []
        for _ in range(2):
            sid = _cli(c, "add-shard").strip().splitlines()[-1]
            added.append(sid)
            c.start_node(sid, f"s{sid}n0")
        c.wait_ready()
        for sid in added:
            c.start_node(sid, f"s{sid}n1")
        c.wait_ready()
        t0 = time.monotonic()
        out = _cli(c, "rebalance", "--wait")
        t1 = time.monotonic()
        owner = owners(c.view().slots.value)
        counts = {s: owner.count(s) for s in set(owner)}
        assert sorted(counts) == ["0", "1", "2", *added] and max(counts.values()) <= 3277, counts
        before = len(load.acked)
        out += _cli(c, "remove-shard", *added, "--wait")
        t2 = time.monotonic()
        assert all(f"shard {s} retired" in out for s in added), out
        wait_until(lambda: len(load.acked) >= before + 100, 60, what="writes after the moves")
    finally:
        load.stop()
    print(f"3 -> 5: {t1 - t0:.1f} s, 5 -> 3: {t2 - t1:.1f} s; {len(load.acked)} writes "
          f"acknowledged, {len(load.delivered)} deliveries, client errors: {len(load.errors)} "
          f"{load.errors[:3]}")
    v = c.view()
    owner = owners(v.slots.value)
    assert sorted(set(owner)) == ["0", "1", "2"] and sorted(v.shards) == ["0", "1", "2"]
    assert not v.migrations
    for sid in added:  # nothing left on the removed shards' nodes
        for n in (f"s{sid}n0", f"s{sid}n1"):
            assert c.nodes[n].client().dbsize() == 0, n
    if via == "router":
        assert load.errors == []  # clients of a router never notice
    load.drain()
    client = connect()
    try:
        load.check(client)
        with RawClient(oracle72.host, oracle72.port) as o:
            load.replay(o, client)
    finally:
        client.close()
