"""The node-local half of moving a slot: what a source sends and what it drops.

The move itself is driven from etcd (control/slotmover.py): the source primary copies the
slot's keys to the target primary as RESTORE-ASKING commands, then forwards the effects of
every later write to the slot (`SlotTap`), so the target applies the same deterministic
commands the source's replicas get. The target applies them as ordinary commands, so its
own effect stream (AOF, replicas) carries the imported data. For the switch the source
pauses the slot's writes (node/writepause.py), drains the link, commits the flip in etcd,
drops the keys (`drop_slot`: DELs, so its replicas drop them too) and answers -MOVED,
also to clients that were blocked on a key of the slot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from node import command_table, rdb
from node.slots import key_slot

if TYPE_CHECKING:
    from node.server import Server

_FLUSH = frozenset((b"flushall", b"flushdb"))


class MoveStats:
    """`server.move_stats`: what this node sent as a slot-move source (INFO cluster)."""

    __slots__ = ("running", "done", "keys", "bytes", "effects", "last_pause_ms")

    def __init__(self) -> None:
        self.running = 0
        self.done = 0
        self.keys = 0
        self.bytes = 0
        self.effects = 0
        self.last_pause_ms = 0.0

    def fields(self, longest_pause_ms: float) -> list[tuple[str, object]]:
        return [("slot_moves_running", self.running), ("slot_moves_done", self.done),
                ("slot_move_keys_sent", self.keys), ("slot_move_bytes_sent", self.bytes),
                ("slot_move_effects_sent", self.effects),
                ("slot_move_last_pause_ms", f"{self.last_pause_ms:.2f}"),
                ("slot_move_longest_pause_ms", f"{longest_pause_ms:.2f}")]


def slot_keys(server: Server, slot: int) -> list[bytes]:
    """The keys of one slot (a scan: the key space keeps no per-slot index)."""
    return [k for k in server.db.data if key_slot(k) == slot]


def restore_commands(server: Server, slot: int) -> list[list[bytes]]:
    """RESTORE-ASKING of every live key of the slot, with its absolute expiry (ABSTTL), as
    one consistent image: call it in the same loop turn as the tap is installed."""
    db = server.db
    out = []
    for key in slot_keys(server, slot):
        v = db.get(key)  # expires a key that is due (its DEL effect reaches the tap)
        if v is None:
            continue
        when = db.expires.get(key)
        cmd = [b"RESTORE-ASKING", key, b"%d" % (when or 0), rdb.dump_payload(v), b"REPLACE"]
        if when:
            cmd.append(b"ABSTTL")
        out.append(cmd)
    return out


class SlotTap:
    """Forwards every effect that touches `slot` to `send` (installed in Server.taps).

    Effects without keys that wipe data (FLUSHALL) cannot be forwarded per slot: `broken`
    is set and the move starts over."""

    def __init__(self, slot: int, send: Callable[[list[bytes]], None]) -> None:
        self.slot = slot
        self.send = send
        self.broken = False
        self.forwarded = 0

    def __call__(self, argv: list[bytes]) -> None:
        name = argv[0].lower()
        if name in _FLUSH:
            self.broken = True
            return
        positions = command_table.get_keys(argv)
        if positions and key_slot(argv[positions[0]]) == self.slot:
            self.forwarded += 1
            self.send(argv)


def drop_slot(server: Server, slot: int, moved: bytes) -> int:
    """After the flip: delete the slot's keys (as DEL effects) and give the clients blocked
    on them `moved` (a -MOVED reply). Returns the number of keys dropped."""
    blocking = server.blocking
    for key, q in list(blocking.waiting.items()) if moved else ():
        if key[:1] != b"\x00" and key_slot(key) == slot:
            for c in list(q):
                blocking.unblock(c, moved)
    n = 0
    for key in slot_keys(server, slot):
        del server.db.data[key]
        server.db.expires.pop(key, None)
        server.db.changed(key)
        server.propagate([b"DEL", key])
        n += 1
    return n
