"""XREADGROUP ... CLAIM min-idle-time on a partitioned stream's logical name (Redis 8.4).

One stream returns its pending entries idle at least min-idle-time first, the longest idle
first, then new entries, COUNT over both. Partitions each claiming their own longest idle
entries would return others, in another order. So the router claims in three steps:

1. it asks every partition which entries a CLAIM would take, in its order
   (`XSHARD.IDLEPENDING`, node/commands/pending.py: [id, ms idle] pairs, nothing taken), and
   ranks them over the whole stream (the longest idle first, ties by ID), keeping COUNT;
2. each partition holding some of those claims exactly as many (an XREADGROUP CLAIM with
   that COUNT: the node takes its own longest idle first, so the same ones while nothing
   else claims them meanwhile);
3. what COUNT leaves goes to new entries (the usual `>` read of the logical stream,
   router/pstreamreads.py), each with the two trailing zeros a CLAIM read gives new entries.

The reply lists the claimed entries by the idle times their claims report, the longest first
and in the ranked order among equal ones, then the new ones. Each partition measures idle
times at its own claim, a millisecond or so after another's, so the ranked order alone could
show a shorter idle time before a longer one, which one stream's reply never does. With BLOCK and
nothing to return, the consumer waits as any group's blocked `>` read does
(router/pstreamwait.py), and the partition read that answers it carries the CLAIM: a woken
read returns that partition's idle entries first, then its new ones.

Not exact under a race: when another consumer claims or acknowledges one of the ranked
entries between steps 1 and 2, that partition claims its next idle entry (or a new one)
instead, which may rank below another partition's; every entry is still delivered once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.resp import bulk_value, error_code, int_value, reply_elements
from node.streamid import parse_id
from router.pstreamreads import Read, block
from router.pstreams import PStream, _entry_id, _read_entries, _read_reply, _renamed, _send

if TYPE_CHECKING:
    from node.commands.reads import XReadOptions
    from router.client import Cell, RouterClient
    from router.proxy import Router

__all__ = ["ClaimRead"]

IDLE_PENDING = b"XSHARD.IDLEPENDING"
_ZEROS = b":0\r\n:0\r\n"  # a new entry's ms idle and deliveries in a CLAIM read


def as_claimed(entry: bytes) -> bytes:
    """A new entry `*2 id fields` as a CLAIM read gives it: `*4 id fields 0 0`."""
    return b"*4" + entry[2:] + _ZEROS if entry.startswith(b"*2\r\n") else entry


def _idle(entry: bytes) -> int:
    """The ms idle of a claimed entry `*4 id fields idle deliveries` (0 for a new one)."""
    els = reply_elements(entry)[1]
    return int_value(els[2]) if len(els) == 4 else 0


class ClaimRead:
    """One XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] CLAIM t STREAMS name > on a
    logical name (see the module docstring)."""

    __slots__ = ("router", "c", "argv", "o", "cell", "ps", "count", "read", "rank", "claimed")

    def __init__(self, router: Router, c: RouterClient, argv: list[bytes], o: XReadOptions,
                 ps: PStream, cell: Cell) -> None:
        self.router, self.c, self.argv, self.o, self.ps, self.cell = router, c, argv, o, ps, cell
        self.count = o.count  # 0: no limit
        # The client's read: it words the partitions' CLAIM reads, and it blocks (step 3).
        self.read = Read(router, c, argv, o, cell)
        self.rank: dict[int, int] = {}  # entry ID -> its place among the claimed
        self.claimed: list[bytes] = []

    def start(self) -> None:
        o, ps = self.o, self.ps
        if o.timeout >= 0:
            self.c.conn.stall()  # type: ignore[union-attr]
        reqs = [(s, [IDLE_PENDING, k, o.group or b"", b"%d" % o.claim, b"%d" % self.count])
                for k, s in zip(ps.keys, ps.slots, strict=True)]
        _send(self.router, self.c, reqs, True, list, self._ranked)  # type: ignore[arg-type]

    def _ranked(self, replies: list[bytes]) -> None:
        """Step 1 answered: rank the idle entries of every partition, and claim."""
        ps = self.ps
        found: list[tuple[int, int, int]] = []  # (-ms idle, id, partition)
        for p, r in enumerate(replies):
            err = error_code(r)
            if err is not None:
                # NOGROUP and the like: the `>` read answers them as Redis words them for
                # XREADGROUP; anything else (a node too old to know IDLEPENDING) is refused.
                return self._new() if err in (b"NOGROUP", b"WRONGTYPE") else self._done(r)
            for pair in reply_elements(r)[1]:
                sid_b, idle_b = reply_elements(pair)[1]
                found.append((-int_value(idle_b), parse_id(bulk_value(sid_b)) or 0, p))
        found.sort()
        if self.count:
            found = found[:self.count]
        if not found:
            return self._new()
        share = [0] * ps.n
        for i, (_, sid, p) in enumerate(found):
            share[p] += 1
            self.rank[sid] = i
        reqs = [(ps.slots[p], self.read._req(ps.keys[p], b">", k))
                for p, k in enumerate(share) if k]
        _send(self.router, self.c, reqs, True, list, self._claimed)  # type: ignore[arg-type]
        return None

    def _claimed(self, replies: list[bytes]) -> None:
        """Step 2 answered: the ranked entries first, anything else a race gave after them."""
        got: list[bytes] = []
        failed = None
        for r in replies:
            if error_code(r) is not None:
                failed = r
            else:
                got += _read_entries(r)
        if failed is not None and not got:  # else what the others claimed is returned
            return self._done(failed)
        last = len(self.rank)
        got.sort(key=lambda e: (-_idle(e), self.rank.get(_entry_id(e), last), _entry_id(e)))
        self.claimed = got
        if self.count and len(got) >= self.count:
            return self._reply([])
        return self._new()

    def _new(self) -> None:
        """Step 3: new entries for what COUNT leaves, by the logical stream's `>` read
        (without BLOCK: a read that found nothing at all blocks below)."""
        _NewRead(self).start()

    def _after_new(self, r: bytes) -> None:
        if error_code(r) is not None:
            return self._done(r) if not self.claimed else self._reply([])
        new = [as_claimed(e) for e in _read_entries(r)]
        if self.claimed or new or self.o.timeout < 0:
            return self._reply(new)
        # Nothing at all: wait as a group's blocked `>` read, each partition read with CLAIM.
        return block(self.read)

    def _reply(self, new: list[bytes]) -> None:
        es = self.claimed + new
        self._done(_read_reply([(self.ps.name, es)], self.c.proto))

    def _done(self, r: bytes) -> None:
        conn = self.c.conn
        if conn is None:  # the client went meanwhile
            return
        conn.fill(self.cell, _renamed(self.ps, r))
        if self.o.timeout >= 0:
            conn.resume()


class _NewRead(Read):
    """Step 3's `>` read: the client's read for what COUNT leaves, without CLAIM or BLOCK;
    its reply goes back to the ClaimRead, not to the client."""

    def __init__(self, claim: ClaimRead) -> None:
        super().__init__(claim.router, claim.c, claim.argv, claim.o, claim.cell)
        self.claim_read = claim
        self.claim = self.timeout = -1
        if self.count:
            self.count -= len(claim.claimed)

    def _reply(self, r: bytes) -> None:
        self.over = True
        self.claim_read._after_new(r)

