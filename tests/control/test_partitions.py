"""Network partitions: each process in a network namespace of its own, the faults nftables
rules between them (tests/support/netns.py), real etcd, nodes, controllers, routers and
redis-py clients. One round of each case (tests/support/partcases.py) under an XADD + WAIT 1
load and an XREADGROUP consumer; benchmarks/partition_bench.py runs 20.

The invariants (tests/support/partload.py): no write that WAIT acknowledged is lost, no write
is acknowledged by a primary after etcd named another, no committed delivery is repeated
through `>`, and every node of the shard ends with the same stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import netns, partcases
from tests.support.netcluster import NetCluster, start_net_cluster

pytestmark = [pytest.mark.etcd, pytest.mark.failover, pytest.mark.slow]


def _net() -> netns.Net:
    why = netns.available()
    if why is not None:
        pytest.skip(why)
    return netns.Net()


@pytest.fixture
def net() -> Iterator[netns.Net]:
    n = _net()
    try:
        yield n
    finally:
        n.close()


@pytest.fixture(scope="module")
def shard1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    """One shard of a primary and a replica, one controller, one router, shared by the cases
    that leave it whole (every round heals and settles before it returns)."""
    n = _net()
    try:
        c = start_net_cluster(tmp_path_factory.mktemp("shard1"), n, shards=1, replicas=1,
                              routers=1)
        try:
            yield c
        finally:
            c.stop()
    finally:
        n.close()


def assert_round(r: partcases.Round) -> None:
    v = r.verdict
    assert v.acked > 0, f"{r.case}: no write was acknowledged ({r.notes})"
    assert not v.lost, f"{r.case}: acknowledged writes lost: {v.lost[:5]}"
    assert not v.fenced_accepted, f"{r.case}: writes accepted after the promotion: " \
                                  f"{v.fenced_accepted[:5]}"
    assert not v.double, f"{r.case}: committed deliveries repeated: {v.double[:5]}"
    assert r.notes.get("agree", True), f"{r.case}: the nodes' streams differ"


def own_cluster_round(net: netns.Net, tmp_path: Path,
                      case: Callable[[NetCluster], partcases.Round],
                      **shape: Any) -> partcases.Round:
    """One round of `case` on a cluster of its own (stopped after), its invariants checked."""
    c = start_net_cluster(tmp_path / "c", net, **shape)
    try:
        r = case(c)
    finally:
        c.stop()
    assert_round(r)
    return r


@pytest.mark.parametrize("refused", [False, True], ids=["dropped", "refused"])
def test_primary_cut_from_etcd_fences_before_promotion(shard1: NetCluster,
                                                       refused: bool) -> None:
    """`refused`: the primary's ports also answer the controller with resets, as a dead
    process's do. The controller then revokes its lease early, and used to promote the
    replica at once, while the primary (which etcd cannot hear either) still took writes."""
    r = partcases.etcd_cut(shard1, refuse_controllers=refused)
    assert_round(r)
    assert r.fence_s is not None, "the cut-off primary never refused a write"
    assert r.notes["fenced_before_promotion"], (r.fence_s, r.promote_s)
    assert "cluster is down" in str(r.notes["refusal"]).lower()
    assert r.notes["router_errors"] == 0, r.notes  # the router waited out the failover
    # It rejoined as a replica of the new primary (settled by the round).
    old = next(n for n in shard1.nodes if n != shard1.primary_id("0"))
    assert shard1.nodes[old].client().info("replication")["role"] == "slave"


def test_primary_cut_from_its_replica_keeps_serving_and_is_not_replaced(
        shard1: NetCluster) -> None:
    r = partcases.replica_cut(shard1, hold=3.5)
    assert_round(r)
    n = r.notes
    assert n["accepted_during"] > 0 and n["refused_during"] == 0, n
    assert n["wait0_during"] > 0 and n["acked_during"] == 0, n  # WAIT 1 answered 0
    assert n["epoch_unchanged"] and n["primary_unchanged"], n
    assert str(n["noreplicas"]).startswith("NOREPLICAS"), n  # with min-replicas-to-write 1


def test_router_cut_from_one_shard_serves_the_others_and_errors_for_it(
        net: netns.Net, tmp_path: Path) -> None:
    """Before routers set TCP_USER_TIMEOUT on their node connections, a command for the cut
    shard waited until the cut healed (a partition never resets a connection)."""
    r = own_cluster_round(net, tmp_path, partcases.router_cut, shards=2, routers=1,
                          router_args=("--cluster-down-timeout-ms", "2000"))
    n = r.notes
    assert n["shard0_ok_during"] > 0 and n["shard0_err_during"] == 0, n
    assert n["shard1_error"] == "The cluster is down", n


def test_controller_cut_from_etcd_is_replaced_and_fails_over_once(net: netns.Net,
                                                                   tmp_path: Path) -> None:
    r = own_cluster_round(net, tmp_path, partcases.controller_cut, replicas=2, controllers=2)
    n = r.notes
    assert n["new_leader"] != n["old_leader"], n
    assert n["no_failover_before_kill"] and n["failovers"] == 1, n
    assert n["masters"] == [n["new_primary"]], n


def test_read_blocked_through_a_router_follows_the_failover(shard1: NetCluster) -> None:
    """The router's connection of a blocked XREADGROUP to a primary the network cut off
    carried no data, so nothing noticed: the consumer never saw the new primary's entries.
    Keep-alive probes under TCP_USER_TIMEOUT now drop it and the read is re-issued."""
    r = partcases.isolated_primary_blocked_read(shard1)
    n = r.notes
    assert not isinstance(n["delivered"], Exception) and n["delivered"], n
    assert n["delivered"][0][1][0][0] == n["written"], n  # type: ignore[index]
    assert n["in_final"] and n["agree"], n
