"""Partitioned streams at the router: one logical name over N partition streams.

The routers watch `pstreams/<name>` records (router/topology.py) into `Router.pstreams`
(logical name -> `PStream`). A command whose key is a logical name comes here from dispatch
(router/proxy.py) after the usual checks (arity, auth, ACL); every other key costs that one
dict lookup and nothing else. Each partition is an ordinary stream key on its slot's shard.

How each command maps onto the partitions, and what is exact, is in the table at the end of
docs/partitioned-streams.md; in short:
- IDs name their partition (seq mod stride), so XACK/XCLAIM/XDEL/... split by ID with no
  lookup, and replies are merged into one stream's reply (counts summed, arrays in the
  client's order).
- Reads (XRANGE, XREAD, XREADGROUP, XPENDING) ask every partition and merge in ID order,
  COUNT applying to the total.
- XREADGROUP `>` never loses a delivery. Its rounds ask the partitions for no more than COUNT
  leaves, but with BLOCK a partition may deliver after another one answered the read.
  Those entries stay pending for the consumer in their partition, and the router remembers
  where (`Handover`): the consumer's next read through this router first reads them back from
  the consumer's history (XREADGROUP ... <id>), so they are returned once, in order, before
  anything new from that partition. With NOACK nothing is pending, so the router keeps their
  bytes instead.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from base.records import PStreamRecord
from node import errors
from node.resp import (
    OK,
    ReplyError,
    array_header,
    bulk,
    bulk_value,
    encode,
    encode_command,
    error,
    error_code,
    int_value,
    integer,
    keyed_header,
    keyed_pair,
    null_array,
    reply_elements,
    status,
)
from node.slots import key_slot
from node.streamid import SEQ_MAX, format_id, parse_id
from router.forward import Forward, Gather
from router.pstreamids import one_partition

if TYPE_CHECKING:
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router
    from router.routes import Route

__all__ = ["PStream", "load", "run", "run_keys", "KEYS_COMMANDS"]

NOT_SUPPORTED = b"ERR %s is not supported on partitioned stream '%s'%s"
MIXED_BLOCK = (b"ERR XREADGROUP with BLOCK on a partitioned stream must name only that stream")
IN_MULTI = (b"ERR a partitioned stream cannot be used inside MULTI (its partitions are on several "
            b"shards)")
MULTI_KEY = b"ERR %s with a partitioned stream among its keys is not supported"
_NONE = status(b"none")  # TYPE of a name that holds nothing
KEYS_COMMANDS = frozenset((b"del", b"unlink", b"exists", b"touch"))
"""The multi-key commands (FANOUT at dispatch) that look at a logical name."""
_DATA_TYPES = frozenset(("@string", "@hash", "@list", "@set", "@sortedset", "@bitmap",
                         "@hyperloglog", "@geo"))


class Handover:
    """Entries of one partition delivered to a consumer but not yet returned to it: the
    consumer's pending entries there after `after` (`count` of them), or with NOACK their
    bytes (`raws`)."""

    __slots__ = ("after", "count", "raws")

    def __init__(self, after: int, count: int, raws: list[bytes] | None = None) -> None:
        self.after = after
        self.count = count
        self.raws = raws


class PStream:
    """A logical stream as a router routes it (from its PStreamRecord)."""

    __slots__ = ("name", "n", "stride", "keys", "slots", "key_field", "rd", "cursor",
                 "sparse", "handover", "late", "waiters", "unread", "watches", "writes")

    def __init__(self, name: bytes, rec: PStreamRecord) -> None:
        self.name = name
        self.n = rec.partitions
        self.stride = rec.stride
        self.keys = [k.encode() for k in rec.keys]
        self.slots = [key_slot(k) for k in self.keys]
        self.key_field = rec.key_field.encode() if rec.key_field is not None else None
        # where XADDs go, read by the compiled relay (router/pstreamwrite.py)
        self.writes = router.pstreamwrite.Writes(name, self.keys, self.slots, self.key_field)
        self.rd = 0  # where the next XREADGROUP's partitions start
        # (group, consumer) -> the partition its next `>` read asks first for all of COUNT:
        # it stays while that partition fills COUNT (one read, and one XACK, per COUNT
        # entries), and moves on once it comes back short (router/pstreamreads.py).
        self.cursor: dict[tuple[bytes, bytes], int] = {}
        # (group, consumer)s whose last `>` read came back short of COUNT: no backlog, so
        # their next read asks every partition at once (one round trip) instead of the cursor's.
        self.sparse: set[tuple[bytes, bytes]] = set()
        # (group, consumer) -> partition -> what it was delivered and not yet given
        self.handover: dict[tuple[bytes, bytes], dict[int, Handover]] = {}
        # (group, consumer) -> [partitions of an answered blocked read still to answer, the
        # reads that wait for them]: a partition's late entries are older than anything it
        # delivers to the consumer's next read, so that read starts only once they are in.
        self.late: dict[tuple[bytes, bytes], list] = {}
        # Blocked `>` reads (router/pstreamwait.py): group -> its consumers waiting here;
        # group -> partitions it may have unread entries in; one watch per partition.
        self.waiters: dict[bytes, Any] = {}
        self.unread: dict[bytes, set[int]] = {}
        self.watches: list[Any] = []

    def partition_of(self, sid: int) -> int:
        return (sid & SEQ_MAX) % self.stride


def load(router: Router, records: dict[str, PStreamRecord]) -> dict[bytes, PStream]:
    """The routers' table of logical names from the records; a stream that stays keeps its
    round-robin position and its consumers' hand-overs."""
    old = router.pstreams
    out: dict[bytes, PStream] = {}
    for name, rec in records.items():
        b = name.encode()
        ps = out[b] = PStream(b, rec)
        prev = old.get(b)
        if prev is not None:
            ps.writes.rr, ps.rd, ps.cursor, ps.sparse = (prev.writes.rr, prev.rd, prev.cursor,
                                                         prev.sparse)
            ps.handover, ps.late = prev.handover, prev.late
            if prev.keys == ps.keys:  # the same partitions: the same watches and waiters
                ps.waiters, ps.unread, ps.watches = prev.waiters, prev.unread, prev.watches
                for w in ps.watches:
                    w.ps = ps
                for ws in ps.waiters.values():
                    for wt in ws:
                        wt.ps = ps
    return out


def names_one(router: Router, argv: list[bytes], positions: list[int] | None = None) -> bool:
    """Whether a command names a logical stream among its keys (the command table's)."""
    from node import command_table
    if positions is None:
        positions = command_table.get_keys(argv) if len(argv) > 1 else []
    pstreams = router.pstreams
    return any(argv[p] in pstreams for p in positions)


# --- plumbing ------------------------------------------------------------------------------------
def _conn(c: RouterClient) -> ClientConn:
    return c.conn  # type: ignore[return-value]


def _send(router: Router, c: RouterClient, reqs: list[tuple[int, list[bytes]]], write: bool,
          merge: Callable[[list[bytes]], bytes], done: Callable[[bytes], None]) -> None:
    """One request per (slot, argv), merged in request order."""
    Gather.send(router, c, [(None, slot, encode_command(a)) for slot, a in reqs], write, merge,
                done)


def _renamed(ps: PStream, r: bytes) -> bytes:
    """An error reply that names a partition key names the logical stream instead."""
    if error_code(r) is not None:
        for k in ps.keys:
            if k in r:
                return r.replace(k, ps.name)
    return r


def _first_error(ps: PStream, replies: list[bytes]) -> bytes | None:
    for r in replies:
        if error_code(r) is not None:
            return _renamed(ps, r)
    return None


def _entry_id(raw: bytes) -> int:
    """The ID of an entry reply `*2 $id [fields]` (or XREADGROUP CLAIM's `*4`)."""
    p = raw.find(b"\r\n", 4)
    n = int(raw[5:p])
    sid = parse_id(raw[p + 2:p + 2 + n])
    return sid if sid is not None else 0


def _entries(r: bytes) -> list[bytes]:
    """The entries of an XRANGE-like reply (an array of entries; a null gives none)."""
    if r[:1] not in (b"*", b"~") or r.startswith(b"*-1") or r[:1] == b"_":
        return []
    return reply_elements(r)[1]


def _read_entries(r: bytes) -> list[bytes]:
    """The entries of a one-key XREAD/XREADGROUP reply (null: none)."""
    if r[:1] not in (b"*", b"%") or r.startswith(b"*-1"):
        return []
    kind, els = reply_elements(r)
    if not els:
        return []
    entries = els[1] if kind == b"%" else reply_elements(els[0])[1][1]
    return reply_elements(entries)[1]


def _merged(lists: list[list[bytes]], reverse: bool = False) -> list[bytes]:
    some = [es for es in lists if es]
    if len(some) == 1:  # one partition's (a sticky read's): in order already
        return list(some[0])
    return list(heapq.merge(*some, key=_entry_id, reverse=reverse))


def _array(items: list[bytes]) -> bytes:
    return array_header(len(items)) + b"".join(items)


def _read_reply(items: list[tuple[bytes, list[bytes]]], proto: int,
                shown: set[int] | frozenset[int] = frozenset()) -> bytes:
    """An XREAD reply of (key, entries) in order; keys without entries are left out, but
    for those in `shown`."""
    items = [(k, e) for i, (k, e) in enumerate(items) if e or i in shown]
    if not items:
        return null_array(proto)
    pair = keyed_pair(proto)
    return keyed_header(len(items), proto) + b"".join(pair + bulk(k) + _array(e)
                                                      for k, e in items)


def _refuse(c: RouterClient, cell: Cell, what: bytes, ps: PStream, why: bytes = b"") -> None:
    _conn(c).fill(cell, error(NOT_SUPPORTED % (what, ps.name, why)))


def _with_key(argv: list[bytes], i: int, key: bytes) -> list[bytes]:
    out = list(argv)
    out[i] = key
    return out


def _split_ids(ps: PStream, ids: list[bytes]) -> dict[int, list[int]] | None:
    """Positions of the IDs by partition (an ID of a partition that does not exist: -1);
    None when one is not a valid ID."""
    out: dict[int, list[int]] = {}
    for i, b in enumerate(ids):
        sid = parse_id(b, strict=True)
        if sid is None:
            return None
        p = ps.partition_of(sid)
        out.setdefault(p if p < ps.n else -1, []).append(i)
    return out


# --- dispatch ------------------------------------------------------------------------------------
def run(router: Router, c: RouterClient, argv: list[bytes], route: Route, ps: PStream,
        cell: Cell) -> None:
    """A single-key command on a logical name (its key at route.fixed_key)."""
    handler = HANDLERS.get(route.name)
    if handler is not None:
        try:
            return handler(router, c, argv, ps, cell)
        except ReplyError as e:
            return _conn(c).fill(cell, error(e.message))
    if _DATA_TYPES & set(route.spec.acl_categories):
        return _conn(c).fill(cell, error(errors.WRONGTYPE))
    return _refuse(c, cell, route.name.upper().replace(b"|", b" "), ps)


def _share(total: int, n: int) -> int:
    return -(-total // n)


def _all(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell,
         merge: Callable[[list[bytes]], bytes], write: bool = False, key_at: int = 1) -> None:
    """The same command on every partition, merged."""
    reqs = [(s, _with_key(argv, key_at, k)) for k, s in zip(ps.keys, ps.slots, strict=True)]
    _send(router, c, reqs, write, merge, partial(_conn(c).fill, cell))


def _summed(ps: PStream, replies: list[bytes]) -> bytes:
    err = _first_error(ps, replies)
    return err if err is not None else integer(sum(int_value(r) for r in replies))


def xcfgset(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
            cell: Cell) -> None:
    """XCFGSET: the same settings on every partition (that exists)."""
    def merged(replies: list[bytes]) -> bytes:
        ok = _existing(ps, replies)
        if isinstance(ok, bytes):
            return ok
        return next((_renamed(ps, r) for r in replies
                     if error_code(r) not in (None, b"ERR")), ok[0])
    _all(router, c, argv, ps, cell, merged, True)


def xlen(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    _all(router, c, argv, ps, cell, partial(_summed, ps))


def type_(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    """TYPE: `stream` while any partition holds entries or groups, else `none` (as a deleted
    plain stream); a partition of another type (written directly) is shown as it is."""
    def merged(replies: list[bytes]) -> bytes:
        err = _first_error(ps, replies)
        if err is not None:
            return err
        for r in replies:
            if r != _NONE:
                return r
        return _NONE
    _all(router, c, argv, ps, cell, merged)


def xrange(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    """XRANGE/XREVRANGE: each partition's range with the same bounds and COUNT, merged in ID
    order; COUNT then applies to the total."""
    rev = len(argv[0]) == 9
    count = -1
    if len(argv) == 6:
        n = errors.string2ll(argv[5]) if argv[4].lower() == b"count" else None
        count = -1 if n is None else n  # None: the nodes phrase the error

    def merged(replies: list[bytes]) -> bytes:
        err = _first_error(ps, replies)
        if err is not None:
            return err
        out = _merged([_entries(r) for r in replies], rev)
        if count >= 0:
            out = out[:count]
        return _array(out)
    _all(router, c, argv, ps, cell, merged)


# --- DEL / UNLINK / EXISTS / TOUCH ---------------------------------------------------------------
def run_keys(router: Router, c: RouterClient, argv: list[bytes], route: Route, cell: Cell
             ) -> bool:
    """A multi-key keyspace command naming a logical stream: each partition counts as part
    of one key (1 when any of its partitions did). DEL deletes the partitions' data and
    keeps the record: the name is then an empty stream, as a plain stream after DEL, and the
    next XADD makes it again. False when no key is a logical name."""
    pstreams = router.pstreams
    if not any(k in pstreams for k in argv[1:]):
        return False
    reqs: list[tuple[int, list[bytes]]] = []
    owners: list[int] = []  # request -> the client key it counts for
    for i, k in enumerate(argv[1:]):
        ps = pstreams.get(k)
        for real, slot in (zip(ps.keys, ps.slots, strict=True) if ps is not None
                           else ((k, key_slot(k)),)):
            reqs.append((slot, [argv[0], real]))
            owners.append(i)

    def merged(replies: list[bytes]) -> bytes:
        err = next((r for r in replies if error_code(r) is not None), None)
        if err is not None:
            return err
        hit = [0] * (len(argv) - 1)
        for i, r in zip(owners, replies, strict=True):
            if int_value(r):
                hit[i] = 1
        return integer(sum(hit))
    _send(router, c, reqs, route.write, merged, partial(_conn(c).fill, cell))
    return True


# --- XGROUP ----------------------------------------------------------------------------------------
def _needs_key(r: bytes) -> bool:
    return r.startswith(b"-ERR The XGROUP subcommand requires the key to exist")


def xgroup_create(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
                  cell: Cell) -> None:
    """XGROUP CREATE on every partition. A logical stream exists when any partition does, and
    a partition without entries may not exist yet: those get the group with MKSTREAM, so the
    group exists on every partition. BUSYGROUP only when it existed on all of them; OK when
    it was made on any (a partition added later gets it)."""
    conn = _conn(c)
    upper = [a.upper() for a in argv[5:]]
    if b"ENTRIESREAD" in upper:
        return _refuse(c, cell, b"XGROUP CREATE ... ENTRIESREAD", ps,
                       b" (a count of one stream cannot be split over partitions)")
    mk = b"MKSTREAM" in upper

    def merged(replies: list[bytes]) -> bytes:
        rest = [r for r in replies if not _needs_key(r)]
        if not rest:
            return replies[0]
        for r in rest:
            if error_code(r) not in (None, b"BUSYGROUP"):
                return _renamed(ps, r)
        missing = [p for p, r in enumerate(replies) if _needs_key(r)]
        if missing and not mk:
            again = [(ps.slots[p], _with_key(argv, 2, ps.keys[p]) + [b"MKSTREAM"])
                     for p in missing]
            _send(router, c, again, True, partial(_created, ps, replies), partial(conn.fill, cell))
            return b""
        return _created(ps, replies, [])

    def done(r: bytes) -> None:
        if r:  # (b"": the missing partitions are being made)
            conn.fill(cell, r)
    reqs = [(s, _with_key(argv, 2, k)) for k, s in zip(ps.keys, ps.slots, strict=True)]
    _send(router, c, reqs, True, merged, done)
    return None


def _created(ps: PStream, first: list[bytes], again: list[bytes]) -> bytes:
    replies = [r for r in first if not _needs_key(r)] + again
    err = next((r for r in replies if error_code(r) not in (None, b"BUSYGROUP")), None)
    if err is not None:
        return _renamed(ps, err)
    if any(r == OK for r in replies):
        return OK
    return _renamed(ps, replies[0])


def _xgroup_merge(ps: PStream, fold: Callable[[list[bytes]], bytes],
                  replies: list[bytes]) -> bytes:
    """XGROUP DESTROY/SETID/CREATECONSUMER/DELCONSUMER: partitions that do not exist (yet)
    are left out; NOGROUP counts only if the group is missing from every partition that
    exists (one a partition was added without is a repair's business, not an error here)."""
    rest = [r for r in replies if not _needs_key(r)]
    if not rest:
        return replies[0]
    good = [r for r in rest if error_code(r) is None]
    if not good:
        return _renamed(ps, rest[0])
    err = next((r for r in rest if error_code(r) not in (None, b"NOGROUP")), None)
    if err is not None:
        return _renamed(ps, err)
    return fold(good)


def _xgroup(fold: Callable[[list[bytes]], bytes], write: bool = True
            ) -> Callable[..., None]:
    def handler(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
                cell: Cell) -> None:
        if argv[1].lower() == b"setid" and len(argv) > 5:
            return _refuse(c, cell, b"XGROUP SETID ... ENTRIESREAD", ps,
                           b" (a count of one stream cannot be split over partitions)")
        _all(router, c, argv, ps, cell, partial(_xgroup_merge, ps, fold), write, key_at=2)
        return None
    return handler


def _fold_max(replies: list[bytes]) -> bytes:
    return integer(max(int_value(r) for r in replies))


def _fold_sum(replies: list[bytes]) -> bytes:
    return integer(sum(int_value(r) for r in replies))


def _fold_first(replies: list[bytes]) -> bytes:
    return replies[0]


# --- commands by ID --------------------------------------------------------------------------------
def _by_ids(router: Router, c: RouterClient, ps: PStream, cell: Cell, head: list[bytes],
            ids: list[bytes], tail: list[bytes], write: bool,
            fold: Callable[[list[tuple[list[int], bytes]], int], bytes],
            numids_at: int = -1) -> None:
    """A command whose IDs name their partitions: one request per partition with its IDs
    (head + ids + tail; `numids_at`: where head counts them), folded with each request's
    ID positions. IDs of partitions that do not exist can name no entry."""
    conn = _conn(c)
    split = _split_ids(ps, ids)
    if split is None:
        return conn.fill(cell, error(errors.INVALID_STREAM_ID))
    parts = [(p, idx) for p, idx in split.items() if p >= 0]
    reqs = []
    for p, idx in parts:
        h = _with_key(head, 1, ps.keys[p])
        if numids_at >= 0:
            h[numids_at] = b"%d" % len(idx)
        reqs.append((ps.slots[p], h + [ids[i] for i in idx] + tail))

    def merged(replies: list[bytes]) -> bytes:
        err = _first_error(ps, replies)
        if err is not None:
            return err
        return fold(list(zip([idx for _, idx in parts], replies, strict=True)), len(ids))
    if not reqs:  # no ID names an existing partition, so none names an entry
        return conn.fill(cell, fold([], len(ids)))
    _send(router, c, reqs, write, merged, partial(conn.fill, cell))
    return None


def _count_fold(parts: list[tuple[list[int], bytes]], n: int) -> bytes:
    return integer(sum(int_value(r) for _, r in parts if r[:1] == b":"))


def _codes_fold(missing: int, parts: list[tuple[list[int], bytes]], n: int) -> bytes:
    """XACKDEL/XDELEX: one code per ID, in the client's order (an ID of no partition: -1)."""
    out = [integer(missing)] * n
    for idx, r in parts:
        for i, e in zip(idx, reply_elements(r)[1], strict=True):
            out[i] = e
    return _array(out)


def xack(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    """XACK: IDs by partition, counts summed. The IDs of one read usually name one partition
    (a backlog's reads stick to one): that is one upstream XACK whose reply is the client's."""
    ids = argv[3:]
    # IDs that do not all end `-digits` take the split path, which answers their error; one
    # whose part before that `-` is not a number goes to the node, which answers Redis's
    # error for it before it acknowledges anything.
    p = one_partition(ids, ps.stride, ps.n)
    if p < 0:
        return _by_ids(router, c, ps, cell, argv[:3], ids, [], True, _count_fold)
    conn = _conn(c)
    Forward(router, c, encode_command(_with_key(argv, 1, ps.keys[p])), ps.slots[p], True,
            done=lambda r: conn.fill(cell, _renamed(ps, r))).send()
    return None


def xdel(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    _by_ids(router, c, ps, cell, argv[:2], argv[2:], [], True, _count_fold)


def _ids_arg(argv: list[bytes], start: int) -> tuple[int, int] | None:
    """(index of IDS' count, number of IDs) for `... IDS numids id...` from argv[start]."""
    for j in range(start, len(argv) - 1):
        if argv[j].lower() == b"ids":
            n = errors.string2ll(argv[j + 1])
            if n is None or n <= 0 or j + 2 + n > len(argv):
                return None
            return j + 1, n
    return None


def _with_ids_arg(start: int, fold: Callable[..., bytes]) -> Callable[..., None]:
    """XACKDEL / XDELEX / XNACK: `IDS numids id...`; input the nodes must phrase the error
    for goes to one partition unchanged."""
    def handler(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
                cell: Cell) -> None:
        at = _ids_arg(argv, start)
        if at is None:
            return Forward(router, c, encode_command(_with_key(argv, 1, ps.keys[0])),
                           ps.slots[0], True, cell=cell).send()
        j, n = at
        return _by_ids(router, c, ps, cell, argv[:j + 1], argv[j + 1:j + 1 + n],
                       argv[j + 1 + n:], True, fold, numids_at=j)
    return handler


def xclaim(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    """XCLAIM: IDs by partition, each with the options; the claimed entries come back in the
    client's ID order. LASTID moves one stream's cursor and has no partitioned meaning."""
    j = 5
    while j < len(argv) and parse_id(argv[j], strict=True) is not None:
        j += 1  # IDs up to the first argument that is not one (xclaimCommand)
    if j == 5:  # none: the node phrases what is wrong with the rest
        return Forward(router, c, encode_command(_with_key(argv, 1, ps.keys[0])), ps.slots[0],
                       True, cell=cell).send()
    if any(a.lower() == b"lastid" for a in argv[j:]):
        return _refuse(c, cell, b"XCLAIM ... LASTID", ps)
    justid = any(a.lower() == b"justid" for a in argv[j:])
    ids = argv[5:j]

    def fold(parts: list[tuple[list[int], bytes]], n: int) -> bytes:
        got: dict[int, bytes] = {}
        for _, r in parts:
            for e in reply_elements(r)[1]:
                sid = parse_id(bulk_value(e)) if justid else _entry_id(e)
                got.setdefault(sid or 0, e)
        out = []
        for b in dict.fromkeys(ids):
            e = got.pop(parse_id(b, strict=True) or 0, b"")
            if e:  # an entry's reply is never empty
                out.append(e)
        return _array(out)
    _by_ids(router, c, ps, cell, argv[:5], ids, argv[j:], True, fold)


# --- XTRIM / XPENDING / XAUTOCLAIM -----------------------------------------------------------------
def xtrim(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    """XTRIM MINID: every partition by the same ID (exact). MAXLEN n: every partition keeps at
    most ceil(n / N) entries, which is n in all when the partitions are even (writes without
    a key field are spread evenly) and fewer otherwise; removed counts are summed."""
    from node.commands.streams import _parse_add_or_trim
    a, _i = _parse_add_or_trim(c, argv, False)
    out = list(argv)
    if a.strategy == "maxlen":
        for j in range(2, len(argv) - 1):
            if argv[j].lower() == b"maxlen":
                k = j + 2 if argv[j + 1] in (b"~", b"=") else j + 1
                out[k] = b"%d" % _share(a.threshold, ps.n)
                break
    _all(router, c, out, ps, cell, partial(_summed, ps), True)


def xpending(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
             cell: Cell) -> None:
    """XPENDING summary: counts summed, the least first and greatest last ID, each consumer's
    counts summed (consumers in name order, as Redis lists them). Extended: each partition's
    range with the same bounds and COUNT, merged in ID order, COUNT applying to the total."""
    proto = c.proto
    summary = len(argv) == 3

    def merged(replies: list[bytes]) -> bytes:
        ok = [r for r in replies if error_code(r) is None]
        if len(ok) < len(replies):
            miss = [r for r in replies if error_code(r) is not None]
            if not ok or any(error_code(r) != b"NOGROUP" for r in miss):
                return _renamed(ps, miss[0])
        if not summary:
            rows = _merged([reply_elements(r)[1] for r in ok])
            return _array(rows[:_xpending_count(argv)])
        total, lo, hi = 0, None, None
        cons: dict[bytes, int] = {}
        for r in ok:
            n, first, last, who = reply_elements(r)[1]
            total += int_value(n)
            if first[:1] == b"$" and not first.startswith(b"$-1"):
                f, la = parse_id(bulk_value(first)) or 0, parse_id(bulk_value(last)) or 0
                lo = f if lo is None else min(lo, f)
                hi = la if hi is None else max(hi, la)
            for row in (reply_elements(who)[1] if who[:1] == b"*" else ()):
                name, cnt = reply_elements(row)[1]
                k = bulk_value(name)
                cons[k] = cons.get(k, 0) + int(bulk_value(cnt))
        if not total:
            return encode([0, None, None, None], proto)
        return encode([total, format_id(lo or 0), format_id(hi or 0),
                       [[k, b"%d" % v] for k, v in sorted(cons.items())]], proto)
    _all(router, c, argv, ps, cell, merged)


def _xpending_count(argv: list[bytes]) -> int:
    """The COUNT of an extended XPENDING: key group [IDLE n] start end count [consumer]."""
    i = 5 if argv[3].lower() == b"idle" else 3
    n = errors.string2ll(argv[i + 2]) if i + 2 < len(argv) else None
    return max(n or 0, 0)


def xautoclaim(router: Router, c: RouterClient, argv: list[bytes], ps: PStream,
               cell: Cell) -> None:
    """XAUTOCLAIM walks the partitions in turn behind one cursor: the start ID names its
    partition (seq mod stride), a partition's own cursor stays in it, and when a partition is
    done the cursor becomes `0-(p+1)`, the least ID partition p+1 can have; after the last
    one, `0-0`. One partition per call (COUNT is an upper bound, as in Redis)."""
    conn = _conn(c)
    start = parse_id(argv[5])
    if start is None:
        return Forward(router, c, encode_command(_with_key(argv, 1, ps.keys[0])), ps.slots[0],
                       True, cell=cell).send()
    p = ps.partition_of(start) if start else 0
    if p >= ps.n:
        return conn.fill(cell, encode([b"0-0", [], []], c.proto))
    out = _with_key(argv, 1, ps.keys[p])
    out[5] = format_id(start)

    def done(r: bytes) -> None:
        if error_code(r) is not None:
            return conn.fill(cell, _renamed(ps, r))
        els = reply_elements(r)[1]
        if bulk_value(els[0]) == b"0-0" and p + 1 < ps.n:
            els[0] = bulk(b"0-%d" % (p + 1))
        return conn.fill(cell, _array(els))
    Forward(router, c, encode_command(out), ps.slots[p], True, done=done).send()
    return None


def _existing(ps: PStream, replies: list[bytes]) -> list[bytes] | bytes:
    """The replies of the partitions that exist (`no such key` from the others), or the
    error to give."""
    ok = [r for r in replies if error_code(r) is None]
    if ok:
        return ok
    return _renamed(ps, replies[0])


HANDLERS: dict[bytes, Callable[..., None]] = {
    b"xlen": xlen,
    b"xcfgset": xcfgset,
    b"type": type_,
    b"xrange": xrange,
    b"xrevrange": xrange,
    b"xack": xack,
    b"xdel": xdel,
    b"xclaim": xclaim,
    b"xackdel": _with_ids_arg(3, partial(_codes_fold, -1)),
    b"xdelex": _with_ids_arg(2, partial(_codes_fold, -1)),
    b"xnack": _with_ids_arg(4, _count_fold),
    b"xtrim": xtrim,
    b"xpending": xpending,
    b"xautoclaim": xautoclaim,
    b"xgroup|create": xgroup_create,
    b"xgroup|destroy": _xgroup(_fold_max),
    b"xgroup|setid": _xgroup(_fold_first),
    b"xgroup|createconsumer": _xgroup(_fold_max),
    b"xgroup|delconsumer": _xgroup(_fold_sum),
}
"""Handlers by command fullname; anything else on a logical name is refused (or WRONGTYPE)."""

# XINFO (router/pstreaminfo.py) and XADD (router/pstreamwrite.py) use the helpers above and add
# their handlers to HANDLERS.
import router.pstreaminfo  # noqa: E402, F401
import router.pstreamwrite  # noqa: E402, F401
