"""A node's part in moving slots, driven by etcd's `migrations/<slot>` records.

The controller queues moves and starts a number of them per source shard (`state: moving`,
control/reshard.py); from then on the nodes finish them by themselves, so a move survives the
controller's death. The primary of the source shard runs one task per target shard, which
moves the target's slots in batches of up to BATCH:

1. connect to the target shard's primary; `CLUSTER SETSLOT slot IMPORTING me` for each slot
   makes the link the slots' importer there and drops what an earlier, unfinished attempt
   left;
2. take the image of the slots' keys and start following their effects, in one loop turn
   (node/slotmove.py SlotCopy); send the image in bounded steps, IMAGE_WINDOW bytes and
   IMAGE_COMMANDS parts in flight at most, then the effects that came meanwhile, then each
   later effect as it happens, so the target (and, through its effect stream, its replicas)
   keeps up;
3. once everything sent is acknowledged, and the target's replica (when it has one) has it
   too: pause the slots' writes (node/writepause.py), drain what came meanwhile, have the
   target WAIT for its replica again (for that tail), and commit the flip in etcd, one
   transaction: the slot map gives the slots to the target and their migration records go,
   guarded by the records, the map and this shard's record (so a failover or a rollback in
   between makes it fail, and then nothing changed);
4. tell the target the slots are its own (CLUSTER SETSLOT slot NODE target) and wait for its
   answer, answer -MOVED to clients blocked on their keys and end the pause: the postponed
   writes run again and get -MOVED. Then drop the keys (DEL effects: the source's replicas
   drop them too). The pause is logged
   and shown in INFO cluster (slot_move_last_pause_ms / slot_move_longest_pause_ms).

The source commits the flip itself because it holds the pause: waiting for the controller to
notice would stretch it by a watch round trip or two. Anything that fails before the commit
starts the attempt over (a new source or target primary after a failover included); after
the commit the move is done whatever happens next. A primary drops the keys of every slot its
shard neither owns nor imports (`sweep`): what a rolled-back import left on a target, and
what a source that died between its flip and its drop left behind, once its successor sees
the new map.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING

from base.records import View, move_slots, owners
from node.errors import ResponseError
from node.link import Link
from node.resp import error
from node.slotmove import SlotCopy, drop_slot, unblock_slot

if TYPE_CHECKING:
    from node.membership.agent import Agent

log = logging.getLogger("xshard.agent")

BATCH = 100  # slots moved together: one image, one pause, one etcd transaction (< 128 ops)
# Image sent and not yet answered by the target, at most: the target runs what it has read
# in one go, so these bound how long it stops serving its other clients.
IMAGE_WINDOW = 1 << 20  # bytes
IMAGE_COMMANDS = 4  # XSHARD.RESTORE parts
IMAGE_STEP = 256 << 10  # image bytes serialized per loop turn
RETRY = 0.5  # seconds between attempts of a move that failed
DRAIN_TIMEOUT = 5.0  # seconds for the target to acknowledge what was sent
SWITCH_TIMEOUT = 2.0  # seconds the switch (WAIT, etcd) may take before it is abandoned


class MoveAborted(Exception):
    """This attempt cannot go on; the reason is one line."""


class SlotMover:
    """`agent.mover`: starts and stops this node's moves as etcd views arrive."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.server = agent.server
        self.tasks: dict[str, asyncio.Task] = {}  # target shard -> the task moving slots there
        self.importing: set[int] = set()  # slots whose records name this shard as target
        # Slots claimed by hand (CLUSTER SETSLOT NODE, `claim`) that no view has shown as ours
        # yet: a view older than the claim must not have their keys dropped.
        self.claimed: set[int] = set()
        # One switch at a time: every flip rewrites the slot map, so concurrent ones would
        # only fail each other's transactions while their slots stay paused.
        self.switching = asyncio.Lock()

    # --- views ----------------------------------------------------------------------------------
    def on_view(self, v: View) -> None:
        """Start a task for each target shard this node has slots to move to; forget imports
        whose records went; as a primary, drop the keys of slots that are not ours."""
        shard = self.agent.shard
        primary = self.agent.named_primary
        targets = set()
        importing = set()
        for slot, e in v.migrations.items():
            rec = e.value
            if rec.get("to") == shard:
                importing.add(slot)
            if primary and rec.get("from") == shard and rec.get("state") == "moving":
                targets.add(str(rec.get("to")))
        for to in targets - set(self.tasks):
            self.tasks[to] = asyncio.ensure_future(self._run(to))
        if not primary:  # a running move ends by itself once its record is gone
            self.stop()
        cl = self.server.cluster
        if cl.importing:
            # A slot stops being imported when its record went (a flip or a rollback); one
            # whose record this node never saw (its view lagged) once no link imports it.
            linked = set().union(*(c.import_slots for c in self.server.clients.values()))
            for slot in list(cl.importing):
                if slot not in importing and (slot in self.importing or slot not in linked):
                    del cl.importing[slot]
        self.importing = importing
        if self.claimed and v.slots is not None:
            owner = owners(v.slots.value)
            self.claimed = {s for s in self.claimed if owner[s] != shard}
        if primary and v.slots is not None:
            self.sweep()

    def sweep(self) -> int:
        """Drop the keys of every slot this shard neither owns nor imports; returns how many."""
        server = self.server
        cl = server.cluster
        shard = self.agent.shard
        total = 0
        slots = []
        for slot in list(server.db.slots):
            if cl.owner_of(slot) == shard or slot in self.importing or slot in cl.importing \
                    or slot in self.claimed:
                continue
            total += drop_slot(server, slot, error(cl.redirect(slot)))
            slots.append(slot)
        if slots:
            log.warning("slots %s belong to other shards: dropped the %d keys left here",
                        _span(slots), total)
        return total

    def stop(self) -> None:
        for t in self.tasks.values():
            t.cancel()
        self.tasks.clear()

    # --- one target -----------------------------------------------------------------------------
    def _wanted(self, to: str) -> list[int]:
        """The next slots to move to shard `to`: moving records from this shard that this node
        has not flipped already."""
        v = self.agent.view
        if v is None or not self.agent.named_primary:
            return []
        shard = self.agent.shard
        owner_of = self.server.cluster.owner_of
        out = [slot for slot, e in sorted(v.migrations.items())
               if e.value.get("from") == shard and e.value.get("to") == to
               and e.value.get("state") == "moving" and owner_of(slot) == shard]
        return out[:BATCH]

    async def _run(self, to: str) -> None:
        stats = self.server.move_stats
        try:
            while slots := self._wanted(to):
                stats.running = len(slots)
                try:
                    await self._attempt(to, slots)
                    continue
                except (MoveAborted, ResponseError) as e:  # a ResponseError: the target's reply
                    log.warning("slots %s: move attempt to shard %s abandoned (%s); retrying",
                                _span(slots), to, e)
                except (OSError, TimeoutError) as e:  # the link failed, or did not answer
                    log.warning("slots %s: move attempt to shard %s failed (%s: %s); retrying",
                                _span(slots), to, type(e).__name__, e)
                await asyncio.sleep(RETRY)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not kill the agent; the next view restarts the move
            log.exception("moves to shard %s failed", to)
        finally:
            stats.running = 0
            if self.tasks.get(to) is asyncio.current_task():
                del self.tasks[to]

    def _target(self, to: str) -> tuple[str, str, int, int]:
        """(target node id, host, port, live replicas of the target shard)."""
        v = self.agent.view
        sh = v.shards.get(to) if v is not None else None
        if v is None or sh is None or sh.value.primary is None or sh.value.primary not in v.nodes:
            raise MoveAborted(f"shard {to} has no live primary")
        n = v.nodes[sh.value.primary].value
        replicas = sum(1 for r in sh.value.replicas if r in v.nodes and r != n.id)
        tls = self.server.config.tls_cluster and n.tls_port
        return n.id, n.host, n.tls_port if tls else n.port, replicas

    async def _attempt(self, to: str, slots: list[int]) -> None:
        """One try at moving `slots` to shard `to`: copy, catch up, switch, hand over."""
        tid, host, port, replicas = self._target(to)
        server = self.server
        cfg = server.config
        link = await Link.open(host, port, password=cfg.masterauth or cfg.requirepass,
                               user=cfg.masteruser if cfg.masterauth else "",
                               ssl=server.tls_client_context if cfg.tls_cluster else None)
        copy: SlotCopy | None = None
        paused: list[int] = []
        try:
            me = self.agent.node_id.encode()
            for slot in slots:
                link.send([b"CLUSTER", b"SETSLOT", b"%d" % slot, b"IMPORTING", me])
            # One loop turn: the image and the effects that follow start at the same point.
            copy = SlotCopy(server, set(slots), link.send_raw)
            keys = copy.keys
            image = await self._send_image(link, copy, slots, to, tid)
            need = min(replicas, 1)
            await self._catch_up(link, copy, need)
            async with self.switching:
                v = await self.agent.store.view()  # read before the pause, not in it
                for slot in slots:
                    server.pauses.pause_slot(slot)
                    paused.append(slot)
                t1 = time.perf_counter()
                await self._drain_paused(link, copy, need)
                effects = copy.forwarded
                copy = None
                t2 = time.perf_counter()
                done = await self._flip(to, slots, v)
                t3 = time.perf_counter()
            if not done:
                return  # rolled back, or this node is no longer the source's primary
            ms, dropped = await self._hand_over(link, to, tid, done, paused)
            stats = server.move_stats
            stats.done += len(done)
            stats.keys += keys
            stats.bytes += image
            stats.effects += effects
            stats.last_pause_ms = ms
            log.info("slots %s: moved to shard %s; writes paused %.1f ms (drain and WAIT %.1f, "
                     "etcd %.1f), %d keys dropped here", _span(done), to, ms,
                     (t2 - t1) * 1000, (t3 - t2) * 1000, dropped)
        finally:
            if copy is not None:
                copy.remove(server)
            for slot in paused:
                server.pauses.resume_slot(slot)
            link.close()

    async def _send_image(self, link: Link, copy: SlotCopy, slots: list[int], to: str,
                          tid: str) -> int:
        """Send the image in bounded steps and wait for its acknowledgement; its bytes."""
        t0 = time.monotonic()
        while copy.next_image(IMAGE_STEP):
            if link.error:
                raise link.error
            if link.in_flight > IMAGE_WINDOW or link.sent - link.acked > IMAGE_COMMANDS:
                await link.window(IMAGE_WINDOW, IMAGE_COMMANDS, DRAIN_TIMEOUT)
            else:
                await asyncio.sleep(0)  # let the loop serve clients between steps
        image = link.bytes
        await link.drain(DRAIN_TIMEOUT)
        log.info("slots %s: sent %d keys (%d bytes) to shard %s (%s) in %.0f ms", _span(slots),
                 copy.keys, image, to, tid, (time.monotonic() - t0) * 1000)
        return image

    async def _catch_up(self, link: Link, copy: SlotCopy, need: int) -> None:
        """Catch up with the writes that came meanwhile, and let the target's replica (`need`:
        1 when it has one) catch up before the pause, not in it."""
        for _ in range(50):
            if copy.broken:
                raise MoveAborted("the copy broke (a FLUSHALL, or the link failed)")
            if link.sent - link.acked < 64:
                break
            await link.drain(DRAIN_TIMEOUT)
        if need:
            n = link.send([b"WAIT", b"%d" % need, b"%d" % int(DRAIN_TIMEOUT * 1000)], want=True)
            await link.drain(DRAIN_TIMEOUT + 1)
            acks = link.reply(n)
            if not isinstance(acks, int) or acks < need:
                raise MoveAborted("the target's replica did not catch up")

    async def _drain_paused(self, link: Link, copy: SlotCopy, need: int) -> None:
        """With the slots paused: have the target acknowledge the tail (and its replica hold
        it), then stop following the slots' effects."""
        n = 0
        if need:
            n = link.send([b"WAIT", b"%d" % need, b"%d" % int(SWITCH_TIMEOUT * 500)], want=True)
        try:
            await link.drain(SWITCH_TIMEOUT)
        except TimeoutError:
            raise MoveAborted(f"the target did not answer in {SWITCH_TIMEOUT:.1f}s") from None
        if need:
            acks = link.reply(n)
            if not isinstance(acks, int) or acks < need:
                raise MoveAborted("the target's replica did not acknowledge in time")
        if copy.broken:
            raise MoveAborted("the copy broke (a FLUSHALL, or the link failed)")
        copy.remove(self.server)

    async def _flip(self, to: str, slots: list[int], v: View) -> list[int]:
        """Commit the flip in etcd; the slots flipped. When etcd's answer is lost the
        transaction may have gone through: the pause holds until etcd says."""
        try:
            return await asyncio.wait_for(self._commit(to, slots, v), SWITCH_TIMEOUT)
        except (MoveAborted, asyncio.CancelledError):
            raise
        except Exception as e:  # noqa: BLE001 - etcd slow or away
            log.warning("slots %s: the flip's outcome is unknown (%r); asking etcd",
                        _span(slots), e)
            return await self._outcome(to, slots)

    async def _hand_over(self, link: Link, to: str, tid: str, done: list[int],
                         paused: list[int]) -> tuple[float, int]:
        """The slots are the target's now: say so there first and wait for its answer, so
        that no redirected client finds it still naming us (a ping-pong of -MOVED); answer
        -MOVED to the clients blocked on their keys, end the pause (the postponed writes get
        -MOVED), then drop the keys. Returns (the pause in ms, the keys dropped)."""
        server = self.server
        cl = server.cluster
        for slot in done:
            cl.set_owner(slot, to)
            link.send([b"CLUSTER", b"SETSLOT", b"%d" % slot, b"NODE", tid.encode()])
        # A target that does not answer learns it from etcd.
        with contextlib.suppress(ResponseError, OSError, TimeoutError):
            await link.drain(1.0)
        for slot in done:
            unblock_slot(server, slot, error(cl.redirect(slot)))
        ms = max(server.pauses.resume_slot(slot) for slot in paused)
        paused.clear()
        return ms, sum(drop_slot(server, slot) for slot in done)

    async def _commit(self, to: str, slots: list[int], v: View) -> list[int]:
        """The flip: one etcd transaction for the slots whose records still stand, first
        against the view `v` read just before the pause. Returns the slots flipped: none when
        this node is no longer the source's primary or every record is gone (rolled back).
        Retried on a fresh view while only the slot map moved (other shards' flips); a retry
        that finds the slots already given to `to` learns that an earlier try went through
        (only this node, as the source's primary, flips them)."""
        store = self.agent.store
        shard = self.agent.shard
        for i in range(30):
            if i:
                v = await store.view()
            if v.slots is None:
                return []
            if i:
                owner = owners(v.slots.value)
                flipped = [s for s in slots if owner[s] == to]
                if flipped:
                    return flipped
            sh = v.shards.get(shard)
            if sh is None or sh.value.primary != self.agent.node_id:
                return []
            recs = {s: e for s in slots if (e := v.migrations.get(s)) is not None
                    and e.value.get("from") == shard and e.value.get("to") == to}
            if not recs:
                return []
            new = move_slots(v.slots.value, recs, to)
            compares = [store.guard(store.key("migrations", str(s)), e.mod)
                        for s, e in recs.items()]
            compares += [store.guard(store.key("slots"), v.slots.mod),
                         store.guard(store.key("shards", shard), sh.mod)]
            if await store.commit(compares, [(store.key("slots"), json.dumps(new).encode(), 0)],
                                  tuple(store.key("migrations", str(s)) for s in recs)):
                return list(recs)
        done = await self._outcome(to, slots)  # the last try may have gone through unseen
        if done:
            return done
        raise MoveAborted("the slot map kept changing under the flip")

    async def claim(self, slot: int) -> str | None:
        """Give `slot` to this node's shard in etcd's slot map (CLUSTER SETSLOT NODE by hand on
        the importing primary; the source has MIGRATEd the keys here). Returns None when done,
        else why not. Refused while a move of the slot is recorded (the controller's), or when
        this node is not its shard's named primary."""
        store = self.agent.store
        shard = self.agent.shard
        async with self.switching:
            for _ in range(30):
                v = await store.view()
                sh = v.shards.get(shard)
                if v.slots is None or sh is None or sh.value.primary != self.agent.node_id:
                    return "this node is not its shard's primary"
                if owners(v.slots.value)[slot] == shard:
                    return None
                if slot in v.migrations:
                    return "a move of the slot is recorded; xshard move-slots drives it"
                new = move_slots(v.slots.value, [slot], shard)
                compares = [store.guard(store.key("slots"), v.slots.mod),
                            store.guard(store.key("shards", shard), sh.mod),
                            store.guard(store.key("migrations", str(slot)), 0)]
                self.claimed.add(slot)  # before the commit: a view may follow it at once
                if await store.commit(compares,
                                      [(store.key("slots"), json.dumps(new).encode(), 0)]):
                    log.warning("slot %d given to shard %s in etcd (CLUSTER SETSLOT NODE by "
                                "hand)", slot, shard)
                    return None
                self.claimed.discard(slot)
        return "the slot map kept changing"

    async def _outcome(self, to: str, slots: list[int]) -> list[int]:
        """The slots that a flip whose answer was lost gave to `to`, read from etcd as soon as
        it answers (the slots stay paused meanwhile). Gives up only once this node is no
        longer named primary: then the fence refuses the writes anyway."""
        while self.agent.named_primary:
            try:
                v = await asyncio.wait_for(self.agent.store.view(), SWITCH_TIMEOUT)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - etcd still away: ask again
                await asyncio.sleep(0.2)
                continue
            if v.slots is None:
                return []
            owner = owners(v.slots.value)
            return [s for s in slots if owner[s] == to]
        return []


def _span(slots: list[int]) -> str:
    """`5` or `5-9` or `5,7-9,... (+12 more)` for logs."""
    runs: list[list[int]] = []
    for s in sorted(slots):
        if runs and runs[-1][1] == s - 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    return ",".join(parts[:4]) + (f" (+{len(parts) - 4} more)" if len(parts) > 4 else "")
