"""One round of each network-partition case, on a NetCluster (tests/support/netcluster.py),
under the load of tests/support/partload.py. tests/control/test_partitions.py runs a round of
each; benchmarks/partition_bench.py runs 20 and tabulates them.

Every round: start the load, cut, wait for what the case expects, heal, wait until the shard
is whole again (every node registered, the replica at the primary's offset), stop the load,
compare the streams of all the shard's nodes, and check the invariants (partload.check).
A round leaves the cluster healed and ready for the next one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import redis

from tests.support.netcluster import NetCluster
from tests.support.partload import Consumer, Verdict, Watcher, Writer, check
from tests.support.procs import wait_until

__all__ = ["Round", "etcd_cut"]

STREAM = "events"
GROUP = "g"


@dataclass
class Round:
    case: str
    verdict: Verdict
    fence_s: float | None = None  # cut -> first write the cut primary refused
    promote_s: float | None = None  # cut -> etcd names another primary
    notes: dict[str, object] = field(default_factory=dict)


def _addr(c: NetCluster, shard: str = "0") -> tuple[str, int]:
    p = c.primary(shard)
    return p.host, p.port


def _ids(c: NetCluster, nid: str) -> list[bytes]:
    r = redis.Redis(*c.nodes[nid].addr, socket_timeout=5)
    try:
        r.execute_command("READONLY")  # a replica serves reads only to clients that ask
        return [eid for eid, _f in r.xrange(STREAM)]
    finally:
        r.close()


def prepare(c: NetCluster, shard: str = "0") -> None:
    """The stream and its group exist (on the shard's current primary)."""
    r = redis.Redis(*_addr(c, shard), socket_timeout=5)
    try:
        if not r.exists(STREAM):
            r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    finally:
        r.close()


def settle(c: NetCluster, shard: str = "0", timeout: float = 30.0) -> None:
    """Every node of the shard registered and a member, and every replica at the primary's
    offset (nothing is being written)."""
    c.wait_ready(timeout)

    def caught_up() -> bool:
        offs = []
        for nid, s in c.node_shard.items():
            if s != shard:
                continue
            r = redis.Redis(*c.nodes[nid].addr, socket_timeout=2)
            try:
                info = r.info("replication")
            except redis.RedisError:
                return False
            finally:
                r.close()
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
            offs.append(info["master_repl_offset"])
        return len(set(offs)) == 1

    wait_until(caught_up, timeout, interval=0.1, what="replicas caught up")


def _finish(c: NetCluster, writers: list[Writer], consumers: list[Consumer],
            shard: str = "0") -> tuple[set[bytes], bool]:
    """Stop the load, settle, and return the final IDs and whether all nodes agree."""
    for t in (*writers, *consumers):
        t.stop()
    settle(c, shard)
    streams = [_ids(c, nid) for nid, s in c.node_shard.items() if s == shard]
    return set(streams[0]), all(s == streams[0] for s in streams)


def etcd_cut(c: NetCluster, timeout: float = 20.0, refuse_controllers: bool = False) -> Round:
    """The primary loses etcd but not its clients: it must refuse writes before etcd names
    another primary; then the cut heals and it rejoins as a replica. With
    `refuse_controllers`, its ports also look closed to the controllers (a firewall's
    REJECT), which is what a dead process looks like to them."""
    prepare(c)
    settle(c)
    old = c.primary_id("0")
    assert old is not None
    old_addr = _addr(c)
    w_old = Writer(lambda: old_addr, STREAM)  # a client that keeps using the old primary
    w_new = Writer(lambda: _addr(c), STREAM)  # one that follows etcd, as a router does
    cons = Consumer(lambda: _addr(c), STREAM, GROUP)
    for t in (w_old, w_new, cons):
        t.start()
    wait_until(lambda: len(w_old.acked()) >= 10, timeout, what="acknowledged writes")
    watcher = Watcher(str(c.url), c.name, "0", old)
    watcher.start()
    t_cut = time.monotonic()
    c.net.cut(c.hosts[old], c.hosts["etcd"])
    if refuse_controllers:
        c.net.refuse(c.hosts[old], *(h for n, h in c.hosts.items() if n.startswith("ctl")))
    try:
        wait_until(lambda: watcher.promoted_by is not None, timeout, what="a promotion")
    finally:
        watcher.stop()
        c.net.heal(c.hosts[old])
    refused = [w for w in w_old.writes if w.id is None and w.sent >= t_cut]
    fence_t = refused[0].got if refused else None
    final, agree = _finish(c, [w_old, w_new], [cons])
    v = check(final, [w_old, w_new], [cons], old_addr, watcher.promoted_after)
    r = Round("primary cut from etcd", v,
              fence_s=None if fence_t is None else fence_t - t_cut,
              promote_s=watcher.promoted_by - t_cut if watcher.promoted_by else None)
    r.notes.update(agree=agree, fenced_before_promotion=fence_t is not None
                   and fence_t < watcher.promoted_after,
                   refusal=refused[0].error if refused else "")
    return r
