"""Consumer groups: the group internals of Redis 7.4 t_stream.c, data only.

No RESP and no client here: the command modules (node.commands.groups / reads / xinfo) parse,
call these, reply and emit effects. Times are unix milliseconds passed in by the caller (the
command's cached time), so that the same command applied twice gives the same state.

Layout (stream.h streamCG / streamConsumer / streamNACK)
-------------------------------------------------------
- `ConsumerGroup.pel`: a SortedDict `id -> (delivery_time, delivery_count, consumer_name)`,
  the group's pending entries list (Redis's group PEL rax of streamNACK).
- `Consumer.pel`: a SortedList of the IDs this consumer owns (Redis's consumer PEL rax, whose
  values point at the same NACKs). Every ID in a consumer PEL is in the group PEL with that
  consumer's name, and the other way round.
- A NACK is an immutable tuple of ints and the consumer's name (shared with `Consumer.name`):
  no per-NACK object with references, so the garbage collector untracks them after one pass
  and millions of pending entries cost no collection time. An update replaces the tuple.
- An entry released by XNACK (Redis 8.8) is *unowned*: its NACK's owner is None (a consumer
  may be called "", so "" cannot mean nobody), its delivery time 0, and it is in no consumer
  PEL. `nacked_count()` counts them; `nacked_total` counts releases since the process started
  (a metric, not persisted).
- `ConsumerGroup.consumers` is a dict in creation order; Redis keeps consumers (and groups)
  in a rax, so every listing is in byte-wise lexicographic order: use `sorted_consumers()`
  (and `sorted_groups()` for a stream's groups).
- `entries_read` is None where Redis has SCG_INVALID_ENTRIES_READ (-1): the group's logical
  read counter is unknown.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress, islice, repeat
from operator import eq, gt, itemgetter
from typing import TYPE_CHECKING

import cython
from sortedcontainers import SortedDict, SortedList

from node.streamid import MAX_ID

if TYPE_CHECKING:
    from node.stream import Stream

__all__ = ["Consumer", "ConsumerGroup", "range_has_tombstones", "estimate_distance", "create_group", "lookup_group", "sorted_groups",
           "copy_groups", "dump_groups", "load_groups"]

# A NACK: (delivery_time ms, delivery_count, consumer name or None when unowned).
Nack = tuple[int, int, bytes | None]

LLONG_MAX = (1 << 63) - 1  # a delivery count never goes past it (XNACK FATAL sets it)


class Consumer:
    """streamConsumer: a name, its pending IDs, and when it was last seen / last active."""

    __slots__ = ("name", "seen_time", "active_time", "pel")

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        # seen_time: last attempted interaction (XREADGROUP, XCLAIM, XAUTOCLAIM), even if
        # nothing was delivered. active_time: last successful one (something was read into
        # the PEL or claimed), -1 until then. Both as in Redis 7.2+ (7.0 had only seen_time).
        self.seen_time = now_ms
        self.active_time = -1
        self.pel: SortedList = SortedList()

    def __repr__(self) -> str:
        return f"<Consumer {self.name!r} pending={len(self.pel)}>"


class ConsumerGroup:
    """streamCG: the last delivered ID, its logical read counter, the PEL and the consumers."""

    __slots__ = ("last_id", "entries_read", "pel", "consumers", "nacked_total")

    def __init__(self, last_id: int, entries_read: int | None) -> None:
        self.last_id = last_id
        self.entries_read = entries_read  # None = invalid (SCG_INVALID_ENTRIES_READ)
        self.pel: SortedDict = SortedDict()
        self.consumers: dict[bytes, Consumer] = {}
        self.nacked_total = 0  # entries released by XNACK, ever (xshard_stream_group_nacked_total)

    def __repr__(self) -> str:
        return (f"<ConsumerGroup last_id={self.last_id} entries_read={self.entries_read} "
                f"pending={len(self.pel)} consumers={len(self.consumers)}>")

    # -- consumers (streamCreateConsumer / streamLookupConsumer / streamDelConsumer) -------
    def create_consumer(self, name: bytes, now_ms: int) -> Consumer | None:
        """A new consumer, or None if one with that name exists."""
        if name in self.consumers:
            return None
        cons = self.consumers[name] = Consumer(name, now_ms)
        return cons

    def lookup_consumer(self, name: bytes) -> Consumer | None:
        return self.consumers.get(name)

    def delete_consumer(self, name: bytes) -> int | None:
        """Remove a consumer and its pending entries; returns how many it had (None: no such)."""
        cons = self.consumers.pop(name, None)
        if cons is None:
            return None
        pel = self.pel
        for sid in cons.pel:
            del pel[sid]
        return len(cons.pel)

    def sorted_consumers(self) -> list[Consumer]:
        """Consumers in Redis's rax order (byte-wise lexicographic by name)."""
        return [self.consumers[n] for n in sorted(self.consumers)]

    # -- PEL ---------------------------------------------------------------------------------
    def deliver(self, sid: int, cons: Consumer, now_ms: int) -> Nack:
        """A new delivery of `sid` to `cons` (streamReplyWithRange without NOACK).

        The entry may already be pending (XGROUP SETID moved the group back): it is then
        reassigned to this consumer with its delivery count reset to 1, as Redis does.
        """
        nack = (now_ms, 1, cons.name)
        maxes = self.pel._list.__dict__["_maxes"]
        if not maxes or sid > maxes[-1]:
            # Above everything pending (a `>` read's every entry): appended to the tails of
            # both PELs, not inserted through SortedDict and SortedList (~8k instructions).
            self._append_new([sid], cons, nack)
            return nack
        self._own(sid, cons)
        self.pel[sid] = nack
        return nack

    def _own(self, sid: int, cons: Consumer) -> None:
        """Make `cons` the owner of `sid` in the consumer PELs (the caller sets the NACK)."""
        old = self.pel.get(sid)
        if old is None or old[2] is None:
            cons.pel.add(sid)
        elif old[2] != cons.name:
            self.consumers[old[2]].pel.remove(sid)
            cons.pel.add(sid)

    def set_nack(self, sid: int, cons: Consumer, delivery_time: int, delivery_count: int) -> Nack:
        """Create or update the NACK of `sid`, owned by `cons` (XCLAIM / XAUTOCLAIM).

        An ID above everything pending (what a replica applies for every delivery: the XCLAIM
        effect creates its NACK) is appended to the tails of both PELs, as `deliver_run` does."""
        nack = (delivery_time, delivery_count, cons.name)
        pel = self.pel
        maxes = pel._list.__dict__["_maxes"]
        if maxes and sid <= maxes[-1]:
            self._own(sid, cons)
            pel[sid] = nack
        else:
            self._append_new([sid], cons, nack)
        return nack

    def release(self, sid: int, delivery_count: int) -> None:
        """XNACK: `sid` becomes unowned with delivery time 0 (so any CLAIM takes it at once),
        created if it was not pending."""
        old = self.pel.get(sid)
        if old is not None and old[2] is not None:
            self.consumers[old[2]].pel.remove(sid)
        self.pel[sid] = (0, delivery_count, None)
        self.nacked_total += 1

    def nacked_count(self) -> int:
        """Pending entries that no consumer owns (released by XNACK, not claimed since)."""
        return len(self.pel) - sum(len(c.pel) for c in self.consumers.values())

    def idle_pending(self, now_ms: int, min_idle: int, count: int) -> list[int]:
        """Up to `count` (0: all) pending IDs idle at least `min_idle` ms, the longest idle
        first (ties by ID): what XREADGROUP ... CLAIM takes.

        There is no index by delivery time, so this reads every NACK, but only in C (maps,
        compress, a sort of the nearly sorted times); Python touches only what it returns.
        Nothing idle enough costs one pass."""
        pel = self.pel
        if not pel:
            return []
        bound = now_ms - min_idle
        times = list(map(_first, dict.values(pel)))  # in the dict's order, like its keys
        if min(times) > bound:
            return []
        if count and count < len(times):
            st = sorted(times)
            bound = min(bound, st[count - 1])  # the count-th longest idle
            longer = bisect_left(st, bound)
        else:
            longer = -1  # unknown
        out: list[int] = []
        # Fewer than `count` entries are idle longer than the bound: order them fully. Of
        # those exactly at it (often a whole read's worth), the lowest IDs, in ID order.
        if longer:
            mask = list(map(gt, repeat(bound), times))
            out = [sid for _t, sid in sorted(zip(compress(times, mask),
                                                 compress(dict.keys(pel), mask), strict=True))]
        ties = compress(pel, map(eq, repeat(bound), map(_first, map(pel.__getitem__, pel))))
        out += islice(ties, count - len(out)) if count else ties
        return out

    def deliver_run(self, sids: list[int], cons: Consumer, now_ms: int) -> Nack:
        """`deliver` for ascending `sids` (one node of a `>` read); returns the (shared) NACK.

        The common case, every ID above everything pending, appends to the tail of both PELs
        in one step and shares one NACK tuple; anything else falls back to `deliver`.
        """
        pel = self.pel
        keys = pel._list
        maxes = keys.__dict__["_maxes"]
        if maxes and sids[0] <= maxes[-1]:
            nack = (now_ms, 1, cons.name)
            for sid in sids:
                nack = self.deliver(sid, cons, now_ms)
            return nack
        nack = (now_ms, 1, cons.name)
        self._append_new(sids, cons, nack)
        return nack

    def _append_new(self, sids: list[int], cons: Consumer, nack: Nack) -> None:
        """New NACKs for ascending `sids`, all above every pending ID, owned by `cons`: the
        tails of both PELs are extended in one step each."""
        pel = self.pel
        if cython.compiled:
            # PyDict_SetItem per ID: the sorted keys are extended just below.
            d = cython.cast(dict, pel)
            for sid in sids:
                d[sid] = nack
        else:
            dict.update(pel, zip(sids, repeat(nack)))
        _extend_tail(pel._list, sids)
        # The consumer PEL is a subset of the group PEL: the IDs are above it too.
        _extend_tail(cons.pel, sids)

    def add_pending(self, sids: list[int], nacks: list[Nack]) -> None:
        """Pending entries with their NACKs, `sids` ascending and above every pending ID (a
        slot move's copy, node/slotmove.py): appended to the tails of the group's PEL and of
        its consumers' PELs, no insertion one by one."""
        pel = self.pel
        dict.update(pel, zip(sids, nacks, strict=True))
        _extend_tail(pel._list, sids)
        by_owner: dict[bytes | None, list[int]] = {}
        for sid, nack in zip(sids, nacks, strict=True):
            by_owner.setdefault(nack[2], []).append(sid)
        by_owner.pop(None, None)  # unowned (XNACK): in no consumer PEL
        for owner, own in by_owner.items():
            _extend_tail(self.consumers[owner].pel, own)  # type: ignore[index]

    def redeliver(self, sid: int, now_ms: int) -> Nack:
        """A history read (XREADGROUP with an explicit ID) delivers a pending entry again."""
        t, n, name = self.pel[sid]
        nack = self.pel[sid] = (now_ms, min(n + 1, LLONG_MAX), name)  # FATAL's stays
        return nack

    def ack(self, sid: int) -> bool:
        """XACK of one ID: drop it from the group PEL and from its consumer's PEL."""
        nack = self.pel.pop(sid, None)
        if nack is None:
            return False
        if nack[2] is not None:
            self.consumers[nack[2]].pel.remove(sid)
        return True

    def ack_many(self, sids: list[int]) -> int:
        """XACK of many IDs (duplicates and non-pending ones allowed); returns how many were
        pending. Acknowledging the oldest pending IDs, the common case, trims the front of
        the PELs in one step instead of one sorted removal per ID per PEL."""
        pel = self.pel
        pop = dict.pop
        acked: list[int] = []
        names: list[bytes | None] = []
        for sid in sids:
            nack = pop(pel, sid, None)  # the sorted keys are fixed just below
            if nack is not None:
                acked.append(sid)
                names.append(nack[2])
        k = len(acked)
        if not k:
            return 0
        ordered = sorted(acked)
        _remove_members(pel._list, ordered)
        name = names[0]
        if name is not None and names.count(name) == k:
            _remove_members(self.consumers[name].pel, ordered)
        else:
            consumers = self.consumers
            for sid, owner in zip(acked, names, strict=True):
                if owner is not None:
                    consumers[owner].pel.remove(sid)
        return k

    def advance_run(self, s: Stream, sids: list[int]) -> bool:
        """`advance` for ascending `sids`: once the counter is exact it stays exact for the
        rest of the run (last_id only grows), so the rest is one addition."""
        moved = False
        for i, sid in enumerate(sids):
            if self.advance(s, sid):
                moved = True
                if (self.entries_read is not None and self.last_id >= s.first_id
                        and not range_has_tombstones(s, self.last_id, None)):
                    rest = len(sids) - i - 1
                    if rest and sids[-1] > self.last_id:
                        self.entries_read += rest
                        self.last_id = sids[-1]
                    return True
        return moved

    # -- logical read counter and lag ------------------------------------------------------
    def advance(self, s: Stream, sid: int) -> bool:
        """The group read `sid`: move last_id and entries_read as streamReplyWithRange does.

        The counter is incremented only while it is known to be exact: valid, the group's
        last ID not before the stream's first entry, and no tombstone after the last ID.
        Otherwise it is estimated for `sid` (and may become unknown). Returns True if the
        cursor moved (sid > last_id).
        """
        if sid <= self.last_id:
            return False
        if (self.entries_read is not None and self.last_id >= s.first_id
                and not range_has_tombstones(s, self.last_id, None)):
            self.entries_read += 1
        elif s.entries_added:
            self.entries_read = estimate_distance(s, sid)
        self.last_id = sid
        return True

    def lag(self, s: Stream) -> int | None:
        """streamReplyWithCGLag: entries not yet delivered, None when it cannot be known.

        As the newest Redis has it (8.10): an emptied stream has nothing left to deliver (0),
        and a group whose last-delivered ID is before the first entry has every entry ahead
        of it (the stream's length), whatever its counter says. Valkey 8.1 computes both from
        the counter (docs/compatibility.md).
        """
        if not s.entries_added or not s.length:
            return 0  # a never-used or emptied stream
        if self.last_id < s.first_id:
            return s.length
        if self.entries_read is not None and not range_has_tombstones(s, self.last_id, None):
            return s.entries_added - self.entries_read
        er = estimate_distance(s, self.last_id)
        if er is None:
            return None
        return s.entries_added - er

    # -- persistence -------------------------------------------------------------------------
    def dump_state(self) -> tuple:
        """Plain values that `from_state` restores: (last_id, entries_read, consumers, pel)."""
        consumers = [(c.name, c.seen_time, c.active_time) for c in self.consumers.values()]
        return (self.last_id, self.entries_read, consumers, list(self.pel.items()))

    @classmethod
    def from_state(cls, st: tuple) -> ConsumerGroup:
        last_id, entries_read, consumers, pel = st
        g = cls(last_id, entries_read)
        for name, seen, active in consumers:
            cons = g.consumers[name] = Consumer(name, seen)
            cons.active_time = active
        g.pel.update((sid, (t, n, None if owner is None else g.consumers[owner].name))
                     for sid, (t, n, owner) in pel)
        by_owner: dict[bytes | None, list[int]] = {}
        for sid, (_t, _n, owner) in pel:
            by_owner.setdefault(owner, []).append(sid)
        by_owner.pop(None, None)  # unowned (XNACK)
        for owner, sids in by_owner.items():
            g.consumers[owner].pel.update(sids)  # type: ignore[index]
        return g

    def copy(self) -> ConsumerGroup:
        return ConsumerGroup.from_state(self.dump_state())


_first = itemgetter(0)


# -- SortedList fast paths ---------------------------------------------------------------------
# These use sortedcontainers 2.4's documented-by-source internals (_lists, _maxes, _index, _len,
# _load): a list of sorted sublists, their maxima, and a positional index rebuilt lazily when
# cleared. Keeping those invariants is all SortedList needs. They are read from the instance
# dict: an attribute lookup by name on a SortedList walks its ABC bases (9 classes) whenever the
# type cache misses, which cost a `>` read and its XACK about 12k instructions.
def _extend_tail(sl: SortedList, sids: list[int]) -> None:
    """Add ascending `sids`, all above every member, to the last sublist (split if long)."""
    d = sl.__dict__
    lists = d["_lists"]
    maxes = d["_maxes"]
    if lists:
        last = lists[-1]
        last.extend(sids)
        maxes[-1] = sids[-1]
    else:
        last = list(sids)
        lists.append(last)
        maxes.append(sids[-1])
    d["_len"] += len(sids)
    index = d["_index"]
    if index:
        del index[:]
    load = d["_load"]
    n = len(last)
    if n > load << 1:  # split into sublists of load..2*load entries
        lists.pop()
        maxes.pop()
        i = 0
        while n - i > load << 1:
            lists.append(last[i:i + load])
            i += load
            maxes.append(last[i - 1])
        lists.append(last[i:])
        maxes.append(last[-1])


def _remove_members(sl: SortedList, ordered: list[int]) -> None:
    """Remove distinct members `ordered` (ascending): one slice deletion when they are the
    smallest ones, else one `remove` each."""
    d = sl.__dict__
    lists = d["_lists"]
    first = lists[0]
    k = len(ordered)
    # k distinct members all <= first[k-1] can only be first[:k].
    if k <= len(first) and first[k - 1] == ordered[-1]:
        del first[:k]
        d["_len"] -= k
        index = d["_index"]
        if index:
            del index[:]
        maxes = d["_maxes"]
        if not first:
            del lists[0]
            del maxes[0]
        elif len(first) < d["_load"] >> 1 and len(lists) > 1:
            # Merge a short first sublist into the next one, as SortedList._delete does.
            first.extend(lists[1])
            maxes[0] = maxes[1]
            del lists[1]
            del maxes[1]
            sl._expand(0)
        return
    for sid in ordered:
        sl.remove(sid)


# -- logical read counters (t_stream.c) --------------------------------------------------------
# These follow Redis 8.0's corrected rules (valkey 8.1 has them too, and the tests fuzz
# entries-read/lag against it after random XADD/XDEL/XTRIM/XSETID/XGROUP SETID/XREADGROUP).
# Redis 7.0 to 7.4.1 differ: there a tombstone before the first entry is ignored, and an ID
# before the last tombstone still gets an estimate, which can make the lag wrong, even
# negative. The difference is listed in docs/compatibility.md.
def range_has_tombstones(s: Stream, start: int | None, end: int | None) -> bool:
    """streamRangeHasTombstones: could an XDEL'd entry lie in [start, end]?"""
    mdel = s.max_deleted_entry_id
    if not s.length or not mdel:
        return False
    lo = 0 if start is None else start
    hi = MAX_ID if end is None else end
    return lo <= mdel <= hi


def estimate_distance(s: Stream, sid: int) -> int | None:
    """streamEstimateDistanceFromFirstEverEntry: the entries-read counter of `sid`, or None.

    Known exactly for the last ID (entries_added) and for the first entry or any ID before it
    when nothing was deleted after it; unknown when an entry after `sid` was deleted, or for
    an ID between the first and last entries, or in the future.
    """
    added = s.entries_added
    if not added:
        return 0  # a never-used stream: every counter is 0
    last = s.last_id
    if not s.length and sid <= last:
        return added
    if sid and sid < s.max_deleted_entry_id:
        return None  # fragmentation between sid and the last ID
    if sid == last:
        return added
    if sid > last:
        return None  # a future ID
    mdel = s.max_deleted_entry_id
    first = s.first_id
    if not mdel or mdel < first:
        if sid < first:
            return added - s.length
        if sid == first:
            return added - s.length + 1
    return None


def clamp_entries_read(s: Stream, entries_read: int | None) -> int | None:
    """XGROUP CREATE/SETID's ENTRIESREAD as the newest Redis stores it (8.10): a counter past
    the stream's entries-added is cut to entries-added, so the lag never goes below zero.
    The invalid counter (None) stays invalid. Valkey 8.1 stores the value as given."""
    if entries_read is None or entries_read <= s.entries_added:
        return entries_read
    return s.entries_added


# -- a stream's groups (streamCreateCG / streamLookupCG) -------------------------------------
def create_group(s: Stream, name: bytes, last_id: int, entries_read: int | None
                 ) -> ConsumerGroup | None:
    """A new group in `s`, or None if a group with that name exists."""
    if name in s.groups:
        return None
    g = s.groups[name] = ConsumerGroup(last_id, entries_read)
    return g


def lookup_group(s: Stream, name: bytes) -> ConsumerGroup | None:
    return s.groups.get(name)


def sorted_groups(s: Stream) -> list[tuple[bytes, ConsumerGroup]]:
    """A stream's groups in Redis's rax order (byte-wise lexicographic by name)."""
    return sorted(s.groups.items())


def copy_groups(src: Stream, dst: Stream) -> None:
    """Deep-copy the groups of `src` into `dst` (Stream.copy copies entries only)."""
    dst.groups = {name: g.copy() for name, g in src.groups.items()}


def dump_groups(s: Stream) -> list[tuple[bytes, tuple]]:
    """Plain values for a snapshot; `load_groups` restores them."""
    return [(name, g.dump_state()) for name, g in s.groups.items()]


def load_groups(s: Stream, state: list[tuple[bytes, tuple]]) -> None:
    s.groups = {name: ConsumerGroup.from_state(st) for name, st in state}
