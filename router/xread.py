"""XREAD and XREADGROUP over keys in several slots.

One request per slot, merged back in the client's key order (router/merge.py). The options are
read by the node's own parser (node/commands/reads.py parse_xread_options), so a bad option gets
Redis's error before any key does; the keys come from the command table.
- XREAD with BLOCK answers at once what is there on every shard, as one node would; only when
  nothing is there do the shards block, and the first to answer wins (`BlockedFanout`).
- XREADGROUP first checks every key's group in key order (XINFO GROUPS): a missing group on one
  shard must not leave deliveries made on another unreturned. With BLOCK it is served only when
  a non-blocking pass finds entries; otherwise it is refused with -CROSSSLOT, because a blocked
  read on several shards could deliver on two of them and return one.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from node import errors
from node.commands.reads import XReadOptions, parse_xread_options
from node.resp import ReplyError, encode_command, error, error_code, keyed_header, null_array
from node.slots import key_slot
from node.streamid import parse_id
from router import merge
from router.fanout import BlockedParts
from router.forward import BlockedRead, Gather
from router.routes import split_by_slot

if TYPE_CHECKING:
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router

__all__ = ["xread_fanout", "BlockedFanout", "InKeyOrder"]


def xread_fanout(router: Router, c: RouterClient, argv: list[bytes], cell: Cell,
                 groups_checked: bool = False) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    try:
        o = parse_xread_options(argv, int(time.time() * 1000))
    except ReplyError as e:
        return conn.fill(cell, error(e.message))
    timeout, first, nkeys, group, block_at = o.timeout, o.first_key, o.nkeys, o.group, o.block_at
    keys, ids = argv[first:first + nkeys], argv[first + nkeys:]
    slots = list(split_by_slot(keys).items())
    if any(router.map.owner[slot] is None for (slot, _), _ in slots):
        return conn.fill(cell, error(errors.SLOT_NOT_SERVED))
    order = [idx for _, idx in slots]
    xreadgroup = group is not None
    if xreadgroup and not groups_checked:
        return _check_groups(router, c, argv, keys, ids, group or b"", cell)
    if xreadgroup and (o.maxcount or o.maxsize):
        return InKeyOrder(router, c, o, keys, ids, cell).start()
    # Without BLOCK: the head as it is; with it, first a pass without BLOCK.
    head = argv[:first] if timeout < 0 else argv[:block_at - 1] + argv[block_at + 1:first]
    probe = [(None, slot, encode_command(head + [keys[i] for i in idx] + [ids[i] for i in idx]))
             for (slot, _), idx in slots]
    merged = partial(_merge, keys, order, c.proto, o)
    if timeout < 0:
        Gather.send(router, c, probe, xreadgroup, merged, partial(conn.fill, cell))
        return None
    conn.stall()  # the client's later requests wait while this read is in progress

    def probed(reply: bytes) -> None:
        if error_code(reply) is not None or merge.stream_items(reply):
            conn.fill(cell, reply)
            conn.resume()
        elif xreadgroup:
            conn.fill(cell, error(errors.CROSSSLOT))
            conn.resume()
        else:
            parts = [(slot, argv[:first] + [keys[i] for i in idx] + [ids[i] for i in idx])
                     for (slot, _), idx in slots]
            BlockedFanout(router, c, keys, order, cell).start(parts, first, block_at, timeout)

    Gather.send(router, c, probe, xreadgroup, merged, probed)
    return None


def dollar_ids(argv: list[bytes], options: XReadOptions) -> list[tuple[int, int]]:
    """(key index, ID index) of every `$` ID of an XREAD (none for XREADGROUP): what a
    blocked read pins down before it may be re-issued elsewhere (router/forward.py)."""
    first, nkeys = options.first_key, options.nkeys
    if options.group is not None:
        return []
    return [(first + i, first + nkeys + i) for i in range(nkeys)
            if argv[first + nkeys + i] == b"$"]


def _merge(keys: list[bytes], order: list[list[int]], proto: int, o: XReadOptions,
           replies: list[bytes]) -> bytes:
    err = merge.earliest_error(keys, order, replies)
    if err is not None:
        return err
    reply = merge.merge_stream_replies(keys, order, replies, proto)
    if o.maxcount or o.maxsize:  # each shard capped its part; the caps are the whole reply's
        return merge.cap_stream_reply(reply, merge.ReadCaps(o.maxcount, o.maxsize), proto)
    return reply


class InKeyOrder:
    """A multi-shard XREADGROUP with MAXCOUNT or MAXSIZE: its keys are served in the client's
    order, one run of consecutive keys of one slot at a time, each run asked for no more than
    what the caps have left (COUNT and MAXCOUNT lowered to it, MAXSIZE less the bytes already
    counted). A node delivers only what it returns, so nothing delivered is then dropped, and
    the runs together answer what one node holding every key would (router/merge.ReadCaps).
    Without BLOCK: a run that finds nothing just leaves its keys out, as a node would."""

    __slots__ = ("router", "c", "o", "keys", "ids", "cell", "runs", "caps", "parts")

    def __init__(self, router: Router, c: RouterClient, o: XReadOptions, keys: list[bytes],
                 ids: list[bytes], cell: Cell) -> None:
        self.router = router
        self.c = c
        self.o = o
        self.keys = keys
        self.ids = ids
        self.cell = cell
        self.runs: list[tuple[int, list[int]]] = []
        for i, k in enumerate(keys):
            slot = key_slot(k)
            if self.runs and self.runs[-1][0] == slot and k not in (
                    keys[j] for j in self.runs[-1][1]):
                self.runs[-1][1].append(i)
            else:
                self.runs.append((slot, [i]))
        self.caps = merge.ReadCaps(o.maxcount, o.maxsize)
        self.parts: list[bytes] = []

    def start(self) -> None:
        self.c.conn.stall()  # type: ignore[union-attr]  # later requests wait for this one
        self._next(0)

    def _argv(self, idx: list[int]) -> list[bytes]:
        o, caps = self.o, self.caps
        assert o.group is not None  # an XREADGROUP's options
        argv: list[bytes] = [b"XREADGROUP", b"GROUP", o.group, o.consumer]
        left = caps.left
        count = o.count if not left or (o.count and o.count < left) else left
        if count:
            argv += [b"COUNT", b"%d" % count]
        if left:
            argv += [b"MAXCOUNT", b"%d" % left]
        if o.maxsize:
            argv += [b"MAXSIZE", b"%d" % max(o.maxsize - caps.used, 1)]
        if o.noack:
            argv.append(b"NOACK")
        if o.claim >= 0:
            argv += [b"CLAIM", b"%d" % o.claim]
        return argv + [b"STREAMS"] + [self.keys[i] for i in idx] + [self.ids[i] for i in idx]

    def _next(self, i: int) -> None:
        if i == len(self.runs) or self.caps.spent():
            return self._finish(None)
        slot, idx = self.runs[i]
        Gather.send(self.router, self.c, [(None, slot, encode_command(self._argv(idx)))], True,
                    lambda replies: replies[0], partial(self._got, i))
        return None

    def _got(self, i: int, reply: bytes) -> None:
        if error_code(reply) is not None:
            return self._finish(reply)
        for _k, raw in merge.stream_items(reply):
            part = self.caps.take(raw, self.c.proto)
            if part is not None:
                self.parts.append(part)
        return self._next(i + 1)

    def _finish(self, err: bytes | None) -> None:
        conn = self.c.conn
        if conn is None:
            return
        proto = self.c.proto
        # An error after runs that delivered (a key deleted meanwhile: the groups were checked
        # first) still returns what was delivered, so that nothing delivered is lost.
        if err is not None and not self.parts:
            reply = err
        elif not self.parts:
            # With BLOCK, as a multi-shard XREADGROUP without caps: served only when a pass
            # without BLOCK finds entries.
            reply = null_array(proto) if self.o.timeout < 0 else error(errors.CROSSSLOT)
        else:
            reply = keyed_header(len(self.parts), proto) + b"".join(self.parts)
        conn.fill(self.cell, reply)
        conn.resume()


class BlockedFanout(BlockedParts):
    """A multi-shard XREAD BLOCK: every slot's part blocks as a BlockedRead of its own (which
    follows a slot move or a failover like a single blocked read), the first non-empty
    answer (or error) wins and the other parts are cancelled by closing their connections."""

    __slots__ = ("router", "c", "cell", "keys", "order", "parts", "over", "left")

    def __init__(self, router: Router, c: RouterClient, keys: list[bytes],
                 order: list[list[int]], cell: Cell) -> None:
        self.c = c
        self.cell = cell
        self.keys = keys
        self.order = order
        self.parts: list[BlockedRead] = []
        self.over = False
        self.left = len(order)
        self.router = router

    def start(self, parts: list[tuple[int, list[bytes]]], first: int, block_at: int,
              block_ms: int) -> None:
        """`parts`: (slot, XREAD argv of that slot's keys); `first`: where the keys start."""
        self.c.blocked = self
        for i, (slot, argv) in enumerate(parts):
            n = (len(argv) - first) // 2
            dollars = [(first + j, first + n + j) for j in range(n) if argv[first + n + j] == b"$"]
            self.parts.append(BlockedRead(self.router, self.c, argv, block_at, block_ms, slot,
                                          False, None, dollars, partial(self.got, i)))
        for part in self.parts:
            part.issue()

    def timeout_reply(self, proto: int) -> bytes:
        return null_array(proto)

    def got(self, i: int, r: bytes) -> None:
        if self.over:
            return
        self.left -= 1
        if error_code(r) is not None:
            return self.finish(r)
        if merge.stream_items(r):
            return self.finish(merge.merge_stream_replies(self.keys, [self.order[i]], [r],
                                                          self.c.proto))
        if self.left == 0:
            self.finish(null_array(self.c.proto))
        return None

    def cancel_parts(self) -> None:
        for part in self.parts:
            part.finish(None)


def _check_groups(router: Router, c: RouterClient, argv: list[bytes], keys: list[bytes],
                  ids: list[bytes], group: bytes, cell: Cell) -> None:
    """XINFO GROUPS for every key; per key in order, as xreadCommand checks them: the type,
    the group, then the ID. The first failing key gets Redis's error, else the read goes on."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    reqs = [(None, key_slot(k), encode_command([b"XINFO", b"GROUPS", k])) for k in keys]

    def decide(replies: list[bytes]) -> bytes:
        for k, r, eid in zip(keys, replies, ids, strict=True):
            code = error_code(r)
            if code == b"WRONGTYPE":
                return r
            if code is not None or not merge.has_group(r, group):
                return error(errors.nogroup_xreadgroup(k, group))
            if eid == b"$":
                return error(errors.DOLLAR_IN_XREADGROUP)
            if eid == b"+":
                return error(errors.PLUS_IN_XREADGROUP)
            if eid != b">" and parse_id(eid) is None:
                return error(errors.INVALID_STREAM_ID)
        return b""

    def decided(verdict: bytes) -> None:
        if verdict:
            return conn.fill(cell, verdict)
        return xread_fanout(router, c, argv, cell, groups_checked=True)

    Gather.send(router, c, reqs, False, decide, decided)
