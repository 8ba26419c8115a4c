"""DUMP, RESTORE and MIGRATE against real servers: payloads cross in both directions.

The streams are built with explicit IDs, so both sides hold the same node keys and even
`radix-tree-nodes` must agree. A restored key's `XINFO STREAM key FULL COUNT 0` is compared
field for field with the source's, times included (a payload carries them).

- oracle72 (valkey, Redis 7.2 semantics): DUMP there, RESTORE here, and the other way round.
- oracle (redis-server 7.0): its payloads (stream type 19, RDB 10) restore here; ours (type 21,
  RDB 11) are refused there, as Redis 7.0 refuses any 7.2 stream payload.
- A stream with XNACKed entries is written in Redis 8.8's layout (type 27, RDB 14): read back
  here, refused by both older servers.
- Redis 6.2's stream type 15 (no entries-added, first ID, max-deleted ID or entries-read) is
  built here with the 6.2 layout and restored on every server; they must agree.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import redis

from node import rdb
from node.resp import encode_command
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient


def build_stream(c: redis.Redis, key: str = "s") -> None:
    """A stream with every part a payload carries: nodes with deleted entries and mixed field
    sets, large and integer-looking values, two groups, PELs, consumers, an XSETID."""
    pipe = c.pipeline(transaction=False)
    for i in range(1, 700):
        ms = 1000 + i // 3
        if i % 7 == 0:
            fields = {"other": "x" * (i % 90), "n": str(-i * 1000)}
        else:
            fields = {"a": str(i), "b": "hello" * (i % 4), "c": "-12"}
        pipe.xadd(key, fields, id=f"{ms}-{i % 3}")
    pipe.xadd(key, {"big": "z" * 5000}, id="5000-0")
    pipe.execute()
    ids = [e[0] for e in c.xrange(key, "-", "+")]
    c.xdel(key, *ids[5:200:4])
    c.xtrim(key, minid="1010-0")
    c.xgroup_create(key, "g", "0")
    c.xgroup_create(key, "h", "1100-0")
    c.xgroup_create(key, "zz", "$")
    c.xreadgroup("g", "alice", {key: ">"}, count=30)
    c.xreadgroup("g", "bob", {key: ">"}, count=12)
    c.xreadgroup("h", "123", {key: ">"}, count=4)
    c.xgroup_createconsumer(key, "g", "idle")
    pend = c.xpending_range(key, "g", "-", "+", 100)
    c.xack(key, "g", *[p["message_id"] for p in pend[::3]])
    c.xclaim(key, "g", "bob", 0, [pend[1]["message_id"]])
    c.xdel(key, pend[4]["message_id"])


def full(c: redis.Redis, key: str = "s") -> list:
    """XINFO STREAM FULL COUNT 0 without the groups' `nacked-count` (Redis 8.8's field) and
    the IDMP fields (Redis 8.6's), which the 7.x oracles lack."""
    info = c.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0")
    if b"idmp-duration" in info:
        i = info.index(b"idmp-duration")
        del info[i:i + 12]
    gi = info.index(b"groups") + 1
    for g in info[gi]:
        if b"nacked-count" in g:
            i = g.index(b"nacked-count")
            del g[i:i + 2]
    return info


def drop_active_time(info: list) -> list:
    """Redis 7.0 has no consumer active-time: drop ours to compare with it."""
    out = list(info)
    gi = out.index(b"groups") + 1
    groups = []
    for g in out[gi]:
        g = list(g)
        ci = g.index(b"consumers") + 1
        cons = []
        for cn in g[ci]:
            cn = list(cn)
            k = cn.index(b"active-time")
            del cn[k:k + 2]
            cons.append(cn)
        g[ci] = cons
        groups.append(g)
    out[gi] = groups
    return out


# --- streams, both ways -------------------------------------------------------------------------
def test_stream_from_valkey(oracle72, r: redis.Redis) -> None:
    o = oracle72.client()
    o.delete("s")
    try:
        build_stream(o)
        assert r.restore("s", 0, o.dump("s"))
        assert full(r) == full(o)
        assert r.xrange("s", "-", "+") == o.xrange("s", "-", "+")
    finally:
        o.delete("s")


def test_stream_to_valkey(oracle72, r: redis.Redis) -> None:
    o = oracle72.client()
    o.delete("s", "mirror")
    try:
        build_stream(r)
        build_stream(o, "mirror")
        o.restore("s", 0, r.dump("s"))
        assert full(o) == full(r)
        # The same commands on valkey give the same stream, counters and nodes, save times.
        mine, theirs = full(r), full(o, "mirror")
        assert mine[:mine.index(b"groups")] == theirs[:theirs.index(b"groups")]
    finally:
        o.delete("s", "mirror")


def test_stream_from_redis70(oracle, r: redis.Redis) -> None:
    o = oracle.client()
    o.delete("s")
    try:
        build_stream(o)
        payload = o.dump("s")
        assert payload[0] == rdb.T_STREAM_2 and payload[-10] == 10
        assert r.restore("s", 0, payload)
        assert drop_active_time(full(r)) == full(o)
        # 7.0 payloads carry no active-time: Redis 7.2 sets it to the seen-time.
        info = r.xinfo_stream("s", full=True)
        for g in info["groups"]:
            for cn in g["consumers"]:
                assert cn["active-time"] == cn["seen-time"]
    finally:
        o.delete("s")


def test_redis70_refuses_our_stream_payload(oracle, r: redis.Redis) -> None:
    o = oracle.client()
    r.xadd("s", {"f": "v"}, id="1-1")
    with pytest.raises(redis.ResponseError, match="DUMP payload version or checksum are wrong"):
        o.restore("s2", 0, r.dump("s"))


def test_nacked_stream_is_dumped_in_the_88_layout(oracle, oracle72, r: redis.Redis) -> None:
    """Rule (sure, Redis 8.8): a stream with XNACKed entries is written as RDB version 14,
    stream type 27 with a NACK zone per group; one without keeps the 7.2+ layout (type 21,
    RDB 11) that redis-server 7.x and valkey read. Ours reads its own payload back with the
    NACKs (owner none, time and count), and the older servers refuse it as a payload of a
    newer version, changing nothing."""
    build_stream(r)
    plain = r.dump("s")
    assert plain[0] == rdb.T_STREAM_3 and struct.unpack("<H", plain[-10:-8]) == (11,)
    pend = r.xpending_range("s", "g", "-", "+", 10)
    r.execute_command("XNACK", "s", "g", "FAIL", "IDS", "2", pend[0]["message_id"],
                      pend[2]["message_id"])
    payload = r.dump("s")
    assert payload[0] == rdb.T_STREAM_4 and struct.unpack("<H", payload[-10:-8]) == (14,)
    assert rdb.check_payload(payload)
    r.restore("copy", 0, payload)
    assert full(r, "copy") == full(r, "s")
    raw = r.execute_command("XINFO", "STREAM", "copy", "FULL")
    groups = raw[raw.index(b"groups") + 1]
    nacked = {dict(zip(g[::2], g[1::2], strict=True))[b"nacked-count"] for g in groups}
    assert 2 in nacked
    def owners(key: str) -> list:  # the idle time of a NACKed entry (time 0) is "now"
        return [(p["message_id"], p["consumer"], p["times_delivered"])
                for p in r.xpending_range(key, "g", "-", "+", 10)]
    assert owners("copy") == owners("s")
    assert [o[1] for o in owners("s") if o[0] == pend[0]["message_id"]] == [b""]
    for server in (oracle, oracle72):
        o = server.client()
        with pytest.raises(redis.ResponseError,
                           match="DUMP payload version or checksum are wrong"):
            o.restore("nacked", 0, payload)
        assert not o.exists("nacked")
    # Once nothing is NACKed (claimed again), the stream moves to the older servers again.
    r.xclaim("s", "g", "carol", 0, [pend[0]["message_id"], pend[2]["message_id"]])
    again = r.dump("s")
    assert again[0] == rdb.T_STREAM_3
    o = oracle72.client()
    try:
        o.restore("back", 0, again)
        assert o.xpending("back", "g")["pending"] == r.xpending("s", "g")["pending"]
    finally:
        o.delete("back")


def _v62_payload(s) -> bytes:
    """A Redis 6.2 DUMP (RDB 9, stream type 15) of a stream: no entries-added, first ID,
    max-deleted ID or group entries-read; consumers have only a seen-time."""
    out = [bytes((rdb.T_STREAM_1,)), rdb._len(s.num_blocks())]
    for b in s.blocks():
        out.append(rdb._str(struct.pack(">QQ", b.first >> 64, b.first & rdb.SEQ_MAX)))
        out.append(rdb._str(rdb.stream_node_listpack(b)))
    out += [rdb._len(s.length), rdb._len(s.last_id >> 64), rdb._len(s.last_id & rdb.SEQ_MAX)]
    out.append(rdb._len(len(s.groups)))
    for name, g in sorted(s.groups.items()):
        out += [rdb._str(name), rdb._len(g.last_id >> 64), rdb._len(g.last_id & rdb.SEQ_MAX)]
        out.append(rdb._len(len(g.pel)))
        for sid, (t, n, _o) in g.pel.items():
            out.append(struct.pack(">QQq", sid >> 64, sid & rdb.SEQ_MAX, t) + rdb._len(n))
        out.append(rdb._len(len(g.consumers)))
        for cn in g.sorted_consumers():
            out.append(rdb._str(cn.name) + struct.pack("<q", cn.seen_time))
            out.append(rdb._len(len(cn.pel)))
            out += [struct.pack(">QQ", sid >> 64, sid & rdb.SEQ_MAX) for sid in cn.pel]
    body = b"".join(out) + struct.pack("<H", 9)
    return body + struct.pack("<Q", rdb.crc64(body))


def test_stream_from_redis62_layout(oracle, oracle72, r: redis.Redis) -> None:
    """The 6.2 layout restores on redis 7.0, valkey and xshard alike: entries-added becomes
    the length, the first ID the first live entry, entries-read an estimate."""
    build_stream(r)
    payload = _v62_payload(rdb.load_payload(r.dump("s")))
    v70, v72 = oracle.client(), oracle72.client()
    try:
        for c in (v70, v72):
            c.delete("old")
            assert c.restore("old", 0, payload)
        assert r.restore("old", 0, payload)
        assert full(r, "old") == full(v72, "old")
        assert drop_active_time(full(r, "old")) == full(v70, "old")
        # 7.2 rules on a 6.2 payload: tombstones (but no max-deleted ID) make lag unknown.
        assert r.xinfo_stream("old")["entries-added"] == r.xlen("old")
    finally:
        for c in (v70, v72):
            c.delete("old")


@pytest.mark.parametrize("kind", ["string", "int", "list", "biglist", "set", "intset"])
def test_other_types_both_ways(kind: str, oracle, oracle72, r: redis.Redis) -> None:
    for server in (oracle, oracle72):
        o = server.client()
        o.delete("k", "back")
        try:
            for c in (o, r):
                c.delete("k")
                if kind == "string":
                    c.set("k", "hello world " * 10)
                elif kind == "int":
                    c.set("k", "-123456")
                elif kind == "list":
                    c.rpush("k", "a", "1", "-7", "x" * 300)
                elif kind == "biglist":
                    c.rpush("k", *[str(i) * (i % 5 + 1) for i in range(1000)])
                elif kind == "set":
                    c.sadd("k", "a", "b", "ccc")
                else:
                    c.sadd("k", "1", "2", "-300000")
            r.restore("mine", 0, o.dump("k"))
            o.restore("back", 0, r.dump("k"))
            for c, key in ((r, "mine"), (o, "back")):
                assert c.type(key) == o.type("k")
                if kind in ("string", "int"):
                    assert c.get(key) == o.get("k")
                elif kind in ("list", "biglist"):
                    assert c.lrange(key, 0, -1) == o.lrange("k", 0, -1)
                else:
                    assert c.smembers(key) == o.smembers("k")
        finally:
            o.delete("k", "back")
            r.delete("mine")


# --- RESTORE options and errors, reply for reply -----------------------------------------------
def _payload(server) -> bytes:
    c = server.client()
    c.delete("p")
    c.xadd("p", {"f": "v"}, id="5-5")
    try:
        return c.dump("p")
    finally:
        c.delete("p")


def restore_script(payload: bytes) -> list[list]:
    bad_crc = payload[:-1] + bytes([payload[-1] ^ 1])
    body = payload[:-10] + b"\x00"
    trailing = body + payload[-10:-8]
    trailing += struct.pack("<Q", rdb.crc64(trailing))
    truncated = payload[:5] + payload[-10:-8]
    truncated += struct.pack("<Q", rdb.crc64(truncated))
    future = payload[:-10] + struct.pack("<H", 99)
    future += struct.pack("<Q", rdb.crc64(future))
    hash_type = b"\x04\x01\x01a\x01b" + struct.pack("<H", 10)
    hash_type += struct.pack("<Q", rdb.crc64(hash_type))
    return [
        ["RESTORE", "k", "0", payload], ["XRANGE", "k", "-", "+"], ["RESTORE", "k", "0", payload],
        ["RESTORE", "k", "0", payload, "REPLACE"], ["PTTL", "k"],
        ["RESTORE", "k", "-1", payload, "REPLACE"], ["RESTORE", "k", "abc", payload, "REPLACE"],
        ["RESTORE", "k", "0", payload, "BOGUS"], ["RESTORE", "k", "0", payload, "IDLETIME"],
        ["RESTORE", "k", "0", payload, "REPLACE", "IDLETIME", "-1"],
        ["RESTORE", "k", "0", payload, "REPLACE", "IDLETIME", "x"],
        ["RESTORE", "k", "0", payload, "REPLACE", "IDLETIME", "100"],
        ["RESTORE", "k", "0", payload, "REPLACE", "FREQ", "256"],
        ["RESTORE", "k", "0", payload, "REPLACE", "FREQ", "-1"],
        ["RESTORE", "k", "0", payload, "REPLACE", "FREQ", "5"],
        ["RESTORE", "k", "0", payload, "REPLACE", "FREQ", "5", "IDLETIME", "1"],
        ["RESTORE", "k", "0", payload, "REPLACE", "IDLETIME", "1", "FREQ", "1"],
        ["RESTORE", "t", "100000", payload], ["TTL", "t"],
        ["RESTORE", "a", "99999999999999", payload, "ABSTTL"], ["PEXPIRETIME", "a"],
        ["RESTORE", "a", "1", payload, "ABSTTL", "REPLACE"], ["EXISTS", "a"],
        ["RESTORE", "k", "0", bad_crc, "REPLACE"], ["RESTORE", "k", "0", b"short", "REPLACE"],
        ["RESTORE", "k", "0", truncated, "REPLACE"], ["RESTORE", "k", "0", future, "REPLACE"],
        ["RESTORE", "k", "0", trailing, "REPLACE"],
        ["RESTORE", "h", "0", hash_type], ["EXISTS", "k", "h"], ["DUMP", "missing"],
        ["RESTORE", "k"], ["DUMP"],
    ]


# Where xshard must answer differently, with the reason.
RESTORE_DIFFERENCES = {
    # xshard stores no hashes; saying so beats Redis's success.
    ("RESTORE", "h"): lambda mine, theirs: (
        mine == ("-", b"ERR Bad data format: xshard does not store hash values")
        and theirs == ("+", b"OK")),
    # ... so h does not exist here.
    ("EXISTS", "k"): lambda mine, theirs: mine == (":", 1) and theirs == (":", 2),
}


@pytest.mark.parametrize("proto", [2, 3])
def test_restore_replies_match(oracle72, node, proto: int) -> None:
    payload = _payload(oracle72)
    with RawClient(*oracle72.addr) as o, RawClient(*node.addr) as x:
        o.hello(proto)
        x.hello(proto)
        for c in (o, x):
            c.call("DEL", "k", "t", "a", "h")
        try:
            for cmd in restore_script(payload):
                mine, theirs = x.call(*cmd), o.call(*cmd)
                if cmd[0] == "TTL" and mine[0] == ":":  # the clocks moved differently
                    assert abs(mine[1] - theirs[1]) <= 1
                    continue
                if cmd[0] == "PTTL" and mine[0] == ":":
                    continue
                key = (cmd[0], cmd[1]) if len(cmd) > 1 else (cmd[0],)
                ok = RESTORE_DIFFERENCES.get(key)
                if ok is not None and ok(mine, theirs):
                    continue
                assert mine == theirs, f"{cmd[:2]} {cmd[4:]}: {mine} != {theirs}"
        finally:
            for c in (o, x):
                c.call("DEL", "k", "t", "a", "h")


def test_restore_reaches_replica_and_aof(xnode) -> None:
    p = xnode("--appendonly", "yes")
    rep = xnode("--replicaof", f"127.0.0.1 {p.port}")
    c = p.client()
    build_stream(c, "src")
    payload = c.dump("src")
    c.restore("k", 0, payload)
    c.restore("t", 10_000_000, payload)
    assert c.wait(1, 5000) == 1
    rc = rep.client()
    assert full(c, "k") == full(c, "src")
    assert full(rc, "k") == full(c, "k")
    assert abs(rc.pttl("t") - c.pttl("t")) < 1000
    want = full(c, "k")
    p.restart()
    # (Times of `src` itself differ after the replay: its consumers are re-seen when the
    # effects apply; a restored key carries its times in the payload.)
    assert full(p.client(), "k") == want


# --- MIGRATE ------------------------------------------------------------------------------------
def test_migrate_to_valkey_and_back(oracle72, r: redis.Redis, node) -> None:
    o = oracle72.client()
    o.delete("s", "t", "u")
    try:
        build_stream(r)
        want = full(r)
        r.xadd("t", {"f": "v"}, id="1-1")
        r.expire("t", 1000)
        assert r.execute_command("MIGRATE", *oracle72.addr, "s", 0, 5000) == b"OK"
        assert not r.exists("s")
        assert full(o) == want
        assert r.execute_command("MIGRATE", *oracle72.addr, "", 0, 5000, "COPY", "KEYS",
                                 "t", "nope") == b"OK"
        assert r.exists("t") and 990 <= o.ttl("t") <= 1000
        # Without REPLACE the target refuses, and the key stays here.
        with pytest.raises(redis.ResponseError) as e:
            r.execute_command("MIGRATE", *oracle72.addr, "t", 0, 5000, "COPY")
        assert str(e.value) == ("Target instance replied with error: BUSYKEY Target key name "
                                "already exists.")
        assert r.exists("t")
        assert r.execute_command("MIGRATE", *oracle72.addr, "", 0, 5000, "REPLACE", "KEYS",
                                 "t") == b"OK"
        assert not r.exists("t") and o.exists("t")
        assert r.execute_command("MIGRATE", *oracle72.addr, "", 0, 5000, "KEYS", "t",
                                 "u") == b"NOKEY"
        # valkey migrates to us as well.
        assert o.execute_command("MIGRATE", *node.addr, "", 0, 5000, "KEYS", "s",
                                 "t") == b"OK"
        assert full(r) == want and r.exists("t")
    finally:
        o.delete("s", "t", "u")


def test_migrate_errors_match(oracle72, node) -> None:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    refused.close()
    script = [
        ["XADD", "k", "1-1", "f", "v"],
        ["MIGRATE", "127.0.0.1", "1", "k", "0", "100", "KEYS", "k"],
        ["MIGRATE", "127.0.0.1", "1", "k", "0", "100", "AUTH"],
        ["MIGRATE", "127.0.0.1", "1", "k", "0", "100", "AUTH2", "u"],
        ["MIGRATE", "127.0.0.1", "1", "k", "0", "100", "COPY", "NOPE"],
        ["MIGRATE", "127.0.0.1", "1", "k", "0", "x"], ["MIGRATE", "127.0.0.1", "1", "k", "x", "1"],
        ["MIGRATE", "127.0.0.1", "1", "missing", "0", "100"],
        ["MIGRATE", "127.0.0.1", str(port), "k", "0", "300"],
        ["EXISTS", "k"], ["MIGRATE", "127.0.0.1", "1"],
    ]
    with RawClient(*oracle72.addr) as o, RawClient(*node.addr) as x:
        for c in (o, x):
            c.call("DEL", "k")
        try:
            for cmd in script:
                assert x.call(*cmd) == o.call(*cmd), cmd
        finally:
            for c in (o, x):
                c.call("DEL", "k")


def test_a_failed_migrate_counts_one_error(oracle72, node) -> None:
    """INFO errorstats: a MIGRATE that fails counts one IOERR, as Redis counts it."""
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    refused.close()
    for h in (oracle72, node):
        c = h.client()
        try:
            c.xadd("k", {"f": "v"}, id="1-1")
            before = c.info("errorstats").get("errorstat_IOERR", {}).get("count", 0)
            with pytest.raises(redis.ResponseError, match="IOERR"):
                c.execute_command("MIGRATE", "127.0.0.1", port, "k", 0, 300)
            assert c.info("errorstats")["errorstat_IOERR"]["count"] == before + 1, h.name
        finally:
            c.delete("k")
            c.close()


def test_migrate_auth(xnode, r: redis.Redis) -> None:
    target = xnode("--requirepass", "secret")
    t = target.client(password="secret")
    r.xadd("k", {"f": "v"}, id="1-1")
    with pytest.raises(redis.ResponseError, match="Target instance replied with error: NOAUTH"):
        r.execute_command("MIGRATE", *target.addr, "k", 0, 2000)
    with pytest.raises(redis.ResponseError, match="Target instance replied with error: WRONGPASS"):
        r.execute_command("MIGRATE", *target.addr, "k", 0, 2000, "AUTH", "bad")
    assert r.exists("k") and not t.exists("k")
    assert r.execute_command("MIGRATE", *target.addr, "k", 0, 2000, "COPY", "AUTH",
                             "secret") == b"OK"
    assert r.execute_command("MIGRATE", *target.addr, "k", 0, 2000, "REPLACE", "AUTH2",
                             "default", "secret") == b"OK"
    assert not r.exists("k") and t.xrange("k") == [(b"1-1", {b"f": b"v"})]


class _Silent:
    """A TCP server that accepts and reads but never answers: a target that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
                threading.Thread(target=self._drain, args=(conn,), daemon=True).start()
        except OSError:
            pass

    def _drain(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                self.received += len(data)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def test_migrate_holds_writes_to_its_keys_only(node, r: redis.Redis) -> None:
    """While MIGRATE waits for the target, other clients are served, reads of the key too,
    but a write to the key waits until MIGRATE has ended (here: timed out), so nothing can
    land between the copy and the delete."""
    r.xadd("k", {"f": "v"}, id="1-1")
    silent = _Silent()
    try:
        m = RawClient(*node.addr)
        m.send_raw(encode_command([b"MIGRATE", b"127.0.0.1", b"%d" % silent.port, b"k", b"0",
                                   b"1500"]))
        wait_until(lambda: silent.received > 0, 5, what="the MIGRATE request")
        w = RawClient(*node.addr)
        w.send_raw(encode_command([b"XADD", b"k", b"2-2", b"f", b"w"]))
        assert r.xlen("k") == 1 and r.ping()  # the loop serves others, reads included
        r.xadd("other", {"f": "v"})  # writes to other keys go on
        assert m.read_reply() == ("-", b"IOERR error or timeout reading to target instance")
        assert w.read_reply() == ("$", b"2-2")  # released only after MIGRATE's answer
        assert r.xlen("k") == 2
        m.close()
        w.close()
    finally:
        silent.close()


def test_dump_restore_large_stream(r: redis.Redis) -> None:
    """A 200k-entry stream round-trips (checks the sizes of many sealed nodes)."""
    pipe = r.pipeline(transaction=False)
    for i in range(200_000):
        pipe.xadd("big", {"sensor": "t1", "value": str(i % 1000), "unit": "C"}, id=f"{i + 1}-0")
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    t0 = time.perf_counter()
    payload = r.dump("big")
    r.restore("copy", 0, payload)
    elapsed = time.perf_counter() - t0
    assert full(r, "copy") == full(r, "big")
    assert r.xrange("copy", "150000", "+", count=3) == r.xrange("big", "150000", "+", count=3)
    print(f"200k entries: payload {len(payload)} bytes, DUMP+RESTORE {elapsed:.2f}s")
