"""Resharding: planning slot moves, queueing them in etcd, and the controller's part.

A move is a `migrations/<slot>` record `{"from", "to", "state"}`. The CLI (add-shard,
move-slots, rebalance, remove-shard) writes records in state "queued", in transactions that
require each record to be absent (a second migration of a slot is refused) and the slot map
to be the one the plan was made from. The leader controller (`tick`) starts up to
PER_SOURCE moves per source shard (state "moving") and deletes records that can no longer
complete (a shard that was removed, a slot whose owner changed). From "moving" on, the nodes
finish the move by themselves (control/slotmover.py): the source commits the flip, which
deletes the record. So a move survives the death of the controller (queued ones wait for the
next leader), of the source or of the target (their successors start it over).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from control.records import Compare, ShardRecord, View, owners
from control.store import BaseStore
from node.slots import SLOTS

log = logging.getLogger("xshard.controller")

PER_SOURCE = 4  # moves in flight per source shard
_TXN_OPS = 100  # etcd allows 128 operations per transaction


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


def plan_even(owner: list[str | None], shards: list[str],
              weight: dict[int, int] | None = None) -> list[Move]:
    """Moves that even out `shards`: by slot count, or by the per-slot `weight` (key bytes).
    Slots of shards not in `shards` go to them too. Takes slots from the top of each
    over-full shard's ranges, so ranges stay contiguous where they can."""
    if not shards:
        raise ReshardError("no shard with a live primary to give slots to")
    w = weight or {}
    cost = (lambda s: w.get(s, 0) + 1) if weight is not None else (lambda s: 1)
    load = {s: 0 for s in shards}
    held: dict[str, list[int]] = {s: [] for s in shards}
    orphans = []
    for slot, sid in enumerate(owner):
        if sid in load:
            load[sid] += cost(slot)
            held[sid].append(slot)
        else:
            orphans.append(slot)
    total = sum(load.values()) + sum(cost(s) for s in orphans)
    target = total / len(shards)
    moves: list[Move] = []
    pool: list[tuple[int, str]] = [(s, str(owner[s])) for s in orphans]
    for sid in shards:
        slots = held[sid]
        while slots and load[sid] - cost(slots[-1]) / 2 > target:
            s = slots.pop()
            load[sid] -= cost(s)
            pool.append((s, sid))
    pool.sort()
    for s, src in pool:
        dst = min(shards, key=lambda x: (load[x], x))
        load[dst] += cost(s)
        if dst != src:
            moves.append(Move(s, src, dst))
    return moves


def plan_remove(owner: list[str | None], shard: str, others: list[str]) -> list[Move]:
    """Every slot of `shard`, spread evenly over `others` (the least loaded first)."""
    if not others:
        raise ReshardError(f"shard {shard} is the only shard with a live primary; "
                           "there is nowhere to move its slots")
    load = {s: 0 for s in others}
    for sid in owner:
        if sid in load:
            load[sid] += 1
    moves = []
    for slot, sid in enumerate(owner):
        if sid == shard:
            dst = min(others, key=lambda x: (load[x], x))
            load[dst] += 1
            moves.append(Move(slot, shard, dst))
    return moves


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
        compares = [store.guard(store.key("slots"), v.slots.mod)]
        compares += [store.guard(store.key("migrations", str(m.slot)), 0) for m in chunk]
        puts = [(store.key("migrations", str(m.slot)), json.dumps(
            {"from": m.src, "to": m.dst, "state": "queued"}).encode(), 0) for m in chunk]
        if not await store.commit(compares, puts):
            raise ReshardError("the cluster changed while queueing (a slot moved or another "
                               "migration was queued); nothing more queued, run it again"
                               + (f" with --resume ({i} moves were queued)" if i else ""))
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
async def tick(store: BaseStore, v: View, guard: Compare) -> None:
    """Start queued moves (PER_SOURCE per source shard) and drop records that cannot finish.
    Every write also compares the leader key (`guard`)."""
    if not v.migrations or v.slots is None:
        return
    owner = owners(v.slots.value)
    moving: dict[str, int] = {}
    stale = []
    for slot, e in sorted(v.migrations.items()):
        rec = e.value
        src, dst = rec.get("from"), rec.get("to")
        if src not in v.shards or dst not in v.shards or owner[slot] != src:
            stale.append((slot, e))
        elif rec.get("state") == "moving":
            moving[src] = moving.get(src, 0) + 1
    for slot, e in stale:
        why = (f"its owner is now shard {owner[slot]}" if owner[slot] != e.value.get("from")
               else "a shard is gone")
        log.warning("controller: dropping the move of slot %d %s (%s)", slot, e.value, why)
        await store.commit([store.guard(store.key("migrations", str(slot)), e.mod), guard],
                           [], (store.key("migrations", str(slot)),))
    gone = {s for s, _ in stale}
    for slot, e in sorted(v.migrations.items()):
        rec = e.value
        if slot in gone or rec.get("state") != "queued":
            continue
        src = rec["from"]
        if moving.get(src, 0) >= PER_SOURCE:
            continue
        if not (v.live(v.shards[src].value.primary) and v.live(v.shards[rec["to"]].value.primary)):
            continue
        new = dict(rec, state="moving")
        if await store.commit([store.guard(store.key("migrations", str(slot)), e.mod), guard],
                              [(store.key("migrations", str(slot)), json.dumps(new).encode(),
                                0)]):
            moving[src] = moving.get(src, 0) + 1
