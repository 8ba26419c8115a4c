"""`xshard controller`: leader election in etcd, then failover for every shard.

Several controllers may run; one is leader (`controller/leader`, put-if-absent on its lease, as
etcd's concurrency.Election does). Only the leader runs the reconcile loop, and every write it
makes also compares the leader key's create revision, so a controller that lost leadership
without noticing cannot change anything (fencing by compare, not belief).

The loop is level-triggered: on every change under the prefix, and at least every TICK, it
re-reads the whole cluster and, for each shard whose primary's `nodes/` key is gone, runs the
failover:

1. ask every live member of the shard for its replication offset (INFO replication);
2. pick the highest (ties: the order of the shard's replica list);
3. one transaction, guarded by the shard record's mod_revision, the absence of the old
   primary's key and the leader key: primary = chosen, old primary appended to the replicas,
   epoch + 1;
4. REPLICAOF NO ONE to the chosen node and REPLICAOF <chosen> to the other live members (their
   agents would do the same from the new epoch; doing it here saves a watch round trip).

A write that WAIT acknowledged on k replicas is on each of them; the chosen node holds at
least as much of the primary's stream as any live replica, so the write survives whenever one
of the k is alive.

The controller holds its leader key on a lease session (base/lease.py) and reaches nodes
through `NodeOps` (node/link.py, with AUTH when nodes have requirepass); with the
in-memory store (base/memstore.py) and scripted nodes, every decision here is unit-tested
(tests/control/test_controller_unit.py).

Faster detection of a crash: a primary whose port refuses connections for DEAD_PROBES
consecutive probes is a dead process (a frozen or partitioned one times out instead), so the
leader revokes its lease rather than waiting out the TTL. The key disappears and the ordinary
failover follows. A refused connection is what a dead process looks like, and also what a
live one behind a firewall's REJECT looks like. Such a primary, cut off from etcd too, still
takes writes until its last accepted keep-alive is FENCE_AFTER old (node/membership/agent.py); that
keep-alive was sent before etcd applied the revoke, so FENCE_WAIT after the revoke it is
fenced, whatever it is. The controller waits FENCE_WAIT unless every replica of the shard says
its link to the primary is down: a crash closes the primary's sockets, so its replicas see it
gone too, while a partition that only the controller and etcd are behind leaves their links
up. A primary behind a REJECT from etcd, the controller *and* all its replicas is promoted
past without the wait; it can take writes nobody can WAIT-acknowledge for at most FENCE_AFTER.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from dataclasses import dataclass

from base.etcdconn import EtcdConfig
from base.lease import POLICY, LeaseLost, LeaseSession
from base.records import Compare, Entry, ShardRecord, View
from base.store import BaseStore
from base.tasks import cancel_and_wait
from control import reshard
from node.errors import ResponseError
from node.link import NodeOps

log = logging.getLogger("xshard.controller")

TICK = 0.25
DEAD_PROBES = 3
# After revoking a refusing primary's lease: its fence plus a margin for clock rates and the
# node's own loop (see the module docstring).
FENCE_WAIT = POLICY.fence_after * 1.1 + 0.1


class FailoverError(Exception):
    """A failover that cannot be done now; the message says why, in one line."""


@dataclass
class Candidate:
    id: str
    host: str
    port: int
    offset: int


async def ask_offsets(view: View, ids: list[str],
                      nodes: NodeOps) -> tuple[list[Candidate], dict[str, str]]:
    """Offsets of the live nodes among `ids` (answering ones), and why the others were skipped."""
    skipped: dict[str, str] = {}
    live = [i for i in ids if i in view.nodes]
    for i in ids:
        if i not in view.nodes:
            skipped[i] = "no lease"

    async def one(nid: str) -> Candidate | None:
        rec = view.nodes[nid].value
        try:
            host, port = nodes.addr(rec)
            off = await nodes.offset(host, port)
        except ResponseError as e:  # e.g. NOAUTH: say so, it is fixable
            skipped[nid] = f"error: {str(e)[:80]}"
            return None
        except (TimeoutError, OSError) as e:
            skipped[nid] = f"unreachable ({type(e).__name__})"
            return None
        return Candidate(nid, host, port, off)

    found = await asyncio.gather(*(one(i) for i in live))
    return [c for c in found if c is not None], {i: skipped[i] for i in ids if i in skipped}


def shard_entry(store: BaseStore, view: View, shard: str) -> Entry[ShardRecord]:
    """The shard's record, or a FailoverError that names the shards there are."""
    entry = view.shards.get(shard)
    if entry is None:
        raise FailoverError(f"unknown shard '{shard}' (cluster '{store.cluster}' has shards "
                            f"{', '.join(view.shard_ids()) or 'none'})")
    return entry


async def failover(store: BaseStore, view: View, shard: str, *, force: bool = False,
                   reason: str = "", extra_compares: list[Compare] | None = None,
                   nodes: NodeOps | None = None, logger: logging.Logger = log) -> str:
    """Promote the best live replica of `shard`; returns the new primary's id.

    Without `force` the primary must be gone (no lease). With it, a live primary is demoted
    too: it sees the new epoch, fences itself and becomes a replica; writes it accepted that
    the chosen replica had not yet received are lost, as with Redis's CLUSTER FAILOVER FORCE
    (but never a write that WAIT acknowledged on the chosen replica)."""
    entry = shard_entry(store, view, shard)
    rec = entry.value
    old = rec.primary
    old_live = view.live(old)
    if old_live and not force:
        raise FailoverError(f"shard {shard}: primary {old} is alive; use --force to replace it")
    nodes = nodes or NodeOps()
    members = [m for m in rec.members() if m != old]
    cands, skipped = await ask_offsets(view, members, nodes)
    if not cands:
        why = ", ".join(f"{k}: {v}" for k, v in skipped.items()) or "no replicas"
        raise FailoverError(f"shard {shard}: no live replica to promote ({why})")
    order = {m: i for i, m in enumerate(members)}
    best = max(cands, key=lambda c: (c.offset, -order[c.id]))
    new = ShardRecord(best.id, [m for m in members if m != best.id], rec.epoch + 1)
    if old is not None:
        new.replicas.append(old)
    compares = [store.guard(store.key("shards", shard), entry.mod)]
    if not force and old:  # the old primary's lease must really be gone (see agent.py)
        compares.append(store.guard(store.key("nodes", old), 0))
    compares += extra_compares or []
    offsets = ", ".join(f"{c.id}={c.offset}" for c in cands)
    skip = "; skipped " + ", ".join(f"{k} ({v})" for k, v in skipped.items()) if skipped else ""
    if not await store.commit(compares, [(store.key("shards", shard), new.encode(), 0)]):
        raise FailoverError(f"shard {shard}: etcd changed while deciding (another writer won); "
                            "nothing done")
    logger.warning("failover shard %s epoch %d -> %d: %s; promoted %s (highest offset; "
                   "offsets %s%s); old primary %s %s", shard, rec.epoch, new.epoch,
                   reason or ("forced" if force else "primary lost"), best.id, offsets, skip,
                   old, "alive, demoted" if old_live else "gone")
    # Speed-ups only: the agents converge on the same roles from the new epoch.
    with contextlib.suppress(Exception):
        await nodes.promote(best.host, best.port)
    others = [view.nodes[m].value for m in new.replicas if m in view.nodes]
    await asyncio.gather(*(nodes.replicate(*nodes.addr(n), best.host, best.port)
                           for n in others), return_exceptions=True)
    return best.id


class Controller:
    """One `xshard controller` process: campaign for leadership on a lease session, then
    reconcile on every view until the session or the leadership is lost, and start over."""

    def __init__(self, store: BaseStore, cid: str | None = None,
                 nodes: NodeOps | None = None,
                 move_timeout: float = reshard.MOVE_TIMEOUT) -> None:
        self.store = store
        self.resharder = reshard.Resharder(move_timeout)
        self.nodes = nodes or NodeOps()
        self.id = cid or f"{socket.gethostname()}:{os.getpid()}"
        self.session: LeaseSession | None = None
        self.leader_rev = 0  # create revision of our leader key while we lead
        self.refusals: dict[str, int] = {}
        self.blocked: dict[str, str] = {}  # shard -> last reason a failover could not run
        # For the metrics (control/metrics.py): failovers done, by (shard, reason), shards
        # whose primary we revoked for refusing connections, the last view and when read.
        self.failovers: dict[tuple[str, str], int] = {}
        # shard -> when the failover may start after its primary's lease was revoked
        self.revoked: dict[str, float] = {}
        self.view: View | None = None
        self.view_at = -1e9

    async def run(self) -> None:
        await self.store.connect()
        log.info("controller %s: cluster %s at %s", self.id, self.store.cluster, self.store.url)
        try:
            while True:
                try:
                    await self._term()
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - etcd away or lease lost: campaign again
                    log.warning("controller %s: %s; campaigning again", self.id, e)
                    await asyncio.sleep(0.5)
        finally:
            await self._resign()
            await self.store.close()

    async def _resign(self) -> None:
        self.leader_rev = 0
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def _term(self) -> None:
        """Campaign, then lead until the lease or the leadership is lost."""
        self.session = await LeaseSession.open(self.store, name=f"controller {self.id}")
        try:
            await self._campaign()
            log.warning("controller %s: elected leader (leader key revision %d)", self.id,
                        self.leader_rev)
            # Every TICK for the probes and the fence waits, on the view the watch keeps
            # current: etcd is read after a change and at least once a lease interval.
            async for view in self.store.views(resync=TICK, reread=POLICY.interval):
                self.session.check()
                if view.leader is None or view.leader.create != self.leader_rev:
                    raise LeaseLost("lost leadership")
                self._seen(view)
                await self._tick(view)
        finally:
            await self._resign()

    async def _campaign(self) -> None:
        """etcd's Election.Campaign: put the leader key on our lease if it is absent; else
        wait (re-reading every TICK) until it is."""
        key = self.store.key("controller", "leader")
        announced = False
        while True:
            self.session.check()
            if await self.store.commit([self.store.created(key, 0)],
                                       [(key, self.id.encode(), self.session.id)]):
                v = await self.store.view()
                if v.leader is not None and v.leader.lease == self.session.id:
                    self.leader_rev = v.leader.create
                    return
            v = await self.store.view()
            self._seen(v)
            if not announced and v.leader is not None:
                log.info("controller %s: following leader %s", self.id, v.leader.value)
                announced = True
            await asyncio.sleep(TICK)

    async def _tick(self, view: View) -> None:
        leader_guard = self.store.created(self.store.key("controller", "leader"),
                                          self.leader_rev)
        await self.resharder.tick(self.store, view, leader_guard)
        for sid in view.shard_ids():
            rec = view.shards[sid].value
            if rec.primary is None:
                continue  # a new shard: its first node claims it
            if view.live(rec.primary):
                self.blocked.pop(sid, None)
                await self._probe(view, sid, rec.primary)
                continue
            wait = self.revoked.get(sid, 0.0) - time.monotonic()
            if wait > 0:
                self._block(sid, f"shard {sid}: waiting {wait:.1f}s more for the fence of "
                                 f"{rec.primary}, whose lease was revoked")
                continue
            try:
                await failover(self.store, view, sid, reason=f"primary {rec.primary} lost its "
                               "lease", extra_compares=[leader_guard], nodes=self.nodes)
                self.blocked.pop(sid, None)
                why = "process_gone" if sid in self.revoked else "lease_expired"
                self.revoked.pop(sid, None)
                self.failovers[(sid, why)] = self.failovers.get((sid, why), 0) + 1
            except FailoverError as e:
                self._block(sid, str(e))

    def _block(self, sid: str, why: str) -> None:
        """Say once why shard `sid` cannot fail over yet."""
        if self.blocked.get(sid) != why:
            log.warning("controller: cannot fail over yet: %s", why)
            self.blocked[sid] = why

    def _seen(self, view: View) -> None:
        if view is not self.view:  # a view read now, not the last one yielded again
            self.view = view
            self.view_at = time.monotonic()

    async def _probe(self, view: View, sid: str, nid: str) -> None:
        n = view.nodes[nid]
        if await self.nodes.refused(*self.nodes.addr(n.value)):
            k = self.refusals[nid] = self.refusals.get(nid, 0) + 1
            if k >= DEAD_PROBES:
                seen = await self._seen_by_replicas(view, sid)
                log.warning("controller: primary %s of shard %s refused %d connections in a row; "
                            "revoking its lease %x; %s", nid, sid, k, n.lease,
                            "a replica still sees it: failing over after its fence" if seen else
                            "its replicas lost it too: the process is gone")
                with contextlib.suppress(Exception):
                    await self.store.revoke(n.lease)
                self.revoked[sid] = time.monotonic() + (FENCE_WAIT if seen else 0.0)
                self.refusals.pop(nid, None)
        else:
            self.refusals.pop(nid, None)

    async def _seen_by_replicas(self, view: View, sid: str) -> bool:
        """False only when every replica of shard `sid` answers that its link to the primary
        is down (see the module docstring): then the primary is gone, not cut off."""
        replicas = [view.nodes[r].value for r in view.shards[sid].value.replicas
                    if r in view.nodes]
        if not replicas:
            return True
        for rec in replicas:
            if await self.nodes.primary_link_up(*self.nodes.addr(rec)) is not False:
                return True
        return False


def run(conn: EtcdConfig | str, cluster: str, cid: str | None = None,
        node_password: str = "", move_timeout: float = reshard.MOVE_TIMEOUT,
        metrics_port: int = 0, bind: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None, node_user: str = "") -> int:
    """Run a controller until SIGINT/SIGTERM; `tls`: nodes are reached over TLS; it logs in
    to them as `node_user` (the default user when "") with `node_password`."""
    import signal

    import uvloop

    from base.store import Store

    async def main() -> int:
        c = Controller(Store(conn, cluster), cid, NodeOps(node_password, tls=tls, user=node_user),
                       move_timeout)
        metrics = None
        if metrics_port:
            from control.metrics import ControllerCollector
            from node import metricsserver

            mc = ControllerCollector(c)
            try:
                metrics = await metricsserver.start(metricsserver.new_registry(mc), mc.ready,
                                                    bind, metrics_port)
            except OSError as e:
                log.error("cannot listen for metrics on %s:%d: %s", bind,
                          metrics_port, e.strerror)
                return 1
        task = asyncio.ensure_future(c.run())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            stopped.cancel()
            await task  # it ended by itself: its error, if any, is the process's
        else:
            await cancel_and_wait(task)  # once may not be enough (base/tasks.py)
            log.info("controller %s: stopped", c.id)
        if metrics is not None:
            await metrics.stop()
        return 0

    return uvloop.run(main())
