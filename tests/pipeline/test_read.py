"""Batch reads through the `xshard` source (issue 13, items 2-4 and 8).

Every expected value is computed from the cluster itself (XRANGE on every shard), never
hard-coded. One shared SparkSession (tests/pipeline/conftest.py).
"""

from __future__ import annotations

import json

import pytest
import redis

from pipeline.cluster import Topology
from pipeline.reader import XShardBatchReader, resolve
from tests.support.cluster import Cluster

# 300 s: the first test also pays for starting the shared SparkSession and the cluster.
pytestmark = [pytest.mark.spark, pytest.mark.etcd, pytest.mark.timeout(300)]


def node_url(c: Cluster, nid: str = "s0n0") -> str:
    return f"redis://127.0.0.1:{c.nodes[nid].port}"


def fill(r: redis.Redis, names: list[str], n: int, tag: str = "") -> None:
    p = r.pipeline(transaction=False)
    for i in range(n):
        for s in names:
            p.xadd(s, {"i": str(i), "s": s, "t": tag})
        if len(p) >= 500:
            p.execute()
    p.execute()


def truth(c: Cluster, names: list[str]) -> set[tuple]:
    """The union of XRANGE - + over the primaries of all shards, as output rows."""
    rows = set()
    for nid, h in c.nodes.items():
        if c.primary_id(c.node_shard[nid]) != nid:
            continue
        r = h.client()
        for s in names:
            if r.execute_command("CLUSTER", "KEYSLOT", s) is None:
                continue
            try:
                entries = r.xrange(s)
            except redis.ResponseError:  # MOVED: another shard owns it
                continue
            for eid, f in entries:
                ms, seq = eid.decode().split("-")
                rows.add((s, eid.decode(), int(ms), int(seq),
                          tuple(sorted((k.decode(), v.decode()) for k, v in f.items()))))
    return rows


def as_rows(df) -> list[tuple]:  # noqa: ANN001
    return [(r.stream, r.id, r.ms, r.seq, tuple(sorted(r.fields.items()))) for r in df.collect()]


@pytest.fixture(scope="module")
def data(cluster3: Cluster) -> list[str]:
    r = cluster3.nodes["s0n0"].client()
    rc = redis.RedisCluster(host="127.0.0.1", port=cluster3.nodes["s0n0"].port)
    names = [f"ev:{i}" for i in range(9)] + ["other"]
    fill(rc, names, 300)
    rc.close()
    r.close()
    return names


def test_batch_read_equals_the_union_of_xrange_over_all_shards(spark, cluster3: Cluster,  # noqa: ANN001
                                                               data: list[str]) -> None:
    want = truth(cluster3, data)
    assert len(want) == 3000
    read = spark.read.format("xshard").option("url", node_url(cluster3))
    rows = as_rows(read.option("streams", ",".join(data)).load())
    assert len(rows) == len(set(rows)) and set(rows) == want
    # A glob (SCAN on every shard), small pages and streams split into ID ranges.
    df = (read.option("streams", "ev:*").option("count", "7").option("splitEntries", "50")
          .load())
    assert df.rdd.getNumPartitions() > 9
    rows = as_rows(df)
    assert len(rows) == len(set(rows)) and set(rows) == {w for w in want if w[0] != "other"}


def test_read_through_a_router_finds_the_shards(spark, cluster3: Cluster, router3,  # noqa: ANN001
                                                data: list[str]) -> None:
    url = f"redis://127.0.0.1:{router3.port}"
    topo = Topology.discover(url)
    assert len(topo.shards) == 3
    assert {s.primary[1] for s in topo.shards} == {
        cluster3.nodes[cluster3.primary_id(str(i))].port for i in range(3)}
    df = spark.read.format("xshard").option("url", url).option("streams", "ev:*").load()
    assert set(as_rows(df)) == {w for w in truth(cluster3, data) if w[0] != "other"}


def test_replicas_and_offsets(spark, cluster3: Cluster, data: list[str]) -> None:  # noqa: ANN001
    """readFromReplicas gives the same rows; startingOffsets/endingOffsets are exclusive/
    inclusive bounds per stream."""
    want = truth(cluster3, ["ev:1", "ev:2"])
    read = (spark.read.format("xshard").option("url", node_url(cluster3))
            .option("streams", "ev:1,ev:2"))
    assert set(as_rows(read.option("readFromReplicas", "true").load())) == want
    ids = sorted((w[2], w[3], w[1]) for w in want if w[0] == "ev:1")
    lo, hi = ids[10][2], ids[20][2]
    df = read.option("startingOffsets", json.dumps({"ev:1": lo})) \
        .option("endingOffsets", json.dumps({"ev:1": hi})).load()
    got = {(r.stream, r.id) for r in df.collect()}
    assert got == {("ev:1", i[2]) for i in ids[11:21]} | {
        (w[0], w[1]) for w in want if w[0] == "ev:2"}


def test_filters_are_pushed_into_id_ranges(spark, cluster3: Cluster, data: list[str]) -> None:  # noqa: ANN001
    want = truth(cluster3, data)
    ms = sorted({w[2] for w in want})
    a, b = ms[len(ms) // 3], ms[2 * len(ms) // 3]
    one = sorted(want)[5]
    df = spark.read.format("xshard").option("url", node_url(cluster3)).option(
        "streams", "ev:*,other").load()
    got = set(as_rows(df.where(f"ms >= {a} and ms < {b} and stream in ('ev:1', 'other')")))
    assert got == {w for w in want if a <= w[2] < b and w[0] in ("ev:1", "other")}
    assert set(as_rows(df.where(f"id = '{one[1]}'"))) == {w for w in want if w[1] == one[1]}
    # Non-canonical IDs are compared as strings by Spark, so they must not become ranges.
    assert as_rows(df.where(f"id = '{one[2]}'")) == []
    # The reader itself: the pushed filters became its bounds.
    from pyspark.sql.datasource import EqualTo, GreaterThan, LessThanOrEqual, StringStartsWith

    from pipeline.options import parse

    rd = XShardBatchReader(parse({"url": node_url(cluster3), "streams": "ev:*"}, False))
    fs = [GreaterThan(("ms",), a), LessThanOrEqual(("ms",), b), EqualTo(("stream",), "ev:3"),
          StringStartsWith(("stream",), "ev")]
    left = list(rd.pushFilters(fs))
    assert left == [fs[3]]
    parts = rd.partitions()
    assert {p.stream for p in parts} == {b"ev:3"}
    assert min(p.lo for p in parts) == (a + 1) << 64 and max(p.hi >> 64 for p in parts) <= b


def test_ids_past_a_signed_long_wrap_and_filter_as_spark_compares(spark, cluster3: Cluster,  # noqa: ANN001
                                                                  tmp_path) -> None:  # noqa: ANN001
    """ID halves of 2^63 and more are negative in ms/seq (two's complement, `id` exact); a
    pushed `ms` filter keeps exactly the rows Spark's signed comparison keeps; the archive
    job orders such IDs unsigned (its re-run archives and trims nothing)."""
    from pipeline import archive
    from pipeline.cluster import MAX_ID

    big = 1 << 63
    ids = ["5-1", f"{big - 1}-{big}", f"{big}-0", f"{(1 << 64) - 1}-{(1 << 64) - 1}"]
    r = redis.RedisCluster(host="127.0.0.1", port=cluster3.nodes["s0n0"].port)
    for i in ids:
        r.xadd("wrap:x", {"i": i}, id=i)
    df = spark.read.format("xshard").option("url", node_url(cluster3)).option(
        "streams", "wrap:x").load()

    def signed(v: int) -> int:
        return v - (1 << 64) if v >= big else v

    rows = {(x.id, x.ms, x.seq) for x in df.collect()}
    assert rows == {(i, signed(int(i.split("-")[0])), signed(int(i.split("-")[1]))) for i in ids}
    assert {(x.ms % (1 << 64), x.seq % (1 << 64)) for x in df.collect()} == {
        tuple(map(int, i.split("-"))) for i in ids}
    for cond in ("ms < 10", "ms >= 0", "ms < 0", "ms = -1", "ms > 5", "ms <= -9223372036854775808",
                 "ms >= 5 and ms < 6", "ms > 9223372036854775806"):
        pushed = sorted(x.id for x in df.where(cond).collect())
        # `ms + 0` is not a column: Spark evaluates it itself.
        spark_side = sorted(x.id for x in df.where(cond.replace("ms", "(ms + 0)")).collect())
        assert pushed == spark_side, cond
    out = tmp_path / "arch"
    rep = archive.run(spark, node_url(cluster3), ["wrap:x"], str(out), MAX_ID)
    assert rep["wrap:x"] == {"archived": 3, "up_to": ids[2], "trimmed": 3}
    rep = archive.run(spark, node_url(cluster3), ["wrap:x"], str(out), MAX_ID)
    assert rep["wrap:x"] == {"archived": 0, "up_to": ids[2], "trimmed": 0}
    assert [e.decode() for e, _ in r.xrange("wrap:x")] == ids[3:]
    r.close()


def test_binary_variant_keeps_bytes(spark, cluster3: Cluster) -> None:  # noqa: ANN001
    """binary=true: stream and fields as bytes, exactly; without it, bytes that are not UTF-8
    read as replacement characters."""
    r = redis.RedisCluster(host="127.0.0.1", port=cluster3.nodes["s0n0"].port)
    name, field, value = b"bin:\xff\x00", b"\x00k\xfe", b"\xffv\x80"
    sid = r.xadd(name, {field: value, b"ok": "é".encode()})
    r.close()
    def read():  # noqa: ANN202 - a fresh DataFrameReader (.option changes it in place)
        return spark.read.format("xshard").option("url", node_url(cluster3)).option(
            "streams", "bin:*")

    df = read().option("binary", "true").load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("stream", "binary"), ("id", "string"), ("ms", "bigint"), ("seq", "bigint"),
        ("fields", "map<binary,binary>")]
    [row] = df.collect()
    assert (bytes(row.stream), row.id) == (name, sid.decode())
    assert {bytes(k): bytes(v) for k, v in row.fields.items()} == {field: value,
                                                                   b"ok": "é".encode()}
    [row] = read().load().collect()
    assert row.stream == name.decode("utf-8", "replace")
    assert row.fields == {field.decode("utf-8", "replace"): value.decode("utf-8", "replace"),
                          "ok": "é"}


def test_a_stale_topology_is_retried_after_moved(cluster3: Cluster, data: list[str]) -> None:
    """A call that meets a redirect re-reads the shards and succeeds. redis-py raises MOVED,
    ASK, CLUSTERDOWN, TRYAGAIN, READONLY and MASTERDOWN as classes of their own with the code
    stripped from the message; matching the message missed them, so a node that had not yet
    heard of a failover (answering MOVED to the old primary) failed the query."""
    from pipeline.cluster import retryable

    topo = Topology.discover(node_url(cluster3), retry_timeout=30)
    key = b"ev:1"
    i = topo.shard_of(key)
    j = (i + 1) % len(topo.shards)
    sh = topo.shards
    sh[i].primary, sh[j].primary = sh[j].primary, sh[i].primary  # as if a failover moved them
    with pytest.raises(redis.exceptions.MovedError):
        topo.conn(topo.node(topo.shard_of(key))).xlen(key)
    assert topo.call(lambda: topo.conn(topo.node(topo.shard_of(key))).xlen(key), "XLEN") == 300
    topo.close()
    ex = redis.exceptions
    for e in (ex.MovedError("5 h:1"), ex.AskError("5 h:1"), ex.ClusterDownError("down"),
              ex.MasterDownError("link down"), ex.TryAgainError("again"),
              ex.ReadOnlyError("replica"), ex.BusyLoadingError("loading"),
              ex.ResponseError("NOREPLICAS Not enough good replicas to write")):
        assert retryable(e), e
    assert not retryable(ex.ResponseError("WRONGTYPE Operation against a key"))


def test_resolve_globs_on_every_shard(cluster3: Cluster, data: list[str]) -> None:
    topo = Topology.discover(node_url(cluster3, "s1n0"))
    assert resolve(topo, ["ev:*"]) == sorted(s.encode() for s in data if s.startswith("ev:"))
    assert resolve(topo, ["ev:[12]", "missing"]) == [b"ev:1", b"ev:2", b"missing"]


@pytest.mark.parametrize("opts,needle", [
    ({"streams": "x", "bogus": "1"}, "unknown option(s) bogus"),
    ({"streams": "x", "url": "http://x:1"}, "is not redis://"),
    ({"streams": "x", "url": "redis://127.0.0.1"}, "is not redis://"),
    ({"streams": "x", "startingOffsets": "{not json"}, "option startingOffsets: expected"),
    ({"streams": "x", "startingOffsets": '{"x": "abc"}'}, "is not a stream ID"),
    ({"streams": "x", "startingOffsets": "latest"}, "'latest' is for streaming"),
    ({"streams": "x", "count": "0"}, "option count: must be between 1"),
    ({}, "option streams is required"),
])
def test_bad_options_give_one_clear_error(spark, cluster3: Cluster, opts: dict,  # noqa: ANN001
                                          needle: str) -> None:
    from pyspark.errors import PySparkException

    o = {"url": node_url(cluster3), **opts}
    with pytest.raises((PySparkException, Exception)) as ei:
        spark.read.format("xshard").options(**o).load().collect()
    msg = str(ei.value)
    assert needle in msg, msg
    assert msg.count(needle) >= 1
