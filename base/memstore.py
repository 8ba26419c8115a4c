"""An in-memory etcd behind the store interface: controller decisions tested without etcd.

`MemoryEtcd` is the server: keys with create/mod revisions, one revision per transaction,
leases that expire on a clock, and watchers. `MemoryStore` is one client of it (a controller,
an agent, a test), with the same methods as the etcd `Store`. As in kvrocks-controller's
tests, a controller runs its real code against it; a test moves the clock to expire leases,
takes the server down (`down = True`: every call fails as an unreachable etcd does) or mutes
the watch (`silent = True`) to check that decisions are level-triggered.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aetcd.exceptions

from base.records import Compare, KeyValue
from base.store import BaseStore


@dataclass
class _Lease:
    ttl: int
    deadline: float
    keys: set[bytes] = field(default_factory=set)


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class MemoryEtcd:
    """One etcd server's key space, leases and watches, in this process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.revision = 1
        self.kvs: dict[bytes, KeyValue] = {}
        self.leases: dict[int, _Lease] = {}
        self._ids = itertools.count(0x1000)
        self._watchers: set[asyncio.Event] = set()
        self.down = False  # every call fails, like an unreachable etcd
        self.silent = False  # changes wake no watcher (a watch lost in a reconnect)
        self.txns = 0  # transactions attempted (tests count decisions)

    # --- server side -----------------------------------------------------------------------------
    def _check(self) -> None:
        if self.down:
            raise aetcd.exceptions.ConnectionFailedError("etcd is down (MemoryEtcd.down)")
        self.expire()

    def expire(self) -> None:
        """Drop every lease whose deadline passed, with its keys (one revision each)."""
        now = self.clock()
        for lid in [i for i, le in self.leases.items() if le.deadline <= now]:
            self._drop_lease(lid)

    def _drop_lease(self, lid: int) -> None:
        le = self.leases.pop(lid, None)
        if le is None:
            return
        gone = [k for k in le.keys if k in self.kvs and self.kvs[k].lease == lid]
        if gone:
            self.revision += 1
            for k in gone:
                del self.kvs[k]
            self._notify()

    def _notify(self) -> None:
        if not self.silent:
            for ev in self._watchers:
                ev.set()

    def _holds(self, c: Compare) -> bool:
        kv = self.kvs.get(c.key)
        have = 0 if kv is None else (kv.mod if c.target == "mod" else kv.create)
        return have == c.value

    def txn(self, compares: list[Compare], puts: list[tuple[bytes, bytes, int]],
            deletes: tuple[bytes, ...] = ()) -> bool:
        self._check()
        self.txns += 1
        if not all(self._holds(c) for c in compares):
            return False
        for _k, _v, lease in puts:
            if lease and lease not in self.leases:
                raise aetcd.exceptions.ClientError("etcdserver: requested lease not found")
        if not puts and not any(k in self.kvs for k in deletes):
            return True
        self.revision += 1
        rev = self.revision
        for k, v, lease in puts:
            old = self.kvs.get(k)
            if old is not None and old.lease and old.lease != lease and old.lease in self.leases:
                self.leases[old.lease].keys.discard(k)
            self.kvs[k] = KeyValue(k, v, rev, old.create if old else rev, lease)
            if lease:
                self.leases[lease].keys.add(k)
        for k in deletes:
            self.kvs.pop(k, None)
        self._notify()
        return True

    def range(self, prefix: bytes) -> tuple[int, list[KeyValue]]:
        self._check()
        return self.revision, [kv for k, kv in sorted(self.kvs.items()) if k.startswith(prefix)]

    def grant(self, ttl: int) -> int:
        self._check()
        lid = next(self._ids)
        self.leases[lid] = _Lease(ttl, self.clock() + ttl)
        return lid

    def keepalive(self, lid: int) -> int:
        self._check()
        le = self.leases.get(lid)
        if le is None:
            return 0
        le.deadline = self.clock() + le.ttl
        return le.ttl

    def revoke(self, lid: int) -> None:
        self._check()
        self._drop_lease(lid)

    def subscribe(self, ev: asyncio.Event) -> Callable[[], None]:
        self._watchers.add(ev)
        return lambda: self._watchers.discard(ev)


class MemoryStore(BaseStore):
    """A client of a MemoryEtcd for one cluster: the interface of control/store.Store."""

    def __init__(self, etcd: MemoryEtcd, cluster: str) -> None:
        super().__init__(cluster)
        self.etcd = etcd
        self.url = "memory://"

    async def connect(self, timeout: float = 3.0) -> None:
        from base.store import Unreachable

        if self.etcd.down:
            raise Unreachable(f"cannot reach etcd at {self.url} (ConnectionFailedError)")

    async def range(self) -> tuple[int, list[KeyValue]]:
        await asyncio.sleep(0)  # a real call yields to the loop; so does this one
        return self.etcd.range(self.prefix)

    async def commit(self, compares: list[Compare], puts: list[tuple[bytes, bytes, int]],
                     deletes: tuple[bytes, ...] = ()) -> bool:
        await asyncio.sleep(0)
        return self.etcd.txn(compares, puts, deletes)

    async def grant(self, ttl: int) -> int:
        await asyncio.sleep(0)
        return self.etcd.grant(ttl)

    async def keepalive(self, lease: int) -> int:
        await asyncio.sleep(0)
        return self.etcd.keepalive(lease)

    async def revoke(self, lease: int) -> None:
        await asyncio.sleep(0)
        self.etcd.revoke(lease)

    async def watch(self, changed: asyncio.Event) -> None:
        changed.set()
        unsubscribe = self.etcd.subscribe(changed)
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            unsubscribe()
