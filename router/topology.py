"""The router's link to etcd: watch the slot map, topology and partitioned streams, and
register on a lease.

A router keeps nothing that a restart would lose: everything it routes by is read
from etcd, and its own `routers/<id>` key lives on a lease session (base/lease.py) so that
CLUSTER SLOTS served by the other routers drops it within the lease TTL when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from base.etcdconn import EtcdConfig
from base.lease import LeaseSession
from base.store import Store, View
from router import pstreams
from router.aclsync import AclSync
from router.proxy import Router

log = logging.getLogger("xshard.router")


class EtcdTopology:
    def __init__(self, router: Router, conn: EtcdConfig | str, cluster: str) -> None:
        self.router = router
        self.store = Store(conn, cluster)
        self.session: LeaseSession | None = None
        self.acl = router.acl_sync = AclSync(router, self.store)  # users shared by the routers
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Connect, take the first view (routing needs it), register and start watching."""
        await self.store.connect()
        view = await self.store.view()
        self.apply(view)
        await self._register()
        self._tasks = [asyncio.ensure_future(self._watch()),
                       asyncio.ensure_future(self._registration())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.session is not None:
            await self.session.close()
        with contextlib.suppress(Exception):
            await self.store.close()

    def apply(self, view: View) -> None:
        r = self.router
        r.set_topology(
            nodes={nid: e.value.as_dict() for nid, e in view.nodes.items()},
            shards={sid: e.value.as_dict() for sid, e in view.shards.items()},
            slots=view.slots.value if view.slots is not None else [],
            version=view.slots.mod if view.slots is not None else 0,
            routers=[(rid, str(e.value.get("host")), int(e.value.get("port", 0)),
                      int(e.value.get("tls_port", 0))) for rid, e in view.routers.items()],
        )
        r.pstreams = pstreams.load(r, {name: e.value for name, e in view.pstreams.items()})
        self.acl.apply(view.acl)

    async def _register(self) -> None:
        """Open a lease session and put routers/<id> on it (guarded by the revision read)."""
        r = self.router
        key = self.store.key("routers", r.router_id)
        rec = {"id": r.router_id, "host": r.host, "port": r.config.port}
        if r.config.tls_port:
            rec["tls_port"] = r.config.tls_port
        value = json.dumps(rec).encode()
        session = await LeaseSession.open(self.store, name=f"router {r.router_id}")
        try:
            view = await self.store.view()
            cur = view.routers.get(r.router_id)
            if not await self.store.commit([self.store.guard(key, cur.mod if cur else 0)],
                                           [(key, value, session.id)]):
                raise RuntimeError(f"router id {r.router_id} was registered concurrently")
        except BaseException:
            await session.close()
            raise
        self.session = session
        log.info("registered as router %s (lease %x)", r.router_id, session.id)

    async def _registration(self) -> None:
        """Register again whenever the lease is lost (etcd away for a TTL, or expired)."""
        while True:
            if self.session is not None:
                why = await self.session.wait()
                log.warning("router lease lost (%s); registering again", why)
                self.session = None
            try:
                await self._register()
            except Exception as e:  # noqa: BLE001 - etcd away: keep trying
                log.warning("router registration failed (%s); retrying", type(e).__name__)
                await asyncio.sleep(0.5)

    async def _watch(self) -> None:
        async for view in self.store.views():
            try:
                before = self.router.map.version
                self.apply(view)
                if self.router.map.version != before:
                    log.info("slot map version %d", self.router.map.version)
            except Exception:  # noqa: BLE001 - a bad value must not stop the watch
                log.exception("cannot apply the topology")
