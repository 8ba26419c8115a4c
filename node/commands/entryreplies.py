"""Stream entries encoded as replies: `[id, [field, value, ...]]`, the same in RESP2 and RESP3.

XRANGE, XREVRANGE, XREAD and XREADGROUP reply with ranges of entries, and encoding a range is
the larger part of their cost, so it is done in bulk; XINFO, XCLAIM and XAUTOCLAIM reply with
single entries. Fastest first: `encode_span` (a node's live entries, either direction,
straight from what it stores), `encode_entries` (parallel lists of IDs and field lists),
`stream_range_reply` (a range, per node), `entries_reply` and `entry_reply`. Compiled, the replies are written into one
C buffer by the writers below (`_put_dec` and `_ndigits` are cimported by node.commands.groups
for its IDs, `id_bulk` by XADD for its reply).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any

import cython

from node.resp import BULK_HEADS, CRLF, array_header, bulk, bulk_header, integer
from node.stream import Stream
from node.streamid import SEQ_MAX
from node.streamnodes import FLAG_DELETED, FLAG_SAMEFIELDS, Block, Node, Tail, live_rows

if cython.compiled:
    from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.cpython.long import PyLong_AsUnsignedLongLongMask
    from cython.cimports.libc.stdlib import free, malloc
    from cython.cimports.libc.string import memcpy
    from cython.cimports.node.streamnodes import (
        _flags_ptr,
        _lens_ptr,
        _sid_ms,
        _string_count,
        _string_off,
        _uget,
        _width,
    )

_DEL = FLAG_DELETED  # C constants compiled
_SAME = FLAG_SAMEFIELDS

# An entry is [id, [field, value, ...]], the same in RESP2 and RESP3. Encoding a range is the
# larger part of XRANGE's cost, so it is done in bulk: C-level maps over all the strings of a
# chunk and precomputed headers, assembled with slice assignments and one join (about 2x
# faster than formatting every bulk string with %).
_CRLF = CRLF
_BULK_HDR = BULK_HEADS
# An entry's start up to its ID, by the ID's length (at most 41 characters).
_ENTRY_HDR = [array_header(2) + bulk_header(n) for n in range(48)]
_FIELDS_HDR = [CRLF + array_header(n) for n in range(256)]


def fields_hdr(n: int) -> bytes:
    """`\r\n*<n>\r\n`: the end of the bulk string before an array of n elements."""
    return _FIELDS_HDR[n] if n < 256 else CRLF + array_header(n)


def encode_entries(sids: list[int], ents: list[list[bytes]]) -> bytes:
    """The encoded entries (no array header) for parallel lists of IDs and field lists."""
    return (_encode_entries_c if cython.compiled else _encode_entries_py)(sids, ents)


def _encode_entries_py(sids: list[int], ents: list[list[bytes]]) -> bytes:
    """encode_entries interpreted: C-level maps over all the strings and one join."""
    m = len(sids)
    if m < 4:  # the bulk machinery only pays off from a few entries on
        return b"".join([entry_reply(sid, f) for sid, f in zip(sids, ents, strict=True)])
    flat = list(chain.from_iterable(ents))
    lens = list(map(len, flat))
    try:
        pre = list(map(_BULK_HDR.__getitem__, lens))
    except IndexError:
        pre = [bulk_header(n) for n in lens]
    ids = [b"%d-%d" % (x >> 64, x & SEQ_MAX) for x in sids]
    widths = list(map(len, ents))
    w = widths[0]
    if widths.count(w) == m:
        step = 3 + 3 * w
        out = [_CRLF] * (m * step)
        out[0::step] = map(_ENTRY_HDR.__getitem__, map(len, ids))
        out[1::step] = ids
        out[2::step] = [fields_hdr(w)] * m
        for j in range(w):
            out[3 + 3 * j::step] = pre[j::w]
            out[4 + 3 * j::step] = flat[j::w]
        return b"".join(out)
    out = []
    p = 0
    for i in range(m):
        x = ids[i]
        w = widths[i]
        seg = [_CRLF] * (3 + 3 * w)
        seg[0] = _ENTRY_HDR[len(x)]
        seg[1] = x
        seg[2] = fields_hdr(w)
        seg[3::3] = pre[p:p + w]
        seg[4::3] = flat[p:p + w]
        out += seg
        p += w
    return b"".join(out)


# Compiled, the reply is written straight into one buffer: no object per string, length or
# header (about 20x fewer instructions than the maps and join above for XRANGE COUNT 100).
# Anything but lists of bytes goes to the interpreted encoder.
def _encode_entries_c(sids: list[int], ents: list[list[bytes]]) -> bytes:
    m = len(sids)
    if len(ents) != m:
        raise ValueError("encode_entries: IDs and entries differ in number")
    return _encode_rows_c(sids, ents, cython.NULL, 0, m, False, None)


def _encode_rows_c(sids: list[int], ents: list[list[bytes]], pf: bytes | None, i0: int,
                   i1: int, rev: bool, t: Tail | None) -> bytes:
    """encode_entries of rows i0..i1-1 of parallel lists (in bounds), in direction order,
    leaving out the rows whose flag in pf (if not NULL) says deleted. With `t`, the rows are
    that open node's entries as it stores them (no list sliced, filtered or reversed): an ID
    is `ms0 + msds[i]`-`seqs[i]` of its small ints, not split from its 128-bit int, and an
    entry flagged SAMEFIELDS in pf has the node's master field names, whose bulk strings are
    written once (_before_values)."""
    cap = 0
    for i in range(i0, i1):
        if pf != cython.NULL and pf[i] & _DEL:
            continue
        fo = ents[i]
        if type(fo) is not list:
            return _encode_rows_py(sids, ents, pf, i0, i1, rev)
        f = fo
        w = len(f)
        cap += 96 + 24 * w  # headers: an ID has at most 41 digits, a length at most 20
        for j in range(w):
            xo = f[j]
            if type(xo) is not bytes:
                return _encode_rows_py(sids, ents, pf, i0, i1, rev)
            cap += len(cython.cast(bytes, xo))
    k = -1  # no master fields to write from hb
    hl = cython.NULL
    base = 0
    if t is not None:
        base = t.ms0
        master = t.master
        k = len(master)
        for j in range(k):
            if type(master[j]) is not bytes:
                k = -1
                break
        if k >= 0:
            hl = _before_values(master, k, -1)
            if hl == cython.NULL:
                raise MemoryError
    buf = cython.cast(cython.p_char, malloc(cap + 1))
    if buf == cython.NULL:
        free(hl)
        raise MemoryError
    try:
        hb = cython.cast(cython.p_char, hl + k) if hl != cython.NULL else cython.NULL
        p = 0
        step = -1 if rev else 1
        i = i1 - 1 if rev else i0
        for _n in range(i1 - i0):
            if pf == cython.NULL or not pf[i] & _DEL:
                if t is None:
                    sid = sids[i]
                    seq = PyLong_AsUnsignedLongLongMask(sid)
                    ms = _sid_ms(sid)
                else:
                    ms = t.msds[i]
                    ms += base
                    seq = t.seqs[i]
                f = ents[i]
                w = len(f)
                p = _put_entry_head(buf, p, ms, seq, w)
                if hb != cython.NULL and pf[i] & _SAME and w == 2 * k:
                    hp = hb
                    for j in range(k):
                        memcpy(buf + p, hp, hl[j])
                        p += hl[j]
                        hp += hl[j]
                        x = f[2 * j + 1]
                        p = _put_bulk(buf, p, PyBytes_AS_STRING(x), len(x))
                else:
                    for j in range(w):
                        x = f[j]
                        p = _put_bulk(buf, p, PyBytes_AS_STRING(x), len(x))
            i += step
        return PyBytes_FromStringAndSize(buf, p)
    finally:
        free(buf)
        free(hl)


def _before_values(names: Any, k: int, vlen: int) -> Any:
    """What stands before each value of an entry whose k field names are `names` (bytes): each
    name's bulk string and, when vlen >= 0 (every value has that length), the value's
    `$<vlen>\r\n`. One malloc'd block to free: the k pieces' lengths (Py_ssize_t), then their
    bytes; NULL when out of memory. Written once per node, copied per entry."""
    total = 0
    for j in range(k):
        x = names[j]
        total += len(x)
    hl = cython.cast(cython.p_Py_ssize_t, malloc(k * cython.sizeof(cython.Py_ssize_t)
                                                 + total + 48 * k + 1))
    if hl == cython.NULL:
        return hl
    hb = cython.cast(cython.p_char, hl + k)
    h = 0
    for j in range(k):
        x = names[j]
        q = _put_bulk(hb, h, PyBytes_AS_STRING(x), len(x))
        if vlen >= 0:
            hb[q] = 36
            q = _put_dec(hb, q + 1, vlen)
            hb[q] = 13
            hb[q + 1] = 10
            q += 2
        hl[j] = q - h
        h = q
    return hl


def _encode_rows_py(sids: list[int], ents: list[list[bytes]], pf: bytes | None, i0: int,
                    i1: int, rev: bool) -> bytes:
    """_encode_rows_c's rows given to the interpreted encoder (not all lists of bytes)."""
    idx = []
    for i in range(i0, i1):
        if pf == cython.NULL or not pf[i] & _DEL:
            idx.append(i)
    if rev:
        idx.reverse()
    return _encode_entries_py([sids[i] for i in idx], [ents[i] for i in idx])


def _put_entry_head(buf: bytearray, p: int, ms: int, seq: int, w: int) -> int:
    """`*2\r\n$<n>\r\n<ms>-<seq>\r\n*<w>\r\n` at buf[p:]; returns the position after it. The
    ID is written once, backwards into a scratch buffer, so that its digits are divided out
    once (its length n comes with them)."""
    tmp = cython.declare(cython.char[48])
    q = _put_dec_back(tmp, 48, seq) - 1
    tmp[q] = 45
    q = _put_dec_back(tmp, q, ms)
    n = 48 - q
    buf[p] = 42  # *2\r\n$
    buf[p + 1] = 50
    buf[p + 2] = 13
    buf[p + 3] = 10
    buf[p + 4] = 36
    p = _put_dec(buf, p + 5, n)
    buf[p] = 13
    buf[p + 1] = 10
    memcpy(buf + p + 2, tmp + q, n)
    p += n + 2
    buf[p] = 13  # \r\n*
    buf[p + 1] = 10
    buf[p + 2] = 42
    p = _put_dec(buf, p + 3, w)
    buf[p] = 13
    buf[p + 1] = 10
    return p + 2


def _put_bulk(buf: bytearray, p: int, src: bytes, n: int) -> int:
    """`$<n>\r\n<src>\r\n` at buf[p:]; returns the position after it."""
    buf[p] = 36
    p = _put_dec(buf, p + 1, n)
    buf[p] = 13
    buf[p + 1] = 10
    memcpy(buf + p + 2, src, n)
    p += n + 2
    buf[p] = 13
    buf[p + 1] = 10
    return p + 2


def encode_span(blk: Node, i0: int, i1: int, rev: bool = False) -> bytes:
    """encode_entries of the live entries among a node's i0..i1-1, in direction order
    (descending if rev), for `Stream.range_chunks(..., encode=encode_span)`. Compiled, written
    straight from what the node stores: a sealed node whose entries all have its master fields
    from its packed bytes (no list or string object per entry, each field name copied from the
    node's one master tuple), the open node from its lists; tombstones are skipped in place."""
    if cython.compiled:
        if type(blk) is Block:
            b = blk
            if b.nfs is None:
                return _encode_span_c(b, i0, i1, rev)
        else:
            t = blk
            i0 = max(i0, 0)
            i1 = min(i1, len(t.sids))
            return _encode_rows_c(t.sids, t.ents, cython.cast(cython.p_uchar, PyByteArray_AS_STRING(
                t.flags)), i0, i1, rev, t)
    return encode_entries(*live_rows(blk, i0, i1, rev))


def _encode_span_c(b: Block, i0: int, i1: int, rev: bool) -> bytes:
    master = b.master
    k = len(master)
    i0 = max(i0, 0)
    i1 = min(i1, b.n)
    e0 = i0 * k
    e1 = i1 * k
    cnt = _string_count(b)
    if i0 >= i1 or 0 <= cnt < e1:
        return encode_entries(*live_rows(b, i0, i1, rev))
    names = 0
    for j in range(k):
        xo = master[j]
        if type(xo) is not bytes:
            return encode_entries(*live_rows(b, i0, i1, rev))
        names += len(cython.cast(bytes, xo))
    off = _string_off(b, e0)
    end = _string_off(b, e1)
    cap = (i1 - i0) * (96 + 48 * k + names) + end - off  # headers as in _encode_rows_c
    vlen = b.elen
    pl = _lens_ptr(b)
    lw = _width(b.lentc) if pl else 0
    # What stands before each value is the same in every entry: written once (_before_values).
    hl = _before_values(master, k, -1 if lw else vlen)
    buf = cython.cast(cython.p_char, malloc(cap + 1))
    if buf == cython.NULL or hl == cython.NULL:
        free(buf)
        free(hl)
        raise MemoryError
    try:
        hb = cython.cast(cython.p_char, hl + k)
        pm = PyBytes_AS_STRING(b.msd)
        mw = _width(b.mtc)
        ps = PyBytes_AS_STRING(b.seq)
        sw = _width(b.stc)
        pf = _flags_ptr(b)
        base = b.ms0
        pb = PyBytes_AS_STRING(b.blob)
        p = 0
        # The values of entry i are strings i*k..i*k+k-1, at blob offset `off` (forward: the
        # offset after the entry before it; backward: the offset of the entry after it, less
        # the entry's bytes).
        if rev:
            off = end
            e = e1
        else:
            e = e0
        step = -1 if rev else 1
        i = i1 - 1 if rev else i0
        for _n in range(i1 - i0):
            if lw:
                w = 0
                for j in range(k):
                    w += _uget(pl, lw, e - k + j if rev else e + j)
            else:
                w = k * vlen
            if rev:
                e -= k
                off -= w
            if pf == cython.NULL or not pf[i] & _DEL:
                p = _put_entry_head(buf, p, base + _uget(pm, mw, i), _uget(ps, sw, i), 2 * k)
                src = pb + off
                hp = hb
                for j in range(k):
                    memcpy(buf + p, hp, hl[j])
                    p += hl[j]
                    hp += hl[j]
                    if lw:
                        vlen = _uget(pl, lw, e + j)
                        p = _put_bulk(buf, p, src, vlen)
                    else:
                        memcpy(buf + p, src, vlen)
                        p += vlen
                        buf[p] = 13
                        buf[p + 1] = 10
                        p += 2
                    src += vlen
            if not rev:
                e += k
                off += w
            i += step
        return PyBytes_FromStringAndSize(buf, p)
    finally:
        free(buf)
        free(hl)


def _ndigits(v: int) -> int:
    n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


def _put_dec(buf: bytearray, p: int, v: int) -> int:
    """Write v in decimal at buf[p:]; returns the position after it."""
    if v < 10:  # most lengths and field counts
        buf[p] = 48 + v
        return p + 1
    end = p + _ndigits(v)
    _put_dec_back(buf, end, v)
    return end


def _put_dec_back(buf: bytearray, end: int, v: int) -> int:
    """Write v in decimal at buf[:end], ending there; returns where it starts."""
    while True:
        end -= 1
        buf[end] = 48 + v % 10
        v //= 10
        if v == 0:
            return end


def id_bulk(ms: int, seq: int) -> bytes:
    """XADD's reply, the ID `<ms>-<seq>` as a bulk string. Compiled it is written into one C
    buffer: the ID at offset 8, then its `$<n>\r\n` header right before it (n < 100)."""
    if not cython.compiled:
        ids = b"%d-%d" % (ms, seq)
        return _BULK_HDR[len(ids)] + ids + _CRLF
    buf = cython.declare(cython.char[64])
    p = _put_dec(buf, 8, ms)
    buf[p] = 45
    p = _put_dec(buf, p + 1, seq)
    n = p - 8
    q = 4 if n < 10 else 3
    buf[q] = 36
    _put_dec(buf, q + 1, n)
    buf[6] = 13
    buf[7] = 10
    buf[p] = 13
    buf[p + 1] = 10
    return PyBytes_FromStringAndSize(buf + q, p + 2 - q)


def entry_reply(sid: int, fields: list[bytes]) -> bytes:
    """One entry: [id, [field, value, ...]]."""
    ids = b"%d-%d" % (sid >> 64, sid & SEQ_MAX)
    return b"".join([_ENTRY_HDR[len(ids)], ids, fields_hdr(len(fields)), *map(bulk, fields)])


def claimed_entry_reply(sid: int, fields: list[bytes], idle: int, deliveries: int) -> bytes:
    """One entry XREADGROUP CLAIM delivers: [id, [field, value, ...], ms idle, deliveries]."""
    return b"".join([array_header(4), entry_reply(sid, fields)[4:], integer(idle),
                     integer(deliveries)])


def entries_reply(entries: Iterable[tuple[int, list[bytes]]]) -> tuple[int, bytes]:
    """(number of entries, their encoding without the array header) for (id, fields) pairs."""
    pairs = list(entries)
    if not pairs:
        return 0, b""
    return len(pairs), encode_entries([p[0] for p in pairs], [p[1] for p in pairs])


def stream_range_reply(s: Stream, start: int, end: int, count: int | None, rev: bool
                       ) -> tuple[int, bytes]:
    """(number of entries, encoding) of s.range(start, end, count, rev), encoded per node
    straight from what the node stores (`encode_span`)."""
    n = 0
    parts = []
    for m, body in s.range_counted(start, end, count, rev, encode_span):
        n += m
        parts.append(body)
    return n, b"".join(parts)
