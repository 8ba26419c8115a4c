"""Idempotent XADD (Redis 8.6: `IDMP pid iid`, `IDMPAUTO pid`, XCFGSET, XINFO STREAM fields).

There is no Redis 8 server here to compare with, so every test states the rule it checks. The
rules from Redis 8.6's documentation:
- R1: the first XADD with a (producer, iid) pair adds its entry; a later one adds nothing and
  answers the ID of the first.
- R2: IDMPAUTO derives the iid from the field/value pairs: the same pairs are a duplicate.
- R3: a pair is forgotten `IDMP-DURATION` seconds after it was recorded (default 100), and a
  producer keeps at most `IDMP-MAXSIZE` pairs (default 100), forgetting its oldest first.
- R4 (sure, Redis's own tests): XINFO STREAM shows idmp-duration, idmp-maxsize,
  pids-tracked, iids-tracked, iids-added, iids-duplicates on every stream, after
  recorded-first-entry-id and before groups; a stream that never used IDMP has counters 0
  and the limits of the configs stream-idmp-duration (1-86400) and stream-idmp-maxsize
  (1-10000). iids-added and iids-duplicates are lifetime counters.
- R6 (sure): an XCFGSET that changes a value clears every producer's history (pids-tracked,
  iids-tracked 0, lifetime counters kept); one that sets the same values clears nothing.
- R5: the map survives restarts (AOF and snapshots) and is replicated.
Rules of ours, where the documentation leaves a choice (node/idmp.py says why):
- O1: "now" for expiry is the stream's clock, the millisecond part of the entry IDs, so an
  explicit ID in the future moves it; replicas and AOF replay reach the same map.
- O2: the IDMP fields sit after recorded-first-entry-id in XINFO STREAM FULL too.
- O3: the duplicate check comes before the ID check, so a retried explicit-ID XADD gets its ID.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.conftest import NodeHandle
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient


def xinfo(r: redis.Redis, key: str) -> dict:
    raw = r.execute_command("XINFO", "STREAM", key)
    d = dict(zip(raw[::2], raw[1::2], strict=True))
    return {k.decode(): v for k, v in d.items()}


def idmp_fields(r: redis.Redis, key: str) -> tuple[int, ...]:
    d = xinfo(r, key)
    return tuple(d[k] for k in ("idmp-duration", "idmp-maxsize", "pids-tracked", "iids-tracked",
                                "iids-added", "iids-duplicates"))


def xadd(r: redis.Redis, key: str, *args: str | int) -> bytes:
    return r.execute_command("XADD", key, *args)


def test_duplicate_returns_the_original_id_and_adds_nothing(r: redis.Redis) -> None:
    """R1, R4."""
    a = xadd(r, "s", "IDMP", "p1", "i1", "*", "f", "v")
    b = xadd(r, "s", "IDMP", "p1", "i1", "*", "f", "other")  # the pair decides, not the fields
    assert a == b
    assert r.xlen("s") == 1
    c = xadd(r, "s", "IDMP", "p1", "i2", "*", "f", "v")
    d = xadd(r, "s", "IDMP", "p2", "i1", "*", "f", "v")  # iids are per producer
    assert len({a, c, d}) == 3 and r.xlen("s") == 3
    assert idmp_fields(r, "s") == (100, 100, 2, 3, 3, 1)
    # A plain XADD is not tracked; a plain stream shows the fields with zeros (R4).
    xadd(r, "s", "*", "f", "v")
    assert idmp_fields(r, "s")[3:5] == (3, 3)
    xadd(r, "plain", "*", "f", "v")
    assert idmp_fields(r, "plain") == (100, 100, 0, 0, 0, 0)
    keys = list(xinfo(r, "plain"))
    assert keys[keys.index("recorded-first-entry-id") + 1:keys.index("groups")] == [
        "idmp-duration", "idmp-maxsize", "pids-tracked", "iids-tracked", "iids-added",
        "iids-duplicates"]
    full = r.execute_command("XINFO", "STREAM", "plain", "FULL")
    at = full.index(b"recorded-first-entry-id")
    assert full[at + 2:at + 14:2] == [b"idmp-duration", b"idmp-maxsize", b"pids-tracked",
                                      b"iids-tracked", b"iids-added", b"iids-duplicates"]


def test_configs_give_the_limits_of_a_stream_without_its_own(r: redis.Redis) -> None:
    """R4: CONFIG GET/SET stream-idmp-duration and stream-idmp-maxsize, with their ranges."""
    assert r.config_get("stream-idmp-*") == {"stream-idmp-duration": "100",
                                              "stream-idmp-maxsize": "100"}
    xadd(r, "plain", "*", "f", "v")
    try:
        r.config_set("stream-idmp-duration", 7)
        r.config_set("stream-idmp-maxsize", 9)
        assert idmp_fields(r, "plain")[:2] == (7, 9)
        for name, bad in [("stream-idmp-duration", 0), ("stream-idmp-duration", 86401),
                          ("stream-idmp-maxsize", 0), ("stream-idmp-maxsize", 10001)]:
            with pytest.raises(redis.ResponseError, match="must be between"):
                r.config_set(name, bad)
    finally:
        r.config_set("stream-idmp-duration", 100)
        r.config_set("stream-idmp-maxsize", 100)


def test_a_streams_first_idmp_entry_takes_the_configs_limits(r: redis.Redis) -> None:
    """R3, R4: the limits of a stream's IDMP map come from the configs when it starts: by its
    first IDMP XADD, or by an XCFGSET that sets one limit only (the other from its config).
    They stay the stream's own after that (a later CONFIG SET does not move them)."""
    try:
        r.config_set("stream-idmp-duration", 7)
        r.config_set("stream-idmp-maxsize", 2)
        xadd(r, "s", "IDMP", "p", "a", "*", "f", "v")
        assert idmp_fields(r, "s") == (7, 2, 1, 1, 1, 0)
        xadd(r, "s", "IDMP", "p", "b", "*", "f", "v")
        xadd(r, "s", "IDMP", "p", "c", "*", "f", "v")
        assert idmp_fields(r, "s") == (7, 2, 1, 2, 3, 0)  # maxsize 2 evicted the oldest
        xadd(r, "t", "*", "f", "v")
        assert r.execute_command("XCFGSET", "t", "IDMP-DURATION", "60") == b"OK"
        r.config_set("stream-idmp-duration", 100)
        r.config_set("stream-idmp-maxsize", 100)
        assert idmp_fields(r, "s")[:2] == (7, 2)
        assert idmp_fields(r, "t")[:2] == (60, 2)
    finally:
        r.config_set("stream-idmp-duration", 100)
        r.config_set("stream-idmp-maxsize", 100)


def test_xcfgset_clears_the_histories_only_on_a_change(r: redis.Redis) -> None:
    """R6."""
    for n in range(3):
        xadd(r, "s", "IDMP", f"p{n}", "i", "*", "f", "v")
    xadd(r, "s", "IDMP", "p0", "i", "*", "f", "v")
    assert idmp_fields(r, "s") == (100, 100, 3, 3, 3, 1)
    assert r.execute_command("XCFGSET", "s", "IDMP-DURATION", "100", "IDMP-MAXSIZE", "100") == b"OK"
    assert idmp_fields(r, "s") == (100, 100, 3, 3, 3, 1)  # the same values: nothing cleared
    assert r.execute_command("XCFGSET", "s", "IDMP-MAXSIZE", "50") == b"OK"
    assert idmp_fields(r, "s") == (100, 50, 0, 0, 3, 1)  # cleared, lifetime counters kept
    assert xadd(r, "s", "IDMP", "p0", "i", "*", "f", "v") is not None
    assert r.xlen("s") == 4 and idmp_fields(r, "s") == (100, 50, 1, 1, 4, 1)


def test_idmpauto_hashes_the_pairs(r: redis.Redis) -> None:
    """R2: same pairs -> duplicate; different order or split -> new entry."""
    a = xadd(r, "s", "IDMPAUTO", "p", "*", "a", "1", "b", "2")
    assert xadd(r, "s", "IDMPAUTO", "p", "*", "a", "1", "b", "2") == a
    assert xadd(r, "s", "IDMPAUTO", "p", "*", "b", "2", "a", "1") != a
    assert xadd(r, "s", "IDMPAUTO", "p", "*", "a", "1b", "", "2") != a
    assert xadd(r, "s", "IDMPAUTO", "q", "*", "a", "1", "b", "2") != a  # per producer
    assert r.xlen("s") == 4


def test_with_trimming_nomkstream_and_explicit_ids(r: redis.Redis) -> None:
    """O3: a retry of an explicit-ID XADD answers its ID, not 'ID too small'; a duplicate does
    not trim; NOMKSTREAM on a missing key still answers nil."""
    assert xadd(r, "s", "IDMP", "p", "1", "MAXLEN", "2", "5-1", "f", "v") == b"5-1"
    assert xadd(r, "s", "IDMP", "p", "1", "MAXLEN", "2", "5-1", "f", "v") == b"5-1"
    assert xadd(r, "s", "IDMP", "p", "2", "7-*", "f", "v") == b"7-0"
    assert xadd(r, "s", "MAXLEN", "1", "IDMP", "p", "1", "8-0", "f", "v") == b"5-1"
    assert r.xlen("s") == 2
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        xadd(r, "s", "IDMP", "p", "3", "6-0", "f", "v")
    assert r.execute_command("XADD", "nokey", "NOMKSTREAM", "IDMP", "p", "1", "*", "f",
                             "v") is None
    assert not r.exists("nokey")


@pytest.mark.parametrize("args,error", [
    (("IDMP", "p", "i", "IDMP", "p", "j"), "only once"),
    (("IDMP", "p", "i", "IDMPAUTO", "p"), "only once"),
    (("IDMP", "", "i"), "must not be empty"),
    (("IDMP", "p", ""), "must not be empty"),
    (("IDMPAUTO", ""), "must not be empty"),
])
def test_bad_idmp_arguments(r: redis.Redis, args: tuple[str, ...], error: str) -> None:
    with pytest.raises(redis.ResponseError, match=error):
        xadd(r, "s", *args, "*", "f", "v")
    assert not r.exists("s")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        xadd(r, "s", "IDMP", "p", "i", "*", "f")


def test_xcfgset(r: redis.Redis) -> None:
    """R3, O2: limits and errors; the map is kept, a smaller maxsize evicts the oldest."""
    with pytest.raises(redis.ResponseError, match="no such key"):
        r.execute_command("XCFGSET", "s", "IDMP-MAXSIZE", "5")
    xadd(r, "s", "*", "f", "v")
    for args, err in [((), "^At least one parameter must be specified$"),
                      (("IDMP-MAXSIZE",), "syntax"), (("BOGUS", "1"), "syntax"),
                      (("IDMP-MAXSIZE", "0"), "^IDMP-MAXSIZE must be between 1 and 10000 entries$"),
                      (("IDMP-MAXSIZE", "10001"), "between 1 and 10000 entries"),
                      (("IDMP-DURATION", "0"), "between 1 and 86400"),
                      (("IDMP-DURATION", "86401"), "between 1 and 86400"),
                      (("IDMP-DURATION", "x"), "not an integer")]:
        with pytest.raises(redis.ResponseError, match=err):
            r.execute_command("XCFGSET", "s", *args)
    assert idmp_fields(r, "s") == (100, 100, 0, 0, 0, 0)
    assert r.execute_command("XCFGSET", "s", "IDMP-DURATION", "60", "IDMP-MAXSIZE", "5") == b"OK"
    assert idmp_fields(r, "s") == (60, 5, 0, 0, 0, 0)
    ids = [xadd(r, "s", "IDMP", "p", f"i{n}", "*", "n", n) for n in range(5)]
    assert xadd(r, "s", "IDMP", "p", "i4", "*", "n", 4) == ids[4]  # tracked
    r.execute_command("XCFGSET", "s", "IDMP-MAXSIZE", "3")
    assert idmp_fields(r, "s") == (60, 3, 0, 0, 5, 1)  # R6: a change clears the histories
    assert xadd(r, "s", "IDMP", "p", "i4", "*", "n", 4) != ids[4]  # forgotten: added again
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.set("str", "x")
        r.execute_command("XCFGSET", "str", "IDMP-MAXSIZE", "3")


def test_maxsize_evicts_the_producers_oldest(r: redis.Redis) -> None:
    """R3: with IDMP-MAXSIZE 3, the 4th pair of a producer evicts its 1st; others unaffected."""
    xadd(r, "s", "*", "f", "v")
    r.execute_command("XCFGSET", "s", "IDMP-MAXSIZE", "3")
    xadd(r, "s", "IDMP", "other", "x", "*", "f", "v")
    ids = [xadd(r, "s", "IDMP", "p", f"i{n}", "*", "n", n) for n in range(4)]
    assert idmp_fields(r, "s")[2:] == (2, 4, 5, 0)
    assert xadd(r, "s", "IDMP", "p", "i3", "*", "n", 3) == ids[3]
    assert xadd(r, "s", "IDMP", "other", "x", "*", "f", "v") != ids[0]  # still known
    assert r.xlen("s") == 6  # with the plain first entry
    assert xadd(r, "s", "IDMP", "p", "i0", "*", "n", 0) not in ids  # forgotten: added again
    assert r.xlen("s") == 7


def test_duration_uses_the_stream_clock(r: redis.Redis) -> None:
    """R3, O1: with IDMP-DURATION 1, a pair recorded at ms 1000 is a duplicate until ms 1999
    and forgotten from ms 2000 on; the clock is the entry IDs, so explicit IDs drive it."""
    xadd(r, "s", "999-0", "f", "v")
    r.execute_command("XCFGSET", "s", "IDMP-DURATION", "1")
    xadd(r, "s", "IDMP", "p", "a", "1000-0", "f", "v")
    xadd(r, "s", "IDMP", "q", "b", "1500-0", "f", "v")
    assert xadd(r, "s", "IDMP", "p", "a", "1999-0", "f", "v") == b"1000-0"
    assert xadd(r, "s", "IDMP", "p", "a", "2000-0", "f", "v") == b"2000-0"
    # Recording at ms 2000 expired nothing else: q/b (ms 1500) is still known.
    assert idmp_fields(r, "s")[2:] == (2, 2, 3, 1)
    assert xadd(r, "s", "IDMP", "z", "c", "2600-0", "f", "v") == b"2600-0"
    assert idmp_fields(r, "s")[2:] == (2, 2, 4, 1)  # q/b (1500 + 1000 <= 2600) is gone
    # `*` takes the wall clock, long after ms 2600: every pair there is forgotten.
    assert xadd(r, "s", "IDMP", "z", "c", "*", "f", "v") != b"2600-0"
    assert idmp_fields(r, "s")[2:] == (1, 1, 5, 1)


def test_commands_table_knows_the_new_arguments(r: redis.Redis, node: NodeHandle) -> None:
    info = r.execute_command("COMMAND", "INFO", "XCFGSET")["xcfgset"]
    assert (info["arity"], info["first_key_pos"], info["last_key_pos"]) == (-2, 1, 1)
    assert r.command_getkeys("XCFGSET", "k", "IDMP-MAXSIZE", "1") == ["k"]
    with RawClient(node.host, node.port) as c:
        docs = repr(c.call("COMMAND", "DOCS", "XADD"))
    assert "IDMPAUTO" in docs and "'IDMP'" in docs and "8.6.0" in docs


# -- persistence and replication (R5) -----------------------------------------------------------
# Explicit IDs only: the stream clock (O1) then makes these tests independent of wall time.

def _fill(c: redis.Redis) -> dict[str, bytes]:
    """Pairs on two streams, with eviction and expiry in their history; returns the IDs that
    known pairs must answer."""
    c.execute_command("XADD", "a", "IDMP", "p", "x", "1000-0", "f", "v")
    c.execute_command("XCFGSET", "a", "IDMP-DURATION", "2", "IDMP-MAXSIZE", "3")
    for n in range(6):  # p keeps i3..i5 (maxsize); x (ms 1000) expires at ms 3000 (duration)
        c.execute_command("XADD", "a", "IDMP", "p", f"i{n}", f"{2000 + n * 300}-0", "f", n)
    c.execute_command("XADD", "a", "IDMP", "q", "y", "3600-0", "f", "v")
    c.execute_command("XADD", "b", "IDMPAUTO", "p", "1-0", "f", "v")
    return {"q/y": b"3600-0", "auto": b"1-0"}


def _probe(c: redis.Redis) -> dict[str, bytes]:
    """Ask the map: known pairs answer their ID; forgotten ones add an entry."""
    out = {
        "q/y": c.execute_command("XADD", "a", "IDMP", "q", "y", "3700-0", "f", "v"),
        "auto": c.execute_command("XADD", "b", "IDMPAUTO", "p", "3-0", "f", "v"),
    }
    n = c.xlen("a")
    for iid in ("i3", "i4", "i5"):
        c.execute_command("XADD", "a", "IDMP", "p", iid, "3800-0", "f", "again")
    assert c.xlen("a") == n, "i3..i5 were forgotten"
    c.execute_command("XADD", "a", "IDMP", "p", "i2", "3900-0", "f", "again")
    c.execute_command("XADD", "a", "IDMP", "p", "x", "4000-0", "f", "again")
    assert c.xlen("a") == n + 2, "i2 (evicted) or x (expired) was still known"
    return out


def test_the_map_survives_aof_and_snapshot_restarts(xnode: Callable[..., NodeHandle]) -> None:
    """R5: an AOF replay, then a snapshot (the rewritten AOF's base), rebuild the same map."""
    h = xnode("--appendonly", "yes", "--appendfsync", "always")
    c = h.client()
    want = _fill(c)
    fields = {k: idmp_fields(c, k) for k in ("a", "b")}
    assert fields == {"a": (2, 3, 2, 4, 8, 0), "b": (100, 100, 1, 1, 1, 0)}
    h.kill()
    h.start()
    c = h.client()
    assert {k: idmp_fields(c, k) for k in ("a", "b")} == fields
    # A duplicate changes no data, so it is not in the AOF; iids-duplicates is this node's
    # count, kept by snapshots.
    assert c.execute_command("XADD", "b", "IDMPAUTO", "p", "2-0", "f", "v") == b"1-0"
    fields["b"] = (100, 100, 1, 1, 1, 1)
    c.execute_command("BGREWRITEAOF")
    wait_until(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0
               and c.info("persistence")["aof_rewrite_scheduled"] == 0, 30, what="AOF rewrite")
    h.kill()
    h.start()
    c = h.client()
    assert {k: idmp_fields(c, k) for k in ("a", "b")} == fields
    assert _probe(c) == want


def test_replicas_and_a_promoted_replica_have_the_same_map(
        xnode: Callable[..., NodeHandle]) -> None:
    """R5, O1: a replica's map (from the full-sync snapshot and then from effects) equals the
    primary's; promoted, it answers the same duplicates and forgets the same pairs."""
    p = xnode(name="primary")
    pc = p.client()
    pc.execute_command("XADD", "e", "IDMP", "p", "early", "1-0", "f", "v")  # via the snapshot
    rep = xnode("--replicaof", f"127.0.0.1 {p.port}", name="replica")
    rc = rep.client()
    want = _fill(pc)

    def caught_up() -> bool:
        off = pc.info("replication")["master_repl_offset"]
        return rc.info("replication").get("slave_repl_offset", -1) >= off

    wait_until(caught_up, 20, what="replica caught up")
    for k in ("a", "b", "e"):
        assert idmp_fields(rc, k) == idmp_fields(pc, k)
    rc.execute_command("REPLICAOF", "NO", "ONE")
    assert rc.execute_command("XADD", "e", "IDMP", "p", "early", "2-0", "f", "v") == b"1-0"
    assert _probe(rc) == want


def test_version_1_snapshots_still_load(tmp_path) -> None:  # noqa: ANN001
    """A snapshot written before IDMP (format version 1: no map in the stream head) loads."""
    import marshal
    import struct
    from types import SimpleNamespace

    from node import snapshot
    from node.stream import Stream

    s = Stream()
    s.append(5 << 64, [b"f", b"v"], 100, 4096)
    db = SimpleNamespace(data={b"k": s}, expires={})  # what records() reads of a Keyspace
    chunks = list(snapshot.records(db, {"x": 1}))  # type: ignore[arg-type]
    assert chunks[0].endswith(struct.pack("<H", snapshot.VERSION))
    v1 = [chunks[0][:-2] + b"\x01\x00"]
    for ch in chunks[1:]:
        if ch[:1] == b"S":
            head = marshal.loads(ch[5:-4])
            assert head[5] is None
            ch = snapshot._record(b"S", marshal.dumps(head[:5], 4))
        v1.append(ch)
    path = tmp_path / "v1.snap"
    path.write_bytes(b"".join(v1))
    snap = snapshot.read(str(path))
    got = snap.data[b"k"]
    assert got.idmp is None and list(got.range(0, (1 << 128) - 1)) == [(5 << 64, [b"f", b"v"])]


def test_a_newer_snapshot_format_is_refused_by_its_version(tmp_path) -> None:  # noqa: ANN001
    """A file from a newer format (say, one whose pending entries an older loader cannot read,
    as version 3's unowned XNACK entries are to version 2) is refused with a message that names
    both versions, not with whatever error its records would cause."""
    import struct
    from types import SimpleNamespace

    import pytest

    from node import snapshot
    from node.stream import Stream

    db = SimpleNamespace(data={b"k": Stream()}, expires={})
    chunks = list(snapshot.records(db, {}))  # type: ignore[arg-type]
    newer = struct.pack("<H", snapshot.VERSION + 1)
    path = tmp_path / "future.snap"
    path.write_bytes(chunks[0][:-2] + newer + b"".join(chunks[1:]))
    with pytest.raises(snapshot.SnapshotError,
                       match=f"version {snapshot.VERSION + 1} is newer than this server's "
                             f"{snapshot.VERSION}"):
        snapshot.read(str(path))
