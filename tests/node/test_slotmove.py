"""A slot move's copy of its keys (node/slotmove.py), in process: the image taken at once and
sent in bounded steps as XSHARD.RESTORE commands, the effects that came meanwhile after it,
and what the target refuses.

The target's keys must come out identical to the source's: the DUMP payloads (Redis's own
format, listpacks byte for byte, node/rdb.py) and XINFO STREAM FULL compare equal.
"""

from __future__ import annotations

import pytest

from node import errors, rdb
from node.commands import load_all
from node.resp import ReplyError
from node.slotmove import BLOCKS_PER_CHUNK, PEL_PER_CHUNK, SlotCopy, _pack
from node.slots import key_slot
from node.stream import Stream
from tests.support.inproc import InprocClient, InprocServer, run
from tests.support.rawresp import RawClient

TAG = b"{m}"
SLOT = key_slot(TAG)


class Source(InprocServer):
    """An in-process source: effects go through the taps, as Server.propagate sends them."""

    def __init__(self) -> None:
        super().__init__()
        self.taps: list = []

    def propagate(self, argv: list[bytes]) -> None:
        super().propagate(argv)
        for tap in self.taps:
            tap(argv)


def _decode(data: bytes) -> list[bytes]:
    import hiredis

    r = hiredis.Reader()
    r.feed(data)
    return r.gets()


def _target_client(srv: InprocServer, importing: bool = True) -> InprocClient:
    c = InprocClient(srv)
    c.is_master = False  # type: ignore[attr-defined]
    c.import_slots = {SLOT} if importing else set()  # type: ignore[attr-defined]
    return c


def _apply(target: InprocServer, cmds: list[list[bytes]]) -> list[bytes]:
    c = _target_client(target)
    handlers = load_all()
    out = []
    for argv in cmds:
        try:
            out.append(handlers[argv[0].lower()](c, argv))
        except ReplyError as e:
            out.append(b"-" + e.message)
    return out


def fill(src: InprocServer) -> None:
    k = TAG + b"big"
    for i in range(1, 30_001):  # > BLOCKS_PER_CHUNK nodes: several BLOCKS parts
        fields = [b"n", b"%d" % i] if i % 7 else [b"n", b"%d" % i, b"odd", b"x" * (i % 300)]
        run(src, [b"XADD", k, b"%d-%d" % (i, i % 3), *fields])
    run(src, [b"XGROUP", b"CREATE", k, b"g1", b"0"])
    run(src, [b"XGROUP", b"CREATE", k, b"g2", b"$", b"ENTRIESREAD", b"30000"])
    run(src, [b"XREADGROUP", b"GROUP", b"g1", b"alice", b"COUNT", b"50", b"STREAMS", k, b">"])
    run(src, [b"XREADGROUP", b"GROUP", b"g1", b"bob", b"COUNT", b"20", b"STREAMS", k, b">"])
    run(src, [b"XACK", k, b"g1", b"3-0", b"10-1"])
    run(src, [b"XGROUP", b"CREATE", k, b"g3", b"0"])  # a PEL of several parts
    run(src, [b"XREADGROUP", b"GROUP", b"g3", b"carl", b"COUNT", b"25000", b"STREAMS", k, b">"])
    run(src, [b"XDEL", k, b"5-2", b"29999-2", b"30000-0"])
    k2 = TAG + b"small"
    run(src, [b"XCFGSET", k2, b"IDMP-DURATION", b"600", b"IDMP-MAXSIZE", b"50"])
    run(src, [b"XADD", k2, b"IDMP", b"p1", b"i1", b"*", b"a", b"b"])
    run(src, [b"XGROUP", b"CREATE", k2, b"g", b"$"])
    run(src, [b"PEXPIREAT", k2, b"%d" % (src.clock + 60_000)])
    run(src, [b"XGROUP", b"CREATE", TAG + b"empty", b"g", b"$", b"MKSTREAM"])
    run(src, [b"SET", TAG + b"str", b"hello"])
    run(src, [b"RPUSH", TAG + b"list", b"a", b"b", b"c"])
    run(src, [b"SADD", TAG + b"set", b"x", b"y"])
    run(src, [b"XADD", b"other-slot", b"1-1", b"a", b"b"])


def image(copy: SlotCopy, sent: list[bytes], budget: int = 64 << 10) -> list[list[bytes]]:
    while copy.next_image(budget):
        pass
    return [_decode(d) for d in sent]


def same_keys(a: InprocServer, b: InprocServer, keys: list[bytes]) -> None:
    for k in keys:
        va, vb = a.db.data.get(k), b.db.data.get(k)
        assert vb is not None, k
        assert rdb.dump_payload(va) == rdb.dump_payload(vb), k
        assert a.db.expires.get(k) == b.db.expires.get(k), k
        if type(va) is Stream:
            full = [b"XINFO", b"STREAM", k, b"FULL", b"COUNT", b"0"]
            assert run(a, full) == run(b, full), k


def test_image_rebuilds_every_key_of_the_slot_and_nothing_else() -> None:
    src, dst = Source(), InprocServer()
    fill(src)
    sent: list[bytes] = []
    copy = SlotCopy(src, {SLOT}, sent.append)
    cmds = image(copy, sent)
    assert {c[0] for c in cmds} == {b"XSHARD.RESTORE"}
    big = [c[2] for c in cmds if c[1] == TAG + b"big"]
    nodes = -(-src.db.data[TAG + b"big"].num_blocks() // BLOCKS_PER_CHUNK)
    pel = 1 + -(-25_000 // PEL_PER_CHUNK)  # g1's 70 pending entries, g3's 25000
    assert big == [b"HEAD"] + [b"BLOCKS"] * nodes + [b"PEL"] * pel and nodes >= 2
    assert all(r == b"+OK\r\n" for r in _apply(dst, cmds))
    keys = sorted(src.db.keys_in_slot(SLOT))
    assert sorted(dst.db.data) == keys and copy.keys == len(keys) == 6
    same_keys(src, dst, keys)
    again = [b"XADD", TAG + b"small", b"IDMP", b"p1", b"i1", b"*", b"a", b"x"]
    first = b"$15\r\n%d-0\r\n" % src.clock
    assert run(dst, again) == run(src, again) == first  # the IDMP map moved with the stream


def test_effects_during_the_image_follow_it_in_order() -> None:
    src, dst = Source(), InprocServer()
    fill(src)
    sent: list[bytes] = []
    copy = SlotCopy(src, {SLOT}, sent.append)
    big = TAG + b"big"
    n0 = len(src.recorded)
    copy.next_image(1)  # part of the image is on its way
    # Writes meanwhile: to a key already sent, to one not sent yet, a new key, another slot.
    run(src, [b"XADD", big, b"40000-0", b"n", b"late"])
    run(src, [b"XREADGROUP", b"GROUP", b"g1", b"carol", b"COUNT", b"3", b"STREAMS", big, b">"])
    run(src, [b"XADD", TAG + b"small", b"2-0", b"a", b"c"])
    run(src, [b"XADD", TAG + b"new", b"1-0", b"a", b"b"])
    run(src, [b"DEL", TAG + b"str"])
    run(src, [b"XADD", b"other-slot", b"2-2", b"a", b"b"])
    n = len(sent)
    image(copy, sent)
    assert copy.forwarded == len(src.recorded) - n0 - 1  # all but the other slot's XADD
    # After the image is complete, effects go out as they happen.
    run(src, [b"XACK", big, b"g1", b"1-1"])
    assert _decode(sent[-1])[0] == b"XACK"
    cmds = [_decode(d) for d in sent]
    names = [c[0] for c in cmds]
    last_image = max(i for i, c in enumerate(names) if c == b"XSHARD.RESTORE")
    assert last_image >= n - 1 and b"XSHARD.RESTORE" not in names[last_image + 1:]
    assert all(r[:1] in (b"+", b":", b"$", b"*") for r in _apply(dst, cmds)), cmds[-12:]
    keys = sorted(src.db.keys_in_slot(SLOT))
    assert sorted(dst.db.data) == keys and TAG + b"str" not in keys
    same_keys(src, dst, keys)


def test_a_read_during_the_copy_moves_its_pending_entries_on_a_node_nobody_listens_to() -> None:
    """With no AOF and no replica the effect log has no listener, and a `>` read only counts
    the XCLAIMs it would emit (node/commands/reads.py): the slot's tap must still get them, or
    the target's PEL misses what the read delivered."""
    from node.effects import EffectLog

    src, dst = Source(), InprocServer()
    src.effects = EffectLog()  # nobody listens: appendonly no, no replica
    k = TAG + b"quiet"
    for i in range(1, 40):
        run(src, [b"XADD", k, b"%d-1" % i, b"n", b"%d" % i])
    run(src, [b"XGROUP", b"CREATE", k, b"g", b"0"])
    sent: list[bytes] = []
    copy = SlotCopy(src, {SLOT}, sent.append)
    copy.next_image(1)
    run(src, [b"XREADGROUP", b"GROUP", b"g", b"a", b"COUNT", b"5", b"STREAMS", k, b">"])
    cmds = image(copy, sent)
    assert all(r[:1] in (b"+", b":", b"*") for r in _apply(dst, cmds)), cmds
    same_keys(src, dst, [k])
    assert len(dst.db.get_stream(k).groups[b"g"].pel) == 5


def test_nacked_entries_move_with_the_slot() -> None:
    """XNACK's unowned pending entries (Redis 8.8: owner "", delivery time 0, their counts)
    move in the PEL parts, mixed with owned ones, and an XNACK during the copy follows it."""
    src, dst = Source(), InprocServer()
    k = TAG + b"nack"
    for i in range(1, 2 * PEL_PER_CHUNK + 50):
        run(src, [b"XADD", k, b"%d-1" % i, b"n", b"%d" % i])
    run(src, [b"XGROUP", b"CREATE", k, b"g", b"0"])
    run(src, [b"XREADGROUP", b"GROUP", b"g", b"a", b"STREAMS", k, b">"])
    ids = [b"%d-1" % i for i in range(1, 2 * PEL_PER_CHUNK + 50, 3)]
    assert run(src, [b"XNACK", k, b"g", b"FATAL", b"IDS", b"%d" % len(ids), *ids]) == \
        b":%d\r\n" % len(ids)
    sent: list[bytes] = []
    copy = SlotCopy(src, {SLOT}, sent.append)
    copy.next_image(1)
    run(src, [b"XNACK", k, b"g", b"SILENT", b"IDS", b"2", b"2-1", b"3-1"])
    cmds = image(copy, sent)
    assert [c[2] for c in cmds if c[0] == b"XSHARD.RESTORE"].count(b"PEL") == 3
    assert all(r[:1] in (b"+", b":") for r in _apply(dst, cmds))
    same_keys(src, dst, [k])
    g = dst.db.get_stream(k).groups[b"g"]
    assert g.nacked_count() == len(ids) + 2 and g.pel[2 << 64 | 1] == (0, 0, None)


def test_a_flushall_breaks_the_copy() -> None:
    src = Source()
    fill(src)
    copy = SlotCopy(src, {SLOT}, [].append)
    run(src, [b"FLUSHALL"])
    assert copy.broken


def test_a_failing_link_breaks_the_copy_not_the_command() -> None:
    """The tap runs inside the command whose effects it forwards: if sending raises (uvloop
    raises on a closed transport), the command must still emit every effect."""
    src = Source()
    fill(src)

    gone = False

    def send(_data: bytes) -> None:
        if gone:
            raise RuntimeError("the handler is closed")

    copy = SlotCopy(src, {SLOT}, send)
    while copy.next_image(1 << 20):
        pass
    gone = True
    n = len(src.recorded)
    got = run(src, [b"XREADGROUP", b"GROUP", b"g1", b"dave", b"COUNT", b"2", b"STREAMS",
                    TAG + b"big", b">"])
    assert got.startswith(b"*1\r\n") and copy.broken
    assert [e[0] for e in src.recorded[n:]] == [b"XGROUP", b"XCLAIM", b"XCLAIM", b"XGROUP"]


def _state(n: int = 3) -> tuple:
    s = Stream()
    for i in range(1, n + 1):
        s.append(i << 64, [b"f", b"%d" % i], 100, 4096)
    return next(s.blocks()).state()


@pytest.mark.parametrize("part, payload, why", [
    (b"HEAD", b"garbage!", errors.BAD_DATA_FORMAT),
    (b"HEAD", _pack((99, "string", 0, b"v")), errors.BAD_DATA_FORMAT),  # unknown version
    (b"HEAD", _pack((1, "hash", 0, [b"v"])), errors.BAD_DATA_FORMAT),
    (b"HEAD", _pack((1, "list", 0, [])), errors.BAD_DATA_FORMAT),  # empty collection
    (b"HEAD", _pack((1, "stream", 0, ((1, 2, 3, 4), [], 0, 0, None))), errors.BAD_DATA_FORMAT),
    (b"HEAD", _pack((1, "stream", 0, ((0,) * 5, [(b"g", 0, None, [(b"c", 1)])], 0, 0, None))),
     errors.BAD_DATA_FORMAT),  # a consumer without its active-time
    (b"HEAD", _pack((1, "stream", 0, ((0,) * 5, [], 0, 0, (1, 2, 3, 4, [(b"p", 1, 2, 3)])))),
     errors.BAD_DATA_FORMAT),  # an IDMP pair whose iid is no string
    (b"BLOCKS", _pack(([_state()], True)), errors.SLOT_RESTORE_NO_HEAD),
    (b"PEL", _pack((b"g", [1], [(0, 1, b"c")], True)), errors.SLOT_RESTORE_NO_HEAD),
    (b"OTHER", _pack(1), errors.SYNTAX),
])
def test_bad_parts_are_refused(part: bytes, payload: bytes, why: bytes) -> None:
    dst = InprocServer()
    r = _apply(dst, [[b"XSHARD.RESTORE", TAG + b"k", part, payload]])
    assert r == [b"-" + why]
    assert not dst.db.data


def test_bad_blocks_are_refused_and_a_stream_that_does_not_add_up_is_not_kept() -> None:
    dst = InprocServer()
    k = TAG + b"k"
    head = _pack((1, "stream", 0, ((3, 3 << 64, 1 << 64, 0, 3), [(b"g", 0, None, [(b"c", 1, 1)])],
                                   1, 1, None)))
    st = list(_state())
    st[7] = st[7][:-1]  # one ms-delta byte short
    bad = [[b"XSHARD.RESTORE", k, b"HEAD", head],
           [b"XSHARD.RESTORE", k, b"BLOCKS", _pack(([tuple(st)], True))]]
    assert _apply(dst, bad) == [b"+OK\r\n", b"-" + errors.BAD_DATA_FORMAT]
    short = [[b"XSHARD.RESTORE", k, b"HEAD", _pack((1, "stream", 0,
                                                     ((4, 3 << 64, 1 << 64, 0, 4), [], 1, 0,
                                                      None)))],
             [b"XSHARD.RESTORE", k, b"BLOCKS", _pack(([_state()], True))]]
    assert _apply(dst, short) == [b"+OK\r\n", b"-" + errors.BAD_DATA_FORMAT]
    assert k not in dst.db.data  # length 4 announced, 3 entries came: dropped
    pel = [b"XSHARD.RESTORE", k, b"PEL", _pack((b"g", [2 << 64], [(5, 1, b"c")], True))]
    nobody = [b"XSHARD.RESTORE", k, b"PEL", _pack((b"g", [2 << 64], [(5, 1, b"x")], True))]
    good = [short[0][:3] + [head], [*short[1][:3], _pack(([_state()], False))]]
    assert _apply(dst, [*good, nobody]) == [b"+OK\r\n"] * 2 + [b"-" + errors.BAD_DATA_FORMAT]
    assert _apply(dst, [*good, pel]) == [b"+OK\r\n"] * 3
    assert run(dst, [b"XLEN", k]) == b":3\r\n"
    assert run(dst, [b"XPENDING", k, b"g"]).startswith(b"*4\r\n:1\r\n$3\r\n2-0")


def test_only_the_importing_link_or_the_primary_may_send_it() -> None:
    dst = InprocServer()
    cmd = [b"XSHARD.RESTORE", TAG + b"k", b"HEAD", _pack((1, "string", 0, b"v"))]
    handler = load_all()[b"xshard.restore"]
    c = _target_client(dst, importing=False)
    with pytest.raises(ReplyError) as e:
        handler(c, cmd)
    assert e.value.message == errors.SLOT_RESTORE_NOT_IMPORTING
    c.is_master = True  # type: ignore[attr-defined]  # a replica applying it, or the AOF
    assert handler(c, cmd) == b"+OK\r\n"
    assert dst.recorded[-1] == cmd  # its own effect: replicas rebuild the key the same way


def test_a_node_refuses_it_without_importing(node) -> None:  # noqa: ANN001
    with RawClient(node.host, node.port) as r:
        got = r.call(b"XSHARD.RESTORE", b"k", b"HEAD", _pack((1, "string", 0, b"v")))
        assert got == ("-", errors.SLOT_RESTORE_NOT_IMPORTING)
        assert r.call(b"EXISTS", b"k") == (":", 0)
