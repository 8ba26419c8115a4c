"""The two commands the chart's hooks rely on, against a real etcd and real nodes:
`xshard create --exist-ok` (the install Job, which may run again) and `xshard failover SHARD
--if-primary NODE` (every node pod's preStop hook: it switches a stopping primary over, and
must not move a primary away from a pod that is not stopping)."""

from __future__ import annotations

import pytest

from tests.support.cluster import run_cli

pytestmark = pytest.mark.etcd


def test_create_exist_ok_reruns_cleanly_but_refuses_another_shape(etcd_url: str) -> None:
    base = ("--etcd", etcd_url, "--cluster", "chart-create")
    first = run_cli("create", *base, "--shards", "2", "--exist-ok")
    assert first.returncode == 0 and "created cluster 'chart-create': 2 shards" in first.stdout
    again = run_cli("create", *base, "--shards", "2", "--exist-ok")
    assert (again.returncode, again.stderr) == (0, ""), again
    assert "exists already; nothing to do" in again.stdout
    other = run_cli("create", *base, "--shards", "3", "--exist-ok")
    assert other.returncode == 1 and "already exists (2 shards" in other.stderr, other
    plain = run_cli("create", *base, "--shards", "2")
    assert plain.returncode == 1 and "already exists" in plain.stderr


def test_if_primary_does_nothing_on_a_replica_or_a_lone_primary(etcd_url: str,
                                                                xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=1, controller=False)
    base = ("--etcd", etcd_url, "--cluster", c.name)
    before = c.view()
    primary, (replica,) = before.shards["0"].value.primary, before.shards["0"].value.replicas
    r = run_cli("failover", "0", *base, "--if-primary", replica)
    assert (r.returncode, r.stderr) == (0, ""), r
    assert f"{replica} is not the primary" in r.stdout
    # A primary whose replica is gone has nobody to hand over to.
    c.nodes[replica].stop()
    c.wait_for(lambda v: not v.live(replica), 30, "the replica's lease to go")
    r = run_cli("failover", "0", *base, "--if-primary", primary)
    assert (r.returncode, r.stderr) == (0, ""), r
    assert "no live replica" in r.stdout
    after = c.view()
    assert after.shards["0"].value.primary == primary
    assert after.shards["0"].value.epoch == before.shards["0"].value.epoch


def test_if_primary_on_the_primary_switches_over(etcd_url: str,
                                                xcluster) -> None:  # noqa: ANN001
    """From the primary the hook runs the planned switchover: the replica takes over."""
    c = xcluster(shards=1, replicas=1, controller=False)
    before = c.view().shards["0"].value
    r = run_cli("failover", "0", "--etcd", etcd_url, "--cluster", c.name,
                "--if-primary", before.primary)
    assert r.returncode == 0 and "is the new primary" in r.stdout, r
    after = c.view().shards["0"].value
    assert after.primary == before.replicas[0] and before.primary in after.replicas
