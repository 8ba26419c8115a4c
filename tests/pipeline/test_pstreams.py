"""Spark on partitioned streams (issue 27): reads of a logical stream's partitions in parallel,
offsets per partition, and the sink writing to the logical stream.

The logical streams are made with `xshard stream create/alter` against the module's cluster
(3 shards, a replica each, a router). What Spark returns is compared with what the router says
the logical stream holds (XRANGE - + on the logical name) and with the partitions read
directly from their owners.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
import redis

from base.records import PStreamRecord
from pipeline.pstreams import Source, expand
from tests.conftest import NodeHandle
from tests.pipeline.conftest import started
from tests.pipeline.test_stream import group_follows
from tests.support.cluster import Cluster, run_cli
from tests.support.procs import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.etcd, pytest.mark.timeout(300)]


def xs(c: Cluster, *args: str) -> None:
    r = run_cli("stream", *args, "--etcd", c.url or "", "--cluster", c.name)
    assert r.returncode == 0, r


def record(c: Cluster, name: str) -> PStreamRecord:
    return c.view().pstreams[name].value


def url(h: NodeHandle) -> str:
    return f"redis://127.0.0.1:{h.port}"


def opts(c: Cluster) -> dict[str, str]:
    return {"etcd": c.url or "", "cluster": c.name}


def rc(c: Cluster) -> redis.RedisCluster:
    return redis.RedisCluster(host="127.0.0.1", port=c.nodes["s0n0"].port)


def fill(r: redis.Redis, name: str, n: int, tag: str) -> None:
    p = r.pipeline(transaction=False)
    for i in range(n):
        p.xadd(name, {"i": str(i), "t": tag, "user": f"u{i % 7}"})
    p.execute()


def logical(r: redis.Redis, name: str) -> dict[str, dict[str, str]]:
    """The logical stream's entries as the router merges them: id -> fields."""
    return {e.decode(): {k.decode(): v.decode() for k, v in f.items()}
            for e, f in r.xrange(name)}


def parquet_rows(spark, path: Path) -> list[tuple]:  # noqa: ANN001
    if not path.exists():
        return []
    df = spark.read.schema("stream string, id string, partition int").parquet(str(path))
    return [(x.stream, x.id, x.partition) for x in df.collect()]


def last_offsets(ckpt: Path) -> dict[str, str]:
    """The newest offsets Spark logged in the checkpoint (its last line: the source's JSON)."""
    logs = sorted((ckpt / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(logs[-1].read_text().strip().splitlines()[-1])


def test_expand_maps_logical_names_and_partition_keys() -> None:
    rec = PStreamRecord(2, 64, ["{a}ev#0/64", "{b}ev#1/64"])
    recs = {b"ev": rec}
    got = expand([b"ev", b"plain", b"{b}ev#1/64"], ["ev", "plain", "*"], recs)
    assert got == [Source(b"plain", b"plain"), Source(b"{a}ev#0/64", b"ev", 0),
                   Source(b"{b}ev#1/64", b"ev", 1)]
    assert expand([], ["e?"], recs) == got[1:]  # a glob matches the logical names
    assert expand([b"ev"], ["ev"], {}) == [Source(b"ev", b"ev")]  # no records: a plain key


def test_batch_read_of_a_6_partition_stream(spark, cluster3: Cluster,  # noqa: ANN001
                                            router3: NodeHandle) -> None:
    xs(cluster3, "create", "bev", "--partitions", "6")
    rec = record(cluster3, "bev")
    r = router3.client()
    fill(r, "bev", 600, "b")
    r.xadd("bplain", {"i": "0"})
    want = logical(r, "bev")
    assert len(want) == 600
    per_part = {p: r.execute_command("XLEN", k) for p, k in enumerate(rec.keys)}
    assert sum(per_part.values()) == 600 and all(per_part.values()), per_part

    def read():  # noqa: ANN202 - a new reader each time (option() changes the reader)
        return spark.read.format("xshard").option("url", url(router3)).options(**opts(cluster3))

    df = read().option("streams", "bev,bplain").option("partitionColumn", "true").load()
    assert df.rdd.getNumPartitions() == 7  # one per partition, one for the plain stream
    rows = df.collect()
    got = {x.id: x for x in rows if x.stream == "bev"}
    assert len(got) == len([x for x in rows if x.stream == "bev"]) == 600
    assert {i: dict(x.fields) for i, x in got.items()} == want
    assert all(x.partition == x.seq % rec.stride for x in got.values())
    assert {p: sum(1 for x in got.values() if x.partition == p) for p in per_part} == per_part
    assert [(x.stream, x.partition) for x in rows if x.stream != "bev"] == [("bplain", None)]

    # The per-stream range split applies to each partition; a glob matches the logical name;
    # without partitionColumn the schema is the usual one.
    split = read().option("streams", "bev*").option("splitEntries", "30").load()
    assert split.rdd.getNumPartitions() > 6
    assert split.columns == ["stream", "id", "ms", "seq", "fields"]
    assert sorted(x.id for x in split.collect()) == sorted(want)
    # Offsets per partition key or per logical name (then for every partition).
    ids = sorted(want, key=lambda i: tuple(map(int, i.split("-"))))
    mid = ids[300]
    start = read().option("streams", "bev").option("startingOffsets", json.dumps({"bev": mid}))
    after = {x.id for x in start.load().collect()}
    key = lambda i: tuple(map(int, i.split("-")))  # noqa: E731
    assert after == {i for i in want if key(i) > key(mid)}
    k0 = rec.keys[0]
    one = read().option("streams", "bev").option("endingOffsets", json.dumps({k0: "0-0"}))
    assert {x.partition for x in one.option("partitionColumn", "true").load().collect()} == \
        set(range(1, 6))
    # Without etcd the name would read as an empty plain stream: refused, naming the option.
    with pytest.raises(Exception, match="give the option etcd"):
        spark.read.format("xshard").option("url", url(router3)).option(
            "streams", "bev").load().count()
    # A name that is neither a key nor a logical stream still reads as an empty plain one.
    assert spark.read.format("xshard").option("url", url(router3)).option(
        "streams", "nothing-here").load().count() == 0
    r.close()


def test_stream_resumes_each_partition_and_picks_up_new_ones(  # noqa: PLR0915
        spark, cluster3: Cluster, router3: NodeHandle, tmp_path: Path) -> None:  # noqa: ANN001
    xs(cluster3, "create", "sev", "--partitions", "6")
    r = router3.client()
    r.xgroup_create("sev", "pipe", "0")
    fill(r, "sev", 300, "1")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def start():  # noqa: ANN202
        df = (spark.readStream.format("xshard").option("url", url(router3))
              .options(**opts(cluster3)).option("streams", "sev")
              .option("maxEntriesPerTrigger", "60").option("group", "pipe")
              .option("partitionColumn", "true").load())
        return (df.select("stream", "id", "partition").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(ckpt))
                .trigger(processingTime="200 milliseconds").start())

    q = started(start)
    try:
        wait_until(lambda: len(parquet_rows(spark, out)) >= 60, 120, what="first batches")
        # Two partitions more while the query runs: read from their start, at a next batch.
        xs(cluster3, "alter", "sev", "--partitions", "8")
        rec = record(cluster3, "sev")
        c = rc(cluster3)
        for k in rec.keys[6:]:  # a cluster-aware client writes the new partitions directly
            for i in range(10):
                c.xadd(k, {"i": str(i), "t": "new"})
        fill(r, "sev", 80, "2")
        wait_until(lambda: len(parquet_rows(spark, out)) >= 90, 120, what="more batches")
    finally:
        q.stop()
    assert len(parquet_rows(spark, out)) >= 90
    offs = last_offsets(ckpt)
    assert set(offs) <= set(rec.keys) and set(rec.keys[:6]) <= set(offs), offs
    fill(r, "sev", 100, "3")  # while stopped
    wait_until(lambda: len(logical(r, "sev")) == 500, 30, what="the router's 8 partitions")
    q = started(start)
    try:
        want = logical(r, "sev")
        wait_until(lambda: len(parquet_rows(spark, out)) >= len(want), 180,
                   what="every entry after the restart")
        rows = parquet_rows(spark, out)
        assert len(rows) == len(set(rows)), "an entry arrived twice"
        assert {x[1] for x in rows} == set(want) and {x[0] for x in rows} == {"sev"}
        assert all(p == int(i.split("-")[1]) % rec.stride for _, i, p in rows)
        assert {p for _, _, p in rows} == set(range(8))
        assert set(last_offsets(ckpt)) == set(rec.keys)
        # The next batch commits these offsets: every partition's group is then at its top.
        tops = {k: r.execute_command("XREVRANGE", k, "+", "-", "COUNT", 1)[0][0]
                for k in rec.keys}
        fill(r, "sev", 8, "4")
        wait_until(lambda: len(parquet_rows(spark, out)) >= len(want) + 8, 120,
                   what="the last entries")
    finally:
        q.stop()
    group_follows(c, tops, "pipe")  # in every partition
    g = {x["name"]: x for x in r.xinfo_groups("sev")}[b"pipe"]
    assert g["pending"] == 0 and g["lag"] <= 8
    c.close()
    r.close()


def test_sink_writes_the_logical_stream(spark, cluster3: Cluster,  # noqa: ANN001
                                        router3: NodeHandle) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    xs(cluster3, "create", "kev", "--partitions", "6", "--key-field", "user")
    xs(cluster3, "create", "wev", "--partitions", "6")
    krec, wrec = record(cluster3, "kev"), record(cluster3, "wev")
    r = router3.client()
    data = spark.createDataFrame([(f"u{i % 13}", i) for i in range(900)], "user string, n int")
    # Each user's rows in one task, in order of n: the sink keeps that order per key.
    keyed = (data.repartition(3, "user").sortWithinPartitions("n")
             .select(F.lit("kev").alias("stream"),
                     F.create_map(F.lit("user"), "user", F.lit("n"), F.col("n").cast("string"))
                     .alias("fields")))
    w = keyed.write.format("xshard").option("url", url(router3)).options(**opts(cluster3))
    w.option("writeId", "k1").mode("append").save()
    w.option("writeId", "k1").mode("append").save()  # the same write again: IDMP drops it
    assert r.xlen("kev") == 900
    got = logical(r, "kev")
    assert sorted(int(f["n"]) for f in got.values()) == list(range(900))
    c = rc(cluster3)
    for p, k in enumerate(krec.keys):
        ns: dict[str, list[int]] = {}
        for _, f in c.xrange(k):
            u = f[b"user"]
            assert zlib.crc32(u) % 6 == p, (u, p)  # the routers' choice
            ns.setdefault(u.decode(), []).append(int(f[b"n"]))
        assert all(v == sorted(v) for v in ns.values()), "a user's rows out of order"

    # Without a key field, rows spread over every partition; a second save with the same
    # writeId adds nothing.
    plain = (data.repartition(2).select(F.lit("wev").alias("stream"),
                                        F.create_map(F.lit("n"), F.col("n").cast("string"))
                                        .alias("fields")))
    pw = plain.write.format("xshard").option("url", url(router3)).options(**opts(cluster3))
    pw.option("writeId", "w1").mode("append").save()
    pw.option("writeId", "w1").mode("append").save()
    assert r.xlen("wev") == 900
    assert sorted(int(f["n"]) for f in logical(r, "wev").values()) == list(range(900))
    lens = [c.xlen(k) for k in wrec.keys]
    assert sum(lens) == 900 and min(lens) >= 900 // 6 - 2, lens
    c.close()
    r.close()
