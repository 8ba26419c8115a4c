"""The node's Prometheus families, read from the node's own state at scrape time.

A scrape runs on the event loop like a command, so everything here is bounded: commands,
clients, replication and persistence are counters the node keeps anyway. The per-stream
families (node/streammetrics.py) cover at most `metrics-max-streams` streams and are written
in chunks that give the loop back in between (`stream_text`).

Replicas export the per-stream families only while their link to the primary is up (their
data is then the primary's, up to the replication lag); during a full sync or with the link
down they export none, rather than stale values.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from base import histogram
from base.histogram import Histogram
from node.streammetrics import StreamMetrics, exposition

if TYPE_CHECKING:
    from node.server import Server

OFFSET_SAMPLES = 3000  # offset/time samples kept for replica lag in seconds (5 min at 10/s)


class OffsetClock:
    """When the replication offset reached each value, sampled ten times a second, so that a
    replica's lag in bytes also reads as seconds: the age of the oldest effect it lacks."""

    __slots__ = ("offsets", "times")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.times: list[float] = []

    def sample(self, offset: int, now: float) -> None:
        if self.offsets and self.offsets[-1] == offset:
            return
        self.offsets.append(offset)
        self.times.append(now)
        if len(self.offsets) > OFFSET_SAMPLES:
            del self.offsets[:OFFSET_SAMPLES // 10]
            del self.times[:OFFSET_SAMPLES // 10]

    def lag_seconds(self, acked: int, current: int, now: float) -> float:
        """Seconds since the primary first had an offset beyond `acked` (0 when caught up)."""
        if acked >= current or not self.offsets:
            return 0.0
        i = bisect_right(self.offsets, acked)
        t = self.times[min(i, len(self.times) - 1)]
        return max(0.0, now - t)


class NodeCollector:
    """The node's families (a prometheus_client custom collector)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.streams = StreamMetrics(server)
        self.clock = OffsetClock()
        self._tick()

    def _tick(self) -> None:
        self.clock.sample(self.server.effects.offset, time.monotonic())
        self.server.loop.call_later(0.1, self._tick)

    def ready(self) -> tuple[bool, str]:
        """/readyz: loaded (we serve only after loading), role known, not fenced."""
        s = self.server
        agent = s.agent
        if agent is not None and agent.epoch_seen < 0:
            return False, "role not known yet (no shard record read from etcd)"
        if s.role == "master" and s.check_fence() is not None:
            return False, "fenced: etcd lease or role not fresh"
        return True, ""

    async def stream_text(self, openmetrics: bool) -> bytes:
        """The per-stream families (MetricsServer's `extra`): none on a replica whose link to
        its primary is down."""
        r = self.server.replication
        if r is not None and r.is_replica and not r.replica.connected:
            return b""
        return await exposition(self.streams, openmetrics)

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        s = self.server
        yield from self._commands()
        yield GaugeMetricFamily("xshard_connected_clients", "Client connections.",
                                value=len(s.clients))
        yield GaugeMetricFamily("xshard_blocked_clients",
                                "Clients waiting in a blocking command (XREAD BLOCK, WAIT, ...).",
                                value=s.blocking.blocked_clients)
        yield from self._replication()
        yield from self._persistence()
        if s.agent is not None:
            from base.lease import etcd_rtt

            yield etcd_rtt()
        yield GaugeMetricFamily("xshard_metrics_tracked_streams", "Streams the per-stream "
                                "families cover (at most metrics-max-streams).",
                                value=len(self.streams.tracked))
        yield GaugeMetricFamily("xshard_metrics_untracked_partitions", "Partition keys "
                                "matching metrics-streams that the last full scan found no "
                                "room for (the cap is full of partitions): raise "
                                "metrics-max-streams.",
                                value=self.streams.untracked_partitions)

    def _commands(self) -> Iterator[Metric]:
        calls = CounterMetricFamily("xshard_commands", "Commands run, by command (INFO "
                                    "commandstats calls).", labels=["command"])
        errs = CounterMetricFamily("xshard_command_errors", "Commands refused or failed, by "
                                   "command (INFO commandstats rejected_calls + failed_calls).",
                                   labels=["command"])
        for name, st in sorted(self.server.stats.calls.items()):
            n, rejected, failed = st.calls, st.rejected, st.failed
            cmd = name.decode(errors="replace")
            calls.add_metric([cmd], n)
            errs.add_metric([cmd], rejected + failed)
        yield calls
        yield errs
        dur = HistogramMetricFamily("xshard_command_duration_seconds", "Run time of each "
                                    "command on the node (the handler, as INFO commandstats "
                                    "usec; power-of-two buckets).", labels=["command"])
        for cmd, bounds, cum, total in self.server.stats.iter_histograms():
            dur.add_metric([cmd], [("+Inf" if b == float("inf") else repr(b), n)
                                   for b, n in zip(bounds, cum, strict=True)], total)
        yield dur

    def _replication(self) -> Iterator[Metric]:
        s = self.server
        r = s.replication
        replica = r is not None and r.is_replica
        role = GaugeMetricFamily("xshard_role", "1 for the role this node has now: primary or "
                                 "replica.", labels=["role"])
        role.add_metric(["primary"], 0 if replica else 1)
        role.add_metric(["replica"], 1 if replica else 0)
        yield role
        offset = s.effects.offset
        yield GaugeMetricFamily("xshard_replication_offset", "Replication offset: bytes of "
                                "effects this node has (INFO master_repl_offset).", value=offset)
        fenced = s.role == "master" and s.check_fence() is not None
        yield GaugeMetricFamily("xshard_node_fenced", "1 while this primary refuses writes "
                                "(-CLUSTERDOWN) because its etcd lease or role is not fresh.",
                                value=int(fenced))
        lag_b = GaugeMetricFamily("xshard_replica_lag_bytes", "On a primary: effect bytes each "
                                  "attached replica has not acknowledged yet.",
                                  labels=["replica"])
        lag_s = GaugeMetricFamily("xshard_replica_lag_seconds", "On a primary: age of the "
                                  "oldest effect each attached replica has not acknowledged "
                                  "(0 when caught up; 100 ms resolution).", labels=["replica"])
        if r is not None and not replica:
            now = time.monotonic()
            for lk in r.primary.replicas:
                name = f"{lk.ip}:{lk.port}"
                lag_b.add_metric([name], max(0, offset - lk.ack_off))
                lag_s.add_metric([name], self.clock.lag_seconds(lk.ack_off, offset, now))
        yield lag_b
        yield lag_s

    def _persistence(self) -> Iterator[Metric]:
        p = self.server.persistence
        yield histogram.family(
            "xshard_aof_fsync_duration_seconds", "Time of each AOF fsync, from its start to "
            "its completion seen by the loop (what a client waits with appendfsync always).",
            [], [([], p.fsync_times if p is not None else Histogram())])
        yield CounterMetricFamily("xshard_persistence_errors", "Failed AOF writes, fsyncs, "
                                  "manifest switches, snapshots and rewrites.",
                                  value=p.error_count if p is not None else 0)
