"""`python -m pipeline.examples.minute_counts`: per-minute counts by a field, back into a stream.

    python -m pipeline.examples.minute_counts --url redis://127.0.0.1:7100 \\
        --streams 'events:*' --field kind --out counts --checkpoint /tmp/counts-ckpt

A streaming query reads the matching streams with the xshard source (new streams are picked up
as they appear), counts entries per minute of their ID time and per value of `--field`, and
writes each micro-batch's counts to the `--out` stream through the exactly-once sink, as
entries `minute <yyyy-mm-ddThh:mm> <field> <value> count <n> batch <id>` (a minute's total is
the sum over batches). The checkpoint makes a restart continue
where it stopped without counting anything twice. `--once` processes what is there and stops
(Trigger.AvailableNow), which is handy for tests and cron-style runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from typing import Any


def build(spark: Any, url: str, streams: str, field: str, out: str, checkpoint: str,
          once: bool = False, trigger_seconds: float = 5.0, group: str | None = None) -> Any:
    """Start the query and return it (a pyspark StreamingQuery)."""
    from pyspark.sql import functions as F

    import pipeline

    pipeline.register(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    reader = spark.readStream.format("xshard").option("url", url).option("streams", streams)
    if group:
        reader = reader.option("group", group)
    src = reader.load()
    counts = (src.withColumn("minute", F.date_format(F.timestamp_millis("ms"),
                                                     "yyyy-MM-dd'T'HH:mm"))
              .withColumn("value", F.coalesce(F.col("fields")[field], F.lit("")))
              .groupBy("minute", "value").count())
    rows = counts.select(
        F.lit(out).alias("stream"),
        F.create_map(F.lit("minute"), F.col("minute"), F.lit(field), F.col("value"),
                     F.lit("count"), F.col("count").cast("string")).alias("fields"))
    # The sink is append-only, so each micro-batch writes the counts of the entries it read
    # (sum them per minute and value to get totals). writeId = checkpoint + batch: a batch that
    # is replayed after a restart rewrites the same rows, which IDMP drops.
    tag = hashlib.sha1(os.path.abspath(checkpoint).encode()).hexdigest()[:12]

    def write(batch: Any, batch_id: int) -> None:
        (batch.withColumn("fields", F.map_concat("fields", F.create_map(
            F.lit("batch"), F.lit(str(batch_id)))))
         .write.format("xshard").option("url", url).option("writeId", f"{tag}:{batch_id}")
         .mode("append").save())

    w = (rows.writeStream.outputMode("update").foreachBatch(write)
         .option("checkpointLocation", checkpoint))
    w = w.trigger(availableNow=True) if once else w.trigger(processingTime=f"{trigger_seconds} "
                                                                           "seconds")
    return w.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.examples.minute_counts",
                                 description=__doc__.split("\n")[0].split(": ", 1)[1])
    ap.add_argument("--url", required=True, help="redis://[:password@]host:port")
    ap.add_argument("--streams", required=True, help="comma list or glob, e.g. 'events:*'")
    ap.add_argument("--field", required=True, help="the field whose values are counted")
    ap.add_argument("--out", required=True, help="the stream that receives the counts")
    ap.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    ap.add_argument("--group", default=None, help="a consumer group whose cursor follows the "
                    "query (its lag shows in XINFO GROUPS)")
    ap.add_argument("--trigger-seconds", type=float, default=5.0)
    ap.add_argument("--once", action="store_true", help="process what is there, then stop")
    ap.add_argument("--master", default=None, help="Spark master, e.g. local[2]")
    args = ap.parse_args(argv)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName("xshard-minute-counts")
    if args.master:
        b = b.master(args.master)
    spark = b.getOrCreate()
    try:
        q = build(spark, args.url, args.streams, args.field, args.out, args.checkpoint,
                  args.once, args.trigger_seconds, args.group)
        q.awaitTermination()
    except KeyboardInterrupt:
        pass
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
