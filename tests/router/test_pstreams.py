"""Partitioned streams through a router (router/pstreams.py): a logical name over partition
streams on 3 shards, from a `pstreams/<name>` record in etcd, used by redis-py as one stream.

Explicit IDs with seq = p (mod stride) put an entry in partition p, whatever the node's own ID
generation does, so the ID-routed commands are tested with IDs that name their partitions.
Where a result must equal one stream's, the same workload runs on a plain stream beside it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator

import pytest
import redis

from base.records import PStreamRecord
from base.store import Store
from node.slots import SLOTS, key_slot
from tests.support.cluster import Cluster, start_cluster
from tests.support.procs import wait_until

STRIDE = 64
_names = itertools.count()


@pytest.fixture(scope="module")
def pc(tmp_path_factory: pytest.TempPathFactory, etcd_url: str) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("pstreams"), shards=3, etcd_url=etcd_url,
                      controller=True, routers=1)
    yield c
    c.stop()


@pytest.fixture
def r(pc: Cluster) -> Iterator[redis.Redis]:
    client = pc.client()
    client.flushall()
    yield client
    client.flushall()
    client.close()


def partition_keys(name: str, n: int, stride: int = STRIDE) -> list[str]:
    """Partition p's key `{TAG}name#p/S`, its tag chosen so its slot is in the p-th of n
    equal ranges (the contract's naming rule)."""
    keys = []
    tags = ("".join(t) for size in (1, 2, 3) for t in
            itertools.product("0123456789abcdefghijklmnopqrstuvwxyz", repeat=size))
    for p in range(n):
        lo, hi = p * SLOTS // n, (p + 1) * SLOTS // n
        tag = next(t for t in tags if lo <= key_slot(f"{{{t}}}".encode()) < hi)
        keys.append(f"{{{tag}}}{name}#{p}/{stride}")
    return keys


def put_record(c: Cluster, name: str, rec: PStreamRecord) -> None:
    async def go() -> None:
        st = Store(c.url or "", c.name)
        await st.connect()
        try:
            cur = (await st.view()).pstreams.get(name)
            assert await st.put_pstream(name, rec, cur.mod if cur else 0)
        finally:
            await st.close()
    asyncio.run(go())


def make(c: Cluster, r: redis.Redis, n: int, key_field: str | None = None) -> tuple[str, list[str]]:
    """A new logical stream of n partitions, once the router knows it."""
    name = f"ps{next(_names)}"
    keys = partition_keys(name, n)
    put_record(c, name, PStreamRecord(n, STRIDE, keys, key_field))

    def known() -> bool:
        try:
            r.execute_command("OBJECT", "ENCODING", name)
        except redis.ResponseError as e:
            return "partitioned stream" in str(e)
        return False
    wait_until(known, 20)
    return name, keys


def pid(ms: int, p: int, k: int = 0) -> str:
    """An ID of partition p: ms-(p + k*stride)."""
    return f"{ms}-{p + k * STRIDE}"


def err(r: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command(*args)
    return str(e.value)


# --- group a: XADD, XLEN, TYPE/EXISTS/DEL, XRANGE, XREAD -----------------------------------------
def test_xadd_spreads_evenly_and_xlen_sums(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 4)
    for i in range(40):
        r.xadd(name, {"n": i})
    assert r.xlen(name) == 40
    assert [r.xlen(k) for k in keys] == [10, 10, 10, 10]
    assert {pc.shard_of(k) for k in keys} == {0, 1, 2}  # the partitions are on every shard
    assert not r.exists(name.encode() + b"x")  # nothing of the name as a plain key


def test_explicit_id_goes_to_its_partition(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 4)
    assert r.xadd(name, {"a": 1}, id=pid(5, 2)) == pid(5, 2).encode()
    assert r.xadd(name, {"a": 1}, id=pid(5, 3, 1)) == pid(5, 3, 1).encode()
    assert [r.xlen(k) for k in keys] == [0, 0, 1, 1]
    assert "partition 7" in err(r, "XADD", name, pid(6, 7), "a", "1")
    # The partition's own rule still holds: an ID at or below its last one is refused.
    assert "equal or smaller" in err(r, "XADD", name, pid(5, 2), "a", "1")


def test_key_field_keeps_each_value_in_one_partition_in_order(pc: Cluster,
                                                              r: redis.Redis) -> None:
    name, keys = make(pc, r, 4, key_field="user")
    for i in range(60):
        r.xadd(name, {"user": f"u{i % 7}", "n": i})
    where: dict[bytes, set[int]] = {}
    for p, k in enumerate(keys):
        seen: dict[bytes, list[int]] = {}
        for _id, f in r.xrange(k):
            where.setdefault(f[b"user"], set()).add(p)
            seen.setdefault(f[b"user"], []).append(int(f[b"n"]))
        for ns in seen.values():
            assert ns == sorted(ns)
    assert all(len(ps) == 1 for ps in where.values()) and len(where) == 7
    assert len({p for ps in where.values() for p in ps}) > 1  # the values do spread
    # An entry without the field is spread like any.
    r.xadd(name, {"other": 1})
    assert r.xlen(name) == 61


def test_idmp_producer_picks_the_partition(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 4)
    a = r.execute_command("XADD", name, "IDMP", "prod1", "i1", "*", "f", "v")
    b = r.execute_command("XADD", name, "IDMP", "prod1", "i1", "*", "f", "v")
    assert a == b  # deduplicated: the same partition saw both
    for i in range(8):
        r.execute_command("XADD", name, "IDMP", "prod1", f"j{i}", "*", "f", "v")
    assert sorted(r.xlen(k) for k in keys) == [0, 0, 0, 9]


def test_type_exists_del(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 3)
    assert r.type(name) == b"none" and r.exists(name) == 0
    r.xadd(name, {"a": 1})
    r.set("plain", "1")
    assert r.type(name) == b"stream"
    assert r.exists(name) == 1 and r.exists(name, "plain", "nothere") == 2
    assert r.delete(name, "plain", "nothere") == 2
    assert r.xlen(name) == 0 and r.type(name) == b"none" and r.exists(name) == 0
    assert r.delete(name) == 0
    # The record stays: the next XADD makes the stream again, on its partitions.
    r.xadd(name, {"a": 2})
    assert r.xlen(name) == 1 and sum(r.xlen(k) for k in keys) == 1
    assert r.unlink(name) == 1 and r.xlen(name) == 0
    assert "WRONGTYPE" in err(r, "GET", name)
    assert "not supported on partitioned stream" in err(r, "EXPIRE", name, "10")
    assert "not supported" in err(r, "RENAME", name, "other")
    pipe = r.pipeline(transaction=True)
    pipe.xlen(name)
    with pytest.raises(redis.ResponseError, match="MULTI"):
        pipe.execute()


def fill_both(r: redis.Redis, name: str, plain: str, n: int, parts: int = 4) -> list[str]:
    """The same entries, by explicit IDs over the partitions, in a logical stream and a plain
    one: ms rises slowly, so several partitions share each millisecond."""
    ids = []
    for i in range(n):
        ms, p = 1000 + i // 3, (i * 5) % parts
        sid = f"{ms}-{p + (i % 2) * STRIDE}"
        ids.append(sid)
    ids.sort(key=lambda s: tuple(map(int, s.split("-"))))
    for i, sid in enumerate(ids):
        r.xadd(name, {"i": i}, id=sid)
        r.xadd(plain, {"i": i}, id=sid)
    return ids


def test_xrange_and_xrevrange_merge_in_id_order(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 4)
    ids = fill_both(r, name, "plain", 30)
    for args in [("-", "+"), ("1002", "1005"), ("(1002-1", "+"), ("-", "(1004-65"),
                 ("1003-0", "1003-70")]:
        assert r.xrange(name, *args) == r.xrange("plain", *args)
        for count in (1, 4, 7, 100):
            assert r.xrange(name, *args, count=count) == r.xrange("plain", *args, count=count)
            assert r.xrevrange(name, args[1], args[0], count=count) == \
                r.xrevrange("plain", args[1], args[0], count=count)
    assert [i.decode() for i, _ in r.xrange(name)] == ids
    assert r.execute_command("XRANGE", name, "-", "+", "COUNT", "0") == []
    assert err(r, "XRANGE", name, "x", "+") == err(r, "XRANGE", "plain", "x", "+")
    assert err(r, "XRANGE", name, "-") == err(r, "XRANGE", "plain", "-")


def test_xread_merges_and_blocks_until_any_partition_has_an_entry(pc: Cluster,
                                                                  r: redis.Redis) -> None:
    name, _keys = make(pc, r, 4)
    fill_both(r, name, "plain", 20)
    for sid in ("0", "1003-0", "1005-64"):
        for count in (None, 3):
            got = r.xread({name: sid}, count=count)
            want = r.xread({"plain": sid}, count=count)
            assert got[0][1] == want[0][1]
            assert got[0][0] == name.encode()
    # A logical and a plain key together, in the client's order.
    both = r.xread({"plain": "1004", name: "1005"})
    assert [k for k, _ in both] == [b"plain", name.encode()]
    assert r.xread({name: "$"}) == []
    assert r.xread({name: "9999"}, block=100) == []  # BLOCK times out: nil
    got: list = []
    reader = pc.client()
    t = threading.Thread(target=lambda: got.append(reader.xread({name: "$"}, block=10000)))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10)
    r.xadd(name, {"late": 1}, id=pid(99999, 3))
    t.join(10)
    assert got and got[0][0][1] == [(pid(99999, 3).encode(), {b"late": b"1"})]
    reader.close()
