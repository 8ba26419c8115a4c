"""The node's Prometheus families, read from the node's own state at scrape time.

A scrape runs on the event loop like a command, so everything here is bounded:
- commands, clients, replication and persistence are counters the node keeps anyway;
- per-stream families cover at most `metrics-max-streams` streams whose names match
  `metrics-streams` (the *tracked* streams). A stream is admitted when a scrape's bounded scan
  of the key space (SCAN_BUDGET keys per scrape, resuming where the last one stopped) or its
  first delivery to a group finds it while there is room; a deleted one leaves at the next
  scrape and makes room. A scrape reads each tracked stream's counters in O(groups), never its
  entries, so 100k streams cost a scrape no more than the cap allows;
- the delivery histogram is observed as XREADGROUP delivers (`observe_delivery`), once per
  entry and group, from the entry ID's time.

Replicas export the per-stream families only while their link to the primary is up (their
data is then the primary's, up to the replication lag); during a full sync or with the link
down they export none, rather than stale values.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from node import histogram
from node.cmdstats import CALLS, FAILED, REJECTED
from node.histogram import Histogram, MsHistogram
from node.patterns import stringmatch
from node.stream import Stream

if TYPE_CHECKING:
    from node.groups import ConsumerGroup
    from node.server import Server

SCAN_BUDGET = 20000  # keys looked at per scrape while fewer streams than the cap are tracked
OFFSET_SAMPLES = 3000  # offset/time samples kept for replica lag in seconds (5 min at 10/s)
MIN_TIME_ID_MS = 946684800000  # 2000-01-01: an ID below this is not a time (e.g. 1-1)
_LAG_WALK_NODES = 256  # stream nodes walked to estimate a lag Redis reports as NULL


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


class StreamMetrics:
    """The tracked streams and their delivery histograms (see the module docstring)."""

    __slots__ = ("server", "tracked", "delivery", "_scan_pos")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.tracked: dict[bytes, None] = {}  # insertion-ordered set of stream names
        self.delivery: dict[tuple[bytes, bytes], MsHistogram] = {}
        self._scan_pos = 0

    def admit(self, key: bytes) -> bool:
        """Track `key` if its name matches and there is room."""
        if key in self.tracked:
            return True
        cfg = self.server.config
        if len(self.tracked) >= cfg.metrics_max_streams:
            return False
        if not stringmatch(cfg.metrics_streams.encode(errors="surrogateescape"), key):
            return False
        self.tracked[key] = None
        return True

    def observe_delivery(self, key: bytes, group: bytes, sids: list[int], now_ms: int) -> None:
        """XREADGROUP delivered `sids` (new to the group): observe each one's time in transit."""
        h = self.delivery.get((key, group))
        if h is None:
            if not self.admit(key):
                return
            h = self.delivery[(key, group)] = MsHistogram()
        h.observe_ms_many(now_ms - (sid >> 64) if now_ms > sid >> 64 else 0
                          for sid in sids if sid >> 64 >= MIN_TIME_ID_MS)

    def refresh(self) -> None:
        """At scrape time: forget what is gone, then scan a bounded part of the key space."""
        data = self.server.db.data
        cfg = self.server.config
        for key in [k for k in self.tracked if type(data.get(k)) is not Stream
                    or not stringmatch(cfg.metrics_streams.encode(errors="surrogateescape"), k)]:
            del self.tracked[key]
        over = len(self.tracked) - cfg.metrics_max_streams
        if over > 0:  # the cap was lowered (CONFIG SET)
            for key in list(islice(self.tracked, len(self.tracked) - over, None)):
                del self.tracked[key]
        if self.delivery:
            for kg in [kg for kg in self.delivery if kg[0] not in self.tracked
                       or kg[1] not in data[kg[0]].groups]:
                del self.delivery[kg]
        if len(self.tracked) >= cfg.metrics_max_streams or not data:
            return
        pos = self._scan_pos if self._scan_pos < len(data) else 0
        keys = list(islice(data, pos, pos + SCAN_BUDGET))
        self._scan_pos = pos + len(keys)
        for key in keys:
            if type(data[key]) is Stream and not self.admit(key) and (
                    len(self.tracked) >= cfg.metrics_max_streams):
                break

    def streams(self) -> Iterator[tuple[str, Stream]]:
        data = self.server.db.data
        for key in self.tracked:
            yield key.decode(errors="replace"), data[key]


def estimated_lag(s: Stream, g: ConsumerGroup) -> int:
    """Entries after the group's last ID when Redis cannot say (XINFO's lag is NULL): whole
    stream nodes after it counted exactly, the node holding it counted half; past
    _LAG_WALK_NODES nodes, the rest is assumed as full as the walked ones."""
    last = g.last_id
    if last >= s.last_id or not s.length:
        return 0
    if last < s.first_id:
        return s.length
    firsts, nodes = s._firsts, s._nodes
    i = bisect_left(firsts, last + 1)  # the first node that starts after `last`
    walked = nodes[i:i + _LAG_WALK_NODES]
    n = sum(nd.live for nd in walked)
    rest = len(nodes) - i - len(walked)
    if rest > 0 and walked:
        n += rest * n // len(walked)
    if i > 0:
        n += nodes[i - 1].live // 2
    return n


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
            from control.metrics import etcd_rtt

            yield etcd_rtt()
        r = s.replication
        if r is None or not r.is_replica or r.replica.connected:
            yield from self._streams()

    def _commands(self) -> Iterator[Metric]:
        calls = CounterMetricFamily("xshard_commands", "Commands run, by command (INFO "
                                    "commandstats calls).", labels=["command"])
        errs = CounterMetricFamily("xshard_command_errors", "Commands refused or failed, by "
                                   "command (INFO commandstats rejected_calls + failed_calls).",
                                   labels=["command"])
        for name, st in sorted(self.server.stats.calls.items()):
            n, rejected, failed = st[CALLS], st[REJECTED], st[FAILED]
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

    def _streams(self) -> Iterator[Metric]:
        sm = self.streams
        sm.refresh()
        cfg = self.server.config
        now_ms = int(time.time() * 1000)
        length = GaugeMetricFamily("xshard_stream_length", "Entries in the stream (XLEN).",
                                   labels=["stream"])
        added = CounterMetricFamily("xshard_stream_entries_added", "Entries ever added to the "
                                    "stream (XINFO STREAM entries-added).", labels=["stream"])
        lag = GaugeMetricFamily(
            "xshard_stream_group_lag", "Entries not yet delivered to the group: XINFO GROUPS "
            "lag; where that is NULL (entries deleted after the group's last ID), an estimate "
            "from the stream's nodes after that ID.", labels=["stream", "group"])
        pending = GaugeMetricFamily("xshard_stream_group_pending", "Entries delivered to the "
                                    "group and not acknowledged (XPENDING count).",
                                    labels=["stream", "group"])
        oldest = GaugeMetricFamily(
            "xshard_stream_group_oldest_pending_age_seconds", "Seconds since the last "
            "delivery of the group's lowest pending ID (0 with nothing pending): grows while a "
            "consumer holds an entry without acknowledging it.", labels=["stream", "group"])
        nacked = CounterMetricFamily(
            "xshard_stream_group_nacked", "Pending entries the group's consumers released "
            "with XNACK (Redis 8.8), since this process started.", labels=["stream", "group"])
        idle = GaugeMetricFamily("xshard_stream_group_consumer_idle_seconds", "Seconds since "
                                 "the consumer's last attempted interaction (XINFO CONSUMERS "
                                 "idle); only with metrics-consumers yes.",
                                 labels=["stream", "group", "consumer"])
        consumers = cfg.metrics_consumers
        for name, st in sm.streams():
            length.add_metric([name], st.length)
            added.add_metric([name], st.entries_added)
            for gname, g in st.groups.items():
                gl = [name, gname.decode(errors="replace")]
                n = g.lag(st)
                lag.add_metric(gl, n if n is not None else estimated_lag(st, g))
                pending.add_metric(gl, len(g.pel))
                nacked.add_metric(gl, g.nacked_total)
                if g.pel:
                    t = g.pel.peekitem(0)[1][0]
                    oldest.add_metric(gl, max(0, now_ms - t) / 1000)
                else:
                    oldest.add_metric(gl, 0)
                if consumers:
                    for c in g.consumers.values():
                        idle.add_metric([*gl, c.name.decode(errors="replace")],
                                        max(0, now_ms - c.seen_time) / 1000)
        yield length
        yield added
        yield lag
        yield pending
        yield nacked
        yield oldest
        if consumers:
            yield idle
        yield histogram.family(
            "xshard_delivery_latency_seconds", "Time from an entry's ID (its XADD time) to "
            "its first delivery to the group by XREADGROUP; entries with IDs that are no time "
            "(below the year 2000) are not observed.", ["stream", "group"],
            (([k.decode(errors="replace"), g.decode(errors="replace")], h)
             for (k, g), h in sm.delivery.items()))
        yield GaugeMetricFamily("xshard_metrics_tracked_streams", "Streams the per-stream "
                                "families cover (at most metrics-max-streams).",
                                value=len(sm.tracked))
