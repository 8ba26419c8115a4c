"""A planned switchover: `xshard failover SHARD` on a live primary, without losing a write.

Redis's CLUSTER FAILOVER (without FORCE) pauses the primary's clients, waits until the replica
has the primary's offset, and only then promotes it. The same steps here, with etcd deciding:

1. choose the replica (the one named with --to, else the one with the highest offset), and
   wait until it is close behind (CATCHUP_BYTES), so that the pause below is short;
2. `CLIENT PAUSE <ms> WRITE` on the primary (node/writepause.py): writes wait there, with no
   error, and nothing else changes the data (expiry stops too), so its offset stands still;
3. wait until the replica has processed exactly that offset;
4. one etcd transaction, guarded by the shard record's and the old primary's node key's
   mod_revision (fencing by compare, as control/controller.py does): the replica is primary,
   the old primary a replica, epoch + 1; then REPLICAOF NO ONE to the new primary and
   REPLICAOF to the other replicas, as the controller's failover does (the old primary's
   agent makes it a replica when it sees the new epoch);
5. wait until the new primary serves (ROLE master and its etcd view names it) and the old
   primary's view names the new one, then `CLIENT UNPAUSE`: the waiting writes run again on
   the old primary and are answered -MOVED to the new one, which a router follows, so its
   clients see a slower reply and no error.

If anything fails before the transaction, the primary is unpaused and stays primary; the
pause also ends by itself (PAUSE_MARGIN after the deadline) if this process dies. The
old primary does not take the released writes itself as long as its agent has seen the new
epoch, which step 5 waits for; if this process died between steps 4 and 5 and the agent had
not seen it either, those writes would be accepted by a node that is no longer primary and
lost, like any write to a primary that a forced failover replaces.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from base.records import ShardRecord, View
from base.store import BaseStore
from control.controller import FailoverError, ask_offsets, shard_entry
from node.link import NodeOps

log = logging.getLogger("xshard.switchover")

CATCHUP_BYTES = 64 * 1024  # pause only once the replica is at most this far behind
POLL = 0.002  # seconds between offset and role probes while writes wait
PAUSE_MARGIN = 2.0  # the pause outlives the deadline by this much (then it ends by itself)


@dataclass
class Switched:
    """What a switchover did: the new primary and how long writes waited on the old one."""

    new: str
    old: str
    epoch: int
    offset: int
    paused_ms: float


async def _until(probe, deadline: float, what: str) -> None:  # noqa: ANN001 - async () -> bool
    while True:
        try:
            if await probe():
                return
        except (OSError, TimeoutError):
            pass
        if time.monotonic() >= deadline:
            raise FailoverError(what)
        await asyncio.sleep(POLL)


async def switchover(store: BaseStore, view: View, shard: str, *, to: str | None = None,
                     nodes: NodeOps | None = None, timeout: float = 5.0,
                     logger: logging.Logger = log) -> Switched:
    """Hand shard `shard` from its live primary to a caught-up replica; see the module
    docstring. Raises FailoverError (the primary unpaused and still primary) when it cannot."""
    nodes = nodes or NodeOps()
    entry = shard_entry(store, view, shard)
    rec = entry.value
    old = rec.primary
    if old is None or not view.live(old):
        raise FailoverError(f"shard {shard}: primary {old} is not alive; the controller fails "
                            "it over, or use --force")
    members = [m for m in rec.replicas if m != old]
    if to is not None and to not in members:
        raise FailoverError(f"shard {shard}: {to} is not a replica of the shard (replicas: "
                            f"{', '.join(members) or 'none'})")
    cands, skipped = await ask_offsets(view, [to] if to else members, nodes)
    if not cands:
        why = ", ".join(f"{k}: {v}" for k, v in skipped.items()) or "no replicas"
        raise FailoverError(f"shard {shard}: no live replica to promote ({why})")
    order = {m: i for i, m in enumerate(members)}
    best = max(cands, key=lambda c: (c.offset, -order[c.id]))
    p = view.nodes[old].value
    pa = nodes.addr(p)  # the primary's address (its tls-port with --tls-cluster)
    deadline = time.monotonic() + timeout

    # 1. close behind before the pause, so that the pause is only the last few bytes
    async def close_behind() -> bool:
        return await nodes.offset(*pa) - await nodes.offset(
            best.host, best.port) <= CATCHUP_BYTES

    await _until(close_behind, deadline, f"shard {shard}: replica {best.id} stayed more than "
                 f"{CATCHUP_BYTES} bytes behind for {timeout:g} s; nothing done")
    # 2. pause the primary's writes; its offset then stands still
    await nodes.pause_writes(*pa, int((timeout + PAUSE_MARGIN) * 1000))
    t0 = time.monotonic()
    committed = False
    new = ShardRecord(best.id, [m for m in members if m != best.id] + [old], rec.epoch + 1)
    try:
        target = await nodes.offset(*pa)

        async def caught_up() -> bool:
            return await nodes.offset(best.host, best.port) >= target

        # 3. the replica has every write the primary accepted
        await _until(caught_up, deadline, f"shard {shard}: replica {best.id} did not reach "
                     f"the primary's offset {target} in {timeout:g} s; primary {old} kept")
        # 4. etcd names the replica, if nothing changed since we read
        compares = [store.guard(store.key("shards", shard), entry.mod),
                    store.guard(store.key("nodes", old), view.nodes[old].mod)]
        if not await store.commit(compares, [(store.key("shards", shard), new.encode(), 0)]):
            raise FailoverError(f"shard {shard}: etcd changed while switching over (another "
                                "writer won); nothing done")
        committed = True
        logger.warning("switchover shard %s epoch %d -> %d: %s -> %s at offset %d", shard,
                       rec.epoch, new.epoch, old, best.id, target)
        await nodes.promote(best.host, best.port)
        # The old primary is left to its agent, which changes its view and its role in one
        # step: made a replica first, it would answer the writes that reach it READONLY.
        others = [view.nodes[m].value for m in new.replicas if m in view.nodes and m != old]
        await asyncio.gather(*(nodes.replicate(*nodes.addr(n), best.host, best.port)
                               for n in others), return_exceptions=True)

        # 5. the new primary serves, and the old one redirects to it
        async def switched() -> bool:
            return (await nodes.serves_as(best.host, best.port) == "master"
                    and await nodes.serves_as(*pa) == "slave")

        await _until(switched, deadline + PAUSE_MARGIN / 2,
                     f"shard {shard}: etcd names {best.id} primary, but the nodes did not "
                     "take their roles in time; writes stay paused until the pause ends")
    except BaseException:
        if not committed:
            try:
                await nodes.unpause(*pa)
            except (OSError, TimeoutError, Exception) as e:  # noqa: BLE001 - ends by itself
                logger.warning("could not unpause %s (%r); the pause ends by itself", old, e)
        raise
    await nodes.unpause(*pa)
    return Switched(best.id, old, new.epoch, target, (time.monotonic() - t0) * 1000)
