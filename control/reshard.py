"""Resharding: planning slot moves, queueing them in etcd, and the controller's part.

A move is a `migrations/<slot>` record `{"from", "to", "state"}`. The CLI (add-shard,
move-slots, rebalance, remove-shard) writes records in state "queued", in transactions that
require each record to be absent (a second migration of a slot is refused) and the slot map
to be the one the plan was made from. The leader controller (`Resharder.tick`)
starts up to PER_SOURCE moves per source shard (state "moving") and deletes records that can
no longer complete (a shard that was removed, a slot whose owner changed). From "moving" on,
the nodes finish the move by themselves (node/membership/slotmover.py): the source commits the flip,
which deletes the record. So a move survives the death of the controller (queued ones wait
for the next leader), of the source or of the target (their successors start it over after a
failover). A move whose source or target shard stays without a live primary longer than the
controller's --move-timeout is rolled back: its record goes, the source keeps the slot and
the target drops what it had imported. Either way it ends from what etcd holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from base.records import Compare, ShardRecord, View, owners
from base.store import BaseStore
from node.slots import SLOTS

log = logging.getLogger("xshard.controller")

PER_SOURCE = 200  # moves in flight per source shard (a node moves up to 100 slots at once)
MOVE_TIMEOUT = 30.0  # seconds a move may wait for a missing participant before it rolls back
_TXN_OPS = 100  # etcd allows 128 operations per transaction
_QUEUE_TRIES = 50  # attempts at queueing one chunk while the slot map keeps moving


class ReshardError(Exception):
    """A move that cannot be queued; the message is one line for the user."""


@dataclass
class Move:
    slot: int
    src: str
    dst: str


# --- planning (pure) ----------------------------------------------------------------------------
def parse_slots(text: str) -> list[int]:
    """`A-B[,C...]` -> sorted distinct slots."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        try:
            lo, hi = int(a), int(b or a)
        except ValueError:
            raise ReshardError(f"bad slot range '{part}' (expected A-B or A)") from None
        if not 0 <= lo <= hi < SLOTS:
            raise ReshardError(f"slot range '{part}' is outside 0-{SLOTS - 1}")
        out.update(range(lo, hi + 1))
    if not out:
        raise ReshardError("no slots given")
    return sorted(out)


def live_shards(v: View) -> list[str]:
    """Shards with a live primary: the ones that can take slots."""
    return [s for s in v.shard_ids() if v.live(v.shards[s].value.primary)]


def _cost(weight: dict[int, int] | None):  # noqa: ANN202 - slot -> its weight
    """A slot's weight: 1 each, or its key bytes."""
    if weight is None:
        return lambda s: 1
    return lambda s: weight.get(s, 0)


def _fill(pool: list[tuple[int, str]], shards: list[str], load: dict[str, float],
          target: float, cost) -> list[Move]:  # noqa: ANN001
    """Give the pooled (slot, source) pairs, in slot order, to `shards` in contiguous runs:
    the least loaded shard first, up to `target`. What is left (rounding) goes one by one to
    the least loaded, its own source first on a tie."""
    moves: list[Move] = []
    pool = sorted(pool)
    i = 0
    for dst in sorted(shards, key=lambda x: (load[x], x)):
        while i < len(pool) and load[dst] + cost(pool[i][0]) / 2 <= target:
            slot, src = pool[i]
            i += 1
            load[dst] += cost(slot)
            if dst != src:
                moves.append(Move(slot, src, dst))
    for slot, src in pool[i:]:
        dst = min(shards, key=lambda x: (load[x], x != src, x))
        load[dst] += cost(slot)
        if dst != src:
            moves.append(Move(slot, src, dst))
    return moves


def plan_even(owner: list[str | None], shards: list[str],
              weight: dict[int, int] | None = None) -> list[Move]:
    """Moves that even out `shards`: by slot count, or by the per-slot `weight` (key bytes).
    Slots of shards not in `shards` go to them too. By count it takes slots from the top of
    each over-full shard's ranges and hands them out in runs, so ranges stay contiguous; by
    bytes it moves as few slots as it can, the heaviest first."""
    if not shards:
        raise ReshardError("no shard with a live primary to give slots to")
    cost = _cost(weight)
    load: dict[str, float] = {s: 0 for s in shards}
    held: dict[str, list[int]] = {s: [] for s in shards}
    pool: list[tuple[int, str]] = []
    for slot, sid in enumerate(owner):
        if sid in load:
            load[sid] += cost(slot)
            held[sid].append(slot)
        else:
            pool.append((slot, str(sid)))
    target = (sum(load.values()) + sum(cost(s) for s, _ in pool)) / len(shards)
    for sid in shards:
        # By count: from the top of the shard's ranges. By bytes: the heaviest first, and
        # only slots with keys (moving an empty slot changes nothing there).
        slots = held[sid] if weight is None else sorted(
            (s for s in held[sid] if cost(s)), key=lambda s: (cost(s), s))
        while slots and load[sid] - cost(slots[-1]) / 2 > target:
            s = slots.pop()
            load[sid] -= cost(s)
            pool.append((s, sid))
        if weight is not None:  # lighter ones may still bring it closer
            for s in reversed(slots):
                if load[sid] - cost(s) / 2 > target:
                    load[sid] -= cost(s)
                    pool.append((s, sid))
    return _fill(pool, shards, load, target, cost)


def plan_remove(owner: list[str | None], gone: list[str], others: list[str],
                weight: dict[int, int] | None = None) -> list[Move]:
    """Every slot of the shards in `gone`, handed to `others` in runs so that their loads
    even out as far as these slots allow (the others' own slots stay where they are)."""
    if not others:
        raise ReshardError(f"no other shard with a live primary to move the slots of shard "
                           f"{', '.join(gone)} to")
    cost = _cost(weight)
    load: dict[str, float] = {s: 0 for s in others}
    pool: list[tuple[int, str]] = []
    for slot, sid in enumerate(owner):
        if sid in load:
            load[sid] += cost(slot)
        elif sid in gone:
            pool.append((slot, sid))
    target = (sum(load.values()) + sum(cost(s) for s, _ in pool)) / len(others)
    return _fill(pool, others, load, target, cost)


# --- queueing -----------------------------------------------------------------------------------
async def queue(store: BaseStore, v: View, moves: list[Move], resume: bool = False
                ) -> tuple[list[Move], list[Move]]:
    """Write "queued" records for `moves`. Returns (queued now, already queued: adopted with
    `resume`). A slot with a record for another move is refused, naming it."""
    if v.slots is None:
        raise ReshardError(f"cluster '{store.cluster}' has no slot map (run xshard create)")
    fresh, adopted = [], []
    for m in moves:
        e = v.migrations.get(m.slot)
        if e is None:
            fresh.append(m)
            continue
        rec = e.value
        if resume and rec.get("to") == m.dst:
            adopted.append(m)
            continue
        raise ReshardError(
            f"slot {m.slot} is already moving from shard {rec.get('from')} to shard "
            f"{rec.get('to')} ({rec.get('state')}); a second migration of it is refused"
            + ("" if resume else " (--resume waits for moves already queued to the same "
                                 "shard)"))
    for i in range(0, len(fresh), _TXN_OPS):
        chunk = fresh[i:i + _TXN_OPS]
        for attempt in range(_QUEUE_TRIES):
            if i or attempt:
                # The moves queued so far are running and flip slots, so the map moves on:
                # re-check that these slots are still where the plan found them.
                v = await store.view()
                assert v.slots is not None
                owner = owners(v.slots.value)
                for m in chunk:
                    if owner[m.slot] != m.src or m.slot in v.migrations:
                        raise ReshardError(
                            f"the cluster changed while queueing (slot {m.slot} moved or got "
                            f"a migration of its own); {i} moves were queued, run it again "
                            "with --resume")
            assert v.slots is not None
            compares = [store.guard(store.key("slots"), v.slots.mod)]
            compares += [store.guard(store.key("migrations", str(m.slot)), 0) for m in chunk]
            puts = [(store.key("migrations", str(m.slot)), json.dumps(
                {"from": m.src, "to": m.dst, "state": "queued"}).encode(), 0) for m in chunk]
            if await store.commit(compares, puts):
                break
        else:
            raise ReshardError("the slot map kept changing while queueing; "
                               f"{i} moves were queued, run it again with --resume")
    return fresh, adopted


async def add_shard(store: BaseStore) -> str:
    """A new empty shard record; returns its id (the next free integer)."""
    for _ in range(10):
        v = await store.view()
        nums = [int(s) for s in v.shards if s.isdigit()]
        sid = str(max(nums) + 1 if nums else 0)
        if await store.commit([store.guard(store.key("shards", sid), 0)],
                              [(store.key("shards", sid), ShardRecord().encode(), 0)]):
            return sid
    raise ReshardError("could not add a shard: etcd kept changing")


async def add_shards(store: BaseStore, ids: list[str]) -> list[str]:
    """Empty shard records with these ids (`xshard up --shards N` growing a cluster); the ones
    that exist already are left alone. Returns the ids added."""
    v = await store.view()
    new = [sid for sid in ids if sid not in v.shards]
    if new and not await store.commit(
            [store.guard(store.key("shards", sid), 0) for sid in new],
            [(store.key("shards", sid), ShardRecord().encode(), 0) for sid in new]):
        raise ReshardError("could not add the shards: etcd changed meanwhile; run it again")
    return new


async def queue_rebalance(store: BaseStore) -> list[Move]:
    """Plan an even split over the shards with a live primary and queue it (`up`)."""
    v = await store.view()
    if v.slots is None:
        raise ReshardError(f"cluster '{store.cluster}' has no slot map (run xshard create)")
    moves = plan_even(owners(v.slots.value), live_shards(v))
    fresh, _ = await queue(store, v, moves)
    return fresh


async def retire_shard(store: BaseStore, shard: str) -> None:
    """Delete a shard record once it owns no slot and no move involves it."""
    v = await store.view()
    e = v.shards.get(shard)
    if e is None:
        raise ReshardError(f"unknown shard '{shard}'")
    if v.slots is not None and shard in owners(v.slots.value):
        raise ReshardError(f"shard {shard} still owns slots")
    busy = [s for s, m in v.migrations.items() if shard in (m.value.get("from"),
                                                            m.value.get("to"))]
    if busy:
        raise ReshardError(f"shard {shard} is part of {len(busy)} moves still in progress")
    compares = [store.guard(store.key("shards", shard), e.mod)]
    if v.slots is not None:
        compares.append(store.guard(store.key("slots"), v.slots.mod))
    if not await store.commit(compares, [], (store.key("shards", shard),)):
        raise ReshardError("the cluster changed while retiring the shard; run it again")


# --- the controller's part ----------------------------------------------------------------------
class Resharder:
    """The leader controller's part (`tick` on every view): start queued moves whose source
    and target have live primaries, up to PER_SOURCE per source shard, and drop the records
    of moves that cannot finish: a shard that is gone, a slot whose owner changed, and a
    started move whose source or target shard has had no live primary for `timeout` seconds
    (a rollback: the source keeps the slot, the target drops what it imported). The clock is
    this leader's: a new leader starts it again. Every write also compares the leader key
    (`guard`)."""

    def __init__(self, timeout: float = MOVE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self.stuck: dict[int, float] = {}  # slot -> when a participant was first seen missing

    async def tick(self, store: BaseStore, v: View, guard: Compare) -> None:
        if not v.migrations or v.slots is None:
            self.stuck.clear()
            return
        owner = owners(v.slots.value)
        now = self.clock()
        moving: dict[str, int] = {}
        drop: list[tuple[int, Any, str]] = []
        for slot, e in sorted(v.migrations.items()):
            rec = e.value
            src, dst = rec.get("from"), rec.get("to")
            if src not in v.shards or dst not in v.shards:
                drop.append((slot, e, "a shard is gone"))
            elif owner[slot] != src:
                drop.append((slot, e, f"its owner is now shard {owner[slot]}"))
            elif not (v.live(v.shards[src].value.primary) and v.live(v.shards[dst].value.primary)):
                if rec.get("state") != "moving":
                    continue  # a queued move costs nothing: it waits for both primaries
                since = self.stuck.setdefault(slot, now)
                if now - since >= self.timeout:
                    drop.append((slot, e, f"shard {dst if v.live(v.shards[src].value.primary) else src} "
                                          f"has had no live primary for {now - since:.0f}s"))
            else:
                self.stuck.pop(slot, None)
                if rec.get("state") == "moving":
                    moving[src] = moving.get(src, 0) + 1
        for slot in [s for s in self.stuck if s not in v.migrations]:
            del self.stuck[slot]
        if drop:
            why = sorted({w for _s, _e, w in drop})
            log.warning("controller: rolling back %d slot moves (%s): %s", len(drop),
                        "; ".join(why), _slots_text([s for s, _e, _w in drop]))
            for i in range(0, len(drop), _TXN_OPS):
                chunk = drop[i:i + _TXN_OPS]
                await store.commit(
                    [store.guard(store.key("migrations", str(s)), e.mod) for s, e, _w in chunk]
                    + [guard], [], tuple(store.key("migrations", str(s)) for s, _e, _w in chunk))
            gone = {s for s, _e, _w in drop}
        else:
            gone = set()
        start: list[tuple[int, Any]] = []
        for slot, e in sorted(v.migrations.items()):
            rec = e.value
            if slot in gone or rec.get("state") != "queued":
                continue
            src, dst = rec["from"], rec["to"]
            if not (v.live(v.shards[src].value.primary) and v.live(v.shards[dst].value.primary)):
                continue
            if moving.get(src, 0) >= PER_SOURCE:
                continue
            moving[src] = moving.get(src, 0) + 1
            start.append((slot, e))
        for i in range(0, len(start), _TXN_OPS):
            chunk = start[i:i + _TXN_OPS]
            await store.commit(
                [store.guard(store.key("migrations", str(s)), e.mod) for s, e in chunk] + [guard],
                [(store.key("migrations", str(s)), json.dumps(dict(e.value, state="moving")).encode(),
                  0) for s, e in chunk])


def _slots_text(slots: list[int]) -> str:
    shown = ", ".join(map(str, slots[:8]))
    return f"slots {shown}" + (f" (+{len(slots) - 8} more)" if len(slots) > 8 else "")
