"""Restarted nodes resume replication where their data allows, and only there.

The replication IDs are kept with the data (snapshot aux fields; the AOF manifest's incr lines,
node/aof.py), so a replica stopped or killed and restarted continues with a partial resync
(+CONTINUE, counted in the primary's `sync_partial_ok`). A node restarted without --replicaof
(a primary, or a cluster node whose role comes later from etcd) asks for the history it loaded
when it is made a replica: a primary that has that history as a prefix continues it, and one
that does not (the restarted node has a divergent tail) answers with a full resync. Every test
ends by comparing the keyspaces byte for byte.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import redis

from tests.conftest import NodeHandle
from tests.support.procs import wait_until
from tests.support.replset import SYNC_TIMEOUT, Member, ReplicaSet, info, states_equal, sync_counts

AOF_ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")


@pytest.fixture(autouse=True)
def _xshard_only(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--node-impl") != "xshard":
        pytest.skip("Redis 7 keeps no replication ID in its AOF (and its restarted primaries "
                    "always resync in full)")


def _writes(m: Member, tag: str, n: int = 50) -> None:
    """Entries, a group, deliveries and acks: every kind of effect the resync must carry."""
    c = m.c
    pipe = c.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd("s", {"tag": tag, "i": i})
    pipe.execute()
    with contextlib.suppress(redis.ResponseError):  # BUSYGROUP after the first time
        c.xgroup_create("s", "g", id="0")
    c.xreadgroup("g", f"c-{tag}", {"s": ">"}, count=7)
    c.xack("s", "g", *[e[0] for e in c.xrange("s", count=3)])


def _follow(replica: Member, primary: Member) -> None:
    replica.c.execute_command("REPLICAOF", "127.0.0.1", primary.node.port)


def _synced(replica: Member, primary: Member) -> None:
    wait_until(lambda: replica.link_up() and replica.offset() >= int(
        info(primary.c)["master_repl_offset"]), SYNC_TIMEOUT, what="replica caught up")


def _continues_after_more_writes(r: Member, p: Member) -> None:
    """`p` takes more writes, `r` is made its replica: a partial resync, the same data."""
    _writes(p, "more")
    full0, partial0 = sync_counts(p.c)
    _follow(r, p)
    _synced(r, p)
    assert sync_counts(p.c) == (full0, partial0 + 1)
    states_equal([p, r])


def _restart(m: Member, how: str) -> None:
    m.node.kill() if how == "sigkill" else m.node.stop()
    m._client = None
    m.node.start()


# -- a restarted replica -------------------------------------------------------------------------

@pytest.mark.parametrize("how,args", [("sigterm", AOF_ALWAYS), ("sigkill", AOF_ALWAYS),
                                      ("sigterm", ("--save", "3600 1"))],
                         ids=["sigterm-aof", "sigkill-aof", "sigterm-snapshot"])
def test_restarted_replica_continues(rset: Callable[..., ReplicaSet], how: str,
                                     args: tuple[str, ...]) -> None:
    """Restarted with --replicaof: it continues under the IDs it loaded from its AOF, or from
    the snapshot it saved at shutdown."""
    rs = rset(1, replica_args=args)
    p, r = rs.primary, rs.replicas[0]
    _writes(p, "a")
    rs.synced()
    r.node.kill() if how == "sigkill" else r.node.stop()
    r._client = None
    _writes(p, "b")
    full0, partial0 = sync_counts(p.c)
    r.node.start()
    rs.synced()
    assert sync_counts(p.c) == (full0, partial0 + 1)
    assert "Successful partial resynchronization with master." in r.node.log
    states_equal([p, r])


@pytest.mark.parametrize("how,restarts", [("sigterm", 1), ("sigkill", 1), ("sigkill", 2)])
def test_replica_restarted_without_replicaof_continues_when_made_replica(
        xnode: Callable[..., NodeHandle], how: str, restarts: int) -> None:
    """As in a cluster: the node comes back as a primary and the agent sends REPLICAOF (twice:
    it died again before the agent did)."""
    p = Member(xnode("--repl-diskless-sync", "no", name="primary"))
    r = Member(xnode(*AOF_ALWAYS, name="replica"))
    _follow(r, p)
    _writes(p, "a")
    _synced(r, p)
    replid = info(p.c)["master_replid"]
    for _ in range(restarts):
        _restart(r, how)
    ri = info(r.c)
    # Back as a primary under a new ID; the loaded history is its replid2, up to what it has.
    assert ri["role"] == "master" and ri["master_replid"] != replid
    assert ri["master_replid2"] == replid
    assert int(ri["second_repl_offset"]) == int(ri["master_repl_offset"]) + 1
    _continues_after_more_writes(r, p)


def test_replica_restart_after_its_primary_took_a_new_id(xnode: Callable[..., NodeHandle]) -> None:
    """The replica's AOF spans a change of ID (its primary was promoted from a sibling); after
    a restart it names its last bytes after the new ID, so it still continues."""
    old = Member(xnode("--repl-diskless-sync", "no", name="old-primary"))
    new = Member(xnode(name="new-primary"))
    r = Member(xnode(*AOF_ALWAYS, name="replica"))
    for m in (new, r):
        _follow(m, old)
    _writes(old, "a")
    _synced(new, old)
    _synced(r, old)
    old.node.kill()
    new.c.execute_command("REPLICAOF", "NO", "ONE")
    _follow(r, new)  # continues partially, and takes the new ID
    _writes(new, "b")
    _synced(r, new)
    assert info(r.c)["master_replid"] == info(new.c)["master_replid"]
    _restart(r, "sigkill")
    _continues_after_more_writes(r, new)


# -- a restarted old primary ---------------------------------------------------------------------

def _fail_over_and_rejoin(old: Member, new: Member) -> None:
    """The primary `old` goes down, its replica `new` is promoted and takes writes ("b"),
    then `old` comes back and follows `new` until synced. `new` is promoted before `old` is
    back: restarted at once, `old` could take the replica's reconnection first, and the
    test would no longer be about the history `old` kept."""
    old.node.kill()
    old._client = None
    new.c.execute_command("REPLICAOF", "NO", "ONE")
    _writes(new, "b")
    old.node.start()
    _follow(old, new)
    _synced(old, new)


def test_old_primary_rejoins_partially_when_its_history_is_a_prefix(
        xnode: Callable[..., NodeHandle]) -> None:
    old = Member(xnode(*AOF_ALWAYS, "--repl-ping-replica-period", "3600", name="old-primary"))
    new = Member(xnode(name="new-primary"))
    _follow(new, old)
    _writes(old, "a")
    _synced(new, old)
    _fail_over_and_rejoin(old, new)
    assert sync_counts(new.c) == (0, 1)
    states_equal([new, old])


def test_old_primary_with_a_divergent_tail_resyncs_in_full(
        rset: Callable[..., ReplicaSet]) -> None:
    rs = rset(1, primary_args=AOF_ALWAYS)
    old, new = rs.primary, rs.replicas[0]
    _writes(old, "a")
    rs.synced()
    new.proxy.cut()
    wait_until(lambda: not new.link_up(), 10, what="link down")
    _writes(old, "lost")  # never reached the replica
    _fail_over_and_rejoin(old, new)
    assert sync_counts(new.c) == (1, 0)
    assert not any(e[1][b"tag"] == b"lost" for e in old.c.xrange("s"))
    states_equal([new, old])


def test_restarted_promoted_replica_does_not_pass_its_writes_off_as_the_old_history(
        xnode: Callable[..., NodeHandle]) -> None:
    """A promoted replica writes under its new ID, is killed and restarted from its AOF. The
    old primary, which wrote as many bytes of its own after the split, must not be told to
    continue: the promoted node's data from the split on is not the old primary's history."""
    old = Member(xnode("--repl-ping-replica-period", "3600", name="old-primary"))
    new = Member(xnode(*AOF_ALWAYS, name="promoted"))
    _follow(new, old)
    _writes(old, "a")
    _synced(new, old)
    new.c.execute_command("REPLICAOF", "NO", "ONE")
    # The same number of bytes on both sides of the split, so the offsets meet again.
    old.c.xadd("s", {"side": "old"}, id="9999999999999-1")
    new.c.xadd("s", {"side": "new"}, id="9999999999999-1")
    assert info(old.c)["master_repl_offset"] == info(new.c)["master_repl_offset"]
    _restart(new, "sigkill")
    _follow(old, new)
    _synced(old, new)
    assert sync_counts(new.c) == (1, 0)
    assert old.c.xrange("s", "9999999999999-1")[0][1] == {b"side": b"new"}
    states_equal([new, old])
