"""A node's part in moving slots, driven by etcd's `migrations/<slot>` records.

The controller queues moves and starts a few at a time (`state: moving`, control/reshard.py);
from then on the nodes finish them by themselves, so a move survives the controller's death.
The primary of the source shard runs one task per moving slot:

1. connect to the target shard's primary; `CLUSTER SETSLOT slot IMPORTING me` makes the link
   the slot's importer there and drops what an earlier, unfinished attempt left;
2. in one loop turn: start following the slot's effects (node/slotmove.py SlotTap) and send
   every key of the slot as RESTORE-ASKING; then forward each later effect of the slot as it
   happens, so the target (and, through its effect stream, its replicas) keeps up;
3. once everything sent is acknowledged: pause the slot's writes (node/writepause.py), have the
   target WAIT for one of its replicas (when it has one), and commit the flip in etcd, one
   transaction: the slot map gives the slot to the target and the migration record goes,
   guarded by the record, the map and this shard's record (so a failover or a rollback in
   between makes it fail, and then nothing changed);
4. tell the target the slot is its own (CLUSTER SETSLOT slot NODE target), drop the keys (DEL
   effects: the source's replicas drop them too), answer -MOVED to clients blocked on them,
   and end the pause: the postponed writes run again and get -MOVED. The pause is logged and
   shown in INFO cluster (slot_move_last_pause_ms / slot_move_longest_pause_ms).

The source commits the flip itself because it holds the pause: waiting for the controller to
notice would stretch it by a watch round trip or two. Anything that fails before the commit
starts the attempt over (a new source or target primary after a failover included); after
the commit the move is done whatever happens next. If a record disappears without a flip (a
rollback), the target drops the keys it had imported for that slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING

import hiredis

from control.records import View, move_slot
from node.resp import encode_command
from node.slotmove import SlotTap, drop_slot, restore_commands

if TYPE_CHECKING:
    from control.agent import Agent

log = logging.getLogger("xshard.agent")

RETRY = 0.5  # seconds between attempts of a move that failed
DRAIN_TIMEOUT = 5.0  # seconds for the target to acknowledge what was sent
SWITCH_TIMEOUT = 2.0  # seconds the switch (WAIT, etcd) may take before it is abandoned


class MoveAborted(Exception):
    """This attempt cannot go on; the reason is one line."""


class Link:
    """A pipelined connection to the target primary: sends commands, counts the replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.sent = 0
        self.acked = 0
        self.bytes = 0
        self.error: str | None = None
        self.replies: list[object] = []  # replies of commands whose answer is wanted
        self._want: set[int] = set()
        self._parser = hiredis.Reader()
        self._changed = asyncio.Event()
        self._task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, host: str, port: int, password: str) -> Link:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        link = cls(r, w)
        if password:
            link.send([b"AUTH", password.encode()])
        return link

    def send(self, argv: list[bytes], want: bool = False) -> int:
        data = encode_command(argv)
        self.writer.write(data)
        self.bytes += len(data)
        self.sent += 1
        if want:
            self._want.add(self.sent)
        return self.sent

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    self.error = self.error or "the target closed the link"
                    break
                self._parser.feed(data)
                while (r := self._parser.gets()) is not False:
                    self.acked += 1
                    if isinstance(r, hiredis.ReplyError) and self.error is None:
                        self.error = f"target error: {r}"
                    if self.acked in self._want:
                        self.replies.append(r)
                self._changed.set()
        except (OSError, asyncio.IncompleteReadError) as e:
            self.error = self.error or f"link lost ({type(e).__name__})"
        finally:
            self._changed.set()

    async def drain(self, timeout: float) -> None:
        """Wait until every command sent so far is answered (raises MoveAborted); what is
        sent meanwhile is not waited for."""
        deadline = time.monotonic() + timeout
        upto = self.sent
        await self.writer.drain()
        while self.acked < upto:
            if self.error:
                raise MoveAborted(self.error)
            left = deadline - time.monotonic()
            if left <= 0:
                raise MoveAborted(f"target did not answer in {timeout:.1f}s")
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        if self.error:
            raise MoveAborted(self.error)

    def close(self) -> None:
        self._task.cancel()
        self.writer.close()


class SlotMover:
    """`agent.mover`: starts and stops this node's moves as etcd views arrive."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.server = agent.server
        self.tasks: dict[int, asyncio.Task] = {}
        self.importing: set[int] = set()  # slots whose records named this shard as target
        # One switch at a time: every flip rewrites the slot map, so concurrent ones would
        # only fail each other's transactions while their slots stay paused.
        self.switching = asyncio.Lock()
        self._owner: list[str | None] | None = None  # the slot owners of the last view

    # --- views ----------------------------------------------------------------------------------
    def on_view(self, v: View) -> None:
        """Start a task for each slot this node must move; clean up rolled-back imports."""
        shard = self.agent.shard
        primary = self.agent.named_primary
        wanted = set()
        importing = set()
        for slot, e in v.migrations.items():
            rec = e.value
            if rec.get("to") == shard:
                importing.add(slot)
            if primary and rec.get("from") == shard and rec.get("state") == "moving":
                wanted.add(slot)
        for slot in wanted - set(self.tasks):
            self.tasks[slot] = asyncio.ensure_future(self._move(slot))
        if not primary:  # a running move ends by itself once its record is gone
            self.stop()
        cl = self.server.cluster
        # Slots that left this shard: drop what is left of them here (a move that was
        # interrupted between its flip and its drop, by a failover or a restart).
        owner = cl.owner
        if primary and self._owner is not None and owner is not self._owner:
            for slot, (was, now) in enumerate(zip(self._owner, owner, strict=True)):
                if was == shard and now != shard and slot not in self.tasks:
                    n = drop_slot(self.server, slot, b"-%s\r\n" % cl.redirect(slot))
                    if n:
                        log.warning("slot %d now belongs to shard %s: dropped %d keys left "
                                    "here", slot, now, n)
        self._owner = owner
        for slot in self.importing - importing:
            # The record went. If the slot is not ours now, the move was rolled back: what
            # we imported is orphaned.
            if primary and cl.owner_of(slot) != shard:
                n = drop_slot(self.server, slot, b"")
                if n:
                    log.warning("slot %d: move to shard %s rolled back; dropped %d imported "
                                "keys", slot, shard, n)
            cl.importing.pop(slot, None)
        self.importing = importing

    def stop(self) -> None:
        for t in self.tasks.values():
            t.cancel()
        self.tasks.clear()

    # --- one slot -------------------------------------------------------------------------------
    async def _move(self, slot: int) -> None:
        stats = self.server.move_stats
        stats.running += 1
        try:
            while True:
                try:
                    if await self._attempt(slot):
                        return
                except MoveAborted as e:
                    log.warning("slot %d: move attempt abandoned (%s); retrying", slot, e)
                except (OSError, TimeoutError) as e:
                    log.warning("slot %d: move attempt failed (%s); retrying", slot,
                                type(e).__name__)
                await asyncio.sleep(RETRY)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not kill the agent; the next view restarts the move
            log.exception("slot %d: move failed", slot)
        finally:
            stats.running -= 1
            if self.tasks.get(slot) is asyncio.current_task():
                del self.tasks[slot]

    def _target(self, slot: int) -> tuple[dict, str, str, int, int]:
        """(record, target node id, host, port, live replicas of the target shard)."""
        v = self.agent.view
        e = v.migrations.get(slot) if v is not None else None
        if e is None:
            raise MoveAborted("the migration record is gone")
        rec = e.value
        sh = v.shards.get(rec["to"])
        if sh is None or sh.value.primary is None or sh.value.primary not in v.nodes:
            raise MoveAborted(f"shard {rec['to']} has no live primary")
        n = v.nodes[sh.value.primary].value
        replicas = sum(1 for r in sh.value.replicas if r in v.nodes and r != n.id)
        return rec, n.id, n.host, n.port, replicas

    async def _attempt(self, slot: int) -> bool:
        """One try at moving `slot`; True when it is done (or no longer ours to move)."""
        rec, tid, host, port, replicas = self._target(slot)
        server = self.server
        stats = server.move_stats
        cfg = server.config
        link = await Link.open(host, port, cfg.masterauth or cfg.requirepass)
        tap: SlotTap | None = None
        paused = False
        try:
            link.send([b"CLUSTER", b"SETSLOT", b"%d" % slot, b"IMPORTING",
                       self.agent.node_id.encode()])
            # One loop turn: the image and the tap start at the same point of the effects.
            tap = SlotTap(slot, link.send)
            server.taps.append(tap)
            cmds = restore_commands(server, slot)
            for cmd in cmds:
                link.send(cmd)
            keys, sent0 = len(cmds), link.bytes
            log.info("slot %d: moving %d keys (%d bytes) to shard %s (%s)", slot, keys,
                     link.bytes, rec["to"], tid)
            await link.drain(DRAIN_TIMEOUT + link.bytes / 5e6)
            # Catch up with the writes that came meanwhile, then switch.
            for _ in range(50):
                if tap.broken:
                    raise MoveAborted("a FLUSHALL ran during the move")
                if link.sent - link.acked < 64:
                    break
                await link.drain(DRAIN_TIMEOUT)
            async with self.switching:
                v = await self.agent.store.view()  # read before the pause, not in it
                server.pauses.pause_slot(slot)
                paused = True
                t0 = time.perf_counter()
                need = min(replicas, 1)
                if need:
                    link.send([b"WAIT", b"%d" % need, b"%d" % int(SWITCH_TIMEOUT * 500)],
                              want=True)
                await link.drain(SWITCH_TIMEOUT)
                if need and (not link.replies or not isinstance(link.replies[-1], int)
                             or link.replies[-1] < need):
                    raise MoveAborted("the target's replica did not acknowledge in time")
                if tap.broken:
                    raise MoveAborted("a FLUSHALL ran during the move")
                server.taps.remove(tap)
                tap = None
                t1 = time.perf_counter()
                done = await asyncio.wait_for(self._commit(slot, rec, v), SWITCH_TIMEOUT)
                t2 = time.perf_counter()
            if not done:
                return True  # rolled back or taken over: nothing more to do here
            # The slot is the target's now: say so there first, so that the clients we
            # redirect are served at once.
            cl = server.cluster
            cl.set_owner(slot, rec["to"])
            link.send([b"CLUSTER", b"SETSLOT", b"%d" % slot, b"NODE", tid.encode()])
            with contextlib.suppress(MoveAborted):
                await link.drain(1.0)
            dropped = drop_slot(server, slot, b"-%s\r\n" % cl.redirect(slot))
            ms = server.pauses.resume_slot(slot)
            paused = False
            stats.done += 1
            stats.keys += keys
            stats.bytes += sent0
            stats.effects += link.sent - keys
            stats.last_pause_ms = ms
            log.info("slot %d: moved to shard %s; writes paused %.1f ms (drain and WAIT %.1f, "
                     "etcd %.1f), %d keys dropped here", slot, rec["to"], ms,
                     (t1 - t0) * 1000, (t2 - t1) * 1000, dropped)
            return True
        finally:
            if tap is not None and tap in server.taps:
                server.taps.remove(tap)
            if paused:
                server.pauses.resume_slot(slot)
            link.close()

    async def _commit(self, slot: int, rec: dict, v: View) -> bool:
        """The flip: one etcd transaction, first against the view `v` read just before the
        pause. False when the record is gone or changed (a rollback, or another node's
        move) or this node is no longer the source's primary; retried on a fresh view while
        only the slot map moved (other shards' flips)."""
        store = self.agent.store
        for i in range(30):
            if i:
                v = await store.view()
            e = v.migrations.get(slot)
            if e is None or e.value.get("from") != rec["from"] or e.value.get("to") != rec["to"]:
                return False
            sh = v.shards.get(rec["from"])
            if sh is None or sh.value.primary != self.agent.node_id or v.slots is None:
                return False
            new = move_slot(v.slots.value, slot, rec["to"])
            ok = await store.commit(
                [store.guard(store.key("migrations", str(slot)), e.mod),
                 store.guard(store.key("slots"), v.slots.mod),
                 store.guard(store.key("shards", rec["from"]), sh.mod)],
                [(store.key("slots"), json.dumps(new).encode(), 0)],
                (store.key("migrations", str(slot)),))
            if ok:
                return True
        raise MoveAborted("the slot map kept changing under the flip")
