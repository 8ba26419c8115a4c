"""XPENDING key group [[IDLE min-idle] start end count [consumer]] (Redis 7.4 t_stream.c).

A view of a group's pending entries; it changes nothing, emits no effect, and is off the hot
path, so it runs interpreted beside the compiled group commands (node/commands/groups.py).
"""

from __future__ import annotations

from node import errors
from node.client import Client
from node.commands import command
from node.resp import EMPTY_ARRAY, NULL_ARRAY, ReplyError, array_header, bulk, encode, integer
from node.streamid import MAX_ID, SEQ_MAX, format_id, parse_range_id_or_error


def _xpending_range(argv: list[bytes]) -> tuple[int, int, int, int, bytes | None]:
    """XPENDING's extended form, parsed before the key is looked up (Redis's order): (min
    idle, first ID, last ID, count, consumer or None); exclusive bounds made inclusive."""
    argc = len(argv)
    minidle = 0
    si = 3
    if argv[3].lower() == b"idle":
        minidle = errors.parse_int_or_error(argv[4])
        if argc < 8:
            raise ReplyError(errors.SYNTAX)
        si += 2
    count = max(errors.parse_int_or_error(argv[si + 2]), 0)
    start, startex = parse_range_id_or_error(argv[si], 0)
    if startex:
        if start == MAX_ID:
            raise ReplyError(errors.INVALID_START_ID)
        start += 1
    end, endex = parse_range_id_or_error(argv[si + 1], SEQ_MAX)
    if endex:
        if end == 0:
            raise ReplyError(errors.INVALID_END_ID)
        end -= 1
    return minidle, start, end, count, argv[si + 3] if si + 3 < argc else None


@command(b"xpending")
def xpending(c: Client, argv: list[bytes]) -> bytes:
    """XPENDING key group [[IDLE min-idle] start end count [consumer]]"""
    argc = len(argv)
    justinfo = argc == 3
    if argc != 3 and (argc < 6 or argc > 9):
        raise ReplyError(errors.SYNTAX)
    count = minidle = start = end = 0
    consumername = None
    if argc >= 6:
        minidle, start, end, count, consumername = _xpending_range(argv)

    key, groupname = argv[1], argv[2]
    s = c.db.get_stream(key)
    g = s.groups.get(groupname) if s is not None else None
    if g is None:
        raise ReplyError(errors.nogroup_key_or_group(key, groupname))

    if justinfo:
        pel = g.pel
        if not pel:
            return encode([0, None, None, NULL_ARRAY], c.proto)
        owners = [[cons.name, b"%d" % len(cons.pel)] for cons in g.sorted_consumers() if cons.pel]
        return encode([len(pel), format_id(pel.peekitem(0)[0]), format_id(pel.peekitem(-1)[0]),
                       owners], c.proto)

    if consumername is not None:
        cons = g.consumers.get(consumername)
        if cons is None:
            return EMPTY_ARRAY
        ids = cons.pel.irange(start, end)
    else:
        ids = g.pel.irange(start, end)
    now = c.server.now_ms()
    pel = g.pel
    out: list[bytes] = []
    n = 0
    for sid in ids:
        if not count:
            break
        t, dc, owner = pel[sid]
        if minidle and now - t < minidle:
            continue
        n += 1
        count -= 1
        sids = format_id(sid)
        elapsed = now - t
        if elapsed < 0:
            elapsed = 0
        if owner is None:  # released by XNACK: nobody's
            owner = b""
        out.append(b"".join([array_header(4), bulk(sids), bulk(owner), integer(elapsed),
                             integer(dc)]))
    return array_header(n) + b"".join(out)


@command(b"xshard.idlepending")
def xshard_idlepending(c: Client, argv: list[bytes]) -> bytes:
    """XSHARD.IDLEPENDING key group min-idle-time count: the group's pending entries idle at
    least min-idle-time ms whose entry is still in the stream, the longest idle first, up to
    count (0: all), as [id, ms idle] pairs: what XREADGROUP ... CLAIM would take, in its
    order (ConsumerGroup.idle_pending), without taking anything. A router asks every
    partition of a logical stream before it claims (router/pstreamclaim.py): only then does it
    know how many of the longest idle entries of the whole stream each partition holds."""
    minidle = errors.parse_int_or_error(argv[3], errors.CLAIM_MIN_IDLE)
    count = max(errors.parse_int_or_error(argv[4]), 0)  # as XREADGROUP's COUNT
    if minidle < 0:
        raise ReplyError(errors.CLAIM_MIN_IDLE)
    key, groupname = argv[1], argv[2]
    s = c.db.get_stream(key)
    g = s.groups.get(groupname) if s is not None else None
    if s is None or g is None:
        raise ReplyError(errors.nogroup_key_or_group(key, groupname))
    now = c.server.now_ms()
    pel = g.pel
    out: list[bytes] = []
    seen: set[int] = set()  # looked at: a second look (after entries that are gone) skips them
    while True:
        sids = [x for x in g.idle_pending(now, minidle, count + len(seen) if count else 0)
                if x not in seen]
        for sid in sids:
            if count and len(out) == count:
                break
            seen.add(sid)
            if s.get(sid) is None:  # gone from the stream: CLAIM drops it, counting nothing
                continue
            idle = max(now - pel[sid][0], 0)
            out.append(array_header(2) + bulk(format_id(sid)) + integer(idle))
        if not sids or not count or len(out) == count:
            break
    return array_header(len(out)) + b"".join(out)
