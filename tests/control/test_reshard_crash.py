"""A slot move either completes or rolls back, from what etcd holds, whoever dies: the source
primary, the target primary, the controller, or the whole target shard (then the controller
rolls the move back after --move-timeout). Each under writes (XADD + WAIT 1) and XREADGROUP
consumers through RedisCluster.

Afterwards nothing acknowledged is lost and each moved slot has exactly one owner: the slot
map names one shard and only that shard's nodes hold keys of the slot.

"Mid-move" is made deterministic by stopping (SIGSTOP) the target's replica: the source then
copies the slots and cannot switch, because the target's WAIT for a replica times out, so it
starts over and over until that replica's lease is gone (3 s). The kill lands in that window.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from base.records import owners
from base.store import Store
from control.reshard import Move, queue
from tests.support.cluster import keys_in_slots
from tests.support.procs import wait_until
from tests.support.streamload import StreamLoad

pytestmark = [pytest.mark.etcd, pytest.mark.failover, pytest.mark.slow]

SLOTS = 20


def _start(xcluster, *controller_args: str):  # noqa: ANN001, ANN202
    c = xcluster(shards=2, replicas=1, controller=False, node_args=("--appendonly", "yes"))
    c.start_controller(*controller_args)
    owner = owners(c.view().slots.value)
    slots = [s for s in range(16384) if owner[s] == "0"][-SLOTS:]
    seed = c.nodes["s0n0"]
    nodes = [(n.host, n.port) for n in c.nodes.values()]

    def connect() -> redis.RedisCluster:
        return redis.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in nodes],
            socket_timeout=10, retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), 30))

    load = StreamLoad(connect, keys_in_slots(slots, per_slot=2), writers=4, consumers=10)
    load.setup()
    p = seed.client().pipeline(transaction=False)
    for k in load.keys:  # some history to copy, beside what the writers add
        for i in range(1, 2001):
            p.xadd(k, {"w": "-1", "n": str(i)}, id=f"{i}-1")
    p.execute()
    load.sent[-1] = 2001
    load.acked.update((k, f"{i}-1".encode()) for k in load.keys for i in range(1, 2001))
    return c, slots, load, connect


def _queue(c, slots: list[int]) -> None:  # noqa: ANN001
    """Queue moves to shard 1 from this process (no CLI start-up: the window of a stopped
    replica's lease is short)."""
    async def go() -> None:
        store = Store(c.url, c.name)
        try:
            await queue(store, await store.view(), [Move(s, "0", "1") for s in slots])
        finally:
            await store.close()

    asyncio.run(go())


def _count(client: redis.Redis, slots: list[int]) -> int:
    return sum(client.execute_command("CLUSTER", "COUNTKEYSINSLOT", s) for s in slots)


def _moving(c, slots: list[int]) -> bool:  # noqa: ANN001
    """The source has copied (some of) the slots and they have not switched yet."""
    v = c.view()
    if not all(s in v.migrations and v.migrations[s].value.get("state") == "moving"
               for s in slots):
        return False
    return _count(c.nodes["s1n0"].client(), slots) > 0


def _one_owner(c, slots: list[int], owner: str, keys: int) -> None:  # noqa: ANN001
    v = c.wait_for(lambda v: not v.migrations and all(
        owners(v.slots.value)[s] == owner for s in slots), 60, "the moves to end")
    live = [n for n in c.nodes if n in v.nodes]
    for nid in live:
        want_keys = c.node_shard[nid] == owner
        cl = c.nodes[nid].client()
        cl.execute_command("READONLY")
        if not want_keys:
            wait_until(lambda cl=cl: _count(cl, slots) == 0, 20,
                       what=f"{nid} to hold no key of the moved slots")
        else:
            wait_until(lambda cl=cl: _count(cl, slots) == keys, 20,
                       what=f"{nid} to hold every key of the slots")


def _finish(c, load: StreamLoad, connect) -> None:  # noqa: ANN001
    """Stop the load and check what it was told; no node may have hit an internal error."""
    load.stop()
    bugs = [line for h in c.nodes.values() for line in h.log.splitlines()
            if " E command " in line]
    assert not bugs, bugs[:5]
    load.drain()
    rc = connect()
    try:
        load.check(rc, exactly_once=False)  # a killed primary may deliver an entry twice
    finally:
        rc.close()


@pytest.mark.parametrize("victim", ["source", "target"])
def test_a_move_survives_the_death_of_a_primary(xcluster, victim: str) -> None:  # noqa: ANN001
    c, slots, load, connect = _start(xcluster)
    stopped = c.nodes["s1n1"]
    load.start()
    try:
        wait_until(lambda: len(load.acked) >= 4000 + 50, 30, what="writes acknowledged")
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            _queue(c, slots)
            wait_until(lambda: _moving(c, slots), 30, interval=0.02, what="the copy to start")
            c.nodes["s0n0" if victim == "source" else "s1n0"].kill()
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        _one_owner(c, slots, "1", len(load.keys))
        wait_until(lambda: len(load.acked) >= 4000 + 300, 60, what="writes after the move")
    finally:
        _finish(c, load, connect)
    assert (c.primary_id("0"), c.primary_id("1")) == (
        ("s0n1", "s1n0") if victim == "source" else ("s0n0", "s1n1"))


def test_a_move_survives_the_death_of_the_controller(xcluster) -> None:  # noqa: ANN001
    """The moves already started finish without any controller; the queued ones wait for
    the next one."""
    c, _slots, load, connect = _start(xcluster)
    owner = owners(c.view().slots.value)
    many = [s for s in range(16384) if owner[s] == "0"][-2000:]
    load.start()
    try:
        wait_until(lambda: len(load.acked) >= 4000 + 50, 30, what="writes acknowledged")
        _queue(c, many)
        c.wait_for(lambda v: sum(1 for s in many if s not in v.migrations) > 0, 60,
                   "a first batch to switch")
        c.controllers[0].kill()
        v = c.wait_for(lambda v: not any(e.value.get("state") == "moving"
                                         for e in v.migrations.values()), 60,
                       "the started moves to end")
        left = [s for s in many if s in v.migrations]
        assert left and len(left) < len(many)  # some queued, none running, none lost
        assert all(owners(v.slots.value)[s] == ("0" if s in left else "1") for s in many)
        c.start_controller()
        _one_owner(c, many, "1", len(load.keys))
    finally:
        _finish(c, load, connect)


def test_a_move_rolls_back_when_the_target_shard_is_gone(xcluster) -> None:  # noqa: ANN001
    """Both target nodes die mid-move: after --move-timeout the controller drops the
    record, the source keeps serving the slots, and the target nodes, back later, drop the
    keys they had imported."""
    c, slots, load, connect = _start(xcluster, "--move-timeout", "3")
    stopped = c.nodes["s1n1"]
    load.start()
    try:
        wait_until(lambda: len(load.acked) >= 4000 + 50, 30, what="writes acknowledged")
        os.kill(stopped.pid, signal.SIGSTOP)
        _queue(c, slots)
        wait_until(lambda: _moving(c, slots), 30, interval=0.02, what="the copy to start")
        c.nodes["s1n0"].kill()
        stopped.kill()
        before = len(load.acked)
        v = c.wait_for(lambda v: not v.migrations, 30, "the rollback")
        assert all(owners(v.slots.value)[s] == "0" for s in slots)
        wait_until(lambda: len(load.acked) >= before + 100, 60, what="writes on the source")
        for n in ("s1n0", "s1n1"):
            c.nodes[n].start()
        c.wait_ready(30)
        _one_owner(c, slots, "0", len(load.keys))
    finally:
        _finish(c, load, connect)
