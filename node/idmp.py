"""Idempotent XADD (Redis 8.6 `IDMP` / `IDMPAUTO`): the producer/iid pairs a stream has seen.

A producer (any byte string the client picks, e.g. "query-7:partition-3") tags each XADD with
an idempotent ID (iid). The first XADD with a given (producer, iid) adds its entry and the pair
is remembered with the entry's ID; a later XADD with the same pair adds nothing and answers
that ID. So a client can retry a write whose reply it lost, or replay a whole batch, without
duplicating entries.

A pair is forgotten when it is `duration` seconds old, or when its producer has more than
`maxsize` pairs (the oldest goes first). Both limits are per stream (XCFGSET); a stream that
never set them shows the configs `stream-idmp-duration` / `stream-idmp-maxsize`.

Time is the stream's own clock: a pair is stamped with the millisecond part of the ID its entry
got, and "now" for expiry is the millisecond part of the ID the current XADD would get. IDs only
grow within a stream, and an effect carries the final ID, so a replica or an AOF replay reaches
exactly the same map as the primary without reading its own clock. The map is only changed by an
XADD that adds an entry (and by XCFGSET), i.e. only by commands that produce effects.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

DEFAULT_DURATION = 100  # seconds a pair is remembered (Redis 8.6's default)
DEFAULT_MAXSIZE = 100  # pairs remembered per producer (Redis 8.6's default)
MAX_DURATION = 86400
MAX_MAXSIZE = 10000


def auto_iid(fields: list[bytes]) -> bytes:
    """IDMPAUTO's iid: a 128-bit digest of the field/value pairs, each length-prefixed so that
    ("ab", "c") and ("a", "bc") differ. Effects carry the digest, so replicas never recompute it."""
    h = hashlib.blake2b(digest_size=16)
    for f in fields:
        h.update(len(f).to_bytes(4, "little"))
        h.update(f)
    return h.digest()


class IdmpMap:
    """What one stream remembers. `producers[pid]` maps iid -> (entry ID, stamp in ms) in
    insertion order (for `maxsize` eviction); `order` holds every (pid, iid) in insertion order
    across producers, whose stamps only grow, so expiry pops from its front."""

    __slots__ = ("duration", "maxsize", "producers", "order", "added", "duplicates")

    def __init__(self, duration: int = DEFAULT_DURATION, maxsize: int = DEFAULT_MAXSIZE) -> None:
        self.duration = duration  # seconds
        self.maxsize = maxsize  # per producer
        self.producers: dict[bytes, OrderedDict[bytes, tuple[int, int]]] = {}
        self.order: OrderedDict[tuple[bytes, bytes], int] = OrderedDict()
        self.added = 0  # iids-added: pairs ever recorded
        self.duplicates = 0  # iids-duplicates: XADDs answered from the map

    @property
    def iids_tracked(self) -> int:
        return len(self.order)

    def lookup(self, pid: bytes, iid: bytes, now_ms: int) -> int | None:
        """The entry ID recorded for (pid, iid), unless the pair has expired at `now_ms`."""
        p = self.producers.get(pid)
        if p is None:
            return None
        e = p.get(iid)
        if e is None or e[1] + self.duration * 1000 <= now_ms:
            return None
        return e[0]

    def record(self, pid: bytes, iid: bytes, sid: int, now_ms: int) -> None:
        """Remember (pid, iid) -> sid, stamped now_ms; expire and evict what that makes old."""
        self.expire(now_ms)
        p = self.producers.get(pid)
        if p is None:
            p = self.producers[pid] = OrderedDict()
        elif iid in p:  # only an expired pair can still be here: expire() left none
            del p[iid]
            del self.order[(pid, iid)]
        p[iid] = (sid, now_ms)
        self.order[(pid, iid)] = now_ms
        self.added += 1
        self._evict(pid, p)

    def expire(self, now_ms: int) -> None:
        """Forget every pair stamped `duration` seconds or more before now_ms."""
        horizon = now_ms - self.duration * 1000
        order = self.order
        while order:
            key, stamp = next(iter(order.items()))
            if stamp > horizon:
                break
            order.popitem(last=False)
            pid, iid = key
            p = self.producers[pid]
            del p[iid]
            if not p:
                del self.producers[pid]

    def _evict(self, pid: bytes, p: OrderedDict[bytes, tuple[int, int]]) -> None:
        while len(p) > self.maxsize:
            iid, _ = p.popitem(last=False)
            del self.order[(pid, iid)]
        if not p:
            del self.producers[pid]

    def configure(self, duration: int | None, maxsize: int | None) -> bool:
        """XCFGSET: new limits (None keeps one). A value that changes clears every producer's
        history (pids-tracked and iids-tracked become 0; the lifetime counters iids-added and
        iids-duplicates stay), as Redis 8.6 does; the same value clears nothing. Returns
        whether anything changed."""
        changed = False
        if duration is not None and duration != self.duration:
            self.duration = duration
            changed = True
        if maxsize is not None and maxsize != self.maxsize:
            self.maxsize = maxsize
            changed = True
        if changed:
            self.producers.clear()
            self.order.clear()
        return changed

    # -- persistence (node/snapshot.py) ------------------------------------------------------
    def dump_state(self) -> tuple:
        """Plain values for `from_state`: limits, counters and the pairs in insertion order."""
        pairs = [(pid, iid, self.producers[pid][iid][0], stamp)
                 for (pid, iid), stamp in self.order.items()]
        return (self.duration, self.maxsize, self.added, self.duplicates, pairs)

    @classmethod
    def from_state(cls, st: tuple) -> IdmpMap:
        duration, maxsize, added, duplicates, pairs = st
        m = cls(duration, maxsize)
        m.added, m.duplicates = added, duplicates
        for pid, iid, sid, stamp in pairs:
            p = m.producers.get(pid)
            if p is None:
                p = m.producers[pid] = OrderedDict()
            p[iid] = (sid, stamp)
            m.order[(pid, iid)] = stamp
        return m
