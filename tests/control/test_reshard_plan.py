"""Resharding decisions without processes: the planners (control/reshard.py plan_even,
plan_remove) and the controller's part (Resharder.tick) against the in-memory etcd.

Planned moves must even out the load, hand slots out in contiguous runs (every range is one
entry of the slot map, which every view carries), and touch nothing else; the controller
starts queued moves in few transactions, and rolls a started move back only once a
participant has been gone for the timeout.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from base.memstore import FakeClock, MemoryEtcd, MemoryStore
from base.records import NodeRecord, ShardRecord, even_slots, owners, ranges_of
from control.reshard import Move, Resharder, ReshardError, plan_even, plan_remove, queue
from node.slots import SLOTS


def apply(owner: list[str | None], moves: list[Move]) -> list[str | None]:
    out = list(owner)
    for m in moves:
        assert out[m.slot] == m.src != m.dst
        out[m.slot] = m.dst
    return out


def counts(owner: list[str | None]) -> dict[str | None, int]:
    return {s: owner.count(s) for s in set(owner)}


def test_three_to_five_evens_counts_in_few_ranges() -> None:
    owner = owners(even_slots(["0", "1", "2"]))
    moves = plan_even(owner, ["0", "1", "2", "3", "4"])
    new = apply(owner, moves)
    c = counts(new)
    assert set(c) == {"0", "1", "2", "3", "4"} and max(c.values()) - min(c.values()) <= 1
    assert len(moves) == sum(1 for a, b in zip(owner, new, strict=True) if a != b)
    assert len(ranges_of(new)) <= 8  # runs, not slots dealt out one by one
    # Nothing to do once even.
    assert plan_even(new, ["0", "1", "2", "3", "4"]) == []


def test_remove_two_of_five_moves_only_their_slots() -> None:
    owner = owners(even_slots(["0", "1", "2", "3", "4"]))
    moves = plan_remove(owner, ["3", "4"], ["0", "1", "2"])
    assert {m.src for m in moves} == {"3", "4"} and len(moves) == owner.count("3") * 2 - 1
    new = apply(owner, moves)
    c = counts(new)
    assert set(c) == {"0", "1", "2"} and max(c.values()) - min(c.values()) <= 1
    assert len(ranges_of(new)) <= 8  # a run per (source, target) pair, and a rounding slot
    with pytest.raises(ReshardError, match="no other shard"):
        plan_remove(owner, ["0"], [])


def test_rebalance_by_memory_moves_bytes_not_slot_counts() -> None:
    owner = owners(even_slots(["0", "1", "2"]))
    # Shard 0 holds nearly all the data, in 40 slots of 1 MB each.
    weight = {s: 1_000_000 for s in range(100, 140)}
    moves = plan_even(owner, ["0", "1", "2"], weight)
    new = apply(owner, moves)
    load = {s: sum(weight.get(i, 0) + 1 for i in range(SLOTS) if new[i] == s)
            for s in ("0", "1", "2")}
    assert max(load.values()) - min(load.values()) <= 2 * 1_000_000 + SLOTS
    assert len(moves) < SLOTS // 3  # far fewer than evening the counts would need
    # By slot count the same map is already even.
    assert plan_even(owner, ["0", "1", "2"]) == []


class _Cluster:
    """The in-memory etcd with a cluster of `shards`, live primaries for `live` of them."""

    def __init__(self, shards: list[str], live: list[str]) -> None:
        self.clock = FakeClock()
        self.etcd = MemoryEtcd(self.clock)
        self.store = MemoryStore(self.etcd, "c")
        self.shards = shards
        self.live = live

    async def setup(self) -> None:
        assert await self.store.create_cluster(self.shards[:1])
        v = await self.store.view()
        for sid in self.shards:
            p = f"p{sid}"
            e = v.shards.get(sid)
            assert await self.store.put_shard(sid, ShardRecord(p, [], 1), e.mod if e else 0)
            if sid in self.live:
                lease = await self.store.grant(3600)
                assert await self.store.put_node(NodeRecord(p, "127.0.0.1", 7000, sid), lease, 0)


def test_controller_starts_moves_and_rolls_back_only_stuck_started_ones() -> None:
    async def go() -> None:
        c = _Cluster(["0", "1", "2"], live=["0", "1"])
        await c.setup()
        store = c.store
        v = await store.view()
        owner = owners(v.slots.value)
        # 150 slots to the live shard 1, 3 to shard 2 (no live primary).
        moves = [Move(s, "0", "1") for s in range(150)] + [Move(s, "0", "2")
                                                           for s in range(150, 153)]
        await queue(store, v, moves)
        r = Resharder(timeout=30, clock=c.clock)
        guard = store.created(store.key("controller", "leader"), 0)  # no leader key: holds
        before = c.etcd.txns
        await r.tick(store, await store.view(), guard)
        v = await store.view()
        states = {s: e.value["state"] for s, e in v.migrations.items()}
        assert all(states[s] == "moving" for s in range(150))  # shard 1: started
        assert all(states[s] == "queued" for s in range(150, 153))  # shard 2: waits
        assert c.etcd.txns - before == 2  # 150 records: two transactions, not 150
        # Shard 1's primary goes away: its started moves roll back after the timeout only.
        v = await store.view()
        await store.revoke(v.nodes["p1"].lease)
        v = await store.view()
        await r.tick(store, v, guard)
        c.clock.advance(29)
        await r.tick(store, await store.view(), guard)
        assert len((await store.view()).migrations) == 153
        c.clock.advance(2)
        await r.tick(store, await store.view(), guard)
        v = await store.view()
        assert sorted(v.migrations) == [150, 151, 152]  # the queued ones stay
        assert owners(v.slots.value) == owner  # a rollback moves no slot

    asyncio.run(asyncio.wait_for(go(), 30))


def test_queueing_follows_a_slot_map_that_moves_under_it() -> None:
    """The chunks after the first are guarded by a fresh map: flips of the moves queued
    first do not stop the rest; a slot that moved elsewhere meanwhile does."""
    async def go() -> None:
        c = _Cluster(["0", "1"], live=["0", "1"])
        await c.setup()
        store = c.store
        v0 = await store.view()
        moves = [Move(s, "0", "1") for s in range(250)]
        orig_commit = store.commit
        flips = 0

        async def commit(compares, puts, deletes=()):  # noqa: ANN001, ANN202
            nonlocal flips
            ok = await orig_commit(compares, puts, deletes)
            if ok and any(b"migrations/" in k for k, _v, _l in puts) and flips < 2:
                flips += 1  # another shard's flip lands right after each chunk
                v = await store.view()
                new = [list(x) for x in v.slots.value]
                new.append([16000 + flips, 16000 + flips, "0"])
                await orig_commit([store.guard(store.key("slots"), v.slots.mod)],
                                  [(store.key("slots"), json.dumps(ranges_of(
                                      owners(new))).encode(), 0)])
            return ok

        store.commit = commit  # type: ignore[method-assign]
        fresh, _ = await queue(store, v0, moves)
        assert len(fresh) == 250 and len((await store.view()).migrations) == 250

    asyncio.run(asyncio.wait_for(go(), 30))
