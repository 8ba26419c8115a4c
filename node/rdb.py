"""Redis's serialization of one value (the RDB object encoding): DUMP, RESTORE and MIGRATE.

A DUMP payload is `type byte | object | RDB version (u16 LE) | CRC64 (u64 LE)` (Redis
cluster.c createDumpPayload / verifyDumpPayload). Speaking Redis's own format means payloads
move both ways between redis-server and xshard, and tools that copy data with MIGRATE work.

What we write: streams as RDB_TYPE_STREAM_LISTPACKS_3 (21, Redis 7.2+: consumer active-time),
strings as raw strings, lists as a quicklist of listpacks (18), sets as plain sets (2). The
version stamped is the first RDB version that has every type used: 11 for streams (type 21),
10 for the rest (type 18 is Redis 7.0's), so any 7.0+ server reads our strings, lists and sets
and any 7.2+ server our streams. (Redis 7.4 stamps 12, which valkey refuses as a foreign
version. Redis 7.0 cannot read type 21 at any version.) Strings are not LZF-compressed; every
loader accepts that.

What we read: streams of types 15 (Redis 5-6.2), 19 (7.0) and 21 (7.2+), with Redis's rules for
what the older types lack (entries-added = length, first ID = first live entry, a group's
entries-read estimated from its last ID, a consumer's active-time = its seen-time); strings in
every string encoding (raw, int, LZF); lists 1/10/14/18 (plain, ziplist, quicklist of ziplists
or listpacks); sets 2/11/20 (plain, intset, listpack). Versions up to 12 are accepted.

A stream with pending entries released by XNACK (Redis 8.8: nobody owns them) is written as
Redis 8.8 writes it: RDB version 14, type RDB_TYPE_STREAM_LISTPACKS_4 (27), which is type 21
with a "NACK zone" after each group's consumers; those entries are in the zone, not in the
group's PEL. Servers before 8.8 have no such state and refuse the payload (its version is
above theirs: "DUMP payload version or checksum are wrong"). Streams without such entries
keep the 7.2+ layout above, so that they still move to redis-server 7.x and valkey. Redis's
byte layout of the zone is not documented; ours is the PEL's: a count, then per entry its
ID (16 bytes, big-endian), delivery time (i64) and delivery count (length-encoded).

Stream nodes are Redis listpacks; we parse them into `node.stream` blocks and rebuild the exact
listpack bytes when writing, so a stream round-trips with the same nodes (radix-tree-keys) and
the same split points for later appends. Everything read is checked: a malformed payload raises
`RdbError`, never a half-built value.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

from node.groups import ConsumerGroup, estimate_distance
from node.listpack import _as_int, _s64
from node.stream import SEQ_MAX, Stream
from node.streamnodes import FLAG_DELETED, FLAG_SAMEFIELDS, Block, Tail

try:
    import crcmod

    _crc64 = crcmod.mkCrcFun(0x1AD93D23594C935A9, initCrc=0, rev=True, xorOut=0)
except ImportError:  # pragma: no cover - crcmod is a dependency; keep a slow but exact path
    _crc64 = None

__all__ = ["RdbError", "UnsupportedType", "crc64", "dump_payload", "load_payload",
           "check_payload", "RDB_VERSION", "MAX_RDB_VERSION"]

RDB_VERSION = 11  # what DUMP stamps on streams
RDB_VERSION_OTHER = 10  # ... and on every other type
RDB_VERSION_NACKS = 14  # ... and on a stream with XNACKed entries (Redis 8.8, type 27)
MAX_RDB_VERSION = 14  # the newest version RESTORE accepts (Redis 8.8)

T_STRING, T_LIST, T_SET, T_ZSET, T_HASH = 0, 1, 2, 3, 4
T_LIST_ZIPLIST, T_SET_INTSET, T_LIST_QUICKLIST = 10, 11, 14
T_STREAM_1, T_LIST_QUICKLIST_2, T_STREAM_2, T_SET_LISTPACK, T_STREAM_3 = 15, 18, 19, 20, 21
T_STREAM_4 = 27  # Redis 8.8: type 21 and a NACK zone per group
_TYPE_NAMES = {3: "sorted set", 5: "sorted set", 4: "hash", 9: "hash", 13: "hash", 16: "hash",
               6: "module value", 7: "module value", 8: "hash", 12: "sorted set",
               17: "sorted set", 22: "hash", 23: "hash", 24: "hash"}

_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_BE_ID = struct.Struct(">QQ")
_LP_HEAD = struct.Struct("<IH")


class RdbError(Exception):
    """A payload that does not decode: RESTORE answers "Bad data format"."""


class UnsupportedType(RdbError):
    """A well-formed payload of a type that xshard does not store (hash, sorted set, ...)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


# --- CRC64 (Redis crc64.c: Jones polynomial, reflected, init 0) -----------------------------
def _table() -> list[int]:
    poly = 0x95AC9329AC4BC9B5  # 0xad93d23594c935a9 reflected
    out = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        out.append(crc)
    return out


_CRC_TABLE = _table() if _crc64 is None else []


def crc64(data: bytes | memoryview, crc: int = 0) -> int:
    if _crc64 is not None:
        return _crc64(data, crc)
    t = _CRC_TABLE
    for b in bytes(data):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def check_payload(payload: bytes) -> bool:
    """verifyDumpPayload: long enough, a version we read, and the CRC64 of the rest."""
    if len(payload) < 10:
        return False
    ver = payload[-10] | payload[-9] << 8
    if ver > MAX_RDB_VERSION:
        return False
    return _U64.unpack_from(payload, len(payload) - 8)[0] == crc64(memoryview(payload)[:-8])


# --- writing --------------------------------------------------------------------------------
def _len(n: int) -> bytes:
    """rdbSaveLen."""
    if n < 64:
        return bytes((n,))
    if n < 16384:
        return bytes((0x40 | n >> 8, n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def _str(b: bytes) -> bytes:
    return _len(len(b)) + b


def _backlen(n: int) -> bytes:
    """lpEncodeBacklen: the element size, readable from the right."""
    if n <= 127:
        return bytes((n,))
    if n < 16383:
        return bytes((n >> 7, (n & 127) | 128))
    if n < 2097151:
        return bytes((n >> 14, ((n >> 7) & 127) | 128, (n & 127) | 128))
    if n < 268435455:
        return bytes((n >> 21, ((n >> 14) & 127) | 128, ((n >> 7) & 127) | 128,
                      (n & 127) | 128))
    return bytes((n >> 28, ((n >> 21) & 127) | 128, ((n >> 14) & 127) | 128,
                  ((n >> 7) & 127) | 128, (n & 127) | 128))


_SMALL_INTS = [bytes((v, 1)) for v in range(128)]


def lp_int(v: int) -> bytes:
    """One listpack integer element (lpEncodeIntegerGetType), with its backlen."""
    if 0 <= v <= 127:
        return _SMALL_INTS[v]
    if -4096 <= v <= 4095:
        if v < 0:
            v += 1 << 13
        return bytes((0xC0 | v >> 8, v & 0xFF, 2))
    if -32768 <= v <= 32767:
        return b"\xf1" + v.to_bytes(2, "little", signed=True) + b"\x03"
    if -8388608 <= v <= 8388607:
        return b"\xf2" + v.to_bytes(3, "little", signed=True) + b"\x04"
    if -2147483648 <= v <= 2147483647:
        return b"\xf3" + v.to_bytes(4, "little", signed=True) + b"\x05"
    return b"\xf4" + v.to_bytes(8, "little", signed=True) + b"\x09"


def lp_str(b: bytes) -> bytes:
    """One listpack string element; a canonical int64 is stored as an integer, as lpAppend
    does (so sizes, and node splits, match Redis)."""
    n = len(b)
    if 0 < n < 21 and b[0] in b"-0123456789":
        v = _as_int(b)
        if v is not None:
            return lp_int(v)
    if n < 64:
        return bytes((0x80 | n,)) + b + bytes((n + 1,))
    if n < 4096:
        return bytes((0xE0 | n >> 8, n & 0xFF)) + b + _backlen(n + 2)
    return b"\xf0" + n.to_bytes(4, "little") + b + _backlen(n + 5)


def listpack(elements: list[bytes]) -> bytes:
    """A listpack of already encoded elements."""
    body = b"".join(elements)
    n = len(elements)
    return _LP_HEAD.pack(len(body) + 7, n if n < 65535 else 65535) + body + b"\xff"


def stream_node_listpack(b: Block) -> bytes:
    """The listpack Redis keeps for this node (streamAppendItem's layout):
    master entry `count deleted num-fields field... 0`, then per entry
    `flags ms-diff seq-diff (values | num-fields field value...) lp-count`."""
    master = b.master
    k = len(master)
    els = [lp_int(b.live), lp_int(b.ndel), lp_int(k)]
    els += [lp_str(f) for f in master]
    els.append(_SMALL_INTS[0])
    ms0 = b.ms0
    seq0 = b.first & SEQ_MAX
    flags = b.flags
    same_count = lp_int(k + 3)
    memo: dict[bytes, bytes] = {}  # values repeat a lot in a node (units, tags, small ints)

    def enc(x: bytes) -> bytes:
        e = memo.get(x)
        if e is None:
            e = lp_str(x)
            if len(x) < 32:
                memo[x] = e
        return e

    append = els.append
    for i, (sid, fields) in enumerate(zip(b.sids(), b.entries(0, b.n), strict=True)):
        f = 2 if flags is None else flags[i]
        append(_SMALL_INTS[f])
        msd = (sid >> 64) - ms0
        append(_SMALL_INTS[msd] if msd < 128 else lp_int(_s64(msd)))
        sqd = (sid & SEQ_MAX) - seq0
        append(_SMALL_INTS[sqd] if 0 <= sqd < 128 else lp_int(_s64(sqd)))
        if f & FLAG_SAMEFIELDS:
            els += map(enc, fields[1::2])
            append(same_count)
        else:
            nf = len(fields) >> 1
            append(lp_int(nf))
            els += map(enc, fields)
            append(lp_int(2 * nf + 4))
    return listpack(els)


def _stream_body(s: Stream, nack_zones: bool) -> bytes:
    """rdbSaveObject for a stream, RDB_TYPE_STREAM_LISTPACKS_3, or with `nack_zones`
    RDB_TYPE_STREAM_LISTPACKS_4 (unowned pending entries in a zone after the consumers)."""
    out = [_len(s.num_blocks())]
    for b in s.blocks():
        out.append(_str(_BE_ID.pack(b.first >> 64, b.first & SEQ_MAX)))
        out.append(_str(stream_node_listpack(b)))
    out.append(_len(s.length))
    for sid in (s.last_id, s.first_id, s.max_deleted_entry_id):
        out.append(_len(sid >> 64) + _len(sid & SEQ_MAX))
    out.append(_len(s.entries_added))
    groups = sorted(s.groups.items())
    out.append(_len(len(groups)))
    for name, g in groups:
        out.append(_str(name))
        out.append(_len(g.last_id >> 64) + _len(g.last_id & SEQ_MAX))
        out.append(_len(SEQ_MAX if g.entries_read is None else g.entries_read))
        pel = [(sid, nack) for sid, nack in g.pel.items()
               if not nack_zones or nack[2] is not None]
        out.append(_len(len(pel)))
        out += [_pel_entry(sid, t, n) for sid, (t, n, _owner) in pel]
        out.append(_len(len(g.consumers)))
        for cons in g.sorted_consumers():
            out.append(_str(cons.name) + _I64.pack(cons.seen_time) + _I64.pack(cons.active_time))
            out.append(_len(len(cons.pel)))
            out += [_BE_ID.pack(sid >> 64, sid & SEQ_MAX) for sid in cons.pel]
        if nack_zones:
            zone = [(sid, t, n) for sid, (t, n, owner) in g.pel.items() if owner is None]
            out.append(_len(len(zone)))
            out += [_pel_entry(sid, t, n) for sid, t, n in zone]
    return b"".join(out)


def _pel_entry(sid: int, t: int, n: int) -> bytes:
    """One PEL (or NACK zone) entry: ID big-endian, delivery time, delivery count."""
    return _BE_ID.pack(sid >> 64, sid & SEQ_MAX) + _I64.pack(t) + _len(n)


def has_nacked(s: Stream) -> bool:
    """Whether a stream holds entries released by XNACK (and so needs the 8.8 layout)."""
    return any(g.nacked_count() for g in s.groups.values())


def dump_payload(value: Any) -> bytes:
    """createDumpPayload: the serialized value, the RDB version and the CRC64 footer."""
    version = RDB_VERSION_OTHER
    if type(value) is Stream:
        nacks = has_nacked(value)
        body = bytes((T_STREAM_4 if nacks else T_STREAM_3,)) + _stream_body(value, nacks)
        version = RDB_VERSION_NACKS if nacks else RDB_VERSION
    elif type(value) is bytes:
        body = bytes((T_STRING,)) + _str(value)
    elif type(value) is deque:
        nodes = [list(value)[i:i + 128] for i in range(0, len(value), 128)]
        body = bytes((T_LIST_QUICKLIST_2,)) + _len(len(nodes)) + b"".join(
            _len(2) + _str(listpack([lp_str(x) for x in node])) for node in nodes)
    elif type(value) is set:
        body = bytes((T_SET,)) + _len(len(value)) + b"".join(_str(x) for x in sorted(value))
    else:
        raise TypeError(f"cannot serialize {type(value).__name__}")
    body += struct.pack("<H", version)
    return body + _U64.pack(crc64(body))


# --- reading --------------------------------------------------------------------------------
class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, end: int) -> None:
        self.buf = buf
        self.pos = 0
        self.end = end

    def take(self, n: int) -> bytes:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise RdbError("truncated")
        self.pos = p + n
        return self.buf[p:p + n]

    def byte(self) -> int:
        return self.take(1)[0]

    def length(self) -> int:
        """rdbLoadLen for a plain length (an encoded string marker is an error here)."""
        n, enc = self._len()
        if enc:
            raise RdbError("unexpected encoded length")
        return n

    def _len(self) -> tuple[int, bool]:
        b = self.byte()
        kind = b >> 6
        if kind == 0:
            return b & 0x3F, False
        if kind == 1:
            return (b & 0x3F) << 8 | self.byte(), False
        if kind == 3:
            return b & 0x3F, True
        if b == 0x80:
            return int.from_bytes(self.take(4), "big"), False
        if b == 0x81:
            return int.from_bytes(self.take(8), "big"), False
        raise RdbError("bad length")

    def string(self) -> bytes:
        """rdbGenericLoadStringObject: raw, integer-encoded or LZF-compressed."""
        n, enc = self._len()
        if not enc:
            return self.take(n)
        if n == 0:
            return b"%d" % int.from_bytes(self.take(1), "little", signed=True)
        if n == 1:
            return b"%d" % int.from_bytes(self.take(2), "little", signed=True)
        if n == 2:
            return b"%d" % int.from_bytes(self.take(4), "little", signed=True)
        if n == 3:
            clen = self.length()
            ulen = self.length()
            return lzf_decompress(self.take(clen), ulen)
        raise RdbError("unknown string encoding")

    def millis(self) -> int:
        return _I64.unpack(self.take(8))[0]

    def stream_id(self) -> int:
        ms, seq = _BE_ID.unpack(self.take(16))
        return ms << 64 | seq


def lzf_decompress(data: bytes, out_len: int) -> bytes:
    """liblzf's lzf_decompress: literal runs and back references into the output."""
    out = bytearray()
    ip = 0
    n = len(data)
    while ip < n:
        ctrl = data[ip]
        ip += 1
        if ctrl < 32:
            ctrl += 1
            if ip + ctrl > n:
                raise RdbError("LZF literal past the end")
            out += data[ip:ip + ctrl]
            ip += ctrl
            continue
        ln = ctrl >> 5
        if ln == 7:
            if ip >= n:
                raise RdbError("LZF truncated")
            ln += data[ip]
            ip += 1
        if ip >= n:
            raise RdbError("LZF truncated")
        ref = len(out) - ((ctrl & 0x1F) << 8) - 1 - data[ip]
        ip += 1
        ln += 2
        if ref < 0:
            raise RdbError("LZF reference before the start")
        if ref + ln <= len(out):
            out += out[ref:ref + ln]
        else:  # an overlapping copy repeats the pattern
            for i in range(ln):
                out.append(out[ref + i])
    if len(out) != out_len:
        raise RdbError("LZF length mismatch")
    return bytes(out)


def lp_parse(lp: bytes) -> list[int | bytes]:
    """The elements of a listpack (integers as int), checking every size against the bytes.

    Small integers and short strings, nearly everything in a stream node, take the first
    two branches (their backlen is one byte: the element size)."""
    total = len(lp)
    if total < 7 or _LP_HEAD.unpack_from(lp)[0] != total or lp[-1] != 0xFF:
        raise RdbError("bad listpack header")
    out: list[int | bytes] = []
    append = out.append
    p = 6
    end = total - 1
    try:
        while p < end:
            b = lp[p]
            if b < 0x80:
                if lp[p + 1] != 1:
                    raise RdbError("bad listpack entry")
                append(b)
                p += 2
                continue
            if b < 0xC0:
                q = p + 1 + (b & 0x3F)
                if lp[q] != q - p:
                    raise RdbError("bad listpack entry")
                append(lp[p + 1:q])
                p = q + 1
                continue
            if b < 0xE0:
                u = (b & 0x1F) << 8 | lp[p + 1]
                v: int | bytes = u - 8192 if u >= 4096 else u
                size = 2
            elif b < 0xF0:
                n = (b & 0x0F) << 8 | lp[p + 1]
                v = lp[p + 2:p + 2 + n]
                size = 2 + n
            elif b == 0xF0:
                n = int.from_bytes(lp[p + 1:p + 5], "little")
                v = lp[p + 5:p + 5 + n]
                size = 5 + n
            elif 0xF1 <= b <= 0xF4:
                w = (2, 3, 4, 8)[b - 0xF1]
                v = int.from_bytes(lp[p + 1:p + 1 + w], "little", signed=True)
                size = 1 + w
            else:
                raise RdbError("bad listpack encoding")
            bl = _backlen(size)
            if p + size + len(bl) > end or lp[p + size:p + size + len(bl)] != bl:
                raise RdbError("bad listpack entry")
            append(v)
            p += size + len(bl)
    except IndexError:
        raise RdbError("listpack overrun") from None
    if p != end:
        raise RdbError("listpack overrun")
    n = _LP_HEAD.unpack_from(lp)[1]
    if n != 65535 and n != len(out):
        raise RdbError("listpack count mismatch")
    return out


def _as_bytes(v: int | bytes) -> bytes:
    return b"%d" % v if type(v) is int else v  # type: ignore[return-value]


def _ziplist_parse(zl: bytes) -> list[bytes]:
    """Redis 6.2's ziplist (lists of type 10/14)."""
    if len(zl) < 11 or int.from_bytes(zl[:4], "little") != len(zl) or zl[-1] != 0xFF:
        raise RdbError("bad ziplist header")
    out = []
    p = 10
    end = len(zl) - 1
    while p < end:
        p += 5 if zl[p] == 0xFE else 1  # prevlen
        if p >= end:
            raise RdbError("bad ziplist entry")
        b = zl[p]
        kind = b >> 6
        if kind == 0:
            n, p = b & 0x3F, p + 1
        elif kind == 1:
            n, p = (b & 0x3F) << 8 | zl[p + 1], p + 2
        elif kind == 2:
            n, p = int.from_bytes(zl[p + 1:p + 5], "big"), p + 5
        else:
            w = {0xC0: 2, 0xD0: 4, 0xE0: 8, 0xF0: 3, 0xFE: 1}.get(b)
            if w is not None:
                out.append(b"%d" % int.from_bytes(zl[p + 1:p + 1 + w], "little", signed=True))
                p += 1 + w
            elif 0xF1 <= b <= 0xFD:
                out.append(b"%d" % ((b & 0x0F) - 1))
                p += 1
            else:
                raise RdbError("bad ziplist encoding")
            continue
        if p + n > end:
            raise RdbError("bad ziplist entry")
        out.append(zl[p:p + n])
        p += n
    if p != end:
        raise RdbError("ziplist overrun")
    return out


def _load_stream_node(key: bytes, lp: bytes, prev_master: tuple[bytes, ...] | None) -> Block:
    """One stream listpack into a sealed Block, checking its layout as Redis's deep sanitizer
    (streamValidateListpackIntegrity) does."""
    if len(key) != 16:
        raise RdbError("stream node key is not a stream ID")
    ms0, seq0 = _BE_ID.unpack(key)
    els = lp_parse(lp)
    if len(els) < 4:
        raise RdbError("empty stream listpack")
    live, ndel, k = els[0], els[1], els[2]
    if type(live) is not int or type(ndel) is not int or type(k) is not int or k < 0:
        raise RdbError("bad stream master entry")
    p = 3 + k
    if p >= len(els) or els[p] != 0:
        raise RdbError("bad stream master entry")
    master = [_as_bytes(x) for x in els[3:p]]
    p += 1
    t = Tail.__new__(Tail)
    t.first = ms0 << 64 | seq0
    t.ms0 = ms0
    t.seq0 = seq0
    t.sids, t.ents, t.flags = [], [], bytearray()
    t.msds, t.seqs, t.vals, t.nfs = [], [], [], []
    t.master = master
    t.k = k
    prev = -1
    nlive = 0
    n = len(els)
    try:
        while p < n:
            flags, msd, seqd = els[p], els[p + 1], els[p + 2]
            p += 3
            if type(flags) is not int or type(msd) is not int or type(seqd) is not int:
                raise RdbError("bad stream entry")
            if flags & FLAG_SAMEFIELDS:
                vals = [_as_bytes(x) for x in els[p:p + k]]
                if len(vals) != k:
                    raise RdbError("bad stream entry")
                fields: list[bytes] = [b""] * (2 * k)
                fields[0::2] = master
                fields[1::2] = vals
                p += k
                lpc = k + 3
                t.vals += vals
            else:
                nf = els[p]
                if type(nf) is not int or nf < 0:
                    raise RdbError("bad stream entry")
                fields = [_as_bytes(x) for x in els[p + 1:p + 1 + 2 * nf]]
                if len(fields) != 2 * nf:
                    raise RdbError("bad stream entry")
                p += 1 + 2 * nf
                lpc = 2 * nf + 4
                t.vals += fields
                t.nfs.append(nf)
            if els[p] != lpc:
                raise RdbError("bad stream entry count")
            p += 1
            ms = (ms0 + msd) & SEQ_MAX
            seq = (seq0 + seqd) & SEQ_MAX
            sid = ms << 64 | seq
            if sid <= prev or ms < ms0:
                raise RdbError("stream entries out of order")
            prev = sid
            t.sids.append(sid)
            t.ents.append(fields)
            t.flags.append(flags & (FLAG_DELETED | FLAG_SAMEFIELDS))
            t.msds.append(ms - ms0)
            t.seqs.append(seq)
            if not flags & FLAG_DELETED:
                nlive += 1
    except IndexError:
        raise RdbError("truncated stream entry") from None
    if not t.sids or t.sids[0] != t.first or nlive != live or len(t.sids) - nlive != ndel:
        raise RdbError("stream node counters do not match its entries")
    t.live = live
    t.ndel = ndel
    t.lp_rest = len(lp) - len(lp_int(live)) - len(lp_int(ndel))
    return Block.pack(t, prev_master)


def _load_stream(r: _Reader, rtype: int) -> Stream:
    s = Stream()
    nodes = r.length()
    prev: Block | None = None
    last_seen = -1
    length = 0
    for _ in range(nodes):
        key = r.string()
        lp = r.string()
        b = _load_stream_node(key, lp, prev.master if prev else None)
        if b.first <= last_seen:
            raise RdbError("stream nodes out of order")
        last_seen = b.last_sid()
        if b.live == 0:
            raise RdbError("empty stream node")
        s._nodes.append(b)
        s._firsts.append(b.first)
        length += b.live
        prev = b
    s.length = r.length()
    if s.length != length:
        raise RdbError("stream length does not match its entries")
    s.last_id = r.length() << 64 | r.length()
    if nodes and last_seen > s.last_id:
        raise RdbError("stream last ID below an entry")
    if rtype >= T_STREAM_2:
        s.first_id = r.length() << 64 | r.length()
        s.max_deleted_entry_id = r.length() << 64 | r.length()
        s.entries_added = r.length()
    else:
        s.max_deleted_entry_id = 0
        s.entries_added = s.length
        s.first_id = s.edge_id(True, True) if s.length else 0
    ngroups = r.length()
    for _ in range(ngroups):
        name = r.string()
        if name in s.groups:
            raise RdbError("duplicate consumer group")
        last = r.length() << 64 | r.length()
        if rtype >= T_STREAM_2:
            er = r.length()
            entries_read: int | None = None if er >= 1 << 63 else er
        else:
            entries_read = estimate_distance(s, last)
        g = s.groups[name] = ConsumerGroup(last, entries_read)
        owners: dict[int, bytes | None] = {}
        pel_raw = _pel_entries(r, owners)
        for _ in range(r.length()):
            cname = r.string()
            seen = r.millis()
            active = r.millis() if rtype >= T_STREAM_3 else seen
            if cname in g.consumers:
                raise RdbError("duplicate consumer")
            cons = g.create_consumer(cname, seen)
            assert cons is not None
            cons.active_time = active
            ids = []
            for _ in range(r.length()):
                sid = r.stream_id()
                if owners.get(sid, b"") is not None:
                    raise RdbError("consumer PEL entry not in the group PEL")
                owners[sid] = cons.name
                ids.append(sid)
            cons.pel.update(ids)
        for sid, t, n in pel_raw:
            # A PEL entry no consumer lists is unowned: released by XNACK (Redis 8.8).
            owner = owners[sid]
            g.pel[sid] = (t, n, None if owner is None else g.consumers[owner].name)
        if rtype == T_STREAM_4:  # the NACK zone: unowned pending entries
            for sid, t, n in _pel_entries(r, owners):
                g.pel[sid] = (t, n, None)
    return s


def _pel_entries(r: _Reader, owners: dict[int, bytes | None]) -> list[tuple[int, int, int]]:
    """A group's PEL part (or its NACK zone): (ID, delivery time, delivery count) each, every
    ID new to `owners`, where it is entered as owned by nobody (yet)."""
    out = []
    for _ in range(r.length()):
        sid = r.stream_id()
        t = r.millis()
        n = r.length()
        if sid in owners:
            raise RdbError("duplicate PEL entry")
        owners[sid] = None
        out.append((sid, t, n))
    return out


def load_payload(payload: bytes) -> Any:
    """The value a checked DUMP payload holds (call `check_payload` first)."""
    r = _Reader(payload, len(payload) - 10)
    rtype = r.byte()
    if rtype in (T_STREAM_1, T_STREAM_2, T_STREAM_3, T_STREAM_4):
        v: Any = _load_stream(r, rtype)
    elif rtype == T_STRING:
        v = r.string()
    elif rtype == T_LIST:
        v = deque(r.string() for _ in range(r.length()))
    elif rtype == T_LIST_ZIPLIST:
        v = deque(_ziplist_parse(r.string()))
    elif rtype in (T_LIST_QUICKLIST, T_LIST_QUICKLIST_2):
        v = deque()
        for _ in range(r.length()):
            container = r.length() if rtype == T_LIST_QUICKLIST_2 else 2
            raw = r.string()
            if container == 1:
                v.append(raw)
            elif container == 2:
                v.extend(_as_bytes(x) for x in (lp_parse(raw) if rtype == T_LIST_QUICKLIST_2
                                                else _ziplist_parse(raw)))
            else:
                raise RdbError("bad quicklist container")
        if not v:
            raise RdbError("empty list")
    elif rtype == T_SET:
        v = {r.string() for _ in range(r.length())}
    elif rtype == T_SET_INTSET:
        raw = r.string()
        if len(raw) < 8:
            raise RdbError("bad intset")
        width, n = struct.unpack_from("<II", raw)
        if width not in (2, 4, 8) or len(raw) != 8 + width * n:
            raise RdbError("bad intset")
        v = {b"%d" % int.from_bytes(raw[8 + i * width:8 + (i + 1) * width], "little",
                                    signed=True) for i in range(n)}
    elif rtype == T_SET_LISTPACK:
        v = {_as_bytes(x) for x in lp_parse(r.string())}
    elif rtype in _TYPE_NAMES:
        raise UnsupportedType(_TYPE_NAMES[rtype])
    else:
        raise RdbError(f"unknown type {rtype}")
    if type(v) in (deque, set) and not v:
        raise RdbError("empty collection")
    return v  # bytes after the value are ignored, as Redis's RESTORE ignores them
