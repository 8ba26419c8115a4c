#!/usr/bin/env python3
"""Spark on xshard: entries/s read by the xshard source from 3 shards, and the sink's write rate.

Baselines on the same machine and data: a redis-py XRANGE loop (pages of 1000) over one
redis-server holding the same streams, and redis-py pipelined XADDs (1000 per round trip) into
one redis-server. The Spark side runs local[2] with the source reading every shard's primary
in parallel; the sink writes with idempotent XADD (IDMP), as it always does.

    python benchmarks/spark_bench.py            # 12 streams x 50k entries
    python benchmarks/spark_bench.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from benchmarks.harness import HOST, REPO_ROOT, start_server  # noqa: E402
from benchmarks.router_bench import Procs  # noqa: E402
from pipeline.cluster import Topology  # noqa: E402


class Cluster3(Procs):
    """etcd + `xshard create` + 3 primaries in cluster mode (no replicas)."""

    def __init__(self) -> None:
        from control.etcd import EtcdProcess

        super().__init__()
        self.etcd = EtcdProcess(self.dir / "etcd", fast=True)
        self.etcd.start()
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        subprocess.run([sys.executable, "-m", "control.cli", "create", "--etcd", self.etcd.url,
                        "--cluster", "bench", "--shards", "3", "--replicas", "0"], check=True,
                       cwd=REPO_ROOT, env=env, capture_output=True)
        self.ports = [self.node(f"n{i}", "--etcd", self.etcd.url, "--cluster", "bench",
                                "--shard", str(i), "--node-id", f"n{i}") for i in range(3)]
        deadline = time.monotonic() + 30
        while True:
            try:
                t = Topology.discover(f"redis://{HOST}:{self.ports[0]}", 1)
                t.close()
                if len(t.shards) == 3 and all(s.primary for s in t.shards):
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not come up")
            time.sleep(0.1)

    def stop(self) -> None:
        super().stop()
        self.etcd.stop()


def load(r: redis.Redis | redis.RedisCluster, streams: list[str], n: int) -> float:
    """n entries per stream, pipelined; returns entries/s."""
    t0 = time.perf_counter()
    for s in streams:
        for base in range(0, n, 1000):
            p = r.pipeline(transaction=False)
            for i in range(base, min(n, base + 1000)):
                p.xadd(s, {"i": str(i), "kind": "abc"[i % 3], "payload": "x" * 40})
            p.execute()
    return len(streams) * n / (time.perf_counter() - t0)


def xrange_loop(r: redis.Redis, streams: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    total = 0
    for s in streams:
        start = "-"
        while True:
            page = r.xrange(s, start, "+", count=1000)
            total += len(page)
            if len(page) < 1000:
                break
            start = "(" + page[-1][0].decode()
    return total / (time.perf_counter() - t0), total


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """Run the benchmark; with `spark`, in that session (the Spark tests' shared one), which is
    left running; else in a local[2] session of its own."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small runs (smoke test)")
    ap.add_argument("--streams", type=int, default=12)
    ap.add_argument("--entries", type=int, default=50_000, help="entries per stream")
    ap.add_argument("--output", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.streams, args.entries = 6, 2000
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pipeline

    names = [f"bench:{i}" for i in range(args.streams)]
    total = args.streams * args.entries
    cl = Cluster3()
    rs = start_server("redis")
    own = spark is None
    if own:
        spark = (SparkSession.builder.master("local[2]").appName("xshard-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    master = spark.sparkContext.master
    load0 = os.getloadavg()[0]
    try:
        rc = redis.RedisCluster(host=HOST, port=cl.ports[0])
        load(rc, names, args.entries)
        rr = redis.Redis(host=HOST, port=rs.port)
        load(rr, names, args.entries)
        url = f"redis://{HOST}:{cl.ports[0]}"
        df = spark.read.format("xshard").option("url", url).option("streams", "bench:*").load()
        df.agg(F.sum("ms")).collect()  # warm-up: Python workers start
        t0 = time.perf_counter()
        got = df.agg(F.count("*"), F.sum(F.size("fields"))).collect()[0][0]
        spark_read = total / (time.perf_counter() - t0)
        assert got == total, (got, total)
        base_read, n = xrange_loop(rr, names)
        assert n == total
        # Writes: the same number of rows into fresh streams.
        rows = (spark.range(0, total, numPartitions=4)
                .select(F.concat(F.lit("out:"), (F.col("id") % args.streams).cast("string"))
                        .alias("stream"),
                        F.create_map(F.lit("i"), F.col("id").cast("string"), F.lit("payload"),
                                     F.lit("x" * 40)).alias("fields")))
        t0 = time.perf_counter()
        rows.write.format("xshard").option("url", url).mode("append").save()
        spark_write = total / (time.perf_counter() - t0)
        written = sum(rc.xlen(f"out:{i}") for i in range(args.streams))
        assert written == total, (written, total)
        t0 = time.perf_counter()
        load(rr, [f"out:{i}" for i in range(args.streams)], args.entries)
        base_write = total / (time.perf_counter() - t0)
        rc.close()
        rr.close()
    finally:
        if own:
            spark.stop()
        rs.stop()
        cl.stop()
    load1 = os.getloadavg()[0]
    lines = [
        f"Spark on xshard: {args.streams} streams x {args.entries} entries; 3 shards vs one "
        f"redis-server; Spark {master}; load average {load0:.2f} -> {load1:.2f} on "
        f"{os.cpu_count()} cores",
        "",
        "| measurement | metric | redis-server | xshard | ratio |",
        "|---|---|---|---|---|",
        f"| read (Spark source, 3 shards vs redis-py XRANGE loop) | entries/s | "
        f"{base_read:,.0f} | {spark_read:,.0f} | {spark_read / base_read:.2f} |",
        f"| write (Spark sink with IDMP vs redis-py pipelined XADD) | entries/s | "
        f"{base_write:,.0f} | {spark_write:,.0f} | {spark_write / base_write:.2f} |",
    ]
    md = "\n".join(lines) + "\n"
    print(md)
    if args.output:
        Path(args.output).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
