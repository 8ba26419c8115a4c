"""The router's link to etcd: watch the slot map and topology, and register on a lease.

A router keeps nothing that a restart would lose (DESIGN §3): everything it routes by is read
from etcd, and its own `routers/<id>` key lives on a lease so that CLUSTER SLOTS served by the
other routers drops it within the lease TTL when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from control.store import KEEPALIVE_INTERVAL, NODE_TTL, EtcdError, Store, View
from router.proxy import Router

log = logging.getLogger("xshard.router")


class EtcdTopology:
    def __init__(self, router: Router, url: str, cluster: str) -> None:
        self.router = router
        self.store = Store(url, cluster)
        self.lease = 0
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Connect, take the first view (routing needs it) and start watching."""
        await self.store.connect()
        view = await self.store.view()
        self.apply(view)
        await self._register()
        self._tasks = [asyncio.ensure_future(self._watch()),
                       asyncio.ensure_future(self._keepalive())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.lease:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.store.revoke(self.lease), 1)
        with contextlib.suppress(Exception):
            await self.store.close()

    def apply(self, view: View) -> None:
        r = self.router
        r.set_topology(
            nodes={nid: e.value.as_dict() for nid, e in view.nodes.items()},
            shards={sid: e.value.as_dict() for sid, e in view.shards.items()},
            slots=view.slots.value if view.slots is not None else [],
            version=view.slots.mod if view.slots is not None else 0,
            routers=[(rid, str(e.value.get("host")), int(e.value.get("port", 0)))
                     for rid, e in view.routers.items()],
        )

    async def _register(self) -> None:
        r = self.router
        key = self.store.key("routers", r.router_id)
        value = json.dumps({"id": r.router_id, "host": r.host, "port": r.config.port}).encode()
        self.lease = await self.store.grant(NODE_TTL)
        view = await self.store.view()
        cur = view.routers.get(r.router_id)
        ok = await self.store.commit([self.store.guard(key, cur.mod if cur else 0)],
                                     [(key, value, self.lease)])
        if not ok:
            raise RuntimeError(f"router id {r.router_id} was registered concurrently")
        log.info("registered as router %s (lease %x)", r.router_id, self.lease)

    async def _watch(self) -> None:
        async for view in self.store.views():
            try:
                before = self.router.map.version
                self.apply(view)
                if self.router.map.version != before:
                    log.info("slot map version %d", self.router.map.version)
            except Exception:  # noqa: BLE001 - a bad value must not stop the watch
                log.exception("cannot apply the topology")

    async def _keepalive(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_INTERVAL)
            try:
                ttl = await asyncio.wait_for(self.store.keepalive(self.lease), 2)
                if ttl <= 0:
                    log.warning("router lease expired; registering again")
                    await self._register()
            except (TimeoutError, EtcdError, OSError, RuntimeError) as e:
                log.warning("etcd keep-alive failed: %s", type(e).__name__)
