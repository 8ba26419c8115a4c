"""Controller decisions without etcd: the real Controller and failover() against the in-memory
store (base/memstore.py) and scripted nodes, as kvrocks-controller tests its controller.

What is decided here: which replica a failover promotes (highest offset, ties by replica
order), the epoch bump and the new membership in one guarded transaction, fencing by compare
on the leader key's create revision (a deposed leader changes nothing), and level-triggered
ticks (a lost watch event costs one re-read of etcd, a lease interval, not the failover). The real-etcd versions of these
run in test_control.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from base.memstore import MemoryEtcd, MemoryStore
from base.records import NodeRecord, ShardRecord
from base.store import BaseStore
from control.controller import DEAD_PROBES, FENCE_WAIT, TICK, Controller, FailoverError, failover
from node.errors import NoAuthError
from node.link import NodeOps
from node.membership.agent import FENCE_AFTER
from tests.support.memetcd import in_memory, run, until


class ScriptedNodes(NodeOps):
    """Nodes whose offsets and liveness a test sets; records what the controller told them."""

    def __init__(self, offsets: dict[int, int | Exception] | None = None) -> None:
        super().__init__()
        # port -> offset, or the error to raise
        self.offsets: dict[int, int | Exception] = dict(offsets or {})
        self.dead: set[int] = set()  # ports that refuse connections
        # replica port -> its master_link_status (True up, False down); absent: cannot ask
        self.links: dict[int, bool] = {}
        self.told: list[tuple] = []

    async def offset(self, host: str, port: int) -> int:
        v = self.offsets.get(port, 0)
        if isinstance(v, Exception):
            raise v
        return v

    async def promote(self, host: str, port: int) -> None:
        self.told.append(("promote", port))

    async def replicate(self, host: str, port: int, to_host: str, to_port: int) -> None:
        self.told.append(("replicate", port, to_port))

    async def refused(self, host: str, port: int) -> bool:
        return port in self.dead

    async def primary_link_up(self, host: str, port: int) -> bool | None:
        return self.links.get(port)


PORTS = {"p": 7000, "r1": 7001, "r2": 7002}


async def make_shard(store: MemoryStore, members: dict[str, bool], primary: str = "p",
                     replicas: tuple[str, ...] = ("r1", "r2")) -> dict[str, int]:
    """Shard 0 with `primary` and `replicas`; members[id] says whether its node key is live
    (on a lease of its own). Returns id -> lease."""
    assert await store.create_cluster(["0"])
    v = await store.view()
    assert await store.put_shard("0", ShardRecord(primary, list(replicas), 5),
                                 v.shards["0"].mod)
    leases = {}
    for nid, live in members.items():
        if live:
            leases[nid] = await store.grant(3)
            assert await store.put_node(NodeRecord(nid, "127.0.0.1", PORTS[nid], "0"),
                                        leases[nid], 0)
    return leases


# --- failover(): the choice and the transaction ----------------------------------------------

def test_failover_promotes_the_highest_offset_and_bumps_the_epoch_once() -> None:
    async def go() -> None:
        store = MemoryStore(MemoryEtcd(), "c")
        await make_shard(store, {"r1": True, "r2": True})
        nodes = ScriptedNodes({7001: 100, 7002: 250})
        v = await store.view()
        assert await failover(store, v, "0", nodes=nodes) == "r2"
        rec = (await store.view()).shards["0"].value
        assert (rec.primary, rec.replicas, rec.epoch) == ("r2", ["r1", "p"], 6)
        assert nodes.told == [("promote", 7002), ("replicate", 7001, 7002)]
        # The same (now stale) view cannot decide again: its guard names the old revision.
        with pytest.raises(FailoverError, match="etcd changed"):
            await failover(store, v, "0", nodes=nodes)
        assert (await store.view()).shards["0"].value.epoch == 6

    run(go)


def test_failover_ties_go_to_the_replica_list_order_and_errors_are_skipped() -> None:
    async def go() -> None:
        store = MemoryStore(MemoryEtcd(), "c")
        await make_shard(store, {"r1": True, "r2": True}, replicas=("r2", "r1"))
        nodes = ScriptedNodes({7001: 80, 7002: 80})
        assert await failover(store, await store.view(), "0", nodes=nodes) == "r2"

        store2 = MemoryStore(MemoryEtcd(), "c")
        await make_shard(store2, {"r1": True, "r2": True})
        nodes.offsets = {7001: NoAuthError("NOAUTH Authentication required."), 7002: 5}
        assert await failover(store2, await store2.view(), "0", nodes=nodes) == "r2"

        store3 = MemoryStore(MemoryEtcd(), "c")
        await make_shard(store3, {"r1": True, "r2": False})
        nodes.offsets = {7001: NoAuthError("NOAUTH Authentication required.")}
        with pytest.raises(FailoverError, match=r"r1: error: NOAUTH.*r2: no lease"):
            await failover(store3, await store3.view(), "0", nodes=nodes)
        assert (await store3.view()).shards["0"].value.primary == "p"

    run(go)


def test_a_live_primary_is_replaced_only_with_force() -> None:
    async def go() -> None:
        store = MemoryStore(MemoryEtcd(), "c")
        await make_shard(store, {"p": True, "r1": True, "r2": True})
        nodes = ScriptedNodes({7001: 1, 7002: 2})
        with pytest.raises(FailoverError, match="alive; use --force"):
            await failover(store, await store.view(), "0", nodes=nodes)
        assert await failover(store, await store.view(), "0", force=True, nodes=nodes) == "r2"
        # The demoted primary is told to follow the new one.
        assert ("replicate", 7000, 7002) in nodes.told

    run(go)


def test_without_force_the_old_primary_key_must_still_be_absent_at_commit() -> None:
    """A primary that registers again between the read and the write wins: the transaction
    compares its key's absence, so no failover happens on a stale belief."""
    async def go() -> None:
        store = MemoryStore(MemoryEtcd(), "c")
        await make_shard(store, {"r1": True, "r2": True})
        v = await store.view()
        lease = await store.grant(3)
        assert await store.put_node(NodeRecord("p", "127.0.0.1", 7000, "0"), lease, 0)
        with pytest.raises(FailoverError, match="etcd changed"):
            await failover(store, v, "0", nodes=ScriptedNodes())
        assert (await store.view()).shards["0"].value.primary == "p"

    run(go)


# --- the Controller: election, fencing by compare, level-triggered ticks ----------------------

async def start_controller(etcd: MemoryEtcd, cid: str,
                           nodes: NodeOps) -> tuple[Controller, asyncio.Task]:
    c = Controller(MemoryStore(etcd, "c"), cid, nodes)
    return c, asyncio.ensure_future(c.run())


async def elect(etcd: MemoryEtcd, store: MemoryStore, cid: str,
                nodes: NodeOps) -> tuple[Controller, asyncio.Task]:
    """Start controller `cid` and wait until it leads."""
    c, task = await start_controller(etcd, cid, nodes)
    await until(lambda: _leader_is(store, cid), f"{cid} elected")
    return c, task


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@in_memory
async def test_a_deposed_leader_cannot_fail_over(etcd: MemoryEtcd, store: MemoryStore) -> None:
    """Controller A believes it leads; meanwhile its leader key was replaced (its lease lapsed
    and B was elected). A's failover carries a compare on the create revision it was elected
    at, so it changes nothing; B's goes through."""
    await make_shard(store, {"r1": True, "r2": True, "p": True})
    nodes = ScriptedNodes({7001: 10, 7002: 20})
    a, ta = await elect(etcd, store, "A", nodes)
    a_rev = a.leader_rev
    ta.cancel()  # A stops running its loop but keeps its belief (a, a_rev) ...
    with pytest.raises(asyncio.CancelledError):
        await ta
    # B's replicas cannot answer until A has tried: B's loop runs concurrently and would
    # otherwise fail over before A's tick (its own tick is not under the test's control).
    b_nodes = ScriptedNodes({7001: OSError("held"), 7002: OSError("held")})
    b, tb = await elect(etcd, store, "B", b_nodes)
    assert b.leader_rev != a_rev
    # The primary dies now; A (stale) ticks first.
    await store.revoke((await store.view()).nodes["p"].lease)
    a.leader_rev = a_rev
    before = etcd.txns
    await a._tick(await store.view())
    assert etcd.txns == before + 1  # A tried ...
    assert (await store.view()).shards["0"].value.primary == "p"  # ... and was refused
    assert "etcd changed" in a.blocked["0"]
    b_nodes.offsets = {7001: 10, 7002: 20}
    await until(lambda: _primary_is(store, "r2"), "B's failover")
    await stop(tb)


@in_memory
async def test_a_missed_watch_event_costs_one_reread_not_the_failover(etcd: MemoryEtcd,
                                                                    store: MemoryStore) -> None:
    leases = await make_shard(store, {"p": True, "r1": True, "r2": True})
    nodes = ScriptedNodes({7001: 30, 7002: 20})
    _c, task = await elect(etcd, store, "A", nodes)
    etcd.silent = True  # no watch event from here on
    await store.revoke(leases["p"])
    await until(lambda: _primary_is(store, "r1"), "failover from a re-read of etcd",
                timeout=20 * TICK + 5)
    rec = (await store.view()).shards["0"].value
    assert rec.epoch == 6 and rec.replicas == ["r2", "p"]
    await stop(task)


def _record_revokes(store: BaseStore) -> list[float]:
    """When each revoke returned (time.monotonic())."""
    done: list[float] = []
    real = store.revoke

    async def revoke(lease: int) -> None:
        await real(lease)
        done.append(time.monotonic())

    store.revoke = revoke  # type: ignore[method-assign]
    return done


class _Deadlines(dict):
    """Controller.revoked that remembers every deadline set (the entry goes at the failover)."""

    def __init__(self) -> None:
        super().__init__()
        self.set_to: list[float] = []

    def __setitem__(self, key: str, value: float) -> None:
        self.set_to.append(value)
        super().__setitem__(key, value)


async def _refusing_primary(store: MemoryStore, etcd: MemoryEtcd,
                            links: dict[int, bool]) -> tuple[list[float], list[float], float]:
    """Shard 0's primary starts refusing connections while its replicas report `links`;
    returns when each revoke returned, the failover deadlines set, and when r2 was primary."""
    await make_shard(store, {"p": True, "r1": True, "r2": True})
    nodes = ScriptedNodes({7001: 3, 7002: 4})
    c, task = await elect(etcd, store, "A", nodes)
    revokes = _record_revokes(c.store)
    c.revoked = deadlines = _Deadlines()
    nodes.links = dict(links)
    nodes.dead.add(7000)  # its lease would live on for the TTL
    await until(lambda: _primary_is(store, "r2"), f"{DEAD_PROBES} refusals, then failover")
    promoted = time.monotonic()
    assert "p" not in (await store.view()).nodes
    assert c.failovers == {("0", "process_gone"): 1}
    await stop(task)
    return revokes, deadlines.set_to, promoted


@in_memory
async def test_a_crashed_primary_loses_its_lease_early(etcd: MemoryEtcd,
                                                       store: MemoryStore) -> None:
    """A crash: the port refuses and both replicas saw their link go down (its kernel closed
    its sockets), so the failover follows the revoke without waiting for a fence."""
    revokes, deadlines, _ = await _refusing_primary(store, etcd, {7001: False, 7002: False})
    assert len(deadlines) == 1  # (the second revoke is the controller resigning at stop)
    assert deadlines[0] - revokes[0] < FENCE_WAIT  # no wait: set to "now", just after the revoke


@pytest.mark.parametrize("links", [{7001: True, 7002: False}, {7002: False}, {}],
                         ids=["a-replica-link-up", "a-replica-unanswering", "no-answers"])
def test_a_revoked_primary_is_replaced_only_after_its_fence(links: dict[int, bool]) -> None:
    """Refusals may come from a firewall in front of a live primary that etcd cannot hear
    either: it takes writes until its fence (FENCE_AFTER after its last accepted keep-alive,
    sent before the revoke). Unless every replica says its link to the primary is down, the
    promotion waits FENCE_WAIT after the revoke."""
    async def go() -> None:
        etcd = MemoryEtcd()
        revokes, deadlines, promoted = await _refusing_primary(MemoryStore(etcd, "c"), etcd,
                                                               links)
        assert len(deadlines) == 1  # (the second revoke is the controller resigning at stop)
        assert deadlines[0] >= revokes[0] + FENCE_WAIT > revokes[0] + FENCE_AFTER
        assert promoted >= deadlines[0]
    run(go)


@in_memory
async def test_a_standby_takes_over_when_the_leader_lease_is_lost(etcd: MemoryEtcd,
                                                                  store: MemoryStore) -> None:
    await make_shard(store, {"p": True, "r1": True, "r2": True})
    nodes = ScriptedNodes()
    a, ta = await elect(etcd, store, "A", nodes)
    b, tb = await start_controller(etcd, "B", nodes)
    await until(lambda: _is_following(b), "B campaigning")
    await store.revoke(a.session.id)  # A's lease is gone (expired, say)
    await until(lambda: _leader_is(store, "B"), "B elected")
    # A notices (its session reports the loss) and campaigns again as a follower.
    await until(lambda: _not_leading(a), "A steps down")
    await stop(ta)
    await stop(tb)
    assert (await store.view()).leader is None  # B resigned: its lease was revoked


async def _leader_is(store: MemoryStore, cid: str) -> bool:
    v = await store.view()
    return v.leader is not None and v.leader.value == cid


async def _primary_is(store: MemoryStore, nid: str) -> bool:
    return (await store.view()).shards["0"].value.primary == nid


async def _is_following(c: Controller) -> bool:
    return c.session is not None and c.leader_rev == 0


async def _not_leading(c: Controller) -> bool:
    return c.leader_rev == 0
