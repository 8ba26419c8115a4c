"""The node's membership agent: runs inside `xshard node --etcd URL --cluster NAME --shard ID`.

It keeps the node's `nodes/<id>` key on a lease session (base/lease.py: TTL 3 s,
keep-alive every second),
joins the node to its shard, gives the node the role that etcd names (primary, or replica of
the named primary, through the node's own REPLICAOF command), feeds the slot map and topology
to `server.cluster`, and fences: `fence()` (Server.check_fence) refuses writes with
-CLUSTERDOWN unless

  1. the last keep-alive that etcd accepted was *sent* less than FENCE_AFTER (1.5 s) ago, and
  2. a view read after the current lease was registered names this node the shard's primary.

Why this is enough: the controller fails a primary over only in a
transaction that requires the primary's `nodes/` key to be absent, i.e. after its lease
expired, which is at least NODE_TTL (3 s) after the last keep-alive reached etcd, and so at
least 1.5 s after this node stopped accepting writes. A node that was frozen (SIGSTOP) or cut
off checks the guard with the monotonic clock before anything else, so the first write after
it wakes is refused. It then finds its lease gone, registers a new one, reads the new epoch
and becomes a replica of the new primary. If instead its new registration lands before the
controller's transaction, that transaction's compare fails and there is no failover.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import hiredis

from base.etcdconn import EtcdConfig
from base.lease import POLICY, LeaseSession
from base.records import NodeRecord, ShardRecord, View
from base.store import Store
from base.tasks import cancel_and_wait
from node import errors

if TYPE_CHECKING:
    from node.server import Server

log = logging.getLogger("xshard.agent")

FENCE_AFTER = POLICY.fence_after  # seconds since the last accepted keep-alive was sent


def default_host(bind: str) -> str:
    """The address to announce: the first bound address, loopback for a wildcard bind."""
    first = (bind.split() or ["127.0.0.1"])[0].lstrip("-")
    return "127.0.0.1" if first in ("0.0.0.0", "::", "*", "") else first


class Agent:
    """One per node process (`server.agent`); see the module docstring."""

    def __init__(self, server: Server) -> None:
        from node.client import Client
        from node.cluster import ClusterState

        cfg = server.config
        self.server = server
        self.shard = str(cfg.shard)
        self.host = cfg.announce_host or default_host(cfg.bind)
        self._node_id = cfg.node_id  # may need the port, known only once the server listens
        self.store = Store(etcd_config(cfg), cfg.cluster)
        self.client = Client(server, None, 0, "agent", "")
        self.client.authenticated = True
        self.session: LeaseSession | None = None
        # Until when a write may pass the fence without asking `fence` (Server.check_fence):
        # the deadline of the last fence that passed, zeroed when the role or the lease goes.
        self.fresh_until = 0.0
        self._named_primary = False
        self.epoch_seen = -1
        self.view: View | None = None
        self.kick = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.warned: set[str] = set()
        self._last_target: tuple[str, int] | None = None
        # Until etcd has spoken, serve no keys at all: the node is not a standalone server.
        server.cluster = ClusterState(server, self._node_id or "?", self.shard)
        from node.membership.slotmover import SlotMover

        self.mover = SlotMover(self)

    @property
    def named_primary(self) -> bool:
        """The newest view on this lease names us primary."""
        return self._named_primary

    @named_primary.setter
    def named_primary(self, value: bool) -> None:
        self._named_primary = value
        if not value:
            self.fresh_until = 0.0

    @property
    def node_id(self) -> str:
        cfg = self.server.config
        return self._node_id or f"{self.host}:{cfg.port or cfg.tls_port}"

    @property
    def lease(self) -> int:
        """The current lease (0 while there is none, or it was lost)."""
        s = self.session
        return s.id if s is not None and s.alive else 0

    # --- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def start(cls, server: Server) -> Agent:
        agent = cls(server)
        server.agent = agent
        agent.tasks.append(asyncio.ensure_future(agent._run()))
        return agent

    async def stop(self) -> None:
        """Revoke the lease on a clean shutdown, so that a primary's failover starts now
        instead of after the TTL."""
        self.mover.stop()
        await cancel_and_wait(*self.tasks)
        self.named_primary = False
        if self.session is not None:
            await self.session.close()
        await self.store.close()

    async def _run(self) -> None:
        # Register only once clients can connect (on port, or tls-port alone).
        while self.server.tcp_server is None and self.server.tls_server is None:
            await asyncio.sleep(0.02)
        self.server.cluster.myid = self.node_id
        log.info("agent: node %s (%s:%d) joining shard %s of cluster %s via etcd %s",
                 self.node_id, self.host, self.server.config.port or self.server.config.tls_port,
                 self.shard,
                 self.store.cluster, self.store.url)
        self.tasks.append(asyncio.ensure_future(self._lease_loop()))
        await self._view_loop()

    # --- the fence -------------------------------------------------------------------------------
    def fresh(self) -> bool:
        return self.session is not None and self.session.age() < FENCE_AFTER

    def fence(self) -> bytes | None:
        """Server.check_fence: refuse writes unless fresh and named primary. A fence that
        passes sets `fresh_until`, the time at which this one would stop passing with no
        keep-alive accepted meanwhile, so that the writes until then need no call here
        (three interpreted calls, 0.66 us a write). A later keep-alive only moves the true
        deadline later: the next fence asked after `fresh_until` sets it again."""
        if self.named_primary and self.fresh():
            self.fresh_until = self.session.ok_at + FENCE_AFTER  # type: ignore[union-attr]
            return None
        if self.server.role != "master":
            return None  # a replica: its own READONLY guard answers
        return errors.CLUSTERDOWN

    # --- lease -----------------------------------------------------------------------------------
    async def _lease_loop(self) -> None:
        """Open a session, register on it, and when it is lost (fenced already, since the
        fence is a fraction of the TTL) open the next one."""
        while True:
            try:
                session = await LeaseSession.open(self.store, name=f"node {self.node_id}")
            except Exception as e:  # noqa: BLE001 - etcd away: keep trying, stay fenced
                self._warn_once("grant", f"agent: cannot get a lease from etcd ({e!r})")
                await asyncio.sleep(0.3)
                continue
            self.warned.discard("grant")
            self.session = session
            session.done.add_done_callback(self._lease_gone)
            try:
                await self._register()
            except Exception as e:  # noqa: BLE001 - retried on a fresh lease
                log.warning("agent: registration failed (%r); retrying", e)
                await session.close()
                await asyncio.sleep(0.3)
                continue
            why = await session.wait()
            self.named_primary = False
            log.warning("agent: lease %x lost (%s); fenced, registering again", session.id, why)

    def _lease_gone(self, _done: object) -> None:
        """The lease is lost or closed: no write passes the fence without asking it. (A
        future's callbacks run on the next loop turn: the writes of this one pass as they
        would have had the keep-alive's answer come a turn later. The time bound holds
        regardless: `fresh_until` is never later than the last accepted keep-alive's send
        time plus FENCE_AFTER.)"""
        self.fresh_until = 0.0

    async def _register(self) -> None:
        """Put nodes/<id> on the current lease (guarded by the revision read), then read again."""
        for _ in range(10):
            v = await self.store.view()
            cur = v.nodes.get(self.node_id)
            cfg = self.server.config
            rec = NodeRecord(self.node_id, self.host, cfg.port, self.shard, self._role_name(),
                             cfg.metrics_port, cfg.tls_port)
            if await self.store.put_node(rec, self.lease, cur.mod if cur else 0):
                self.kick.set()
                return
        raise RuntimeError("registration kept conflicting")

    # --- views -----------------------------------------------------------------------------------
    async def _view_loop(self) -> None:
        views = self.store.views(resync=POLICY.interval)
        nxt = asyncio.ensure_future(views.__anext__())
        try:
            while True:
                kick = asyncio.ensure_future(self.kick.wait())
                await asyncio.wait({nxt, kick}, return_when=asyncio.FIRST_COMPLETED)
                kick.cancel()
                try:
                    if self.kick.is_set():  # our own write: read now, not after the watch
                        self.kick.clear()
                        await self._apply(await self.store.view())
                    if nxt.done():
                        v = nxt.result()
                        nxt = asyncio.ensure_future(views.__anext__())
                        await self._apply(v)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - etcd hiccup: the next view retries
                    log.warning("agent: applying the etcd view failed (%r); retrying", e)
                    await asyncio.sleep(0.2)
        finally:
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await views.aclose()

    async def _apply(self, v: View) -> None:
        if self.view is not None and v.revision < self.view.revision:
            return  # an older read finished late
        self.view = v
        cl = self.server.cluster
        cl.update(nodes={k: e.value.as_dict() for k, e in v.nodes.items()},
                  shards={k: e.value.as_dict() for k, e in v.shards.items()},
                  slots=v.slots.value if v.slots else [],
                  version=v.slots.mod if v.slots else 0,
                  migrations={k: e.value for k, e in v.migrations.items()})
        try:
            await self._apply_roles(v)
        finally:
            self.mover.on_view(v)  # slot moves follow the role just decided

    async def _apply_roles(self, v: View) -> None:
        sh = v.shards.get(self.shard)
        me = v.nodes.get(self.node_id)
        if sh is None:
            self.named_primary = False
            self._warn_once("noshard", f"agent: shard {self.shard!r} does not exist in cluster "
                                       f"{self.store.cluster!r} (run xshard create)")
            return
        self.warned.discard("noshard")
        if not self.lease or me is None or me.lease != self.lease:
            # Not (or no longer) registered on the current lease: nothing here proves that
            # the epoch we read is still ours to act on.
            self.named_primary = False
            if self.lease:  # the key is missing or on an old lease: register on ours
                await self._register()
            return
        rec = sh.value
        if self.node_id not in rec.members():
            await self._join(sh.value, sh.mod)
            return
        if rec.epoch != self.epoch_seen:
            log.info("agent: shard %s epoch %d: primary %s, replicas %s", self.shard, rec.epoch,
                     rec.primary, rec.replicas)
            self.epoch_seen = rec.epoch
        if rec.primary == self.node_id:
            self._become_primary()
            self.named_primary = True
        else:
            self.named_primary = False
            p = v.nodes.get(rec.primary) if rec.primary else None
            if p is not None:
                # tls-replication: the link goes to the primary's TLS port.
                tls = self.server.config.tls_replication and p.value.tls_port
                self._become_replica(p.value.host, p.value.tls_port if tls else p.value.port)
            # else: the named primary is gone; stay as we are (fenced if we were primary)
            # until the controller names a new one.
        role = self._role_name()
        if me.value.role != role:
            me.value.role = role
            with contextlib.suppress(Exception):
                await self.store.put_node(me.value, self.lease, me.mod)

    async def _join(self, rec: ShardRecord, mod: int) -> None:
        """Add this node to its shard: as primary of a shard that never had one, else as a
        replica. One guarded transaction; a lost race is retried on the next view."""
        new = ShardRecord(rec.primary, list(rec.replicas), rec.epoch + 1)
        if rec.primary is None:
            new.primary = self.node_id
            what = "primary of a new shard"
        else:
            new.replicas.append(self.node_id)
            what = "replica"
        if await self.store.put_shard(self.shard, new, mod):
            log.info("agent: joined shard %s as %s (epoch %d)", self.shard, what, new.epoch)
        self.kick.set()

    # --- roles through the node's own command path -----------------------------------------------
    def _execute(self, *argv: bytes) -> object:
        reply = self.server.execute(self.client, list(argv))
        if reply is None:
            return None
        r = hiredis.Reader()
        r.feed(reply)
        return r.gets()

    def _role(self) -> tuple[str, str | None, int | None]:
        """("master", None, None) or ("slave", host, port), from ROLE."""
        r = self._execute(b"ROLE")
        if isinstance(r, list) and r and r[0] == b"slave":
            return "slave", r[1].decode(), int(r[2])
        return "master", None, None

    def _role_name(self) -> str:
        return "primary" if self.server.role == "master" else "replica"

    def _become_primary(self) -> None:
        self._last_target = None
        if self._role()[0] != "master":
            log.info("agent: etcd names this node primary of shard %s: REPLICAOF NO ONE",
                     self.shard)
            self._check(self._execute(b"REPLICAOF", b"NO", b"ONE"))

    def _become_replica(self, host: str, port: int) -> None:
        role, h, p = self._role()
        if role == "slave" and h == host and p == port:
            return
        (log.info if self._last_target != (host, port) else log.debug)(
            "agent: etcd names %s:%d primary of shard %s: REPLICAOF %s %d", host, port,
            self.shard, host, port)
        self._last_target = (host, port)
        self._check(self._execute(b"REPLICAOF", host.encode(), b"%d" % port))

    def _check(self, reply: object) -> None:
        if isinstance(reply, hiredis.ReplyError):
            self._warn_once("replicaof", f"agent: REPLICAOF failed: {reply}")

    def _warn_once(self, what: str, msg: str) -> None:
        if what not in self.warned:
            self.warned.add(what)
            log.warning("%s", msg)


def etcd_config(cfg: object) -> EtcdConfig:
    """The etcd a node's settings name (--etcd and the --etcd-* options, whose environment
    variables fill what the settings leave empty)."""
    import os

    from base.etcdconn import OPTIONS

    vals = {}
    for name, (env, _h) in OPTIONS.items():
        vals[name] = getattr(cfg, name.replace("-", "_"), "") or os.environ.get(env, "")
    return EtcdConfig.parse(vals["etcd"], vals["etcd-user"], vals["etcd-password"],
                            vals["etcd-cacert"], vals["etcd-cert"], vals["etcd-key"])
