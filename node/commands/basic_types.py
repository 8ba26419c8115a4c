"""Just enough strings, lists and sets that mixed workloads behave as on Redis (WRONGTYPE)."""

from __future__ import annotations

from collections import deque

from node import errors
from node.client import Client
from node.commands import command
from node.resp import EMPTY_ARRAY, OK, ReplyError, RespSet, bulk, encode, integer, null


@command(b"set")
def set_(c: Client, argv: list[bytes]) -> bytes:
    key, value = argv[1], argv[2]
    nx = xx = get = keepttl = False
    when = None
    i = 3
    now = c.server.now_ms()
    while i < len(argv):
        o = argv[i].lower()
        if o == b"nx" and not xx:
            nx = True
        elif o == b"xx" and not nx:
            xx = True
        elif o == b"get":
            get = True
        elif o == b"keepttl" and when is None:
            keepttl = True
        elif o in (b"ex", b"px", b"exat", b"pxat") and when is None and not keepttl \
                and i + 1 < len(argv):
            v = errors.parse_int_or_error(argv[i + 1])
            when = {b"ex": now + v * 1000, b"px": now + v, b"exat": v * 1000, b"pxat": v}[o]
            if v <= 0 or when > errors.LLONG_MAX:  # Redis: the time must fit in 64 bits
                raise ReplyError(errors.INVALID_EXPIRE % b"set")
            i += 1
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    db = c.db
    old = db.get(key)
    if get and old is not None and type(old) is not bytes:
        raise ReplyError(errors.WRONGTYPE)
    reply_old = (bulk(old) if old is not None else null(c.proto)) if get else None
    if (nx and old is not None) or (xx and old is None):
        return reply_old if get else null(c.proto)
    db.set(key, value, keep_ttl=keepttl)
    effect = [b"SET", key, value]
    if when is not None:
        db.set_expire(key, when)
        effect += [b"PXAT", b"%d" % when]
    elif keepttl:
        effect.append(b"KEEPTTL")
    c.server.dirty += 1
    c.server.propagate(effect)
    return reply_old if get else OK


@command(b"get")
def get(c: Client, argv: list[bytes]) -> bytes:
    v = c.db.get_typed(argv[1], bytes)
    return null(c.proto) if v is None else bulk(v)


def _push(c: Client, argv: list[bytes], left: bool) -> bytes:
    key = argv[1]
    lst = c.db.get_typed(key, deque)
    if lst is None:
        lst = deque()
        c.db.set(key, lst)
    for v in argv[2:]:
        if left:
            lst.appendleft(v)
        else:
            lst.append(v)
    c.db.changed(key, ready=True)
    c.server.dirty += len(argv) - 2
    c.server.propagate(argv)
    return integer(len(lst))


@command(b"lpush", b"rpush")
def push(c: Client, argv: list[bytes]) -> bytes:
    """LPUSH and RPUSH."""
    return _push(c, argv, argv[0].lower() == b"lpush")


@command(b"lrange")
def lrange(c: Client, argv: list[bytes]) -> bytes:
    start = errors.parse_int_or_error(argv[2])
    end = errors.parse_int_or_error(argv[3])
    lst = c.db.get_typed(argv[1], deque)
    if lst is None:
        return EMPTY_ARRAY
    n = len(lst)
    if start < 0:
        start = max(n + start, 0)
    if end < 0:
        end = n + end
    end = min(end, n - 1)
    if start > end:
        return EMPTY_ARRAY
    return encode(list(lst)[start:end + 1], c.proto)


@command(b"sadd")
def sadd(c: Client, argv: list[bytes]) -> bytes:
    key = argv[1]
    s = c.db.get_typed(key, set)
    if s is None:
        s = set()
        c.db.set(key, s)
    before = len(s)
    s.update(argv[2:])
    c.db.changed(key)
    c.server.dirty += len(s) - before
    c.server.propagate(argv)
    return integer(len(s) - before)


@command(b"smembers")
def smembers(c: Client, argv: list[bytes]) -> bytes:
    s = c.db.get_typed(argv[1], set)
    return encode(RespSet(sorted(s or ())), c.proto)
