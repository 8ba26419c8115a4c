"""One round of each network-partition case, on a NetCluster (tests/support/netcluster.py),
under the load of tests/support/partload.py. tests/control/test_partitions.py runs a round of
each; benchmarks/partition_bench.py runs 20 and tabulates them.

Every round: start the load, cut, wait for what the case expects, heal, wait until the shard
is whole again (every node registered, the replica at the primary's offset), stop the load,
compare the streams of all the shard's nodes, and check the invariants (partload.check).
A round leaves the cluster healed and ready for the next one.
"""

from __future__ import annotations

import threading
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


def _ids(c: NetCluster, nid: str, stream: str = STREAM) -> list[bytes]:
    r = redis.Redis(*c.nodes[nid].addr, socket_timeout=5)
    try:
        r.execute_command("READONLY")  # a replica serves reads only to clients that ask
        return [eid for eid, _f in r.xrange(stream)]
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
            shard: str = "0", stream: str = STREAM) -> tuple[set[bytes], bool]:
    """Stop the load, settle, and return the final IDs and whether all nodes agree."""
    for t in (*writers, *consumers):
        t.stop()
    settle(c, shard)
    streams = [_ids(c, nid, stream) for nid, s in c.node_shard.items() if s == shard]
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
    writers = [w_old, w_new]
    if c.routers:  # and one through a router (which waits out the failover)
        writers.append(Writer(lambda: c.router.addr, STREAM, timeout=30.0))
    for t in (*writers, cons):
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
    final, agree = _finish(c, writers, [cons])
    v = check(final, writers, [cons], old_addr, watcher.promoted_after)
    if fence_t is not None:  # once fenced, the old primary must not take a write again
        v.fenced_accepted += [x.id for x in w_old.accepted()  # type: ignore[misc]
                              if x.sent > fence_t and x.id not in v.fenced_accepted]
    r = Round("primary cut from etcd", v,
              fence_s=None if fence_t is None else fence_t - t_cut,
              promote_s=watcher.promoted_by - t_cut if watcher.promoted_by else None)
    if c.routers:
        via = [x for x in writers[2].writes if x.sent >= t_cut]
        r.notes.update(router_errors=sum(1 for x in via if x.id is None),
                       router_longest_s=max((x.got - x.sent for x in via), default=0.0))
    r.notes.update(agree=agree, fenced_before_promotion=fence_t is not None
                   and fence_t < watcher.promoted_after,
                   refusal=refused[0].error if refused else "")
    return r


def _after(w: Writer, t: float, ok: bool) -> list:
    return [x for x in w.writes if x.sent >= t and (x.id is not None) == ok]


def replica_cut(c: NetCluster, hold: float = 4.0, timeout: float = 20.0) -> Round:
    """The primary loses its replica but not etcd or its clients: it keeps taking writes,
    WAIT 1 answers 0 at its timeout, nothing is promoted (the primary's lease is fine);
    after the cut heals the replica catches up. `hold` (longer than the lease TTL) is how
    long the cut lasts once WAIT has timed out."""
    prepare(c)
    settle(c)
    old = c.primary_id("0")
    assert old is not None
    replica = next(n for n, s in c.node_shard.items() if s == "0" and n != old)
    epoch = c.view().shards["0"].value.epoch
    w = Writer(lambda: _addr(c), STREAM)
    cons = Consumer(lambda: _addr(c), STREAM, GROUP)
    for t in (w, cons):
        t.start()
    wait_until(lambda: len(w.acked()) >= 10, timeout, what="acknowledged writes")
    c.net.cut(c.hosts[old], c.hosts[replica])
    t_cut = time.monotonic()  # writes sent from now on cannot reach the replica
    try:
        wait_until(lambda: len([x for x in _after(w, t_cut, True) if x.acks == 0]) >= 3,
                   timeout, what="WAIT 1 answering 0")
        t_zero = time.monotonic()
        wait_until(lambda: time.monotonic() - t_zero >= hold, hold + 5, what="the hold")
        noreplicas = _min_replicas_refusal(c.nodes[old].addr)
    finally:
        t_heal = time.monotonic()
        c.net.heal(c.hosts[old])
    wait_until(lambda: any(x.acks >= 1 for x in _after(w, t_heal, True)), timeout,
               what="WAIT 1 answering 1 again")
    t_back = next(x.got for x in _after(w, t_heal, True) if x.acks >= 1)
    final, agree = _finish(c, [w], [cons])
    v = check(final, [w], [cons])
    # Writes whose WAIT ended before the heal (WAIT 1 waits wait_ms at most).
    during = [x for x in w.writes if t_cut <= x.sent < t_heal - w.wait_ms / 1000 - 0.2]
    r = Round("primary cut from its replica", v)
    r.notes.update(agree=agree, epoch_unchanged=c.view().shards["0"].value.epoch == epoch,
                   primary_unchanged=c.primary_id("0") == old,
                   accepted_during=sum(1 for x in during if x.id is not None),
                   refused_during=sum(1 for x in during if x.id is None),
                   wait0_during=sum(1 for x in during if x.acks == 0),
                   acked_during=sum(1 for x in during if x.acks >= 1),
                   catch_up_s=t_back - t_heal, noreplicas=noreplicas)
    return r


def _min_replicas_refusal(addr: tuple[str, int]) -> str:
    """What a write gets from a primary whose replica is cut off (acks older than 1 s) under
    min-replicas-to-write 1; the setting is reset afterwards."""
    r = redis.Redis(*addr, socket_timeout=5)
    try:
        r.config_set("min-replicas-max-lag", 1)
        r.config_set("min-replicas-to-write", 1)
        try:
            r.xadd("noreplicas-probe", {"a": 1})
            return "accepted"
        except redis.ResponseError as e:
            return str(e)
        finally:
            r.config_set("min-replicas-to-write", 0)
            r.config_set("min-replicas-max-lag", 10)
    finally:
        r.close()


def router_cut(c: NetCluster, timeout: float = 30.0) -> Round:
    """A router loses the nodes of shard 1 (not etcd, not shard 0): shard 0 keeps serving
    through it; commands for shard 1 get an error within a bounded time, not a hang.
    Needs two shards and a router."""
    k0, k1 = c.keys_on_each_shard(STREAM)[:2]
    for k, shard in ((k0, "0"), (k1, "1")):
        r = redis.Redis(*_addr(c, shard), socket_timeout=5)
        if not r.exists(k):
            r.xgroup_create(k, GROUP, id="0", mkstream=True)
        r.close()
    settle(c, "0")
    settle(c, "1")
    router = c.router.addr
    w0 = Writer(lambda: router, k0)
    w1 = Writer(lambda: router, k1, timeout=60.0)  # a hang shows as a long reply, not ours
    cons = Consumer(lambda: router, k0, GROUP)
    for t in (w0, w1, cons):
        t.start()
    wait_until(lambda: len(w0.acked()) >= 10 and len(w1.acked()) >= 10, timeout,
               what="acknowledged writes on both shards")
    rhost = c.hosts["router0"]
    cut = [c.hosts[n] for n, s in c.node_shard.items() if s == "1"]
    t_cut = time.monotonic()
    c.net.cut(rhost, *cut)
    try:
        wait_until(lambda: len(_after(w1, t_cut, False)) >= 1
                   and len([x for x in _after(w0, t_cut, True) if x.acks >= 1]) >= 20,
                   timeout, what="shard 0 serving and shard 1 refusing")
    finally:
        t_heal = time.monotonic()
        c.net.heal(rhost)
    wait_until(lambda: any(x.acks >= 1 for x in _after(w1, t_heal, True)), timeout,
               what="shard 1 served again")
    errs = [x for x in w1.writes if t_cut <= x.sent < t_heal and x.id is None]
    ok0 = [x for x in w0.writes if t_cut <= x.sent < t_heal]
    for t in (w0, w1, cons):
        t.stop()
    final0, agree0 = _finish(c, [], [], "0", k0)
    final1, agree1 = _finish(c, [], [], "1", k1)
    v = check(final0 | final1, [w0, w1], [cons])
    r = Round("router cut from one shard", v)
    r.notes.update(agree=agree0 and agree1,
                   shard0_ok_during=sum(1 for x in ok0 if x.id is not None),
                   shard0_err_during=sum(1 for x in ok0 if x.id is None),
                   shard1_first_error_s=errs[0].got - t_cut if errs else None,
                   shard1_longest_error_s=max((x.got - x.sent for x in errs), default=None),
                   shard1_error=errs[0].error if errs else "")
    return r


def controller_cut(c: NetCluster, timeout: float = 30.0) -> Round:
    """The leading controller loses etcd (not the nodes): another controller takes over; then
    the primary is killed, and exactly one failover happens (the cut-off controller cannot
    commit one, and sends nodes nothing without a commit). Needs two controllers."""
    prepare(c)
    settle(c)
    v = c.wait_for(lambda v: v.leader is not None, timeout, "a leading controller")
    leader = v.leader.value  # type: ignore[union-attr]
    epoch = v.shards["0"].value.epoch
    old = c.primary_id("0")
    assert old is not None
    w = Writer(lambda: _addr(c), STREAM)
    cons = Consumer(lambda: _addr(c), STREAM, GROUP)
    for t in (w, cons):
        t.start()
    wait_until(lambda: len(w.acked()) >= 10, timeout, what="acknowledged writes")
    lhost = c.hosts[leader]
    t_cut = time.monotonic()
    c.net.cut(lhost, c.hosts["etcd"])
    try:
        v2 = c.wait_for(lambda v: v.leader is not None and v.leader.value != leader, timeout,
                        "another controller leading")
        t_lead = time.monotonic()
        epoch_at_takeover = v2.shards["0"].value.epoch
        watcher = Watcher(str(c.url), c.name, "0", old)
        watcher.start()
        t_kill = time.monotonic()
        c.nodes[old].kill()
        try:
            wait_until(lambda: watcher.promoted_by is not None, timeout, what="the failover")
        finally:
            watcher.stop()
        new = watcher.new
        wait_until(lambda: len([x for x in _after(w, t_kill, True) if x.acks >= 0]) >= 10,
                   timeout, what="writes on the new primary")
        epoch_after = c.view().shards["0"].value.epoch
        roles = {}
        for nid, h in c.nodes.items():
            if nid != old:
                r = redis.Redis(*h.addr, socket_timeout=2)
                roles[nid] = r.execute_command("ROLE")[0]
                r.close()
    finally:
        c.net.heal(lhost)
    c.nodes[old].start()  # back as a replica of the new primary
    final, agree = _finish(c, [w], [cons])
    v = check(final, [w], [cons])
    r = Round("controller cut from etcd", v, promote_s=(watcher.promoted_by or 0) - t_kill)
    r.notes.update(agree=agree, old_leader=leader, new_leader=v2.leader.value,  # type: ignore[union-attr]
                   takeover_s=t_lead - t_cut, no_failover_before_kill=epoch_at_takeover == epoch,
                   failovers=epoch_after - epoch, new_primary=new,
                   masters=sorted(n for n, role in roles.items() if role == b"master"))
    return r


def flapping_link(c: NetCluster, loss: int = 5, delay: float = 0.1, flaps: int = 3,
                  up: float = 2.0, down: float = 1.0, timeout: float = 60.0) -> Round:
    """The replication link loses `loss` % of its packets each way, is `2 * delay` slower
    per round trip (a TCP proxy: this kernel has no netem), and goes down for `down` seconds
    `flaps` times: the replica catches up in the end and holds exactly the primary's stream,
    nothing WAIT acknowledged is lost, and nothing is promoted."""
    from tests.support.tcpproxy import TcpProxy

    prepare(c)
    settle(c)
    v = c.view()
    epoch = v.shards["0"].value.epoch
    old = c.primary_id("0")
    assert old is not None
    replica = next(n for n, s in c.node_shard.items() if s == "0" and n != old)
    p, rh = c.nodes[old], c.hosts[replica]
    proxy = TcpProxy(p.port, p.host, listen_host=c.net.gateway, delay=delay).start()
    w = Writer(lambda: _addr(c), STREAM)
    cons = Consumer(lambda: _addr(c), STREAM, GROUP)
    try:
        c.net.redirect(rh, c.hosts[old], p.port, proxy.port)
        pc = redis.Redis(*p.addr, socket_timeout=5)
        kills = pc.execute_command("CLIENT", "KILL", "TYPE", "replica")  # back via the proxy
        pc.close()
        wait_until(lambda: proxy.connections > 0, timeout, what="replication via the proxy")
        c.net.loss(rh, c.net.gateway, loss)
        for t in (w, cons):
            t.start()
        t_start = time.monotonic()
        for _ in range(flaps):
            t0 = time.monotonic()
            wait_until(lambda t0=t0: time.monotonic() - t0 >= up, up + 5, what="link up")
            c.net.cut(rh, c.net.gateway)
            t0 = time.monotonic()
            wait_until(lambda t0=t0: time.monotonic() - t0 >= down, down + 5, what="link down")
            c.net.heal(rh)
            c.net.loss(rh, c.net.gateway, loss)
        wait_until(lambda: time.monotonic() - t_start >= flaps * (up + down) + up,
                   up + 5, what="last up")
        for t in (w, cons):
            t.stop()
        t_quiet = time.monotonic()
        settle(c, timeout=timeout)  # caught up, still through the lossy, slow link
        catch_up = time.monotonic() - t_quiet
    finally:
        c.net.heal(rh, redirects=True)
        proxy.stop()
    final, agree = _finish(c, [w], [cons])
    v = check(final, [w], [cons])
    r = Round("flapping replication link", v)
    r.notes.update(agree=agree, catch_up_s=catch_up,
                   epoch_unchanged=c.view().shards["0"].value.epoch == epoch,
                   wait0=sum(1 for x in w.writes if x.acks == 0),
                   proxied_connections=proxy.accepted, replica_link_kills=kills)
    return r


def isolated_primary_blocked_read(c: NetCluster, timeout: float = 30.0) -> Round:
    """A consumer blocks (XREADGROUP BLOCK 0) through a router; then the primary is cut off
    from everything but the test: the replica is promoted, and the next entry, written through
    the router to the new primary, must reach the blocked consumer (the router re-issues the
    read once its connection to the old primary is found dead). Needs a router."""
    prepare(c)
    settle(c)
    old = c.primary_id("0")
    assert old is not None
    router = c.router.addr
    got: list[tuple[object, float]] = []

    def read() -> None:
        r = redis.Redis(*router, socket_timeout=timeout * 2)
        try:
            got.append((r.xreadgroup(GROUP, "blocked", {STREAM: ">"}, count=1, block=0),
                        time.monotonic()))
        except redis.RedisError as e:
            got.append((e, time.monotonic()))
        finally:
            r.close()

    rc = redis.Redis(*router, socket_timeout=timeout)
    rc.xadd(STREAM, {"before": 1})
    drain = redis.Redis(*router, socket_timeout=timeout)  # nothing pending for the reader
    drain.xreadgroup(GROUP, "drain", {STREAM: ">"})
    drain.close()
    th = threading.Thread(target=read, daemon=True)
    th.start()
    pc = redis.Redis(*c.nodes[old].addr, socket_timeout=5)
    wait_until(lambda: any("b" in cl.get("flags", "") for cl in pc.client_list()), timeout,
               what="the read blocked on the primary")
    pc.close()
    others = [h for n, h in c.hosts.items() if n != old]
    t_cut = time.monotonic()
    c.net.cut(c.hosts[old], *others)
    try:
        v = c.wait_for(lambda v: v.shards["0"].value.primary != old, timeout, "a promotion")
        eid = rc.xadd(STREAM, {"after": 1})
        th.join(timeout)
    finally:
        c.net.heal(c.hosts[old])
        rc.close()
    final, agree = _finish(c, [], [])
    r = Round("primary isolated, read blocked through a router", Verdict())
    reply, at = got[0] if got else (None, 0.0)
    r.notes.update(agree=agree, new_primary=v.shards["0"].value.primary, written=eid,
                   delivered=reply, delivered_s=at - t_cut if got else None,
                   in_final=eid in final)
    return r
