"""Connections from a router to the nodes: pipelined, multiplexed, and relayed as raw bytes.

An `Upstream` is one TCP connection. Requests are written as they come and every reply is
handed, still encoded, to the callback queued with its request: nodes answer in order, so a
FIFO of callbacks is the whole multiplexing protocol. Replies are framed with
`node.resp.reply_scan`, never decoded, unless the router must look inside (redirects, fan-out
merges). A reply that arrives in many chunks is kept in one growing buffer and its scan resumes
where it stopped, so framing stays linear in the reply's size.

A `Pool` keeps shared connections per node and protocol (one by default); each client is
pinned to one of them so that its commands to a node stay in order (and WAIT on that connection
covers them). One connection, not several: the requests that many clients send to a node in one
loop iteration leave in one write and reach the node as one pipelined read, and a node's cost
per request falls with the requests per read (at 50 clients without pipelining through a
router in front of 3 nodes, 2 connections per node made reads of 2.4-2.8 requests, and one
makes 3.7-6.4: the CPU per relayed XADD, router and nodes together, went from 27-28 us to
20-24 us). The node runs one command at a time whatever the connection, so a second
connection only splits the batches.
Blocking reads and transactions take a dedicated connection for their duration. A WAIT after
writes must go on the connection that carried them (the node counts acks of the last write made
on a connection), so that connection leaves the pool with the WAIT (`Pool.detach`) and a blocked
WAIT never holds up the other clients that shared it.

A node cut off by the network never resets the connection: requests would wait for ever. So
every connection has TCP_USER_TIMEOUT (UNACKED_TIMEOUT): once what we sent has gone
unacknowledged by the node's kernel that long, the kernel drops the connection, and the
requests in flight are retried as after any lost connection, until the cluster-down timeout
(router/forward.py). A node that is merely slow still has its kernel acknowledge, so only an
unreachable node (or one whose receive buffer stayed full that long) is dropped. An idle
connection sends keep-alive probes after a second of silence, which the same timeout covers:
a blocked read whose node became unreachable is re-issued where etcd now names the primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable
from ssl import SSLContext

import cython

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize

from node import tlstransport
from node.protocol import set_nodelay
from node.resp import encode_command, error_code, reply_scan
from router.outbox import Outbox, Writer

log = logging.getLogger("xshard.router")

# A callback gets the reply bytes, or None when the connection died before the reply came.
ReplyCallback = Callable[[bytes | None], None]

UNACKED_TIMEOUT = 3.0  # seconds (a lease TTL); see the module docstring
# Error replies that mean the node cannot serve the request now (no primary, loading): the
# request is retried (router/forward.py) and counted (router/metrics.py).
RETRYABLE = frozenset((b"CLUSTERDOWN", b"TRYAGAIN", b"LOADING", b"MASTERDOWN"))


def detect_partitions(transport: asyncio.BaseTransport) -> None:
    """TCP_USER_TIMEOUT, and keep-alive probes after 1 s of silence so that an idle
    connection (a blocked XREADGROUP's) is also dropped once its node stops answering."""
    sock = transport.get_extra_info("socket")
    if sock is None or not hasattr(socket, "TCP_USER_TIMEOUT"):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(UNACKED_TIMEOUT * 1000))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, int(UNACKED_TIMEOUT))


def _cut(data: bytes, start: int, end: int) -> bytes:
    """data[start:end]; compiled, bytes are cut by C indices (no slice object, no ints)."""
    if cython.compiled and type(data) is bytes:  # (the scan keeps 0 <= start <= end <= len)
        return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + start, end - start)
    return data[start:end]


class Waiter:
    """What waits for a reply on an `Upstream` and is called with it (None: the connection was
    lost first): a request's own object (router/forward.py `Forward`). Compiled, the reply is
    a C call; any other callable (a function, a bound method) is called as such."""

    __slots__ = ()

    def reply(self, r: bytes | None) -> None:
        raise NotImplementedError

    def __call__(self, r: bytes | None) -> None:
        self.reply(r)


class Upstream(Writer):
    """One pipelined connection to one node.

    An asyncio protocol by its methods, not by inheritance: compiled (router/upstream.pxd) it
    is an extension type, which cannot derive from asyncio.Protocol."""

    def __init__(self, host: str, port: int, setup: list[list[bytes]], outbox: Outbox,
                 on_close: Callable[[Upstream], None] | None = None) -> None:
        self.host = host
        self.port = port
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[ReplyCallback] = deque()
        # its append and popleft, bound once (a call by name is a method lookup per request)
        self._push, self._pop = self.waiting.append, self.waiting.popleft
        self.buf = bytearray()  # the start of a reply that is not complete yet
        self._scan = (0, 1)  # where its scan resumes: (offset in buf, elements still needed)
        self.closed = False
        # Requests not written yet: those of this loop iteration (router/outbox.py), and all
        # of them until the connection is up.
        self._out: list[bytes] = []
        self._queued = False  # registered with the outbox
        self._outbox = outbox
        self._on_close = on_close
        for argv in setup:  # AUTH, HELLO 3, READONLY: their replies are checked, not relayed
            self.send(encode_command(argv), self._setup_reply)

    @property
    def busy(self) -> int:
        return len(self.waiting)

    def _setup_reply(self, reply: bytes | None) -> None:
        if reply is not None and error_code(reply) is not None:
            log.warning("node %s:%d refused the connection setup: %r", self.host, self.port,
                        reply[:200])

    def connect(self, loop: asyncio.AbstractEventLoop, timeout: float = 2.0,
                ssl: SSLContext | None = None) -> None:
        """Open the connection in the background; `ssl`: over TLS (--tls-cluster)."""
        async def go() -> None:
            try:
                await asyncio.wait_for(tlstransport.connect(
                    loop, self.as_protocol, self.host, self.port, ssl), timeout)
            except (TimeoutError, OSError) as e:
                log.debug("cannot connect to %s:%d: %s", self.host, self.port, e)
                self.connection_lost(e if isinstance(e, OSError) else None)

        loop.create_task(go())

    # --- asyncio callbacks --------------------------------------------------------------------
    def as_protocol(self) -> asyncio.Protocol:
        """This connection, typed as what loop.create_connection's factory returns."""
        return self  # type: ignore[return-value]

    def eof_received(self) -> bool | None:
        return None  # close (asyncio.Protocol's default)

    def pause_writing(self) -> None:
        pass  # requests are small and replies bounded by the clients' flow control

    def resume_writing(self) -> None:
        pass

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.closed:
            transport.close()
            return
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        detect_partitions(transport)
        if self._out and not self._queued:  # (queued: held, see hold_writes)
            self.flush()  # requests that waited for the connection: nothing to batch with

    def data_received(self, data: bytes) -> None:
        # The replies (and requests) this read produces leave at its end, so they need no
        # end-of-iteration callback: held, what they queue does not ask for one. (The outbox
        # by its typed field: compiled, these are C calls.)
        held = self._outbox.hold()
        try:
            self._relay(data)
        finally:
            try:
                if self._outbox.pending:
                    self._outbox.now()
            finally:
                self._outbox.unhold(held)

    def _relay(self, data: bytes) -> None:
        """Hand every complete reply in `data` to its callback; keep the incomplete rest."""
        held = self.buf
        buf: bytes | bytearray
        if held:
            held += data  # a bytearray grows in place
            buf = held
            pos, need = self._scan
        else:
            buf, pos, need = data, 0, 1
        start = 0
        n = len(buf)
        waiting = self.waiting
        while True:
            pos, need = reply_scan(buf, pos, need)
            if need:
                break
            if held:
                reply = bytes(memoryview(buf)[start:pos])
            elif start == 0 and pos == n:
                reply = data
            else:
                reply = _cut(data, start, pos)
            start, need = pos, 1
            if waiting:
                cb = self._pop()
                try:
                    if isinstance(cb, Waiter):
                        w = cb
                        w.reply(reply)
                    else:
                        cb(reply)
                except Exception:  # a bug in one reply path must not kill the others
                    log.exception("reply callback failed")
            if pos >= n:
                break
        if start >= n:
            if held:  # (an empty buffer stays)
                self.buf = bytearray()
            return
        if held:
            del held[:start]
        else:
            self.buf = bytearray(memoryview(data)[start:])
        self._scan = (pos - start, need)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed and not self.waiting:
            return
        self.closed = True
        self.transport = None
        self._out = []
        waiting, self.waiting = self.waiting, deque()
        self._push, self._pop = self.waiting.append, self.waiting.popleft
        for cb in waiting:
            try:
                cb(None)
            except Exception:
                log.exception("reply callback failed")
        if self._on_close is not None:
            self._on_close(self)

    # --- requests -----------------------------------------------------------------------------
    def send(self, data: bytes, cb: ReplyCallback) -> None:
        """Write one request (or several, with one callback per reply expected)."""
        if self.closed:
            cb(None)
            return
        if not self.waiting and self.transport is not None:
            self._outbox.urgent = True  # the node is idle: do not make it wait (outbox.py)
        self._push(cb)
        self._out.append(data)
        if not self._queued and self.transport is not None:
            self._queued = True
            self._outbox.add(self)

    def flush(self) -> None:
        """Write the requests of this loop iteration at once (router/outbox.py)."""
        self._queued = False
        out = self._out
        if out and self.transport is not None:
            self._out = []
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def hold_writes(self) -> None:
        """Keep what is sent from now on until release_writes() (Pool.detach). Marked as
        registered with the outbox, so that send() and connection_made() leave it alone; only
        for a connection with nothing queued."""
        self._queued = True

    def release_writes(self) -> None:
        self._queued = False
        if self._out and self.transport is not None:
            self._queued = True
            self._outbox.add(self)

    def after_sent(self, fn: Callable[[], None], keep: int = 0) -> None:
        """Call fn() once every request sent so far, but the last `keep`, is answered (or the
        connection is lost): at once when there is none."""
        n = len(self.waiting) - keep
        if n <= 0:
            fn()
            return
        cb = self.waiting[n - 1]

        def chained(reply: bytes | None) -> None:
            try:
                cb(reply)
            finally:
                fn()

        self.waiting[n - 1] = chained

    def close(self) -> None:
        """Drop the connection; pending callbacks get None (a node forgets a blocked client
        when its connection goes, which is how a router cancels a BLOCK)."""
        if self.transport is not None:
            self.transport.abort()
        else:
            self.connection_lost(None)
        self.closed = True


class Pool:
    """Shared connections to one node for one protocol and read mode."""

    def __init__(self, loop: asyncio.AbstractEventLoop, outbox: Outbox, host: str, port: int,
                 proto: int, readonly: bool, password: str, size: int = 1, user: str = "",
                 ssl: SSLContext | None = None) -> None:
        self.loop = loop
        self.ssl = ssl
        self.outbox = outbox
        self.host = host
        self.port = port
        self.size = size
        self.setup: list[list[bytes]] = []
        if password:  # the router's own credentials on the nodes (--node-user, --node-password)
            self.setup.append([b"AUTH", user.encode(), password.encode()] if user
                              else [b"AUTH", password.encode()])
        if proto == 3:
            self.setup.append([b"HELLO", b"3"])
        if readonly:
            self.setup.append([b"READONLY"])
        # One tuple per pool: a client's writes to this node compare it by identity
        # (RouterClient.wrote_last) before the set lookup.
        self.addr: tuple[str, int] = (host, port)
        self.conns: list[Upstream | None] = [None] * size
        self.dedicated: set[Upstream] = set()
        self.idle: list[Upstream] = []  # dedicated connections ready for reuse

    def get(self, client_id: int) -> Upstream:
        i = client_id % self.size
        c = self.conns[i]
        if c is None or c.closed:
            c = self.conns[i] = Upstream(self.host, self.port, self.setup, self.outbox)
            c.connect(self.loop, ssl=self.ssl)
        return c

    def get_dedicated(self) -> Upstream:
        """A connection of one's own (BLOCK, MULTI/EXEC): an idle one when there is one."""
        while self.idle:
            c = self.idle.pop()
            if not c.closed and not c.waiting:
                return c
        c = Upstream(self.host, self.port, self.setup, self.outbox,
                     on_close=self.dedicated.discard)
        self.dedicated.add(c)
        c.connect(self.loop, ssl=self.ssl)
        return c

    def detach(self, client_id: int) -> Upstream:
        """The client's shared connection, taken out of the pool for a request that may block
        (WAIT after writes); give it back with release(). Another connection takes its place,
        and writes nothing until the requests already sent on the old one are answered, so
        every client's commands still reach the node in the order they were sent."""
        i = client_id % self.size
        up = self.get(client_id)
        new = self.get_dedicated()
        self.dedicated.discard(new)
        new._on_close = None
        self.conns[i] = new
        up._on_close = self.dedicated.discard
        self.dedicated.add(up)
        if up.waiting:
            new.hold_writes()
            up.after_sent(new.release_writes)
        return up

    def release(self, c: Upstream) -> None:
        """Give back a dedicated connection whose last request was answered; one with a
        request still pending (a BLOCK we gave up on) must be closed instead."""
        if c.closed or c.waiting or len(self.idle) >= 64:
            c.close()
        else:
            self.idle.append(c)

    def close(self) -> None:
        for c in self.conns:
            if c is not None:
                c.close()
        for c in list(self.dedicated):
            c.close()
