"""The router's pure parts, without processes: reply merges, the routing table, slot splits,
SCAN cursors, and reply framing across chunks."""

from __future__ import annotations

import asyncio

import pytest

from node import command_table
from node.resp import encode, error_code, parse_redirect, reply_end, reply_scan
from node.slots import key_slot
from router import merge
from router.commands import router_ranges, scan_cursor
from router.outbox import Outbox
from router.routes import Kind, split_by_slot
from router.upstream import Upstream

ERR = b"-ERR boom\r\n"
ERR2 = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"


@pytest.mark.parametrize("proto", [2, 3])
def test_numeric_policies(proto: int) -> None:
    ints = [b":3\r\n", b":1\r\n", b":2\r\n"]
    assert merge.merge("agg_sum", ints, proto) == b":6\r\n"
    assert merge.merge("agg_min", ints, proto) == b":1\r\n"
    assert merge.merge("agg_max", ints, proto) == b":3\r\n"
    assert merge.merge("agg_logical_and", [b":1\r\n", b":0\r\n"], proto) == b":0\r\n"
    assert merge.merge("agg_logical_or", [b":1\r\n", b":0\r\n"], proto) == b":1\r\n"
    # WAITAOF answers [local, replicas]: the minimum is taken element by element.
    pairs = [encode([1, 3], proto), encode([0, 5], proto)]
    assert merge.merge("agg_min", pairs, proto) == encode([0, 3], proto)
    # The first error in request order wins.
    assert merge.merge("agg_sum", [b":1\r\n", ERR2, ERR], proto) == ERR2


def test_success_policies() -> None:
    ok = b"+OK\r\n"
    assert merge.merge("all_succeeded", [ok, ok], 2) == ok
    assert merge.merge("all_succeeded", [ok, ERR, ERR2], 2) == ERR
    assert merge.merge("one_succeeded", [ERR, ok], 2) == ok
    assert merge.merge("one_succeeded", [ERR, ERR2], 2) == ERR


@pytest.mark.parametrize("proto", [2, 3])
def test_concat_and_key_order(proto: int) -> None:
    a, b = encode([b"k1", b"k2"], proto), encode([b"k3"], proto)
    assert merge.merge(None, [a, b], proto) == encode([b"k1", b"k2", b"k3"], proto)
    assert merge.merge(None, [a, ERR], proto) == ERR
    # A multi-key command without a response policy (MGET-like): replies per request, in the
    # client's key order.
    assert merge.in_key_order([[0, 2], [1]], [encode([b"x", None], proto),
                                               encode([b"y"], proto)], 3) == \
        b"*3\r\n" + encode(b"x", proto) + encode(b"y", proto) + encode(None, proto)


@pytest.mark.parametrize("proto", [2, 3])
def test_stream_replies_merge_in_key_order(proto: int) -> None:
    def reply(*keys: bytes) -> bytes:
        items = [(k, [[b"1-0", [b"f", k]]]) for k in keys]
        if proto == 3:
            return encode(dict(items), proto)
        return encode([list(i) for i in items], proto)

    keys = [b"a", b"b", b"c", b"a"]  # a given twice: its second request is another group
    groups = [[0, 2], [1], [3]]
    got = merge.merge_stream_replies(keys, groups, [reply(b"a", b"c"), reply(), reply(b"a")],
                                     proto)
    assert [k for k, _ in merge.stream_items(got)] == [b"a", b"c", b"a"]
    assert merge.merge_stream_replies(keys, groups, [reply(), reply(), reply()], proto) == \
        (b"_\r\n" if proto == 3 else b"*-1\r\n")


def test_earliest_error_follows_the_key_order() -> None:
    keys = [b"a", b"b", b"c"]
    groups = [[0, 2], [1]]
    nogroup_c = b"-NOGROUP No such key 'c' or consumer group 'g' in XREADGROUP with GROUP option\r\n"
    # The first shard's NOGROUP names c (position 2), the second shard fails at b (position 1).
    assert merge.earliest_error(keys, groups, [nogroup_c, ERR2]) == ERR2
    assert merge.earliest_error(keys, groups, [ERR, ERR2]) == ERR  # counts from a
    assert merge.earliest_error(keys, groups, [b"*0\r\n", b"*0\r\n"]) is None


@pytest.mark.parametrize("proto", [2, 3])
def test_has_group(proto: int) -> None:
    def group(name: bytes) -> dict:
        return {b"name": name, b"consumers": 0, b"pending": 0}
    groups = encode([group(b"g1"), group(b"g2")], proto)
    assert merge.has_group(groups, b"g2") and not merge.has_group(groups, b"g3")
    assert not merge.has_group(encode([], proto), b"g1")


def test_error_reader() -> None:
    assert error_code(b"-MOVED 12 10.0.0.1:7000\r\n") == b"MOVED"
    assert error_code(b"-ERR\r\n") == b"ERR"
    assert error_code(b"+OK\r\n") is None and error_code(b":1\r\n") is None
    assert parse_redirect(b"-MOVED 12 10.0.0.1:7000\r\n") == (b"MOVED", 12, "10.0.0.1", 7000)
    assert parse_redirect(b"-ASK 1 ::1:7001\r\n") == (b"ASK", 1, "::1", 7001)
    assert parse_redirect(b"-MOVED 3 :7002\r\n") == (b"MOVED", 3, "", 7002)
    assert parse_redirect(b"-MOVED garbage\r\n") is None
    assert parse_redirect(b"-ERR MOVED 1 a:1\r\n") is None


def test_routes_come_from_the_command_table() -> None:
    from router.proxy import ROUTES

    def kind(name: bytes) -> Kind:
        top, _, sub = name.partition(b"|")
        r = ROUTES[top]
        return (r.subs[sub] if sub and r.subs else r).kind

    assert {kind(n) for n in (b"del", b"exists", b"touch", b"unlink", b"dbsize", b"keys",
                               b"flushall", b"flushdb", b"config|set")} == {Kind.FANOUT}
    assert {kind(n) for n in (b"ping", b"echo", b"hello", b"auth", b"client|setname",
                               b"command|info", b"select", b"quit", b"reset")} == {Kind.LOCAL}
    assert {kind(n) for n in (b"save", b"debug", b"replicaof", b"lastsave", b"shutdown",
                               b"config|rewrite", b"psync")} == {Kind.NODE_ONLY}
    assert {kind(n) for n in (b"xadd", b"xread", b"xreadgroup", b"xinfo|stream",
                               b"rename")} == {Kind.KEYED}
    assert {kind(n) for n in (b"wait", b"scan", b"info", b"multi", b"exec", b"cluster|slots",
                               b"config|get", b"role")} == {Kind.ROUTER}
    assert {kind(n) for n in (b"time", b"xinfo|help", b"config|help")} == {Kind.ANY}
    # Every command of the table has a route: nothing is left to a hand-kept list.
    assert set(ROUTES) == set(command_table.TABLE)
    assert ROUTES[b"del"].response_policy == "agg_sum"
    assert ROUTES[b"auth"].no_auth and not ROUTES[b"xadd"].no_auth


def test_split_by_slot_keeps_the_key_order() -> None:
    keys = [b"{a}1", b"{b}1", b"{a}2", b"{a}1", b"{b}2"]
    groups = split_by_slot(keys)
    sa, sb = key_slot(b"a"), key_slot(b"b")
    assert groups == {(sa, 0): [0, 2], (sb, 0): [1, 4], (sa, 1): [3]}


def test_scan_cursor_and_router_ranges() -> None:
    assert scan_cursor(0, 0, 3) == 1 and scan_cursor(2, 0, 3) == 0
    assert scan_cursor(1, 0x1234, 3) == 0x1201
    assert scan_cursor(1, 5, 3) == 0x101  # a node cursor below 256 still moves on
    ranges = router_ranges([("a", "h", 1), ("b", "h", 2), ("c", "h", 3)])
    assert ranges[0][0] == 0 and ranges[-1][1] == 16383
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(2))


def test_reply_framing_resumes_across_chunks() -> None:
    big = encode([b"x" * 1000, [b"y" * 10, 7, None], {b"k": b"v"}, b"z" * 70000], 3)
    assert reply_end(big) == len(big)
    for cut in (1, 5, 1003, 1010, len(big) - 1):
        pos, need = reply_scan(big[:cut], 0)
        assert need and pos < cut
        assert reply_scan(big, pos, need) == (len(big), 0)


def test_upstream_relays_replies_chunked_anyhow() -> None:
    replies = [b"+OK\r\n", encode([b"a" * 5000, 1, [b"b", None]], 2), b":5\r\n",
               encode(b"c" * 100000, 2), b"-ERR x\r\n"]
    stream = b"".join(replies)
    loop = asyncio.new_event_loop()
    for size in (1, 7, 4096, 65536, len(stream)):
        up = Upstream("127.0.0.1", 0, [], Outbox(loop))
        got: list[bytes | None] = []
        for _ in replies:
            up.waiting.append(got.append)
        for i in range(0, len(stream), size):
            up.data_received(stream[i:i + size])
        assert got == replies, size
        assert all(type(r) is bytes for r in got)
        assert not up.buf
    loop.close()


def test_reply_scan_of_bytes_matches_the_general_loop() -> None:
    """Compiled, reply_scan frames `bytes` with a C loop (node/resp.py `_scan_bytes`) and a
    bytearray with the general one: both give the same answer at every cut of a stream of
    replies, the odd lengths int() accepts or refuses included."""
    replies = [b"+OK\r\n", b"-ERR x\r\n", b":12\r\n", b"$3\r\nabc\r\n", b"$-1\r\n", b"$-0\r\n\r\n",
               b"$0\r\n\r\n", b"*2\r\n$1\r\na\r\n:1\r\n", b"*-1\r\n", b"%1\r\n+a\r\n+b\r\n",
               b"|1\r\n+a\r\n+b\r\n:3\r\n", b"~2\r\n,1.5\r\n#t\r\n", b">2\r\n+a\r\n+b\r\n",
               b"=5\r\ntxt:a\r\n", b"!3\r\nerr\r\n", b"_\r\n", b"$2\r\na\r\r\n", b"*1_0\r\n",
               b"$+1\r\na\r\n", b"* 1\r\n"]
    stream = b"".join(replies)
    for cut in range(len(stream) + 1):
        part = stream[:cut]
        got = reply_scan(part, 0, 30)
        assert got == reply_scan(bytearray(part), 0, 30)
        assert reply_scan(stream, *got) == reply_scan(bytearray(stream), *got)
    for bad in (b"$x\r\n", b"$\r\n", b"*-\r\n"):
        with pytest.raises(ValueError):
            reply_scan(bad, 0)
