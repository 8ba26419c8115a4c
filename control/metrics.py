"""The controller's Prometheus families, and the etcd round-trip family every lease holder
(node agent, router, controller) exports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from base.lease import etcd_rtt

if TYPE_CHECKING:
    from control.controller import Controller

# Why the controller failed a shard over (xshard_failovers_total's `reason`): the primary's
# lease expired, or the controller revoked it because the process refused connections.
FAILOVER_REASONS = ("lease_expired", "process_gone")
READY_WITHIN = 5.0  # seconds: a controller that read etcd this recently is connected


class ControllerCollector:
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def describe(self) -> list[Metric]:
        return []

    def ready(self) -> tuple[bool, str]:
        """/readyz: connected to etcd (read a view recently)."""
        if time.monotonic() - self.c.view_at <= READY_WITHIN:
            return True, ""
        return False, f"no etcd read in the last {READY_WITHIN:.0f} s"

    def collect(self) -> Iterator[Metric]:
        c = self.c
        yield GaugeMetricFamily("xshard_controller_leader", "1 while this controller is the "
                                "elected leader (the one that fails shards over).",
                                value=int(c.leader_rev > 0))
        f = CounterMetricFamily("xshard_failovers", "Failovers this controller made, by "
                                "shard and reason (lease_expired: the primary's etcd lease "
                                "ran out; process_gone: it refused connections and its lease "
                                "was revoked). Counts since this controller started.",
                                labels=["shard", "reason"])
        shards = set(c.view.shard_ids()) if c.view is not None else set()
        shards |= {s for s, _ in c.failovers}
        for sid in sorted(shards):
            for why in FAILOVER_REASONS:
                f.add_metric([sid, why], c.failovers.get((sid, why), 0))
        yield f
        yield GaugeMetricFamily("xshard_controller_blocked_failovers", "Shards without a live "
                                "primary that the leader cannot fail over yet (no live "
                                "replica, ...).", value=len(c.blocked))
        yield etcd_rtt()
