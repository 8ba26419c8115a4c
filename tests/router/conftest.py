"""The router tests' shared cluster: 3 shards of one node each behind one router (a static
topology, no etcd), started once for the package (tests/support/cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.conftest import flushed
from tests.support.cluster import Cluster, start_cluster

ROUTER_ARGS = ("--cluster-down-timeout-ms", "300")


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("router"), shards=3, routers=1,
                      router_args=ROUTER_ARGS)
    yield c
    c.stop()


@pytest.fixture
def r(cluster: Cluster) -> Iterator[redis.Redis]:
    """A RESP2 client to the router; every shard is flushed after the test."""
    yield from flushed(cluster.client())
