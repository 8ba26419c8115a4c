"""Per-stream metrics: which streams are exported, the delivery histograms, and their text.

The node exports per-stream families for at most `metrics-max-streams` streams whose names
match `metrics-streams` (the *tracked* streams). A stream is admitted when a scrape's bounded
scan of the key space (SCAN_BUDGET keys per scrape, resuming where the last one stopped) or its
first delivery to a group finds it while there is room; a deleted one leaves at the next scrape
and makes room. A scrape reads each tracked stream's counters in O(groups), never its entries.

Partition keys (`{TAG}NAME#p/S`, node/stream.py partition_of_key) carry two more labels,
`logical_stream="NAME"` and `partition="p"`, so that rules can add a logical stream up over
its partitions; plain streams carry neither. A partition key matches `metrics-streams` by its
logical name, so a glob takes all of a logical stream's partitions or none, and partitions
come first within the cap: one found while the cap is full takes the place of the plain
stream admitted last. So a logical stream is only partly tracked on a node that holds more
matching partitions than the cap, and then not silently: the scan keeps looking while the cap
is full, and `untracked_partitions` is how many it had to refuse in its last full pass.

The delivery histogram is observed as XREADGROUP delivers (`observe_delivery`, called by
node/commands/reads.py), once per entry and group, from the entry ID's time.

These families are written as exposition text here, not through prometheus_client's family
objects: at ~10 us per sample those took 30 ms for 1000 streams in one go, all of it a stall
of the node's loop. `exposition` writes the lines itself and yields to the loop after every
CHUNK streams, so a scrape of any size never holds the loop for more than one chunk.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from itertools import islice
from typing import TYPE_CHECKING

from base.histogram import MsHistogram
from node.patterns import stringmatch
from node.stream import Stream, partition_of_key

if TYPE_CHECKING:
    from node.groups import ConsumerGroup
    from node.server import Server

SCAN_BUDGET = 20000  # keys looked at per scrape (only partition keys while the cap is full)
MIN_TIME_ID_MS = 946684800000  # 2000-01-01: an ID below this is not a time (e.g. 1-1)
_LAG_WALK_NODES = 256  # stream nodes walked to estimate a lag Redis reports as NULL
CHUNK = 100  # streams written between two yields to the loop


def logical_of(key: bytes) -> tuple[bytes, int] | None:
    """(logical name, partition) of a partition key `{TAG}NAME#p/S`, else None."""
    pp = partition_of_key(key)
    if pp is None:
        return None
    return key[key.index(b"}") + 1:key.rindex(b"#")], pp[0]


def stream_labels(key: bytes) -> str:
    """The label pairs of a stream's series: `stream`, plus `logical_stream` and `partition`
    for a partition key."""
    lp = logical_of(key)
    if lp is None:
        return f'stream="{_label(key)}"'
    return f'stream="{_label(key)}",logical_stream="{_label(lp[0])}",partition="{lp[1]}"'


class StreamMetrics:
    """The tracked streams and their delivery histograms (see the module docstring)."""

    __slots__ = ("server", "tracked", "_plain", "delivery", "untracked_partitions",
                 "_refused", "_scan_pos")

    def __init__(self, server: Server) -> None:
        self.server = server
        # Every tracked stream (insertion-ordered) with its series' label pairs; `_plain` the
        # plain ones among them, in admission order (the last is the first to give way).
        self.tracked: dict[bytes, str] = {}
        self._plain: dict[bytes, None] = {}
        self.delivery: dict[tuple[bytes, bytes], MsHistogram] = {}
        self.untracked_partitions = 0  # partition keys refused in the last full scan pass
        self._refused = 0  # ... in the pass now under way
        self._scan_pos = 0

    def matches(self, key: bytes) -> bool:
        """Does `key` match metrics-streams (a partition key: by its logical name)?"""
        pattern = self.server.config.metrics_streams.encode(errors="surrogateescape")
        lp = logical_of(key)
        return stringmatch(pattern, key if lp is None else lp[0])

    def admit(self, key: bytes) -> bool:
        """Track `key` if its name matches and there is room; a partition key makes room by
        pushing out the plain stream admitted last."""
        if key in self.tracked:
            return True
        cap = self.server.config.metrics_max_streams
        part = partition_of_key(key) is not None
        if len(self.tracked) >= cap and not (part and self._plain) or not self.matches(key):
            return False
        if len(self.tracked) >= cap:
            out = next(reversed(self._plain))
            del self._plain[out], self.tracked[out]
        self.tracked[key] = stream_labels(key)
        if not part:
            self._plain[key] = None
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

    def _forget(self, key: bytes) -> None:
        del self.tracked[key]
        self._plain.pop(key, None)

    def refresh(self) -> None:
        """At scrape time: forget what is gone, scan a bounded part of the key space, then
        drop the histograms of streams no longer tracked (pushed out by a partition too)."""
        self._scan()
        data = self.server.db.data
        if self.delivery:
            for kg in [kg for kg in self.delivery if kg[0] not in self.tracked
                       or kg[1] not in data[kg[0]].groups]:
                del self.delivery[kg]

    def _scan(self) -> None:
        """Forget what is gone or over the cap, then look at the next SCAN_BUDGET keys."""
        data = self.server.db.data
        cap = self.server.config.metrics_max_streams
        for key in [k for k in self.tracked if type(data.get(k)) is not Stream
                    or not self.matches(k)]:
            self._forget(key)
        while len(self.tracked) > cap:  # the cap was lowered (CONFIG SET): plain ones first
            self._forget(next(reversed(self._plain)) if self._plain
                         else next(reversed(self.tracked)))
        if not data or not cap:
            self.untracked_partitions = self._refused = self._scan_pos = 0
            return
        if self._scan_pos >= len(data):  # a full pass is over
            self.untracked_partitions, self._refused, self._scan_pos = self._refused, 0, 0
        pos = self._scan_pos
        keys = list(islice(data, pos, pos + SCAN_BUDGET))
        self._scan_pos = pos + len(keys)
        for key in keys:
            if len(self.tracked) >= cap and key[:1] != b"{":
                continue  # full: only a partition key may still get in (or be counted)
            if type(data[key]) is Stream and not self.admit(key) and (
                    partition_of_key(key) is not None and self.matches(key)):
                self._refused += 1


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


# (name, type, help) of each family, in the order they are written.
_FAMILIES = (
    ("xshard_stream_length", "gauge", "Entries in the stream (XLEN)."),
    ("xshard_stream_entries_added", "counter",
     "Entries ever added to the stream (XINFO STREAM entries-added)."),
    ("xshard_stream_group_lag", "gauge",
     "Entries not yet delivered to the group: XINFO GROUPS lag; where that is NULL (entries "
     "deleted after the group's last ID), an estimate from the stream's nodes after that ID."),
    ("xshard_stream_group_pending", "gauge",
     "Entries delivered to the group and not acknowledged (XPENDING count)."),
    ("xshard_stream_group_nacked", "counter",
     "Pending entries the group's consumers released with XNACK (Redis 8.8), since this "
     "process started."),
    ("xshard_stream_group_oldest_pending_age_seconds", "gauge",
     "Seconds since the last delivery of the group's lowest pending ID that a consumer owns "
     "(0 with none): grows while a consumer holds an entry without acknowledging it. "
     "Entries released by XNACK are counted by xshard_stream_group_nacked_total instead."),
    ("xshard_stream_group_consumer_idle_seconds", "gauge",
     "Seconds since the consumer's last attempted interaction (XINFO CONSUMERS idle); only "
     "with metrics-consumers yes."),
    ("xshard_delivery_latency_seconds", "histogram",
     "Time from an entry's ID (its XADD time) to its first delivery to the group by "
     "XREADGROUP; entries with IDs that are no time (below the year 2000) are not observed."),
)


def _oldest_owned_age(g: ConsumerGroup, now_ms: int) -> float:
    """Seconds since the delivery of the lowest pending ID some consumer owns: one look per
    consumer, since an XNACK'ed entry (delivery time 0, nobody's) may be the lowest of all."""
    pel = g.pel
    if not pel:
        return 0.0
    first = pel.peekitem(0)
    if first[1][2] is None:  # unowned: take the lowest owned one instead
        heads = [c.pel[0] for c in g.consumers.values() if c.pel]
        if not heads:
            return 0.0
        first = (0, pel[min(heads)])
    return max(0, now_ms - first[1][0]) / 1000


def _label(v: bytes) -> str:
    s = v.decode(errors="replace")
    if "\\" in s or '"' in s or "\n" in s:
        s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return s


async def exposition(sm: StreamMetrics, openmetrics: bool) -> bytes:
    """The per-stream families as exposition text (Prometheus 0.0.4 or OpenMetrics: for these
    families they differ only in the counter's HELP/TYPE name)."""
    sm.refresh()
    cfg = sm.server.config
    consumers = bool(cfg.metrics_consumers)
    lines: dict[str, list[str]] = {name: [] for name, _, _ in _FAMILIES}
    length, added = lines["xshard_stream_length"], lines["xshard_stream_entries_added"]
    lag, pending = lines["xshard_stream_group_lag"], lines["xshard_stream_group_pending"]
    oldest = lines["xshard_stream_group_oldest_pending_age_seconds"]
    nacked = lines["xshard_stream_group_nacked"]
    idle = lines["xshard_stream_group_consumer_idle_seconds"]
    keys = list(sm.tracked)
    for i in range(0, len(keys), CHUNK):
        if i:
            await asyncio.sleep(0)  # let commands run between chunks
        data = sm.server.db.data
        now_ms = int(time.time() * 1000)
        for key in keys[i:i + CHUNK]:
            st = data.get(key)
            if type(st) is not Stream:
                continue  # deleted while we yielded
            sk = sm.tracked.get(key)
            if sk is None:
                continue  # pushed out or forgotten while we yielded
            sl = "{" + sk + "}"
            length.append(f"xshard_stream_length{sl} {st.length}")
            added.append(f"xshard_stream_entries_added_total{sl} {st.entries_added}")
            for gname, g in st.groups.items():
                gl = f'{{{sk},group="{_label(gname)}"}}'
                n = g.lag(st)
                if n is None:
                    n = estimated_lag(st, g)
                lag.append(f"xshard_stream_group_lag{gl} {n}")
                pending.append(f"xshard_stream_group_pending{gl} {len(g.pel)}")
                nacked.append(f"xshard_stream_group_nacked_total{gl} {g.nacked_total}")
                age = _oldest_owned_age(g, now_ms)
                oldest.append(f"xshard_stream_group_oldest_pending_age_seconds{gl} {age!r}")
                if consumers:
                    for c in g.consumers.values():
                        idle.append(f'xshard_stream_group_consumer_idle_seconds{gl[:-1]},'
                                    f'consumer="{_label(c.name)}"}} '
                                    f"{max(0, now_ms - c.seen_time) / 1000!r}")
    hist = lines["xshard_delivery_latency_seconds"]
    for (key, group), h in list(sm.delivery.items()):
        gl = f'{sm.tracked.get(key) or stream_labels(key)},group="{_label(group)}"'
        for le, n in h.cumulative():
            hist.append(f'xshard_delivery_latency_seconds_bucket{{{gl},le="{le}"}} {n}')
        hist.append(f"xshard_delivery_latency_seconds_count{{{gl}}} {sum(h.counts)}")
        hist.append(f"xshard_delivery_latency_seconds_sum{{{gl}}} {h.sum!r}")
    out = []
    for name, kind, doc in _FAMILIES:
        if name == "xshard_stream_group_consumer_idle_seconds" and not consumers:
            continue
        shown = name if openmetrics or kind != "counter" else name + "_total"
        out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {kind}\n")
        if lines[name]:
            out.append("\n".join(lines[name]) + "\n")
    return "".join(out).encode()
