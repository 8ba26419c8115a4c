"""Blocking reads on Redis's ready-keys model.

A read with BLOCK and nothing to return raises `Blocked`; the server parks the client here. A
write marks its key ready, and before control returns to the event loop the clients blocked on
that key are re-run in FIFO order (Redis handleClientsBlockedOnKeys). Timeouts are loop timers,
never polling. A client that disconnects is forgotten at once.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from node.resp import null_array

if TYPE_CHECKING:
    import asyncio

    from node.client import Client
    from node.context import ServerContext


# A pseudo key that never names data: WAIT/WAITAOF block on it, and whoever advances an fsynced
# or acknowledged offset calls `offsets_advanced` so that they re-check.
OFFSETS = b"\x00offsets"


class Blocked(Exception):  # noqa: N818 - it is a control-flow signal, not an error
    """Raised by a read handler that must wait; `argv` is what to re-run (with `$` resolved)."""

    def __init__(self, keys: list[bytes], timeout_ms: int, argv: list[bytes],
                 on_timeout: Callable[[int], bytes] | None = None,
                 postponed: bool = False,
                 recheck: Callable[[Client, Blocked], bool] | None = None,
                 group: tuple[bytes, bytes] | None = None) -> None:
        self.keys = keys
        # A cheap test, from the command, that running it again would serve nothing and only
        # park it again; when it says so it has made the changes such a run makes (a
        # consumer's seen-time). Ten consumers blocked on one stream: an entry serves one,
        # and re-running the nine others cost the node ~4 us each (node/commands/reads.py).
        self.recheck = recheck
        self.group = group  # XREADGROUP's (group, consumer), for `recheck`
        # A postponed command (a write to a paused key, node/writepause.py) runs again
        # through the whole dispatch when released, redirects and guards included.
        self.postponed = postponed
        self.timeout_ms = timeout_ms
        self.argv = argv
        self.on_timeout = on_timeout  # the reply at timeout for this protocol; default null array
        self.deadline = 0.0  # loop time at which it times out (0: never), BlockingManager's heap
        self.usec = 0  # time spent running it so far (commandstats count it once, when released)
        self.original = argv  # as the client sent it ($ unresolved): what MONITOR and SLOWLOG show

    def timeout_reply(self, proto: int) -> bytes:
        return self.on_timeout(proto) if self.on_timeout is not None else null_array(proto)


def _parked(c: Client) -> Blocked | None:
    """On a node only this manager parks clients, so what a client waits in is a Blocked."""
    return cast(Blocked | None, c.blocked)


class BlockingManager:
    """The parked clients, by key, and their timeouts.

    The timeouts share one loop timer, armed for the earliest deadline: a timer per blocked
    read (call_later, then cancel when an entry comes first, which is what mostly happens)
    cost a consumer's every read ~3 us. A client released early leaves its heap entry behind,
    skipped when it comes up; the heap is rebuilt from the live entries when those left-behind
    ones outnumber them (long timeouts, many early releases)."""

    __slots__ = ("server", "waiting", "ready", "_serving", "_deadlines", "_timer", "_armed",
                 "_timed", "_seq")

    def __init__(self, server: ServerContext) -> None:
        self.server = server
        self.waiting: dict[bytes, deque[Client]] = {}
        self.ready: dict[bytes, None] = {}  # an ordered set
        self._serving = False
        # (deadline, seq, client, blocked): a min-heap; seq keeps equal deadlines FIFO
        self._deadlines: list[tuple[float, int, Client, Blocked]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._armed = 0.0  # the deadline the timer is set for (0: none)
        self._timed = 0  # parked clients with a deadline (live heap entries)
        self._seq = 0

    @property
    def blocked_clients(self) -> int:
        return sum(1 for c in self.server.clients.values() if c.blocked is not None)

    def blocking_keys(self, on_nokey: bool) -> int:
        """INFO total_blocking_keys: keys a client waits on (WAIT's offsets and writes held by
        a pause are not keys); with `on_nokey`, those an XREADGROUP waits on, which Redis
        releases with an error when the key goes away (total_blocking_keys_on_nokey)."""
        n = 0
        for key, q in self.waiting.items():
            if key == OFFSETS:
                continue
            for c in q:
                b = _parked(c)
                if b is not None and not b.postponed and (
                        not on_nokey or b.argv[0].lower() == b"xreadgroup"):
                    n += 1
                    break
        return n

    def block(self, c: Client, b: Blocked) -> None:
        c.blocked = b
        for key in b.keys:
            q = self.waiting.get(key)
            if q is None:
                q = self.waiting[key] = deque()
            q.append(c)
        if b.timeout_ms > 0:
            loop = self.server.loop
            b.deadline = when = loop.time() + b.timeout_ms / 1000
            self._seq += 1
            heapq.heappush(self._deadlines, (when, self._seq, c, b))
            self._timed += 1
            if len(self._deadlines) > 2 * self._timed + 64:
                self._compact()
            if not self._armed or when < self._armed:
                self._arm(when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = when
        self._timer = self.server.loop.call_at(when, self._expire)

    def _expire(self) -> None:
        """The timer: time out every client whose deadline has come, in deadline order, then
        arm for the next one."""
        self._timer = None
        self._armed = 0.0
        heap = self._deadlines
        # A loop timer may fire up to a millisecond early (libuv counts whole ms from the
        # iteration's cached time), as the per-client ones did: what is due within it goes now.
        now = self.server.loop.time() + 0.001
        while heap and heap[0][0] <= now:
            _, _, c, b = heapq.heappop(heap)
            if c.blocked is b:
                self.timeout(c)
        while heap and heap[0][2].blocked is not heap[0][3]:
            heapq.heappop(heap)  # released before its time
        if heap:
            self._arm(heap[0][0])

    def _compact(self) -> None:
        heap = [e for e in self._deadlines if e[2].blocked is e[3]]
        heapq.heapify(heap)
        self._deadlines = heap

    def signal_ready(self, key: bytes) -> None:
        if key in self.waiting:
            self.ready[key] = None

    def offsets_advanced(self) -> None:
        """An fsync finished or a replica acknowledged: re-run WAIT/WAITAOF waiters."""
        if OFFSETS in self.waiting:
            self.ready[OFFSETS] = None
            self.serve_ready()

    def serve_ready(self) -> None:
        """Re-run the blocked clients of every ready key, FIFO, until nothing more is ready."""
        if self._serving:
            return
        self._serving = True
        try:
            while self.ready:
                key = next(iter(self.ready))
                del self.ready[key]
                q = self.waiting.get(key)
                if not q:
                    continue
                for c in list(q):
                    b = _parked(c)
                    if b is None or key not in b.keys:
                        continue
                    if b.recheck is not None and b.recheck(c, b):
                        continue  # nothing for it yet: a re-run would only park it again
                    reply = self.server.rerun_blocked(c, b.argv)
                    if reply is not None and c.blocked is b:
                        self.unblock(c, reply, ran=True)
        finally:
            self._serving = False

    def timeout(self, c: Client) -> None:
        if c.blocked is not None:
            self.unblock(c, c.blocked.timeout_reply(c.proto))

    def unblock(self, c: Client, reply: bytes | None, ran: bool = False) -> None:
        """Release a client; `reply` None means it went away and gets nothing. `ran` says the
        reply comes from running the command again (Server.call counted it)."""
        b = _parked(c)
        if b is None:
            return
        c.blocked = None
        if b.deadline:
            self._timed -= 1  # its heap entry is skipped when it comes up (_expire)
        for key in b.keys:
            q = self.waiting.get(key)
            if q is not None:
                try:
                    q.remove(c)
                except ValueError:
                    pass
                if not q:
                    del self.waiting[key]
                    self.ready.pop(key, None)
        if reply is not None:
            if not ran:
                self.server.count_released(c, b, reply)
            c.unblocked(reply)
