"""XADD on a partitioned stream's logical name: which partition takes the entry, and how the
request gets there.

Which partition:
- an explicit `ms-seq` ID names its own (seq mod stride), refused when it does not exist;
- else the key field's value, or IDMP's producer id, by a stable hash (`choose_partition`),
  so one value's entries stay in one partition, in order;
- else the write is spread. The writes of one client read (a pipeline, as it arrived) go to
  one partition, up to STICKY_WRITES of them, then the next partition whose primary the
  router can reach takes over, and the next read's writes start at the one after, as Kafka's
  sticky partitioner fills one partition's batch before it moves on: a pipeline of N writes
  is then one upstream write that the node appends as a batch to one stream, as for a plain
  key, instead of N/partitions appends to every partition. A client that sends one XADD at a
  time still goes round robin, one partition per write.

How it gets there: the usual `XADD name * field value ...` (no options, no explicit ID) is
relayed as the client's own bytes with the partition key's bulk spliced in for the name's
(`relay`, compiled with the relay), so it costs the router little more than a plain key's
XADD. Anything else is parsed first, so that Redis's errors come before any partition sees
the request, and encoded again (`xadd`).

A spread write whose partition's primary cannot take it goes to another partition
(`SpreadWrite`), so writes go on during one shard's failover.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import cython

from base.records import choose_partition
from node.resp import bulk, encode_command, error
from router import pstreams
from router.forward import RETRY_DELAY, Forward, to_cell
from router.pstreams import PStream, _conn, _share, _with_key

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memcpy

if TYPE_CHECKING:
    from router.client import Cell, RouterClient
    from router.proxy import Router
    from router.upstream import Pool

__all__ = ["Writes", "relay", "xadd", "SpreadWrite", "NO_PARTITION", "reachable"]

# At most this many spread writes of one client read go to one partition before the next
# partition takes over (Kafka's sticky partitioner closes a batch at batch.size): a pipeline
# of this many stays one batch, and one long pipeline still reaches every partition.
STICKY_WRITES = 100

NO_PARTITION = (b"ERR The ID specified in XADD names partition %d of partitioned stream '%s', "
                b"which has %d partitions")


class Writes:
    """A logical name's write side, as `relay` reads it for every XADD (a C struct when
    compiled, where a PStream's attributes cost a dictionary-free but generic lookup each):
    the partitions' keys, slots and key bulks, and where spread writes go."""

    __slots__ = ("n", "keys", "slots", "key_bulks", "name_len", "key_field", "rr", "stick",
                 "stick_client", "stick_read", "stuck")

    def __init__(self, name: bytes, keys: list[bytes], slots: list[int],
                 key_field: bytes | None) -> None:
        self.n = len(keys)
        self.keys = keys
        self.slots = slots
        self.key_bulks = [bulk(k) for k in keys]  # spliced in for the name's bulk
        self.name_len = len(bulk(name))
        self.key_field = key_field
        self.rr = 0  # the next partition of a spread write, round robin
        # The partition the spread writes of one client read go to, with the client's id
        # and its ClientConn.reads then.
        self.stick = 0
        self.stick_client = -1
        self.stick_read = -1
        self.stuck = 0  # spread writes of that read sent to it so far


def relay(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell,
          raw: bytes | None) -> bool:
    """`XADD name * field value ...` as the client's bytes with the partition's key in the
    name's place; False (nothing done) for any other form, which `xadd` then takes. Such a
    request has no option a node could refuse: an odd count of fields and values is the only
    error, and it is left to `xadd` to phrase."""
    n = len(argv)
    if raw is None or n < 5 or not (n & 1) or argv[2] != b"*":
        return False
    r: bytes = raw
    w: Writes = ps.writes
    # `*N\r\n$4\r\nXADD\r\n` (13 bytes and N's digits) comes before the name's bulk
    # `$L\r\nname\r\n` (argv[1] is the name), as every client writes them. Written
    # otherwise (`*05`, `$04`, `$06`), the bytes at i or at its end are not `$` and `\n`,
    # and the request goes to `xadd`.
    i = 14 if n < 10 else 15 if n < 100 else 13 + len(b"%d" % n)
    ln = w.name_len
    if len(r) < i + ln or r[0] != 42 or r[i] != 36 or r[i + ln - 1] != 10:  # *, $, \n
        return False
    key_field = w.key_field
    value = None
    if key_field is not None:
        for j in range(3, n - 1, 2):
            if argv[j] == key_field:
                value = argv[j + 1]
                break
    # None: no key field's value, the write is spread
    chosen = None if value is None else choose_partition(w.n, value)
    p = _spread(router, c, w) if chosen is None else chosen
    data = _splice(r, i, ln, w.key_bulks[p])
    if chosen is None:
        spread_write(router, c, data, argv, w, p, cell).send()
    else:
        to_cell(router, c, data, w.slots[p], True, cell).send()
    return True


def _splice(r: bytes, i: int, ln: int, kb: bytes) -> bytes:
    """r with its `ln` bytes at i replaced by kb: one allocation and three copies when
    compiled (two slices and two concatenations were a seventh of a relayed XADD's cost)."""
    if cython.compiled:
        size = len(r) - ln + len(kb)
        out = PyBytes_FromStringAndSize(cython.NULL, size)
        dst = PyBytes_AS_STRING(out)
        src = PyBytes_AS_STRING(r)
        memcpy(dst, src, i)
        memcpy(dst + i, PyBytes_AS_STRING(kb), len(kb))
        memcpy(dst + i + len(kb), src + i + ln, len(r) - i - ln)
        return out
    return b"".join((r[:i], kb, r[i + ln:]))


def xadd(router: Router, c: RouterClient, argv: list[bytes], ps: PStream, cell: Cell) -> None:
    """Any XADD on a logical name (see the module docstring), parsed with the node's own
    parser so that a bad request gets Redis's error before a partition sees it."""
    from node.commands.streams import _parse_add_or_trim
    a, i = _parse_add_or_trim(c, argv, True)
    chosen: int | None
    if a.id_given and a.seq_given:
        chosen = ps.partition_of(a.id)
        if chosen >= ps.n:
            return _conn(c).fill(cell, error(NO_PARTITION % (chosen, ps.name, ps.n)))
    else:
        value = None
        if ps.key_field is not None:
            for j in range(i + 1, len(argv) - 1, 2):
                if argv[j] == ps.key_field:
                    value = argv[j + 1]
                    break
        chosen = choose_partition(ps.n, value, a.idmp_pid)
    p = _spread(router, c, ps.writes) if chosen is None else chosen
    out = _with_key(argv, 1, ps.keys[p])
    if a.strategy == "maxlen":  # each partition keeps its share (see XTRIM)
        for j in range(2, i):
            if argv[j].lower() == b"maxlen":
                k = j + 2 if argv[j + 1] in (b"~", b"=") else j + 1
                out[k] = b"%d" % _share(a.threshold, ps.n)
                break
    if chosen is None:
        return spread_write(router, c, encode_command(out), out, ps.writes, p, cell).send()
    return Forward(router, c, encode_command(out), ps.slots[p], True, cell=cell).send()


def _spread(router: Router, c: RouterClient, w: Writes) -> int:
    """The partition of a spread write: the one this client read's writes went to, up to
    STICKY_WRITES of them, else the next one the router can reach (round robin)."""
    conn = c.conn
    reads = conn.reads  # type: ignore[union-attr]
    if w.stick_read == reads and w.stick_client == c.id and w.stuck < STICKY_WRITES:
        w.stuck += 1
        return w.stick
    p = _next_live(router, w, c.proto)
    w.stick, w.stick_client, w.stick_read, w.stuck = p, c.id, reads, 1
    return p


def _next_live(router: Router, w: Writes, proto: int) -> int:
    """The next partition, round robin, whose primary the router can reach."""
    n = w.n
    for _ in range(n):
        p = w.rr % n
        w.rr = p + 1
        pool = router.primary_pool(w.slots[p], proto)
        if pool is not None and reachable(pool):
            return p
    return w.rr % n  # none has a primary: the write waits for one, as a plain key's


def reachable(pool: Pool) -> bool:
    """False while the router's connections to a primary are lost (it died: etcd still names
    it until its lease expires) and none has come back up: a write sent there would wait for
    the failover. A lost connection is opened again in the background here, so the partition
    takes writes again as soon as its node answers. A pool whose first connections are still
    being made (a router that just started, a new primary) has lost nothing and is
    reachable: skipping it would skew the spread for no failure. Plain loops, as it runs
    for every spread write."""
    closed = connecting = 0
    for u in pool.conns:
        if u is None:
            continue
        if u.closed:
            closed += 1
        elif u.transport is not None:
            return True  # one open connection
        else:
            connecting += 1
    if not closed:
        return True
    if not connecting:
        pool.get(0)
    return False


class SpreadWrite(Forward):
    """A spread XADD: when its partition's primary cannot take it (the connection was lost,
    or the shard has no primary), it goes to another partition the router can reach instead
    of waiting for the failover, each partition tried once. A request lost in flight may have
    run there, so this is at-least-once, as the retry at the new primary would be; and the
    dead node stays among the client's written nodes, so its WAIT counts 0 for it, as a
    router's WAIT does for any node that died. `argv` is the request with its key at 1."""

    __slots__ = ("argv", "w", "first", "tried")

    def _place(self, argv: list[bytes], w: Writes, first: int) -> None:
        self.argv: list[bytes] = argv
        self.w: Writes = w
        self.first: int = first  # the partition it went to first
        self.tried: set[int] | None = None  # made by _retry: most writes are never retried

    def _retry(self, final: bytes, addr: tuple[str, int] | None = None,
               delay: float = RETRY_DELAY) -> None:
        w, router = self.w, self.router
        tried = self.tried
        if tried is None:
            tried = self.tried = {self.first}
        for _ in range(w.n - len(tried) if addr is None else 0):
            p = _next_live(router, w, self.c.proto)
            pool = router.primary_pool(w.slots[p], self.c.proto)
            if p not in tried and pool is not None and reachable(pool):
                tried.add(p)
                self.data = encode_command(_with_key(self.argv, 1, w.keys[p]))
                self.slot = w.slots[p]
                return self.send()
        return Forward._retry(self, final, addr, delay)


def spread_write(router: Router, c: RouterClient, data: bytes, argv: list[bytes], w: Writes,
                 p: int, cell: Cell) -> SpreadWrite:
    """A SpreadWrite of `data` (the request for partition p), made as `to_cell` makes a
    Forward."""
    f = SpreadWrite.__new__(SpreadWrite)
    f._set(router, c, data, w.slots[p], True, cell, None)
    f._place(argv, w, p)
    return f


pstreams.HANDLERS[b"xadd"] = xadd
