"""The xshard data source for Spark: batch and streaming reads, an exactly-once sink, jobs.

    import pipeline
    pipeline.register(spark)
    df = spark.read.format("xshard").option("url", "redis://127.0.0.1:7100") \
        .option("streams", "events:*").load()

`pipeline/reader.py` reads, `pipeline/sink.py` writes, `pipeline/options.py` checks the options,
`pipeline/cluster.py` finds the shards; `python -m pipeline.archive` moves old history to
Parquet and `pipeline/examples/` has a streaming job.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from pipeline import options as _options
from pipeline.cluster import XShardError
from pipeline.reader import (
    XShardBatchReader,
    XShardBatchReaderNoPushdown,
    XShardStreamReader,
    schema,
)
from pipeline.sink import XShardBatchWriter, XShardStreamWriter

__all__ = ["XShardDataSource", "XShardError", "register"]


class XShardDataSource(DataSource):
    """format("xshard"). Filters are left to Spark; `register` picks the variant that pushes
    them down when the session allows it."""

    _pushdown = False

    @classmethod
    def name(cls) -> str:
        return "xshard"

    def schema(self) -> str:
        def on(name: str) -> bool:
            return self.options.get(name, "false").lower() in ("true", "1", "yes")

        return schema(on("binary"), on("partitionColumn"))

    def reader(self, schema: Any) -> XShardBatchReader:
        opts = _options.parse(self.options, write=False)
        cls = XShardBatchReader if self._pushdown else XShardBatchReaderNoPushdown
        return cls(opts)

    def streamReader(self, schema: Any) -> XShardStreamReader:
        return XShardStreamReader(_options.parse(self.options, write=False))

    def writer(self, schema: Any, overwrite: bool) -> XShardBatchWriter:
        return XShardBatchWriter(_options.parse(self.options, write=True), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> XShardStreamWriter:
        return XShardStreamWriter(_options.parse(self.options, write=True), schema)


class XShardDataSourcePushdown(XShardDataSource):
    """format("xshard") for sessions with spark.sql.python.filterPushdown.enabled."""

    _pushdown = True


def register(spark: Any) -> None:
    """Register format "xshard" in this session (with filter pushdown when it is enabled)."""
    on = str(spark.conf.get("spark.sql.python.filterPushdown.enabled", "false")).lower()
    spark.dataSource.register(XShardDataSourcePushdown if on == "true" else XShardDataSource)
