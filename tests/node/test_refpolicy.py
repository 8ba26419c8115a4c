"""Reference policies of Redis 8.2: KEEPREF / DELREF / ACKED on XADD and XTRIM, XDELEX, XACKDEL.

There is no Redis 8 server here, so every test states the rule it relies on. From Redis 8.2's
command documentation:
- R1: the default is KEEPREF, which is Redis 7's trimming: entries go, PEL entries stay.
- R2: DELREF also removes the trimmed (or deleted) IDs from every group's PEL.
- R3: ACKED removes only entries that every group has read and acknowledged: ID <= the group's
  last-delivered ID and not in its PEL. With no consumer group it is KEEPREF.
- R4: XDELEX key [policy] IDS numids id...: one reply per ID, -1 no such entry, 1 deleted,
  2 not deleted because references remain (ACKED).
- R5: XACKDEL key group [policy] IDS numids id...: acknowledge in the group, then delete by
  the same rule, one reply per ID.
Ours, where the documentation leaves a choice (node/references.py, docs/compatibility.md):
- O1: an ACKED trim stops at the first entry some group references, so a trim always removes
  a prefix of the stream.
- O2: XACKDEL of an ID with no entry answers -1 but still acknowledges the ID; a missing key
  or group answers -1 for every ID (as XACK answers 0).
- O3: a DELREF trim drops the PEL IDs of the whole range it cut, from the old first entry to
  the new one.
"""

from __future__ import annotations

import random

import pytest
import redis

from tests.conftest import NodeHandle
from tests.support.rawresp import RawClient


@pytest.fixture(autouse=True)
def _empty(node: NodeHandle, oracle: NodeHandle) -> None:
    """These tests write key `s` with explicit IDs: start from empty servers, whatever the
    modules before them left (their fixtures flush after a test, not every module does)."""
    for h in (node, oracle):
        c = RawClient(h.host, h.port)
        try:
            c.call("FLUSHALL")
        finally:
            c.close()


def pending_ids(r: redis.Redis, key: str, group: str) -> list[bytes]:
    return [e["message_id"] for e in r.xpending_range(key, group, "-", "+", 1_000_000)]


def ids(r: redis.Redis, key: str) -> list[bytes]:
    return [e[0] for e in r.execute_command("XRANGE", key, "-", "+")]


def fill(r: redis.Redis, key: str, n: int, start: int = 1) -> None:
    for i in range(start, start + n):
        r.execute_command("XADD", key, f"{i}-1", "f", str(i))


def full_groups(r: redis.Redis, key: str) -> list[dict]:
    raw = r.execute_command("XINFO", "STREAM", key, "FULL")
    d = dict(zip(raw[::2], raw[1::2], strict=True))
    return [dict(zip(g[::2], g[1::2], strict=True)) for g in d[b"groups"]]


def strip_nacked(full: list) -> list:
    """XINFO STREAM FULL without each group's `nacked-count` (Redis 8.8's field)."""
    d = dict(zip(full[::2], full[1::2], strict=True))
    for g in d.get(b"groups") or []:
        if b"nacked-count" in g:
            i = g.index(b"nacked-count")
            del g[i:i + 2]
    return full


@pytest.mark.parametrize("cmds", [
    [("XTRIM", "s", "MAXLEN", "3", "KEEPREF")],
    [("XTRIM", "s", "MINID", "6-1", "KEEPREF")],
    [("XTRIM", "s", "MAXLEN", "~", "2", "KEEPREF")],
    [("XADD", "s", "KEEPREF", "MAXLEN", "4", "20-1", "f", "v")],
    [("XADD", "s", "MAXLEN", "=", "4", "KEEPREF", "20-1", "f", "v")],
])
def test_keepref_is_redis7_trimming(r: redis.Redis, oracle_client: redis.Redis,
                                    cmds: list[tuple[str, ...]]) -> None:
    """R1: with KEEPREF the same commands leave the same stream, groups and PELs as plain
    Redis 7 trimming (compared with redis-server, which has no KEEPREF word)."""
    for c in (r, oracle_client):
        c.config_set("stream-node-max-entries", "3")
        fill(c, "s", 10)
        c.xgroup_create("s", "g", "0")
        c.xreadgroup("g", "c1", {"s": ">"}, count=7)
    try:
        for cmd in cmds:
            mine = r.execute_command(*cmd)
            theirs = oracle_client.execute_command(*[a for a in cmd if a != "KEEPREF"])
            assert mine == theirs
        assert ids(r, "s") == ids(oracle_client, "s")
        assert pending_ids(r, "s", "g") == pending_ids(oracle_client, "s", "g")
        mine_full = strip_nacked(r.execute_command("XINFO", "STREAM", "s", "FULL"))
        theirs_full = oracle_client.execute_command("XINFO", "STREAM", "s", "FULL")
        # active-time is 7.2's; the oracle may be 7.0. Compare the rest.
        assert mine_full[:14] == theirs_full[:14]
    finally:
        for c in (r, oracle_client):
            c.config_set("stream-node-max-entries", "100")


@pytest.mark.parametrize("trim", [
    ("XTRIM", "s", "MAXLEN", "3", "DELREF"),
    ("XTRIM", "s", "MINID", "8-1", "DELREF"),
    ("XTRIM", "s", "MAXLEN", "~", "2", "DELREF"),
    ("XADD", "s", "DELREF", "MAXLEN", "3", "*", "f", "v"),
])
def test_delref_leaves_no_dangling_pel_entry(r: redis.Redis, trim: tuple[str, ...]) -> None:
    """R2 (a test that matters): after a DELREF trim no group's PEL holds an ID that is not
    in the stream; KEEPREF (R1) leaves them."""
    r.config_set("stream-node-max-entries", "3")
    try:
        fill(r, "s", 10)
        for g in ("a", "b"):
            r.xgroup_create("s", g, "0")
            r.xreadgroup(g, "c", {"s": ">"})
        r.xack("s", "b", "2-1", "4-1")
        r.execute_command(*trim)
        live = set(ids(r, "s"))
        for g in ("a", "b"):
            pend = pending_ids(r, "s", g)
            assert pend and set(pend) <= live, (g, pend, live)
            info = {x[b"name"]: x for x in full_groups(r, "s")}[g.encode()]
            assert info[b"pel-count"] == len(pend)
            owned = [dict(zip(c[::2], c[1::2], strict=True))[b"pel-count"]
                     for c in info[b"consumers"]]
            assert sum(owned) == len(pend)
        # The same trim with KEEPREF keeps what the PELs hold.
        for _ in range(5):
            r.xadd("s", {"f": "v"})
        r.xreadgroup("a", "c", {"s": ">"})
        before = pending_ids(r, "s", "a")
        r.xtrim("s", maxlen=1, approximate=False)
        assert pending_ids(r, "s", "a") == before
    finally:
        r.config_set("stream-node-max-entries", "100")


def test_acked_trims_only_what_every_group_acknowledged(r: redis.Redis) -> None:
    """R3, O1: ACKED keeps every entry some group has not read (ID > its last-delivered ID)
    or not acknowledged (in its PEL), and stops at the first such entry."""
    fill(r, "s", 10)
    assert r.xtrim("s", maxlen=2, approximate=False, ref_policy="ACKED") == 8  # no group: R3
    fill(r, "s", 10, start=20)                    # 9-1, 10-1, 20-1 .. 29-1
    r.xgroup_create("s", "a", "0")
    r.xgroup_create("s", "b", "0")
    r.xreadgroup("a", "c", {"s": ">"}, count=8)   # a: 9-1 .. 25-1 pending
    r.xreadgroup("b", "c", {"s": ">"}, count=5)   # b: 9-1 .. 22-1 pending
    assert r.xtrim("s", maxlen=0, approximate=False, ref_policy="ACKED") == 0  # all pending
    assert r.xack("s", "a", "9-1", "10-1", *[f"{i}-1" for i in range(20, 26)]) == 8
    assert r.xack("s", "b", "9-1", "10-1", "20-1", "22-1") == 4
    # b has not acknowledged 21-1: the trim removes 9-1, 10-1, 20-1 and stops there (O1),
    # though 22-1 was acknowledged by both.
    assert r.xtrim("s", maxlen=0, approximate=False, ref_policy="ACKED") == 3
    assert ids(r, "s")[0] == b"21-1"
    r.xack("s", "b", "21-1")
    # Now b's last-delivered ID (22-1) bounds it: MINID 22-1 cuts 21-1, MINID 29-1 only up
    # to 22-1 (23-1 was read by a, not by b).
    assert r.xtrim("s", minid="22-1", approximate=False, ref_policy="ACKED") == 1
    assert r.xtrim("s", minid="29-1", approximate=False, ref_policy="ACKED") == 1
    assert ids(r, "s")[0] == b"23-1"
    assert r.xadd("s", {"f": "v"}, id="40-1", maxlen=0, approximate=False,
                  ref_policy="ACKED") == b"40-1"
    assert ids(r, "s")[0] == b"23-1"


def test_acked_fan_out_never_loses_an_unacknowledged_entry(r: redis.Redis) -> None:
    """The test that matters (R3): three groups read and acknowledge at their own pace while
    the producer trims with `MAXLEN ~ 5 ACKED` (and now and then XTRIM ... ACKED, exact and
    approximate); no entry that a group has not acknowledged ever leaves the stream, and once
    every group acknowledged everything the stream shrinks to the threshold."""
    rng = random.Random(1717)
    r.config_set("stream-node-max-entries", "4")
    try:
        groups = ["g1", "g2", "g3"]
        r.xgroup_create("s", "g1", "$", mkstream=True)
        for g in groups[1:]:
            r.xgroup_create("s", g, "$")
        unacked: dict[str, set[bytes]] = {g: set() for g in groups}  # not yet acknowledged
        pending: dict[str, list[bytes]] = {g: [] for g in groups}
        added = 0
        for step in range(600):
            x = rng.random()
            if x < 0.45:
                sid = r.xadd("s", {"n": str(step)}, maxlen=5, approximate=True, ref_policy="ACKED")
                added += 1
                for g in groups:
                    unacked[g].add(sid)
            elif x < 0.75:
                g = rng.choice(groups)
                got = r.xreadgroup(g, rng.choice(["c1", "c2"]), {"s": ">"},
                                   count=rng.randint(1, 4))
                for _key, entries in got:
                    pending[g] += [e[0] for e in entries]
            elif x < 0.95:
                g = rng.choice(groups)
                if pending[g]:
                    k = rng.randint(1, len(pending[g]))
                    done = rng.sample(pending[g], k)
                    assert r.xack("s", g, *done) == k
                    pending[g] = [p for p in pending[g] if p not in done]
                    unacked[g] -= set(done)
            else:
                r.xtrim("s", maxlen=rng.choice([0, 3]), approximate=rng.random() < 0.5,
                        ref_policy="ACKED")
            live = set(ids(r, "s"))
            for g in groups:
                assert unacked[g] <= live, (step, g, sorted(unacked[g] - live))
        for g in groups:
            r.xreadgroup(g, "c1", {"s": ">"})
            r.xack("s", g, *pending_ids(r, "s", g))
        r.xtrim("s", maxlen=5, approximate=False, ref_policy="ACKED")
        assert r.xlen("s") == 5 and added > 200
    finally:
        r.config_set("stream-node-max-entries", "100")


def test_xdelex_replies(r: redis.Redis) -> None:
    """R4 with each policy; R2 and R3 for single IDs; a missing key answers -1 per ID."""
    assert r.execute_command("XDELEX", "nokey", "IDS", "2", "1-1", "2-1") == [-1, -1]
    fill(r, "s", 6)
    r.xgroup_create("s", "g", "0")
    r.xgroup_create("s", "h", "0")
    r.xreadgroup("g", "c", {"s": ">"}, count=4)   # g: 1..4 pending
    r.xreadgroup("h", "c", {"s": ">"}, count=2)   # h: 1..2 pending, 3.. not read
    r.xack("s", "g", "1-1")
    r.xack("s", "h", "1-1")
    # ACKED: 1-1 acknowledged by both -> 1; 2-1 pending in both -> 2; 99-1 no such -> -1.
    assert r.execute_command("XDELEX", "s", "ACKED", "IDS", "3", "1-1", "2-1", "99-1") == [1, 2, -1]
    # KEEPREF (the default): deleted, references stay.
    assert r.execute_command("XDELEX", "s", "IDS", "1", "2-1") == [1]
    assert b"2-1" in pending_ids(r, "s", "g") and b"2-1" in pending_ids(r, "s", "h")
    # DELREF: deleted and gone from every PEL; an ID given twice is -1 the second time.
    assert r.execute_command("XDELEX", "s", "DELREF", "IDS", "2", "3-1", "3-1") == [1, -1]
    assert b"3-1" not in pending_ids(r, "s", "g")
    assert ids(r, "s") == [b"4-1", b"5-1", b"6-1"]
    info = r.xinfo_stream("s")
    assert info["max-deleted-entry-id"] == b"3-1"  # deleted like XDEL, not trimmed


@pytest.mark.parametrize("args, error", [
    (("s", "IDS", "0", "1-1"), "Number of IDs must be a positive integer"),
    (("s", "IDS", "x", "1-1"), "Number of IDs must be a positive integer"),
    (("s", "IDS", "2", "1-1"), "numids"),
    (("s", "IDS", "1", "1-1", "2-1"), "numids"),
    (("s", "BOGUS", "IDS", "1", "1-1"), "syntax error"),
    (("s", "ACKED", "IDS", "1", "nope"), "Invalid stream ID"),
])
def test_xdelex_errors_change_nothing(r: redis.Redis, args: tuple[str, ...], error: str) -> None:
    fill(r, "s", 2)
    with pytest.raises(redis.ResponseError, match=error):
        r.execute_command("XDELEX", *args)
    with pytest.raises(redis.ResponseError, match="Invalid stream ID"):
        r.execute_command("XDELEX", "s", "IDS", "2", "1-1", "bad")
    assert r.xlen("s") == 2


def test_xackdel(r: redis.Redis) -> None:
    """R5, O2: acknowledge in the group, then delete by the policy."""
    assert r.execute_command("XACKDEL", "nokey", "g", "IDS", "1", "1-1") == [-1]
    fill(r, "s", 5)
    r.xgroup_create("s", "g", "0")
    r.xgroup_create("s", "h", "0")
    assert r.execute_command("XACKDEL", "s", "nogroup", "IDS", "1", "1-1") == [-1]
    r.xreadgroup("g", "c", {"s": ">"})
    r.xreadgroup("h", "c", {"s": ">"}, count=3)
    # ACKED: h still has 1-1 pending -> acknowledged in g, kept (2); 4-1 unread by h -> 2.
    assert r.execute_command("XACKDEL", "s", "g", "ACKED", "IDS", "2", "1-1", "4-1") == [2, 2]
    assert b"1-1" not in pending_ids(r, "s", "g") and r.xlen("s") == 5
    # Once h acknowledged 1-1 too, XACKDEL ACKED in g... g already acked it: still deleted.
    r.xack("s", "h", "1-1")
    assert r.execute_command("XACKDEL", "s", "g", "ACKED", "IDS", "1", "1-1") == [1]
    # KEEPREF: deleted, h's reference stays; DELREF: h's reference goes too.
    assert r.execute_command("XACKDEL", "s", "g", "KEEPREF", "IDS", "1", "2-1") == [1]
    assert b"2-1" in pending_ids(r, "s", "h")
    assert r.execute_command("XACKDEL", "s", "g", "DELREF", "IDS", "1", "3-1") == [1]
    assert b"3-1" not in pending_ids(r, "s", "h")
    # O2: no entry (2-1 was deleted) -> -1, but h's pending 2-1 is acknowledged.
    assert r.execute_command("XACKDEL", "s", "h", "IDS", "1", "2-1") == [-1]
    assert pending_ids(r, "s", "h") == []
    assert ids(r, "s") == [b"4-1", b"5-1"]
    with pytest.raises(redis.ResponseError, match="numids"):
        r.execute_command("XACKDEL", "s", "g", "IDS", "2", "4-1")


def test_policies_in_command_table(r: redis.Redis, node: NodeHandle) -> None:
    """COMMAND INFO/DOCS know the new commands and arguments; GETKEYS finds their key."""
    with RawClient(node.host, node.port) as rc:
        info = rc.call("COMMAND", "INFO", "XDELEX", "XACKDEL")
        keys = rc.call("COMMAND", "GETKEYS", "XACKDEL", "k", "g", "IDS", "1", "1-1")
        docs = repr(rc.call("COMMAND", "DOCS", "XTRIM"))
    # A raw reply is (type, value): each entry's name and arity come first.
    assert [(e[1][0][1], e[1][1][1]) for e in info[1]] == [(b"xdelex", -5), (b"xackdel", -6)]
    assert keys == ("*", [("$", b"k")])
    assert "KEEPREF" in docs and "ACKED" in docs
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        r.execute_command("XDELEX", "k", "IDS", "1")
