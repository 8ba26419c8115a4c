"""A primary failover in the middle of a streaming query (issue 13 item 8): every entry that a
writer had acknowledged (XADD + WAIT 1) arrives exactly once, and no entry arrives twice.

The failed shard has two replicas, so its new primary still has one and entries keep being
acknowledged there after the failover; the test waits for such entries (the writer runs until
it is told to stop), so the reader is shown to follow the shard to its new primary."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from tests.pipeline.conftest import started
from tests.pipeline.test_stream import parquet_rows
from tests.support.procs import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.etcd, pytest.mark.failover, pytest.mark.slow,
              pytest.mark.timeout(300)]


def test_primary_failover_mid_query_loses_and_duplicates_nothing(spark, xcluster,  # noqa: ANN001
                                                                 tmp_path: Path) -> None:
    c = xcluster(shards=2, replicas=2)
    names = [f"fo:{i}" for i in range(6)]
    on_0 = {s for s in names if c.shard_of(s) == 0}
    assert on_0 and on_0 != set(names)
    acked: list[tuple[str, str]] = []
    stop = threading.Event()

    def writer() -> None:
        r = redis.RedisCluster(host="127.0.0.1", port=c.nodes["s1n0"].port,
                               socket_timeout=10)
        i = 0
        while not stop.is_set():
            s = names[i % len(names)]
            try:
                eid = r.xadd(s, {"i": str(i)})
                if r.execute_command("WAIT", 1, 2000, target_nodes=r.get_node_from_key(s)) >= 1:
                    acked.append((s, eid.decode()))
            except redis.RedisError:
                pass  # not acknowledged: may or may not be there
            i += 1
        r.close()

    url = f"redis://127.0.0.1:{c.nodes['s1n0'].port}"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    df = (spark.readStream.format("xshard").option("url", url).option("streams", "fo:*")
          .option("retryTimeoutMs", "30000").load())
    q = None

    def rows_at_least(n: int) -> bool:
        if q.exception() is not None:  # a dead query fails the test now, with its reason
            raise AssertionError(f"the query failed: {q.exception()}")
        return len(parquet_rows(spark, out)) >= n

    def has_all(want: set[tuple[str, str]]) -> bool:
        return rows_at_least(0) and want <= set(parquet_rows(spark, out))

    t = threading.Thread(target=writer)
    t.start()
    try:
        q = started(lambda: df.select("stream", "id").writeStream.format("parquet")
                    .option("path", str(out)).option("checkpointLocation", str(ckpt))
                    .trigger(processingTime="200 milliseconds").start())
        wait_until(lambda: rows_at_least(300), 120, 0.5, what="rows flowing")
        victim = c.primary_id("0")
        assert victim is not None
        c.nodes[victim].kill()
        c.wait_for(lambda v: v.shards["0"].value.primary not in (None, victim), 30,
                   "a new primary for shard 0")
        n = len(acked)
        wait_until(lambda: sum(1 for s, _ in acked[n:] if s in on_0) >= 50, 120, 0.2,
                   what="writes acknowledged by shard 0's new primary")
        stop.set()
        t.join(60)
        want = set(acked)
        wait_until(lambda: has_all(want), 120, 0.5, what="every acknowledged entry")
        assert q.exception() is None
    finally:
        stop.set()
        t.join(60)
        if q is not None:
            q.stop()
    rows = parquet_rows(spark, out)
    assert len(rows) == len(set(rows)), "an entry arrived twice"
    assert set(acked) <= set(rows)
