"""The stream data structure: Redis's radix tree of listpacks, re-thought for Python.

Data only: no RESP, no client, no config lookups. Errors are typed exceptions (`IDTooSmall`,
`ElementsTooLarge`) and the command layer chooses the reply text, as t_stream.c does with
EDOM/ERANGE.

IDs are ints `ms << 64 | seq` everywhere, so comparing two IDs is one int comparison. The
stream's own last ID is kept as its two parts (`last_ms`, `last_seq`; `last_id` is the int), so
that XADD can make, check and reply with an ID without 128-bit int arithmetic (compiled, they
are C uint64 fields and `append_id` takes the parts as C ints).

Layout
------
A stream is a sorted list of *nodes*, exactly the nodes Redis would have for the same commands
and the same `stream-node-max-entries` / `stream-node-max-bytes`, so that `~` trims and
XINFO STREAM `radix-tree-keys` agree with Redis. To decide where a node ends we keep the exact
byte size that Redis's listpack for that node would have (`lp_rest` + the two counters).

The two node types live in node/streamnodes.py:
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

- `next_auto_id(now_ms)` / `next_seq_id(ms)`: IDs for `*` and `ms-*`, following the
  partition rule below once `bind_key` has been called; `next_id_parts(now_ms)` is the
  `*` ID as (ms, seq) (XADD's fast path).
- `bind_key(key)`: derive `stride` / `residue` from the key's name (see "Partition keys").
- `append(sid, fields, max_entries, max_bytes)`: `fields` is the flat list
  `[f1, v1, f2, v2, ...]`; it is kept by reference, so pass a list nobody mutates later.
  `append_id(ms, seq, fields, ...)` is the same with the ID as its parts (XADD's fast path).
  `append_many(sids, field_lists, ...)` appends a run of them in one call (effects replay).
- `range(start, end, count=None, rev=False)`: iterator of `(sid, fields)` of live entries with
  `start <= sid <= end`; `range_chunks` yields the same per node as `(sids, field_lists)`,
  or `(sids, encode(node, i0, i1, rev))` when given an encoder (node/streamnodes.py
  _live_slice); `range_counted` the same as `(number of entries, encoding)`.
  The yielded lists may be shared with the stream: never mutate them, and do not modify the
  stream while iterating.
- `get(sid)`, `delete(sid)`, `trim(strategy, threshold, approx, limit)`.
- `first_entry()`, `last_entry()`, `edge_id(first, skip_tombstones)`, `last_valid_id()`.
- `num_blocks()` (radix-tree-keys), `memory_usage()`, `blocks()`, `dump_state()`,
  `Stream.from_state()`, `copy()`.

Partition keys
--------------
A partitioned stream (docs/partitioned-streams.md) is spread over stream keys named
`{TAG}NAME#p/S`: partition p of stride S. In such a key every sequence number the node
generates is p modulo S, so that an ID names its partition (p = seq mod S) with no lookup, and
an explicit ID must satisfy the same rule. The key's name is the whole state: `stride` and
`residue` are derived from it (`bind_key`, by XADD, once per stream object) and never stored,
so DUMP/RESTORE, MIGRATE, slot moves, replication and the AOF need nothing new, and a RENAME
(which resets `stride`) makes the stream follow its new name. Replicas and AOF replay apply
the primary's explicit IDs, so they never generate one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from itertools import chain
from typing import Any

import cython

from node.listpack import _isz, _s64, _sum_esz
from node.streamid import MAX_ID, SEQ_MAX
from node.streamnodes import Block, Node, Tail, _live_slice

__all__ = ["Stream", "IDTooSmall", "ElementsTooLarge", "LP_MAX_SIZE", "MAX_STRIDE",
           "partition_of_key", "seq_above"]

LP_MAX_SIZE = 1 << 30  # STREAM_LISTPACK_MAX_SIZE
_LP_MAX = LP_MAX_SIZE  # the same, a C constant compiled
_U64_MAX = SEQ_MAX  # a C constant compiled

MAX_STRIDE = 1024  # the largest stride (and so partition count) a partition key may name

if cython.compiled:
    from cython.cimports.cpython.long import PyLong_AsUnsignedLongLongMask


def _make_id(ms: int, seq: int) -> int:
    """The int of the ID ms-seq. Compiled, the int is written from the two C parts by
    xshard_make_id (node/streamnodes.pxd): no shift and no `|` of Python ints."""
    if cython.compiled:
        return xshard_make_id(ms, seq)  # noqa: F821
    return cython.cast(object, ms) << 64 | seq


def _decimal(b: bytes) -> int:
    """A plain decimal without a leading zero ("0" itself is one), else -1."""
    if not b.isdigit() or (b[0] == 48 and len(b) > 1) or len(b) > 4:
        return -1
    return int(b)


def partition_of_key(key: bytes) -> tuple[int, int] | None:
    """(p, S) when `key` is exactly a partition key `{TAG}NAME#p/S`, else None.

    TAG is 1-4 characters of [0-9a-z]; NAME is one or more bytes (any bytes, `#` included:
    the last `#` starts the suffix); p and S are decimal without leading zeros, with
    2 <= S <= MAX_STRIDE and 0 <= p < S. Anything else, however similar, is a plain key."""
    if key[:1] != b"{":
        return None
    close = key.find(b"}", 1)
    if not 2 <= close <= 5:
        return None
    for ch in key[1:close]:
        if not (48 <= ch <= 57 or 97 <= ch <= 122):  # 0-9 a-z
            return None
    hsh = key.rfind(b"#")
    if hsh < close + 2:  # NAME is at least one byte
        return None
    pb, slash, sb = key[hsh + 1:].partition(b"/")
    if not slash:
        return None
    p = _decimal(pb)
    stride = _decimal(sb)
    if p < 0 or not 2 <= stride <= MAX_STRIDE or p >= stride:
        return None
    return p, stride


def seq_above(last: int, stride: int, residue: int) -> int:
    """The least sequence number above `last` that is `residue` modulo `stride`, or 0 when
    there is none below 2**64 (0 is never above anything, so it cannot be an answer)."""
    gap = (residue + stride - last % stride) % stride
    if gap == 0:
        gap = stride
    if gap > _U64_MAX - last:
        return 0
    return last + gap


class IDTooSmall(Exception):
    """EDOM: the ID is not greater than the stream's last ID (or `ms-*` has no sequence left)."""


class ElementsTooLarge(Exception):
    """ERANGE: the fields and values add up to more than a listpack can hold."""


# --- the stream -------------------------------------------------------------------------------
class Stream:
    """A Redis stream. See the module docstring for the API and the node layout."""

    __slots__ = ("length", "last_ms", "last_seq", "first_id", "max_deleted_entry_id", "entries_added",
                 "groups", "idmp", "stride", "residue", "_firsts", "_nodes", "_tail",
                 "__weakref__")

    def __init__(self) -> None:
        self.length = 0  # live entries
        self.last_ms = 0  # the greatest ID ever added (or set by XSETID): its ms
        self.last_seq = 0  # and its sequence
        self.first_id = 0  # first live entry, 0 when empty
        self.max_deleted_entry_id = 0  # greatest ID deleted by XDEL (or XSETID MAXDELETEDID)
        self.entries_added = 0  # all entries ever added (or XSETID ENTRIESADDED)
        self.groups: dict[bytes, Any] = {}  # consumer groups, owned by node.groups
        self.idmp: Any = None  # node.idmp.IdmpMap once IDMP/IDMPAUTO or XCFGSET was used
        # The partition rule of the key's name (bind_key): -1 not derived yet, 0 a plain
        # stream, else S of `{TAG}NAME#p/S`; generated sequence numbers are residue mod S.
        self.stride = -1
        self.residue = 0  # p; 0 for a plain stream
        self._firsts: list[int] = []  # first ID of each node, ascending
        self._nodes: list[Node] = []  # the nodes; only the last may be a Tail
        self._tail: Tail | None = None  # the last node when it is open

    def __repr__(self) -> str:
        return f"<Stream length={self.length} nodes={len(self._nodes)}>"

    # -- IDs ------------------------------------------------------------------------------
    @property
    def last_id(self) -> int:
        """The greatest ID ever added (or set by XSETID), as an int."""
        return _make_id(self.last_ms, self.last_seq)

    @last_id.setter
    def last_id(self, sid: int) -> None:
        if not 0 <= sid <= MAX_ID:
            raise ValueError("stream ID out of range")
        self.last_ms = sid >> 64
        self.last_seq = sid & SEQ_MAX

    def bind_key(self, key: bytes) -> int:
        """Derive the partition rule from the name of the key that holds this stream (XADD
        calls it when `stride` is -1: a new stream object, or one just renamed); returns the
        stride, 0 for a plain stream."""
        ps = partition_of_key(key)
        if ps is None:
            self.stride = 0
            self.residue = 0
        else:
            self.residue, self.stride = ps
        return self.stride

    def next_auto_id(self, now_ms: int) -> int:
        """streamNextID: the ID for `*`, 0 when none is left (see next_id_parts)."""
        ms, seq = self.next_id_parts(now_ms)
        return _make_id(ms, seq)

    def next_id_parts(self, now_ms: int) -> tuple[int, int]:
        """The ID for `*` as its parts (XADD's fast path makes no int of it), by the key's
        partition rule (the caller binds the key first): seq = residue mod stride in a
        partition key. (0, 0) when no ID is left; the caller checks exhaustion
        (last_id == MAX_ID) first, as Redis does."""
        if now_ms > self.last_ms:
            return now_ms, self.residue
        if self.stride > 0:
            seq = seq_above(self.last_seq, self.stride, self.residue)
            if seq:
                return self.last_ms, seq
        elif self.last_seq != _U64_MAX:
            return self.last_ms, self.last_seq + 1
        if self.last_ms != _U64_MAX:
            return self.last_ms + 1, self.residue
        return 0, 0

    def next_seq_id(self, ms: int) -> int:
        """The ID for `ms-*`: the next sequence in the last ID's millisecond, else ms-0.

        Raises IDTooSmall when that millisecond has no sequence left. (Redis 7.0 replied with
        the ERANGE text there by accident; 7.2+ sets EDOM, which we follow.)
        """
        if self.last_ms == ms:
            if self.stride > 0:
                seq = seq_above(self.last_seq, self.stride, self.residue)
                if not seq:
                    raise IDTooSmall
                return _make_id(ms, seq)
            if self.last_seq == _U64_MAX:
                raise IDTooSmall
            return _make_id(ms, self.last_seq + 1)
        return _make_id(ms, self.residue)

    # -- append ---------------------------------------------------------------------------
    def append(self, sid: int, fields: list[bytes], max_entries: int, max_bytes: int) -> None:
        """streamAppendItem with a known ID (0 <= sid <= MAX_ID); the node split follows Redis
        byte for byte."""
        if cython.compiled:
            self._append(sid >> 64, PyLong_AsUnsignedLongLongMask(sid), sid, fields,
                         max_entries, max_bytes)
        else:
            self._append(sid >> 64, sid & SEQ_MAX, sid, fields, max_entries, max_bytes)

    def append_id(self, ms: int, seq: int, fields: list[bytes], max_entries: int,
                  max_bytes: int) -> None:
        """`append` of the ID ms-seq."""
        self._append(ms, seq, None, fields, max_entries, max_bytes)

    def _append(self, ms: int, seq: int, sid: int | None, fields: list[bytes],
                max_entries: int, max_bytes: int) -> None:
        """This is XADD's hot path: the open tail takes the entry with a few list appends plus
        the exact listpack size of the entry, which decides where Redis would split nodes.
        `sid` is the int of ms-seq, or None to make it here."""
        if ms < self.last_ms or (ms == self.last_ms and seq <= self.last_seq):
            raise IDTooSmall
        nf2 = len(fields)
        tot = 0
        for j in range(nf2):
            x = fields[j]  # bytes (typed compiled: anything else is a TypeError, like join)
            tot += len(x)
        if tot > LP_MAX_SIZE:  # a module global, so that a test can lower it
            raise ElementsTooLarge
        if sid is None:
            sid = _make_id(ms, seq)
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
                    or t.lp_rest + _isz(live) + _isz(ndel) + tot
                    >= (max_bytes if 0 < max_bytes <= _LP_MAX else _LP_MAX)):
                self._seal()
                t = None
        if t is None:
            t = self._tail = Tail.new(sid, fields)
            self._nodes.append(t)
            self._firsts.append(sid)
        else:
            # flags (2 bytes) + ms delta + seq delta (int64 as Redis stores them: compiled, the
            # uint64 differences cast) + values or fields + lp-count
            ms0 = t.ms0
            seq0 = t.seq0
            msd = ms - ms0  # >= 0: the node's first ID is below this one
            if cython.compiled:
                size = (2 + _isz(cython.cast(cython.longlong, msd))
                        + _isz(cython.cast(cython.longlong, seq - seq0)))
            else:
                size = 2 + _isz(_s64(msd)) + _isz(_s64(seq - seq0))
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
        self.last_ms = ms
        self.last_seq = seq
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

    def range_chunks(self, start: int, end: int, count: int | None = None, rev: bool = False,
                     encode: Any = None) -> Iterator[tuple[list[int], Any]]:
        """Like range, one node at a time: (IDs, field lists), for encoders that work in bulk.
        With `encode`, each node's part comes already encoded: (IDs, encode(node, i0, i1,
        rev)), the live entries of i0..i1-1 in direction order, no field lists built
        (node/streamnodes.py _live_slice)."""
        return self._chunks(start, end, count, rev, encode, True)

    def range_counted(self, start: int, end: int, count: int | None, rev: bool, encode: Any
                      ) -> Iterator[tuple[int, Any]]:
        """range_chunks with an encoder, each node's part as (number of entries, encoding):
        for the replies that only count the entries (XRANGE, XREVRANGE, XREAD), whose IDs
        are then never made as ints."""
        return self._chunks(start, end, count, rev, encode, False)

    def _chunks(self, start: int, end: int, count: int | None, rev: bool, encode: Any,
                ids: bool) -> Iterator[tuple[Any, Any]]:
        if start > end or not self._nodes or (count is not None and count <= 0):
            return iter(())
        return self._range(start, end, count, encode, ids, rev)

    def _range(self, start: int, end: int, left: int | None, encode: Any, ids: bool, rev: bool
               ) -> Iterator[tuple[Any, Any]]:
        """The nodes' live parts between start and end, first to last (last to first with
        `rev`), until `left` entries are given."""
        nodes = self._nodes
        if rev:
            bi = bisect_right(self._firsts, end) - 1
        else:
            bi = bisect_right(self._firsts, start) - 1
            if bi < 0:
                bi = 0
        while 0 <= bi < len(nodes):
            blk = nodes[bi]
            if not rev and blk.first > end:
                return
            if blk.live:
                i0 = blk.lower(start) if start > blk.first else 0
                # Every entry of a node is below the next node's first ID.
                i1 = blk.n if bi + 1 < len(nodes) and nodes[bi + 1].first <= end else blk.upper(end)
                if i0 < i1:
                    got, ents = _live_slice(blk, i0, i1, rev, left, encode, ids)
                    m = len(got) if ids else got
                    if m:
                        yield got, ents
                        if left is not None:
                            left -= m
                            if left <= 0:
                                return
            if rev:
                if blk.first <= start:
                    return
                bi -= 1
            else:
                bi += 1

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
