"""The HTTP side of metrics, shared by node, router and controller: /metrics, /healthz, /readyz.

It runs on the process's own event loop (aiohttp), so a scrape reads the process's state
between two commands, without locks. Collectors must therefore be cheap and bounded: a scrape
runs synchronously, like a command.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector

log = logging.getLogger("xshard.metrics")

# (ready, reason): /readyz answers 200 with "ready", or 503 with the reason.
Readiness = Callable[[], tuple[bool, str]]
# More exposition text, written by the process itself (OpenMetrics when the flag is set).
Extra = Callable[[bool], Awaitable[bytes]]


def new_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry with the standard process, platform and GC collectors and ours."""
    reg = CollectorRegistry(auto_describe=False)
    for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR, *collectors):
        reg.register(c)
    return reg


class MetricsServer:
    """An aiohttp site serving one registry and one readiness check."""

    def __init__(self, registry: CollectorRegistry, ready: Readiness,
                 extra: Extra | None = None) -> None:
        self.registry = registry
        self.ready = ready
        self.extra = extra
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0: a free port); returns the port."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        # A probe or scrape in flight must not hold the process's shutdown (aiohttp waits up
        # to 60 s for running handlers by default).
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                    shutdown_timeout=1.0)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, reuse_address=True)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info("metrics on http://%s:%d/metrics", host, self.port)
        return self.port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        om = "application/openmetrics-text" in request.headers.get("Accept", "")
        more = await self.extra(om) if self.extra is not None else b""
        if om:
            body, ctype = openmetrics.generate_latest(self.registry), openmetrics.CONTENT_TYPE_LATEST
            if more:  # before the final "# EOF"
                body = body[:-len(b"# EOF\n")] + more + b"# EOF\n"
        else:
            body, ctype = generate_latest(self.registry) + more, CONTENT_TYPE_LATEST
        # aiohttp refuses a content_type with parameters; the header carries them whole.
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        ok, why = self.ready()
        return web.Response(text=("ready" if ok else why) + "\n", status=200 if ok else 503)


async def start(registry: CollectorRegistry, ready: Readiness, host: str, port: int,
                extra: Extra | None = None) -> MetricsServer | None:
    """Start the endpoint when `port` is set (0 = metrics off): the caller's one line."""
    if not port:
        return None
    ms = MetricsServer(registry, ready, extra)
    await ms.start(host, port)
    return ms
