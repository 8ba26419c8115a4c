"""`python -m pipeline.archive`: move stream history older than a cutoff to Parquet, then trim.

    python -m pipeline.archive --url redis://127.0.0.1:7100 --streams 'events:*' \\
        --out /data/archive --older-than 7d

For each stream, the entries after what the archive already holds and before the cutoff are
read through the xshard source (exclusive start, inclusive end) and appended to Parquet under
`<out>/stream=<name>/date=<yyyy-mm-dd>/` (UTC). Only after Spark has committed the files is the
stream trimmed, with an exact `XTRIM <stream> MINID <next ID>` that removes the archived entries
and nothing else.

The archive itself is the record of progress: the start of every run is the greatest ID it
holds per stream. So a run that died after the Parquet commit but before the trim writes
nothing new and just trims; a run that died before the commit left no visible files and starts
over. Either way, re-running leaves no gap (every entry is in Parquet or in the stream) and no
overlap (no entry is in both, none twice in Parquet).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

from pipeline.cluster import SEQ_MAX, Topology, XShardError, format_id, parse_id
from pipeline.reader import name_of, resolve

# IDs past year 9999 (or of 2^63 ms and more, negative in the LONG) have no date: Spark files
# them under date=__HIVE_DEFAULT_PARTITION__.
_LAST_DAY_MS = 253402300799999
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> int:
    """'7d', '12h', '30m', '90s', '2w' -> milliseconds."""
    m = re.fullmatch(r"(\d+)([smhdw])", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age such as 7d, 12h, 30m, 90s")
    return int(m.group(1)) * _UNITS[m.group(2)] * 1000


def cutoff_id(args: argparse.Namespace, now_ms: int) -> int:
    """The first ID that stays in the streams."""
    if args.before is not None:
        return parse_id(args.before)
    return max(0, now_ms - args.older_than) << 64


def archived_up_to(spark: Any, out: str) -> dict[str, int]:
    """The greatest ID per stream that the archive holds (committed files only)."""
    if not os.path.isdir(out) or not any(n.startswith("stream=") for n in os.listdir(out)):
        return {}
    from pyspark.sql import functions as F

    df = spark.read.option("basePath", out).parquet(out)
    # ms and seq are unsigned halves in signed LONGs (see pipeline/reader.py): compare them
    # unsigned, or an ID of 2^63 ms or more would sort before the others.
    rows = df.groupBy("stream").agg(
        F.max(F.struct(_unsigned("ms").alias("ms"), _unsigned("seq").alias("seq")))
        .alias("top")).collect()
    return {r.stream: int(r.top.ms) << 64 | int(r.top.seq) for r in rows}


def _unsigned(col: str) -> Any:
    from pyspark.sql import functions as F

    c = F.col(col).cast("decimal(20,0)")
    return F.when(F.col(col) < 0, c + F.lit(str(1 << 64)).cast("decimal(20,0)")).otherwise(c)


def run(spark: Any, url: str, streams: list[str], out: str, cutoff: int, trim: bool = True
        ) -> dict[str, dict[str, Any]]:
    """Archive and trim; returns {stream: {"archived": n, "up_to": id, "trimmed": n}}."""
    from pyspark.sql import functions as F

    import pipeline

    pipeline.register(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    topo = Topology.discover(url)
    try:
        keys = resolve(topo, streams)
        done = archived_up_to(spark, out)
        names = [name_of(k) for k in keys]
        report: dict[str, dict[str, Any]] = {n: {"archived": 0, "up_to": None, "trimmed": 0}
                                             for n in names}
        if cutoff > 0 and names:
            start = {n: format_id(done[n]) for n in names if n in done}
            end = {n: format_id(cutoff - 1) for n in names}
            df = (spark.read.format("xshard").option("url", url)
                  .option("streams", ",".join(names))
                  .option("startingOffsets", json.dumps(start))
                  .option("endingOffsets", json.dumps(end)).load()
                  .withColumn("date", F.when(
                      F.col("ms").between(0, _LAST_DAY_MS),
                      F.date_format(F.timestamp_millis("ms"), "yyyy-MM-dd"))))
            counts = {r.stream: r["count"] for r in df.groupBy("stream").count().collect()}
            if counts:
                df.write.mode("append").partitionBy("stream", "date").parquet(out)
            for n, c in counts.items():
                report[n]["archived"] = c
        # Trim what the committed archive holds, and nothing beyond it.
        if trim:
            for n, top in archived_up_to(spark, out).items():
                if n not in report:
                    continue
                report[n]["up_to"] = format_id(top)
                if top < (SEQ_MAX << 64 | SEQ_MAX):
                    key = n.encode("utf-8", "surrogateescape")
                    report[n]["trimmed"] = topo.call(
                        lambda key=key, top=top: topo.conn(topo.node(topo.shard_of(key)))
                        .execute_command("XTRIM", key, "MINID", format_id(top + 1)), "XTRIM")
        return report
    finally:
        topo.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pipeline.archive",
        description="Move xshard stream history older than a cutoff to Parquet (partitioned "
                    "by stream and date), then trim it from the streams. Safe to re-run.")
    ap.add_argument("--url", required=True, help="redis://[:password@]host:port of a router "
                    "or any node")
    ap.add_argument("--streams", required=True, help="comma list of names or globs, e.g. "
                    "'events:*'")
    ap.add_argument("--out", required=True, help="the Parquet directory (local or any Hadoop "
                    "file system path)")
    cut = ap.add_mutually_exclusive_group(required=True)
    cut.add_argument("--older-than", type=parse_age, help="archive entries older than this "
                     "age: 7d, 12h, 30m, 90s")
    cut.add_argument("--before", help="archive entries with IDs below this one (ms-seq)")
    ap.add_argument("--no-trim", action="store_true", help="write Parquet, leave the streams")
    ap.add_argument("--master", default=None, help="Spark master (default: Spark's own, "
                    "e.g. from spark-submit)")
    args = ap.parse_args(argv)
    if args.before is not None:
        try:
            parse_id(args.before)
        except ValueError:
            ap.error(f"--before: {args.before!r} is not a stream ID ms-seq")
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName("xshard-archive")
    if args.master:
        b = b.master(args.master)
    spark = b.getOrCreate()
    try:
        report = run(spark, args.url, [s.strip() for s in args.streams.split(",") if s.strip()],
                     args.out, cutoff_id(args, int(time.time() * 1000)), not args.no_trim)
    except XShardError as e:
        print(f"pipeline.archive: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
