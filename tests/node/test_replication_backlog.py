"""The lazy replication backlog (node/replication/__init__.py) and the offsets it must not change.

A primary makes its backlog when the first replica attaches, as Redis does, and frees it after
`repl-backlog-ttl` seconds without replicas. Without a backlog (and without an AOF) no effect is
encoded, but the offset still counts the bytes the effects would take: these tests hold that
count against an AOF's real length and against what a replica receives. xshard only: Redis
leaves master_repl_offset at 0 while it has no backlog.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import NodeHandle
from tests.support.persist import AOF_DIR, manifest
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient
from tests.support.replset import Member, ReplicaSet, info, states_equal, sync_counts


@pytest.fixture(autouse=True)
def _xshard_only(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--node-impl") != "xshard":
        pytest.skip("xshard's offsets advance without a backlog; Redis's stay at 0")


def _workload(port: int) -> None:
    """Every kind of effect, with explicit IDs so that two nodes emit the same bytes."""
    rc = RawClient("127.0.0.1", port)
    try:
        for i in range(1, 40):
            rc.call("XADD", "s", f"{i}-1", "f", "v" * i, "g", str(i))
        rc.call("XGROUP", "CREATE", "s", "grp", "0")
        rc.call("XREADGROUP", "GROUP", "grp", "alice", "COUNT", "5", "STREAMS", "s", ">")
        rc.call("XREADGROUP", "GROUP", "grp", "bob", "COUNT", "3", "NOACK", "STREAMS", "s", ">")
        rc.call("XACK", "s", "grp", "1-1", "2-1")
        rc.call("XDEL", "s", "10-1")
        rc.call("XTRIM", "s", "MAXLEN", "=", "30")
        rc.call("MULTI")
        rc.call("XADD", "t", "1-1", "a", "b")
        rc.call("XADD", "t", "2-1", "a", "c")
        rc.call("EXEC")
        rc.call("XADD", "gone", "1-1", "a", "b")
        rc.call("DEL", "gone")
    finally:
        rc.close()


def _aof_bytes(node: NodeHandle) -> int:
    return sum((node.dir / AOF_DIR / name).stat().st_size
               for name, _seq, kind in manifest(node.dir) if kind == "i")


def test_no_backlog_until_a_replica_attaches_and_offsets_still_count(
        xnode: Callable[..., NodeHandle]) -> None:
    lone = xnode(name="lone")
    aof = xnode("--appendonly", "yes", "--appendfsync", "always", name="aof")
    for n in (lone, aof):
        _workload(n.port)
    li = info(lone.client())
    assert (li["repl_backlog_active"], li["repl_backlog_histlen"],
            li["repl_backlog_first_byte_offset"]) == ("0", "0", "0")
    offset = int(li["master_repl_offset"])
    # The count without listeners is the length that the AOF (the same effects, encoded) has.
    assert offset > 0 and offset == int(info(aof.client())["master_repl_offset"]) == \
        _aof_bytes(aof)
    # The first replica makes the backlog at the current offset; the stream lines up with it.
    rnode = xnode("--replicaof", f"127.0.0.1 {lone.port}", name="replica")
    p, r = Member(lone), Member(rnode)
    wait_until(lambda: r.link_up() and r.offset() == offset, 20, what="replica in sync")
    li = info(p.c)
    assert (li["repl_backlog_active"], li["repl_backlog_first_byte_offset"]) == \
        ("1", str(offset + 1))
    p.c.xadd("s", {"after": "attach"}, id="100-1")
    wait_until(lambda: r.offset() == int(info(p.c)["master_repl_offset"]), 20,
               what="live effect applied")
    assert int(info(p.c)["repl_backlog_histlen"]) == r.offset() - offset
    states_equal([p, r])


def test_backlog_freed_after_ttl_without_replicas(rset: Callable[..., ReplicaSet]) -> None:
    rs = rset(1, primary_args=("--repl-backlog-ttl", "1"))
    p, r = rs.primary, rs.replicas[0]
    p.c.xadd("s", {"i": 0})
    rs.synced()
    assert info(p.c)["repl_backlog_active"] == "1"
    r.proxy.cut()
    wait_until(lambda: info(p.c)["repl_backlog_active"] == "0", 10, what="backlog freed")
    before = int(info(p.c)["master_repl_offset"])
    for i in range(20):
        p.c.xadd("s", {"i": i})
    assert int(info(p.c)["master_repl_offset"]) > before
    full0, partial0 = sync_counts(p.c)
    r.proxy.restore()
    rs.synced()
    # The history the replica asks for is not kept any more: a full resync, as in Redis.
    assert sync_counts(p.c) == (full0 + 1, partial0)
    states_equal([p, r])
