"""Batch and streaming reads of xshard streams (pyspark.sql.datasource readers).

A partition is one ID range of one stream: [lo, hi], both inclusive. It is read with XRANGE in
pages of `count`, each page starting exclusively after the last ID of the one before, from the
stream's primary (or a replica that has caught up to hi, with readFromReplicas), and sent to
Spark as Arrow record batches. The same range always gives the same rows, so a micro-batch that
Spark replays after a restart reads exactly what it read the first time.

Batch: one partition per stream, or several ID ranges (split by time) for a stream longer than
splitEntries. Filters on `stream`, `id` (equality) and `ms` are pushed into the ranges when
`spark.sql.python.filterPushdown.enabled` is on (Spark 4.1+); otherwise Spark filters.

`ms` and `seq` are an ID's two unsigned 64-bit halves in Spark's signed LONG: a half of 2^63 or
more wraps to a negative number (two's complement, so `ms % 2**64` gives it back), and `id`
always holds the exact ID. Such IDs exist only when written explicitly (the clock is ~2^40 ms).
Pushed `ms` filters select exactly the rows Spark's signed comparison would: `ms < 10` also
matches the wrapped IDs.

A partitioned stream's logical name (records read from etcd, pipeline/pstreams.py) stands for
its partitions: each is read as a stream of its own, its rows carrying the logical name.

Streaming: offsets are {stream key: last-id} (a partition key for each partition).
latestOffset re-resolves the globs and the records (new streams and new partitions start
from their first entry) and asks every shard for its streams' last IDs in one pipeline. With
maxEntriesPerTrigger (or Spark 4.2's ReadMaxRows) each stream with new entries gets an equal
share of the limit. With `group`, commit moves that consumer group's last-delivered ID to the
committed offset (XGROUP SETID ... ENTRIESREAD n), so XINFO shows the pipeline's lag; entries are
never read through the group, so nothing is delivered with NOACK or left pending.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import redis
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from pipeline.cluster import SEQ_MAX, Topology, XShardError, format_id, parse_id
from pipeline.options import Options
from pipeline.pstreams import Records, Source, expand, load, named, refuse_unseen_logical

_GLOB = set("*?[")
_ENTRIES_READ_CAP = 100_000  # entries counted past a commit offset to compute ENTRIESREAD


def schema(binary: bool, partition: bool = False) -> str:
    """The rows' schema; partitionColumn adds `partition INT` (null for a plain stream)."""
    extra = ", partition INT" if partition else ""
    if binary:
        return "stream BINARY, id STRING, ms LONG, seq LONG, fields MAP<BINARY,BINARY>" + extra
    return "stream STRING, id STRING, ms LONG, seq LONG, fields MAP<STRING,STRING>" + extra


def name_of(key: bytes) -> str:
    """A stream name as an offset key (JSON); round-trips any bytes."""
    return key.decode("utf-8", "surrogateescape")


def key_of(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def resolve(topo: Topology, patterns: list[str], replicas: bool = False) -> list[bytes]:
    """Names as given, and globs matched with SCAN on every shard; sorted, no repeats."""
    keys: set[bytes] = set()
    for p in patterns:
        if _GLOB & set(p):
            keys.update(topo.scan(key_of(p), replicas))
        else:
            keys.add(key_of(p))
    return sorted(keys)


def sources(topo: Topology, opts: Options, records: Records) -> list[Source]:
    """The stream keys to read: `resolve`, with logical names as their partitions."""
    if opts.etcd is None:
        refuse_unseen_logical(topo, [key_of(p) for p in opts.streams if not _GLOB & set(p)])
    return expand(resolve(topo, opts.streams, opts.from_replicas), opts.streams, records)


def _given(offsets: dict[str, int], src: Source) -> int | None:
    """An offset given for this key, else for its logical stream (then for every partition)."""
    for n in (name_of(src.key), name_of(src.name)):
        if n in offsets:
            return offsets[n]
    return None


@dataclass
class Range(InputPartition):
    """One stream's entries with lo <= ID <= hi (or only the IDs in `points`); rows carry
    `name` (a partition's logical name) and `partition` (its index, None for a plain stream)."""

    stream: bytes
    lo: int
    hi: int
    pick: int = 0  # which replica, with readFromReplicas
    points: tuple[int, ...] | None = None
    name: bytes = b""
    partition: int | None = None

    def __init__(self, stream: bytes, lo: int, hi: int, pick: int = 0,
                 points: tuple[int, ...] | None = None, src: Source | None = None) -> None:
        super().__init__(None)
        self.stream, self.lo, self.hi, self.pick, self.points = stream, lo, hi, pick, points
        self.name = src.name if src is not None else stream
        self.partition = src.partition if src is not None else None


# -- reading one range --------------------------------------------------------------------------
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _signed(v: int) -> int:
    """An unsigned 64-bit ID half as Spark's LONG (two's complement)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def ms_spans(lo: int, hi: int) -> list[tuple[int, int]]:
    """The unsigned ms intervals whose signed LONG value is in [lo, hi] (signed bounds): the
    non-negative part as is, the negative part as the wrapped IDs at 2^63 and above."""
    out = []
    if hi >= 0 and max(lo, 0) <= hi:
        out.append((max(lo, 0), hi))
    if lo < 0 and lo <= min(hi, -1):
        out.append((lo + (1 << 64), min(hi, -1) + (1 << 64)))
    return out


def _column(values: list[bytes], binary: bool) -> pa.Array:
    arr = pa.array(values, pa.binary())
    if binary:
        return arr
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: replacement characters, as Python would
        return pa.array([v.decode("utf-8", "replace") for v in values], pa.string())


def to_arrow(stream: bytes, page: list[Any], binary: bool, partition: int | None = None,
             with_partition: bool = False) -> pa.RecordBatch:
    """A page of XRANGE ([id, [f, v, ...]] ...) as a record batch of the source's schema
    (`stream` is the name the rows carry; `partition` their column with partitionColumn)."""
    ids = [e[0] for e in page]
    ms = []
    seq = []
    for i in ids:
        a, _, b = i.partition(b"-")
        ms.append(_signed(int(a)))
        seq.append(_signed(int(b)))
    keys: list[bytes] = []
    vals: list[bytes] = []
    offsets = [0]
    for e in page:
        f = e[1]
        keys += f[0::2]
        vals += f[1::2]
        offsets.append(len(keys))
    fields = pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), _column(keys, binary),
                                     _column(vals, binary))
    n = len(page)
    s = stream if binary else stream.decode("utf-8", "replace")
    cols = [pa.array([s] * n, pa.binary() if binary else pa.string()),
            pa.array([i.decode() for i in ids], pa.string()), pa.array(ms, pa.int64()),
            pa.array(seq, pa.int64()), fields]
    names = ["stream", "id", "ms", "seq", "fields"]
    if with_partition:
        cols.append(pa.array([partition] * n, pa.int32()))
        names.append("partition")
    return pa.RecordBatch.from_arrays(cols, names=names)


def _raw(c: redis.Redis) -> redis.Redis:
    """No reply callbacks for the commands we parse ourselves (XRANGE: keep repeated fields)."""
    for name in ("XRANGE", "XREVRANGE"):
        c.set_response_callback(name, lambda r, **kw: r)
    return c


def _source_addr(topo: Topology, part: Range, replicas: bool) -> tuple[str, int]:
    """A replica that already has `hi` (waiting briefly), else the primary."""
    shard = topo.shard_of(part.stream)
    if not replicas or not topo.shards[shard].replicas:
        return topo.node(shard)
    addr = topo.node(shard, True, part.pick)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            c = topo.conn(addr)
            last = c.execute_command("XINFO", "STREAM", part.stream)
            d = {last[i]: last[i + 1] for i in range(0, len(last), 2)}
            if parse_id(d[b"last-generated-id"]) >= part.hi:
                return addr
        except redis.ResponseError as e:
            if "no such key" not in str(e):
                break
        except redis.RedisError:
            break
        time.sleep(0.05)
    return topo.node(shard)


def read_range(topo: Topology, part: Range, count: int, replicas: bool
               ) -> Iterator[list[Any]]:
    """Pages of entries of one range; every page starts after the previous one's last ID."""
    if part.points is not None:
        for p in part.points:
            if part.lo <= p <= part.hi:
                ident = format_id(p)
                page = topo.call(lambda ident=ident: _raw(topo.conn(topo.node(
                    topo.shard_of(part.stream)))).execute_command(
                    "XRANGE", part.stream, ident, ident), "XRANGE")
                if page:
                    yield page
        return
    if part.lo > part.hi:
        return
    start = format_id(part.lo)
    end = format_id(part.hi)
    while True:
        def page_fn(start: str = start) -> list[Any]:
            return _raw(topo.conn(_source_addr(topo, part, replicas))).execute_command(
                "XRANGE", part.stream, start, end, "COUNT", count)
        page = topo.call(page_fn, "XRANGE")
        if not page:
            return
        yield page
        last = parse_id(page[-1][0])
        if len(page) < count or last >= part.hi:
            return
        start = "(" + format_id(last)


def read_batches(topo: Topology, opts: Options, part: Range) -> Iterator[pa.RecordBatch]:
    if not isinstance(part, Range):  # Spark's stand-in when partitions() returned none
        return
    try:
        for page in read_range(topo, part, opts.count, opts.from_replicas):
            yield to_arrow(part.name, page, opts.binary, part.partition, opts.partition_column)
    finally:
        topo.close()


# -- batch ----------------------------------------------------------------------------------------
class XShardBatchReader(DataSourceReader):
    def __init__(self, opts: Options) -> None:
        if opts.starting == "latest":
            raise XShardError("option startingOffsets: 'latest' is for streaming queries; a "
                              "batch read starts at 'earliest' or at JSON offsets")
        self.opts = opts
        self.topo = Topology.discover(opts.url, opts.retry_timeout)
        self.ms_lo = _LONG_MIN  # pushed bounds on the signed `ms` column
        self.ms_hi = _LONG_MAX
        self.points: set[int] | None = None
        self.only: set[bytes] | None = None

    def partitions(self) -> list[Range]:
        """Input partitions: each stream (each partition of a logical stream) on its own, the
        long ones split in ID ranges."""
        o = self.opts
        srcs = sources(self.topo, o, load(o))
        if self.only is not None:
            srcs = [x for x in srcs if x.name in self.only]
        streams = [x.key for x in srcs]
        last = self.topo.last_ids(streams)
        starting = o.starting if isinstance(o.starting, dict) else {}
        ending = o.ending if isinstance(o.ending, dict) else {}
        lens = self._lengths(streams)
        parts: list[Range] = []
        spans = ms_spans(self.ms_lo, self.ms_hi)
        pts = tuple(sorted(self.points)) if self.points is not None else None
        for x in srcs:
            s = x.key
            after, upto = _given(starting, x), _given(ending, x)
            for a, b in spans:
                lo = max(after + 1 if after is not None else 0, a << 64)
                hi = min(upto if upto is not None else last[s], last[s], b << 64 | SEQ_MAX)
                if lo <= hi and last[s]:
                    pieces = -(-lens[s] // o.split_entries) if pts is None else 1
                    parts += self._split(x, lo, hi, pieces, pts, len(parts))
        return parts

    @staticmethod
    def _split(x: Source, lo: int, hi: int, pieces: int, pts: tuple[int, ...] | None,
               n: int) -> list[Range]:
        """[lo, hi] in up to `pieces` ranges of equal time spans."""
        lo_ms, hi_ms = lo >> 64, hi >> 64
        pieces = max(1, min(pieces, hi_ms - lo_ms + 1))
        out = []
        start = lo
        for i in range(1, pieces + 1):
            end = hi if i == pieces else (lo_ms + (hi_ms - lo_ms) * i // pieces) << 64 | SEQ_MAX
            if start <= end:
                out.append(Range(x.key, start, end, n + len(out), pts, x))
            start = end + 1
        return out

    def _lengths(self, streams: list[bytes]) -> dict[bytes, int]:
        by_shard: dict[int, list[bytes]] = {}
        for s in streams:
            by_shard.setdefault(self.topo.shard_of(s), []).append(s)
        out: dict[bytes, int] = {}
        for shard, keys in by_shard.items():
            def one(shard: int = shard, keys: list[bytes] = keys) -> list[int]:
                p = self.topo.conn(self.topo.node(shard)).pipeline(transaction=False)
                for k in keys:
                    p.xlen(k)
                return p.execute()
            out.update(zip(keys, self.topo.call(one, "XLEN"), strict=True))
        return out

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """ms ranges, id equality and stream equality become the partitions' ranges; the rest
        (and anything we could not express exactly) is left to Spark."""
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Filter) -> bool:
        col = f.attribute[0] if len(f.attribute) == 1 else None
        if col == "ms" and isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan
                                      | LessThanOrEqual) and isinstance(f.value, int):
            v = f.value
            if not _LONG_MIN <= v <= _LONG_MAX:
                return False
            if isinstance(f, EqualTo | GreaterThanOrEqual):
                self.ms_lo = max(self.ms_lo, v)
            if isinstance(f, GreaterThan):
                self.ms_lo = max(self.ms_lo, v + 1)
            if isinstance(f, EqualTo | LessThanOrEqual):
                self.ms_hi = min(self.ms_hi, v)
            if isinstance(f, LessThan):
                if v == _LONG_MIN:
                    self.ms_lo, self.ms_hi = 1, 0  # nothing
                else:
                    self.ms_hi = min(self.ms_hi, v - 1)
            return True
        if col == "id" and isinstance(f, EqualTo | In):
            vals = [f.value] if isinstance(f, EqualTo) else list(f.value)
            ids = set()
            for v in vals:
                # Only canonical IDs: Spark compares the strings, so "5" must match nothing.
                if not isinstance(v, str):
                    return False
                try:
                    sid = parse_id(v)
                except ValueError:
                    return False
                if format_id(sid) != v:
                    return False
                ids.add(sid)
            self.points = ids if self.points is None else self.points & ids
            return True
        if col == "stream" and isinstance(f, EqualTo | In) and not self.opts.binary:
            vals = [f.value] if isinstance(f, EqualTo) else list(f.value)
            if not all(isinstance(v, str) for v in vals):
                return False
            names = {key_of(v) for v in vals}
            self.only = names if self.only is None else self.only & names
            return True
        return False

    def read(self, partition: Range) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_batches(self.topo, self.opts, partition)


class XShardBatchReaderNoPushdown(XShardBatchReader):
    """The same reader for sessions without spark.sql.python.filterPushdown.enabled (Spark
    refuses a reader that implements pushFilters there)."""

    pushFilters = DataSourceReader.pushFilters  # type: ignore[assignment]


# -- streaming --------------------------------------------------------------------------------
class XShardStreamReader(DataSourceStreamReader):
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.topo = Topology.discover(opts.url, opts.retry_timeout)
        self._last_end: dict[str, str] | None = None
        self._records: Records = {}

    def _sources(self) -> list[Source]:
        """The streams now, with the records read again (an alter's new partitions)."""
        self._records = load(self.opts)
        return sources(self.topo, self.opts, self._records)

    def initialOffset(self) -> dict[str, str]:
        """{stream key: last ID read}; a logical stream has one offset per partition key."""
        o = self.opts
        srcs = self._sources()
        streams = [x.key for x in srcs]
        if o.starting == "latest":
            return {name_of(k): format_id(v) for k, v in self.topo.last_ids(streams).items()}
        given = o.starting if isinstance(o.starting, dict) else {}
        out = {name_of(k): "0-0" for k in streams}
        for x in srcs:  # a logical name's offset applies to each of its partitions
            v = _given(given, x)
            if v is not None:
                out[name_of(x.key)] = format_id(v)
        out.update({k: format_id(v) for k, v in given.items() if key_of(k) not in self._records})
        return out

    def latestOffset(self, start: dict[str, str] | None = None,
                     limit: Any = None) -> dict[str, str]:
        """The end of the next micro-batch. Spark 4.0/4.1 call it without arguments."""
        if start is None:
            start = self._last_end if self._last_end is not None else self.initialOffset()
        o = self.opts
        streams = {x.key for x in self._sources()}
        streams.update(key_of(k) for k in start)
        latest = self.topo.last_ids(sorted(streams))
        cur = {name_of(k): parse_id(start.get(name_of(k), "0-0")) for k in streams}
        end = {n: max(cur[n], latest[key_of(n)]) for n in cur}
        cap = o.max_entries
        if limit is not None:
            cap = getattr(limit, "max_rows", None)  # ReadAllAvailable: no cap
        if cap is not None:
            end = self._admit(cur, end, cap)
        out = {n: format_id(v) for n, v in sorted(end.items())}
        self._last_end = out
        return out

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.opts.max_entries is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_entries)

    def _admit(self, cur: dict[str, int], end: dict[str, int], cap: int) -> dict[str, int]:
        """At most max(cap, streams) new entries: each stream with news gets cap // streams."""
        busy = sorted(n for n in end if end[n] > cur[n])
        if not busy:
            return end
        share = max(1, cap // len(busy))
        by_shard: dict[int, list[str]] = {}
        for n in busy:
            by_shard.setdefault(self.topo.shard_of(key_of(n)), []).append(n)
        out = dict(end)
        for shard, names in by_shard.items():
            def one(shard: int = shard, names: list[str] = names) -> list[Any]:
                p = _raw(self.topo.conn(self.topo.node(shard))).pipeline(transaction=False)
                for n in names:
                    p.execute_command("XRANGE", key_of(n), "(" + format_id(cur[n]),
                                      format_id(end[n]), "COUNT", share)
                return p.execute()
            for n, page in zip(names, self.topo.call(one, "XRANGE"), strict=True):
                out[n] = parse_id(page[-1][0]) if page else cur[n]
        return out

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[Range]:
        if self.opts.etcd is not None and not self._records:
            self._records = load(self.opts)  # a batch replayed at a restart, before any plan
        parts = []
        for n in sorted(end):
            lo = parse_id(start.get(n, "0-0")) + 1
            hi = parse_id(end[n])
            if lo <= hi:
                parts.append(Range(key_of(n), lo, hi, len(parts),
                                   src=named(self._records, key_of(n))))
        return parts

    def read(self, partition: Range) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_batches(self.topo, self.opts, partition)

    def commit(self, end: dict[str, str]) -> None:
        if self.opts.group:
            for n, ident in sorted(end.items()):
                if parse_id(ident):
                    self.topo.call(lambda n=n, ident=ident: self._move_group(key_of(n), ident),
                                   "XGROUP SETID")

    def _move_group(self, key: bytes, ident: str) -> None:
        """XGROUP SETID key group id ENTRIESREAD n, n counted in one transaction with the
        stream's counters (created at id if missing). Without an exact n (entries deleted past
        id, or too many to count) ENTRIESREAD is left out and Redis estimates the lag."""
        group = self.opts.group
        c = _raw(self.topo.conn(self.topo.node(self.topo.shard_of(key))))
        p = c.pipeline(transaction=True)
        p.execute_command("XINFO", "STREAM", key)
        p.execute_command("XRANGE", key, "(" + ident, "+", "COUNT", _ENTRIES_READ_CAP)
        p.execute_command("XINFO", "GROUPS", key)
        info, after, groups = p.execute()
        d = info if isinstance(info, dict) else \
            {info[i]: info[i + 1] for i in range(0, len(info), 2)}
        d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
        sid = parse_id(ident)
        exact = (len(after) < _ENTRIES_READ_CAP
                 and parse_id(d["max-deleted-entry-id"]) <= sid)
        extra = ["ENTRIESREAD", int(d["entries-added"]) - len(after)] if exact else []
        names = set()
        for g in groups:
            gd = g if isinstance(g, dict) else {g[i]: g[i + 1] for i in range(0, len(g), 2)}
            names.add(gd.get(b"name", gd.get("name")))
        if group.encode() in names or group in names:
            c.execute_command("XGROUP", "SETID", key, group, ident, *extra)
        else:
            c.execute_command("XGROUP", "CREATE", key, group, ident, *extra)

    def stop(self) -> None:
        self.topo.close()


__all__ = ["Range", "XShardBatchReader", "XShardBatchReaderNoPushdown",
           "XShardStreamReader", "resolve", "schema", "to_arrow"]
