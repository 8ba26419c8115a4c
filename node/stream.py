"""The stream data structure: Redis's radix tree of listpacks, re-thought for Python.

Data only: no RESP, no client, no config lookups. Errors are typed exceptions (`IDTooSmall`,
`ElementsTooLarge`) and the command layer chooses the reply text, as t_stream.c does with
EDOM/ERANGE.

IDs are ints `ms << 64 | seq` everywhere, so comparing two IDs is one int comparison.

Layout
------
A stream is a sorted list of *nodes*, exactly the nodes Redis would have for the same commands
and the same `stream-node-max-entries` / `stream-node-max-bytes`, so that `~` trims and
XINFO STREAM `radix-tree-keys` agree with Redis. To decide where a node ends we keep the exact
byte size that Redis's listpack for that node would have (`lp_rest` + the two counters).

- `Block`: a sealed node. Entries are packed into a few `bytes` objects: IDs as two arrays
  (`ms - first_ms` and `seq`, each with the smallest typecode that fits; a seek is a C bisect on
  the first and then on the second within one millisecond), all stored strings in one blob plus
  a length array (or one uniform length), the field names of the node's first entry (its
  *master fields*) once, and per-entry flags only when some entry differs from the master
  fields or is deleted. For 5 fields x 10-byte values that is ~60 bytes per entry (Redis: ~70).
- `Tail`: the open last node, plain lists for O(1) appends. It is packed into a `Block` when
  Redis would start a new node, and a `Block` is reopened as a `Tail` in the rare case that it
  becomes the last node again (the nodes after it were deleted) and Redis would append to it.
- `Stream._firsts` (the first ID of every node, sorted) + bisect gives an O(log n) seek; a
  range decodes only the nodes it touches.

API used by the command modules (keep it stable)
------------------------------------------------
Attributes: `length` (live entries), `last_id`, `first_id` (first live entry, 0 when empty, as
Redis records it), `max_deleted_entry_id`, `entries_added`, `groups` (name -> group object,
insertion ordered; owned by node.groups).

- `next_auto_id(now_ms)` / `next_seq_id(ms)`: IDs for `*` and `ms-*`.
- `append(sid, fields, max_entries, max_bytes)`: `fields` is the flat list
  `[f1, v1, f2, v2, ...]`; it is kept by reference, so pass a list nobody mutates later.
  `append_many(sids, field_lists, ...)` appends a run of them in one call (effects replay).
- `range(start, end, count=None, rev=False)`: iterator of `(sid, fields)` of live entries with
  `start <= sid <= end`; `range_chunks` yields the same per node as `(sids, field_lists)`.
  The yielded lists may be shared with the stream: never mutate them, and do not modify the
  stream while iterating.
- `get(sid)`, `delete(sid)`, `trim(strategy, threshold, approx, limit)`.
- `first_entry()`, `last_entry()`, `edge_id(first, skip_tombstones)`, `last_valid_id()`.
- `num_blocks()` (radix-tree-keys), `memory_usage()`, `blocks()`, `dump_state()`,
  `Stream.from_state()`, `copy()`.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import chain
from typing import Any

import cython

from node.listpack import _as_int, _counters_size, _isz, _s64, _sum_esz  # noqa: F401 (rdb.py)
from node.streamid import MAX_ID, SEQ_MAX

__all__ = [
    "Stream", "Block", "Tail", "IDTooSmall", "ElementsTooLarge",
    "FLAG_DELETED", "FLAG_SAMEFIELDS", "LP_MAX_SIZE",
]

LP_MAX_SIZE = 1 << 30  # STREAM_LISTPACK_MAX_SIZE

FLAG_DELETED = 1  # STREAM_ITEM_FLAG_DELETED
FLAG_SAMEFIELDS = 2  # STREAM_ITEM_FLAG_SAMEFIELDS

class IDTooSmall(Exception):
    """EDOM: the ID is not greater than the stream's last ID (or `ms-*` has no sequence left)."""


class ElementsTooLarge(Exception):
    """ERANGE: the fields and values add up to more than a listpack can hold."""


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
        b.msd = array(tc, msds).tobytes()
        seqs = t.seqs
        b.stc = tc = _tc(max(seqs))
        b.seq = array(tc, seqs).tobytes()
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


def _live_slice(blk: Node, i0: int, i1: int, rev: bool, cap: int | None
                ) -> tuple[list[int], list[list[bytes]]]:
    """IDs and fields of the live entries among i0..i1-1, in direction order, at most cap."""
    if blk.ndel == 0:
        if cap is not None and i1 - i0 > cap:
            if rev:
                i0 = i1 - cap
            else:
                i1 = i0 + cap
        sids = blk.sids[i0:i1] if type(blk) is Tail else blk.sids(i0, i1)
        ents = blk.entries(i0, i1)
    else:
        flags = blk.flags
        assert flags is not None
        order = range(i1 - 1, i0 - 1, -1) if rev else range(i0, i1)
        idx = [i for i in order if not flags[i] & FLAG_DELETED]
        if cap is not None:
            del idx[cap:]
        if not idx:
            return [], []
        lo = min(idx[0], idx[-1])
        hi = max(idx[0], idx[-1]) + 1
        allsids = blk.sids[lo:hi] if type(blk) is Tail else blk.sids(lo, hi)
        allents = blk.entries(lo, hi)
        if not rev and len(idx) == hi - lo:
            return allsids, allents
        return [allsids[i - lo] for i in idx], [allents[i - lo] for i in idx]
    if rev:
        sids.reverse()
        ents = ents[::-1]
    return sids, ents


# --- the stream -------------------------------------------------------------------------------
class Stream:
    """A Redis stream. See the module docstring for the API and the node layout."""

    __slots__ = ("length", "last_id", "first_id", "max_deleted_entry_id", "entries_added",
                 "groups", "idmp", "_firsts", "_nodes", "_tail", "__weakref__")

    def __init__(self) -> None:
        self.length = 0  # live entries
        self.last_id = 0  # the greatest ID ever added (or set by XSETID)
        self.first_id = 0  # first live entry, 0 when empty
        self.max_deleted_entry_id = 0  # greatest ID deleted by XDEL (or XSETID MAXDELETEDID)
        self.entries_added = 0  # all entries ever added (or XSETID ENTRIESADDED)
        self.groups: dict[bytes, Any] = {}  # consumer groups, owned by node.groups
        self.idmp: Any = None  # node.idmp.IdmpMap once IDMP/IDMPAUTO or XCFGSET was used
        self._firsts: list[int] = []  # first ID of each node, ascending
        self._nodes: list[Node] = []  # the nodes; only the last may be a Tail
        self._tail: Tail | None = None  # the last node when it is open

    def __repr__(self) -> str:
        return f"<Stream length={self.length} nodes={len(self._nodes)}>"

    # -- IDs ------------------------------------------------------------------------------
    def next_auto_id(self, now_ms: int) -> int:
        """streamNextID: the ID for `*`. The caller checks exhaustion (last_id == MAX_ID)."""
        last = self.last_id
        if now_ms > last >> 64:
            return now_ms << 64
        return last + 1 if last != MAX_ID else 0

    def next_seq_id(self, ms: int) -> int:
        """The ID for `ms-*`: the next sequence in the last ID's millisecond, else ms-0.

        Raises IDTooSmall when that millisecond has no sequence left. (Redis 7.0 replied with
        the ERANGE text there by accident; 7.2+ sets EDOM, which we follow.)
        """
        last = self.last_id
        if last >> 64 == ms:
            if last & SEQ_MAX == SEQ_MAX:
                raise IDTooSmall
            return last + 1
        return ms << 64

    # -- append ---------------------------------------------------------------------------
    def append(self, sid: int, fields: list[bytes], max_entries: int, max_bytes: int) -> None:
        """streamAppendItem with a known ID; the node split follows Redis byte for byte.

        This is XADD's hot path: the open tail takes the entry with a few list appends plus
        the exact listpack size of the entry, which decides where Redis would split nodes.
        """
        if sid <= self.last_id:
            raise IDTooSmall
        nf2 = len(fields)
        tot = 0
        for j in range(nf2):
            x = fields[j]  # bytes (typed compiled: anything else is a TypeError, like join)
            tot += len(x)
        if tot > LP_MAX_SIZE:
            raise ElementsTooLarge
        t = self._tail
        if t is None:
            if self._nodes:
                last = self._nodes[-1]
                if not self._must_split(last.lp_bytes, last.n, tot, max_entries, max_bytes):
                    t = self._tail = Tail.unpack(last)  # type: ignore[arg-type]
                    self._nodes[-1] = t
        else:
            live = t.live
            ndel = t.ndel
            if ((max_entries and len(t.sids) >= max_entries)
                    or t.lp_rest + (2 if live < 128 else _isz(live))
                    + (2 if ndel < 128 else _isz(ndel)) + tot
                    >= (max_bytes if 0 < max_bytes <= LP_MAX_SIZE else LP_MAX_SIZE)):
                self._seal()
                t = None
        if t is None:
            t = self._tail = Tail.new(sid, fields)
            self._nodes.append(t)
            self._firsts.append(sid)
        else:
            # flags (2 bytes) + ms delta + seq delta + values or fields + lp-count
            seq = sid & SEQ_MAX
            msd = (sid >> 64) - t.ms0
            seqd = seq - t.seq0
            size = (4 if msd < 128 else 2 + _isz(_s64(msd))) + (
                2 if 0 <= seqd < 128 else (3 if -4096 <= seqd < 4096 else _isz(_s64(seqd))))
            k = t.k
            same = nf2 == 2 * k
            if same:  # the master entry's field names (compared in place, no slices)
                master = t.master
                for j in range(k):
                    x = fields[2 * j]
                    if x != master[j]:
                        same = False
                        break
            vals = t.vals
            if same:
                t.flags.append(2)  # FLAG_SAMEFIELDS
                size += _sum_esz(fields, 1, 2) + (2 if k < 125 else _isz(k + 3))
                for j in range(1, nf2, 2):
                    vals.append(fields[j])
            else:
                t.flags.append(0)
                nf = nf2 >> 1
                size += _isz(nf) + _sum_esz(fields, 0, 1) + _isz(2 * nf + 4)
                vals += fields
                t.nfs.append(nf)
            t.msds.append(msd)
            t.seqs.append(seq)
            t.sids.append(sid)
            t.ents.append(fields)
            t.lp_rest += size
            t.live += 1
        n = self.length = self.length + 1
        self.entries_added += 1
        self.last_id = sid
        if n == 1:
            self.first_id = sid

    def append_many(self, sids: list[int], field_lists: list[list[bytes]], max_entries: int,
                    max_bytes: int, maxlen: int = -1) -> int:
        """Append entries with known IDs in order, exactly as that many `append` calls would
        (each followed by an exact MAXLEN trim when `maxlen` >= 0, as the XADD effect
        `XADD key MAXLEN n id ...` does, so node splits and tombstones are the same).

        Returns how many were appended: it stops before the first entry that `append`
        refuses (IDTooSmall, ElementsTooLarge), and the caller reports that one. This is the
        batched apply of AOF loading and replication (node/effects.py EffectApplier)."""
        n = len(sids)
        i = 0
        try:
            if maxlen < 0:
                while i < n:
                    self.append(sids[i], field_lists[i], max_entries, max_bytes)
                    i += 1
            else:
                while i < n:
                    self.append(sids[i], field_lists[i], max_entries, max_bytes)
                    i += 1
                    if self.length > maxlen:
                        self.trim("maxlen", maxlen, False, 0)
        except (IDTooSmall, ElementsTooLarge):
            pass
        return i

    @staticmethod
    def _must_split(lp_bytes: int, n: int, tot: int, max_entries: int, max_bytes: int) -> bool:
        mb = max_bytes if 0 < max_bytes <= LP_MAX_SIZE else LP_MAX_SIZE
        return lp_bytes + tot >= mb or bool(max_entries and n >= max_entries)

    def _seal(self) -> None:
        t = self._tail
        if t is None:
            return
        nodes = self._nodes
        prev = nodes[-2].master if len(nodes) > 1 else None
        nodes[-1] = Block.pack(t, prev)  # type: ignore[arg-type]
        self._tail = None

    def _remove_node(self, i: int) -> None:
        if self._nodes[i] is self._tail:
            self._tail = None
        del self._nodes[i]
        del self._firsts[i]

    # -- lookups --------------------------------------------------------------------------
    def _locate(self, sid: int) -> tuple[Node | None, int]:
        """The node holding sid and its index there (deleted entries included), or (None, -1)."""
        bi = bisect_right(self._firsts, sid) - 1
        if bi < 0:
            return None, -1
        blk = self._nodes[bi]
        i = blk.find(sid)
        return (blk, i) if i >= 0 else (None, -1)

    def get(self, sid: int) -> list[bytes] | None:
        """The fields of a live entry, or None."""
        blk, i = self._locate(sid)
        if blk is None or blk.is_deleted(i):
            return None
        return blk.entries(i, i + 1)[0]

    def __contains__(self, sid: int) -> bool:
        blk, i = self._locate(sid)
        return blk is not None and not blk.is_deleted(i)

    def range(self, start: int, end: int, count: int | None = None, rev: bool = False
              ) -> Iterator[tuple[int, list[bytes]]]:
        """Live entries with start <= id <= end, ascending (or descending if rev)."""
        return chain.from_iterable(
            zip(sids, ents, strict=True)
            for sids, ents in self.range_chunks(start, end, count, rev))

    def range_chunks(self, start: int, end: int, count: int | None = None, rev: bool = False
                     ) -> Iterator[tuple[list[int], list[list[bytes]]]]:
        """Like range, one node at a time: (IDs, field lists), for encoders that work in bulk."""
        if start > end or not self._nodes or (count is not None and count <= 0):
            return iter(())
        return self._range_rev(start, end, count) if rev else self._range_fwd(start, end, count)

    def _range_fwd(self, start: int, end: int, left: int | None
                   ) -> Iterator[tuple[list[int], list[list[bytes]]]]:
        nodes = self._nodes
        bi = bisect_right(self._firsts, start) - 1
        if bi < 0:
            bi = 0
        while bi < len(nodes):
            blk = nodes[bi]
            if blk.first > end:
                return
            bi += 1
            if blk.live == 0:
                continue
            i0 = blk.lower(start) if start > blk.first else 0
            # Every entry of a node is below the next node's first ID.
            i1 = blk.n if bi < len(nodes) and nodes[bi].first <= end else blk.upper(end)
            if i0 >= i1:
                continue
            sids, ents = _live_slice(blk, i0, i1, False, left)
            if sids:
                yield sids, ents
                if left is not None:
                    left -= len(sids)
                    if left <= 0:
                        return

    def _range_rev(self, start: int, end: int, left: int | None
                   ) -> Iterator[tuple[list[int], list[list[bytes]]]]:
        nodes = self._nodes
        bi = bisect_right(self._firsts, end) - 1
        while bi >= 0:
            blk = nodes[bi]
            if blk.live:
                i0 = blk.lower(start) if start > blk.first else 0
                i1 = blk.n if bi + 1 < len(nodes) and nodes[bi + 1].first <= end else blk.upper(end)
                if i0 < i1:
                    sids, ents = _live_slice(blk, i0, i1, True, left)
                    if sids:
                        yield sids, ents
                        if left is not None:
                            left -= len(sids)
                            if left <= 0:
                                return
            if blk.first <= start:
                return
            bi -= 1

    def first_entry(self) -> tuple[int, list[bytes]] | None:
        for e in self.range(0, MAX_ID, 1):
            return e
        return None

    def last_entry(self) -> tuple[int, list[bytes]] | None:
        for e in self.range(0, MAX_ID, 1, rev=True):
            return e
        return None

    def edge_id(self, first: bool, skip_tombstones: bool = True) -> int:
        """streamGetEdgeID: first/last entry ID; MAX_ID (first) or 0 (last) if there is none."""
        if skip_tombstones:
            e = self.first_entry() if first else self.last_entry()
            if e is not None:
                return e[0]
        elif self._nodes:
            return self._nodes[0].first if first else self._nodes[-1].last_sid()
        return MAX_ID if first else 0

    def last_valid_id(self) -> int:
        """The last live entry's ID (streamLastValidID), 0 if empty."""
        return self.edge_id(False, True)

    # -- deletion and trimming ------------------------------------------------------------
    def delete(self, sid: int) -> bool:
        """XDEL of one ID: flag it deleted (dropping its node with its last live entry)."""
        bi = bisect_right(self._firsts, sid) - 1
        if bi < 0:
            return False
        blk = self._nodes[bi]
        i = blk.find(sid)
        if i < 0 or blk.is_deleted(i):
            return False
        if blk.live == 1:
            self._remove_node(bi)
        else:
            blk.mark_deleted(i)
        self.length -= 1
        if sid > self.max_deleted_entry_id:
            self.max_deleted_entry_id = sid
        if self.length == 0:
            self.first_id = 0
        elif sid == self.first_id:
            self.first_id = self.edge_id(True, True)
        return True

    def trim(self, strategy: str, threshold: int, approx: bool, limit: int,
             stop: int = MAX_ID + 1) -> int:
        """streamTrim: returns the number of entries removed.

        strategy 'maxlen' keeps at most `threshold` entries, 'minid' removes IDs < threshold.
        Whole nodes go from the head; `approx` stops at the first node that cannot go whole;
        otherwise entries of that node are flagged deleted. `limit` (0 = none) caps the removed
        entries, counted in whole nodes, as in Redis. No ID >= `stop` is removed (ACKED
        trimming, node/references.py).
        """
        maxlen = strategy == "maxlen"
        if not maxlen and stop < threshold:
            threshold = stop
        nodes = self._nodes
        deleted = 0
        gone = 0
        for blk in nodes:
            if maxlen and self.length <= threshold:
                break
            entries = blk.live
            if limit and deleted + entries > limit:
                break
            if maxlen:
                remove = self.length - entries >= threshold and blk.last_sid() < stop
            else:
                remove = blk.last_sid() < threshold
            if remove:
                self.length -= entries
                deleted += entries
                gone += 1
                continue
            if approx:
                break
            # Flag entries inside this node. Like Redis, the node stays even if this leaves it
            # with no live entry (possible with MINID when its last entry is a tombstone).
            sids = blk.sids if type(blk) is Tail else blk.sids()
            for i, sid in enumerate(sids):
                if maxlen:
                    if self.length <= threshold or sid >= stop:
                        break
                elif sid >= threshold:
                    break
                if not blk.is_deleted(i):
                    blk.mark_deleted(i)
                    self.length -= 1
                    deleted += 1
            break
        if gone:
            if self._tail is not None and gone == len(nodes):
                self._tail = None
            del nodes[:gone]
            del self._firsts[:gone]
        if self.length == 0:
            self.first_id = 0
        elif deleted:
            self.first_id = self.edge_id(True, True)
        return deleted

    # -- introspection and persistence ----------------------------------------------------
    def num_blocks(self) -> int:
        """Redis's radix-tree-keys: the number of nodes."""
        return len(self._nodes)

    def node_keys(self) -> list[int]:
        """The nodes' keys (first IDs), ascending: what Redis's rax holds. Do not modify."""
        return self._firsts

    def memory_usage(self) -> int:
        """Approximate heap bytes of the stream (groups not included)."""
        return 200 + sum(b.nbytes() for b in self._nodes)

    def blocks(self) -> Iterator[Block]:
        """Every node as a sealed Block; the open tail is packed into a temporary copy."""
        for blk in self._nodes:
            yield blk if type(blk) is Block else Block.pack(blk)  # type: ignore[arg-type]

    def dump_state(self) -> tuple:
        """Plain values that `Stream.from_state` restores (consumer groups not included)."""
        return (self.length, self.last_id, self.first_id, self.max_deleted_entry_id,
                self.entries_added, [b.state() for b in self.blocks()])

    @classmethod
    def from_state(cls, st: tuple) -> Stream:
        s = cls()
        (s.length, s.last_id, s.first_id, s.max_deleted_entry_id, s.entries_added, blocks) = st
        s.add_blocks(blocks)
        return s

    def add_blocks(self, states: list[tuple]) -> None:
        """Append sealed nodes from their `Block.state()` values (a snapshot, a slot move). A
        node whose field names equal the previous node's shares that tuple, as appends do."""
        nodes = self._nodes
        firsts = self._firsts
        prev = nodes[-1].master if nodes else None
        for st in states:
            b = Block.from_state(st)
            if b.master == prev:
                b.master = prev  # type: ignore[assignment]
            prev = b.master
            nodes.append(b)
            firsts.append(b.first)

    def copy(self) -> Stream:
        """A deep copy of the entries and counters (groups are copied by node.groups)."""
        return Stream.from_state(self.dump_state())
