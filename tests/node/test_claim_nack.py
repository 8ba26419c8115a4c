"""XREADGROUP ... CLAIM (Redis 8.4) and XNACK (Redis 8.8).

There is no Redis 8 server here, so every test states the rule it relies on. From Redis's
command documentation:
- C1: XREADGROUP ... CLAIM min-idle-time ... STREAMS key > first claims pending entries idle
  at least min-idle-time, the longest idle first, then returns new entries.
- C2: with CLAIM every entry has four elements: [id, fields, ms since its last delivery,
  delivery count]; new entries carry 0 and 0. The count is the deliveries before this read.
- C3: CLAIM is ignored unless the ID is `>`.
- C4: NOACK does not apply to claimed entries (they stay pending).
- N1: XNACK key group SILENT|FAIL|FATAL IDS numids id... [RETRYCOUNT n] [FORCE]: the entry
  becomes unowned with delivery time 0, so CLAIM takes it at once; its owner reads as "".
- N2: SILENT decrements the delivery count, FAIL keeps it, FATAL sets it to LLONG_MAX;
  RETRYCOUNT sets it instead; FORCE creates a PEL entry for an ID that is not pending.
- N3: XNACK replies with the number of IDs released.
- N4: XINFO STREAM FULL groups have `nacked-count`, the PEL entries currently NACKed.
Ours, where the documentation leaves a choice (docs/compatibility.md):
- O1: COUNT caps claimed plus new entries; claimed come first.
- O2: a pending entry that is gone from the stream is dropped from the PEL by CLAIM and not
  returned (as XAUTOCLAIM does); ties in idle time go by ID.
- O3: SILENT does not go below 0; a FORCE-created entry starts from count 0; FORCE needs the
  entry to exist (as XCLAIM's FORCE); an ID given twice is released once; the count never
  passes LLONG_MAX when a FATAL entry is claimed again.
- O4: XPENDING's summary lists consumers only, so NACKed entries count in its total only.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.conftest import NodeHandle
from tests.support.persist import wait_rewrite_done
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient

LLONG_MAX = (1 << 63) - 1


def claim_read(r: redis.Redis, group: str, consumer: str, min_idle: int, **kw: object) -> list:
    got = r.xreadgroup(group, consumer, {"s": ">"}, claim_min_idle_time=min_idle, **kw)
    return got[0][1] if got else []


def pending(r: redis.Redis, group: str = "g") -> dict[bytes, tuple]:
    return {e["message_id"]: (e["consumer"], e["times_delivered"])
            for e in r.xpending_range("s", group, "-", "+", 10_000)}


def group_info(r: redis.Redis, group: str = "g") -> dict:
    raw = r.execute_command("XINFO", "STREAM", "s", "FULL")
    d = dict(zip(raw[::2], raw[1::2], strict=True))
    for g in d[b"groups"]:
        gd = dict(zip(g[::2], g[1::2], strict=True))
        if gd[b"name"] == group.encode():
            return gd
    raise KeyError(group)


def setup_stream(r: redis.Redis, n: int = 6) -> None:
    for i in range(1, n + 1):
        r.xadd("s", {"n": str(i)}, id=f"{i}-0")
    r.xgroup_create("s", "g", "0")


def test_claim_takes_idle_entries_first_longest_idle_first(r: redis.Redis) -> None:
    """C1, C2, O1, O2: idle entries come first, longest idle first, as 4 elements; new
    entries follow with 0, 0; COUNT caps both."""
    setup_stream(r)
    r.xreadgroup("g", "dead", {"s": ">"}, count=2)        # 1-0, 2-0
    r.xreadgroup("g", "dead2", {"s": ">"}, count=1)       # 3-0
    # Make the delivery times distinct and known: 3-0 oldest, then 1-0, then 2-0.
    r.xclaim("s", "g", "dead2", 0, ["3-0"], idle=30_000, justid=True)
    r.xclaim("s", "g", "dead", 0, ["1-0"], idle=20_000, justid=True)
    r.xclaim("s", "g", "dead", 0, ["2-0"], idle=10_000, justid=True)
    got = claim_read(r, "g", "alive", 5_000, count=4)
    assert [e[0] for e in got] == [b"3-0", b"1-0", b"2-0", b"4-0"]
    assert got[0][1] == {b"n": b"3"}
    idles = [e[2] for e in got]
    assert idles[0] >= 30_000 and idles[1] >= 20_000 and idles[2] >= 10_000
    assert idles[0] > idles[1] > idles[2] and idles[3] == 0
    assert [e[3] for e in got] == [1, 1, 1, 0]  # deliveries before this read (XCLAIM
    # with JUSTID does not count one)
    assert pending(r) == {b"1-0": (b"alive", 2), b"2-0": (b"alive", 2), b"3-0": (b"alive", 2),
                          b"4-0": (b"alive", 1)}
    # Nothing idle enough: only new entries, still as 4 elements.
    got = claim_read(r, "g", "alive", 3_600_000)
    assert [(e[0], e[2], e[3]) for e in got] == [(b"5-0", 0, 0), (b"6-0", 0, 0)]
    assert claim_read(r, "g", "alive", 3_600_000) == []
    # A deleted pending entry is dropped, not returned (O2).
    r.xclaim("s", "g", "x", 0, ["5-0", "6-0"], idle=50_000, justid=True)
    r.xdel("s", "5-0")
    got = claim_read(r, "g", "y", 40_000, count=1)
    assert [e[0] for e in got] == [b"6-0"]
    assert b"5-0" not in pending(r)


def test_idlepending_lists_what_claim_takes_without_taking_it(r: redis.Redis) -> None:
    """XSHARD.IDLEPENDING (xshard's own, for a router's CLAIM on a partitioned stream): the
    [id, ms idle] pairs a CLAIM read would take, in its order (the longest idle first, then
    by ID), up to COUNT (0: all), leaving entries gone from the stream out; nothing changes."""
    setup_stream(r, 8)
    r.xreadgroup("g", "dead", {"s": ">"}, count=6)
    for sid, idle in (("4-0", 40_000), ("2-0", 30_000), ("6-0", 30_000), ("1-0", 20_000),
                      ("3-0", 1_000)):
        r.xclaim("s", "g", "dead", 0, [sid], idle=idle, justid=True)
    r.xdel("s", "6-0")
    before = pending(r)
    got = r.execute_command("XSHARD.IDLEPENDING", "s", "g", 5_000, 0)
    assert [e[0] for e in got] == [b"4-0", b"2-0", b"1-0"]  # 5-0 was delivered just now
    assert got[0][1] >= 40_000 and got[1][1] >= 30_000 and got[2][1] >= 20_000
    assert [e[0] for e in r.execute_command("XSHARD.IDLEPENDING", "s", "g", 5_000, 2)] == \
        [b"4-0", b"2-0"]
    assert pending(r) == before
    assert [e[0] for e in claim_read(r, "g", "alive", 5_000, count=3)] == [b"4-0", b"2-0", b"1-0"]
    assert r.execute_command("XSHARD.IDLEPENDING", "s", "g", 5_000, 0) == []
    with pytest.raises(redis.ResponseError, match="NOGROUP"):
        r.execute_command("XSHARD.IDLEPENDING", "s", "nog", 0, 0)
    with pytest.raises(redis.ResponseError, match="NOGROUP"):
        r.execute_command("XSHARD.IDLEPENDING", "nokey", "g", 0, 0)
    with pytest.raises(redis.ResponseError, match="min-idle-time"):
        r.execute_command("XSHARD.IDLEPENDING", "s", "g", -1, 0)
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("XSHARD.IDLEPENDING", "s", "g", 0, "x")


def test_claim_only_with_gt_and_noack_keeps_claimed_pending(r: redis.Redis) -> None:
    """C3: with an explicit ID CLAIM is ignored (plain 2-element history read); C4: with
    NOACK the claimed entries stay pending, the new ones do not."""
    setup_stream(r, 3)
    r.xreadgroup("g", "dead", {"s": ">"}, count=1)
    r.xclaim("s", "g", "dead", 0, ["1-0"], idle=10_000, justid=True)
    raw = r.execute_command("XREADGROUP", "GROUP", "g", "dead", "CLAIM", "0",
                            "STREAMS", "s", "0")
    assert raw == [[b"s", [(b"1-0", {b"n": b"1"})]]]  # redis-py's parse of 2 elements
    assert pending(r)[b"1-0"] == (b"dead", 2)  # a history read delivers it again
    r.xclaim("s", "g", "dead", 0, ["1-0"], idle=10_000, justid=True)
    got = claim_read(r, "g", "alive", 1_000, noack=True)
    assert [(e[0], e[3]) for e in got] == [(b"1-0", 2), (b"2-0", 0), (b"3-0", 0)]
    assert pending(r) == {b"1-0": (b"alive", 3)}


def test_claim_arguments(r: redis.Redis) -> None:
    setup_stream(r, 1)
    for args, err in [(("CLAIM", "-1"), "min-idle-time"), (("CLAIM", "x"), "min-idle-time")]:
        with pytest.raises(redis.ResponseError, match=err):
            r.execute_command("XREADGROUP", "GROUP", "g", "c", *args, "STREAMS", "s", ">")
    with pytest.raises(redis.ResponseError, match="only supported by XREADGROUP"):
        r.execute_command("XREAD", "CLAIM", "10", "STREAMS", "s", "0")


def test_crash_recovery_without_an_xautoclaim_loop(xnode: Callable[..., NodeHandle]) -> None:
    """The test that matters (C1): a consumer reads and dies without acknowledging; another
    consumer that only ever calls XREADGROUP ... CLAIM 300 gets the dead one's entries once
    they have been idle 300 ms (waited for as a condition, no sleep), and acknowledges them,
    so nothing is lost and nothing stays pending."""
    h = xnode()
    producer = h.client()
    for i in range(20):
        producer.xadd("jobs", {"job": str(i)})
    producer.xgroup_create("jobs", "workers", "0")
    dead = h.client()
    taken = dead.xreadgroup("workers", "dead", {"jobs": ">"}, count=5)[0][1]
    dead.close()
    worker = h.client()
    done: dict[bytes, int] = {}

    def work() -> bool:
        got = worker.xreadgroup("workers", "alive", {"jobs": ">"}, count=4,
                                claim_min_idle_time=300)
        for sid, _fields, _idle, count in (got[0][1] if got else []):
            done[sid] = count
            worker.xack("jobs", "workers", sid)
        return len(done) == 20

    wait_until(work, 20, what="the dead consumer's entries claimed")
    # The dead consumer's entries were delivered once before; the others never.
    assert {done[e[0]] for e in taken} == {1}
    assert sorted(done.values()).count(0) == 15
    assert worker.xpending("jobs", "workers")["pending"] == 0


def test_xnack_modes_and_counts(r: redis.Redis) -> None:
    """N1, N2, N3, O3, O4."""
    setup_stream(r, 6)
    r.xreadgroup("g", "c1", {"s": ">"}, count=4)
    r.xclaim("s", "g", "c1", 0, ["2-0"], retrycount=5, justid=True)
    assert r.xnack("s", "g", "SILENT", "1-0", "2-0", "1-0") == 2    # 1-0 once (O3)
    assert r.xnack("s", "g", "FAIL", "3-0", "99-0") == 1             # 99-0 not pending
    assert r.xnack("s", "g", "FATAL", "4-0", "5-0") == 1             # 5-0 not pending
    assert r.xnack("s", "g", "FAIL", "5-0", "77-0", force=True) == 1  # 77-0 has no entry
    assert r.xnack("s", "g", "SILENT", "6-0", retrycount=9, force=True) == 1
    assert pending(r) == {b"1-0": (b"", 0), b"2-0": (b"", 4), b"3-0": (b"", 1),
                          b"4-0": (b"", LLONG_MAX), b"5-0": (b"", 0), b"6-0": (b"", 9)}
    ext = r.xpending_range("s", "g", "-", "+", 10)
    assert all(e["time_since_delivered"] > 10**12 for e in ext)     # delivery time 0
    summary = r.xpending("s", "g")
    assert summary["pending"] == 6 and summary["consumers"] == []   # O4
    info = group_info(r)
    assert info[b"nacked-count"] == 6 and info[b"pel-count"] == 6
    assert {p[1] for p in info[b"pending"]} == {b""}
    # N1: CLAIM with any min-idle-time takes them at once (delivery time 0 is the oldest).
    got = claim_read(r, "g", "c2", 3_600_000, count=2)
    assert [(e[0], e[3]) for e in got] == [(b"1-0", 0), (b"2-0", 4)]
    assert group_info(r)[b"nacked-count"] == 4
    got = claim_read(r, "g", "c2", 3_600_000)
    assert [(e[0], e[3]) for e in got][:3] == [(b"3-0", 1), (b"4-0", LLONG_MAX), (b"5-0", 0)]
    assert pending(r)[b"4-0"] == (b"c2", LLONG_MAX)                 # O3: saturates
    assert group_info(r)[b"nacked-count"] == 0
    # XACK and XCLAIM of a NACKed entry.
    r.xnack("s", "g", "FAIL", "1-0", "2-0")
    assert r.xack("s", "g", "1-0") == 1
    assert r.xclaim("s", "g", "c3", 0, ["2-0"], justid=True) == [b"2-0"]
    assert group_info(r)[b"nacked-count"] == 0


@pytest.mark.parametrize("args, err", [
    (("s", "g", "MAYBE", "IDS", "1", "1-0"), "SILENT, FAIL or FATAL"),
    (("s", "g", "FAIL", "IDS", "0", "1-0"), "positive integer"),
    (("s", "g", "FAIL", "IDS", "3", "1-0"), "numids"),
    (("s", "g", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", "-1"), "RETRYCOUNT"),
    (("s", "g", "FAIL", "IDS", "1", "1-0", "BOGUS"), "Unrecognized XNACK option"),
    (("s", "nogroup", "FAIL", "IDS", "1", "1-0"), "NOGROUP"),
    (("nokey", "g", "FAIL", "IDS", "1", "1-0"), "NOGROUP"),
])
def test_xnack_errors(r: redis.Redis, args: tuple[str, ...], err: str) -> None:
    setup_stream(r, 1)
    r.xreadgroup("g", "c", {"s": ">"})
    with pytest.raises(redis.ResponseError, match=err):
        r.execute_command("XNACK", *args)
    assert pending(r) == {b"1-0": (b"c", 1)}


def test_nack_state_survives_restarts_dump_and_restore(xnode: Callable[..., NodeHandle]) -> None:
    """NACKed entries (unowned, time 0, their counts) survive an AOF replay, a snapshot
    load (the rewritten AOF's base) and DUMP/RESTORE."""
    h = xnode("--appendonly", "yes", "--appendfsync", "always")
    c = h.client()
    setup_stream(c, 4)
    c.xreadgroup("g", "c1", {"s": ">"})
    c.xnack("s", "g", "FATAL", "2-0")
    c.xnack("s", "g", "SILENT", "3-0")
    want = nack_state(c, "s")
    assert group_info(c)[b"nacked-count"] == 2
    h.kill()
    h.start()
    c = h.client()
    assert nack_state(c, "s") == want
    c.execute_command("BGREWRITEAOF")
    with RawClient(h.host, h.port) as rc:
        wait_rewrite_done(rc)
    h.kill()
    h.start()
    c = h.client()
    assert nack_state(c, "s") == want
    c.restore("copy", 0, c.dump("s"))
    assert nack_state(c, "copy") == want


def nack_state(c: redis.Redis, key: str) -> list:
    """Per group of XINFO STREAM FULL: pel-count, nacked-count and the PEL (ID, owner,
    delivery time, count); consumers' seen/active times are those of the replay, not kept."""
    raw = c.execute_command("XINFO", "STREAM", key, "FULL")
    d = dict(zip(raw[::2], raw[1::2], strict=True))
    out = []
    for g in d[b"groups"]:
        gd = dict(zip(g[::2], g[1::2], strict=True))
        out.append((gd[b"name"], gd[b"pel-count"], gd[b"nacked-count"], gd[b"pending"]))
    return out


def test_idle_pending_order_against_a_plain_sort() -> None:
    """C1, O2 on the data layer: ConsumerGroup.idle_pending (C-speed passes, no index) picks
    exactly what sorting every pending entry by (delivery time, ID) and cutting at the idle
    time and COUNT picks, on random PELs full of equal delivery times."""
    import random

    from node.groups import Consumer, ConsumerGroup

    rng = random.Random(5)
    for _ in range(1000):
        g = ConsumerGroup(0, 0)
        c = g.consumers[b"c"] = Consumer(b"c", 0)
        for sid in rng.sample(range(1, 200), rng.randint(1, 60)):
            g.set_nack(sid, c, rng.choice([0, 5, 5, 7, 9, 10, 12]), 1)
        now, min_idle, count = rng.randint(0, 15), rng.randint(0, 10), rng.randint(0, 70)
        want = [sid for t, sid in sorted((v[0], sid) for sid, v in g.pel.items())
                if t <= now - min_idle]
        assert g.idle_pending(now, min_idle, count) == (want[:count] if count else want)


def test_xnack_serves_a_reader_blocked_with_claim(node: NodeHandle, r: redis.Redis) -> None:
    """N1 with BLOCK (O: an XNACK signals its stream, like a write): a reader blocked in
    XREADGROUP ... CLAIM gets the released entry at once, as 4 elements."""
    import threading

    setup_stream(r, 1)
    r.xreadgroup("g", "c1", {"s": ">"})
    got: list = []
    waiter = node.client()
    t = threading.Thread(target=lambda: got.append(waiter.xreadgroup(
        "g", "c2", {"s": ">"}, block=20_000, claim_min_idle_time=3_600_000)))
    t.start()
    wait_until(lambda: r.info("clients")["blocked_clients"] == 1, 10, what="reader blocked")
    assert r.xnack("s", "g", "FAIL", "1-0") == 1
    t.join(10)
    assert not t.is_alive()
    (entry,) = got[0][0][1]
    assert (entry[0], entry[1], entry[3]) == (b"1-0", {b"n": b"1"}, 1)
    assert pending(r) == {b"1-0": (b"c2", 2)}


def test_a_fatal_count_stays_at_llong_max_and_replays(xnode: Callable[..., NodeHandle]) -> None:
    """XNACK FATAL sets the delivery count to LLONG_MAX (sure); an XCLAIM, an XAUTOCLAIM or a
    history read of such an entry leaves it there (open in Redis, whose count would overflow:
    xshard keeps the top, as XREADGROUP CLAIM does), so the XCLAIM effect each writes is one
    that a replica and the AOF replay accept: after a restart the PEL is the same."""
    h = xnode("--appendonly", "yes", "--appendfsync", "always")
    c = h.client()
    setup_stream(c, 3)
    c.xreadgroup("g", "c1", {"s": ">"})
    c.xnack("s", "g", "FATAL", "1-0", "2-0", "3-0")
    c.xclaim("s", "g", "c2", 0, ["1-0"])
    c.xautoclaim("s", "g", "c3", 0, "2-0", count=1)
    c.xclaim("s", "g", "c1", 0, ["3-0"], justid=True)
    c.xreadgroup("g", "c1", {"s": "0"})  # history: 3-0 delivered again
    want = pending(c)
    assert want == {b"1-0": (b"c2", LLONG_MAX), b"2-0": (b"c3", LLONG_MAX),
                    b"3-0": (b"c1", LLONG_MAX)}
    h.kill()
    h.start()
    assert pending(h.client()) == want
