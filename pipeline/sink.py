"""Writes to xshard streams, exactly once (pyspark.sql.datasource writers).

Rows are `(stream, fields[, id])`. A task groups its rows by shard (through their slot) and
pipelines them to each shard's primary as idempotent XADDs (Redis 8.6 IDMP, node/idmp.py):

    XADD stream IDMP <producer> <iid> (*|id) field value ...

- producer = the query (streaming: Spark's query ID, which survives restarts from the
  checkpoint; batch: the writeId option, or an ID drawn once per write) + the partition, and
  the row's chunk of idmpMaxsize rows within its stream;
- iid = the micro-batch (batch writes: 0) + the row's index in the task.

A retried task, or a micro-batch replayed after a restart, sends the same pairs again, and the
node answers the IDs of the first attempt instead of adding entries. This needs every pair of a
micro-batch to be remembered until it is committed: the sink raises each stream's IDMP-MAXSIZE
and IDMP-DURATION (XCFGSET) to the idmpMaxsize/idmpDuration options (default 10000 and 86400 s,
Redis's maxima), and starts a new producer for every idmpMaxsize rows of a stream.

A row whose stream is a partitioned stream's logical name (a record read from etcd when the
writer is made, on the driver; see pipeline/pstreams.py) is written to one of its partitions:
an explicit id ms-seq to partition seq mod stride (refused when that partition does not exist); else
the key field's value picks it as the routers pick it (base/records.py choose_partition), so
one value's rows stay in one partition, in order; else the row's index among the task's rows
of that stream, mod the partition count, spreads them. Both choices are the same when a task
is retried (its rows come in the same order), so every row meets its first attempt's IDMP pair
in the same partition. The producer and iid are counted per partition key, as for any stream.

Connection errors, MOVED and CLUSTERDOWN re-read the topology and resend what was not
acknowledged; duplicates are harmless by construction. A row without a stream or without fields
fails the task with an error that names the column.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from base.records import PStreamRecord
from pipeline.cluster import SEQ_MAX, Topology, XShardError, parse_id, retryable
from pipeline.options import Options
from pipeline.pstreams import Records, load

_PIPELINE = 1000  # XADDs per round trip


@dataclass
class Written(WriterCommitMessage):
    rows: int
    partition: int


def check_schema(schema: StructType) -> None:
    names = set(schema.fieldNames())
    missing = [c for c in ("stream", "fields") if c not in names]
    if missing:
        raise XShardError(f"the xshard sink needs columns stream and fields (and optionally "
                          f"id); missing: {', '.join(missing)}; got {', '.join(schema.names)}")


def _b(v: Any) -> bytes:
    if isinstance(v, bytes | bytearray):
        return bytes(v)
    return str(v).encode()


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)


def _query_and_batch() -> tuple[str | None, str | None]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, None
    return (ctx.getLocalProperty("sql.streaming.queryId"),
            ctx.getLocalProperty("streaming.sql.batchId"))


def write_rows(opts: Options, producer: str, batch: str, rows: Iterator[Any],
               records: Records | None = None) -> int:
    """XADD every row idempotently; returns the number of rows written. `records`: the
    partitioned streams, whose logical names are written to their partitions."""
    topo = Topology.discover(opts.url, opts.retry_timeout)
    try:
        per_stream: dict[bytes, int] = {}
        spread: dict[bytes, int] = {}
        pending: dict[int, list[list[bytes]]] = {}  # shard -> commands
        configured: set[bytes] = set()
        n = 0
        for i, row in enumerate(rows):
            cmd = _command(row, i, producer, batch, per_stream, opts, records or {},
                           spread)
            key = cmd[1]
            shard = topo.shard_of(key)
            q = pending.setdefault(shard, [])
            if key not in configured:
                configured.add(key)
                q += _configure(key, producer, opts)
            q.append(cmd)
            if len(q) >= _PIPELINE:
                _flush(topo, q)
                pending[shard] = []
            n += 1
        for q in pending.values():
            if q:
                _flush(topo, q)
        return n
    finally:
        topo.close()


def _command(row: Any, i: int, producer: str, batch: str, per_stream: dict[bytes, int],
             opts: Options, records: Records, spread: dict[bytes, int]) -> list[bytes]:
    stream = row["stream"]
    if stream is None or stream == "" or stream == b"":
        raise XShardError(f"xshard sink: row {i} of this task has no value in column `stream`")
    fields = row["fields"]
    if not fields:
        raise XShardError(f"xshard sink: row {i} of this task has no value in column `fields` "
                          "(a stream entry needs at least one field)")
    key = _b(stream)
    ident = row["id"] if "id" in row.__fields__ else None
    items = fields.items() if isinstance(fields, dict) else fields
    flat: list[bytes] = []
    for f, v in items:
        if f is None or v is None:
            raise XShardError(f"xshard sink: row {i} of this task has a null key or value in "
                              "column `fields`")
        flat += [_b(f), _b(v)]
    rec = records.get(key)
    if rec is not None:
        key = _partition_key(rec, key, ident, flat, spread)
    k = per_stream.get(key, 0)
    per_stream[key] = k + 1
    pid = f"{producer}:{k // opts.idmp_maxsize}".encode()
    return [b"XADD", key, b"IDMP", pid, f"{batch}:{i}".encode(),
            _b(ident) if ident is not None else b"*", *flat]


def _partition_key(rec: PStreamRecord, name: bytes, ident: Any, flat: list[bytes],
                   spread: dict[bytes, int]) -> bytes:
    """The partition a row of logical stream `name` goes to (see the module docstring);
    `spread` counts the task's rows of each logical stream that no key value placed."""
    explicit = _b(ident) if ident is not None else b"*"
    if explicit != b"*" and b"-" in explicit and not explicit.endswith(b"-*"):  # ms-seq
        try:
            p = rec.partition_of(parse_id(explicit) & SEQ_MAX)
        except ValueError:
            raise XShardError(f"xshard sink: id {ident!r} for stream {name!r} is not a "
                              "stream ID ms-seq") from None
        if p >= rec.partitions:
            raise XShardError(f"xshard sink: id {ident!r} names partition {p} of stream "
                              f"{name!r}, which has {rec.partitions} partitions")
        return rec.keys[p].encode()
    value = None
    if rec.key_field is not None:
        kf = rec.key_field.encode()
        value = next((flat[j + 1] for j in range(0, len(flat), 2) if flat[j] == kf), None)
    chosen = rec.choose(value)
    if chosen is None:
        chosen = spread.get(name, 0) % rec.partitions
        spread[name] = chosen + 1
    return rec.keys[chosen].encode()


def _configure(key: bytes, producer: str, opts: Options) -> list[list[bytes]]:
    """The stream's IDMP limits, set before its first XADD: an XCFGSET that changes a limit
    clears every producer's history (Redis 8.6), so set after a first XADD it would forget that
    row, and a retried task would write it again. XCFGSET needs the key, so an empty stream is
    made first (XGROUP CREATE ... MKSTREAM with a group of this task's, dropped at once; on a
    stream that exists it changes nothing)."""
    tmp = b"xshard-sink:" + producer.encode()
    return [[b"XGROUP", b"CREATE", key, tmp, b"$", b"MKSTREAM"],
            [b"XGROUP", b"DESTROY", key, tmp],
            [b"XCFGSET", key, b"IDMP-DURATION", b"%d" % opts.idmp_duration,
             b"IDMP-MAXSIZE", b"%d" % opts.idmp_maxsize]]


def _key_of(cmd: list[bytes]) -> bytes:
    """The stream a queued command writes (XGROUP names its subcommand first)."""
    return cmd[2] if cmd[0] == b"XGROUP" else cmd[1]


def _flush(topo: Topology, cmds: list[list[bytes]]) -> None:
    """Send one shard's commands in one pipeline; on a failover-like error, resend them all to
    the (re-read) owner of their key: XADD IDMP answers a repeat with the first ID."""
    def send() -> None:
        by_shard: dict[int, list[list[bytes]]] = {}
        for cmd in cmds:  # the owners again: a retry may follow a slot move
            by_shard.setdefault(topo.shard_of(_key_of(cmd)), []).append(cmd)
        for shard, group in by_shard.items():
            _send(topo, shard, group)

    topo.call(send, "XADD")


def _send(topo: Topology, shard: int, cmds: list[list[bytes]]) -> None:
    p = topo.conn(topo.node(shard)).pipeline(transaction=False)
    for cmd in cmds:
        p.execute_command(*cmd)
    replies = p.execute(raise_on_error=False)
    for cmd, r in zip(cmds, replies, strict=True):
        if isinstance(r, Exception):
            if cmd[0] == b"XGROUP" and "BUSYGROUP" in str(r):
                continue  # a resend after a failover: the DESTROY that follows drops it
            if not retryable(r):
                raise XShardError(f"xshard sink: {cmd[0].decode()} to stream "
                                  f"{_key_of(cmd)!r} failed: {r}")
            raise r


class XShardBatchWriter(DataSourceWriter):
    def __init__(self, opts: Options, schema: StructType) -> None:
        check_schema(schema)
        Topology.discover(opts.url, opts.retry_timeout).close()  # a bad URL fails here
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex
        self.records = load(opts)  # one partition count for every task of this write

    def write(self, iterator: Iterator[Any]) -> Written:
        part, _ = _task()
        n = write_rows(self.opts, f"{self.write_id}:{part}", "0", iterator, self.records)
        return Written(n, part)


class XShardStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: Options, schema: StructType) -> None:
        check_schema(schema)
        Topology.discover(opts.url, opts.retry_timeout).close()
        self.opts = opts
        self.records = load(opts)  # read when the query starts (see docs/spark.md)

    def write(self, iterator: Iterator[Any]) -> Written:
        part, _ = _task()
        query, batch = _query_and_batch()
        if query is None or batch is None:
            raise XShardError("xshard sink: no streaming query ID or batch ID in the task "
                              "context; exactly-once needs both")
        n = write_rows(self.opts, f"{query}:{part}", batch, iterator, self.records)
        return Written(n, part)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Nothing to do: every row was written idempotently by its task."""

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Rows already written stay; a replay of the batch adds none of them twice."""
