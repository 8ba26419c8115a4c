"""Partitioned streams through a router (router/pstreams.py): a logical name over partition
streams on 3 shards, from a `pstreams/<name>` record in etcd, used by redis-py as one stream.

Explicit IDs with seq = p (mod stride) put an entry in partition p, whatever the node's own ID
generation does, so the ID-routed commands are tested with IDs that name their partitions.
Where a result must equal one stream's, the same workload runs on a plain stream beside it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from base.records import PStreamRecord
from base.store import Store
from node.slots import SLOTS, key_slot
from tests.support.cluster import Cluster, start_cluster
from tests.support.ioredis import ioredis_dir
from tests.support.procs import wait_until
from tests.support.pstreamload import serves

__all__ = ["ioredis_dir"]

STRIDE = 64
_names = itertools.count()


@pytest.fixture(scope="module")
def pc(tmp_path_factory: pytest.TempPathFactory, etcd_url: str) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("pstreams"), shards=3, etcd_url=etcd_url,
                      controller=True, routers=1)
    yield c
    c.stop()


def flushed(client: redis.Redis) -> bool:
    """FLUSHALL once every shard answers (a loaded machine can leave one between primaries
    for a moment)."""
    try:
        client.flushall()
    except (redis.exceptions.ClusterDownError, redis.ResponseError):
        return False
    return True


@pytest.fixture
def r(pc: Cluster) -> Iterator[redis.Redis]:
    client = pc.client()
    wait_until(lambda: flushed(client), 30)
    yield client
    wait_until(lambda: flushed(client), 30)
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
    wait_until(lambda: serves(r, name), 20)
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


def test_generated_ids_name_their_partition(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 5)
    ids = [r.xadd(name, {"n": i}) for i in range(50)]
    assert len(set(ids)) == 50
    for p, k in enumerate(keys):
        part = r.xrange(k)
        assert len(part) == 10
        assert all(int(sid.split(b"-")[1]) % STRIDE == p for sid, _ in part)
    assert r.xdel(name, *ids[:25]) == 25 and r.xlen(name) == 25


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


# --- group b: XGROUP, XREADGROUP, commands by ID ---------------------------------------------------
def test_xgroup_subcommands_reply_as_for_one_stream(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 4)
    assert "requires the key to exist" in err(r, "XGROUP", "CREATE", name, "g", "0")
    r.xadd(name, {"a": 1}, id=pid(1, 1))  # one partition exists, the others do not yet
    assert r.xgroup_create(name, "g", "0") is True
    assert all(r.xinfo_groups(k)[0]["name"] == b"g" for k in keys)  # made on every partition
    assert "BUSYGROUP" in err(r, "XGROUP", "CREATE", name, "g", "0")
    assert r.xgroup_createconsumer(name, "g", "c1") == 1
    assert r.xgroup_createconsumer(name, "g", "c1") == 0
    r.xadd(name, {"a": 2}, id=pid(2, 2))
    assert len(r.xreadgroup("g", "c1", {name: ">"})[0][1]) == 2
    assert r.xgroup_delconsumer(name, "g", "c1") == 2  # pending entries summed
    assert r.xgroup_setid(name, "g", "0") is True
    assert len(r.xreadgroup("g", "c2", {name: ">"})[0][1]) == 2
    assert "ENTRIESREAD" in err(r, "XGROUP", "SETID", name, "g", "0", "ENTRIESREAD", "3")
    assert r.xgroup_destroy(name, "g") == 1
    assert r.xgroup_destroy(name, "g") == 0
    assert "NOGROUP" in err(r, "XGROUP", "SETID", name, "nog", "0")
    assert r.xgroup_create(name, "m", "$", mkstream=True) is True


def test_xreadgroup_count_is_a_total_and_nothing_is_lost(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 6)
    r.xgroup_create(name, "g", "0", mkstream=True)
    written = {r.xadd(name, {"i": i}, id=pid(10 + i // 6, i % 6)) for i in range(50)}
    seen: list[bytes] = []
    for count in itertools.cycle((1, 4, 7)):
        got = r.xreadgroup("g", "c", {name: ">"}, count=count)
        if not got:
            break
        es = got[0][1]
        assert 1 <= len(es) <= count
        ids = [e[0] for e in es]
        assert ids == sorted(ids, key=lambda s: tuple(map(int, s.split(b"-"))))
        seen += ids
    assert sorted(seen) == sorted(written) and len(seen) == len(written)  # each once
    pend = r.xpending(name, "g")
    assert pend["pending"] == 50
    assert r.xack(name, "g", *seen[:20]) == 20
    assert r.xpending(name, "g")["pending"] == 30
    # History: the consumer's pending entries, merged, from an ID on.
    hist = r.xreadgroup("g", "c", {name: "0"}, count=5)[0][1]
    assert [e[0] for e in hist] == sorted(seen[20:], key=lambda s: tuple(
        map(int, s.split(b"-"))))[:5]
    assert r.xreadgroup("g", "other", {name: "0"}) == [[name.encode(), []]]


def test_xreadgroup_noack_hands_over_from_memory(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "0", mkstream=True)
    written = [r.xadd(name, {"i": i}, id=pid(10, i % 4, i // 4)) for i in range(12)]
    seen = []
    while got := r.xreadgroup("g", "c", {name: ">"}, count=1, noack=True):
        seen += [e[0] for e in got[0][1]]
    assert sorted(seen) == sorted(written) and len(seen) == 12
    assert r.xpending(name, "g")["pending"] == 0


def test_blocked_xreadgroup_wakes_and_loses_no_delivery(pc: Cluster, r: redis.Redis) -> None:
    """Entries land on every partition at once while a consumer is blocked with COUNT 1:
    the partitions that deliver after the read was answered hand their entries over, and
    the consumer's next reads return each of them once."""
    name, keys = make(pc, r, 6)
    r.xgroup_create(name, "g", "$", mkstream=True)
    for rnd in range(5):
        got: list = []
        reader = pc.client()
        t = threading.Thread(target=lambda got=got, reader=reader: got.append(
            reader.xreadgroup("g", "c", {name: ">"}, count=1, block=10000)))
        t.start()
        wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10)
        pipe = r.pipeline(transaction=False)
        for p, k in enumerate(keys):  # straight to the partitions: all at once
            pipe.xadd(k, {"p": p}, id=pid(1000 + rnd, p))
        written = set(pipe.execute())
        t.join(10)
        assert got and len(got[0][0][1]) == 1
        seen = [got[0][0][1][0][0]]
        while more := reader.xreadgroup("g", "c", {name: ">"}, count=2):
            seen += [e[0] for e in more[0][1]]
        assert sorted(seen) == sorted(written)
        assert r.xpending(name, "g")["pending"] == len(written)
        assert r.xack(name, "g", *seen) == len(seen)
        reader.close()
    assert r.xreadgroup("g", "c", {name: ">"}, block=50) == []  # times out: nil


def test_ten_consumers_get_each_entry_once(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 6)
    r.xgroup_create(name, "g", "0", mkstream=True)
    total = 600
    delivered: list[list[bytes]] = [[] for _ in range(10)]
    stop = threading.Event()

    def consume(i: int) -> None:
        cl = pc.client()
        while not stop.is_set():
            got = cl.xreadgroup("g", f"c{i}", {name: ">"}, count=7, block=200)
            if got:
                ids = [e[0] for e in got[0][1]]
                delivered[i] += ids
                cl.execute_command("XACK", name, "g", *ids)
        cl.close()
    threads = [threading.Thread(target=consume, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    written = set()
    for i in range(total):
        written.add(r.xadd(name, {"i": i}))
    wait_until(lambda: sum(map(len, delivered)) >= total, 60)
    stop.set()
    for t in threads:
        t.join(10)
    flat = [x for d in delivered for x in d]
    assert len(flat) == total and set(flat) == written
    assert sum(1 for d in delivered if d) > 1
    assert r.xpending(name, "g")["pending"] == 0


def test_commands_by_id_split_by_partition(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 4)
    plain = "plain"
    ids = fill_both(r, name, plain, 16)
    for k in (name, plain):
        r.xgroup_create(k, "g", "0")
        r.xreadgroup("g", "c", {k: ">"})
    bogus = pid(1, 9)  # partition 9 does not exist: it names no entry
    one = [i for i in ids[10:] if int(i.split("-")[1]) % STRIDE == 3][:2]  # one partition
    assert len(one) == 2
    for k in (name, plain):
        assert r.xack(k, "g", ids[0], ids[5], bogus) == 2
        assert r.xack(k, "g", *one) == 2 and r.xack(k, "g", *one) == 0
        assert r.xack(k, "nog", *one) == 0
    for bad in (["x-3"], [one[0], "1-184467440737095516161"], [one[0], "1-3-1"], ["+"]):
        assert err(r, "XACK", name, "g", *bad) == err(r, "XACK", plain, "g", *bad)
    for k in (name, plain):
        claimed = r.xclaim(k, "g", "d", 0, [ids[9], ids[2], ids[7]])
        assert [e[0].decode() for e in claimed] == [ids[9], ids[2], ids[7]]
        assert r.xclaim(k, "g", "d", 0, [ids[3], ids[1]], justid=True) == \
            [ids[3].encode(), ids[1].encode()]
        assert r.execute_command("XACKDEL", k, "g", "IDS", 3, ids[2], bogus, ids[0]) == [1, -1, 1]
        assert r.execute_command("XDELEX", k, "IDS", 2, ids[4], ids[2]) == [1, -1]
        assert r.execute_command("XNACK", k, "g", "FAIL", "IDS", 2, ids[6], ids[8]) == 2
        assert r.xdel(k, ids[10], ids[11], bogus) == 2
    assert r.xrange(name) == r.xrange(plain)
    def pending(k: str, **kw: object) -> list:
        return [(e["message_id"], e["consumer"], e["times_delivered"])
                for e in r.xpending_range(k, "g", "-", "+", 100, **kw)]
    assert pending(name) == pending(plain)
    assert pending(name, consumername="d") == pending(plain, consumername="d")
    for args in [("XACK", "g", "bad"), ("XDEL", "bad"), ("XCLAIM", "g", "c", "0", "bad"),
                 ("XACKDEL", "g", "IDS", "1", "bad")]:
        assert err(r, args[0], name, *args[1:]) == err(r, args[0], plain, *args[1:])
    assert "LASTID" in err(r, "XCLAIM", name, "g", "c", "0", ids[1], "LASTID", ids[1])


# --- group c: XPENDING, XINFO, XAUTOCLAIM, XTRIM, XSETID --------------------------------------------
def grouped_pair(pc: Cluster, r: redis.Redis, n: int = 4, entries: int = 20) -> tuple[str, list[str]]:
    """A logical and a plain stream with the same entries and the same group history:
    c1 read 7, c2 read 5, c1 acked 3 of its own."""
    name, _keys = make(pc, r, n)
    ids = fill_both(r, name, "plain", entries, n)
    for k in (name, "plain"):
        r.xgroup_create(k, "g", "0")
        a = [e[0] for e in r.xreadgroup("g", "c1", {k: ">"}, count=7)[0][1]]
        r.xreadgroup("g", "c2", {k: ">"}, count=5)
        r.xack(k, "g", *a[:3])
    return name, ids


def sid_key(s: bytes) -> tuple[int, ...]:
    return tuple(map(int, s.split(b"-")))


def test_xpending_summary_and_extended_merge(pc: Cluster, r: redis.Redis) -> None:
    """The same counts as one stream (which entries each consumer got differs: each
    partition delivers in its own order); the IDs are the partitions' own, merged."""
    name, _ids = grouped_pair(pc, r)
    keys = partition_keys(name, 4)
    a, b = r.xpending(name, "g"), r.xpending("plain", "g")
    assert a["pending"] == b["pending"] == 9 and a["consumers"] == b["consumers"]
    mine = sorted((e["message_id"] for k in keys
                   for e in r.xpending_range(k, "g", "-", "+", 100)), key=sid_key)
    assert (a["min"], a["max"]) == (mine[0], mine[-1])
    for count in (1, 3, 100):
        got = r.xpending_range(name, "g", "-", "+", count)
        assert [e["message_id"] for e in got] == mine[:count]
        got = r.xpending_range(name, "g", "(1001-0", "+", count, consumername="c2")
        want = sorted((e["message_id"] for k in keys for e in r.xpending_range(
            k, "g", "(1001-0", "+", 100, consumername="c2")), key=sid_key)[:count]
        assert [e["message_id"] for e in got] == want
    assert err(r, "XPENDING", name, "nog") == err(r, "XPENDING", "plain", "nog").replace(
        "plain", name)
    assert err(r, "XPENDING", name, "g", "-", "+") == err(r, "XPENDING", "plain", "g", "-", "+")


def test_xinfo_stream_groups_consumers_merge(pc: Cluster, r: redis.Redis) -> None:
    name, ids = grouped_pair(pc, r)
    a, b = r.xinfo_stream(name), r.xinfo_stream("plain")
    for f in ("length", "last-generated-id", "first-entry", "last-entry", "entries-added",
              "max-deleted-entry-id", "recorded-first-entry-id", "groups"):
        assert a[f] == b[f], f
    ga, gb = r.xinfo_groups(name), r.xinfo_groups("plain")
    assert [(g["name"], g["pending"], g["entries-read"], g["lag"]) for g in ga] == \
        [(g["name"], g["pending"], g["entries-read"], g["lag"]) for g in gb]
    assert ga[0]["consumers"] == gb[0]["consumers"] == 2  # each counted once (on 1-2 of 4)
    r3 = pc.client(protocol=3)
    assert [(g["name"], g["consumers"], g["pending"]) for g in r3.xinfo_groups(name)] == \
        [(g["name"], g["consumers"], g["pending"]) for g in r3.xinfo_groups("plain")]
    r3.close()
    ca, cb = r.xinfo_consumers(name, "g"), r.xinfo_consumers("plain", "g")
    assert [(x["name"], x["pending"]) for x in ca] == [(x["name"], x["pending"]) for x in cb]
    assert "FULL" in err(r, "XINFO", "STREAM", name, "FULL")
    assert "no such key" in err(r, "XINFO", "STREAM", make(pc, r, 2)[0])


def test_xautoclaim_walks_every_partition(pc: Cluster, r: redis.Redis) -> None:
    name, _ids = grouped_pair(pc, r)
    want = sorted(e["message_id"] for e in r.xpending_range(name, "g", "-", "+", 100))
    assert len(want) == 9
    got, cursor, calls = [], b"0-0", 0
    while True:
        cursor, claimed, _deleted = r.xautoclaim(name, "g", "c3", 0, cursor, count=2)
        got += [e[0] for e in claimed]
        calls += 1
        if cursor == b"0-0":
            break
    assert sorted(got) == want and len(got) == len(want)
    assert calls >= 4  # one partition per call at least
    assert all(x["name"] != b"c3" or x["pending"] == len(want)
               for x in r.xinfo_consumers(name, "g"))


def test_xtrim_minid_exact_maxlen_by_share(pc: Cluster, r: redis.Redis) -> None:
    name, keys = make(pc, r, 4)
    ids = fill_both(r, name, "plain", 40)
    for k in (name, "plain"):
        assert r.xtrim(k, minid=ids[10], approximate=False) == 10
    assert r.xrange(name) == r.xrange("plain")
    # Each partition keeps ceil(21/4) = 6 of its 7 or 8 entries.
    assert r.xtrim(name, maxlen=21, approximate=False) == 30 - 4 * 6
    assert all(r.xlen(k) <= 6 for k in keys)
    r.xadd(name, {"x": 1}, maxlen=8, approximate=False)  # XADD's MAXLEN: the partition written keeps its share
    assert max(r.xlen(k) for k in keys) <= 6
    r.xadd(name, {"x": 2}, maxlen=8)  # `~`: the partition may keep more, as any stream
    assert r.xtrim(name, maxlen=100) == 0
    assert "not supported" in err(r, "XSETID", name, "1-0")
    assert r.execute_command("XCFGSET", name, "IDMP-DURATION", "50") == b"OK"
    assert r.xinfo_stream(name)["idmp-duration"] == 50
    assert all(r.xinfo_stream(k)["idmp-duration"] == 50 for k in keys)
    assert err(r, "XCFGSET", name, "IDMP-DURATION", "0") == \
        err(r, "XCFGSET", "plain", "IDMP-DURATION", "0")


def test_bad_input_gets_a_plain_streams_errors(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 3)
    fill_both(r, name, "plain", 6, 3)
    r.xgroup_create(name, "g", "0")
    r.xgroup_create("plain", "g", "0")
    cases = [("XADD", "{}"), ("XADD", "{}", "*"), ("XADD", "{}", "*", "f"),
             ("XADD", "{}", "MAXLEN", "-1", "*", "f", "v"), ("XADD", "{}", "bad", "f", "v"),
             ("XLEN",), ("XRANGE", "{}", "-", "+", "COUNT"), ("XRANGE", "{}", "-", "+", "COUNT", "x"),
             ("XREAD", "STREAMS", "{}"), ("XREAD", "STREAMS", "{}", "bad"),
             ("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "{}", ">"),
             ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "{}", "$"),
             ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "{}", "bad"),
             ("XACK", "{}", "g"), ("XGROUP", "CREATE", "{}"), ("XGROUP", "CREATE", "{}", "h", "bad"),
             ("XTRIM", "{}", "MAXLEN"), ("XTRIM", "{}", "BAD", "1"), ("XPENDING", "{}", "nog"),
             ("XAUTOCLAIM", "{}", "g", "c", "x", "0")]
    for case in cases:
        a = err(r, *[x.replace("{}", name) for x in case])
        b = err(r, *[x.replace("{}", "plain") for x in case]).replace("'plain'", f"'{name}'")
        assert a == b, case
    # An unknown name is a plain key, as ever.
    r.xadd("justakey", {"a": 1})
    assert r.xlen("justakey") == 1 and r.type("justakey") == b"stream"


def upstream_reads(pc: Cluster) -> int:
    """The reads and CLIENT calls the nodes served (what a router's reads cost them, its
    partitions' watches included: XREAD, XREVRANGE)."""
    n = 0
    for h in pc.primaries():
        with h.client() as cl:
            st = cl.info("commandstats")
            n += sum(st.get(f"cmdstat_{c}", {}).get("calls", 0)
                     for c in ("xreadgroup", "xread", "xrevrange", "client|id",
                               "client|unblock"))
    return n


def test_a_backlog_read_sticks_to_one_partition(pc: Cluster, r: redis.Redis) -> None:
    """With a backlog, an XREADGROUP `>` asks one partition (the consumer's cursor) for all of
    COUNT, and keeps asking it while it fills COUNT; a short answer moves the cursor on to
    the next partition, asked for the rest, and the others are asked in one even round only
    when that one is short too. A consumer whose last read came back short asks every
    partition at once (shares of COUNT), until a read fills COUNT again."""
    name, _keys = make(pc, r, 6)
    r.xgroup_create(name, "g", "0", mkstream=True)

    def fill(per: int, at: int) -> None:
        pipe = r.pipeline(transaction=False)
        for k in range(per):
            for p in range(6):
                pipe.xadd(name, {"i": k}, id=pid(at + k, p))
        pipe.execute()

    def read(count: int) -> Counter[int]:
        got = r.xreadgroup("g", "c", {name: ">"}, count=count)
        ids = [e[0] for e in got[0][1]] if got else []
        assert ids == sorted(ids, key=sid_key)
        assert not ids or r.xack(name, "g", *ids) == len(ids)
        return Counter(int(i.split(b"-")[1]) % STRIDE for i in ids)

    fill(150, 1000)
    first = read(100)
    assert len(first) == 1 and sum(first.values()) == 100  # one partition gave all 100
    p0 = next(iter(first))
    p1, p2, p3, p4, p5 = ((p0 + j) % 6 for j in range(1, 6))
    assert read(100) == Counter({p0: 50, p1: 50})  # the rest from the next partition
    assert read(100) == Counter({p1: 100})  # the cursor moved on to it, and stays
    assert read(100) == Counter({p2: 100})  # p1 came back empty: the next one filled it
    assert read(130) == Counter({p2: 50, p3: 80})
    assert read(200) == Counter({p3: 70, p4: 130})
    pipe = r.pipeline(transaction=False)
    for k in range(30):  # drained partitions get a few more
        for p in (p1, p2):
            pipe.xadd(name, {"i": k}, id=pid(3000 + k, p))
    pipe.execute()
    # The cursor's partition and the next one are short: one round of the 4 others (shares
    # of 230, about 58 each) makes up what they can.
    assert read(400) == Counter({p4: 20, p5: 150, p1: 30, p2: 30})
    while read(100):
        pass  # drained: the last read came back short
    fill(10, 5000)
    assert read(12) == Counter({p: 2 for p in range(6)})  # no backlog: every partition
    third = read(12)  # that one filled COUNT: the next asks its cursor's partition first
    assert sorted(third.values()) == [4, 8]  # the cursor's 8, then 4 from the next
    assert r.xpending(name, "g")["pending"] == 0


def test_upstream_round_trips_per_delivered_entry(pc: Cluster, r: redis.Redis) -> None:
    """Measured, with bounds that a read asking every partition each time would break: a
    busy consumer (COUNT 100 over 6 partitions with entries waiting) reads one partition for
    all 100 while it has them, and the next one for the rest when it runs dry, so it costs
    about one upstream read per 100 entries (0.014 measured); a blocked consumer
    woken entry by entry costs the partitions' blocked reads and their CLIENT ID/UNBLOCK, per
    delivered entry."""
    name, _keys = make(pc, r, 6)
    r.xgroup_create(name, "g", "0", mkstream=True)
    pipe = r.pipeline(transaction=False)
    for i in range(3000):
        pipe.xadd(name, {"i": i})
    pipe.execute()
    before, got = upstream_reads(pc), 0
    while more := r.xreadgroup("g", "c", {name: ">"}, count=100):
        got += len(more[0][1])
    busy = (upstream_reads(pc) - before) / got
    assert got == 3000
    assert busy <= 2 / 100  # asking all 6 partitions for each 100 entries would be 6 / 100
    reader, n, delivered = pc.client(), 20, []
    t = threading.Thread(target=lambda: delivered.extend(
        e[0] for _ in range(n) for e in (reader.xreadgroup(
            "g", "c", {name: ">"}, count=10, block=5000) or [[b"", []]])[0][1]))
    before = upstream_reads(pc)
    t.start()
    for i in range(n):
        wait_until(lambda i=i: len(delivered) >= i or not t.is_alive(), 10)
        wait_until(lambda: r.info("clients")["blocked_clients"] >= 1 or not t.is_alive(), 10)
        r.xadd(name, {"late": i})
    t.join(30)
    blocked = (upstream_reads(pc) - before) / max(len(delivered), 1)
    reader.close()
    assert len(delivered) == n
    print(f"upstream reads per delivered entry: busy {busy:.3f}, blocked {blocked:.2f}")
    # Each wake: the partition's watch answers and is armed again, and the consumer's read
    # of that partition (router/pstreamwait.py); the consumer's next read waits at once.
    # Blocking the consumer on all 6 partitions cost a probe round, 6 blocked reads and their
    # CLIENT ID / UNBLOCK per entry (measured 12-17).
    assert blocked <= 4


IOREDIS_HEAD = r"""
const Redis = require("ioredis");
const name = process.argv[3];
const cluster = new Redis.Cluster([{host: "127.0.0.1", port: Number(process.argv[2])}],
                                  {redisOptions: {maxRetriesPerRequest: 3}});
(async () => {
  await cluster.xgroup("CREATE", name, "g", "0", "MKSTREAM");
  for (let i = 0; i < 20; i++) await cluster.xadd(name, "*", "i", String(i));
"""
"""An ioredis script's start: a cluster client of the router, `name` with a group `g` and 20
entries `i`; the body ends with `IOREDIS_TAIL` after printing its result as JSON."""
IOREDIS_TAIL = r"""
  cluster.disconnect();
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""

IOREDIS_SCRIPT = IOREDIS_HEAD + r"""
  const len = await cluster.xlen(name);
  const seen = [];
  for (;;) {
    const r = await cluster.xreadgroup("GROUP", "g", "c", "COUNT", 3, "BLOCK", 200,
                                       "STREAMS", name, ">");
    if (!r) break;
    for (const [id, f] of r[0][1]) { seen.push(f[1]); await cluster.xack(name, "g", id); }
    console.log("read", seen.length);
  }
  const range = await cluster.xrange(name, "-", "+");
  const pending = await cluster.xpending(name, "g");
  console.log(JSON.stringify({len, seen, range: range.length, pending: pending[0]}));
""" + IOREDIS_TAIL


def run_ioredis(pc: Cluster, ioredis_dir: Path, script: str, name: str) -> dict:
    """Run an ioredis script on the logical stream `name`: the JSON it printed last."""
    path = ioredis_dir / f"{name}.js"
    path.write_text(script)
    proc = subprocess.Popen(["node", str(path), str(pc.router.port), name], cwd=ioredis_dir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"ioredis did not finish: {stdout[-500:]} {stderr[-500:]}")
    assert proc.returncode == 0, stderr[-1000:]
    return json.loads(stdout.strip().splitlines()[-1])


def test_ioredis_uses_a_partitioned_stream(pc: Cluster, r: redis.Redis,
                                           ioredis_dir: Path) -> None:
    name, keys = make(pc, r, 4)
    out = run_ioredis(pc, ioredis_dir, IOREDIS_SCRIPT, name)
    assert out["len"] == 20 and out["range"] == 20 and out["pending"] == 0
    assert sorted(map(int, out["seen"])) == list(range(20))
    assert all(r.xlen(k) == 5 for k in keys)


def test_resp3_replies_match_a_plain_streams(pc: Cluster, r: redis.Redis) -> None:
    """The merged replies in RESP3 (maps, nulls `_`) as a plain stream gives them."""
    name, _keys = make(pc, r, 4)
    r3 = pc.client(protocol=3)
    for k in (name, "plain"):
        r3.xgroup_create(k, "g", "$", mkstream=True)
    assert r3.xpending(name, "g") == r3.xpending("plain", "g")  # empty: nulls
    assert r3.xreadgroup("g", "c", {name: ">"}) == r3.xreadgroup("g", "c", {"plain": ">"})
    assert r3.xread({name: "0"}) == r3.xread({"plain": "0"})
    fill_both(r3, name, "plain", 12)
    assert r3.xrange(name) == r3.xrange("plain")
    assert r3.xread({name: "1001"}, count=5) == {name.encode(): r3.xread(
        {"plain": "1001"}, count=5)[b"plain"]}
    for k in (name, "plain"):
        r3.xreadgroup("g", "c", {k: ">"}, count=12)
    assert r3.xpending(name, "g") == r3.xpending("plain", "g")
    assert r3.xreadgroup("g", "c", {name: "0"}, count=12)[name.encode()] == \
        r3.xreadgroup("g", "c", {"plain": "0"}, count=12)[b"plain"]
    a, b = r3.xinfo_stream(name), r3.xinfo_stream("plain")
    assert (a["length"], a["first-entry"], a["last-entry"]) == \
        (b["length"], b["first-entry"], b["last-entry"])
    assert r3.xinfo_groups(name)[0]["pending"] == 12
    r3.close()


def test_a_partition_added_later_joins_the_stream(pc: Cluster, r: redis.Redis) -> None:
    """A record with one more partition (what `alter` writes): routers pick it up; until
    the group is made there, reads serve the other partitions; XGROUP CREATE then makes it
    there and says OK."""
    name, keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "0", mkstream=True)
    r.xadd(name, {"a": 0}, id=pid(1, 0))
    new = keys + [f"{{zz}}{name}#4/{STRIDE}"]
    put_record(pc, name, PStreamRecord(5, STRIDE, new))

    def added() -> bool:
        try:
            r.xadd(name, {"a": 4}, id=pid(2, 4))
        except redis.ResponseError:
            return False
        return True
    wait_until(added, 20)
    got = r.xreadgroup("g", "c", {name: ">"}, count=10)
    assert [e[0] for e in got[0][1]] == [pid(1, 0).encode()]
    assert r.xreadgroup("g", "c", {name: ">"}, count=10) == []
    assert r.xgroup_create(name, "g", "0") is True
    assert [e[0] for e in r.xreadgroup("g", "c", {name: ">"})[0][1]] == [pid(2, 4).encode()]
    assert "BUSYGROUP" in err(r, "XGROUP", "CREATE", name, "g", "0")


def test_writes_without_a_key_skip_partitions_without_a_primary() -> None:
    """Round robin over the partitions whose shard has a primary in the router's map (a
    shard in failover has none) and whose connection to it is not known lost (a primary
    killed a moment ago, still named by etcd): the others take the writes, evenly."""
    from router.pstreams import PStream
    from router.pstreamwrite import _next_live

    keys = partition_keys("f", 4)
    ps = PStream(b"f", PStreamRecord(4, STRIDE, keys))
    down = {ps.slots[1]}

    class Up:
        def __init__(self, closed: bool) -> None:
            self.closed, self.transport = closed, None if closed else object()

    class Pool:
        def __init__(self) -> None:
            self.conns: list[Up | None] = [None]
            self.reconnects = 0

        def get(self, _i: int) -> Up:
            self.reconnects += 1
            self.conns[0] = Up(False)
            return self.conns[0]
    pools = {s: Pool() for s in ps.slots}

    class Map:
        def primary_pool(self, slot: int, proto: int) -> object | None:
            return None if slot in down else pools[slot]
    picks = [_next_live(Map(), ps.writes, 2) for _ in range(9)]  # type: ignore[arg-type]
    assert sorted(picks) == [0, 0, 0, 2, 2, 2, 3, 3, 3]
    down.clear()
    assert sorted(_next_live(Map(), ps.writes, 2) for _ in range(8)) == [0, 0, 1, 1, 2, 2, 3, 3]  # type: ignore[arg-type]
    lost = pools[ps.slots[2]]
    lost.conns[0] = Up(True)  # its node died: skipped once, and a reconnect is started
    assert sorted(_next_live(Map(), ps.writes, 2) for _ in range(3)) == [0, 1, 3]
    assert lost.reconnects == 1
    assert sorted(_next_live(Map(), ps.writes, 2) for _ in range(4)) == [0, 1, 2, 3]  # up again
    starting = pools[ps.slots[3]]
    fresh = Up(False)
    fresh.transport = None  # its first connection is still being made: nothing was lost
    starting.conns[0] = fresh
    assert sorted(_next_live(Map(), ps.writes, 2) for _ in range(4)) == [0, 1, 2, 3]
