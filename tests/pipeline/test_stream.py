"""Streaming reads, the exactly-once sink, the archive job and the example job (issue 13 item 8).

Rules checked:
- a streaming query stopped and restarted from its checkpoint delivers every entry exactly once,
  and picks up streams that match its glob after it started;
- with `group`, the group's cursor follows the committed offsets (lag 0 at the end, nothing
  pending: nothing was read through the group);
- the sink is exactly once under an injected task failure (a retried task) and under a query
  restart that replays a micro-batch (proved by IDMP duplicates > 0 on the node);
- the archive job followed by its trim leaves no gap and no overlap, also when re-run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from tests.pipeline.conftest import started
from tests.pipeline.test_read import fill, node_url
from tests.support.cluster import Cluster
from tests.support.procs import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.etcd, pytest.mark.timeout(300)]


def rc(c: Cluster) -> redis.RedisCluster:
    return redis.RedisCluster(host="127.0.0.1", port=c.nodes["s0n0"].port)


def all_entries(r: redis.RedisCluster, names: list[str]) -> dict[tuple[str, str], dict]:
    return {(s, e.decode()): {k.decode(): v.decode() for k, v in f.items()}
            for s in names for e, f in r.xrange(s)}


def parquet_rows(spark, path: Path) -> list[tuple[str, str]]:  # noqa: ANN001
    if not path.exists():
        return []
    df = spark.read.schema("stream string, id string").parquet(str(path))
    return [(r.stream, r.id) for r in df.collect()]


def test_stream_restart_from_checkpoint_is_exactly_once(spark, cluster3: Cluster,  # noqa: ANN001
                                                        tmp_path: Path) -> None:
    r = rc(cluster3)
    fill(r, ["st:a", "st:b", "st:c"], 200, "1")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def start():  # noqa: ANN202
        df = (spark.readStream.format("xshard").option("url", node_url(cluster3))
              .option("streams", "st:*").option("maxEntriesPerTrigger", "150")
              .option("group", "pipe").load())
        return (df.select("stream", "id", "ms", "seq").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(ckpt))
                .trigger(processingTime="200 milliseconds").start())

    q = started(start)
    try:
        wait_until(lambda: len(parquet_rows(spark, out)) >= 300, 120, what="first batches")
        fill(r, ["st:a", "st:b"], 100, "2")  # written while the query runs
    finally:
        q.stop()
    seen = parquet_rows(spark, out)
    assert 300 <= len(seen) < 800  # stopped in the middle: admission control works
    fill(r, ["st:c", "st:new"], 100, "3")  # while stopped; st:new appears now
    q = started(start)
    try:
        want = set(all_entries(r, ["st:a", "st:b", "st:c", "st:new"]))
        assert len(want) == 1000
        wait_until(lambda: len(parquet_rows(spark, out)) >= len(want), 120,
                   what="every entry after the restart")
        rows = parquet_rows(spark, out)
        assert len(rows) == len(set(rows)), "an entry arrived twice"
        assert set(rows) == want
        # Spark commits a batch's offsets when it plans the next one: one more entry per
        # stream, and the group's cursor is at least where the streams were.
        tops = {s: r.xrevrange(s, count=1)[0][0] for s in ("st:a", "st:b", "st:c", "st:new")}
        fill(r, list(tops), 1, "4")
        wait_until(lambda: len(parquet_rows(spark, out)) >= len(want) + 4, 120,
                   what="the last entries")
    finally:
        q.stop()
    group_follows(r, tops, "pipe")
    r.close()


def group_follows(r: redis.RedisCluster, tops: dict, group: str) -> None:
    """The group follows the committed offsets, with an exact lag: each stream's cursor is at
    `tops[stream]` or at its last entry (the next batch's commit); nothing was delivered
    through the group (nothing pending)."""
    for s, top in tops.items():
        g = {x["name"]: x for x in r.xinfo_groups(s)}[group.encode()]
        cur = g["last-delivered-id"]
        assert cur in (top, r.xrevrange(s, count=1)[0][0]), (s, cur, top)
        assert g["lag"] == len(r.xrange(s, b"(" + cur, "+")) and g["pending"] == 0


def test_stream_from_latest_reads_only_what_comes_after(spark, cluster3: Cluster,  # noqa: ANN001
                                                       tmp_path: Path) -> None:
    r = rc(cluster3)
    fill(r, ["lt:a", "lt:b"], 50, "old")
    out = tmp_path / "out"
    q = started(lambda: spark.readStream.format("xshard").option("url", node_url(cluster3))
                .option("streams", "lt:*").option("startingOffsets", "latest").load()
                .select("stream", "id").writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="200 milliseconds").start())
    try:
        before = set(all_entries(r, ["lt:a", "lt:b"]))
        fill(r, ["lt:a", "lt:b"], 20, "new")
        want = set(all_entries(r, ["lt:a", "lt:b"])) - before
        wait_until(lambda: len(parquet_rows(spark, out)) >= len(want), 120, 0.5,
                   what="the new entries")
    finally:
        q.stop()
    rows = parquet_rows(spark, out)
    assert len(rows) == len(set(rows)) and set(rows) == want
    r.close()


def _flaky_stream(flag: str):  # noqa: ANN202
    """The stream name, except on the first attempt of a task while `flag` exists: row 2500 of
    each partition then has none, which fails the task in the sink after it wrote (flushed)
    its first rows (it pipelines 1000 commands at a time)."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("string")
    def f(i: int) -> str | None:
        if i % 3000 == 2500 and os.path.exists(flag) and TaskContext.get().attemptNumber() == 0:
            return None
        return "sink:one"
    return f


def test_sink_is_exactly_once_when_a_task_fails_and_is_retried(spark, cluster3: Cluster,  # noqa: ANN001
                                                               tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    flag = tmp_path / "fail"
    flag.write_text("1")
    n = 6000
    df = (spark.range(0, n, numPartitions=2)
          .select(_flaky_stream(str(flag))(F.col("id")).alias("stream"),
                  F.create_map(F.lit("i"), F.col("id").cast("string")).alias("fields")))
    df.write.format("xshard").option("url", node_url(cluster3)).mode("append").save()
    r = rc(cluster3)
    values = sorted(int(f[b"i"]) for _, f in r.xrange("sink:one"))
    assert values == list(range(n)), "missing or repeated rows"
    dups = r.execute_command("XINFO", "STREAM", "sink:one")[b"iids-duplicates"]
    assert dups >= 2 * 1000, "the retried tasks did not resend their first rows"
    r.close()


def test_bad_rows_fail_with_the_column_name(spark, cluster3: Cluster) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    url = node_url(cluster3)
    base = spark.range(3)
    no_stream = base.select(F.lit(None).cast("string").alias("stream"),
                            F.create_map(F.lit("a"), F.lit("b")).alias("fields"))
    no_fields = base.select(F.lit("bad").alias("stream"),
                            F.lit(None).cast("map<string,string>").alias("fields"))
    no_column = base.select(F.lit("bad").alias("stream"))
    for df, needle in [(no_stream, "column `stream`"), (no_fields, "column `fields`"),
                       (no_column, "missing: fields")]:
        with pytest.raises(Exception) as ei:  # noqa: B017 - Spark wraps the Python error
            df.write.format("xshard").option("url", url).mode("append").save()
        assert needle in str(ei.value)
    assert not rc(cluster3).exists("bad")


def test_sink_is_exactly_once_when_a_query_restarts(spark, cluster3: Cluster,  # noqa: ANN001
                                                    tmp_path: Path) -> None:
    """Batch 2 fails in one partition (every attempt) after the other partition wrote; the
    query dies; the restart replays batch 2 whole; no row lands twice.

    Batch 2's entries are written in one MULTI (both streams in one slot), so the batch holds
    all of them: written in two pipelines, a trigger between them could split them over two
    batches, and the failed batch then held only part of the first stream's."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udf

    a, b = "{rs}:a", "{rs}:b"  # one slot: one transaction can write both
    r = rc(cluster3)
    fill(r, [a, b], 300, "x")
    flag = tmp_path / "fail"
    url = node_url(cluster3)

    @udf("string")
    def poison(s: str, i: str, tag: str) -> str:
        if os.path.exists(str(flag)) and s == b and tag == "y":
            raise RuntimeError("injected failure in batch 2")
        return i

    def start():  # noqa: ANN202
        src = (spark.readStream.format("xshard").option("url", url).option("streams", f"{a},{b}")
               .load())
        rows = src.select(F.concat(F.lit("copy:"), F.col("stream")).alias("stream"),
                          F.create_map(F.lit("i"), poison(F.col("stream"), F.col("fields")["i"],
                                                   F.col("fields")["t"]),
                                       F.lit("src"), F.col("id")).alias("fields"))
        return (rows.writeStream.format("xshard").option("url", url)
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="200 milliseconds").start())

    q = started(start)
    try:
        wait_until(lambda: r.xlen("copy:" + a) == 300 and r.xlen("copy:" + b) == 300, 120,
                   what="batch 1 copied")
        flag.write_text("1")
        t = r.pipeline(transaction=True)
        for i in range(300):
            for s in (a, b):
                t.xadd(s, {"i": str(i), "s": s, "t": "y"})
        t.execute()
        wait_until(lambda: q.exception() is not None or not q.isActive, 120,
                   what="the query to fail")
    finally:
        q.stop()
    partial = r.xlen("copy:" + a)
    assert partial == 600 and r.xlen("copy:" + b) == 300  # a's partition did write
    flag.unlink()
    q = started(start)
    try:
        wait_until(lambda: r.xlen("copy:" + b) >= 600, 120, what="batch 2 replayed")
        q.processAllAvailable()
    finally:
        q.stop()
    for s in (a, b):
        src = sorted(e.decode() for e, _ in r.xrange(s))
        copied = sorted(f[b"src"].decode() for _, f in r.xrange("copy:" + s))
        assert copied == src, f"copy of {s} has missing or repeated rows"
    assert r.execute_command("XINFO", "STREAM", "copy:" + a)[b"iids-duplicates"] >= 300
    r.close()


def test_archive_then_trim_leaves_no_gap_and_no_overlap(spark, cluster3: Cluster,  # noqa: ANN001
                                                        tmp_path: Path) -> None:
    from pipeline import archive

    r = rc(cluster3)
    for s in ("ar:x", "ar:y"):
        for ms in range(1000, 1000 + 400 * 3600_000, 3600_000):  # hourly over ~16 days
            r.xadd(s, {"ms": str(ms)}, id=f"{ms}-0")
            r.xadd(s, {"ms": str(ms)}, id=f"{ms}-1")
    before = all_entries(r, ["ar:x", "ar:y"])
    out = tmp_path / "arch"

    def check() -> None:
        pq = parquet_rows(spark, out)
        kept = set(all_entries(r, ["ar:x", "ar:y"]))
        assert len(pq) == len(set(pq)), "overlap inside the archive"
        assert not set(pq) & kept, "overlap between the archive and the streams"
        assert set(pq) | kept == set(before), "gap"

    cut1 = 1000 + 100 * 3600_000
    rep = archive.run(spark, node_url(cluster3), ["ar:*"], str(out), cut1 << 64 | 1)
    assert rep["ar:x"]["archived"] == 201 and rep["ar:x"]["up_to"] == f"{cut1}-0"
    check()
    # Re-run with the same cutoff: nothing new, nothing trimmed again.
    rep = archive.run(spark, node_url(cluster3), ["ar:*"], str(out), cut1 << 64 | 1)
    assert rep["ar:x"]["archived"] == 0 and rep["ar:x"]["trimmed"] == 0
    check()
    # A run that died after the Parquet commit (no trim), then a later cutoff.
    cut2 = 1000 + 250 * 3600_000
    archive.run(spark, node_url(cluster3), ["ar:*"], str(out), cut2 << 64, trim=False)
    assert r.xlen("ar:x") == 400 * 2 - 201
    rep = archive.run(spark, node_url(cluster3), ["ar:*"], str(out), cut2 << 64)
    assert rep["ar:y"]["archived"] == 0 and rep["ar:y"]["trimmed"] == 250 * 2 - 201
    check()
    dates = {p.name for p in (out / "stream=ar%3Ax").iterdir() if p.name.startswith("date=")}
    assert "date=1970-01-01" in dates and len(dates) == 11
    r.close()


def test_jobs_have_help() -> None:
    import subprocess
    import sys

    from tests.conftest import REPO, _node_env

    for mod in ("pipeline.archive", "pipeline.examples.minute_counts"):
        p = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True,
                           text=True, cwd=REPO, env=_node_env(), timeout=120)
        assert p.returncode == 0 and "--url" in p.stdout and "--streams" in p.stdout, p.stderr


def test_example_minute_counts(spark, cluster3: Cluster, tmp_path: Path) -> None:  # noqa: ANN001
    from pipeline.examples import minute_counts

    r = rc(cluster3)
    for i in range(60):
        r.xadd("mc:1", {"kind": "ab"[i % 2]}, id=f"{60000 * (i // 20) + i + 1}-0")
    q = minute_counts.build(spark, node_url(cluster3), "mc:*", "kind", "mc-out",
                            str(tmp_path / "ckpt"), once=True)
    q.awaitTermination(120)
    got: dict[tuple[bytes, bytes], int] = {}
    for _, f in r.xrange("mc-out"):
        k = (f[b"minute"], f[b"kind"])
        got[k] = got.get(k, 0) + int(f[b"count"])
    assert got == {(b"1970-01-01T00:%02d" % m, k): 10 for m in range(3) for k in (b"a", b"b")}
    r.close()
