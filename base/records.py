"""The cluster's records in etcd, as typed values: what every store implementation returns.

Everything lives under `/xshard/<cluster>/`:

    nodes/<node-id>      {"id","host","port","shard","role"}   on the node's lease
                         (+ "tls_port", "metrics_port" when set)
    routers/<router-id>  {"id","host","port"}                   on the router's lease
    shards/<shard-id>    {"primary","replicas":[...],"epoch"}   permanent, epoch +1 per change
    slots                [[start,end,shard-id],...]              permanent, covers 0..16383
    migrations/<slot>    {"from","to","state"}                  while a slot moves
    pstreams/<name>      {"partitions","stride","key_field","keys"}  permanent (a partitioned
                         stream: the routers resolve <name> to its partition keys)
    controller/leader    the leader controller's id             on the leader's lease

Data only: no I/O here, so the etcd store (base/store.py) and the in-memory one
(base/memstore.py) decode into exactly the same `View`.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

# Redis Cluster's hash slots, which the slot map covers (node/slots.py hashes keys onto them).
SLOTS = 16384

log = logging.getLogger("xshard.store")

T = TypeVar("T")


@dataclass
class NodeRecord:
    id: str
    host: str
    port: int
    shard: str
    role: str = "replica"  # what the node currently is: "primary" or "replica"
    metrics_port: int = 0  # its /metrics port (xshard status reads lag there); 0: none
    tls_port: int = 0  # its tls-port; `port` is 0 for a node that serves TLS only

    def encode(self) -> bytes:
        v: dict[str, Any] = {"id": self.id, "host": self.host, "port": self.port,
                             "shard": self.shard, "role": self.role}
        if self.metrics_port:
            v["metrics_port"] = self.metrics_port
        if self.tls_port:
            v["tls_port"] = self.tls_port
        return json.dumps(v).encode()

    @classmethod
    def decode(cls, raw: bytes) -> NodeRecord:
        v = json.loads(raw)
        return cls(str(v["id"]), str(v["host"]), int(v["port"]), str(v["shard"]),
                   str(v.get("role", "replica")), int(v.get("metrics_port", 0)),
                   int(v.get("tls_port", 0)))

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
class PStreamRecord:
    """A partitioned stream: one logical name over `partitions` real stream keys.

    `keys[p]` is partition p's stream key, and the node generates its IDs with
    seq = p (mod `stride`), so an ID names its partition; `stride` is fixed at creation and
    bounds how many partitions the stream may ever have. `key_field`, when set, is the entry
    field whose value picks the partition of an XADD (one value's entries stay in order).
    Partitions are only added, never removed."""
    partitions: int
    stride: int
    keys: list[str]
    key_field: str | None = None

    def encode(self) -> bytes:
        return json.dumps({"partitions": self.partitions, "stride": self.stride,
                           "key_field": self.key_field, "keys": self.keys}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> PStreamRecord:
        v = json.loads(raw)
        keys = [str(k) for k in v["keys"]]
        n, stride = int(v["partitions"]), int(v["stride"])
        if not 1 <= n <= stride or len(keys) != n:
            raise ValueError(f"partitions {n}, stride {stride}, {len(keys)} keys")
        kf = v.get("key_field")
        return cls(n, stride, keys, None if kf is None else str(kf))

    def partition_of(self, seq: int) -> int:
        """The partition that made an ID with this sequence number."""
        return seq % self.stride

    def choose(self, key_value: bytes | None, producer: bytes | None = None) -> int | None:
        """The partition of an XADD without an explicit ID (see `choose_partition`)."""
        return choose_partition(self.partitions, key_value, producer)

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.encode())


def choose_partition(n: int, key_value: bytes | None, producer: bytes | None = None
                     ) -> int | None:
    """Which of n partitions an XADD goes to: the key field's value, else the IDMP producer
    id, by crc32 mod n, so one value's (or one producer's) entries stay in one partition;
    None when neither is given (the writer spreads those). Routers and the Spark sink both
    choose with this, so their entries of one key value share a partition."""
    if key_value is not None:
        return zlib.crc32(key_value) % n
    if producer is not None:
        return zlib.crc32(producer) % n
    return None


@dataclass
class Entry(Generic[T]):
    """A decoded value with the etcd metadata that guards the next write to its key."""
    value: T
    mod: int  # mod_revision: the guard for an update
    create: int = 0
    lease: int = 0


@dataclass(frozen=True)
class Compare:
    """One transaction condition: the key's mod_revision ("mod") or create_revision
    ("create") equals `value` (0: the key is absent)."""
    key: bytes
    target: str
    value: int


@dataclass(frozen=True)
class KeyValue:
    """One key as a store's range read returns it (the fields of etcd's mvccpb.KeyValue)."""
    key: bytes
    value: bytes
    mod: int
    create: int
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
    acl: Entry[bytes] | None = None  # the routers' ACL users (router/aclsync.py)
    pstreams: dict[str, Entry[PStreamRecord]] = field(default_factory=dict)

    def live(self, node_id: str | None) -> bool:
        return node_id is not None and node_id in self.nodes

    def shard_ids(self) -> list[str]:
        return sorted(self.shards, key=_shard_sort_key)

    @classmethod
    def decode(cls, revision: int, prefix: bytes, kvs: Iterable[KeyValue]) -> View:
        """Build a view from a range read of `prefix`; malformed values are logged and left
        out, so one bad key cannot stop a controller or a router."""
        v = cls(revision=revision)
        n = len(prefix)
        for kv in kvs:
            name = kv.key[n:].decode(errors="replace")
            try:
                if name.startswith("nodes/"):
                    v.nodes[name[6:]] = Entry(NodeRecord.decode(kv.value), kv.mod, kv.create,
                                              kv.lease)
                elif name.startswith("shards/"):
                    v.shards[name[7:]] = Entry(ShardRecord.decode(kv.value), kv.mod, kv.create,
                                               kv.lease)
                elif name == "slots":
                    v.slots = Entry(json.loads(kv.value), kv.mod, kv.create)
                elif name.startswith("routers/"):
                    v.routers[name[8:]] = Entry(json.loads(kv.value), kv.mod, kv.create,
                                                kv.lease)
                elif name.startswith("migrations/"):
                    v.migrations[int(name[11:])] = Entry(json.loads(kv.value), kv.mod, kv.create)
                elif name.startswith("pstreams/"):
                    v.pstreams[name[9:]] = Entry(PStreamRecord.decode(kv.value), kv.mod,
                                                 kv.create)
                elif name == "acl/users":
                    v.acl = Entry(kv.value, kv.mod, kv.create)
                elif name == "controller/leader":
                    v.leader = Entry(kv.value.decode(), kv.mod, kv.create, kv.lease)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring malformed etcd value at %s: %s", name, e)
        return v


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


def owners(ranges: list[list[Any]]) -> list[str | None]:
    """Slot -> shard id, from [[start, end, shard-id], ...]."""
    out: list[str | None] = [None] * SLOTS
    for start, end, sid in ranges:
        out[int(start):int(end) + 1] = [str(sid)] * (int(end) - int(start) + 1)
    return out


def ranges_of(owner: list[str | None]) -> list[list[Any]]:
    """[[start, end, shard-id], ...] of a slot -> shard list, merged and in slot order."""
    out: list[list[Any]] = []
    for slot, sid in enumerate(owner):
        if sid is None:
            continue
        if out and out[-1][2] == sid and out[-1][1] == slot - 1:
            out[-1][1] = slot
        else:
            out.append([slot, slot, sid])
    return out


def move_slots(ranges: list[list[Any]], slots: Iterable[int], shard: str) -> list[list[Any]]:
    """The slot map with `slots` given to `shard`."""
    owner = owners(ranges)
    for slot in slots:
        owner[slot] = shard
    return ranges_of(owner)
