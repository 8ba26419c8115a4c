"""XREAD / XREADGROUP `MAXCOUNT n` and `MAXSIZE bytes` (Redis 8.10) on the node.

No Redis 8 server runs here; each test states the rule it relies on, with its confidence:

- (sure) MAXCOUNT caps the entries of the whole call; COUNT stays the cap per stream. Streams
  are served in the order given, each gets at most min(COUNT, what MAXCOUNT has left), and
  once the cap is spent the remaining streams are left out (no empty arrays). `COUNT 2
  MAXCOUNT 3` over s1, s2, s3: 2 entries of s1, 1 of s2, no s3. MAXCOUNT works without COUNT.
- (likely) MAXSIZE counts the bytes of this reply as written; the check runs before each
  entry and each stream, and output stops only when one entry is written and the count has
  reached MAXSIZE: the first entry always comes back, the entry that crosses is included.
  Our choices where that is open (docs/compatibility.md): the array/map lengths that are only
  known at the end (the outer one, each stream's entry count) are not counted; a stream whose
  header is written gets its first entry (no stream with zero entries).
- (sure) Both given: whichever is reached first ends the reply. Nothing found: nil / null.
- (sure) `ERR MAXCOUNT must be a positive integer` (0), `ERR MAXSIZE must be a positive
  integer` (0), `ERR MAXCOUNT must be greater than or equal to COUNT` (equal allowed).
  (open, chosen) Negative and non-integer values get the same "positive integer" texts.
- (likely) XREADGROUP `>`: entries past a cap are not delivered, not added to the PEL, and the
  group's last-delivered-id does not move past them; a history read leaves the delivery
  count and time of what it does not return unchanged; with CLAIM, entries past the cap are
  not claimed. (open, chosen) Streams a history read skips are left out, like the others.
- (likely) BLOCK: a woken client is served under the same caps.
- Effects: one XCLAIM per delivered entry (node/effects.py); nothing for what a cap dropped.
"""

from __future__ import annotations

import threading

import pytest
import redis

from tests.support.inproc import InprocServer, group_state, run


def _srv(*streams: tuple[bytes, int]) -> InprocServer:
    s = InprocServer()
    for key, n in streams:
        for i in range(1, n + 1):
            run(s, [b"XADD", key, b"%d-0" % i, b"f", b"v%d" % i])
    return s


def _entry(i: int) -> bytes:
    sid = b"%d-0" % i
    v = b"v%d" % i
    return b"*2\r\n$%d\r\n%s\r\n*2\r\n$1\r\nf\r\n$%d\r\n%s\r\n" % (len(sid), sid, len(v), v)


def _stream(key: bytes, ids: list[int]) -> bytes:
    return (b"*2\r\n$%d\r\n%s\r\n*%d\r\n" % (len(key), key, len(ids))
            + b"".join(_entry(i) for i in ids))


def _reply(*streams: tuple[bytes, list[int]]) -> bytes:
    return b"*%d\r\n" % len(streams) + b"".join(_stream(k, ids) for k, ids in streams)


S3 = [b"STREAMS", b"s1", b"s2", b"s3", b"0", b"0", b"0"]


def test_maxcount_is_a_total_in_key_order_and_leaves_the_rest_out() -> None:
    s = _srv((b"s1", 3), (b"s2", 3), (b"s3", 3))
    assert run(s, [b"XREAD", b"COUNT", b"2", b"MAXCOUNT", b"3"] + S3) == \
        _reply((b"s1", [1, 2]), (b"s2", [1]))
    assert run(s, [b"XREAD", b"MAXCOUNT", b"4"] + S3) == _reply((b"s1", [1, 2, 3]), (b"s2", [1]))
    assert run(s, [b"XREAD", b"MAXCOUNT", b"20"] + S3) == run(s, [b"XREAD"] + S3)
    # An exhausted (or missing) stream takes nothing from the budget and is left out.
    s = _srv((b"s1", 1), (b"s3", 3))
    assert run(s, [b"XREAD", b"MAXCOUNT", b"3"] + S3) == _reply((b"s1", [1]), (b"s3", [1, 2]))
    # Nothing found: nil, as without the option.
    assert run(s, [b"XREAD", b"MAXCOUNT", b"3", b"STREAMS", b"s1", b"$"]) == b"*-1\r\n"


def test_maxsize_is_a_soft_cap_on_the_reply_bytes() -> None:
    s = _srv((b"s1", 3), (b"s2", 3))
    two = [b"STREAMS", b"s1", b"s2", b"0", b"0"]
    # The first entry always comes back.
    assert run(s, [b"XREAD", b"MAXSIZE", b"1"] + two) == _reply((b"s1", [1]))
    # Counted: s1's header without its entry count (12 bytes) and each entry (32 bytes).
    head = len(b"*2\r\n$2\r\ns1\r\n")
    e = len(_entry(1))
    assert (head, e) == (12, 32)
    # 44 bytes after one entry: a cap of 44 stops there, 45 lets the crossing entry in.
    assert run(s, [b"XREAD", b"MAXSIZE", b"%d" % (head + e)] + two) == _reply((b"s1", [1]))
    assert run(s, [b"XREAD", b"MAXSIZE", b"%d" % (head + e + 1)] + two) == \
        _reply((b"s1", [1, 2]))
    # Checked before each stream too: all of s1 (108 bytes) then s2 gets its first entry
    # when the count is still below the cap, and nothing once it has reached it.
    full = head + 3 * e
    assert run(s, [b"XREAD", b"MAXSIZE", b"%d" % full] + two) == _reply((b"s1", [1, 2, 3]))
    assert run(s, [b"XREAD", b"MAXSIZE", b"%d" % (full + 1)] + two) == \
        _reply((b"s1", [1, 2, 3]), (b"s2", [1]))
    # Both caps: whichever comes first.
    assert run(s, [b"XREAD", b"MAXCOUNT", b"4", b"MAXSIZE", b"1000"] + two) == \
        _reply((b"s1", [1, 2, 3]), (b"s2", [1]))
    assert run(s, [b"XREAD", b"MAXCOUNT", b"4", b"MAXSIZE", b"1"] + two) == _reply((b"s1", [1]))


@pytest.mark.parametrize("opts,error", [
    ([b"MAXCOUNT", b"0"], b"-ERR MAXCOUNT must be a positive integer"),
    ([b"MAXSIZE", b"0"], b"-ERR MAXSIZE must be a positive integer"),
    ([b"MAXCOUNT", b"-3"], b"-ERR MAXCOUNT must be a positive integer"),
    ([b"MAXSIZE", b"x"], b"-ERR MAXSIZE must be a positive integer"),
    ([b"COUNT", b"3", b"MAXCOUNT", b"2"], b"-ERR MAXCOUNT must be greater than or equal to COUNT"),
    ([b"MAXCOUNT", b"2", b"COUNT", b"3"], b"-ERR MAXCOUNT must be greater than or equal to COUNT"),
])
def test_errors(opts: list[bytes], error: bytes) -> None:
    s = _srv((b"s1", 1))
    for cmd in ([b"XREAD"], [b"XREADGROUP", b"GROUP", b"g", b"c"]):
        assert run(s, cmd + opts + [b"STREAMS", b"s1", b"0"]) == error
    # Equal is allowed.
    assert run(s, [b"XREAD", b"COUNT", b"2", b"MAXCOUNT", b"2", b"STREAMS", b"s1", b"0"]) == \
        _reply((b"s1", [1]))


def _groups(s: InprocServer, *keys: bytes) -> None:
    for k in keys:
        assert run(s, [b"XGROUP", b"CREATE", k, b"g", b"0"]) == b"+OK\r\n"


def test_xreadgroup_delivers_nothing_past_the_caps() -> None:
    s = _srv((b"s1", 3), (b"s2", 3), (b"s3", 3))
    _groups(s, b"s1", b"s2", b"s3")
    before = len(s.recorded)
    r = run(s, [b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"2", b"MAXCOUNT", b"3",
                b"STREAMS", b"s1", b"s2", b"s3", b">", b">", b">"])
    assert r == _reply((b"s1", [1, 2]), (b"s2", [1]))
    g = {k: s.db.get_stream(k).groups[b"g"] for k in (b"s1", b"s2", b"s3")}
    assert list(g[b"s1"].pel) == [1 << 64, 2 << 64] and list(g[b"s2"].pel) == [1 << 64]
    assert not g[b"s3"].pel
    assert (g[b"s2"].last_id, g[b"s2"].entries_read) == (1 << 64, 1)
    assert (g[b"s3"].last_id, g[b"s3"].entries_read) == (0, None)
    claims = [e for e in s.recorded[before:] if e[0] == b"XCLAIM"]
    assert sorted((e[1], e[5]) for e in claims) == [(b"s1", b"1-0"), (b"s1", b"2-0"),
                                                    (b"s2", b"1-0")]
    # MAXSIZE: the same, s2 cut after its first entry (a read of the rest follows on).
    r = run(s, [b"XREADGROUP", b"GROUP", b"g", b"c", b"MAXSIZE", b"1", b"STREAMS", b"s2", b">"])
    assert r == _reply((b"s2", [2]))
    assert list(g[b"s2"].pel) == [1 << 64, 2 << 64] and g[b"s2"].last_id == 2 << 64


def test_history_read_leaves_what_it_does_not_return() -> None:
    s = _srv((b"s1", 3), (b"s2", 3))
    _groups(s, b"s1", b"s2")
    run(s, [b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"s1", b"s2", b">", b">"])
    s.clock += 1000
    r = run(s, [b"XREADGROUP", b"GROUP", b"g", b"c", b"MAXCOUNT", b"2",
                b"STREAMS", b"s1", b"s2", b"0", b"0"])
    assert r == _reply((b"s1", [1, 2]))  # s2 left out, as the `>` reads leave it out
    pel1 = s.db.get_stream(b"s1").groups[b"g"].pel
    pel2 = s.db.get_stream(b"s2").groups[b"g"].pel
    assert [pel1[i << 64][:2] for i in (1, 2, 3)] == [(s.clock, 2), (s.clock, 2),
                                                       (s.clock - 1000, 1)]
    assert {n[:2] for n in pel2.values()} == {(s.clock - 1000, 1)}


def test_claim_takes_nothing_past_the_caps() -> None:
    s = _srv((b"s1", 4))
    _groups(s, b"s1")
    run(s, [b"XREADGROUP", b"GROUP", b"g", b"a", b"COUNT", b"3", b"STREAMS", b"s1", b">"])
    s.clock += 100
    r = run(s, [b"XREADGROUP", b"GROUP", b"g", b"b", b"MAXCOUNT", b"2", b"CLAIM", b"50",
                b"STREAMS", b"s1", b">"])
    assert r.startswith(b"*1\r\n*2\r\n$2\r\ns1\r\n*2\r\n*4\r\n$3\r\n1-0\r\n"), r
    g = s.db.get_stream(b"s1").groups[b"g"]
    owners = {sid >> 64: nack[2] for sid, nack in g.pel.items()}
    assert owners == {1: b"b", 2: b"b", 3: b"a"}  # the third idle entry is not claimed
    assert g.last_id == 3 << 64  # and the new entry 4 is not delivered


def test_effects_replay_gives_the_same_groups() -> None:
    s = _srv((b"s", 6))
    run(s, [b"XGROUP", b"CREATE", b"s", b"g", b"0"])
    run(s, [b"XREADGROUP", b"GROUP", b"g", b"c", b"MAXCOUNT", b"2", b"STREAMS", b"s", b">"])
    run(s, [b"XREADGROUP", b"GROUP", b"g", b"c", b"MAXSIZE", b"40", b"STREAMS", b"s", b">"])
    run(s, [b"XREADGROUP", b"GROUP", b"g", b"d", b"MAXCOUNT", b"1", b"NOACK", b"STREAMS", b"s",
            b">"])
    replica = InprocServer()
    for e in s.recorded:
        assert not run(replica, e).startswith(b"-"), e
    assert group_state(replica) == group_state(s)
    assert s.db.get_stream(b"s").groups[b"g"].last_id == 4 << 64  # 2 + 1 (MAXSIZE) + 1


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocked_reader_is_served_under_the_caps(node, protocol: int) -> None:
    """A client blocked with MAXCOUNT is served, when an XADD wakes it, at most MAXCOUNT
    entries (here a MULTI adds three at once), and the group keeps the rest undelivered."""
    r = node.client(protocol=protocol)
    w = node.client()
    try:
        r.flushall()
        r.xgroup_create("bs", "g", "$", mkstream=True)
        out: list = []
        t = threading.Thread(target=lambda: out.append(r.execute_command(
            "XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", "2", "BLOCK", "10000",
            "STREAMS", "bs", ">")))
        t.start()
        _wait_blocked(w)
        p = w.pipeline(transaction=True)
        for i in range(1, 4):
            p.xadd("bs", {"f": i}, id=f"{i}-0")
        p.execute()
        t.join(10)
        reply = out[0]
        entries = reply[b"bs"][0] if protocol == 3 else reply[0][1]
        assert [e[0] for e in entries] == [b"1-0", b"2-0"]
        assert w.xinfo_groups("bs")[0]["last-delivered-id"] == b"2-0"
        assert w.xpending("bs", "g")["pending"] == 2
    finally:
        w.flushall()
        r.close()
        w.close()


def _wait_blocked(c: redis.Redis, timeout: float = 10.0) -> None:
    import time
    deadline = time.monotonic() + timeout
    while c.info("clients")["blocked_clients"] < 1:
        assert time.monotonic() < deadline, "the reader never blocked"
        time.sleep(0.01)
