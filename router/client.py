"""The router's client side: a client's state, and its connection with reply cells.

The connection parses and runs requests like the node's (node/protocol.py), but a reply may come
from any shard at any time: every request gets a *cell* in a FIFO, replies fill cells in any
order, and they leave in request order, so commands that went to different shards still answer
in order. A request that must finish before the next one runs (a BLOCK read, EXEC, WAIT)
stalls the connection; the requests behind it wait in the parser, and in the kernel past 64 KiB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cython

from node.client import Client
from node.protocol import RespConnection
from router.outbox import Writer

if TYPE_CHECKING:
    from node.cmdstats import CommandStats
    from router.metrics import UpstreamStats
    from router.outbox import Outbox
    from router.proxy import Router
    from router.upstream import Pool, Upstream

__all__ = ["RouterCore", "RouterClient", "ClientConn", "ReplyWriter", "Cell", "MAX_CELLS"]

Cell = list  # [reply bytes or None]
MAX_CELLS = 20000  # pending replies per client before its reading pauses
_MAX_CELLS = cython.declare(cython.Py_ssize_t, MAX_CELLS)  # (compiled: a C constant)


class RouterCore:
    """What every relayed request calls on the router (router/proxy.py `Router` is the one
    implementation). Compiled (router/client.pxd) it is an extension type that the client
    connections and forwarded requests hold typed, so these are C calls and C fields."""

    __slots__ = ("stats", "upstream")
    stats: CommandStats  # client requests and bytes (INFO stats)
    upstream: UpstreamStats  # round trips to the nodes (router/metrics.py)

    def dispatch(self, c: RouterClient, argv: list[bytes], cell: Cell,
                 raw: bytes | None = None) -> None:
        raise NotImplementedError

    def primary_pool(self, slot: int, proto: int) -> Pool | None:
        raise NotImplementedError


class RouterClient(Client):
    """A client of the router: a node client plus what routing needs to remember."""

    __slots__ = ("written", "wrote_last", "txn_slot", "watch_conn", "watch_slot")
    conn: ClientConn | None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.written: set[tuple[str, int]] = set()  # nodes written since the last WAIT
        # An address known to be in `written` (the last one a write went to): a write to the
        # same node skips the set lookup. Reset wherever `written` loses an address.
        self.wrote_last: tuple[str, int] | None = None
        self.txn_slot: int | None = None  # the slot of the open transaction, once known
        self.watch_conn: Upstream | None = None  # WATCH pins the slot's node until EXEC
        self.watch_slot: int | None = None


class ClientConn(RespConnection):
    """One client socket of the router: requests run in order, replies leave in order."""

    __slots__ = ("router", "outbox", "cells", "_head", "_close_after", "_out", "_queued",
                 "_writer", "_send", "reads")

    def __init__(self, router: Router) -> None:
        # keep_spans: each request of a pipeline is relayed as its bytes (self.raw)
        super().__init__(router, self._submit, keep_spans=True)
        self.router = router
        self.outbox: Outbox = router.outbox
        # The cells in request order from `_head` on (a list and an index: appending and
        # taking from the front are C operations compiled, where a deque's are method calls).
        self.cells: list[Cell] = []
        self._head = 0
        self._close_after = False
        self._out: list[bytes] = []  # replies in order, written at the end of the iteration
        self._queued = False  # registered with the router's outbox (router/outbox.py)
        self._writer = ReplyWriter(self)  # what registers
        self._send: Callable[[bytes], object] | None = None  # transport.write
        # Reads from the socket so far: the requests of one read share a number (a spread
        # XADD's partition sticks for one read, router/pstreamwrite.py).
        self.reads = 0

    def _submit(self, c: Client, argv: list[bytes]) -> None:
        """Run one request; its reply goes into its cell whenever it is ready."""
        cell: Cell = [None]
        cells = self.cells
        cells.append(cell)
        # self.raw: the request's own bytes, when known (node/protocol.py)
        self.router.dispatch(c, argv, cell, self.raw)  # type: ignore[arg-type]
        if len(cells) - self._head > _MAX_CELLS:
            self._pause_reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        RespConnection.connection_made(self, transport)
        self._send = transport.write  # type: ignore[attr-defined]  # bound once (_flush)

    def data_received(self, data: bytes) -> None:
        """node/protocol.py's, held (router/outbox.py `hold`): a request for an idle node
        leaves in `_after_run`, and only what is still queued after the read asks for the
        end-of-iteration callback."""
        self.reads += 1
        held = self.outbox.hold()
        try:
            RespConnection.data_received(self, data)
        finally:
            self.outbox.unhold(held)

    def _after_run(self) -> None:
        """The requests that were ready ran: a request for an idle node leaves now instead of
        at the end of the loop iteration (router/outbox.py)."""
        if self.outbox.urgent:
            self.outbox.now()

    def new_cell(self) -> Cell:
        cell: Cell = [None]
        self.cells.append(cell)
        return cell

    def fill(self, cell: Cell, data: bytes) -> None:
        """A reply is ready: send it, and every reply after it that was waiting for it."""
        cell[0] = data
        cells = self.cells
        head = self._head
        n = len(cells)
        if head < n and cells[head] is cell:
            out = self._out
            while head < n:
                first = cells[head]
                if first[0] is None:
                    break
                out.append(first[0])
                head += 1
            if head == n:
                del cells[:]
                head = 0
            elif head >= 1024 and head * 2 >= n:  # a pipeline that never drains
                del cells[:head]
                head = 0
            self._head = head
            if not self._queued:
                self._queued = True
                self.outbox.add(self._writer)
            if self._read_paused and len(cells) - head < _MAX_CELLS // 2 and not self._halt \
                    and not self._close_after \
                    and (self.client is None or self.client.blocked is None):
                self._resume_reading()

    def flush(self) -> None:
        """Write the replies that became ready in this loop iteration at once
        (router/outbox.py)."""
        self._queued = False
        out = self._out
        if out:
            self._out = []
            send = self._send  # (set with the transport)
            if self.transport is not None and send is not None and not self._closing:
                data = out[0] if len(out) == 1 else b"".join(out)
                self.router.stats.net_output_bytes += len(data)
                send(data)
        if self._close_after and self._head == len(self.cells):
            self.close()

    def _write(self, data: bytes) -> None:
        """Replies made here (protocol errors) queue behind the requests still in flight."""
        self.fill(self.new_cell(), data)

    def eof_received(self) -> bool | None:
        """The client shut its side after its requests (`nc -N`, a script's pipe): as from a
        node, it still gets every reply, then the close. A client blocked in XREAD BLOCK or
        WAIT is dropped at once, as a node drops it."""
        c = self.client
        if c is None or c.blocked is not None:
            return None  # asyncio closes the transport
        self.finish()
        return True  # the write side stays open for the replies in flight

    def finish(self) -> None:
        """Close once every request in flight is answered."""
        self._close_after = True
        if self._head == len(self.cells) and not self._queued:
            self.close()

    def on_unblocked(self, reply: bytes) -> None:
        """Unused: a router's blocked reads end through router.forward.BlockedRead."""


class ReplyWriter(Writer):
    """A client connection's entry in the outbox: a C base (router/outbox.pxd) that the
    connection itself cannot have besides RespConnection, so the outbox flushes it as C."""

    __slots__ = ("conn",)

    def __init__(self, conn: ClientConn) -> None:
        self.conn = conn

    def flush(self) -> None:
        self.conn.flush()
