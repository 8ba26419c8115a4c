"""The cluster's state in etcd (DESIGN §2), as typed records and guarded transactions.

Everything lives under `/xshard/<cluster>/`:

    nodes/<node-id>      {"id","host","port","shard","role"}   on the node's lease
    routers/<router-id>  {"id","host","port"}                   on the router's lease
    shards/<shard-id>    {"primary","replicas":[...],"epoch"}   permanent, epoch +1 per change
    slots                [[start,end,shard-id],...]              permanent, covers 0..16383
    migrations/<slot>    {"from","to","state"}                  while a slot moves
    controller/leader    the leader controller's id             on the leader's lease

Every write here is one etcd transaction whose compares name the mod_revision (0: absent) that
the writer read, so a decision made on stale state fails instead of overwriting someone
else's. Readers get a `View`: the whole prefix read at one revision, which is small (a few
records per shard) and makes every decision level-triggered: re-read, compare, act.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlparse

import aetcd
import aetcd.exceptions

from node.slots import SLOTS

log = logging.getLogger("xshard.store")

T = TypeVar("T")

NODE_TTL = 3  # seconds; DESIGN §2
KEEPALIVE_INTERVAL = 1.0
RPC_TIMEOUT = 2

EtcdError = aetcd.exceptions.ClientError


class Unreachable(RuntimeError):
    """etcd did not answer; the message is one line for the user."""


# --- records ------------------------------------------------------------------------------------

@dataclass
class NodeRecord:
    id: str
    host: str
    port: int
    shard: str
    role: str = "replica"  # what the node currently is: "primary" or "replica"

    def encode(self) -> bytes:
        return json.dumps({"id": self.id, "host": self.host, "port": self.port,
                           "shard": self.shard, "role": self.role}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> NodeRecord:
        v = json.loads(raw)
        return cls(str(v["id"]), str(v["host"]), int(v["port"]), str(v["shard"]),
                   str(v.get("role", "replica")))

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.encode())


@dataclass
class ShardRecord:
    primary: str | None = None
    replicas: list[str] = field(default_factory=list)
    epoch: int = 0

    def encode(self) -> bytes:
        return json.dumps({"primary": self.primary, "replicas": self.replicas,
                           "epoch": self.epoch}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ShardRecord:
        v = json.loads(raw)
        return cls(v.get("primary"), [str(r) for r in v.get("replicas", [])],
                   int(v.get("epoch", 0)))

    def members(self) -> list[str]:
        """Primary first, then replicas: every node that belongs to the shard."""
        return ([self.primary] if self.primary else []) + [r for r in self.replicas
                                                           if r != self.primary]

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.encode())


@dataclass
class Entry(Generic[T]):
    """A decoded value with the etcd metadata that guards the next write to its key."""
    value: T
    mod: int  # mod_revision: the guard for an update
    create: int = 0
    lease: int = 0


@dataclass
class View:
    """The whole cluster prefix, read at one etcd revision."""
    revision: int = 0
    nodes: dict[str, Entry[NodeRecord]] = field(default_factory=dict)
    routers: dict[str, Entry[dict]] = field(default_factory=dict)
    shards: dict[str, Entry[ShardRecord]] = field(default_factory=dict)
    slots: Entry[list] | None = None
    migrations: dict[int, Entry[dict]] = field(default_factory=dict)
    leader: Entry[str] | None = None

    def live(self, node_id: str | None) -> bool:
        return node_id is not None and node_id in self.nodes

    def shard_ids(self) -> list[str]:
        return sorted(self.shards, key=_shard_sort_key)


def _shard_sort_key(s: str) -> tuple[int, int | str]:
    return (0, int(s)) if s.isdigit() else (1, s)


def even_slots(shard_ids: list[str]) -> list[list[Any]]:
    """[[start, end, shard-id], ...] splitting 0..16383 evenly (the first shards get the
    remainder, as redis-cli --cluster create does)."""
    n = len(shard_ids)
    out = []
    start = 0
    for i, sid in enumerate(shard_ids):
        size = SLOTS // n + (1 if i < SLOTS % n else 0)
        out.append([start, start + size - 1, sid])
        start += size
    return out


def parse_url(url: str) -> tuple[str, int]:
    """host, port of the first endpoint in an etcd URL list ("http://h:2379,http://h2:2379")."""
    first = url.split(",")[0].strip()
    if "://" not in first:
        first = "http://" + first
    u = urlparse(first)
    return u.hostname or "127.0.0.1", u.port or 2379


# --- the store ----------------------------------------------------------------------------------

class Store:
    """A typed, asyncio view of one cluster's keys in etcd."""

    def __init__(self, url: str, cluster: str) -> None:
        self.url = url
        self.cluster = cluster
        self.prefix = f"/xshard/{cluster}/".encode()
        host, port = parse_url(url)
        self.client = aetcd.Client(host=host, port=port, timeout=RPC_TIMEOUT)
        self.tx = self.client.transactions

    def key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    async def connect(self, timeout: float = 3.0) -> None:
        """Connect and prove etcd answers; raises Unreachable with a one-line message."""
        try:
            await asyncio.wait_for(self.client.status(), timeout)
        except (TimeoutError, EtcdError, OSError) as e:
            raise Unreachable(f"cannot reach etcd at {self.url} ({type(e).__name__})") from None

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()

    async def __aenter__(self) -> Store:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- reads ---------------------------------------------------------------------------------
    async def view(self) -> View:
        """Every key of the cluster at one revision (one linearizable range read)."""
        r = await self.client.get_prefix(self.prefix)
        v = View(revision=r.header.revision)
        n = len(self.prefix)
        for kv in r:
            name = kv.key[n:].decode()
            try:
                if name.startswith("nodes/"):
                    v.nodes[name[6:]] = Entry(NodeRecord.decode(kv.value), kv.mod_revision,
                                              kv.create_revision, kv.lease)
                elif name.startswith("shards/"):
                    v.shards[name[7:]] = Entry(ShardRecord.decode(kv.value), kv.mod_revision,
                                               kv.create_revision, kv.lease)
                elif name == "slots":
                    v.slots = Entry(json.loads(kv.value), kv.mod_revision, kv.create_revision)
                elif name.startswith("routers/"):
                    v.routers[name[8:]] = Entry(json.loads(kv.value), kv.mod_revision,
                                                kv.create_revision, kv.lease)
                elif name.startswith("migrations/"):
                    v.migrations[int(name[11:])] = Entry(json.loads(kv.value), kv.mod_revision,
                                                         kv.create_revision)
                elif name == "controller/leader":
                    v.leader = Entry(kv.value.decode(), kv.mod_revision, kv.create_revision,
                                     kv.lease)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring malformed etcd value at %s: %s", name, e)
        return v

    # --- guarded writes --------------------------------------------------------------------------
    def guard(self, key: bytes, mod: int) -> Any:
        """The compare for "key is still at the mod_revision I read" (0: still absent)."""
        return self.tx.mod(key) == mod

    async def commit(self, compares: list[Any], puts: list[tuple[bytes, bytes, int]],
                     deletes: tuple[bytes, ...] = ()) -> bool:
        """One transaction: all compares hold -> all puts (key, value, lease) and deletes."""
        ops = [self.tx.put(k, v, lease=lease or None) for k, v, lease in puts]
        ops += [self.tx.delete(k) for k in deletes]
        ok, _ = await self.client.transaction(compare=compares, success=ops, failure=[])
        return bool(ok)

    async def create_cluster(self, shard_ids: list[str]) -> bool:
        """Write the shards and an even slot map once: False when `slots` already exists."""
        compares = [self.guard(self.key("slots"), 0)]
        compares += [self.guard(self.key("shards", s), 0) for s in shard_ids]
        puts = [(self.key("shards", s), ShardRecord().encode(), 0) for s in shard_ids]
        puts.append((self.key("slots"), json.dumps(even_slots(shard_ids)).encode(), 0))
        return await self.commit(compares, puts)

    async def put_shard(self, shard: str, rec: ShardRecord, expect_mod: int,
                        extra: list[Any] = ()) -> bool:
        """Replace a shard record if it is still the one read (plus any extra compares)."""
        return await self.commit([self.guard(self.key("shards", shard), expect_mod), *extra],
                                 [(self.key("shards", shard), rec.encode(), 0)])

    async def put_node(self, rec: NodeRecord, lease: int, expect_mod: int) -> bool:
        """(Re-)register a node on its lease, if its key is still at the revision read."""
        return await self.commit([self.guard(self.key("nodes", rec.id), expect_mod)],
                                 [(self.key("nodes", rec.id), rec.encode(), lease)])

    # --- leases ----------------------------------------------------------------------------------
    async def grant(self, ttl: int = NODE_TTL) -> int:
        return (await self.client.lease(ttl)).id

    async def keepalive(self, lease: int) -> int:
        """Refresh a lease; returns its new TTL (<= 0: the lease is gone)."""
        r = await self.client.refresh_lease(lease)
        return int(r.TTL) if r is not None else 0

    async def revoke(self, lease: int) -> None:
        await self.client.revoke_lease(lease)

    # --- watching --------------------------------------------------------------------------------
    async def views(self, resync: float = 1.0) -> AsyncIterator[View]:
        """The view now and again after every change under the prefix (and at least every
        `resync` seconds, so that a watch lost in a reconnect costs one period, not an
        outage). Errors while etcd is away are logged and retried, never raised."""
        changed = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch_loop(changed))
        failures = 0
        try:
            while True:
                changed.clear()
                try:
                    v = await asyncio.wait_for(self.view(), RPC_TIMEOUT + 1)
                except (TimeoutError, EtcdError, OSError) as e:
                    if failures % 20 == 0:
                        log.warning("etcd read failed (%s); retrying", type(e).__name__)
                    failures += 1
                    await asyncio.sleep(0.3)
                    continue
                if failures:
                    log.info("etcd reachable again after %d failed reads", failures)
                    failures = 0
                yield v
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), resync)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher

    async def _watch_loop(self, changed: asyncio.Event) -> None:
        """Keep one prefix watch open, reconnecting after errors; every event sets `changed`."""
        while True:
            w = None
            try:
                w = await asyncio.wait_for(self.client.watch_prefix(self.prefix), RPC_TIMEOUT + 1)
                changed.set()  # anything may have changed while no watch was open
                async for _event in w:
                    changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any watch failure: reconnect
                log.debug("etcd watch ended (%s); reconnecting", type(e).__name__)
            finally:
                if w is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(w.cancel(), 1)
            await asyncio.sleep(0.3)


def read_view(url: str, cluster: str) -> View:
    """One view, from synchronous code (CLI helpers, tests, benchmarks): connect, read, close."""
    async def go() -> View:
        s = Store(url, cluster)
        try:
            return await s.view()
        finally:
            await s.close()

    return asyncio.run(go())
