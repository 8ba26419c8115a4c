"""Generic key-space commands: DEL, EXISTS, TYPE, KEYS, SCAN, EXPIRE/TTL, RENAME, FLUSHALL...

Effects: deletes go out as DEL, relative expiries as absolute PEXPIREAT (a replica or a replayed
AOF must not restart the clock), the rest verbatim.
"""

from __future__ import annotations

import hashlib
import heapq

from node import errors
from node.client import Client
from node.commands import command
from node.commands.diagnostics import memory_stats
from node.keyspace import type_name
from node.patterns import stringmatch
from node.resp import OK, ONE, ZERO, ReplyError, Status, encode, integer, status
from node.stream import Stream

_LL_MAX = (1 << 63) - 1


@command(b"del", b"unlink")
def delete(c: Client, argv: list[bytes]) -> bytes:
    n = 0
    for key in argv[1:]:
        if c.db.delete(key):
            c.server.propagate([b"DEL", key])
            n += 1
    c.server.dirty += n
    return integer(n)


@command(b"exists")
def exists(c: Client, argv: list[bytes]) -> bytes:
    return integer(sum(1 for key in argv[1:] if c.db.exists(key)))


@command(b"touch")
def touch(c: Client, argv: list[bytes]) -> bytes:
    return integer(sum(1 for key in argv[1:] if c.db.exists(key)))


@command(b"type")
def type_(c: Client, argv: list[bytes]) -> bytes:
    return status(type_name(c.db.get(argv[1])))


@command(b"dbsize")
def dbsize(c: Client, argv: list[bytes]) -> bytes:
    return integer(len(c.db.data))


def _flush_args(argv: list[bytes]) -> None:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"sync", b"async")):
        raise ReplyError(errors.SYNTAX)


@command(b"flushall", b"flushdb")
def flushall(c: Client, argv: list[bytes]) -> bytes:
    _flush_args(argv)
    c.server.dirty += c.db.flush()
    c.server.propagate([argv[0].upper()])
    return OK


@command(b"keys")
def keys(c: Client, argv: list[bytes]) -> bytes:
    pat = argv[1]
    db = c.db
    return encode([k for k in list(db.data) if stringmatch(pat, k) and db.get(k) is not None],
                  c.proto)


def _scan_hash(key: bytes) -> int:
    # A stable 63-bit position per key: SCAN's cursor is "everything from this position on",
    # so keys that exist for the whole iteration are returned even if others come and go.
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1 or 1


@command(b"scan")
def scan(c: Client, argv: list[bytes]) -> bytes:
    cursor = errors.string2ull(argv[1])
    if cursor is None:
        raise ReplyError(errors.INVALID_CURSOR)
    count, pattern, want_type = 10, None, None
    i = 2
    while i < len(argv):
        opt = argv[i].lower()
        if i + 1 >= len(argv):
            raise ReplyError(errors.SYNTAX)
        if opt == b"count":
            count = errors.parse_int_or_error(argv[i + 1])
            if count < 1:
                raise ReplyError(errors.SYNTAX)
        elif opt == b"match":
            pattern = argv[i + 1]
        elif opt == b"type":
            want_type = argv[i + 1].lower()
        else:
            raise ReplyError(errors.SYNTAX)
        i += 2
    db = c.db
    batch = heapq.nsmallest(count + 1, ((h, k) for k in db.data if (h := _scan_hash(k)) >= cursor))
    next_cursor = batch[count][0] if len(batch) > count else 0
    out = []
    for _, k in batch[:count]:
        v = db.get(k)
        if v is None:
            continue
        if pattern is not None and not stringmatch(pattern, k):
            continue
        if want_type is not None and type_name(v) != want_type:
            continue
        out.append(k)
    return encode([b"%d" % next_cursor, out], c.proto)


# --- expiry ------------------------------------------------------------------------------------
def _expire_generic(c: Client, argv: list[bytes], unit_ms: int, absolute: bool) -> bytes:
    name = argv[0].lower()
    key = argv[1]
    v = errors.string2ll(argv[2])
    if v is None:
        raise ReplyError(errors.NOT_INTEGER)
    nx = xx = gt = lt = False
    for opt in argv[3:]:
        o = opt.lower()
        if o == b"nx":
            nx = True
        elif o == b"xx":
            xx = True
        elif o == b"gt":
            gt = True
        elif o == b"lt":
            lt = True
        else:
            raise ReplyError(errors.unsupported_option(opt))
    if nx and (xx or gt or lt):
        raise ReplyError(errors.EXPIRE_NX_AND_OTHERS)
    if gt and lt:
        raise ReplyError(errors.EXPIRE_GT_AND_LT)
    if v > _LL_MAX // unit_ms or v < -_LL_MAX // unit_ms:
        raise ReplyError(errors.INVALID_EXPIRE % name)
    when = v * unit_ms
    if not absolute:
        when += c.server.now_ms()
        if when > _LL_MAX:
            raise ReplyError(errors.INVALID_EXPIRE % name)
    db = c.db
    if db.get(key) is None:
        return ZERO
    current = db.expires.get(key)
    if nx and current is not None or xx and current is None:
        return ZERO
    if gt and (current is None or when <= current):
        return ZERO
    if lt and current is not None and when >= current:
        return ZERO
    c.server.dirty += 1
    if when <= c.server.now_ms():
        db.delete(key)
        c.server.propagate([b"DEL", key])
        return ONE
    db.set_expire(key, when)
    c.server.propagate([b"PEXPIREAT", key, b"%d" % when])
    return ONE


# name -> (unit in ms, absolute time?): one handler per family, as Redis's expireGenericCommand
_EXPIRE = {b"expire": (1000, False), b"pexpire": (1, False), b"expireat": (1000, True),
           b"pexpireat": (1, True)}
_TTL = {b"ttl": (1000, False), b"pttl": (1, False), b"expiretime": (1000, True),
        b"pexpiretime": (1, True)}


@command(*_EXPIRE)
def expire(c: Client, argv: list[bytes]) -> bytes:
    """EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT."""
    return _expire_generic(c, argv, *_EXPIRE[argv[0].lower()])


def _ttl_generic(c: Client, key: bytes, unit_ms: int, absolute: bool) -> bytes:
    if c.db.get(key) is None:
        return integer(-2)
    when = c.db.expires.get(key)
    if when is None:
        return integer(-1)
    if absolute:
        return integer(when // unit_ms)
    left = max(when - c.server.now_ms(), 0)
    return integer((left + unit_ms // 2) // unit_ms)


@command(*_TTL)
def ttl(c: Client, argv: list[bytes]) -> bytes:
    """TTL, PTTL, EXPIRETIME, PEXPIRETIME."""
    return _ttl_generic(c, argv[1], *_TTL[argv[0].lower()])


@command(b"persist")
def persist(c: Client, argv: list[bytes]) -> bytes:
    key = argv[1]
    if c.db.get(key) is None or c.db.expires.pop(key, None) is None:
        return ZERO
    c.db.changed(key)
    c.server.dirty += 1
    c.server.propagate(argv)
    return ONE


# --- rename ------------------------------------------------------------------------------------
def _rename(c: Client, argv: list[bytes], nx: bool) -> bytes:
    src, dst = argv[1], argv[2]
    db = c.db
    value = db.get(src)
    if value is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    if src == dst:
        return ZERO if nx else OK
    if nx and db.get(dst) is not None:
        return ZERO
    when = db.expires.get(src)
    db.delete(src)
    if type(value) is Stream:
        value.stride = -1  # its partition rule comes from its new name (node/stream.py)
    db.set(dst, value)
    if when is not None:
        db.expires[dst] = when
    c.server.dirty += 1
    c.server.propagate(argv)
    return ONE if nx else OK


@command(b"rename")
def rename(c: Client, argv: list[bytes]) -> bytes:
    return _rename(c, argv, nx=False)


@command(b"renamenx")
def renamenx(c: Client, argv: list[bytes]) -> bytes:
    return _rename(c, argv, nx=True)


@command(b"object")
def object_(c: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    if sub == b"help":
        return encode([Status(b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
                       Status(b"ENCODING <key>"),
                       Status(b"    Return the kind of internal representation used in order to store the value"),
                       Status(b"    associated with a <key>."),
                       Status(b"HELP"), Status(b"    Print this help.")], c.proto)
    if sub == b"encoding" and len(argv) == 3:
        v = c.db.get(argv[2])
        if v is None:
            return encode(None, c.proto)
        enc = {b"stream": b"stream", b"string": b"raw", b"list": b"quicklist",
               b"set": b"hashtable"}[type_name(v)]
        return encode(enc, c.proto)
    if sub == b"encoding":
        raise ReplyError(errors.wrong_arity(b"object|encoding"))
    raise ReplyError(errors.unknown_subcommand(argv[1], b"OBJECT"))


@command(b"memory")
def memory(c: Client, argv: list[bytes]) -> bytes:
    """MEMORY USAGE key [SAMPLES count] | MEMORY STATS | MEMORY HELP. The size is this server's estimate of
    the value's heap bytes (a stream's nodes, its consumer groups' PEL entries and
    consumers), not Redis's allocator figure; `rebalance --by memory` weighs slots by it."""
    sub = argv[1].lower()
    if sub == b"help" and len(argv) == 2:
        return encode([Status(b"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
                       Status(b"STATS"),
                       Status(b"    Return information about the memory usage of the server."),
                       Status(b"USAGE <key> [SAMPLES <count>]"),
                       Status(b"    Return memory in bytes used by <key> and its value. Nested values are"),
                       Status(b"    sampled up to <count> times (default: 5, 0 means sample all)."),

                       Status(b"HELP"), Status(b"    Prints this help.")], c.proto)
    if sub == b"stats" and len(argv) == 2:
        return encode(memory_stats(c.server), c.proto)  # type: ignore[arg-type]
    if sub != b"usage":
        raise ReplyError(errors.unknown_subcommand(argv[1], b"MEMORY"))
    j = 3
    while j < len(argv):  # options come before the key is looked up, as in Redis
        if argv[j].lower() == b"samples" and j + 1 < len(argv):
            if errors.parse_int_or_error(argv[j + 1]) < 0:
                raise ReplyError(errors.SYNTAX)
            j += 2
        else:
            raise ReplyError(errors.SYNTAX)
    v = c.db.get(argv[2])
    if v is None:
        return encode(None, c.proto)
    return integer(_value_bytes(v) + len(argv[2]) + 56)


def _value_bytes(v: object) -> int:
    if type(v) is Stream:
        n = v.memory_usage()
        for g in v.groups.values():
            n += 200 + 120 * len(g.pel) + sum(100 + len(name) for name in g.consumers)
        return n
    if type(v) is bytes:
        return 16 + len(v)
    return 64 + sum(24 + len(x) for x in v)  # type: ignore[attr-defined]  # a list or a set
