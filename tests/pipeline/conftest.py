"""Fixtures for the Spark tests: ONE local[2] SparkSession for the whole run, and clusters.

- `spark` (session): local[2,4], small shuffles, no UI, Python filter pushdown on, the xshard
  source registered. Its Python workers import this worktree (PYTHONPATH).
- `started(start)`: a streaming query past its start-up, started again when Spark's own start
  of the query's Python source worker timed out (see `started`).
- `cluster3` (module): 3 shards x (primary + replica) in the session's etcd, no controller
  (tests/support/cluster.py), shared by the tests of a module that only read and write;
  `router3` (module): a router in front of it. `etcd_url` and `xcluster` come from
  tests/conftest.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import REPO, NodeHandle
from tests.support.cluster import Cluster, start_cluster
from tests.support.procs import wait_until

pyspark = pytest.importorskip("pyspark", reason="the Spark tests need `pip install -e '.[spark]'`")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    import pipeline

    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # local[2,4]: 2 threads, and a failed task is retried (local[2] would fail the job at once;
    # the sink's exactly-once test needs a retry).
    s = (SparkSession.builder.master("local[2,4]").appName("xshard-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.python.filterPushdown.enabled", "true")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.streaming.stopTimeout", "30s")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    pipeline.register(s)
    yield s
    s.stop()


# Spark gives a streaming query's Python source worker a fixed 10 s to start and connect back
# (PythonWorkerFactory.createSimpleWorker; not configurable in Spark 4.3). Importing pyspark and
# pyarrow takes ~1.5 s on an idle machine and more than 10 s at a load of 12 on 2 cores, where
# this message then kills the query before its source exists.
WORKER_START_TIMEOUT = "Python worker failed to connect back"


def started(start: Callable[[], Any], tries: int = 5) -> Any:
    """start() until the query has run its first trigger (so its source exists). Only a query
    killed by Spark's worker start-up timeout, before it read anything, is started again
    (from the same checkpoint: nothing was planned); any other error fails the test."""
    for attempt in range(1, tries + 1):
        q = start()
        wait_until(lambda q=q: q.exception() is not None or q.lastProgress is not None, 120,
                   0.2, what="the streaming query's first trigger")
        e = q.exception()
        if e is None:
            return q
        q.stop()
        if WORKER_START_TIMEOUT not in str(e) or attempt == tries:
            raise AssertionError(f"the streaming query failed at its start: {e}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def cluster3(etcd_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("cluster3"), 3, 1, etcd_url=etcd_url)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def router3(cluster3: Cluster) -> NodeHandle:
    """A router in front of cluster3 (stopped with it)."""
    return cluster3.start_router("--cluster-down-timeout-ms", "8000")
