"""The batched apply of effects (node/effects.py EffectApplier, Stream.append_many): runs of
XADDs on one key are appended with one call, and the result must be exactly what the commands
did live, whatever else is mixed in (trims, XDEL, groups, IDMP, transactions, other keys) and
however the bytes are cut."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import hiredis
import pytest

from node.client import Client
from node.config import Config
from node.effects import EffectApplier
from node.resp import encode_command
from node.server import Server
from node.stream import Stream


def _server(node_max_entries: int = 4) -> Server:
    cfg = Config()
    cfg.stream_node_max_entries = node_max_entries  # small nodes: splits and trims across them
    return Server(cfg)


@pytest.fixture
def live(loop: asyncio.AbstractEventLoop) -> Iterator[tuple[Server, list[bytes]]]:
    srv = _server()
    published: list[bytes] = []
    srv.effects.listen(published.append)
    yield srv, published


def _run(srv: Server, c: Client, *argv: str | bytes) -> bytes:
    reply = srv.execute(c, [a.encode() if isinstance(a, str) else a for a in argv])
    assert reply is not None
    return reply


def _workload(srv: Server) -> None:
    """Live commands whose effects cover what the batch takes and what it must leave alone."""
    c = Client(srv, None, 9)
    rnd = random.Random(7)
    for i in range(40):  # interleaved keys: runs of one, and longer runs
        key = "a" if i % 5 else "b"
        _run(srv, c, "XADD", key, "*", "f1", str(i), "f2", "x" * rnd.randrange(0, 300))
    for i in range(30):
        _run(srv, c, "XADD", "a", "*", "f1", str(i), "f2", "v")  # a run on one key
    _run(srv, c, "XADD", "a", "*", "other", "fields", "n", "3")  # not the master fields
    for i in range(20):  # exact trims as effects: `XADD a MAXLEN n id ...`
        _run(srv, c, "XADD", "a", "MAXLEN", "25", "*", "f1", str(i), "f2", "t")
    for i in range(12):  # `~` trims go out as exact ones
        _run(srv, c, "XADD", "a", "MAXLEN", "~", "9", "*", "f1", str(i), "f2", "t")
    ids = hiredis_parse(_run(srv, c, "XRANGE", "a", "-", "+"))
    assert len(ids) >= 9
    _run(srv, c, "XDEL", "a", ids[2][0], ids[5][0])
    _run(srv, c, "XGROUP", "CREATE", "a", "g", "0")
    got = hiredis_parse(_run(srv, c, "XREADGROUP", "GROUP", "g", "c1", "COUNT", "4",
                             "STREAMS", "a", ">"))
    first = got[0][1][0][0]
    _run(srv, c, "XACK", "a", "g", first)
    for i in range(10):
        _run(srv, c, "XADD", "a", "IDMP", "p1", f"i{i % 4}", "*", "f1", str(i), "f2", "d")
        _run(srv, c, "XADD", "a", "*", "f1", str(i), "f2", "after-idmp")
    _run(srv, c, "XADD", "b", "IDMPAUTO", "p2", "*", "f", "auto")
    _run(srv, c, "MULTI")
    for i in range(5):
        _run(srv, c, "XADD", "a", "*", "f1", str(i), "f2", "in-multi")
    _run(srv, c, "EXEC")
    _run(srv, c, "XADD", "c", "5-1", "f", "v")  # explicit IDs, `ms-*`, a new key mid-stream
    _run(srv, c, "XADD", "c", "5-*", "f", "v")
    _run(srv, c, "XADD", "c", "7-0", "f", "v")
    _run(srv, c, "DEL", "b")
    for i in range(6):
        _run(srv, c, "XADD", "b", "*", "f", str(i))
    _run(srv, c, "XTRIM", "a", "MINID", ids[7][0])
    for i in range(8):
        _run(srv, c, "XADD", "a", "*", "f1", str(i), "f2", "tail")


def hiredis_parse(reply: bytes) -> list:
    r = hiredis.Reader()
    r.feed(reply)
    out = r.gets()
    assert out is not False
    return out


def _state(srv: Server) -> dict[bytes, tuple]:
    """Every stream's exact layout (nodes, tombstones, counters) plus its groups, PEL and
    IDMP state as the commands report them (no clock fields)."""
    c = Client(srv, None, 10)
    out = {}
    for key in sorted(srv.db.data):
        s = srv.db.data[key]
        assert type(s) is Stream
        groups = hiredis_parse(_run(srv, c, "XINFO", "GROUPS", key))
        pels = [hiredis_parse(_run(srv, c, "XPENDING", key, g[1], "-", "+", "1000"))
                for g in groups]
        pels = [[(e[0], e[1], e[3]) for e in p] for p in pels]  # idle time masked
        info = hiredis_parse(_run(srv, c, "XINFO", "STREAM", key))
        # A duplicate IDMP request adds nothing and emits no effect: only the primary counts it.
        if b"iids-duplicates" in info:
            info[info.index(b"iids-duplicates") + 1] = "*"
        out[key] = (s.dump_state(), groups, pels, info)
    return out


def _pieces(data: bytes, rnd: random.Random) -> Iterator[bytes]:
    pos = 0
    while pos < len(data):
        n = rnd.choice([1, 2, 7, 50, 333, 4096])
        yield data[pos:pos + n]
        pos += n


@pytest.mark.parametrize("republish", [False, True], ids=["aof", "replica"])
@pytest.mark.parametrize("cut", ["whole", "pieces"])
def test_replayed_streams_equal_the_live_ones(live: tuple[Server, list[bytes]], republish: bool,
                                              cut: str) -> None:
    srv, published = live
    _workload(srv)
    effects = b"".join(published)
    replica = _server()
    out: list[bytes] = []
    replica.effects.listen(out.append)
    ap = EffectApplier(replica, republish=republish)
    chunks = [effects] if cut == "whole" else list(_pieces(effects, random.Random(3)))
    for chunk in chunks:
        ap.feed(chunk)
    assert ap.errors == 0
    assert _state(replica) == _state(srv)
    if republish:  # a replica republishes the very bytes: same AOF, backlog and offset
        assert b"".join(out) == effects
        assert replica.effects.offset == srv.effects.offset
    xadds = effects.count(b"\r\nXADD\r\n")
    assert replica.stats.calls[b"xadd"].calls == xadds


def test_an_effect_the_stream_refuses_is_reported_and_the_run_goes_on(
        loop: asyncio.AbstractEventLoop) -> None:
    srv = _server()
    ap = EffectApplier(srv, republish=False)
    eff = [[b"XADD", b"s", b"5-1", b"f", b"v"], [b"XADD", b"s", b"6-1", b"f", b"v"],
           [b"XADD", b"s", b"3-1", b"f", b"v"],  # not above the last ID
           [b"XADD", b"s", b"7-1", b"f", b"v"], [b"XADD", b"s", b"7-1", b"f", b"again"],
           [b"XADD", b"s", b"MAXLEN", b"2", b"8-1", b"f", b"v"]]
    ap.feed(b"".join(encode_command(a) for a in eff))
    assert ap.errors == 2
    s = srv.db.data[b"s"]
    assert [sid for sid, _ in s.range(0, 1 << 128)] == [7 << 64 | 1, 8 << 64 | 1]
    st = srv.stats.calls[b"xadd"]
    assert st.calls == 6 and st.failed == 2  # every effect counted as a call, the two as failed


def test_a_partial_command_waits_for_the_rest(loop: asyncio.AbstractEventLoop) -> None:
    srv = _server()
    ap = EffectApplier(srv, republish=False)
    data = b"".join(encode_command([b"XADD", b"s", b"%d-0" % i, b"f", b"v"])
                    for i in range(1, 101))
    cut = len(data) - 9
    assert ap.feed(data[:cut]) == 99
    assert srv.db.data[b"s"].length == 99
    assert ap.feed(data[cut:]) == 1
    assert srv.db.data[b"s"].length == 100


def test_append_many_equals_appends_one_by_one() -> None:
    rnd = random.Random(11)
    one, many = Stream(), Stream()
    sids = [(1000 + i // 3) << 64 | i % 3 for i in range(500)]
    fields = [[b"a", b"x" * rnd.randrange(0, 90), b"b", b"%d" % i] if i % 17 else
              [b"z", b"odd"] for i in range(500)]
    for maxlen in (-1, 60):
        one, many = Stream(), Stream()
        for sid, f in zip(sids, fields, strict=True):
            one.append(sid, f, 7, 300)
            if maxlen >= 0:
                one.trim("maxlen", maxlen, False, 0)
        assert many.append_many(sids, fields, 7, 300, maxlen) == 500
        assert many.dump_state() == one.dump_state()
    # stops before an ID that is not above the last one, and says how many it took
    s = Stream()
    assert s.append_many([5, 6, 4, 7], [[b"f", b"v"]] * 4, 100, 4096) == 2
    assert s.length == 2 and s.last_id == 6
