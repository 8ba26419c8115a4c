"""Writes batched per loop iteration: what the router relays leaves once per connection.

A request relayed at once costs a write system call on the upstream connection, and a reply
relayed at once costs one on the client's socket. With many clients, one loop iteration reads
requests from many sockets for the same node, and replies for many requests of one client
from the same node read; writing each as it comes would cost a system call per request in each
direction, and the node would read them one by one instead of as a pipeline. So connections
(router/upstream.py `Upstream`, router/client.py `ClientConn`) queue their bytes and register
here; at the end of the iteration (a `call_soon` callback, which runs before the loop waits
again) each writes what it queued in one call.

Batching pays only when there is something to batch with. A delivery crosses the router twice
(the request in, the reply out), and at the end of the iteration its bytes would also wait for
every other socket that became readable in the same poll. So two cases leave at once (`now`):
- a request to a connection with nothing in flight (`urgent`, router/upstream.py): the node is
  idle and would wait for it; the client connection that read it writes before returning
  (router/client.py). A busy connection keeps batching, which is where throughput comes from.
- replies: what one read from a node answered leaves when that read is handled
  (router/upstream.py); a client's replies from one read are one write either way.
Each read callback holds the outbox (`hold`), so that what leaves at its end asks for no
end-of-iteration callback; only what it left queued does.
"""

from __future__ import annotations

import asyncio

__all__ = ["Outbox", "Writer"]


class Writer:
    """What registers with the outbox (router/upstream.py `Upstream`, router/client.py
    `ReplyWriter`): flush() writes what it queued. Compiled (router/outbox.pxd) it is a C base
    class, so the outbox calls each flush as C."""

    __slots__ = ()

    def flush(self) -> None:
        raise NotImplementedError


class Outbox:
    """The connections with bytes queued in this loop iteration."""

    __slots__ = ("loop", "pending", "scheduled", "urgent")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[Writer] = []
        self.scheduled = False
        self.urgent = False  # a request for an idle node is queued: write now, not at the end

    def add(self, w: Writer) -> None:
        """`w` queued bytes: its flush() runs at the end of this loop iteration (once; a
        connection registers again only after its flush)."""
        self.pending.append(w)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.run)

    def hold(self) -> bool:
        """For the length of one read callback that flushes or schedules what it queued at its
        end (router/upstream.py, router/client.py): `add` asks for no end-of-iteration
        callback meanwhile, as when one is already asked for. Returns whether this call holds
        (False: held or scheduled already), for `unhold`. At low load a read queues one
        write, which leaves at once (`urgent`, or a node read's replies): asked for per add,
        the callback ran for nothing on most loop iterations."""
        if self.scheduled:
            return False
        self.scheduled = True
        return True

    def unhold(self, held: bool) -> None:
        """The end of a `hold`: what is still queued gets its end-of-iteration callback."""
        if held:
            if self.pending:
                self.loop.call_soon(self.run)
            else:
                self.scheduled = False

    def run(self) -> None:
        self.scheduled = False
        self.now()

    def now(self) -> None:
        """Write everything queued so far, without waiting for the end of the iteration (the
        callback still runs then, for what is queued after this)."""
        self.urgent = False
        pending, self.pending = self.pending, []
        for w in pending:
            w.flush()
