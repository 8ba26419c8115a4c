"""Pausing writes: to some keys or slots, or to all of them (CLIENT PAUSE).

CLIENT PAUSE timeout [WRITE|ALL] and CLIENT UNPAUSE have Redis's semantics: a paused client
waits and gets no error; a second pause keeps the later end and the stricter mode; while writes
are paused, keys are not expired (a read of an expired key answers as if it were gone, as on a
replica), so the effect stream stands still. `xshard failover` without --force uses it for a
planned switchover (control/switchover.py): once the replica has caught up and etcd names it,
the released writes run again here and are answered -MOVED to the new primary.

MIGRATE pauses the keys it moves until the target has acknowledged them (Redis blocks the
whole server instead; we cannot wait on the network inside the loop), and a slot move pauses
its slot for the few milliseconds of the switch. A write that touches a paused key or slot is
*postponed*: the client is parked (node/blocking.py) and, once the pause ends, its command
runs again through the whole dispatch, so a slot that moved meanwhile answers -MOVED. Reads
are never paused. Effects applied from a primary or the AOF (`is_master`) are never paused.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from node import command_table
from node.blocking import Blocked
from node.slots import key_slot

if TYPE_CHECKING:
    import asyncio

    from node.client import Client
    from node.server import Server

PAUSED = b"\x00paused"  # the pseudo key postponed clients wait on
WRITE, ALL = 1, 2  # CLIENT PAUSE modes, the stricter the larger (Redis's pause_type)
_NEVER_PAUSED = frozenset((b"replconf",))  # a replica's ACKs go on in an ALL pause


class WritePauses:
    """`server.pauses`: reference-counted paused keys and slots."""

    __slots__ = ("server", "keys", "slots", "longest_ms", "_since", "mode", "_end", "_timer")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.keys: dict[bytes, int] = {}
        self.slots: dict[int, int] = {}
        self.longest_ms = 0.0  # the longest time any slot stayed paused (INFO, benchmarks)
        self._since: dict[int, float] = {}
        self.mode = 0  # CLIENT PAUSE: 0 (none), WRITE or ALL
        self._end = 0.0  # when the CLIENT PAUSE ends (loop time)
        self._timer: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        return bool(self.keys or self.slots or self.mode)

    @property
    def writes_paused(self) -> bool:
        """A CLIENT PAUSE is on: keys must not expire (the effect stream stands still)."""
        return self.mode != 0

    # --- CLIENT PAUSE / UNPAUSE -----------------------------------------------------------------
    def pause_clients(self, timeout_ms: int, mode: int) -> None:
        """CLIENT PAUSE: the later end and the stricter mode of this and a running pause."""
        loop = self.server.loop
        end = loop.time() + timeout_ms / 1000
        self.mode = max(self.mode, mode)
        self._refresh()
        self.server.db.expiry_paused = True
        if end > self._end:
            self._end = end
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(end, self.unpause_clients)

    def unpause_clients(self) -> None:
        """CLIENT UNPAUSE, or the pause's timeout: the postponed clients run again, in order."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.mode = 0
        self._refresh()
        self._end = 0.0
        self.server.db.expiry_paused = False
        self._release()

    # --- pausing --------------------------------------------------------------------------------
    def pause_keys(self, keys: list[bytes]) -> None:
        for k in keys:
            self.keys[k] = self.keys.get(k, 0) + 1
        self._refresh()

    def resume_keys(self, keys: list[bytes]) -> None:
        for k in keys:
            n = self.keys.get(k, 0) - 1
            if n > 0:
                self.keys[k] = n
            else:
                self.keys.pop(k, None)
        self._refresh()
        self._release()

    def pause_slot(self, slot: int) -> None:
        n = self.slots.get(slot, 0)
        self.slots[slot] = n + 1
        self._refresh()
        if not n:
            self._since[slot] = time.perf_counter()

    def resume_slot(self, slot: int) -> float:
        """End one pause of `slot`; returns how long the slot was paused (ms) when it ends."""
        n = self.slots.get(slot, 0) - 1
        if n > 0:
            self.slots[slot] = n
            return 0.0
        self.slots.pop(slot, None)
        self._refresh()
        t0 = self._since.pop(slot, None)
        ms = (time.perf_counter() - t0) * 1000 if t0 is not None else 0.0
        self.longest_ms = max(self.longest_ms, ms)
        self._release()
        return ms

    def _refresh(self) -> None:
        """Keep `Server.pauses_held` (a C field execute() reads per command) equal to
        bool(self) after every change of the keys, slots or mode."""
        self.server.pauses_held = bool(self.keys or self.slots or self.mode)

    def _release(self) -> None:
        blocking = self.server.blocking
        blocking.signal_ready(PAUSED)
        blocking.serve_ready()

    # --- the check in the dispatch --------------------------------------------------------------
    def holds(self, c: Client, argv: list[bytes], name: bytes) -> bool:
        """True when this command is a write that must wait (EXEC: one of its writes)."""
        if self.mode:
            if c.conn is None:  # the node's own clients (the agent) are never paused
                return False
            if self.mode == ALL:
                return name not in _NEVER_PAUSED
            if name == b"exec":
                return c.in_multi and any(command_table.is_write_argv(a, a[0].lower())
                                          for a in c.multi_queue)
            if command_table.is_write_argv(argv, name):
                return True
        if not (self.keys or self.slots):
            return False
        if name == b"exec":
            return c.in_multi and any(self._touches(a) for a in c.multi_queue
                                      if command_table.is_write_argv(a, a[0].lower()))
        return command_table.is_write_argv(argv, name) and self._touches(argv)

    def _touches(self, argv: list[bytes]) -> bool:
        for p in command_table.get_keys(argv):
            key = argv[p]
            if key in self.keys or (self.slots and key_slot(key) in self.slots):
                return True
        return False

    def postpone(self, c: Client, argv: list[bytes]) -> None:
        """Park the client until a pause ends; its command then runs again from the top."""
        self.server.blocking.block(c, Blocked([PAUSED], 0, argv, postponed=True))
