"""The node's view of the cluster: who owns which slot, and the redirects that follow from it.

The state comes from etcd (base/records.py) through the membership agent (`node/membership/agent.py`), which
calls `ClusterState.update` with the decoded `nodes/`, `shards/` and `slots` values. From it
the node answers CLUSTER SLOTS/SHARDS/NODES/INFO in Redis's formats and refuses keys it does
not serve with `-MOVED` (or `-CROSSSLOT`, `-CLUSTERDOWN`), which is all a cluster-aware client
(redis-py RedisCluster, redis-cli -c, ioredis) needs.

Node ids in etcd are free-form; clients expect Redis's 40-hex-digit ids, so the CLUSTER replies
use the SHA-1 of the etcd id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node import command_table, errors
from node.slots import SLOTS, key_slot
from node.tls import on_tls

if TYPE_CHECKING:
    from node.client import Client
    from node.server import Server


def redis_id(node_id: str) -> str:
    """The 40-hex-digit id that CLUSTER replies show for an etcd node id."""
    if len(node_id) == 40 and all(ch in "0123456789abcdef" for ch in node_id):
        return node_id
    return hashlib.sha1(node_id.encode()).hexdigest()


@dataclass
class NodeInfo:
    id: str
    host: str
    port: int
    shard: str
    role: str = "replica"
    tls_port: int = 0  # its tls-port (0: none)

    @property
    def rid(self) -> str:
        return redis_id(self.id)

    def client_port(self, tls: bool) -> int:
        return client_port(self.port, self.tls_port, tls)


def client_port(port: int, tls_port: int, tls: bool) -> int:
    """The port a client is told: one of its own kind (TLS or plain) when the server has it,
    as Redis 7 does with tls-cluster; a server with one port has no choice."""
    if tls:
        return tls_port or port
    return port or tls_port


@dataclass
class ShardInfo:
    id: str
    primary: str | None = None
    replicas: list[str] = field(default_factory=list)
    epoch: int = 0


class SlotMap:
    """Slots, shards and nodes as etcd holds them: what nodes and routers both route by."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.shards: dict[str, ShardInfo] = {}
        self.owner: list[str | None] = [None] * SLOTS  # slot -> shard id
        self.ranges: list[tuple[int, int, str]] = []
        self.version = 0  # the etcd mod_revision of the slot map

    def update(self, nodes: dict[str, dict[str, Any]] | None = None,
               shards: dict[str, dict[str, Any]] | None = None,
               slots: list[list[Any]] | None = None, version: int | None = None) -> None:
        """Replace the parts given, in the value formats of base/records.py (node and shard
        dicts keyed by id, slots as [[start, end, shard-id], ...])."""
        if nodes is not None:
            self.nodes = {nid: NodeInfo(nid, str(v["host"]), int(v["port"]), str(v["shard"]),
                                        str(v.get("role", "replica")), int(v.get("tls_port", 0)))
                          for nid, v in nodes.items()}
        if shards is not None:
            self.shards = {sid: ShardInfo(sid, v.get("primary"), list(v.get("replicas", [])),
                                          int(v.get("epoch", 0)))
                           for sid, v in shards.items()}
        if slots is not None:
            owner: list[str | None] = [None] * SLOTS
            ranges = []
            for start, end, sid in slots:
                start, end, sid = int(start), int(end), str(sid)
                owner[start:end + 1] = [sid] * (end - start + 1)
                ranges.append((start, end, sid))
            self.owner = owner
            self.ranges = sorted(ranges)
        if version is not None:
            self.version = version

    def primary_of(self, shard: str) -> NodeInfo | None:
        sh = self.shards.get(shard)
        if sh is None or sh.primary is None:
            return None
        return self.nodes.get(sh.primary)

    def replicas_of(self, shard: str) -> list[NodeInfo]:
        sh = self.shards.get(shard)
        if sh is None:
            return []
        return [self.nodes[r] for r in sh.replicas if r in self.nodes and r != sh.primary]


class ClusterState(SlotMap):
    """`server.cluster`: set only when the node runs as part of a cluster."""

    def __init__(self, server: Server, myid: str, shard: str) -> None:
        super().__init__()
        self.server = server
        self.myid = myid
        self.myshard = shard
        # Every node seen alive, by id: a node whose lease is gone is no longer in `nodes`,
        # but CLUSTER NODES/SHARDS still list it, failed, with its last address (as Redis lists
        # a node it marked `fail`). Kept only while a shard names the node.
        self.last_seen: dict[str, NodeInfo] = {}
        # CLUSTER SETSLOT states (Redis's, node-local): slot -> the other node's id.
        self.importing: dict[int, str] = {}
        self.migrating: dict[int, str] = {}
        # Owners set here before etcd says so (a flip this node committed, SETSLOT NODE from
        # the source of a move): slot -> shard. Kept while etcd's view still shows the slot's
        # migration record: a view without it was read after the flip (which deletes the
        # record), however many other flips came between (a map version cannot tell).
        self.overrides: dict[int, str] = {}
        self.migrations: dict[int, dict] = {}  # etcd migrations/<slot> values


    def update(self, nodes: dict[str, dict[str, Any]] | None = None,
               shards: dict[str, dict[str, Any]] | None = None,
               slots: list[list[Any]] | None = None, version: int | None = None,
               migrations: dict[int, dict] | None = None) -> None:
        super().update(nodes, shards, slots, version)
        if migrations is not None:
            self.migrations = migrations
            if self.overrides:
                self.overrides = {s: o for s, o in self.overrides.items()
                                  if s in migrations and self.owner[s] != o}
        self.last_seen.update(self.nodes)
        named = {m for sh in self.shards.values() for m in (sh.primary, *sh.replicas) if m}
        for nid in [n for n in self.last_seen if n not in named and n not in self.nodes]:
            del self.last_seen[nid]

    def members(self) -> list[tuple[NodeInfo, bool]]:
        """(node, failed) for every node a shard names or etcd lists as alive, by Redis id."""
        out = {nid: (n, False) for nid, n in self.nodes.items()}
        for sh in self.shards.values():
            for nid in (sh.primary, *sh.replicas):
                if nid and nid not in out:
                    # Never seen alive by this node: Redis shows such an address as ":0".
                    out[nid] = (self.last_seen.get(nid) or NodeInfo(nid, "", 0, sh.id), True)
        return sorted(out.values(), key=lambda x: x[0].rid)

    def owner_of(self, slot: int) -> str | None:
        if self.overrides:
            o = self.overrides.get(slot)
            if o is not None:
                return o
        return self.owner[slot]

    def set_owner(self, slot: int, shard: str) -> None:
        """Serve (or stop serving) a slot before etcd's map says so: until a view shows the
        slot without a migration record (see `overrides`)."""
        self.overrides[slot] = shard
        self.importing.pop(slot, None)
        self.migrating.pop(slot, None)

    def node_by_rid(self, rid: str) -> NodeInfo | None:
        """A node by etcd id or by the 40-hex id CLUSTER replies show."""
        n = self.nodes.get(rid)
        if n is not None:
            return n
        return next((n for n in self.nodes.values() if n.rid == rid), None)

    def redirect(self, slot: int, kind: bytes = b"MOVED", tls: bool = False) -> bytes:
        """The -MOVED (or -ASK) error for a slot this node does not serve."""
        shard = self.owner_of(slot)
        target = self.primary_of(shard) if shard is not None else None
        if target is None:
            return b"CLUSTERDOWN The cluster is down"
        return b"%s %d %s:%d" % (kind, slot, target.host.encode(), target.client_port(tls))

    @property
    def myid_redis(self) -> str:
        return redis_id(self.myid)

    # --- routing --------------------------------------------------------------------------------
    def check(self, c: Client, argv: list[bytes], name: bytes) -> bytes | None:
        """The error for a command whose keys this node must not serve, or None."""
        positions = command_table.get_keys(argv)
        if not positions:
            return None
        slot = key_slot(argv[positions[0]])
        for p in positions[1:]:
            if key_slot(argv[p]) != slot:
                return errors.CROSSSLOT
        shard = self.owner_of(slot) if self.overrides else self.owner[slot]
        if self.importing or self.migrating:
            err = self._moving(c, argv, positions, slot, shard)
            if err is not None:
                return err or None
        if shard is None:
            return errors.SLOT_NOT_SERVED
        if shard == self.myshard:
            sh = self.shards.get(shard)
            if sh is not None and sh.primary == self.myid:
                return None
            # A replica serves reads to clients that asked for them with READONLY.
            if c.readonly and not command_table.is_write_argv(argv, name):
                return None
        target = self.primary_of(shard)
        if target is None:
            return errors.CLUSTERDOWN
        if target.id == self.myid:
            return None
        return errors.moved(slot, target.host, target.client_port(on_tls(c)))

    def _moving(self, c: Client, argv: list[bytes], positions: list[int], slot: int,
                shard: str | None) -> bytes | None:
        """Redis's rules for a slot in CLUSTER SETSLOT MIGRATING/IMPORTING state: b"" to
        serve, an error, or None for the ordinary owner check."""
        if slot in self.importing and (c.asking or slot in c.import_slots
                                       or argv[0].lower() == b"restore-asking"):
            return b""
        to = self.migrating.get(slot)
        if to is not None and shard == self.myshard:
            db = self.server.db
            missing = sum(1 for p in positions if db.get(argv[p]) is None)
            if missing == len(positions):
                n = self.node_by_rid(to)
                if n is not None:
                    return b"ASK %d %s:%d" % (slot, n.host.encode(), n.client_port(on_tls(c)))
            elif missing:
                return errors.TRYAGAIN
        return None

    # --- CLUSTER replies ------------------------------------------------------------------------
    def _shard_nodes(self, shard: str) -> list[NodeInfo]:
        """Primary first, then the live replicas that etcd lists for the shard."""
        primary = self.primary_of(shard)
        return ([primary] if primary is not None else []) + self.replicas_of(shard)

    def effective_ranges(self) -> list[tuple[int, int, str]]:
        """The etcd ranges with this node's overrides applied (what it serves right now)."""
        if not self.overrides:
            return self.ranges
        owner = list(self.owner)
        for slot, shard in self.overrides.items():
            owner[slot] = shard
        out: list[tuple[int, int, str]] = []
        start = 0
        for i in range(1, len(owner) + 1):
            if i == len(owner) or owner[i] != owner[start]:
                if owner[start] is not None:
                    out.append((start, i - 1, owner[start]))  # type: ignore[arg-type]
                start = i
        return out

    def slots_reply(self, tls: bool = False) -> list:
        """CLUSTER SLOTS; `tls`: the asking client is on TLS (NodeInfo.client_port)."""
        ranges = self.effective_ranges()
        out = []
        for start, end, shard in ranges:
            nodes = self._shard_nodes(shard)
            if not nodes:
                continue
            out.append([start, end] + [[n.host.encode(), n.client_port(tls), n.rid.encode(), {}]
                                       for n in nodes])
        return out

    def replication_offsets(self) -> dict[str, int]:
        """What this node knows of each node's replication offset: its own; on a primary, the
        offsets its replicas acknowledged; on a replica, its primary's as far as received.
        (Redis learns the others' offsets by gossip; we have no gossip.)"""
        s = self.server
        out = {self.myid: s.effects.offset}
        r = s.replication
        if r is None:
            return out
        role = r.role_reply()
        if role[0] == b"master":
            shard = self.shards.get(self.myshard)
            mine = [self.nodes[m] for m in (shard.replicas if shard else []) if m in self.nodes]
            for ip, port, off in role[2]:
                # A replica is known by the address it connected from and the port it
                # listens on; with an announced host name only the port may match.
                at = [n for n in mine if int(port) in (n.port, n.tls_port)]
                exact = [n for n in at if n.host == ip.decode()]
                if exact or len(at) == 1:
                    out[(exact or at)[0].id] = int(off)
        elif role[4] >= 0:
            primary = self.primary_of(self.myshard)
            if primary is not None:
                out[primary.id] = role[4]
        return out

    def shards_reply(self) -> list:
        offsets = self.replication_offsets()
        members = self.members()
        ranges = self.effective_ranges()
        out = []
        for shard in sorted(self.shards):
            flat: list[int] = []
            for start, end, sid in ranges:
                if sid == shard:
                    flat += [start, end]
            nodes = []
            sh = self.shards[shard]
            in_shard = [(n, failed) for n, failed in members
                        if n.id == sh.primary or n.id in sh.replicas]
            in_shard.sort(key=lambda x: x[0].id != sh.primary)  # the primary first
            for n, failed in in_shard:
                offset = offsets.get(n.id, 0)
                node: dict[bytes, object] = {b"id": n.rid.encode()}
                if n.port:  # as Redis: the plain port and the TLS port, each if it exists
                    node[b"port"] = n.port
                if n.tls_port:
                    node[b"tls-port"] = n.tls_port
                node.update({
                    b"ip": n.host.encode(), b"endpoint": n.host.encode(),
                    b"role": b"master" if n.id == sh.primary else b"replica",
                    b"replication-offset": offset,
                    b"health": b"fail" if failed else b"online",
                })
                nodes.append(node)
            out.append({b"slots": flat, b"nodes": nodes})
        return out

    def nodes_text(self, tls: bool = False) -> bytes:
        ranges = self.effective_ranges()
        lines = []
        for n, failed in self.members():
            sh = self.shards.get(n.shard)
            primary = sh is not None and sh.primary == n.id
            flags = ("myself," if n.id == self.myid else "") + ("master" if primary else "slave")
            if failed:
                flags += ",fail"
            master = "-"
            if not primary and sh is not None and sh.primary in self.last_seen:
                master = self.last_seen[sh.primary].rid
            epoch = sh.epoch if sh is not None else 0
            port = n.client_port(tls)
            bus = port + 10000 if port else 0
            line = (f"{n.rid} {n.host}:{port}@{bus} {flags} {master} 0 0 {epoch} "
                    f"{'disconnected' if failed else 'connected'}")
            if primary:
                for start, end, sid in ranges:
                    if sid == n.shard:
                        line += f" {start}" if start == end else f" {start}-{end}"
            if n.id == self.myid:  # Redis shows this node's open moves after its slots
                for slot, to in sorted(self.migrating.items()):
                    line += f" [{slot}->-{redis_id(to)}]"
                for slot, frm in sorted(self.importing.items()):
                    line += f" [{slot}-<-{redis_id(frm)}]"
            lines.append(line)
        return ("\n".join(lines) + "\n").encode()

    def info_text(self) -> bytes:
        assigned = sum(1 for o in self.owner if o is not None)
        ok = sum(e - s + 1 for s, e, sid in self.ranges if self.primary_of(sid) is not None)
        epochs = [sh.epoch for sh in self.shards.values()] or [0]
        mine = self.shards.get(self.myshard)
        state = "ok" if ok == SLOTS else "fail"
        fields = [
            ("cluster_state", state), ("cluster_slots_assigned", assigned),
            ("cluster_slots_ok", ok), ("cluster_slots_pfail", 0),
            ("cluster_slots_fail", assigned - ok), ("cluster_known_nodes", len(self.members())),
            ("cluster_size", len({sid for _, _, sid in self.ranges})),
            ("cluster_current_epoch", max(epochs)),
            ("cluster_my_epoch", mine.epoch if mine is not None else 0),
            ("cluster_stats_messages_sent", 0), ("cluster_stats_messages_received", 0),
            ("total_cluster_links_buffer_limit_exceeded", 0),
        ]
        return "".join(f"{k}:{v}\r\n" for k, v in fields).encode()
