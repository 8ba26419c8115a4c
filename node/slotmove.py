"""The node-local half of moving slots: what a source sends, what a target rebuilds, and what
a source drops.

The move itself is driven from etcd (node/membership/slotmover.py). The source primary copies the
keys of a batch of slots to the target primary as one consistent image and then forwards the
effects of every later write to those slots (`SlotCopy`), so the target applies the same
deterministic commands that the source's replicas get. The target applies them as ordinary
commands, so its own effect stream (AOF, replicas) carries the imported data. For the switch
the source pauses the slots' writes (node/writepause.py), drains the link, commits the flip
in etcd, answers -MOVED (also to clients blocked on a key of the slots) and drops the keys
(`drop_slot`: DEL effects, so its replicas drop them too).

The image is taken in one loop turn, but cheaply: a stream's sealed nodes are immutable
bytes, so taking one is a tuple of references per node (`Block.state()`), not a walk over its
entries, and a group's pending entries are a C-level dict copy. It is then sent in bounded
steps: XSHARD.RESTORE key HEAD (the value, or a stream's counters, groups, consumers and
IDMP map),
BLOCKS (up to BLOCKS_PER_CHUNK nodes) and PEL (up to PEL_PER_CHUNK pending entries), in the
snapshot's marshal format (node/snapshot.py), so neither side ever serializes or loads a
long stream or a large PEL in one go. Effects of the slots that happen while the image
is on its way wait in a queue and follow it, in order. (Redis's RESTORE format, node/rdb.py,
re-encodes every entry: ~100x slower, so it is used for DUMP/RESTORE/MIGRATE only.)
"""

from __future__ import annotations

import itertools
import marshal
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from node import command_table, errors
from node.groups import ConsumerGroup
from node.idmp import IdmpMap
from node.resp import ReplyError, encode_command
from node.slots import key_slot
from node.stream import Stream
from node.streamnodes import FLAG_DELETED, FLAG_SAMEFIELDS

if TYPE_CHECKING:
    from node.client import Client
    from node.server import Server

RESTORE = b"XSHARD.RESTORE"
IMAGE_VERSION = 1
BLOCKS_PER_CHUNK = 128  # nodes per XSHARD.RESTORE BLOCKS (~12k entries, 100 per node)
PEL_PER_CHUNK = 2_000  # pending entries per XSHARD.RESTORE PEL
_FLUSH = frozenset((b"flushall", b"flushdb"))
_KINDS: dict[type, str] = {bytes: "string", deque: "list", set: "set"}


class MoveStats:
    """`server.move_stats`: what this node sent as a slot-move source (INFO cluster)."""

    __slots__ = ("running", "done", "keys", "bytes", "effects", "last_pause_ms")

    def __init__(self) -> None:
        self.running = 0
        self.done = 0
        self.keys = 0
        self.bytes = 0
        self.effects = 0
        self.last_pause_ms = 0.0

    def fields(self, longest_pause_ms: float) -> list[tuple[str, object]]:
        return [("slot_moves_running", self.running), ("slot_moves_done", self.done),
                ("slot_move_keys_sent", self.keys), ("slot_move_bytes_sent", self.bytes),
                ("slot_move_effects_sent", self.effects),
                ("slot_move_last_pause_ms", f"{self.last_pause_ms:.2f}"),
                ("slot_move_longest_pause_ms", f"{longest_pause_ms:.2f}")]


# --- the image ----------------------------------------------------------------------------------
def _pack(obj: Any) -> bytes:
    data = marshal.dumps(obj, 4)
    return data + zlib.crc32(data).to_bytes(4, "little")


def _unpack(payload: bytes) -> Any:
    data = payload[:-4]
    if len(payload) < 5 or zlib.crc32(data).to_bytes(4, "little") != payload[-4:]:
        raise ReplyError(errors.BAD_DATA_FORMAT)
    try:
        return marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        raise ReplyError(errors.BAD_DATA_FORMAT) from None


def _image(key: bytes, value: Any, exp: int) -> Iterator[list[bytes]]:
    """The XSHARD.RESTORE commands that rebuild one key, from its `_capture`: HEAD, then a
    stream's nodes (BLOCKS) and its groups' pending entries (PEL) in bounded parts, the last
    part flagged."""
    kind, v = value
    if kind != "stream":
        yield [RESTORE, key, b"HEAD", _pack((IMAGE_VERSION, kind, exp, v))]
        return
    counters, groups, pels, states, idmp = v
    npel = sum(len(sids) for sids, _nacks in pels)
    yield [RESTORE, key, b"HEAD", _pack((IMAGE_VERSION, "stream", exp,
                                         (counters, groups, len(states), npel, idmp)))]
    left = len(states) + npel
    for i in range(0, len(states), BLOCKS_PER_CHUNK):
        chunk = states[i:i + BLOCKS_PER_CHUNK]
        left -= len(chunk)
        yield [RESTORE, key, b"BLOCKS", _pack((chunk, not left))]
    for (name, *_), (sids, nacks) in zip(groups, pels, strict=True):
        for i in range(0, len(sids), PEL_PER_CHUNK):
            part = sids[i:i + PEL_PER_CHUNK]
            left -= len(part)
            yield [RESTORE, key, b"PEL", _pack((name, part, nacks[i:i + PEL_PER_CHUNK],
                                                not left))]


def _pending(g: ConsumerGroup) -> tuple[list[int], list[Any]]:
    sids = list(g.pel)  # the sorted key list, chained sublists
    return sids, list(map(g.pel.__getitem__, sids))  # dict.__getitem__: no Python per entry


def _capture(value: Any) -> Any:
    """A frozen copy of a value. For a stream: references to its immutable node bytes, and
    per consumer group its pending IDs in order and their NACKs (immutable tuples), both
    copied at C speed, so that even a long stream or a large PEL is taken in a few
    milliseconds (300k entries with 150k pending: ~10 ms)."""
    if type(value) is Stream:
        groups = [(name, g.last_id, g.entries_read,
                   [(c.name, c.seen_time, c.active_time) for c in g.consumers.values()])
                  for name, g in value.groups.items()]
        return "stream", ((value.length, value.last_id, value.first_id,
                           value.max_deleted_entry_id, value.entries_added), groups,
                          [_pending(g) for g in value.groups.values()],
                          [b.state() for b in value.blocks()],
                          value.idmp.dump_state() if value.idmp is not None else None)
    kind = _KINDS[type(value)]
    return kind, value if kind == "string" else list(value)


class SlotCopy:
    """The source's side of moving the keys of `slots`: installed in `server.taps`, it takes
    the image at once, hands it out in bounded steps (`next_image`) and then forwards every
    effect of the slots to `send` (encoded commands), in the order they happened."""

    def __init__(self, server: Server, slots: set[int], send: Callable[[bytes], None]) -> None:
        self.slots = slots
        self.send = send
        self.broken = False  # a FLUSHALL ran, or sending failed: the copy is void, start over
        self.forwarded = 0
        self._queue: list[bytes] | None = []  # effects held while the image is on its way
        server.taps.append(self)
        db = server.db
        self._keys: list[tuple[bytes, Any, int]] = []
        for slot in slots:
            for key in db.keys_in_slot(slot):
                v = db.get(key)  # expires a key that is due (its DEL is queued: harmless)
                if v is not None:
                    self._keys.append((key, _capture(v), db.expires.get(key) or 0))
        self.keys = len(self._keys)
        self._cmds: Iterator[list[bytes]] = (
            cmd for key, v, exp in self._keys for cmd in _image(key, v, exp))

    def __call__(self, argv: list[bytes]) -> None:
        name = argv[0].lower()
        if name in _FLUSH:
            self.broken = True
            return
        positions = command_table.get_keys(argv)
        if positions and key_slot(argv[positions[0]]) in self.slots:
            self.forwarded += 1
            data = encode_command(argv)
            if self._queue is not None:
                self._queue.append(data)
                return
            try:
                self.send(data)
            except Exception:  # noqa: BLE001 - a tap runs inside a command: never raise there
                self.broken = True

    def next_image(self, budget: int) -> int:
        """Send image commands worth about `budget` bytes; returns the bytes sent, 0 when the
        image is complete (then the queued effects have been sent and later ones follow)."""
        sent = 0
        for cmd in self._cmds:
            data = encode_command(cmd)
            self.send(data)
            sent += len(data)
            if sent >= budget:
                return sent
        if self._queue is not None:
            queued, self._queue = self._queue, None
            for data in queued:
                self.send(data)
            self._keys = []
        return sent

    def remove(self, server: Server) -> None:
        if self in server.taps:
            server.taps.remove(self)


# --- the target's side ---------------------------------------------------------------------------
def _check_groups(groups: Any) -> bool:
    """[(name, last-id, entries-read or None, [(consumer, seen-time, active-time)])]"""
    if type(groups) is not list:
        return False
    for g in groups:
        if type(g) is not tuple or len(g) != 4 or type(g[0]) is not bytes:
            return False
        _name, last, read, consumers = g
        if type(last) is not int or not (read is None or type(read) is int):
            return False
        if type(consumers) is not list or not all(
                type(c) is tuple and len(c) == 3 and type(c[0]) is bytes
                and type(c[1]) is int and type(c[2]) is int for c in consumers):
            return False
    return True


def _idmp(st: Any) -> IdmpMap:
    """The IDMP map of a stream (node/idmp.py), from its `dump_state()`, checked."""
    if (type(st) is not tuple or len(st) != 5 or not all(type(x) is int for x in st[:4])
            or type(st[4]) is not list or not all(
                type(p) is tuple and len(p) == 4 and type(p[0]) is bytes and type(p[1]) is bytes
                and type(p[2]) is int and type(p[3]) is int for p in st[4])):
        raise ReplyError(errors.BAD_DATA_FORMAT)
    return IdmpMap.from_state(st)


def _stream_head(head: Any) -> Stream:
    if type(head) is not tuple or len(head) != 5:
        raise ReplyError(errors.BAD_DATA_FORMAT)
    counters, groups, _nodes, _pending, idmp = head
    if (type(counters) is not tuple or len(counters) != 5
            or not all(type(x) is int and x >= 0 for x in counters) or not _check_groups(groups)):
        raise ReplyError(errors.BAD_DATA_FORMAT)
    s = Stream()
    (s.length, s.last_id, s.first_id, s.max_deleted_entry_id, s.entries_added) = counters
    if idmp is not None:
        s.idmp = _idmp(idmp)
    for name, last, read, consumers in groups:
        g = s.groups[name] = ConsumerGroup(last, read)
        for cname, seen, active in consumers:
            cons = g.create_consumer(cname, seen)
            if cons is not None:
                cons.active_time = active
    return s


def _value(kind: Any, v: Any) -> Any:
    if kind == "string" and type(v) is bytes:
        return v
    if kind in ("list", "set") and type(v) is list and v and all(type(x) is bytes for x in v):
        return deque(v) if kind == "list" else set(v)
    raise ReplyError(errors.BAD_DATA_FORMAT)


_TYPECODES = {"B": 1, "H": 2, "I": 4, "Q": 8}  # the array typecodes a Block uses, and their sizes


def _check_block(st: Any) -> bool:
    """Whether `st` is shaped like a `Block.state()` value: field types, counters and the
    sizes of the packed arrays agree, so that reading the block cannot fail. The order of
    the entry IDs inside is not re-checked."""
    if type(st) is not tuple or len(st) != 16:
        return False
    (first, n, live, ndel, lp_rest, master, mtc, msd, stc, seq, blob, lentc, lens, elen,
     flags, nfs) = st
    if not (all(type(x) is int for x in (first, n, live, ndel, lp_rest, elen))
            and type(master) is tuple and all(type(f) is bytes for f in master)
            and type(msd) is bytes and type(seq) is bytes and type(blob) is bytes
            and mtc in _TYPECODES and stc in _TYPECODES and lentc in _TYPECODES
            and (lens is None or type(lens) is bytes)
            and (flags is None or type(flags) is bytes) and (nfs is None or type(nfs) is bytes)):
        return False
    if (n < 1 or live < 0 or ndel < 0 or live + ndel != n or not 0 <= first < 1 << 128
            or len(msd) != n * _TYPECODES[mtc] or len(seq) != n * _TYPECODES[stc]):
        return False
    k = len(master)
    if flags is None:
        if nfs is not None:
            return False
        count = n * k
    else:
        if len(flags) != n:
            return False
        same = sum(1 for f in flags if f & FLAG_SAMEFIELDS)
        if sum(1 for f in flags if f & FLAG_DELETED) != ndel:
            return False
        if nfs is not None and len(nfs) % 4:
            return False
        nf = array("I", nfs) if nfs is not None else array("I")
        if len(nf) != n - same:
            return False
        count = k * same + 2 * sum(nf)
    if lens is None:
        return elen >= 0 and len(blob) == elen * count
    return len(lens) == count * _TYPECODES[lentc] and sum(
        lens if lentc == "B" else array(lentc, lens)) == len(blob)


def _add_blocks(s: Stream, data: Any) -> bool:
    """A BLOCKS part: (node states, last). Returns `last`."""
    if (type(data) is not tuple or len(data) != 2 or type(data[0]) is not list
            or not all(_check_block(st) for st in data[0])):
        raise ReplyError(errors.BAD_DATA_FORMAT)
    states, last = data
    firsts = s.node_keys()
    prev = firsts[-1] if firsts else -1
    for st in states:
        if st[0] <= prev:
            raise ReplyError(errors.BAD_DATA_FORMAT)
        prev = st[0]
    s.add_blocks(states)
    return bool(last)


def _add_pending(s: Stream, data: Any) -> bool:
    """A PEL part: (group, ascending IDs, their (delivery-time, count, consumer), last), the
    IDs above those already there. Checked at C speed: types, order, known consumers.
    Returns `last`."""
    if type(data) is not tuple or len(data) != 4:
        raise ReplyError(errors.BAD_DATA_FORMAT)
    name, sids, nacks, last = data
    g = s.groups.get(name) if type(name) is bytes else None
    if (g is None or type(sids) is not list or type(nacks) is not list or not sids
            or len(sids) != len(nacks) or set(map(type, sids)) != {int}
            or set(map(type, nacks)) != {tuple} or set(map(len, nacks)) != {3}):
        raise ReplyError(errors.BAD_DATA_FORMAT)
    times, counts, owners = zip(*nacks, strict=True)
    if (set(map(type, times)) != {int} or set(map(type, counts)) != {int}
            or not set(owners) - {None} <= g.consumers.keys()
            or (g.pel and sids[0] <= g.pel.peekitem(-1)[0])
            or not all(a < b for a, b in zip(sids, itertools.islice(sids, 1, None),
                                             strict=False))):
        raise ReplyError(errors.BAD_DATA_FORMAT)
    g.add_pending(sids, nacks)
    return bool(last)


def restore_part(c: Client, key: bytes, part: bytes, payload: bytes) -> None:
    """XSHARD.RESTORE key HEAD|BLOCKS|PEL payload on the target (or on its replicas and in
    its AOF, where it is an effect like any other). HEAD replaces the key; BLOCKS and PEL add
    nodes and pending entries to the stream its HEAD made, and the last part checks the
    whole stream. Only a link that imports the key's slot (CLUSTER SETSLOT IMPORTING) may
    send it."""
    if not c.is_master and key_slot(key) not in c.import_slots:
        raise ReplyError(errors.SLOT_RESTORE_NOT_IMPORTING)
    data = _unpack(payload)
    db = c.db
    if part == b"head":
        if type(data) is not tuple or len(data) != 4 or data[0] != IMAGE_VERSION \
                or type(data[2]) is not int:
            raise ReplyError(errors.BAD_DATA_FORMAT)
        _v, kind, exp, body = data
        value = _stream_head(body) if kind == "stream" else _value(kind, body)
        if db.data.get(key) is not None:
            db.remove(key)
        db.set(key, value)
        if exp:
            db.set_expire(key, exp)
        return
    if part not in (b"blocks", b"pel"):
        raise ReplyError(errors.SYNTAX)
    s = db.data.get(key)
    if type(s) is not Stream:
        raise ReplyError(errors.SLOT_RESTORE_NO_HEAD)
    last = _add_blocks(s, data) if part == b"blocks" else _add_pending(s, data)
    if last and (sum(b.live for b in s.blocks()) != s.length
                 or (s.length and s.node_keys()[-1] > s.last_id)):
        db.remove(key)  # a stream that does not add up is not kept
        raise ReplyError(errors.BAD_DATA_FORMAT)


# --- after the flip ----------------------------------------------------------------------------
def unblock_slot(server: Server, slot: int, moved: bytes) -> None:
    """Give the clients blocked on keys of `slot` the reply `moved` (a -MOVED error)."""
    blocking = server.blocking
    for key, q in list(blocking.waiting.items()):
        if key[:1] != b"\x00" and key_slot(key) == slot:
            for c in list(q):
                blocking.unblock(c, moved)


def drop_slot(server: Server, slot: int, moved: bytes = b"") -> int:
    """Delete the slot's keys (as DEL effects, so the replicas drop them too) and, with
    `moved`, first give the clients blocked on them that reply. Returns the keys dropped."""
    if moved:
        unblock_slot(server, slot, moved)
    db = server.db
    keys = db.keys_in_slot(slot)
    for key in keys:
        db.remove(key)
        db.changed(key)
        server.propagate([b"DEL", key])
    return len(keys)
