"""The router's Prometheus families: requests, upstream round trips per shard, redirects,
waits for a shard without a primary, the slot map's version, clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from base import histogram
from base.histogram import Histogram
from node.resp import error_code
from router.upstream import RETRYABLE

if TYPE_CHECKING:
    from router.proxy import Router


def _bucket(bounds: tuple[float, ...], v: float) -> int:
    """bisect_left(bounds, v): compiled, a C loop over a dozen bounds instead of a call."""
    i, n = 0, len(bounds)
    while i < n:
        b = bounds[i]
        if b >= v:
            break
        i += 1
    return i


class RoundTrips:
    """One shard's round trips: a Histogram's buckets as C fields (router/metrics.pxd), counted
    per relayed reply; `histogram()` is the Histogram a scrape exports."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self) -> None:
        self.bounds: tuple[float, ...] = histogram.LATENCY_BOUNDS
        self.counts: list[int] = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def histogram(self) -> Histogram:
        h = Histogram(self.bounds)
        h.counts = list(self.counts)
        h.sum = self.sum
        return h


class UpstreamStats:
    """Observed by every `Forward` reply (router/forward.py): its round trip, by shard, and
    whether the shard failed it (connection lost, or an error that makes the router wait)."""

    __slots__ = ("router", "slot_owner", "times", "errors", "clusterdown_waits", "_nodes",
                 "_by_addr")

    def __init__(self, router: Router) -> None:
        self.router = router
        self.slot_owner: list[str | None] = router.map.owner  # (Router.set_topology keeps it)
        self.times: dict[str, RoundTrips] = {}
        self.errors: dict[str, int] = {}
        self.clusterdown_waits = 0  # requests that had to wait for a shard to get a primary
        self._nodes: object = None
        self._by_addr: dict[tuple[str, int], str] = {}

    def replied(self, slot: int | None, addr: tuple[str, int] | None, r: bytes | None,
                dt: float) -> None:
        """A request for `slot` (or, without one, sent to `addr`) got `r` after `dt` seconds.
        Called per relayed reply: compiled (router/metrics.pxd), with Histogram.observe
        inlined, it costs no interpreted call."""
        shard = (self.slot_owner[slot] or "none") if slot is not None \
            else self.shard_of(slot, addr)
        h = self.times.get(shard)
        if h is None:
            h = self.times[shard] = RoundTrips()
        h.counts[_bucket(h.bounds, dt)] += 1  # Histogram.observe
        h.sum += dt
        # Per relayed reply: a C byte test (b"-") spares the good replies the error_code call.
        if r is None or (len(r) > 0 and r[0] == 45 and error_code(r) in RETRYABLE):
            self.errors[shard] = self.errors.get(shard, 0) + 1

    def shard_of(self, slot: int | None, addr: tuple[str, int] | None) -> str:
        m = self.router.map
        if slot is not None:
            return m.owner[slot] or "none"
        if self._nodes is not m.nodes:  # the map was replaced: index it again
            self._nodes = m.nodes
            tls = self.router.tls
            self._by_addr = {(n.host, n.client_port(tls)): n.shard for n in m.nodes.values()}
        return self._by_addr.get(addr, "none") if addr is not None else "none"


class RouterCollector:
    def __init__(self, router: Router, etcd: bool) -> None:
        self.router = router
        self.etcd = etcd

    def describe(self) -> list[Metric]:
        return []

    def ready(self) -> tuple[bool, str]:
        """/readyz: the slot map is known."""
        if self.router.map.ranges:
            return True, ""
        return False, "slot map not known yet"

    def collect(self) -> Iterator[Metric]:
        r = self.router
        up = r.upstream
        yield CounterMetricFamily("xshard_router_requests", "Client requests the router "
                                  "received.", value=r.stats.total_commands)
        yield histogram.family("xshard_router_upstream_duration_seconds", "Round trip of "
                               "each request forwarded to a node, by the shard it went to.",
                               ["shard"], (([s], h.histogram())
                                           for s, h in sorted(up.times.items())))
        errs = CounterMetricFamily("xshard_router_upstream_errors", "Forwarded requests a "
                                   "shard failed: connection lost, or CLUSTERDOWN, TRYAGAIN, "
                                   "LOADING or MASTERDOWN (the router then retries).",
                                   labels=["shard"])
        for s in sorted(set(up.errors) | set(r.map.shards)):
            errs.add_metric([s], up.errors.get(s, 0))
        yield errs
        red = CounterMetricFamily("xshard_router_redirects", "-MOVED and -ASK replies the "
                                  "router followed.", labels=["kind"])
        for kind, n in sorted(r.redirects.items()):
            red.add_metric([kind], n)
        yield red
        yield CounterMetricFamily("xshard_router_clusterdown_waits", "Requests that waited "
                                  "for a shard without a primary (up to "
                                  "--cluster-down-timeout-ms).", value=up.clusterdown_waits)
        yield GaugeMetricFamily("xshard_router_slotmap_version", "etcd revision of the slot "
                                "map the router routes by.", value=r.map.version)
        yield GaugeMetricFamily("xshard_connected_clients", "Client connections.",
                                value=len(r.clients))
        yield GaugeMetricFamily("xshard_blocked_clients", "Clients waiting in a blocking "
                                "read.", value=sum(1 for c in r.clients.values()
                                                   if c.blocked is not None))
        if self.etcd:
            from base.lease import etcd_rtt

            yield etcd_rtt()
