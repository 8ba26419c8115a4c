"""The key space of one node: values, expiry, WATCH invalidation and ready keys.

Values are typed by their Python class: `Stream` for streams, `bytes` for strings, `deque` for
lists and `set` for sets (the non-stream types exist so that mixed workloads produce WRONGTYPE).

Like Redis in cluster mode, the key space keeps the keys of each hash slot (`slots`): moving a
slot, dropping one and CLUSTER COUNTKEYSINSLOT/GETKEYSINSLOT then touch that slot's keys only,
never the whole key space. It changes only when a key is created or removed (an XADD to an
existing stream does not touch it).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from node import errors
from node.resp import ReplyError
from node.slots import key_slot
from node.stream import Stream

if TYPE_CHECKING:
    from node.client import Client
    from node.context import DataContext

TYPE_NAMES: dict[type, bytes] = {Stream: b"stream", bytes: b"string", deque: b"list", set: b"set"}


def type_name(value: Any) -> bytes:
    return TYPE_NAMES.get(type(value), b"none")


class Keyspace:
    __slots__ = ("data", "expires", "watchers", "server", "expired_keys", "_expire_cursor",
                 "slots", "expiry_paused", "_waiting")

    def __init__(self, server: DataContext) -> None:
        self.data: dict[bytes, Any] = {}
        self.slots: dict[int, set[bytes]] = {}  # hash slot -> its keys (only non-empty slots)
        self.expires: dict[bytes, int] = {}  # key -> unix ms
        self.watchers: dict[bytes, set[Client]] = {}
        self.server = server
        self.expired_keys = 0
        # True during a CLIENT PAUSE (node/writepause.py): expiry stops, as on a replica, so
        # the effect stream stands still while a switchover waits for the replica.
        self.expiry_paused = False
        self._expire_cursor: Iterator[tuple[bytes, int]] = iter(())
        # The blocking manager's never-replaced dict of waiting clients by key, taken at the
        # first write (the server makes its key space before its blocking manager).
        self._waiting: Mapping[bytes, object] | None = None

    # --- lookup -----------------------------------------------------------------------------
    def get(self, key: bytes) -> Any:
        v = self.data.get(key)
        if v is not None and self.expires and key in self.expires:
            if self.expires[key] <= self.server.now_ms():
                if self.server.role == "slave" or self.expiry_paused:
                    return self._replica_expired(v)
                self._expire(key)
                return None
        return v

    def _replica_expired(self, v: Any) -> Any:
        """A replica never expires keys itself (its primary's DEL effect does): a logically
        expired key reads as missing, but the primary's own commands still see it. A paused
        primary does the same."""
        return v if self.server.effects.replaying else None

    def get_stream(self, key: bytes) -> Stream | None:
        # get() inlined: every stream command starts here.
        v = self.data.get(key)
        if v is None:
            return None
        expires = self.expires
        if expires and key in expires and expires[key] <= self.server.now_ms():
            if self.server.role == "slave" or self.expiry_paused:
                v = self._replica_expired(v)
                if v is None:
                    return None
            else:
                self._expire(key)
                return None
        if type(v) is Stream:
            return v
        raise ReplyError(errors.WRONGTYPE)

    def get_typed(self, key: bytes, kind: type) -> Any:
        v = self.get(key)
        if v is None or type(v) is kind:
            return v
        raise ReplyError(errors.WRONGTYPE)

    def exists(self, key: bytes) -> bool:
        return self.get(key) is not None

    # --- modification -----------------------------------------------------------------------
    def set(self, key: bytes, value: Any, keep_ttl: bool = False) -> None:
        data = self.data
        if key not in data:
            self._index(key)
        data[key] = value
        if not keep_ttl and self.expires:
            self.expires.pop(key, None)
        self.changed(key, ready=True)

    def delete(self, key: bytes) -> bool:
        if self.get(key) is None:
            return False
        self.remove(key)
        self.changed(key, ready=True)
        return True

    def remove(self, key: bytes) -> None:
        """Take an existing key out (value, expiry, slot index); no signals, no effects."""
        del self.data[key]
        self.expires.pop(key, None)
        slot = key_slot(key)
        keys = self.slots[slot]
        keys.discard(key)
        if not keys:
            del self.slots[slot]

    def _index(self, key: bytes) -> None:
        slot = key_slot(key)
        keys = self.slots.get(slot)
        if keys is None:
            self.slots[slot] = {key}
        else:
            keys.add(key)

    def load(self, data: dict[bytes, Any], expires: dict[bytes, int]) -> None:
        """Add loaded keys in bulk (a snapshot, a full sync): values, expiries and the index."""
        self.data.update(data)
        self.expires.update(expires)
        for key in data:
            self._index(key)

    def keys_in_slot(self, slot: int) -> list[bytes]:
        """The keys of one hash slot (expired ones included until they are removed)."""
        return list(self.slots.get(slot, ()))

    def count_in_slot(self, slot: int) -> int:
        keys = self.slots.get(slot)
        return len(keys) if keys else 0

    def changed(self, key: bytes, ready: bool = False) -> None:
        """Every modification calls this: it breaks WATCHes and can wake blocked readers."""
        if self.watchers:
            w = self.watchers.get(key)
            if w:
                for c in w:
                    c.dirty_cas = True
        if ready:
            waiting = self._waiting
            if waiting is None:
                waiting = self._waiting = self.server.blocking.waiting
            if waiting:  # (signal_ready is a no-op with nobody waiting: no call per write)
                self.server.blocking.signal_ready(key)

    def flush(self) -> int:
        n = len(self.data)
        for key in list(self.watchers):
            if key in self.data:
                self.changed(key)
        keys = list(self.data)
        self.data.clear()
        self.expires.clear()
        self.slots.clear()
        for key in keys:
            self.server.blocking.signal_ready(key)
        return n

    # --- expiry -----------------------------------------------------------------------------
    def set_expire(self, key: bytes, when_ms: int) -> None:
        self.expires[key] = when_ms
        self.changed(key)

    def _expire(self, key: bytes) -> None:
        self.remove(key)
        self.expired_keys += 1
        self.changed(key, ready=True)
        self.server.propagate([b"DEL", key])

    def active_expire(self, budget_s: float = 0.001) -> None:
        """Redis's active expiry cycle: look at a bounded number of keys with a TTL per call,
        resuming where the last call stopped, so it never stalls the loop however many keys
        have a TTL (lazy expiry on access covers the rest)."""
        if not self.expires or not self.server.active_expire_enabled or \
                self.server.role == "slave" or self.expiry_paused:
            return
        now = self.server.now_ms()
        deadline = time.perf_counter() + budget_s
        due = []
        for _ in range(200):
            try:
                key, when = next(self._expire_cursor)
            except (StopIteration, RuntimeError):  # wrapped around, or the dict changed
                self._expire_cursor = iter(self.expires.items())
                break
            if when <= now:
                due.append(key)
        for key in due:
            at = self.expires.get(key)
            if at is not None and at <= now and key in self.data:
                self._expire(key)
            if time.perf_counter() > deadline:
                break

    # --- WATCH ------------------------------------------------------------------------------
    def watch(self, c: Client, key: bytes) -> None:
        self.watchers.setdefault(key, set()).add(c)
        c.watched.add(key)

    def unwatch_all(self, c: Client) -> None:
        for key in c.watched:
            w = self.watchers.get(key)
            if w:
                w.discard(c)
                if not w:
                    del self.watchers[key]
        c.watched.clear()
        c.dirty_cas = False
