"""A consumer group's blocked `XREADGROUP ... BLOCK ... STREAMS name >` on a partitioned
stream, served by one watch per partition.

Blocking a consumer on every partition (an XREADGROUP BLOCK on each, the first answer winning)
made each delivery end the consumer's other blocked reads with CLIENT UNBLOCK, and those that
delivered meanwhile had their entries handed over and read again: at a steady rate most of the
work of a delivery. Here nothing is delivered until it can be returned:

- `Watch`: per partition and router, one `XREAD BLOCK ... COUNT 1 STREAMS key <seen>` on a
  connection of its own, shared by every group and consumer. It delivers nothing to any group;
  it answers when the partition gets an entry after `seen` (the last one it saw, first pinned
  by `XREVRANGE key + - COUNT 1`, so nothing added between two of its reads is missed).
- `Wait`: a blocked consumer. When a watch answers, one waiting consumer of each group is
  *kicked*: a read without BLOCK of that one partition, for what its COUNT allows. Entries
  are the consumer's reply (a read of one partition, so nothing is left over to hand over);
  nothing (another consumer, here or at another router, took them) and it waits again.
- `PStream.unread[group]`: partitions that may hold entries the group was not given because
  no consumer of it was waiting when their watch answered, or whose watch was (re)started or
  timed out. A consumer that starts waiting is kicked on those first; when a group has none,
  a consumer whose last read came back short waits at once, with no read of every partition.

A watch blocks for `WATCH_MS` at most, and then counts its partition unread for every group:
what no watch sees (another router's XGROUP SETID back, an XNACK) is found within that time.
A watch that loses its connection or its slot starts again at the slot's primary and counts
its partition unread too. Every group delivery is still one partition's own XREADGROUP, so
each entry is delivered once per group and each partition's order is kept.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from node.resp import encode_command, error_code, null_array
from node.streamid import format_id
from router.fanout import BlockedParts
from router.forward import RETRY_DELAY
from router.pstreams import (
    PStream,
    _entries,
    _entry_id,
    _read_entries,
    _read_reply,
    _renamed,
    _send,
)

if TYPE_CHECKING:
    from router.proxy import Router
    from router.pstreamreads import Read
    from router.upstream import Pool, Upstream

__all__ = ["Wait", "Watch", "WATCH_MS", "tracked"]

WATCH_MS = 1000  # a watch's BLOCK: the longest an entry no watch saw stays unread


def tracked(ps: PStream, group: bytes) -> bool:
    """Whether the group's unread partitions are known here (else every one may be)."""
    return group in ps.unread


class Watch:
    """One partition's watch (see the module docstring)."""

    __slots__ = ("router", "ps", "p", "seen", "up", "pool", "state", "gen", "kicks", "upto")

    def __init__(self, router: Router, ps: PStream, p: int) -> None:
        self.router, self.ps, self.p = router, ps, p
        self.seen = 0  # the last entry ID it saw (as an int: node/streamid.py)
        self.up: Upstream | None = None
        self.pool: Pool | None = None  # where `up` goes
        self.state = "idle"  # idle, pinning, armed, kicking, retrying
        self.gen = 0  # bumped when it starts again: what an older read answers is ignored
        self.kicks = 0  # reads of the partition made for waiting consumers, unanswered
        self.upto = 0  # the last entry every one of those reads has got so far

    def _conn(self) -> Upstream | None:
        """Its connection, to the partition's primary now (a failover or a slot move since
        the last read: to the new one)."""
        pool = self.router.primary_pool(self.ps.slots[self.p], 2)
        up = self.up
        if up is not None and not up.closed and pool is self.pool:
            return up
        self._close()
        self.pool = pool
        if pool is None:
            return None
        self.up = up = pool.get_dedicated()
        return up

    def _pin(self) -> None:
        up = self._conn()
        if up is None:
            return self._retry()
        self.state = "pinning"
        key = self.ps.keys[self.p]
        up.send(encode_command([b"XREVRANGE", key, b"+", b"-", b"COUNT", b"1"]),
                partial(self._answered, self.gen, True))
        return None

    def _arm(self) -> None:
        if not waiting(self.ps):  # nobody waits: the next consumer that waits starts it
            self.state = "idle"
            if self.router.pstreams.get(self.ps.name) is not self.ps:
                self._close()  # the stream was altered or deleted: this watch is done
            return None
        up = self._conn()
        if up is None:
            return self._retry()
        self.state = "armed"
        up.send(encode_command([b"XREAD", b"COUNT", b"1", b"BLOCK", b"%d" % WATCH_MS,
                                b"STREAMS", self.ps.keys[self.p], format_id(self.seen)]),
                partial(self._answered, self.gen, False))
        return None

    def _answered(self, gen: int, pin: bool, r: bytes | None) -> None:
        """The pin (XREVRANGE: the last entry, from which the watch starts; entries up to it
        came before the watch, so any group may have some unread) or the watch (an entry
        came, or its time ran out) answered: either way the partition is read."""
        if gen != self.gen:
            return None
        if r is None or error_code(r) is not None:
            return self._lost()
        es = _entries(r) if pin else _read_entries(r)
        if pin:
            self.seen = _entry_id(es[0]) if es else 0
        elif es:
            self.seen = max(self.seen, _entry_id(es[-1]))
        return self.wake()

    def wake(self) -> None:
        """The partition may hold entries some group was not given: one waiting consumer of
        each group that has an idle one reads it now, every other group counts it unread.
        The watch is armed again once those reads are answered, after the last entry all of
        them got (what they took needs no wake-up), or at once when none was made."""
        ps, p = self.ps, self.p
        self.state = "kicking"
        self.kicks = 0
        self.upto = -1
        for group, parts in ps.unread.items():
            w = idle_waiter(ps, group)
            if w is None:
                parts.add(p)
            else:
                parts.discard(p)
                self.kicks += 1
                w.read_partition(p, partial(self.kicked, self.gen))
        if not self.kicks:
            return self._arm()
        return None

    def kicked(self, gen: int, last: int) -> None:
        """A read made by `wake` got entries up to `last` (0: none, or it failed)."""
        if gen != self.gen or self.state != "kicking":
            return None
        self.kicks -= 1
        got = max(last, self.seen)
        self.upto = got if self.upto < 0 else min(self.upto, got)
        if self.kicks:
            return None
        self.seen = max(self.seen, self.upto)
        return self._arm()

    def _lost(self) -> None:
        """The connection went, or the node refused the read (its slot moved, no primary):
        start again at the slot's primary shortly, and count the partition unread."""
        self._close()
        for parts in self.ps.unread.values():
            parts.add(self.p)
        return self._retry()

    def _close(self) -> None:
        self.gen += 1  # what its connection answers (None, as it closes) is ignored
        up, self.up = self.up, None
        if up is not None:
            up.close()

    def _retry(self) -> None:
        self.state = "retrying"
        self.router.loop.call_later(RETRY_DELAY, self._again)

    def _again(self) -> None:
        if self.state != "retrying":
            return None
        if not waiting(self.ps):
            self.state = "idle"
            return None
        return self._pin()


def waiting(ps: PStream) -> bool:
    return any(ws for ws in ps.waiters.values())


def idle_waiter(ps: PStream, group: bytes) -> Wait | None:
    for w in ps.waiters.get(group, ()):
        if w.reading is None and not w.over:
            return w
    return None


def ensure_watches(router: Router, ps: PStream) -> None:
    watches = ps.watches
    if len(watches) != ps.n:
        watches[:] = [Watch(router, ps, p) for p in range(ps.n)]
    for w in watches:
        if w.state == "idle":
            w._pin()


def kick(ps: PStream, group: bytes) -> None:
    """Give the group's unread partitions to its idle waiting consumers, one partition each."""
    unread = ps.unread.get(group)
    ws = ps.waiters.get(group)
    if not unread or not ws:
        return
    for w in list(ws):
        if not unread:
            return
        if w.reading is None and not w.over:
            w.read_partition(unread.pop())


class Wait(BlockedParts):
    """A consumer's blocked XREADGROUP `>` on one logical stream (see the module docstring):
    `client.blocked` while it waits."""

    __slots__ = ("read", "ps", "c", "cell", "over", "reading", "timer", "group", "key")

    def __init__(self, read: Read, ps: PStream) -> None:
        self.read, self.ps = read, ps
        self.c, self.cell = read.c, read.cell
        self.over = False
        self.reading: int | None = None  # the partition being read for it now
        self.timer: asyncio.TimerHandle | None = None
        self.group: bytes = read.group or b""
        self.key = (self.group, read.consumer)

    def start(self) -> None:
        r, ps = self.read, self.ps
        r.c.blocked = self
        router = r.router
        if r.timeout:
            self.timer = router.loop.call_later(r.timeout / 1000, self._timed_out)
        ps.waiters.setdefault(self.group, deque()).append(self)
        if self.group not in ps.unread:  # a group new here: any partition may have entries
            ps.unread[self.group] = set(range(ps.n))
        ensure_watches(router, ps)
        kick(ps, self.group)

    def read_partition(self, p: int, then: Callable[[int], None] | None = None) -> None:
        """Read partition p for this consumer, without BLOCK; `then(last entry ID or 0)`
        once it is answered (a watch's wake-up)."""
        r, ps = self.read, self.ps
        self.reading = p
        req = r._req(ps.keys[p], b">", r.limit() or None)
        _send(r.router, r.c, [(ps.slots[p], req)], True, list,  # type: ignore[arg-type]
              partial(self._read, p, then))

    def _read(self, p: int, then: Callable[[int], None] | None, replies: list[bytes]) -> None:
        self.reading = None
        rep, ps, r = replies[0], self.ps, self.read
        err = error_code(rep)
        es = [] if err is not None else _read_entries(rep)
        if then is not None:
            then(_entry_id(es[-1]) if es else 0)
        if self.over:  # it went away meanwhile: what it was given is its next read's
            from router.pstreamreads import _late_answered, hand_over
            hand_over(ps, self.key, p, es, r.noack)
            if es and r.count and len(es) >= r.count:
                self._unread(p)
            _late_answered(ps, self.key)
            return None
        if err is not None:
            # NOGROUP: the group went (`alter` makes it on new partitions before they are
            # routed to), and as a node does, the blocked read ends with the error; its
            # partitions are no longer known, so the next read asks every one.
            if err == b"NOGROUP":
                ps.unread.pop(self.group, None)
            return self.finish(_renamed(ps, rep))
        if es:
            if r.count:
                if len(es) >= r.count:  # maybe more there: another consumer reads it
                    ps.sparse.discard(self.key)
                    ps.cursor[self.key] = p
                    self._unread(p)
                else:
                    ps.sparse.add(self.key)
            # (asked for no more than the read's COUNT: all of them are its reply)
            return self.finish(_read_reply([(ps.name, es)], r.c.proto))
        kick(ps, self.group)  # nothing there (now): wait, or read another unread one
        ensure_watches(r.router, ps)
        return None

    def _unread(self, p: int) -> None:
        self.ps.unread.setdefault(self.group, set()).add(p)
        kick(self.ps, self.group)

    def _timed_out(self) -> None:
        self.timer = None
        self.finish(null_array(self.c.proto))

    def timeout_reply(self, proto: int) -> bytes:
        return null_array(proto)

    def cancel_parts(self) -> None:
        """It ends (answered, timed out, unblocked, or its client went): out of the waiters;
        a read in flight for it answers its next read (`PStream.late`)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        ws = self.ps.waiters.get(self.group)
        if ws is not None:
            try:
                ws.remove(self)
            except ValueError:
                pass
        if self.reading is not None:
            self.ps.late.setdefault(self.key, [0, []])[0] += 1
