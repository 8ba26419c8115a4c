"""A planned switchover (`xshard failover SHARD` on a live primary, control/switchover.py)
under an XADD + WAIT load through a router: no client error, no acknowledged write lost,
and direct clients of the old primary get -MOVED once it is over."""

from __future__ import annotations

import threading

import pytest
import redis

from benchmarks.switchover_bench import Writers
from tests.support.cluster import run_cli
from tests.support.procs import wait_until

pytestmark = [pytest.mark.etcd, pytest.mark.failover, pytest.mark.slow]


def test_switchover_under_load_loses_nothing_and_shows_no_error(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=1, routers=1)
    with Writers(c.router.port, 4) as load:
        wait_until(lambda: load.count() > 50, 20, what="the load to run")
        for expect in ("s0n1", "s0n0"):  # over and back
            before = load.count()
            r = run_cli("failover", "0", "--etcd", c.url, "--cluster", c.name)
            assert r.returncode == 0, r.stderr
            assert f"{expect} is the new primary" in r.stdout, r.stdout
            assert c.primary_id("0") == expect
            wait_until(lambda b=before: load.count() > b + 50, 20,
                       what="acknowledged writes after the switchover")
    assert not load.errors, load.errors[:5]
    r = c.client()
    present: dict[str, set[bytes]] = {}
    for key in {k for k, _ in load.acked}:
        present[key] = {eid for eid, _ in r.xrange(key)}
    lost = [(k, e) for k, e in load.acked if e not in present[k]]
    assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:3]}"
    # The new primary's replica (the old primary) has every entry too.
    old = c.nodes["s0n1"].client()
    old.execute_command("READONLY")
    wait_until(lambda: all(old.xlen(k) == r.xlen(k) for k in present
                           if c.shard_of(k) == 0), 10, what="the replica to have every entry")
    print(f"acked {len(load.acked)}, longest XADD through the router "
          f"{load.longest_ms()[0]:.1f} ms")


def test_direct_clients_of_the_old_primary_get_moved(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=1, controller=False)
    oc = c.nodes["s0n0"].client()
    oc.xadd("k", {"a": "1"})
    # A write that waits in the pause (started here a little earlier than the switchover's
    # own, which ends both) is answered -MOVED to the new primary when it is released.
    oc.execute_command("CLIENT", "PAUSE", 100000, "WRITE")
    box: list[BaseException] = []

    def write() -> None:
        try:
            c.nodes["s0n0"].client().xadd("k", {"a": "2"})
        except redis.RedisError as e:
            box.append(e)

    t = threading.Thread(target=write)
    t.start()
    wait_until(lambda: oc.info("clients")["blocked_clients"] == 1, 10, what="the write waiting")
    r = run_cli("failover", "0", "--to", "s0n1", "--etcd", c.url, "--cluster", c.name)
    assert r.returncode == 0, r.stderr
    t.join(10)
    new_port = c.nodes["s0n1"].port
    assert len(box) == 1 and isinstance(box[0], redis.exceptions.MovedError), box
    assert str(box[0]).endswith(f":{new_port}")
    with pytest.raises(redis.exceptions.MovedError, match=f":{new_port}$"):
        oc.xadd("k", {"a": "3"})
    assert c.nodes["s0n1"].client().xlen("k") == 1


def test_switchover_refusals_are_one_line(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=1, controller=False)
    r = run_cli("failover", "0", "--to", "s0n0", "--etcd", c.url, "--cluster", c.name)
    assert r.returncode == 1 and "s0n0 is not a replica" in r.stderr, r.stderr
    c.nodes["s0n1"].kill()
    c.wait_for(lambda v: "s0n1" not in v.nodes, 15, "the replica's lease to expire")
    r = run_cli("failover", "0", "--etcd", c.url, "--cluster", c.name)
    assert r.returncode == 1 and "no live replica" in r.stderr, r.stderr
    assert c.primary_id("0") == "s0n0"
    assert c.nodes["s0n0"].client().xadd("k", {"a": "1"})  # not left paused
