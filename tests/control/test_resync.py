"""Resyncs after restarts in a cluster: roles come from etcd, not from --replicaof.

A node restarts as a primary under a new replication ID and the agent makes it a replica a
moment later (node/membership/agent.py). Its data is still the history it loaded, so it continues with
a partial resync (node/replication/__init__.py `psync_position`): a killed replica, and a killed
primary that comes back after the failover as a replica of the promoted one.
"""

from __future__ import annotations

import pytest
import redis

from tests.support.cluster import Cluster
from tests.support.procs import wait_until
from tests.support.replset import Member, info, states_equal, sync_counts

pytestmark = [pytest.mark.etcd, pytest.mark.failover]

# appendfsync always: a SIGKILL loses nothing. No PINGs in the stream during the test, so the
# killed primary's history is exactly what its replica acknowledged.
EXTRA = ("--appendonly", "yes", "--appendfsync", "always", "--repl-ping-replica-period", "3600")


def _writes(c: redis.Redis, tag: str, replicas: int = 1) -> None:
    """Entries and deliveries; with `replicas`, WAIT until that many have them."""
    pipe = c.pipeline(transaction=False)
    for i in range(100):
        pipe.xadd("s", {"tag": tag, "i": i})
    pipe.execute()
    c.xreadgroup("g", f"c-{tag}", {"s": ">"}, count=5)
    if replicas:
        assert c.execute_command("WAIT", replicas, 10000) == replicas


def _in_sync(replica: Member, primary: Member) -> bool:
    try:
        ri = info(replica.c)
        target = int(info(primary.c)["master_repl_offset"])
    except redis.RedisError:
        return False
    return (ri.get("role") == "slave" and ri.get("master_link_status") == "up"
            and int(ri["slave_repl_offset"]) >= target)


def _xadd_ok(c: redis.Redis) -> bool:
    try:
        c.xadd("s", {"tag": "probe"})
        return True
    except (redis.ResponseError, redis.ConnectionError):
        return False


def test_killed_replica_and_killed_primary_come_back_with_partial_resyncs(xcluster) -> None:  # noqa: ANN001
    c: Cluster = xcluster(shards=1, replicas=1, controller=True, node_args=EXTRA)
    p, r = Member(c.nodes["s0n0"], readonly=True), Member(c.nodes["s0n1"], readonly=True)
    wait_until(lambda: _in_sync(r, p), 20, what="replica in sync")
    p.c.xgroup_create("s", "g", id="0", mkstream=True)
    _writes(p.c, "a")
    # A replica killed and restarted continues.
    full0, partial0 = sync_counts(p.c)
    r.node.proc.kill()
    _writes(p.c, "while-down", replicas=0)
    r.node.proc.start()
    r._client = None
    wait_until(lambda: _in_sync(r, p), 20, what="restarted replica in sync")
    assert sync_counts(p.c) == (full0, partial0 + 1)
    _writes(p.c, "b")
    # Also WAIT's REPLCONF GETACK (in the stream too) reached the replica: nothing more is
    # published now, so the killed primary's history is exactly the replica's.
    wait_until(lambda: _in_sync(r, p), 20, what="replica has the whole stream")
    # The primary killed; the controller promotes the replica; the old primary comes back as
    # its replica and continues too: everything it had, the new primary had (WAIT).
    p.node.proc.kill()
    c.wait_for(lambda v: v.shards["0"].value.primary == "s0n1", 20, "failover to s0n1")
    wait_until(lambda: _xadd_ok(r.c), 10, what="writes on the new primary")
    _writes(r.c, "c", replicas=0)
    p.node.proc.start()
    p._client = None
    wait_until(lambda: _in_sync(p, r), 30, what="old primary back as a replica")
    assert sync_counts(r.c) == (0, 1)
    states_equal([r, p])
