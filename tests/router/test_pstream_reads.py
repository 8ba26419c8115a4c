"""Partitioned streams' reads beyond the basics (router/pstreamreads.py): Redis 8.10's
MAXCOUNT / MAXSIZE on a logical name, compared with one plain stream holding the same entries
through the same router, and a blocked read that follows a partition's slot move.

The plain stream's name has the logical name's length, so MAXSIZE counts the same header
bytes for both.
"""

from __future__ import annotations

import itertools
import random
import threading
from pathlib import Path

import pytest
import redis

from base.records import owners
from node.slots import key_slot
from tests.router.test_pstreams import (
    IOREDIS_HEAD,
    IOREDIS_TAIL,
    err,
    fill_both,
    make,
    pc,
    pid,
    r,
    run_ioredis,
)
from tests.support.cluster import Cluster, run_cli
from tests.support.ioredis import ioredis_dir
from tests.support.procs import wait_until

__all__ = ["ioredis_dir", "pc", "r"]  # fixtures

Opts = tuple[int | None, int | None, int | None]  # COUNT, MAXCOUNT, MAXSIZE


def opts(o: Opts) -> list[object]:
    count, maxcount, maxsize = o
    out: list[object] = []
    for word, v in (("COUNT", count), ("MAXCOUNT", maxcount), ("MAXSIZE", maxsize)):
        if v is not None:
            out += [word, v]
    return out


def twin(name: str) -> str:
    """A plain key as long as `name`."""
    return "pl" + name[2:]


def bulk_len(b: bytes) -> int:
    return len(b) + len(str(len(b))) + 3 + 2


def entry_bytes(sid: bytes, fields: dict[bytes, bytes]) -> int:
    """An entry's bytes in a RESP2 reply, as MAXSIZE counts them."""
    n = 2 * len(fields)
    return (4 + bulk_len(sid) + len(f"*{n}\r\n")
            + sum(bulk_len(k) + bulk_len(v) for k, v in fields.items()))


def within_caps(key: str, es: list, o: Opts) -> bool:
    """One stream's part of a reply respects COUNT, MAXCOUNT and the soft MAXSIZE: without
    one of its entries (the one that crossed the cap), the rest stays below it."""
    count, maxcount, maxsize = o
    limit = min(v for v in (count, maxcount, 1 << 30) if v is not None)
    if len(es) > limit:
        return False
    if maxsize is None or len(es) <= 1:
        return True
    sizes = [entry_bytes(sid, f) for sid, f in es]
    return 4 + bulk_len(key.encode()) + sum(sizes) - max(sizes) < maxsize


def renamed(reply: list, names: dict[bytes, bytes]) -> list:
    return [[names.get(k, k), es] for k, es in reply]


def test_xread_caps_cut_as_one_stream_would(pc: Cluster, r: redis.Redis) -> None:
    """XREAD: every partition is asked, merged, and the whole reply cut in key order; the
    reply equals the plain stream's, alone and among other keys."""
    name, _keys = make(pc, r, 4)
    plain, other = twin(name), "ot" + name[2:]
    fill_both(r, name, plain, 24)
    for i in range(3):
        r.xadd(other, {"o": i}, id=f"1-{i}")
    cases: list[Opts] = [(None, 5, None), (3, 5, None), (10, 10, None), (None, None, 60),
                         (None, None, 200), (4, 6, 150), (None, None, 1), (None, 2, 1)]
    names = {name.encode(): plain.encode()}
    for o in cases:
        for sid in ("0", "1003-0", "+"):
            got = r.execute_command("XREAD", *opts(o), "STREAMS", name, sid)
            assert renamed(got, names) == r.execute_command("XREAD", *opts(o), "STREAMS",
                                                            plain, sid), (o, sid)
        for keys in ([other, name], [name, other]):
            ids = ["0"] * len(keys)
            got = r.execute_command("XREAD", *opts(o), "STREAMS", *keys, *ids)
            want = r.execute_command("XREAD", *opts(o), "STREAMS",
                                     *[plain if k == name else k for k in keys], *ids)
            assert renamed(got, names) == want, (o, keys)
    r3 = pc.client(protocol=3)  # RESP3 frames the headers differently: MAXSIZE cuts elsewhere
    for o in [(None, None, 60), (None, None, 130), (3, 4, 150)]:
        got3 = r3.execute_command("XREAD", *opts(o), "STREAMS", other, name, "0", "0")
        want3 = r3.execute_command("XREAD", *opts(o), "STREAMS", other, plain, "0", "0")
        assert {names.get(k, k): v for k, v in got3.items()} == want3, o
    r3.close()
    for o in [(None, 0, None), (5, 2, None), (None, None, 0)]:
        msg = r.execute_command  # the node's own errors, before any partition is asked
        with pytest.raises(redis.ResponseError) as a:
            msg("XREAD", *opts(o), "STREAMS", name, "0")
        with pytest.raises(redis.ResponseError) as b:
            msg("XREAD", *opts(o), "STREAMS", plain, "0")
        assert str(a.value) == str(b.value)


def drain(r: redis.Redis, key: str, plan: list[Opts], reads: int = 400,
          cons: int = 3) -> list[tuple[Opts, list]]:
    """XREADGROUP `>` with the plan's caps in turn (consumers c0..), `reads` times or until
    nothing is left."""
    out = []
    for j, o in zip(range(reads), itertools.cycle(plan)):
        got = r.execute_command("XREADGROUP", "GROUP", "g", f"c{j % cons}", *opts(o),
                                "STREAMS", key, ">")
        if not got:
            return out
        [[k, es]] = got
        assert k == key.encode()
        out.append((o, es))
    assert reads < 400, "the stream did not drain"
    return out


def group_totals(r: redis.Redis, key: str) -> tuple[int, int, int]:
    g = r.xinfo_groups(key)[0]
    return g["pending"], g["entries-read"], g["lag"]


def consumers(r: redis.Redis, key: str) -> list[tuple[bytes, int]]:
    return sorted((c["name"], c["pending"]) for c in r.xpending(key, "g")["consumers"])


def test_xreadgroup_caps_deliver_what_they_return(pc: Cluster, r: redis.Redis) -> None:
    """XREADGROUP `>` under caps asks the partitions one after another: each reply respects
    the caps, nothing delivered is dropped (the PEL holds exactly what came back), and the
    whole run delivers the plain stream's multiset with the same bookkeeping."""
    name, _keys = make(pc, r, 6)
    plain = twin(name)
    fill_both(r, name, plain, 60, parts=6)
    for k in (name, plain):
        r.xgroup_create(k, "g", "0")
    by_count: list[Opts] = [(2, 3, None), (None, 4, None), (5, 5, None), (None, 1, None)]
    a = drain(r, name, by_count, reads=8)  # MAXCOUNT alone: as many as from the plain one
    b = drain(r, plain, by_count, reads=8)
    assert [len(es) for _, es in a] == [len(es) for _, es in b] == [2, 4, 5, 1] * 2
    assert consumers(r, name) == consumers(r, plain)
    by_size: list[Opts] = [(None, None, 120), (3, 5, 200), (None, None, 1), (None, 7, 300)]
    delivered = {}
    for key, first in ((name, a), (plain, b)):
        rest = drain(r, key, by_size)
        assert all(within_caps(key, es, o) for o, es in rest)
        assert any(len(es) > 1 for o, es in rest if o[2] == 120)  # MAXSIZE let several in
        ids = [sid for _, es in first + rest for sid, _ in es]
        assert len(ids) == len(set(ids)) == 60  # each once
        assert set(ids) == {e[0] for e in r.xrange(key)}
        delivered[key] = sorted(ids)
        hist = r.xreadgroup("g", "c0", {key: "0"})[0][1]
        assert len(hist) == dict(consumers(r, key))[b"c0"]
    assert delivered[name] == delivered[plain]
    assert group_totals(r, name) == group_totals(r, plain) == (60, 60, 0)


def test_xreadgroup_caps_over_several_keys(pc: Cluster, r: redis.Redis) -> None:
    """`COUNT 2 MAXCOUNT 3` over a logical key and two plain ones: 2 of the first, 1 of the
    second, the third left out (not delivered); a history read is cut the same way."""
    name, _keys = make(pc, r, 4)
    plain = twin(name)
    fill_both(r, name, plain, 12)
    p2, p3 = "p2" + name[2:], "p3" + name[2:]
    for k in (name, plain, p2, p3):
        if k in (p2, p3):
            for i in range(4):
                r.xadd(k, {"i": i}, id=f"5-{i}")
        r.xgroup_create(k, "g", "0")
    for first in (name, plain):
        got = r.execute_command("XREADGROUP", "GROUP", "g", "c", "COUNT", 2, "MAXCOUNT", 3,
                                "STREAMS", first, p2, p3, ">", ">", ">")
        assert [(k, len(es)) for k, es in got] == [(first.encode(), 2), (p2.encode(), 1)]
    assert r.xpending(name, "g")["pending"] == r.xpending(plain, "g")["pending"] == 2
    assert r.xpending(p2, "g")["pending"] == 2 and r.xpending(p3, "g")["pending"] == 0
    for k in (name, plain):
        r.xreadgroup("g", "c", {k: ">"})
        mine = [e["message_id"] for e in r.xpending_range(k, "g", "-", "+", 100, "c")]
        hist = r.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 3,
                                 "STREAMS", k, "0")
        assert [sid for sid, _ in hist[0][1]] == mine[:3]
        hist = r.execute_command("XREADGROUP", "GROUP", "g", "c", "COUNT", 2, "MAXCOUNT", 3,
                                 "STREAMS", k, p2, "0", "0")
        assert [(key, [sid for sid, _ in es]) for key, es in hist] == [
            (k.encode(), mine[:2]), (p2.encode(), [b"5-0"])]
        small = r.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXSIZE", 1,
                                  "STREAMS", k, p2, "0", "0")
        assert [(key, len(es)) for key, es in small] == [(k.encode(), 1)]
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("XREADGROUP", "GROUP", "nog", "c", "MAXCOUNT", 2, "STREAMS", k, ">")
        assert str(e.value) == (f"NOGROUP No such key '{k}' or consumer group 'nog' in "
                                "XREADGROUP with GROUP option")
        # Without caps, a history read shows every key, the plain one too, without entries.
        assert r.xreadgroup("g", "nobody", {k: "0", p2: "0"}) == [[k.encode(), []],
                                                                  [p2.encode(), []]]


def test_blocked_reads_are_served_under_the_caps(pc: Cluster, r: redis.Redis) -> None:
    """A woken XREADGROUP returns no more than the caps allow and hands the rest over (each
    entry still delivered once); a woken XREAD is cut to them."""
    name, keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "$", mkstream=True)
    got: list = []
    reader = pc.client()
    t = threading.Thread(target=lambda: got.append(reader.execute_command(
        "XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 2, "BLOCK", 10000,
        "STREAMS", name, ">")))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10)
    pipe = r.pipeline(transaction=False)
    for p, k in enumerate(keys):  # straight to the partitions: all at once
        for j in range(3):
            pipe.xadd(k, {"p": p}, id=pid(1000 + j, p))
    written = set(pipe.execute())
    t.join(10)
    assert got and 1 <= len(got[0][0][1]) <= 2
    seen = [sid for sid, _ in got[0][0][1]]
    while more := reader.execute_command("XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 2,
                                         "STREAMS", name, ">"):
        assert len(more[0][1]) <= 2
        seen += [sid for sid, _ in more[0][1]]
    assert sorted(seen) == sorted(written) and len(seen) == len(written)
    assert r.xpending(name, "g")["pending"] == len(written)

    woke: list = []
    t = threading.Thread(target=lambda: woke.append(reader.execute_command(
        "XREAD", "MAXSIZE", 1, "BLOCK", 10000, "STREAMS", name, "$")))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10)
    tx = r.pipeline(transaction=True)  # three entries of one partition at once
    for j in range(3):
        tx.xadd(keys[2], {"j": j}, id=pid(5000, 2, j))
    tx.execute()
    t.join(10)
    assert woke and [sid for sid, _ in woke[0][0][1]] == [pid(5000, 2).encode()]
    reader.close()


IOREDIS_SCRIPT = IOREDIS_HEAD + r"""
  const xread = await cluster.xread("MAXCOUNT", 4, "STREAMS", name, "0");
  const sizes = [];
  const seen = [];
  for (;;) {
    const r = await cluster.xreadgroup("GROUP", "g", "c", "MAXCOUNT", 3,
                                       "BLOCK", 200, "STREAMS", name, ">");
    if (!r) break;
    sizes.push(r[0][1].length);
    for (const [id, f] of r[0][1]) seen.push(f[1]);
  }
  const pending = await cluster.xpending(name, "g");
  console.log(JSON.stringify({xread: xread[0][1].length, sizes, seen, pending: pending[0]}));
""" + IOREDIS_TAIL


def test_ioredis_reads_with_caps(pc: Cluster, r: redis.Redis, ioredis_dir: Path) -> None:
    """ioredis's XREAD and XREADGROUP with MAXCOUNT on a logical name (BLOCK included)."""
    name, _keys = make(pc, r, 4)
    out = run_ioredis(pc, ioredis_dir, IOREDIS_SCRIPT, name)
    assert out["xread"] == 4
    assert out["sizes"] == [3] * 6 + [2]  # MAXCOUNT 3 until the last two
    assert sorted(map(int, out["seen"])) == list(range(20))
    assert out["pending"] == 20


@pytest.mark.etcd
def test_blocked_read_follows_a_partition_slot_move(xcluster) -> None:  # noqa: ANN001
    """A consumer blocked on the logical name while one partition's slot moves to the other
    shard: that partition's read blocks again at its new owner, and an entry added there
    after the move wakes it (XREADGROUP and XREAD alike)."""
    c = xcluster(shards=2, replicas=0, routers=1)
    rc = c.client()
    name, keys = make(c, rc, 4)
    rc.xgroup_create(name, "g", "$", mkstream=True)
    owner = owners(c.view().slots.value)
    shard = [owner[key_slot(k.encode())] for k in keys]
    p = shard.index("0")
    src, dst = c.nodes["s0n0"].client(), c.nodes["s1n0"].client()
    on_src = shard.count("0")
    readers: list[list] = [[], []]
    cmds = [("XREADGROUP", "GROUP", "g", "c", "BLOCK", 30000, "STREAMS", name, ">"),
            ("XREAD", "BLOCK", 30000, "STREAMS", name, "$")]
    threads = [threading.Thread(target=lambda i=i: readers[i].append(
        c.client().execute_command(*cmds[i]))) for i in range(2)]
    for t in threads:
        t.start()

    def blocked(n: redis.Redis) -> int:
        return int(n.info("clients")["blocked_clients"])
    wait_until(lambda: blocked(src) == 2 * on_src and blocked(dst) == 2 * (4 - on_src), 10,
               what="every partition's reads blocked")
    res = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                  "--slots", str(key_slot(keys[p].encode())), "--wait", "--timeout", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_until(lambda: blocked(dst) == 2 * (5 - on_src) and blocked(src) == 2 * (on_src - 1),
               20, what="the moved partition's reads blocked at its new owner")
    assert not readers[0] and not readers[1]
    sid = rc.xadd(name, {"late": 1}, id=pid(99999, p))
    for t in threads:
        t.join(20)
    want = [[name.encode(), [(sid, {b"late": b"1"})]]]
    assert readers == [[want], [want]]
    assert rc.xpending(name, "g")["pending"] == 1
    assert dst.execute_command("CLUSTER", "COUNTKEYSINSLOT", key_slot(keys[p].encode())) == 1


def blocked_on_nodes(pc: Cluster) -> int:
    n = 0
    for h in pc.primaries():
        with h.client() as cl:
            n += int(cl.info("clients")["blocked_clients"])
    return n


def test_blocked_consumers_wait_on_one_watch_per_partition(pc: Cluster, r: redis.Redis) -> None:
    """Six consumers of one group blocked on a 4-partition stream hold 4 blocked reads on the
    nodes, not 24: one watch per partition, shared (router/pstreamwait.py). An entry written
    straight to a partition key (not through the router) wakes one of them with it, and every
    entry is delivered once: each consumer's pending entries are what it was returned."""
    name, keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "$", mkstream=True)
    got: dict[str, list] = {}
    readers = [pc.client() for _ in range(6)]

    def read(i: int) -> None:
        got[f"c{i}"] = readers[i].xreadgroup("g", f"c{i}", {name: ">"}, count=10, block=20000)
    threads = [threading.Thread(target=read, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 6, 10, what="6 blocked")
    wait_until(lambda: blocked_on_nodes(pc) == 4, 10, what="one watch per partition")
    written = [owner_client(pc, k).xadd(k, {"p": p}, id=pid(2000, p))
               for p, k in enumerate(keys)]
    wait_until(lambda: len(got) >= 4, 10, what="four consumers woken")
    # two more, for the two still waiting
    written += [owner_client(pc, k).xadd(k, {"p": p}, id=pid(2001, p))
                for p, k in enumerate(keys[:2])]
    for t in threads:
        t.join(20)
    ids = [e[0] for res in got.values() if res for e in res[0][1]]
    assert sorted(ids) == sorted(written) and len(ids) == len(set(ids))
    for who, res in got.items():
        mine = [e[0] for e in res[0][1]] if res else []
        pending = r.xpending_range(name, "g", "-", "+", 100, consumername=who)
        assert sorted(x["message_id"] for x in pending) == sorted(mine), who
    for cl in readers:
        cl.close()


def owner_client(pc: Cluster, key: str) -> redis.Redis:
    """The primary that owns `key`, as a plain client of it (not the router)."""
    return pc.primary(pc.shard_of(key)).client()


def test_a_waiting_consumer_finds_what_no_watch_saw(pc: Cluster, r: redis.Redis) -> None:
    """A group moved back with XGROUP SETID straight on a partition (no new entry, so no
    watch answers) is still found by a consumer blocked on the logical name: each watch
    blocks for at most WATCH_MS and then has its partition read again."""
    name, keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "$", mkstream=True)
    first = [r.xadd(name, {"i": i}, id=pid(3000, 1, i)) for i in range(3)]
    got = r.xreadgroup("g", "c", {name: ">"}, count=10)
    assert [e[0] for e in got[0][1]] == first
    assert r.xack(name, "g", *first) == 3
    res: list = []
    reader = pc.client()
    t = threading.Thread(target=lambda: res.append(
        reader.xreadgroup("g", "c", {name: ">"}, count=10, block=15000)))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10)
    node = owner_client(pc, keys[1])
    assert node.execute_command("XGROUP", "SETID", keys[1], "g", "0") == b"OK"
    t.join(20)
    assert res and res[0] and [e[0] for e in res[0][0][1]] == first
    reader.close()


def test_a_waiting_consumer_gets_nogroup_when_its_group_goes(pc: Cluster, r: redis.Redis) -> None:
    """A group destroyed while a consumer waits on the logical name ends the wait with
    NOGROUP naming the logical stream, as a node ends a blocked XREADGROUP, instead of a
    wait that only its timeout ends (found when the watch next reads the partitions)."""
    name, _keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "$", mkstream=True)
    assert r.xreadgroup("g", "c", {name: ">"}, count=10) == []
    res: list = []
    reader = pc.client()

    def read() -> None:
        try:
            res.append(reader.xreadgroup("g", "c", {name: ">"}, count=10, block=15000))
        except redis.ResponseError as e:
            res.append(str(e))
    t = threading.Thread(target=read)
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10)
    assert r.xgroup_destroy(name, "g") == 1
    t.join(20)
    assert res and isinstance(res[0], str) and res[0].startswith("NOGROUP"), res
    assert f"'{name}'" in res[0]
    reader.close()


# --- XREADGROUP ... CLAIM (Redis 8.4) on a logical name (router/pstreamclaim.py) -------------
# Rules (redis-8-streams notes, "sure"): a claimed entry is [id, fields, ms since its last
# delivery, deliveries]; with CLAIM new entries have four elements too, ending 0, 0; idle
# pending entries come first, the longest idle first, then new entries in stream order,
# COUNT over both. Compared with one plain stream holding the same entries and the same PEL.
def claim_pair(pc: Cluster, r: redis.Redis) -> tuple[str, str, list[str]]:
    """A logical and a plain stream with 24 entries, all pending for c1, each entry's idle
    time set by XCLAIM ... IDLE (a shuffled order over the partitions), and then 6 more
    entries nobody read."""
    name, _keys = make(pc, r, 4)
    plain = "plain"
    ids = fill_both(r, name, plain, 24)
    order = list(range(24))
    random.Random(84).shuffle(order)
    for k in (name, plain):
        r.xgroup_create(k, "g", "0")
        assert len(r.xreadgroup("g", "c1", {k: ">"}, count=100)[0][1]) == 24
        for rank, i in enumerate(order):  # rank 0: the longest idle (1000 s)
            r.execute_command("XCLAIM", k, "g", "c1", 0, ids[i], "IDLE", 1_000_000 - rank * 10_000,
                              "RETRYCOUNT", 1 + rank % 3)
    for i in range(6):
        sid = pid(5000 + i, i % 4)
        ids.append(sid)
        for k in (name, plain):
            r.xadd(k, {"new": i}, id=sid)
    return name, plain, ids


def claim(r: redis.Redis, key: str, *opts: object) -> list:
    """The entries of a CLAIM read, as the server sent them (redis-py's parser of XREADGROUP
    keeps only an entry's ID and fields)."""
    cb = r.response_callbacks.pop("XREADGROUP", None)
    try:
        reply = r.execute_command("XREADGROUP", "GROUP", "g", "c2", *opts, "STREAMS", key, ">")
    finally:
        if cb is not None:
            r.response_callbacks["XREADGROUP"] = cb
    if reply is None:
        return []
    assert len(reply) == 1
    return reply[0][1]


def test_claim_takes_the_longest_idle_of_the_whole_stream(pc: Cluster, r: redis.Redis) -> None:
    name, plain, ids = claim_pair(pc, r)
    # idle >= 900 s: ranks 0-10; COUNT 4 of them, then the next 4
    for count in (4, 4):
        got = {k: claim(r, k, "COUNT", count, "CLAIM", 900_000) for k in (name, plain)}
        assert [e[0] for e in got[name]] == [e[0] for e in got[plain]]
        assert len(got[name]) == count
        for a, b in zip(got[name], got[plain], strict=True):
            assert len(a) == len(b) == 4
            assert a[1] == b[1] and a[3] == b[3]  # fields, deliveries before this one
            assert a[2] >= 900_000 and abs(a[2] - b[2]) < 60_000  # ms idle, both clocks
    # The rest of the idle ones (3), then COUNT's remainder from the new entries, as 0, 0.
    got = {k: claim(r, k, "COUNT", 5, "CLAIM", 900_000) for k in (name, plain)}
    assert [e[0] for e in got[name][:3]] == [e[0] for e in got[plain][:3]]
    for k in (name, plain):
        assert len(got[k]) == 5
        assert all(e[2] >= 900_000 for e in got[k][:3])
        assert [(e[2], e[3]) for e in got[k][3:]] == [(0, 0), (0, 0)]
        assert {e[0].decode() for e in got[k][3:]} <= set(ids[24:])
    old = {i.encode() for i in ids[:24]}  # which new entries each got differs (partitions)
    pending = {k: sorted((e["message_id"], e["consumer"], e["times_delivered"])
                         for e in r.xpending_range(k, "g", "-", "+", 100)
                         if e["message_id"] in old) for k in (name, plain)}
    assert pending[name] == pending[plain]


def test_claim_without_count_takes_every_idle_then_every_new(pc: Cluster, r: redis.Redis) -> None:
    name, plain, ids = claim_pair(pc, r)
    gone = ids[order_first(r, plain)]  # a pending entry gone from the stream: dropped
    assert r.xdel(name, gone) == r.xdel(plain, gone) == 1
    got = {k: claim(r, k, "CLAIM", 850_000) for k in (name, plain)}
    idle = {k: [e for e in got[k] if e[3]] for k in (name, plain)}
    assert [e[0] for e in idle[name]] == [e[0] for e in idle[plain]]
    assert len(idle[name]) == 16 - 1  # ranks 0-15 idle >= 850 s, less the deleted one
    assert [e[0] for e in got[name][15:]] == [e[0] for e in got[plain][15:]] == \
        [i.encode() for i in ids[24:]]  # then every new entry, in ID order
    assert claim(r, name, "CLAIM", 850_000) == claim(r, plain, "CLAIM", 850_000) == []


def order_first(r: redis.Redis, plain: str) -> int:
    """The index (in fill order) of the plain stream's longest idle pending entry."""
    pending = r.xpending_range(plain, "g", "-", "+", 100)
    longest = max(pending, key=lambda e: e["time_since_delivered"])["message_id"].decode()
    ids = [e[0].decode() for e in r.xrange(plain)]
    return ids.index(longest)


def test_claim_blocks_and_wakes_on_a_new_entry(pc: Cluster, r: redis.Redis) -> None:
    """Nothing idle and nothing new: without BLOCK nil, with BLOCK the consumer waits as a
    blocked `>` read does, and the entry that wakes it comes with CLAIM's 0, 0."""
    name, _keys = make(pc, r, 4)
    r.xgroup_create(name, "g", "$", mkstream=True)
    assert claim(r, name, "COUNT", 10, "CLAIM", 60_000) == []
    out: list = []
    reader = pc.client()
    t = threading.Thread(target=lambda: out.append(
        claim(reader, name, "COUNT", 10, "BLOCK", 20_000, "CLAIM", 60_000)))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, 10, what="blocked")
    sid = r.xadd(name, {"b": 2})
    t.join(20)
    assert out and out[0] == [[sid, [b"b", b"2"], 0, 0]]
    reader.close()


IOREDIS_CLAIM = IOREDIS_HEAD + r"""
  // c1 takes all 20 and acknowledges none; 0 ms later c2's CLAIM 0 takes the 5 longest idle.
  const first = await cluster.xreadgroup("GROUP", "g", "c1", "COUNT", 100, "STREAMS", name, ">");
  const r = await cluster.xreadgroup("GROUP", "g", "c2", "COUNT", 5, "CLAIM", 0,
                                     "STREAMS", name, ">");
  const pend = await cluster.xpending(name, "g", "-", "+", 100, "c2");
  console.log(JSON.stringify({first: first[0][1].length, claimed: r[0][1],
                              pending: pend.map((e) => e[0])}));
""" + IOREDIS_TAIL


def test_ioredis_claims_on_a_logical_name(pc: Cluster, r: redis.Redis, ioredis_dir: Path) -> None:
    name, _keys = make(pc, r, 4)
    out = run_ioredis(pc, ioredis_dir, IOREDIS_CLAIM, name)
    assert out["first"] == 20
    claimed = out["claimed"]
    assert len(claimed) == 5 and all(len(e) == 4 and e[3] == 1 for e in claimed)
    assert sorted(e[0] for e in claimed) == sorted(out["pending"])
    assert [e[2] for e in claimed] == sorted((e[2] for e in claimed), reverse=True)


def test_claim_errors_on_a_logical_name(pc: Cluster, r: redis.Redis) -> None:
    name, _keys = make(pc, r, 4)
    r.xadd("plain", {"a": 1})
    assert "not supported" in err(r, "XREADGROUP", "GROUP", "g", "c", "CLAIM", 10,
                                  "STREAMS", name, "plain", ">", ">")
    assert "not supported" in err(r, "XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", 2, "CLAIM", 10,
                                  "STREAMS", name, ">")
    r.xadd(name, {"a": 1})
    assert err(r, "XREADGROUP", "GROUP", "nog", "c", "CLAIM", 10, "STREAMS", name, ">") == \
        err(r, "XREADGROUP", "GROUP", "nog", "c", "CLAIM", 10, "STREAMS", "plain", ">").replace(
            "plain", name)
