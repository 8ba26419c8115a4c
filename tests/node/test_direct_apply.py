"""The direct apply of a delivery's group effects (node/effects.py EffectApplier._direct):
XCLAIM of the shape propagate_xclaim writes, XACK and XGROUP SETID go straight to their
handlers instead of the dispatch. A randomized workload's effects, applied with it and with
the full dispatch for every command, must leave the same streams, groups, PELs, counters and
command stats, republish the same bytes, and fail the same malformed effects."""

from __future__ import annotations

import asyncio
import random

import pytest

from node.client import Client
from node.config import Config
from node.effects import EffectApplier
from node.resp import encode_command
from node.server import Server


def _run(srv: Server, c: Client, *argv: str | bytes) -> bytes | None:
    return srv.execute(c, [a.encode() if isinstance(a, str) else a for a in argv])


def _workload(srv: Server, seed: int) -> None:
    """Deliveries, acks, claims of pending and of deleted entries, NACKs, cursor moves and
    consumers coming and going, on two streams, in a random order."""
    rnd = random.Random(seed)
    c = Client(srv, None, 9)
    ids: dict[str, list[bytes]] = {"a": [], "b": []}
    for key in ids:
        _run(srv, c, "XGROUP", "CREATE", key, "g", "$", "MKSTREAM")
        _run(srv, c, "XGROUP", "CREATE", key, "h", "0")
    for _ in range(600):
        key = rnd.choice("ab")
        grp = rnd.choice(["g", "g", "h"])
        cons = f"c{rnd.randrange(6)}"
        op = rnd.random()
        if op < 0.35:
            reply = _run(srv, c, "XADD", key, "*", "f", str(rnd.randrange(99)))
            assert reply is not None
            ids[key].append(reply.split(b"\r\n")[1])
        elif op < 0.55:
            args = ["XREADGROUP", "GROUP", grp, cons, "COUNT", str(rnd.randrange(1, 5))]
            if rnd.random() < 0.1:
                args.append("NOACK")
            _run(srv, c, *args, "STREAMS", key, ">")
        elif op < 0.68 and ids[key]:
            _run(srv, c, "XACK", key, grp, *rnd.sample(ids[key], min(3, len(ids[key]))))
        elif op < 0.76 and ids[key]:
            opts = rnd.choice([[], ["JUSTID"], ["RETRYCOUNT", "7"], ["IDLE", "5", "FORCE"],
                               ["TIME", "1", "JUSTID", "LASTID", ids[key][-1].decode()]])
            _run(srv, c, "XCLAIM", key, grp, cons, "0", rnd.choice(ids[key]), *opts)
        elif op < 0.80:
            _run(srv, c, "XAUTOCLAIM", key, grp, cons, "0", "0-0", "COUNT", "3")
        elif op < 0.85 and ids[key]:
            _run(srv, c, "XDEL", key, rnd.choice(ids[key]))  # a pending entry may go
        elif op < 0.88 and ids[key]:
            _run(srv, c, "XNACK", key, grp, rnd.choice(["SILENT", "FAIL", "FATAL"]), "IDS",
                 "1", rnd.choice(ids[key]))
        elif op < 0.91 and ids[key]:
            _run(srv, c, "XGROUP", "SETID", key, grp, rnd.choice(ids[key]))
        elif op < 0.93:
            _run(srv, c, "XGROUP", "DELCONSUMER", key, grp, cons)
        elif op < 0.95:
            _run(srv, c, "XGROUP", "CREATECONSUMER", key, grp, f"n{rnd.randrange(3)}")
        else:
            _run(srv, c, "XREADGROUP", "GROUP", grp, cons, "COUNT", "2", "STREAMS", key, "0")


# Effects that are not what a primary writes, or that fail: the direct apply must leave them to
# the dispatch, which fails (or runs) them as it always did.
_ODD = [
    [b"XCLAIM", b"nokey", b"g", b"c", b"0", b"1-1", b"TIME", b"5", b"RETRYCOUNT", b"1",
     b"FORCE", b"JUSTID", b"LASTID", b"1-1"],
    [b"XCLAIM", b"a", b"nogroup", b"c", b"0", b"1-1", b"TIME", b"5", b"RETRYCOUNT", b"1",
     b"FORCE", b"JUSTID", b"LASTID", b"1-1"],
    [b"XCLAIM", b"a", b"g", b"c", b"0", b"1-1", b"TIME", b"05", b"RETRYCOUNT", b"1",
     b"FORCE", b"JUSTID", b"LASTID", b"1-1"],
    [b"XCLAIM", b"a", b"g", b"c", b"0", b"1-1", b"TIME", b"x", b"RETRYCOUNT", b"1",
     b"FORCE", b"JUSTID", b"LASTID", b"1-1"],
    [b"XCLAIM", b"a", b"g", b"odd", b"0", b"1-1", b"IDLE", b"0", b"FORCE", b"JUSTID"],
    [b"XACK", b"a", b"g", b"not-an-id"],
    [b"XACK", b"a", b"g"],
    [b"XACK", b"str", b"g", b"1-1"],
    [b"XGROUP", b"SETID", b"a", b"nogroup", b"1-1", b"ENTRIESREAD", b"1"],
    [b"XGROUP", b"SETID", b"a", b"g", b"bad", b"ENTRIESREAD", b"1"],
    [b"XGROUP", b"SETID", b"str", b"g", b"1-1", b"ENTRIESREAD", b"1"],
    [b"SET", b"str", b"v"],
]


def _state(srv: Server) -> dict:
    """Every stream's layout and every group's cursor, counters, PEL (delivery time, count,
    owner) and consumers' PELs: all but the consumers' seen/active times, which are the
    applying node's clock."""
    out: dict = {}
    for key in sorted(srv.db.data):
        s = srv.db.data[key]
        if not hasattr(s, "groups"):
            out[key] = s
            continue
        groups = {}
        for name, g in s.groups.items():
            groups[name] = (g.last_id, g.entries_read, g.nacked_total, sorted(dict(g.pel).items()),
                            {cn: sorted(cons.pel) for cn, cons in g.consumers.items()})
        out[key] = (s.dump_state(), groups)
    return out


def _apply(effects: list[bytes], direct: bool, pieces: random.Random | None
           ) -> tuple[Server, EffectApplier, bytes]:
    replica = Server(Config())
    out: list[bytes] = []
    replica.effects.listen(out.append)
    ap = EffectApplier(replica, republish=True)
    if not direct:
        ap.direct = {}
    for chunk in effects:
        if pieces is None:
            ap.feed(chunk)
            continue
        pos = 0
        while pos < len(chunk):
            n = pieces.choice([1, 9, 64, 700, 1 << 20])
            ap.feed(chunk[pos:pos + n])
            pos += n
    return replica, ap, b"".join(out)


def _stats(srv: Server) -> dict[bytes, tuple[int, int]]:
    return {name: (st.calls, st.failed) for name, st in srv.stats.calls.items()}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cut", ["reads", "pieces"])
def test_direct_apply_equals_the_dispatch(loop: asyncio.AbstractEventLoop, seed: int,
                                          cut: str) -> None:
    primary = Server(Config())
    published: list[bytes] = []
    primary.effects.listen(published.append)
    _workload(primary, seed)
    effects = list(published)
    rnd = random.Random(seed)
    # Odd effects spliced in at random places.
    for argv in _ODD:
        effects.insert(rnd.randrange(len(effects)), encode_command(argv))
    stream = b"".join(effects)
    assert stream.count(b"\r\nXCLAIM\r\n") > 100 and stream.count(b"\r\nSETID\r\n") > 50

    fast, fast_ap, fast_out = _apply(effects, True, random.Random(seed) if cut == "pieces"
                                     else None)
    slow, slow_ap, slow_out = _apply(effects, False, random.Random(seed) if cut == "pieces"
                                     else None)
    assert _state(fast) == _state(slow)
    assert fast_out == slow_out == stream  # republished as received
    assert fast.effects.offset == slow.effects.offset
    assert fast_ap.errors == slow_ap.errors >= 8
    assert fast.dirty == slow.dirty
    assert _stats(fast) == _stats(slow)
    assert _stats(fast)[b"xclaim"][0] == stream.count(b"\r\nXCLAIM\r\n")
    # And without the odd effects, the primary's state.
    clean, clean_ap, _ = _apply(published, True, None)
    assert clean_ap.errors == 0
    assert _state(clean) == _state(primary)


def test_the_direct_apply_is_taken(loop: asyncio.AbstractEventLoop) -> None:
    """The delivery's effects do not reach the dispatch (a test that the fast path runs at
    all, so that the equality above compares two paths)."""
    primary = Server(Config())
    published: list[bytes] = []
    primary.effects.listen(published.append)
    c = Client(primary, None, 9)
    _run(primary, c, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    for i in range(5):
        _run(primary, c, "XADD", "s", f"{i + 1}-1", "f", "v")
        _run(primary, c, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
        _run(primary, c, "XACK", "s", "g", f"{i + 1}-1")
    replica = Server(Config())
    dispatched: list[bytes] = []
    execute = replica.execute

    def spy(cl: Client, argv: list[bytes]) -> bytes | None:
        dispatched.append(argv[0])
        return execute(cl, argv)

    replica.execute = spy  # type: ignore[method-assign]
    ap = EffectApplier(replica, republish=False)
    ap.feed(b"".join(published))
    assert ap.errors == 0
    assert b"XCLAIM" not in dispatched and b"XACK" not in dispatched
    assert dispatched.count(b"XGROUP") == 2  # CREATE and CREATECONSUMER; the SETIDs direct
    assert _state(replica) == _state(primary)
