"""Blocking reads against redis-server (and a 7.2+ server when present): several clients FIFO,
BLOCK 0, timeouts, disconnects, CLIENT UNBLOCK, and what wakes a blocked XREADGROUP. The
group commands themselves are in tests/node/test_groups.py; both take their connection and
reply-normalising helpers from tests/support/groupdiff.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.groupdiff import Deferred, connect, drop_72_fields, norm, wait_blocked
from tests.support.rawresp import RawClient


@pytest.fixture(autouse=True)
def _flushed_after(node) -> Iterator[None]:
    """The shared node is left empty for the modules after this one (these tests flush only
    when they start)."""
    yield
    c = RawClient(node.host, node.port)
    try:
        c.call("FLUSHALL")
    finally:
        c.close()


# --- blocking -----------------------------------------------------------------------------------
def _both(node, oracle):
    return (("xshard", node), ("redis", oracle))


def _controls(servers, protocol: int):
    """(name, handle, control connection) for each server: the connection speaks `protocol`,
    its server is flushed first, and it is closed once the loop moves on."""
    for name, h in servers:
        ctl = connect(h, protocol)
        ctl.call("FLUSHALL")
        yield name, h, ctl
        ctl.close()


def test_block_fifo_and_dollar(node, oracle, protocol: int) -> None:
    """Clients blocked on a key are served in the order they blocked; `$` is resolved when
    the client blocks, not when it is served."""
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), protocol):
        ctl.call("XADD", "s", "1-1", "f", "v")
        ctl.call("XGROUP", "CREATE", "s", "g", "$")
        clients = [Deferred(h, protocol) for _ in range(3)]
        for i, d in enumerate(clients):
            d.send("XREADGROUP", "GROUP", "g", f"c{i}", "BLOCK", "0", "STREAMS", "s", ">")
            wait_blocked(h, i + 1)
        reader = Deferred(h, protocol)
        reader.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
        wait_blocked(h, 4)
        got = []
        for i in range(3):
            ctl.call("XADD", "s", f"{i + 2}-1", "n", str(i))
            got.append(clients[i].read())
            got.append([d.pending() for d in clients[i + 1:]])
        got.append(reader.read())  # served by the first XADD already: `$` was 1-1
        got.append(ctl.call("XPENDING", "s", "g", "-", "+", "10"))
        results[name] = [norm(("XPENDING", "s", "g", "-", "+", "10"), x)
                         if i == len(got) - 1 else x for i, x in enumerate(got)]
        for d in clients + [reader]:
            d.close()
    assert results["xshard"] == results["redis"]


def test_block_timeout_and_block_0(node, oracle, protocol: int) -> None:
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), protocol):
        ctl.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        t0 = time.monotonic()
        r1 = ctl.call("XREAD", "BLOCK", "150", "STREAMS", "s", "$")
        r2 = ctl.call("XREADGROUP", "GROUP", "g", "c", "BLOCK", "150", "STREAMS", "s", ">")
        elapsed = time.monotonic() - t0
        d = Deferred(h, protocol)
        d.send("XREAD", "BLOCK", "0", "STREAMS", "s", "nokey", "$", "$")
        wait_blocked(h, 1)
        still = d.pending(0.3)
        ctl.call("XADD", "nokey", "5-5", "f", "v")
        r3 = d.read()
        results[name] = (r1, r2, elapsed >= 0.29, still, r3)
        d.close()
    assert results["xshard"] == results["redis"]
    assert results["xshard"][2]


def test_disconnect_while_blocked(node, oracle) -> None:
    """A client that goes away while blocked is forgotten: it consumes nothing."""
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), 2):
        ctl.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        gone = Deferred(h)
        gone.send("XREADGROUP", "GROUP", "g", "gone", "BLOCK", "0", "STREAMS", "s", ">")
        wait_blocked(h, 1)
        stays = Deferred(h)
        stays.send("XREADGROUP", "GROUP", "g", "stays", "BLOCK", "0", "STREAMS", "s", ">")
        wait_blocked(h, 2)
        gone.close()
        wait_blocked(h, 1)
        ctl.call("XADD", "s", "1-1", "f", "v")
        r = stays.read()
        results[name] = (r, norm(("XPENDING", "s", "g"), ctl.call("XPENDING", "s", "g")),
                         ctl.call("PING"))
        stays.close()
    assert results["xshard"] == results["redis"]


def test_client_unblock(node, oracle, protocol: int) -> None:
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), protocol):
        out = []
        for how in ("TIMEOUT", "ERROR"):
            d = Deferred(h, protocol)
            cid = d.c.call("CLIENT", "ID")[1]
            d.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
            wait_blocked(h, 1)
            out.append(ctl.call("CLIENT", "UNBLOCK", str(cid), how))
            out.append(d.read())
            out.append(ctl.call("CLIENT", "UNBLOCK", str(cid), how))  # not blocked any more
            d.close()
        results[name] = out
    assert results["xshard"] == results["redis"]


def test_block_inside_multi_does_not_block(node, oracle, protocol: int) -> None:
    results = {}
    for name, h in _both(node, oracle):
        c = connect(h, protocol)
        c.call("FLUSHALL")
        c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        c.call("MULTI")
        c.call("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
        c.call("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
        results[name] = c.call("EXEC")
        c.close()
    assert results["xshard"] == results["redis"]


def test_blocked_xread_ignores_a_key_of_another_type(node, oracle) -> None:
    """Redis re-runs a blocked XREAD only for a key holding a stream."""
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), 2):
        d = Deferred(h)
        d.send("XREAD", "BLOCK", "400", "STREAMS", "s", "$")
        wait_blocked(h, 1)
        ctl.call("SET", "s", "x")
        still = d.pending(0.1)
        results[name] = (still, d.read())
        d.close()
    assert results["xshard"] == results["redis"]


@pytest.mark.parametrize("how", ["DEL", "DESTROY", "SET", "FLUSHALL"])
def test_72_blocked_xreadgroup_woken_by_key_or_group_removal(node, oracle72, how: str) -> None:
    """7.2+ re-runs a blocked XREADGROUP when its key is deleted or changes type, or its group
    is destroyed: it gets the NOGROUP (or WRONGTYPE) error of a fresh XREADGROUP. (7.0 replied
    "-UNBLOCKED the stream key no longer exists" / "-NOGROUP the consumer group this client
    was blocked on no longer exists".)"""
    results = {}
    for name, h, ctl in _controls((("xshard", node), ("reference", oracle72)), 2):
        ctl.call("XADD", "s", "666", "f", "v")
        ctl.call("XGROUP", "CREATE", "s", "g", "$")
        d = Deferred(h)
        d.send("XREADGROUP", "GROUP", "g", "Alice", "BLOCK", "0", "STREAMS", "s", ">")
        wait_blocked(h, 1)
        if how == "DESTROY":
            ctl.call("XGROUP", "DESTROY", "s", "g")
        elif how == "SET":
            ctl.call("SET", "s", "x")
        else:
            ctl.call(how, *(["s"] if how == "DEL" else []))
        results[name] = d.read()
        d.close()
    assert results["xshard"] == results["reference"]
    assert results["xshard"][0] == "-"


def test_blocked_xreadgroup_served_like_a_direct_one(node, oracle, protocol: int) -> None:
    """The state after a served blocked XREADGROUP equals that of a direct one."""
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), protocol):
        ctl.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        ctl.call("XGROUP", "CREATECONSUMER", "s", "g", "c")
        d = Deferred(h, protocol)
        d.send("XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "BLOCK", "0", "STREAMS", "s", ">")
        wait_blocked(h, 1)
        ctl.call("MULTI")
        for i in range(3):
            ctl.call("XADD", "s", f"{i + 1}-1", "f", "v")
        ctl.call("EXEC")
        out = [d.read()]
        for cmd in (("XPENDING", "s", "g", "-", "+", "10"), ("XINFO", "GROUPS", "s"),
                    ("XINFO", "CONSUMERS", "s", "g")):
            r = norm(cmd, ctl.call(*cmd))
            out.append(drop_72_fields(cmd, r) if oracle.version < (7, 2) else r)
        results[name] = out
        d.close()
    assert results["xshard"] == results["redis"]


def test_72_entry_for_one_of_many_blocked_consumers(node, oracle72) -> None:
    """An entry serves the first of the consumers blocked on its stream; the others stay
    blocked, in their order, and count as having tried again (their seen-time moves, as every
    XREADGROUP attempt sets it in 7.2+); one whose consumer was deleted meanwhile comes back
    (the attempt creates it). The node decides most of these without running the read again
    (node/commands/reads.py still_unserved)."""
    results = {}
    for name, h, ctl in _controls((("xshard", node), ("reference", oracle72)), 2):
        ctl.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        waiters = []
        for i, who in enumerate(("a", "b", "c")):
            d = Deferred(h)
            d.send("XREADGROUP", "GROUP", "g", who, "BLOCK", "0", "STREAMS", "s", ">")
            wait_blocked(h, i + 1)
            waiters.append(d)
        ctl.call("XGROUP", "DELCONSUMER", "s", "g", "c")
        # The server's clock moves past the time the consumers were seen (no wall-time bound:
        # a condition on the server's own clock).
        seen = max(int(x[x.index(b"seen-time") + 1]) for x in _full_consumers(ctl))
        while _server_ms(ctl) <= seen + 1:
            time.sleep(0.001)
        eid = _plain(ctl.call("XADD", "s", "*", "f", "v"))
        first = _plain(waiters[0].read())
        still = [d.pending() for d in waiters[1:]]
        cons = {x[x.index(b"name") + 1]: int(x[x.index(b"seen-time") + 1])
                for x in _full_consumers(ctl)}
        ms = int(eid.split(b"-")[0])
        results[name] = (first, still, sorted(cons), [cons[n] >= ms for n in sorted(cons)])
        ctl.call("XADD", "s", "*", "f", "w")  # the second waiter, then the third
        results[name] += (_plain(waiters[1].read()), waiters[2].pending())
        ctl.call("XADD", "s", "*", "f", "x")
        results[name] += (_plain(waiters[2].read()),)
        for d in waiters:
            d.close()
    x, ref = results["xshard"], results["reference"]
    assert x[1:4] == ref[1:4] == ([True, True], [b"a", b"b", b"c"], [True, True, True])
    assert x[5] == ref[5] is True
    assert [r[0][0] for r in (x[0], x[4], x[6])] == [b"s"] * 3  # each got its entry


def _plain(r):
    """A RawClient reply as plain values: arrays as lists, strings as bytes."""
    t, v = r[0], r[1]
    if t == "*":
        return None if v is None else [_plain(x) for x in v]
    return v


def _server_ms(ctl) -> int:
    sec, usec = _plain(ctl.call("TIME"))
    return int(sec) * 1000 + int(usec) // 1000


def _full_consumers(ctl) -> list[list]:
    """The consumers of group g on s, from XINFO STREAM FULL (their seen-time)."""
    full = _plain(ctl.call("XINFO", "STREAM", "s", "FULL"))
    groups = full[full.index(b"groups") + 1]
    return groups[0][groups[0].index(b"consumers") + 1]


@pytest.mark.slow
def test_timeouts_in_deadline_order_and_none_after_release(node, oracle) -> None:
    """BLOCK timeouts share one timer on the node (node/blocking.py): a later, shorter BLOCK
    times out first; a client served before its deadline and parked again without one is not
    timed out by the deadline it had (about a second, waited for by another read's own
    timeout, not by a sleep)."""
    results = {}
    for name, h, ctl in _controls(_both(node, oracle), 2):
        ctl.call("XADD", "s", "1-1", "f", "v")
        a, b, probe = Deferred(h), Deferred(h), Deferred(h)
        a.send("XREAD", "BLOCK", "800", "STREAMS", "s", "$")
        wait_blocked(h, 1)
        b.send("XREAD", "BLOCK", "50", "STREAMS", "s", "$")
        got = [b.read()]  # nil: timed out while `a` still waits
        ctl.call("XADD", "s", "2-1", "f", "v")
        got.append(a.read())  # served before its 800 ms
        a.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
        wait_blocked(h, 1)
        probe.send("XREAD", "BLOCK", "1000", "STREAMS", "other", "$")
        got.append(probe.read())  # nil, a second later: `a`'s old deadline has passed
        got.append(a.pending())
        ctl.call("XADD", "s", "3-1", "f", "v")
        got.append(a.read())
        results[name] = got
        for d in (a, b, probe):
            d.close()
    assert results["xshard"] == results["reference" if "reference" in results else "redis"]
    assert results["xshard"][3] is True
