"""Pausing writes to some keys or slots, as Redis's CLIENT PAUSE WRITE does for all of them.

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
    from node.client import Client
    from node.server import Server

PAUSED = b"\x00paused"  # the pseudo key postponed clients wait on


class WritePauses:
    """`server.pauses`: reference-counted paused keys and slots."""

    __slots__ = ("server", "keys", "slots", "longest_ms", "_since")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.keys: dict[bytes, int] = {}
        self.slots: dict[int, int] = {}
        self.longest_ms = 0.0  # the longest time any slot stayed paused (INFO, benchmarks)
        self._since: dict[int, float] = {}

    def __bool__(self) -> bool:
        return bool(self.keys or self.slots)

    # --- pausing --------------------------------------------------------------------------------
    def pause_keys(self, keys: list[bytes]) -> None:
        for k in keys:
            self.keys[k] = self.keys.get(k, 0) + 1

    def resume_keys(self, keys: list[bytes]) -> None:
        for k in keys:
            n = self.keys.get(k, 0) - 1
            if n > 0:
                self.keys[k] = n
            else:
                self.keys.pop(k, None)
        self._release()

    def pause_slot(self, slot: int) -> None:
        n = self.slots.get(slot, 0)
        self.slots[slot] = n + 1
        if not n:
            self._since[slot] = time.perf_counter()

    def resume_slot(self, slot: int) -> float:
        """End one pause of `slot`; returns how long the slot was paused (ms) when it ends."""
        n = self.slots.get(slot, 0) - 1
        if n > 0:
            self.slots[slot] = n
            return 0.0
        self.slots.pop(slot, None)
        t0 = self._since.pop(slot, None)
        ms = (time.perf_counter() - t0) * 1000 if t0 is not None else 0.0
        self.longest_ms = max(self.longest_ms, ms)
        self._release()
        return ms

    def _release(self) -> None:
        blocking = self.server.blocking
        blocking.signal_ready(PAUSED)
        blocking.serve_ready()

    # --- the check in the dispatch --------------------------------------------------------------
    def holds(self, c: Client, argv: list[bytes], name: bytes) -> bool:
        """True when this command is a write that must wait (EXEC: one of its writes)."""
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
