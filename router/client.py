"""The router's client side: a client's state, and its connection with reply cells.

The connection parses and runs requests like the node's (node/protocol.py), but a reply may come
from any shard at any time: every request gets a *cell* in a FIFO, replies fill cells in any
order, and they leave in request order, so commands that went to different shards still answer
in order. A request that must finish before the next one runs (a BLOCK read, EXEC, WAIT)
stalls the connection; the requests behind it wait in the parser, and in the kernel past 64 KiB.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from node.client import Client
from node.protocol import RespConnection

if TYPE_CHECKING:
    from router.outbox import Outbox
    from router.proxy import Router
    from router.upstream import Upstream

__all__ = ["RouterClient", "ClientConn", "Cell", "MAX_CELLS"]

Cell = list  # [reply bytes or None]
MAX_CELLS = 20000  # pending replies per client before its reading pauses


class RouterClient(Client):
    """A client of the router: a node client plus what routing needs to remember."""

    __slots__ = ("written", "txn_slot", "watch_conn", "watch_slot")
    conn: ClientConn | None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.written: set[tuple[str, int]] = set()  # nodes written since the last WAIT
        self.txn_slot: int | None = None  # the slot of the open transaction, once known
        self.watch_conn: Upstream | None = None  # WATCH pins the slot's node until EXEC
        self.watch_slot: int | None = None


class ClientConn(RespConnection):
    """One client socket of the router: requests run in order, replies leave in order."""

    __slots__ = ("router", "outbox", "cells", "_close_after", "_out", "_queued")

    def __init__(self, router: Router) -> None:
        # keep_spans: each request of a pipeline is relayed as its bytes (self.raw)
        super().__init__(router, self._submit, keep_spans=True)
        self.router = router
        self.outbox: Outbox = router.outbox
        self.cells: deque[Cell] = deque()
        self._close_after = False
        self._out: list[bytes] = []  # replies in order, written at the end of the iteration
        self._queued = False  # registered with the router's outbox (router/outbox.py)

    def _submit(self, c: Client, argv: list[bytes]) -> None:
        """Run one request; its reply goes into its cell whenever it is ready."""
        cell: Cell = [None]
        self.cells.append(cell)
        # self.raw: the request's own bytes, when known (node/protocol.py)
        self.router.dispatch(c, argv, cell, self.raw)  # type: ignore[arg-type]
        if len(self.cells) > MAX_CELLS:
            self._pause_reading()

    def _process(self) -> int:
        """Run the requests that are ready; a request for an idle node leaves before this
        returns instead of at the end of the loop iteration (router/outbox.py)."""
        n = RespConnection._process(self)
        outbox = self.outbox
        if outbox.urgent:
            outbox.now()
        return n

    def new_cell(self) -> Cell:
        cell: Cell = [None]
        self.cells.append(cell)
        return cell

    def fill(self, cell: Cell, data: bytes) -> None:
        """A reply is ready: send it, and every reply after it that was waiting for it."""
        cell[0] = data
        cells = self.cells
        if cells and cells[0] is cell:
            out = self._out
            while cells and cells[0][0] is not None:
                out.append(cells.popleft()[0])
            if not self._queued:
                self._queued = True
                self.outbox.add(self)
            if self._read_paused and len(cells) < MAX_CELLS // 2 and not self._halt \
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
            if self.transport is not None and not self._closing:
                data = out[0] if len(out) == 1 else b"".join(out)
                self.router.stats.net_output_bytes += len(data)
                self.transport.write(data)
        if self._close_after and not self.cells:
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
        if not self.cells and not self._queued:
            self.close()

    def on_unblocked(self, reply: bytes) -> None:
        """Unused: a router's blocked reads end through router.forward.BlockedRead."""
