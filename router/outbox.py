"""Writes batched per loop iteration: what the router relays leaves once per connection.

A request relayed at once costs a write system call on the upstream connection, and a reply
relayed at once costs one on the client's socket. With many clients, one loop iteration reads
requests from many sockets for the same node, and replies for many requests of one client
from the same node read; writing each as it comes would cost a system call per request in each
direction, and the node would read them one by one instead of as a pipeline. So connections
(router/upstream.py `Upstream`, router/client.py `ClientConn`) queue their bytes and register
here; at the end of the iteration (a `call_soon` callback, which runs before the loop waits
again) each writes what it queued in one call. This adds no waiting: the callback runs before
the loop polls for more input.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["Outbox", "Writer"]


class Writer(Protocol):
    def flush(self) -> None: ...


class Outbox:
    """The connections with bytes queued in this loop iteration."""

    __slots__ = ("loop", "pending", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[Writer] = []
        self.scheduled = False

    def add(self, w: Writer) -> None:
        """`w` queued bytes: its flush() runs at the end of this loop iteration (once; a
        connection registers again only after its flush)."""
        self.pending.append(w)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.run)

    def run(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        for w in pending:
            w.flush()
