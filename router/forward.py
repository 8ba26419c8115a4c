"""Requests on their way to the nodes: redirects, retries, blocked reads, gathered replies.

Each is a small object with `__slots__` that is itself the reply callback of the upstream
connection (router/upstream.py), so a request costs one object and no closures:
- `Forward`: one request. It follows -ASK (at most 5 times) and -MOVED (twice at once, then
  every few milliseconds while two nodes disagree about the owner), and waits out a shard
  without a primary (-CLUSTERDOWN, -TRYAGAIN, -LOADING, -MASTERDOWN, or the connection lost with
  the request in flight); both until the router's cluster-down timeout. Like any client that
  lost a connection, a write retried that way is at-least-once.
- `BlockedRead`: a single-slot XREAD/XREADGROUP with BLOCK. It takes a dedicated upstream
  connection and the client's later requests wait, as on a node; a failover or a slot move
  (-MOVED, or -ASK: then with ASKING) re-issues it at the new owner with the time that is
  left, an XREAD's `$` pinned to the entry it stood for. CLIENT UNBLOCK and a disconnect end
  it: closing the upstream connection is how a node forgets a blocked client.
- `Gather`: several requests whose replies are merged into one, in request order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

import cython
import hiredis

from node import errors
from node.resp import encode_command, error, error_code, null_array, parse_redirect
from router.upstream import RETRYABLE, Waiter

if cython.compiled:
    from cython.cimports.posix.time import CLOCK_MONOTONIC, clock_gettime, timespec

if TYPE_CHECKING:
    from router.client import ClientConn, RouterClient
    from router.proxy import Router
    from router.upstream import Pool, Upstream

__all__ = ["Forward", "to_cell", "BlockedRead", "blocked_read", "Gather", "MAX_REDIRECTS", "RETRYABLE", "RETRY_DELAY"]

MAX_REDIRECTS = 5  # -ASK
FAST_REDIRECTS = 2  # -MOVED followed at once; after that, again every REDIRECT_DELAY
REDIRECT_DELAY = 0.005
RETRY_DELAY = 0.05  # seconds between tries while a shard has no primary
_ASKING = encode_command([b"ASKING"])

Cell = list  # [reply bytes or None]: one client request's place in its reply order
Done = Callable[[bytes], None]


def _ignore(_reply: bytes | None) -> None:
    pass


def _clock() -> float:
    """perf_counter() (CLOCK_MONOTONIC); compiled, clock_gettime itself: a relayed request
    reads it twice (sent, replied)."""
    if cython.compiled:
        ts = cython.declare(timespec)
        clock_gettime(CLOCK_MONOTONIC, cython.address(ts))
        return ts.tv_sec + ts.tv_nsec * 1e-9
    return perf_counter()


class Forward(Waiter):
    """One request to the owner of `slot` (or to an address); see the module docstring."""

    __slots__ = ("router", "c", "data", "slot", "write", "cell", "done", "attempt", "deadline",
                 "sent", "addr", "added")

    def __init__(self, router: Router, c: RouterClient, data: bytes, slot: int | None,
                 write: bool, cell: Cell | None = None, done: Done | None = None) -> None:
        self._set(router, c, data, slot, write, cell, done)

    def _set(self, router: Router, c: RouterClient, data: bytes, slot: int | None,
             write: bool, cell: Cell | None, done: Done | None) -> None:
        self.router = router
        self.c = c
        self.data = data
        self.slot = slot
        self.write = write
        self.cell = cell  # the reply goes to the client's cell...
        self.done = done  # ... or to this callback
        self.attempt = 0
        self.deadline = 0.0
        self.sent = 0.0  # perf_counter() at the last send (xshard_router_upstream_...)
        self.addr: tuple[str, int] | None = None
        self.added: tuple[str, int] | None = None  # the node this write put in c.written

    def send(self, addr: tuple[str, int] | None = None, up: Upstream | None = None) -> None:
        if up is None:
            router, c = self.router, self.c
            replica = c.readonly and not self.write
            if addr is None and not replica and self.slot is not None:
                pool = router.primary_pool(self.slot, c.proto)  # the common case, cached
                if pool is None:
                    return self._retry(error(errors.SLOT_NOT_SERVED))
                addr = pool.addr
            else:
                if addr is None:
                    addr = router.node_for(self.slot, replica) if self.slot is not None else None
                    if addr is None:
                        return self._retry(error(errors.SLOT_NOT_SERVED))
                pool = router.pool(addr, c.proto, replica and addr not in router.primaries())
            if self.write and addr is not c.wrote_last:
                if addr not in c.written:
                    c.written.add(addr)
                    self.added = addr
                c.wrote_last = addr
            up = pool.get(c.id)
        self.addr = addr
        self.sent = _clock()
        up.send(self.data, self)
        return None

    def reply(self, r: bytes | None) -> None:
        """The node answered (None: the connection was lost first)."""
        self.router.upstream.replied(self.slot, self.addr, r, _clock() - self.sent)
        if r is None:
            return self._retry(error(errors.CLUSTERDOWN))
        # The relay's hot path (every reply): one C byte test (b"-") before reading the
        # error through parse_redirect, rather than a Python call for every good reply.
        if len(r) > 0 and r[0] == 45:
            redirect = parse_redirect(r)
            if redirect is not None:
                kind, _slot, host, port = redirect
                self.attempt += 1
                router = self.router
                if kind == b"MOVED":
                    router.redirects["moved"] += 1
                    if self.added is not None:  # the write did not run there: WAIT skips it
                        self.c.written.discard(self.added)
                        self.c.wrote_last = None
                        self.added = None
                    if self.attempt <= FAST_REDIRECTS:
                        return self.send(addr=(host, port))
                    # The nodes disagree about the owner: one of them has not seen a failover,
                    # switchover or slot move yet. Ask again shortly, until the cluster-down
                    # timeout, rather than bounce between them.
                    return self._retry(r, (host, port), REDIRECT_DELAY)
                if self.attempt <= MAX_REDIRECTS:
                    router.redirects["ask"] += 1
                    up = router.pool((host, port), self.c.proto).get(self.c.id)
                    up.send(_ASKING, _ignore)
                    return self.send(up=up)
            elif self.slot is not None and error_code(r) in RETRYABLE:
                return self._retry(r)
        self._finish(r)
        return None

    def _retry(self, final: bytes, addr: tuple[str, int] | None = None,
               delay: float = RETRY_DELAY) -> None:
        now = time.monotonic()
        if not self.deadline:
            self.deadline = now + self.router.cluster_down_timeout
            if addr is None:
                self.router.upstream.clusterdown_waits += 1
        conn = self.c.conn
        if now >= self.deadline or conn is None or conn.closing:
            return self._finish(final)
        self.router.loop.call_later(delay, self.send, addr)
        return None

    def _finish(self, r: bytes) -> None:
        if self.done is not None:
            self.done(r)
        else:
            conn: ClientConn = self.c.conn  # type: ignore[assignment]
            conn.fill(self.cell, r)  # type: ignore[arg-type]


def to_cell(router: Router, c: RouterClient, data: bytes, slot: int | None, write: bool,
            cell: Cell) -> Forward:
    """Forward(router, c, data, slot, write, cell): what dispatch makes per request, compiled
    without the argument parsing of a Python-level call to the class."""
    f = Forward.__new__(Forward)
    f._set(router, c, data, slot, write, cell, None)
    return f


class BlockedRead(Waiter):
    """A single-slot XREAD/XREADGROUP BLOCK; see the module docstring. It is also what
    `client.blocked` holds while it waits (CLIENT UNBLOCK, INFO blocked_clients), unless it
    is one part of a multi-shard XREAD (router/xread.py), which gets its reply via `done`.
    The node's answer reaches it as a `Waiter` (compiled: a C call, like a `Forward`'s).

    XREAD's `$` means "what is added after now", and a node says what that was only by the
    entries it returns. So that a re-issue elsewhere starts from the same point, the first
    issue is preceded, on the same connection, by `XREVRANGE key + - COUNT 1` for each `$`
    key: the last entry then (or 0-0), which is what the re-issue asks for instead of `$`.
    Nothing can exist between that entry and the stream's last ID, so the read is the same;
    an entry added between the two commands is one added after the client's request, which
    the read may well return."""

    __slots__ = ("router", "c", "argv", "block_at", "slot", "write", "cell", "deadline", "up",
                 "pool", "over", "issued", "attempt", "done", "dollars", "since", "raw")

    def __init__(self, router: Router, c: RouterClient, argv: list[bytes], block_at: int,
                 block_ms: int, slot: int, write: bool, cell: Cell | None,
                 dollars: list[tuple[int, int]] | None = None,
                 done: Callable[[bytes], None] | None = None, raw: bytes | None = None) -> None:
        self._set(router, c, argv, block_at, block_ms, slot, write, cell, dollars, done, raw)

    def _set(self, router: Router, c: RouterClient, argv: list[bytes], block_at: int,
             block_ms: int, slot: int, write: bool, cell: Cell | None,
             dollars: list[tuple[int, int]] | None, done: Callable[[bytes], None] | None,
             raw: bytes | None) -> None:
        self.router = router
        self.c = c
        self.argv = argv
        self.block_at = block_at  # index of BLOCK's value in argv
        self.slot = slot
        self.write = write
        self.cell = cell
        self.done = done  # a part of a multi-shard read: the reply goes here
        self.deadline = _clock() + block_ms / 1000 if block_ms else 0.0
        self.up: Upstream | None = None
        self.pool: Pool | None = None
        self.over = False
        self.issued = False
        self.attempt = 0
        self.dollars = dollars or []  # (key index, ID index) of each `$` ID in argv
        self.since: dict[int, bytes] = {}  # ID index -> the entry `$` stood for
        self.raw = raw  # the client's bytes for argv (router/proxy.py dispatch), or None

    def start(self) -> None:
        self.c.blocked = self
        self.c.conn.stall()  # type: ignore[union-attr]
        self.issue()

    def timeout_reply(self, proto: int) -> bytes:
        return null_array(proto)

    def issue(self, addr: tuple[str, int] | None = None, asking: bool = False) -> None:
        if self.over:
            return
        router, c = self.router, self.c
        replica = c.readonly and not self.write
        if addr is None and not replica:
            pool = router.primary_pool(self.slot, c.proto)  # the common case, cached
            if pool is None:
                router.loop.call_later(RETRY_DELAY, self.issue)
                return
            addr = pool.addr
        else:
            if addr is None:
                addr = router.node_for(self.slot, replica)
                if addr is None:
                    router.loop.call_later(RETRY_DELAY, self.issue)
                    return
            pool = router.pool(addr, c.proto, replica)
        argv = self.argv
        if self.issued and (self.deadline or self.since):
            argv = list(argv)
            if self.deadline:  # a re-issue gets only the time that is left
                left = int((self.deadline - _clock()) * 1000)
                if left <= 0:
                    return self.finish(null_array(c.proto))
                argv[self.block_at] = b"%d" % max(left, 1)
            for i, sid in self.since.items():
                argv[i] = sid
        self.issued = True
        self.pool = pool
        self.up = up = pool.get_dedicated()
        if self.write:
            c.written.add(addr)
        for ki, ii in self.dollars:
            if ii not in self.since:
                if asking:  # ASKING covers the next command only
                    up.send(_ASKING, _ignore)
                up.send(encode_command([b"XREVRANGE", argv[ki], b"+", b"-", b"COUNT", b"1"]),
                        partial(self._last_entry, ii))
        if asking:
            up.send(_ASKING, _ignore)
        raw = self.raw
        up.send(raw if argv is self.argv and raw else encode_command(argv), self)
        return None

    def _last_entry(self, ii: int, r: bytes | None) -> None:
        """The reply of the XREVRANGE that pins down a `$`: [[id, fields]] or []."""
        if r is None or r[:1] not in (b"*", b"~"):
            return  # an error (-MOVED...): the read fails the same way and is re-issued
        if r[:2] == b"*0" or r[:2] == b"~0":
            self.since[ii] = b"0-0"
            return
        rd = hiredis.Reader()
        rd.feed(r)
        entries = rd.gets()
        self.since[ii] = entries[0][0] if entries else b"0-0"

    def reply(self, r: bytes | None) -> None:
        """The node answered the read (None: the connection was lost first)."""
        if self.over:
            return
        up, self.up = self.up, None
        pool = self.pool
        if up is not None and pool is not None:
            pool.release(up)  # answered: the connection is clean and can serve again
        if r is None or error_code(r) in RETRYABLE:
            self.router.loop.call_later(RETRY_DELAY, self.issue)
            return
        redirect = parse_redirect(r) if self.attempt < MAX_REDIRECTS else None
        if redirect is not None:  # a failover or a slot move: read there
            self.attempt += 1
            kind, _slot, host, port = redirect
            self.router.redirects["moved" if kind == b"MOVED" else "ask"] += 1
            return self.issue((host, port), asking=kind == b"ASK")
        return self.finish(r)

    def finish(self, reply: bytes | None) -> None:
        """The read is over: `reply` goes to the client (None: it went away)."""
        if self.over:
            return
        self.over = True
        up = self.up
        if up is not None:
            up.close()
            self.up = None
        if self.done is not None:
            if reply is not None:
                self.done(reply)
            return
        c = self.c
        c.blocked = None
        conn: ClientConn | None = c.conn
        if reply is not None and conn is not None:
            conn.fill(self.cell, reply)  # type: ignore[arg-type]
            conn.resume()


def blocked_read(router: Router, c: RouterClient, argv: list[bytes], block_at: int,
                 block_ms: int, slot: int, write: bool, cell: Cell,
                 raw: bytes | None) -> BlockedRead:
    """BlockedRead(...) for a client's own read (router/proxy.py), made as `to_cell` makes a
    Forward: compiled, without the argument parsing of a Python-level call to the class."""
    b = BlockedRead.__new__(BlockedRead)
    b._set(router, c, argv, block_at, block_ms, slot, write, cell, None, None, raw)
    return b


class Gather:
    """Send requests, then done(merge(replies in request order))."""

    __slots__ = ("replies", "left", "merge", "done")

    def __init__(self, n: int, merge: Callable[[list[bytes]], bytes], done: Done) -> None:
        self.replies: list[bytes] = [b""] * n
        self.left = n
        self.merge = merge
        self.done = done

    def got(self, i: int, r: bytes) -> None:
        self.replies[i] = r
        self.left -= 1
        if self.left == 0:
            self.done(self.merge(self.replies))

    @classmethod
    def send(cls, router: Router, c: RouterClient,
             reqs: Sequence[tuple[tuple[str, int] | None, int | None, bytes]], write: bool,
             merge: Callable[[list[bytes]], bytes], done: Done) -> None:
        """Each request goes to an address, or to its slot's owner when the address is None."""
        if not reqs:
            done(merge([]))
            return
        g = cls(len(reqs), merge, done)
        for i, (addr, slot, data) in enumerate(reqs):
            Forward(router, c, data, slot, write, done=partial(g.got, i)).send(addr=addr)
