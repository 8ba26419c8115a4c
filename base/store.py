"""The cluster's state in etcd, as typed records and guarded transactions.

`BaseStore` is the narrow interface that the agent, the controller, the router and the CLI
use: a consistent `view()` of the cluster prefix, `commit()` of one guarded transaction,
leases (`grant`/`keepalive`/`revoke`) and `views()`, the level-triggered stream of views.
Two implementations: `Store` here (etcd, the real thing) and `MemoryStore`
(base/memstore.py), so controller decisions are unit-tested without etcd.

Every write is one transaction whose compares name the mod_revision (0: absent) that the
writer read, so a decision made on stale state fails instead of overwriting someone else's.
Readers get a `View` (base/records.py): the whole prefix read at one revision, which is
small (a few records per shard) and makes every decision level-triggered: re-read, compare,
act.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions
import aetcd.rpc
import grpc.aio

from base.etcdconn import EtcdConfig
from base.records import (  # noqa: F401 - the records are part of this module's interface
    Compare,
    Entry,
    KeyValue,
    NodeRecord,
    PStreamRecord,
    ShardRecord,
    View,
    even_slots,
)
from base.tasks import cancel_and_wait

log = logging.getLogger("xshard.store")

T = TypeVar("T")

RPC_TIMEOUT = 2

EtcdError = aetcd.exceptions.ClientError

# Errors after which another endpoint (or a fresh connection to the same one) may do better.
_RETRYABLE = (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError,
              aetcd.exceptions.UnauthenticatedError, aetcd.exceptions.InternalError,
              TimeoutError, OSError)


class Unreachable(RuntimeError):
    """etcd did not answer; the message is one line for the user."""


class BaseStore:
    """One cluster's keys (`/xshard/<cluster>/`) in a key-value store with etcd's semantics:
    revisions, leases, transactions and watches. Subclasses provide the primitives."""

    url = ""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.prefix = f"/xshard/{cluster}/".encode()

    def key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    # --- primitives ------------------------------------------------------------------------------
    async def connect(self, timeout: float = 3.0) -> None:
        """Prove the store answers; raises Unreachable with a one-line message."""

    async def close(self) -> None:
        pass

    async def range(self) -> tuple[int, list[KeyValue]]:
        """(revision, every key under the prefix) in one linearizable read."""
        raise NotImplementedError

    async def commit(self, compares: list[Compare], puts: list[tuple[bytes, bytes, int]],
                     deletes: tuple[bytes, ...] = ()) -> bool:
        """One transaction: all compares hold -> all puts (key, value, lease) and deletes."""
        raise NotImplementedError

    async def grant(self, ttl: int) -> int:
        raise NotImplementedError

    async def keepalive(self, lease: int) -> int:
        """Refresh a lease; returns its new TTL (<= 0: the lease is gone)."""
        raise NotImplementedError

    async def revoke(self, lease: int) -> None:
        raise NotImplementedError

    async def watch(self, changed: asyncio.Event) -> None:
        """Set `changed` on every change under the prefix (and once a watch is (re)opened,
        since anything may have changed while none was); runs until cancelled."""
        raise NotImplementedError

    # --- shared --------------------------------------------------------------------------------
    async def __aenter__(self) -> BaseStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def view(self) -> View:
        """Every key of the cluster at one revision."""
        rev, kvs = await self.range()
        return View.decode(rev, self.prefix, kvs)

    def guard(self, key: bytes, mod: int) -> Compare:
        """The compare for "key is still at the mod_revision I read" (0: still absent)."""
        return Compare(key, "mod", mod)

    def created(self, key: bytes, rev: int) -> Compare:
        """The compare for "key was created at revision `rev`" (0: absent): a leader key's
        identity, as etcd's Election compares on it."""
        return Compare(key, "create", rev)

    async def create_cluster(self, shard_ids: list[str]) -> bool:
        """Write the shards and an even slot map once: False when `slots` already exists."""
        compares = [self.guard(self.key("slots"), 0)]
        compares += [self.guard(self.key("shards", s), 0) for s in shard_ids]
        puts = [(self.key("shards", s), ShardRecord().encode(), 0) for s in shard_ids]
        puts.append((self.key("slots"), json.dumps(even_slots(shard_ids)).encode(), 0))
        return await self.commit(compares, puts)

    async def put_shard(self, shard: str, rec: ShardRecord, expect_mod: int,
                        extra: list[Compare] = ()) -> bool:
        """Replace a shard record if it is still the one read (plus any extra compares)."""
        return await self.commit([self.guard(self.key("shards", shard), expect_mod), *extra],
                                 [(self.key("shards", shard), rec.encode(), 0)])

    async def put_node(self, rec: NodeRecord, lease: int, expect_mod: int) -> bool:
        """(Re-)register a node on its lease, if its key is still at the revision read."""
        return await self.commit([self.guard(self.key("nodes", rec.id), expect_mod)],
                                 [(self.key("nodes", rec.id), rec.encode(), lease)])

    async def put_pstream(self, name: str, rec: PStreamRecord, expect_mod: int) -> bool:
        """Create (expect_mod 0) or replace a partitioned stream's record, if it is still the
        one read."""
        return await self.commit([self.guard(self.key("pstreams", name), expect_mod)],
                                 [(self.key("pstreams", name), rec.encode(), 0)])

    async def delete_pstream(self, name: str, expect_mod: int) -> bool:
        """Remove a partitioned stream's record, if it is still the one read."""
        return await self.commit([self.guard(self.key("pstreams", name), expect_mod)], [],
                                 (self.key("pstreams", name),))

    async def views(self, resync: float = 1.0,
                    reread: float | None = None) -> AsyncIterator[View]:
        """The view now and again after every change under the prefix, and at least every
        `resync` seconds. A view is read from etcd after a change, and otherwise once it is
        `reread` seconds old (default: `resync`; every yield reads), so that a watch lost in a
        reconnect costs one period, not an outage. A caller that acts on a clock of its own
        (the controller's probes) yields often and reads rarely: a read is a gRPC call,
        ~0.7 ms of the caller's CPU and some of etcd's. Errors while the store is away are
        logged and retried, never raised."""
        reread = resync if reread is None else reread
        changed = asyncio.Event()
        watcher = asyncio.ensure_future(self.watch(changed))
        failures = 0
        v: View | None = None
        read_at = 0.0
        try:
            while True:
                if v is None or changed.is_set() or time.monotonic() - read_at >= reread:
                    changed.clear()
                    started = time.monotonic()
                    try:
                        v = await asyncio.wait_for(self.view(), RPC_TIMEOUT + 1)
                    except (TimeoutError, EtcdError, OSError) as e:
                        if failures % 20 == 0:
                            log.warning("etcd read failed (%s); retrying", type(e).__name__)
                        failures += 1
                        v = None
                        await asyncio.sleep(0.3)
                        continue
                    read_at = started
                    if failures:
                        log.info("etcd reachable again after %d failed reads", failures)
                        failures = 0
                yield v
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), resync)
        finally:
            await cancel_and_wait(watcher)


class Store(BaseStore):
    """The cluster in a real etcd, over aetcd (gRPC). With several endpoints it talks to one
    at a time and moves on to the next when a call fails for a reason another member (or a
    fresh connection) may not have: unreachable, timed out, or an expired auth token."""

    def __init__(self, conn: EtcdConfig | str, cluster: str) -> None:
        super().__init__(cluster)
        self.conn = conn if isinstance(conn, EtcdConfig) else EtcdConfig.parse(conn)
        self.url = self.conn.url
        self._index = 0
        self.client = self.conn.client(0, RPC_TIMEOUT)
        self._closing: set = set()  # old clients' delayed closes
        # lease -> (the client it was opened on, its LeaseKeepAlive stream): see keepalive()
        self._keepalives: dict[int, tuple[aetcd.Client, Any]] = {}

    async def _call(self, op: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """Run `op` on the current endpoint; on a retryable failure try each other endpoint
        once (a single endpoint gets one fresh connection after an auth-token error)."""
        tries = max(len(self.conn.endpoints), 2)
        for attempt in range(tries):
            client = self.client
            try:
                return await op(client)
            except _RETRYABLE as e:
                single = len(self.conn.endpoints) == 1
                if attempt == tries - 1 or single and not isinstance(
                        e, aetcd.exceptions.UnauthenticatedError):
                    raise
                await self._next_endpoint(client, e)
        raise AssertionError("unreachable")

    async def _next_endpoint(self, failed: aetcd.Client, why: BaseException) -> None:
        if self.client is not failed:
            return  # another call moved on already
        self._index = (self._index + 1) % len(self.conn.endpoints)
        self.client = self.conn.client(self._index, RPC_TIMEOUT)
        if len(self.conn.endpoints) > 1:
            h, p = self.conn.endpoints[self._index]
            log.warning("etcd: %s; switching to %s:%d", type(why).__name__, h, p)
        # Close the old channel only once the calls still in flight on it have ended: gRPC
        # cancels them on close, and that cancellation would reach their callers as an
        # asyncio.CancelledError (a lease keep-alive task would end silently).
        loop = asyncio.get_running_loop()
        self._closing = {t for t in self._closing
                         if not (isinstance(t, asyncio.TimerHandle) and t.when() <= loop.time())}
        self._closing.add(loop.call_later(RPC_TIMEOUT + 1, self._close_later, failed))

    def _close_later(self, client: aetcd.Client) -> None:
        async def close() -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 1)

        t = asyncio.ensure_future(close())
        self._closing.add(t)
        t.add_done_callback(self._closing.discard)

    async def connect(self, timeout: float = 3.0) -> None:
        """Read the cluster prefix once: proves that etcd answers and lets us in (auth)."""
        try:
            await asyncio.wait_for(self.range(), timeout)
        except (aetcd.exceptions.InvalidArgumentError, aetcd.exceptions.UnauthenticatedError,
                aetcd.exceptions.PreconditionFailedError) as e:
            detail = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            raise Unreachable(f"etcd at {self.url} refused access ({detail}); check "
                              "--etcd-user and --etcd-password") from None
        except (TimeoutError, EtcdError, OSError) as e:
            detail = str(e).splitlines()[0][:120] if str(e) else ""
            why = type(e).__name__ + (f": {detail}" if detail and not isinstance(
                e, (aetcd.exceptions.ConnectionFailedError, TimeoutError)) else "")
            raise Unreachable(f"cannot reach etcd at {self.url} ({why})") from None

    async def close(self) -> None:
        for lease in list(self._keepalives):
            self._drop_keepalive(lease)
        for t in list(self._closing):
            t.cancel()
        with contextlib.suppress(Exception):
            await self.client.close()

    async def range(self) -> tuple[int, list[KeyValue]]:
        r = await self._call(lambda c: c.get_prefix(self.prefix))
        return r.header.revision, [KeyValue(kv.key, kv.value, kv.mod_revision,
                                            kv.create_revision, kv.lease) for kv in r]

    async def commit(self, compares: list[Compare], puts: list[tuple[bytes, bytes, int]],
                     deletes: tuple[bytes, ...] = ()) -> bool:
        async def op(c: aetcd.Client) -> bool:
            tx = c.transactions
            conds = [(tx.mod(k) if t == "mod" else tx.create(k)) == v for k, t, v in
                     ((x.key, x.target, x.value) for x in compares)]
            ops: list[Any] = [tx.put(k, v, lease=lease or None) for k, v, lease in puts]
            ops += [tx.delete(k) for k in deletes]
            ok, _ = await c.transaction(compare=conds, success=ops, failure=[])
            return bool(ok)

        # A transaction that timed out may have been applied: retrying it on another endpoint
        # is still safe, because its compares fail if the first attempt went through.
        return await self._call(op)

    async def grant(self, ttl: int) -> int:
        return (await self._call(lambda c: c.lease(ttl))).id

    async def keepalive(self, lease: int) -> int:
        """Refresh a lease over one LeaseKeepAlive stream kept open per lease: a stream
        opened per keep-alive (aetcd's refresh_lease) cost every process that holds a lease
        ~1.5 ms of CPU a second more. One request is in flight on a stream at a time, and a
        stream that failed or whose call was cancelled is dropped, never read again: the
        reply read always answers the request just sent, which the fence dates a primary's
        freshness from (base/lease.py)."""
        async def op(c: aetcd.Client) -> int:
            held = self._keepalives.get(lease)
            if held is None or held[0] is not c:
                self._drop_keepalive(lease)
                await c.connect()
                held = self._keepalives[lease] = (c, c.leasestub.LeaseKeepAlive(
                    metadata=c.metadata))
            call = held[1]
            try:
                await call.write(aetcd.rpc.LeaseKeepAliveRequest(ID=lease))
                r = await call.read()
            except BaseException as e:
                self._drop_keepalive(lease)
                if isinstance(e, aetcd.rpc.AioRpcError):
                    aetcd.exceptions._handle_exception(e)  # raises the mapped client error
                if isinstance(e, asyncio.InvalidStateError):  # the stream ended under us
                    raise ConnectionAbortedError("lease keep-alive stream closed") from None
                raise
            if r is grpc.aio.EOF:
                self._drop_keepalive(lease)
                raise ConnectionAbortedError("lease keep-alive stream closed")
            return int(r.TTL)

        return await self._call(op)

    def _drop_keepalive(self, lease: int) -> None:
        held = self._keepalives.pop(lease, None)
        if held is not None:
            held[1].cancel()

    async def revoke(self, lease: int) -> None:
        self._drop_keepalive(lease)
        await self._call(lambda c: c.revoke_lease(lease))

    async def watch(self, changed: asyncio.Event) -> None:
        """Keep one prefix watch open, reconnecting (to the next endpoint) after errors."""
        while True:
            w = None
            client = self.client
            try:
                w = await asyncio.wait_for(client.watch_prefix(self.prefix), RPC_TIMEOUT + 1)
                changed.set()  # anything may have changed while no watch was open
                async for _event in w:
                    changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any watch failure: reconnect
                log.debug("etcd watch ended (%s); reconnecting", type(e).__name__)
                if isinstance(e, _RETRYABLE) and len(self.conn.endpoints) > 1:
                    await self._next_endpoint(client, e)
            finally:
                if w is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(w.cancel(), 1)
            await asyncio.sleep(0.3)


def read_view(url: str | EtcdConfig, cluster: str) -> View:
    """One view, from synchronous code (CLI helpers, tests, benchmarks): connect, read, close."""
    async def go() -> View:
        s = Store(url, cluster)
        try:
            return await s.view()
        finally:
            await s.close()

    return asyncio.run(go())
