"""A stream's nodes: `Block` (a sealed node, packed into bytes) and `Tail` (the open last
node, plain lists), each holding the entries of one Redis listpack.

node/stream.py keeps them in order and decides when a node ends (the exact listpack size);
this module is how one node stores, finds and returns its entries. See node/stream.py's
docstring for the layout.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from itertools import compress
from typing import Any

import cython

if cython.compiled:
    from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize

from node.listpack import _counters_size, _isz, _sum_esz
from node.streamid import SEQ_MAX

__all__ = ["Block", "Tail", "Node", "FLAG_DELETED", "FLAG_SAMEFIELDS", "live_ids", "live_rows",
           "id_int_path"]

FLAG_DELETED = 1  # STREAM_ITEM_FLAG_DELETED
FLAG_SAMEFIELDS = 2  # STREAM_ITEM_FLAG_SAMEFIELDS
_DEL = FLAG_DELETED  # the same, a C constant compiled
# flags.translate(_LIVE): 1 for each live entry, 0 for each deleted one (C-speed filters).
_LIVE = bytes(0 if f & FLAG_DELETED else 1 for f in range(256))


# --- nodes ------------------------------------------------------------------------------------
def _interleave(master: tuple[bytes, ...] | list[bytes], vals: Any, m: int) -> list[list[bytes]]:
    """m entries whose field names are `master`: [[f1, v1, f2, v2, ...], ...]."""
    k = len(master)
    if k == 1:
        f = master[0]
        return [[f, v] for v in vals]
    w = 2 * k
    flat: list[Any] = [None] * (w * m)
    flat[0::2] = tuple(master) * m
    flat[1::2] = vals
    return [flat[p:p + w] for p in range(0, w * m, w)]


def _packed(tc: str, vals: list[int]) -> bytes:
    """array(tc, vals).tobytes() for tc in H, I, Q; compiled, a C loop into the bytes (no array
    object; the same native layout, and the same OverflowError for a value out of range)."""
    if not cython.compiled:
        return array(tc, vals).tobytes()
    n = len(vals)
    if tc == "H":
        out = PyBytes_FromStringAndSize(cython.NULL, 2 * n)
        p16 = cython.cast(cython.p_ushort, PyBytes_AS_STRING(out))
        for i in range(n):
            p16[i] = vals[i]
    elif tc == "I":
        out = PyBytes_FromStringAndSize(cython.NULL, 4 * n)
        p32 = cython.cast(cython.p_uint, PyBytes_AS_STRING(out))
        for i in range(n):
            p32[i] = vals[i]
    else:
        out = PyBytes_FromStringAndSize(cython.NULL, 8 * n)
        p64 = cython.cast(cython.p_ulonglong, PyBytes_AS_STRING(out))
        for i in range(n):
            p64[i] = vals[i]
    return out


def _byte_lens(parts: list[bytes]) -> bytes:
    """bytes(map(len, parts)) as a C loop (compiled only): ValueError past 255."""
    m = len(parts)
    out = bytearray(m)
    for i in range(m):
        x = parts[i]
        n = len(x)
        if n > 255:
            raise ValueError
        out[i] = n
    return bytes(out)


def _tc(top: int) -> str:
    """The smallest unsigned array typecode that holds `top`."""
    return "H" if top < 1 << 16 else ("I" if top < 1 << 32 else "Q")


class Block:
    """A sealed node: the entries of one Redis listpack, packed into bytes.

    Fields:
      first    ID of the node's first entry (its radix-tree key), even if since deleted
      ms0      first >> 64; entry milliseconds are stored relative to it
      n        entries stored, live + deleted (Redis's count + deleted)
      live     live entries;  ndel: entries flagged deleted
      lp_rest  bytes of the Redis listpack, minus the two counter elements
      master   field names of the first entry (tuple; shared with the previous node if equal)
      msd      array(mtc) of `ms - ms0` per entry, as bytes (ascending)
      seq      array(stc) of the sequence numbers, as bytes (ascending within one ms)
      blob     the stored strings: values of SAMEFIELDS entries, field/value pairs of others
      lens     the string lengths: bytes (lentc 'B') or array(lentc) bytes; None when every
               string has length elen
      flags    bytearray of per-entry flags, or None (every entry SAMEFIELDS, none deleted)
      nfs      array('I') bytes: field counts of the non-SAMEFIELDS entries, or None
    """

    __slots__ = ("first", "ms0", "n", "live", "ndel", "lp_rest", "master", "msd", "mtc", "seq",
                 "stc", "blob", "lens", "lentc", "elen", "flags", "nfs")

    first: int
    ms0: int
    n: int
    live: int
    ndel: int
    lp_rest: int
    master: tuple[bytes, ...]
    msd: bytes
    mtc: str
    seq: bytes
    stc: str
    blob: bytes
    lens: bytes | None
    lentc: str
    elen: int
    flags: bytearray | None
    nfs: bytes | None

    # -- construction --
    @classmethod
    def pack(cls, t: Tail, prev_master: tuple[bytes, ...] | None = None) -> Block:
        """Pack an open node. Deleted entries keep their data, as Redis's tombstones do."""
        b = cls.__new__(cls)
        n = len(t.sids)
        b.first = t.first
        b.ms0 = t.ms0
        b.n = n
        b.live = t.live
        b.ndel = t.ndel
        b.lp_rest = t.lp_rest
        master = tuple(t.master)
        b.master = prev_master if prev_master == master else master
        msds = t.msds
        b.mtc = tc = _tc(msds[-1])
        b.msd = _packed(tc, msds)
        seqs = t.seqs
        b.stc = tc = _tc(max(seqs))
        b.seq = _packed(tc, seqs)
        flags = t.flags
        if flags.count(FLAG_SAMEFIELDS) == n:
            b.flags = None
            b.nfs = None
        else:
            b.flags = bytearray(flags)
            b.nfs = array("I", t.nfs).tobytes() if t.nfs else None
        b._set_strings(t.vals)
        return b

    def _set_strings(self, parts: list[bytes]) -> None:
        self.blob = b"".join(parts)
        try:
            lens = _byte_lens(parts) if cython.compiled else bytes(map(len, parts))
        except ValueError:  # a string of 256 bytes or more
            ln = list(map(len, parts))
            tc = _tc(max(ln))
            self.lens = array(tc, ln).tobytes()
            self.lentc = tc
            self.elen = -1
            return
        if lens.count(lens[0]) == len(lens):
            self.lens = None
            self.lentc = "B"
            self.elen = lens[0]
        else:
            self.lens = lens
            self.lentc = "B"
            self.elen = -1

    # -- state for persistence --
    def state(self) -> tuple:
        """Plain values (ints, str, bytes, tuples) that `from_state` turns back into this block."""
        return (self.first, self.n, self.live, self.ndel, self.lp_rest, self.master,
                self.mtc, self.msd, self.stc, self.seq, self.blob, self.lentc, self.lens,
                self.elen, None if self.flags is None else bytes(self.flags), self.nfs)

    @classmethod
    def from_state(cls, st: tuple) -> Block:
        b = cls.__new__(cls)
        (b.first, b.n, b.live, b.ndel, b.lp_rest, master, b.mtc, b.msd, b.stc, b.seq, b.blob,
         b.lentc, b.lens, b.elen, flags, b.nfs) = st
        b.master = tuple(master)
        b.ms0 = b.first >> 64
        b.flags = None if flags is None else bytearray(flags)
        return b

    # -- IDs --
    @property
    def lp_bytes(self) -> int:
        return self.lp_rest + _counters_size(self.live, self.ndel)

    def sids(self, i0: int = 0, i1: int | None = None) -> list[int]:
        """IDs of entries i0..i1-1, deleted ones included."""
        if i1 is None:
            i1 = self.n
        if cython.compiled:
            return _sids_c(self, i0, i1)
        base = self.ms0
        ms = array(self.mtc, self.msd)[i0:i1]
        sq = array(self.stc, self.seq)[i0:i1]
        return [((base + a) << 64) | c for a, c in zip(ms, sq, strict=True)]

    def sid_at(self, i: int) -> int:
        return self.sids(i, i + 1)[0]

    def last_sid(self) -> int:
        return self.sid_at(self.n - 1)

    def _bound(self, sid: int, right: bool) -> int:
        msd = (sid >> 64) - self.ms0
        if msd < 0:
            return 0
        if cython.compiled:
            if msd >> 64:  # past every entry (a bound above the greatest ID)
                return self.n
            return _bound_c(self, msd, sid & SEQ_MAX, right)
        ms = array(self.mtc, self.msd)
        lo = bisect_left(ms, msd)
        hi = bisect_right(ms, msd, lo)
        if lo == hi:
            return lo
        sq = array(self.stc, self.seq)
        if right:
            return bisect_right(sq, sid & SEQ_MAX, lo, hi)
        return bisect_left(sq, sid & SEQ_MAX, lo, hi)

    def lower(self, sid: int) -> int:
        """Index of the first entry with ID >= sid."""
        return self._bound(sid, False)

    def upper(self, sid: int) -> int:
        """Index of the first entry with ID > sid."""
        return self._bound(sid, True)

    def find(self, sid: int) -> int:
        i = self._bound(sid, False)
        if i < self.n and self.sid_at(i) == sid:
            return i
        return -1

    # -- fields --
    def _strings(self, e0: int, e1: int) -> Any:
        """Stored strings e0..e1-1 (a tuple or list)."""
        cnt = e1 - e0
        if cnt <= 0:
            return ()
        if cython.compiled:
            return _strings_c(self, e0, e1)
        if self.lens is None:
            w = self.elen
            if w == 0:
                return [b""] * cnt
            return struct.unpack_from(f"{w}s" * cnt, self.blob, e0 * w)
        lens = self.lens if self.lentc == "B" else array(self.lentc, self.lens)
        off = sum(lens[:e0]) if e0 else 0
        blob = self.blob
        out = []
        for ln in lens[e0:e1]:
            end = off + ln
            out.append(blob[off:end])
            off = end
        return out

    def entries(self, i0: int, i1: int) -> list[list[bytes]]:
        """Flat field lists of entries i0..i1-1, deleted ones included."""
        master = self.master
        k = len(master)
        if self.nfs is None:
            if cython.compiled:
                return _same_entries_c(self, i0, i1)
            return _interleave(master, self._strings(i0 * k, i1 * k), i1 - i0)
        flags = self.flags
        assert flags is not None
        nfs = iter(array("I", self.nfs))
        e = 0
        e0 = 0
        spans: list[int] = []
        for i in range(i1):
            if i == i0:
                e0 = e
            if flags[i] & FLAG_SAMEFIELDS:
                w = k
                spans.append(-1)
            else:
                w = 2 * next(nfs)
                spans.append(w)
            e += w
        strs = self._strings(e0, e)
        out: list[list[bytes]] = []
        p = 0
        for w in spans[i0:]:
            if w < 0:
                out.append(_interleave(master, strs[p:p + k], 1)[0])
                p += k
            else:
                out.append(list(strs[p:p + w]))
                p += w
        return out

    # -- deletion --
    def is_deleted(self, i: int) -> bool:
        f = self.flags
        return f is not None and bool(f[i] & FLAG_DELETED)

    def mark_deleted(self, i: int) -> None:
        if self.flags is None:
            self.flags = bytearray(b"\x02") * self.n
        self.flags[i] |= FLAG_DELETED
        self.live -= 1
        self.ndel += 1

    def nbytes(self) -> int:
        """Approximate heap bytes of this node (objects and their headers)."""
        n = 152 + 33 + len(self.msd) + 33 + len(self.seq) + 33 + len(self.blob)
        if self.lens is not None:
            n += 33 + len(self.lens)
        if self.flags is not None:
            n += 57 + len(self.flags)
        if self.nfs is not None:
            n += 33 + len(self.nfs)
        return n + 60  # index entries: list slots and the first-ID int


class Tail:
    """The open last node: lists, so that XADD is an append.

    `sids` (IDs, deleted included), `ents` (the flat field lists as given to append), `flags`
    (bytearray), `live`/`ndel` counters, `lp_rest` (exact Redis listpack bytes minus the two
    counters), `master` (list of the first entry's field names) and `k` (their number),
    `first`/`ms0`/`seq0` (the node's key and its parts). For packing, appends also collect
    `msds`/`seqs` (the ID parts), `vals` (the strings a Block stores: values of SAMEFIELDS
    entries, field/value pairs of others) and `nfs` (field counts of the others).
    """

    __slots__ = ("first", "ms0", "seq0", "sids", "ents", "flags", "live", "ndel", "lp_rest",
                 "master", "k", "msds", "seqs", "vals", "nfs")

    first: int
    ms0: int
    seq0: int
    sids: list[int]
    ents: list[list[bytes]]
    flags: bytearray
    live: int
    ndel: int
    lp_rest: int
    master: list[bytes]
    k: int
    msds: list[int]
    seqs: list[int]
    vals: list[bytes]
    nfs: list[int]

    @classmethod
    def new(cls, sid: int, fields: list[bytes]) -> Tail:
        """A node whose master entry takes its field names from this first entry."""
        t = cls.__new__(cls)
        t.first = sid
        t.ms0 = sid >> 64
        t.seq0 = seq = sid & SEQ_MAX
        t.sids = [sid]
        t.ents = [fields]
        t.flags = bytearray(b"\x02")
        t.live = 1
        t.ndel = 0
        master = fields[0::2]
        k = len(master)
        t.master = master
        t.k = k
        t.msds = [0]
        t.seqs = [seq]
        t.vals = vals = fields[1::2]
        t.nfs = []
        # header+EOF, master: num-fields, fields, terminator; entry: flags, ms, seq, values,
        # lp-count.
        t.lp_rest = (7 + _isz(k) + _sum_esz(master) + 2
                     + 6 + _sum_esz(vals) + _isz(k + 3))
        return t

    @classmethod
    def unpack(cls, b: Block) -> Tail:
        t = cls.__new__(cls)
        t.first = b.first
        t.ms0 = b.ms0
        t.seq0 = b.first & SEQ_MAX
        t.sids = b.sids()
        t.ents = ents = b.entries(0, b.n)
        t.flags = flags = (bytearray(b"\x02") * b.n if b.flags is None
                           else bytearray(b.flags))
        t.live = b.live
        t.ndel = b.ndel
        t.lp_rest = b.lp_rest
        t.master = list(b.master)
        t.k = len(b.master)
        t.msds = array(b.mtc, b.msd).tolist()
        t.seqs = array(b.stc, b.seq).tolist()
        t.vals = list(b._strings(0, _count_strings(b)))
        t.nfs = [len(e) >> 1 for e, f in zip(ents, flags, strict=True)
                 if not f & FLAG_SAMEFIELDS]
        return t

    @property
    def n(self) -> int:
        return len(self.sids)

    @property
    def lp_bytes(self) -> int:
        return self.lp_rest + _counters_size(self.live, self.ndel)

    def sid_at(self, i: int) -> int:
        return self.sids[i]

    def last_sid(self) -> int:
        return self.sids[-1]

    def lower(self, sid: int) -> int:
        return bisect_left(self.sids, sid)

    def upper(self, sid: int) -> int:
        return bisect_right(self.sids, sid)

    def find(self, sid: int) -> int:
        sids = self.sids
        i = bisect_left(sids, sid)
        return i if i < len(sids) and sids[i] == sid else -1

    def is_deleted(self, i: int) -> bool:
        return bool(self.flags[i] & FLAG_DELETED)

    def mark_deleted(self, i: int) -> None:
        self.flags[i] |= FLAG_DELETED
        self.live -= 1
        self.ndel += 1

    def entries(self, i0: int, i1: int) -> list[list[bytes]]:
        return self.ents[i0:i1]

    def nbytes(self) -> int:
        n = 300 + 27 * len(self.sids) + 57 + len(self.flags) + 8 * len(self.vals)
        for e in self.ents:
            n += 56 + 8 * len(e)
            for x in e:
                n += 33 + len(x)
        return n


def _count_strings(b: Block) -> int:
    """How many strings a Block stores."""
    if b.lens is not None:
        return len(b.lens) if b.lentc == "B" else len(b.lens) // array(b.lentc).itemsize
    if b.elen:
        return len(b.blob) // b.elen
    k = len(b.master)
    if b.nfs is None:
        return b.n * k
    nfs = array("I", b.nfs)
    return (b.n - len(nfs)) * k + 2 * sum(nfs)


Node = Block | Tail


def _span(blk: Node, i0: int, i1: int) -> tuple[list[int], list[list[bytes]]]:
    """IDs and fields of entries i0..i1-1 of either node type, deleted ones included."""
    if type(blk) is Tail:
        t = blk
        return t.sids[i0:i1], t.ents[i0:i1]
    b = blk
    return b.sids(i0, i1), b.entries(i0, i1)


def _live_slice(blk: Node, i0: int, i1: int, rev: bool, cap: int | None, encode: Any = None,
                ids: bool = True) -> tuple[Any, Any]:
    """IDs and fields of the live entries among i0..i1-1, in direction order, at most cap.
    With `encode`, the fields come as `encode(node, lo, hi, rev)`: the encoding of the live
    entries among lo..hi-1 in direction order (bytes, no field lists built), lo..hi being the
    span that holds the entries taken; without `ids`, their number instead of their IDs."""
    if blk.ndel:
        i0, i1 = _live_bounds(blk, i0, i1, rev, -1 if cap is None else cap)
        if i0 >= i1:
            return [], []
    elif cap is not None and i1 - i0 > cap:
        if rev:
            i0 = i1 - cap
        else:
            i1 = i0 + cap
    if encode is not None:
        return (live_ids(blk, i0, i1, rev) if ids else _live_count(blk, i0, i1),
                encode(blk, i0, i1, rev))
    return live_rows(blk, i0, i1, rev)


def _live_count(blk: Node, i0: int, i1: int) -> int:
    """How many of entries i0..i1-1 are live."""
    if not blk.ndel:
        return i1 - i0
    flags = blk.flags
    if not cython.compiled:
        return flags[i0:i1].translate(_LIVE).count(1)
    n = 0
    for i in range(i0, i1):
        if not flags[i] & _DEL:
            n += 1
    return n


def _live_bounds(blk: Node, i0: int, i1: int, rev: bool, cap: int) -> tuple[int, int]:
    """The span of i0..i1-1 from its first to its cap-th live entry in direction order (all of
    them if cap < 0); empty (lo >= hi) when none is live."""
    flags = blk.flags
    assert flags is not None
    if cap < 0:  # every live entry: the span less the deleted ones at its ends
        while i1 > i0 and flags[i1 - 1] & _DEL:
            i1 -= 1
        while i0 < i1 and flags[i0] & _DEL:
            i0 += 1
        return i0, i1
    left = cap
    if rev:
        while i1 > i0 and flags[i1 - 1] & _DEL:
            i1 -= 1
        i = i1
        while i > i0 and left > 0:
            i -= 1
            if not flags[i] & _DEL:
                left -= 1
        return i, i1
    while i0 < i1 and flags[i0] & _DEL:
        i0 += 1
    i = i0
    while i < i1 and left > 0:
        if not flags[i] & _DEL:
            left -= 1
        i += 1
    return i0, i


def live_ids(blk: Node, i0: int, i1: int, rev: bool) -> list[int]:
    """IDs of the live entries among i0..i1-1, in direction order (descending if rev)."""
    if type(blk) is Block:
        b = blk
        if cython.compiled:
            return _sids_c(b, i0, i1, rev, True)
        ids = b.sids(i0, i1)
    else:
        t = blk
        ids = t.sids[i0:i1]
    if blk.ndel:
        flags = blk.flags
        ids = list(compress(ids, flags[i0:i0 + len(ids)].translate(_LIVE)))
    if rev:
        ids.reverse()
    return ids


def live_rows(blk: Node, i0: int, i1: int, rev: bool) -> tuple[list[int], list[list[bytes]]]:
    """IDs and field lists of the live entries among i0..i1-1, in direction order."""
    ids, ents = _span(blk, i0, i1)
    if blk.ndel:
        flags = blk.flags
        keep = flags[i0:i0 + len(ids)].translate(_LIVE)
        ids = list(compress(ids, keep))
        ents = list(compress(ents, keep))
    if rev:
        ids.reverse()
        ents = ents[::-1]
    return ids, ents


# --- compiled decoding ------------------------------------------------------------------------
# A read decodes only the entries it returns, by C loops over the node's packed bytes: no array
# objects, slices or struct formats. Each function is the compiled twin of the interpreted
# code in the Block method that calls it, which stays the reference (tests/test_native.py).
def _width(tc: str) -> int:
    """Bytes per item of an array typecode used here (B, H, I, Q)."""
    return 1 if tc == "B" else (2 if tc == "H" else (4 if tc == "I" else 8))


def _uget(p: bytes, w: int, i: int) -> int:
    """Item i of the native unsigned array of w-byte items at p."""
    if w == 1:
        return cython.cast(cython.p_uchar, p)[i]
    if w == 2:
        return cython.cast(cython.p_ushort, p)[i]
    if w == 4:
        return cython.cast(cython.p_uint, p)[i]
    return cython.cast(cython.p_ulonglong, p)[i]


def _bisect(p: bytes, w: int, x: int, lo: int, hi: int, right: bool) -> int:
    """bisect_left (bisect_right if right) of x in items lo..hi-1 of an ascending array."""
    while lo < hi:
        mid = (lo + hi) >> 1
        v = _uget(p, w, mid)
        if v < x or (right and v == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _bound_c(b: Block, msd: int, sq: int, right: bool) -> int:
    """Block._bound past its first test (0 <= msd < 2**64)."""
    n = b.n
    pm = PyBytes_AS_STRING(b.msd)
    mw = _width(b.mtc)
    lo = _bisect(pm, mw, msd, 0, n, False)
    hi = _bisect(pm, mw, msd, lo, n, True)
    if lo == hi:
        return lo
    return _bisect(PyBytes_AS_STRING(b.seq), _width(b.stc), sq, lo, hi, right)


def _sids_c(b: Block, i0: int, i1: int, rev: bool = False, live: bool = False) -> list[int]:
    """Block.sids: IDs of entries i0..i1-1 (clamped to the node), descending if rev, the
    deleted ones left out if live (live_ids)."""
    i0 = max(i0, 0)
    i1 = min(i1, b.n)
    pm = PyBytes_AS_STRING(b.msd)
    mw = _width(b.mtc)
    ps = PyBytes_AS_STRING(b.seq)
    sw = _width(b.stc)
    pf = _flags_ptr(b) if live else cython.NULL
    base = b.ms0
    out = []
    step = -1 if rev else 1
    i = i1 - 1 if rev else i0
    for _j in range(i1 - i0):
        if pf == cython.NULL or not pf[i] & _DEL:
            out.append(_sid_of(base + _uget(pm, mw, i), _uget(ps, sw, i)))
        i += step
    return out


def _flags_ptr(b: Block) -> bytes | None:
    """The entry flags (NULL when there are none: every entry SAMEFIELDS and live)."""
    if b.flags is None:
        return cython.NULL
    return cython.cast(cython.p_uchar, PyByteArray_AS_STRING(b.flags))


def _sid_of(ms: int, seq: int) -> int:
    """The ID `ms << 64 | seq`; compiled, of two C integers (xshard_make_id in the .pxd: on
    CPython 3.11 its digits written straight into a new int, a shift and an or of Python
    ints cost ~600 instructions more)."""
    if not cython.compiled:
        return ms << 64 | seq
    return xshard_make_id(ms, seq)  # noqa: F821 (declared in the .pxd)


def _sid_ms(sid: int) -> int:
    """`sid >> 64`; compiled, a C integer (with PyLong_AsUnsignedLongLongMask for the
    sequence, an ID's two halves cost one shift)."""
    if not cython.compiled:
        return sid >> 64
    return xshard_sid_ms(sid)  # noqa: F821 (declared in the .pxd)


def id_int_path() -> str:
    """How compiled code makes an ID's int: "cpython-3.11-digits" (the private layout, see
    xshard_make_id in the .pxd), "public" (the public C API), or "interpreted"."""
    if not cython.compiled:
        return "interpreted"
    return "cpython-3.11-digits" if XSHARD_ID_DIGITS else "public"  # noqa: F821


def _string_count(b: Block) -> int:
    """How many strings the blob holds as far as its lengths say (bounds for the C loops)."""
    if b.lens is not None:
        return len(b.lens) // _width(b.lentc)
    if b.elen > 0:
        return len(b.blob) // b.elen
    return -1  # every string is empty: any count


def _lens_ptr(b: Block) -> bytes | None:
    """The string length array (NULL when every string has length elen)."""
    if b.lens is None:
        return cython.NULL
    return PyBytes_AS_STRING(b.lens)


def _string_off(b: Block, e: int) -> int:
    """Offset in the blob of stored string e."""
    if b.lens is None:
        return e * b.elen
    pl = PyBytes_AS_STRING(b.lens)
    lw = _width(b.lentc)
    off = 0
    for j in range(e):
        off += _uget(pl, lw, j)
    return off


def _strings_c(b: Block, e0: int, e1: int) -> list[bytes]:
    """Block._strings: stored strings e0..e1-1 (clamped to the blob)."""
    cnt = _string_count(b)
    if 0 <= cnt < e1:
        e1 = cnt
    out = []
    if e0 < 0 or e0 >= e1:
        return out
    pb = PyBytes_AS_STRING(b.blob)
    off = _string_off(b, e0)
    w = b.elen
    pl = _lens_ptr(b)
    lw = _width(b.lentc) if pl else 0
    for e in range(e0, e1):
        if lw:
            w = _uget(pl, lw, e)
        out.append(PyBytes_FromStringAndSize(pb + off, w))
        off += w
    return out


def _same_entries_c(b: Block, i0: int, i1: int) -> list[list[bytes]]:
    """Block.entries when every entry has the master fields (nfs is None): each field list
    built once, the master names shared, the values cut straight from the blob."""
    master = b.master
    k = len(master)
    i0 = max(i0, 0)
    i1 = min(i1, b.n)
    cnt = _string_count(b)
    if 0 <= cnt < i1 * k:
        i1 = cnt // k if k else i0
    out = []
    if i0 >= i1:
        return out
    pb = PyBytes_AS_STRING(b.blob)
    e = i0 * k
    off = _string_off(b, e)
    w = b.elen
    pl = _lens_ptr(b)
    lw = _width(b.lentc) if pl else 0
    for _i in range(i0, i1):
        ent = [None] * (2 * k)
        for j in range(k):
            if lw:
                w = _uget(pl, lw, e)
            ent[2 * j] = master[j]
            ent[2 * j + 1] = PyBytes_FromStringAndSize(pb + off, w)
            off += w
            e += 1
        out.append(ent)
    return out
