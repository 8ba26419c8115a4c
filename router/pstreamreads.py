"""XREAD and XREADGROUP on partitioned streams at the router (router/pstreams.py has the
record, the other commands and the helpers both use).

A read asks every partition of each logical key and merges in ID order, COUNT applying to
the total; but an XREADGROUP `>` of a consumer with a backlog asks one partition, its cursor,
for all of COUNT first (`GroupRead`). XREADGROUP `>` never loses a delivery: its rounds ask
the partitions for no more than COUNT leaves; with BLOCK a group's `>` on one logical stream
waits on the partitions' watches (router/pstreamwait.py), and any other blocked read blocks on
every partition, the first answer wins and the others are ended with CLIENT UNBLOCK. Entries a partition delivered after the read was answered stay
pending for the consumer, and the router remembers where (`Handover`): the consumer's next read
through this router reads them back from its history first. With NOACK nothing is pending, so
the router keeps their bytes instead (in memory only: at most once, as NOACK is). That next
read starts only once every partition of the blocked read has answered (`PStream.late`): a
late entry is older than anything its partition can deliver next, and would otherwise reach
the consumer after a newer one.

MAXCOUNT / MAXSIZE (Redis 8.10): XREAD asks for no more than the caps could keep and cuts the
merged reply in key order; XREADGROUP reads its keys, and a logical key its partitions, one
after another, each asked for what the caps have left, so a node delivers only what is
returned. A blocked partition read that meets -MOVED/-ASK blocks again at the new owner.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from node.resp import (
    bulk,
    encode_command,
    error,
    error_code,
    keyed_header,
    keyed_pair,
    null_array,
    parse_redirect,
    reply_elements,
)
from node.slots import key_slot
from node.streamid import format_id
from router.fanout import BlockedParts
from router.forward import MAX_REDIRECTS, Forward
from router.merge import ReadCaps, cap_stream_reply
from router.pstreamwait import Wait, tracked

if TYPE_CHECKING:
    from node.commands.reads import XReadOptions
    from router.client import Cell, RouterClient
    from router.proxy import Router
    from router.upstream import Pool, Upstream
from router.pstreams import (  # the record and the helpers every command uses
    MIXED_BLOCK,
    NOT_SUPPORTED,
    Handover,
    PStream,
    _array,
    _entry_id,
    _first_error,
    _merged,
    _read_entries,
    _read_reply,
    _renamed,
    _send,
    _share,
)
from router.pstreamwrite import reachable

__all__ = ["run_xread", "keep", "hand_over"]

_CLIENT_ID = encode_command([b"CLIENT", b"ID"])
_ASKING = encode_command([b"ASKING"])


def run_xread(router: Router, c: RouterClient, argv: list[bytes], options: XReadOptions,
              cell: Cell) -> bool:
    """XREAD/XREADGROUP naming a logical stream (False when none is): see read_keys."""
    first, nkeys = options.first_key, options.nkeys
    pstreams = router.pstreams
    keys = argv[first:first + nkeys]
    named = [pstreams[k] for k in keys if k in pstreams]
    if not named:
        return False
    if options.claim >= 0 and b">" in argv[first + nkeys:]:
        # Idle entries first, the longest idle of the whole stream first: ranked over the
        # partitions before any is claimed (router/pstreamclaim.py), for one logical key.
        if len(keys) != 1 or options.maxcount or options.maxsize:
            c.conn.fill(cell, error(NOT_SUPPORTED % (  # type: ignore[union-attr]
                b"XREADGROUP ... CLAIM", named[0].name,
                b" with other keys or with MAXCOUNT / MAXSIZE (read it on its own)")))
            return True
        from router.pstreamclaim import ClaimRead
        ClaimRead(router, c, argv, options, named[0], cell).start()
        return True
    Read(router, c, argv, options, cell).start()
    return True


class Read:
    """One XREAD/XREADGROUP over logical and plain keys. Each client key is read on its own
    (COUNT is per key, as in Redis): a plain key by one request, a logical one on its
    partitions (XREADGROUP `>`: see the module docstring). With BLOCK and nothing to answer
    at once, every partition blocks (`Blocked`).

    MAXCOUNT / MAXSIZE (`caps`): an XREAD asks every key for no more than the caps could
    keep and cuts the reply in key order, as one node would. An XREADGROUP delivers what it
    reads, so its keys are read one after another (`seq`), each asked for what the caps
    have left, and a logical `>` key asks its partitions one after another too."""

    def __init__(self, router: Router, c: RouterClient, argv: list[bytes], options: XReadOptions,
                 cell: Cell) -> None:
        self.router, self.c, self.argv, self.cell = router, c, argv, cell
        o = options
        self.timeout, self.count, self.noack, self.group, self.consumer, self.block_at = (
            o.timeout, o.count, o.noack, o.group, o.consumer, o.block_at)
        first, nkeys, claim = o.first_key, o.nkeys, o.claim
        self.keys = argv[first:first + nkeys]
        self.ids = argv[first + nkeys:]
        self.claim = claim
        self.results: list[list[bytes] | bytes | None] = [None] * nkeys
        self.shown: set[int] = set()  # history reads: the key is shown even without entries
        self.left = nkeys
        self.over = False
        self.caps = ReadCaps(o.maxcount, o.maxsize) if o.maxcount or o.maxsize else None
        self.seq = self.caps is not None and self.group is not None
        self.counted: set[int] = set()  # seq: keys whose entries GroupRead counted already

    def start(self) -> None:
        if self.timeout >= 0:
            self.c.conn.stall()  # type: ignore[union-attr]
            if self.group is not None and len(self.keys) > 1:
                return self._reply(error(MIXED_BLOCK))
        if self.seq:
            return self._read(0)
        for i in range(len(self.keys)):
            self._read(i)
        return None

    def _read(self, i: int) -> None:
        k = self.keys[i]
        ps = self.router.pstreams.get(k)
        if ps is None:
            self._plain(i, k)
        elif self.group is None:
            self._xread(i, ps)
        elif self.ids[i] == b">":
            GroupRead(self, i, ps).start()
        else:
            self._history(i, ps)

    def _req(self, key: bytes, sid: bytes, count: int | None = None,
             size: int = 0) -> list[bytes]:
        """The read of one key without BLOCK, with COUNT `count` (None: the client's) and
        MAXSIZE `size` (0: none)."""
        n = self.count if count is None else count
        out = [self.argv[0]]
        if self.group is not None:
            out += [b"GROUP", self.group, self.consumer]
        if n:
            out += [b"COUNT", b"%d" % n]
        if size:
            out += [b"MAXSIZE", b"%d" % size]
        if self.noack:
            out.append(b"NOACK")
        if self.claim >= 0:
            out += [b"CLAIM", b"%d" % self.claim]
        return out + [b"STREAMS", key, sid]

    def limit(self) -> int:
        """The COUNT to ask of the next key: the client's, lowered to what MAXCOUNT has
        left (0: no limit)."""
        caps = self.caps
        if caps is None or caps.left <= 0:
            return self.count
        return min(self.count, caps.left) if self.count else caps.left

    def size(self, head: int, before: int = 0) -> int:
        """The MAXSIZE to ask of a node whose reply's stream header is `head` bytes (0: the
        node's own header is the client's), so that it stops where the client's reply would:
        what the caps have left, less `before` bytes of a header not counted yet. 0: none."""
        caps = self.caps
        if caps is None or not caps.maxsize:
            return 0
        return max(caps.maxsize - caps.used - before + head, 1)

    def _plain(self, i: int, k: bytes) -> None:
        if self.group is not None and self.ids[i] != b">":
            self.shown.add(i)  # a history read shows the key even without entries
        req = self._req(k, self.ids[i], self.limit(), self.size(0))
        Forward(self.router, self.c, encode_command(req), key_slot(k),
                self.group is not None, done=partial(self._plain_done, i)).send()

    def _plain_done(self, i: int, r: bytes) -> None:
        self.got(i, r if error_code(r) is not None else _read_entries(r))

    def _xread(self, i: int, ps: PStream) -> None:
        sid, proto, count = self.ids[i], self.c.proto, self.limit()
        reqs = [(s, self._req(k, sid, count, self.size(_head(k, proto))))
                for k, s in zip(ps.keys, ps.slots, strict=True)]
        _send(self.router, self.c, reqs, False, partial(self._merge_parts, ps, sid == b"+"),
              partial(self._parts_done, i))

    def _history(self, i: int, ps: PStream) -> None:
        """XREADGROUP with an ID: the consumer's pending entries after it, merged; the key
        is in the reply even without any, as Redis answers a history read."""
        self.shown.add(i)
        self._xread(i, ps)

    def _merge_parts(self, ps: PStream, last_only: bool, replies: list[bytes]) -> bytes:
        err = _first_error(ps, replies)
        if err is not None:
            return err
        out = _merged([_read_entries(r) for r in replies])
        if last_only:
            out = out[-1:]
        elif self.count:
            out = out[:self.count]
        return _array(out)

    def _parts_done(self, i: int, r: bytes) -> None:
        self.got(i, r if error_code(r) is not None else reply_elements(r)[1])

    def got(self, i: int, r: list[bytes] | bytes) -> None:
        if self.over:
            return
        self.results[i] = r
        if self.seq:
            return self._seq_got(i, r)
        self.left -= 1
        if self.left:
            return
        for res in self.results:
            if isinstance(res, bytes):
                return self._reply(res)
        return self._all_got()

    def _seq_got(self, i: int, r: list[bytes] | bytes) -> None:
        """An XREADGROUP under caps: key i was read; count it and read the next one, unless
        the caps are spent (the keys left are then left out, as a node leaves them)."""
        if isinstance(r, bytes):
            # An error after keys that delivered still returns what they delivered.
            if not any(self.results[:i]):
                return self._reply(r)
            self.results[i] = []
            return self._all_got()
        caps = self.caps
        assert caps is not None
        if i not in self.counted and (r or i in self.shown):
            # A plain key's node, or a history read's merge: cut to what the caps leave.
            self.results[i] = caps.take_entries(_head(self.keys[i], self.c.proto), r)
        if i + 1 < len(self.keys) and not caps.spent():
            return self._read(i + 1)
        return self._all_got()

    def _all_got(self) -> None:
        items = [(k, e if isinstance(e, list) else [])
                 for k, e in zip(self.keys, self.results, strict=True)]
        if self.timeout < 0 or self.shown or any(e for _, e in items):
            reply = _read_reply(items, self.c.proto, self.shown)
            if self.caps is not None and not self.seq:
                reply = cap_stream_reply(reply, self.caps, self.c.proto)
            return self._reply(reply)
        return block(self)

    def _reply(self, r: bytes) -> None:
        self.over = True
        conn = self.c.conn
        if conn is not None:
            conn.fill(self.cell, r)
            if self.timeout >= 0:
                conn.resume()


def block(read: Read) -> None:
    """The read found nothing and blocks: a group's `>` on one logical stream (without
    MAXCOUNT / MAXSIZE) waits for its partitions' watches (router/pstreamwait.py); any other
    read blocks on every partition (`Blocked`)."""
    if read.group is not None and len(read.keys) == 1 and read.ids[0] == b">" \
            and read.caps is None:
        ps = read.router.pstreams.get(read.keys[0])
        if ps is not None:
            return Wait(read, ps).start()
    return Blocked(read).start()


def _head(key: bytes, proto: int) -> int:
    """The bytes of a stream's header in an XREAD reply, as MAXSIZE counts them: `[key,`
    (RESP2) or the map's key (RESP3)."""
    n = len(key)
    return n + len(b"%d" % n) + 5 + (4 if proto == 2 else 0)


class GroupRead:
    """XREADGROUP `>` on one logical stream: first what was handed over, then new entries.

    With COUNT, while the consumer has a backlog (its last read filled COUNT), the read asks
    one partition, the consumer's cursor (`_sticky`), for all COUNT leaves: a read that it
    fills is one upstream read, and its XACK one upstream XACK. A short answer moves the
    cursor on to the next partition, asked for the rest (a backlog's partitions run dry one
    at a time, so it usually fills it); only when that one is short too do rounds ask the
    others. A consumer without a backlog (last read short: `PStream.sparse`) goes to the
    rounds at once, so a read of a stream that is kept up with costs one round, not three.

    A round asks every candidate partition for an even share of what COUNT leaves
    (all of it without COUNT); a partition that returns its whole share may have more and
    stays a candidate. Rounds ask for no more than COUNT leaves, so only a hand-over read
    (which asks for all that was handed over) can come back with more than COUNT: the rest is
    handed over again.

    Under MAXCOUNT / MAXSIZE (`read.seq`) the partitions are asked one after another instead,
    each for what COUNT and the caps have left, so a node delivers only what the reply keeps
    (`_next`); what was handed over comes first, cut to the caps, its rest handed over again."""

    def __init__(self, read: Read, i: int, ps: PStream) -> None:
        self.read, self.i, self.ps = read, i, ps
        self.key = (read.group or b"", read.consumer)
        self.got: dict[int, list[bytes]] = {}  # partition -> entries, in its order
        self.total = 0
        self.error: bytes | None = None
        # A partition answered: a NOGROUP elsewhere is a partition added since the group
        # was made (its group comes with `alter`), not the client's error.
        self.answered = False
        self.head = 0  # under caps: the bytes of this key's header, counted while it reads

    def start(self) -> None:
        late = self.ps.late.get(self.key)
        if late is not None:  # the consumer's last blocked read has partitions to answer
            late[1].append(self.start)
            return None
        r = self.read
        if r.seq:
            assert r.caps is not None
            self.head = _head(self.ps.name, r.c.proto)
            r.caps.used += self.head
            r.counted.add(self.i)
        ho = self.ps.handover.pop(self.key, None)
        if not ho:
            return self.after_handover()
        reqs, order = [], []
        for p, h in ho.items():
            if h.raws is not None:
                self._add(p, h.raws)
                continue
            order.append(p)
            reqs.append((self.ps.slots[p], r._req(self.ps.keys[p], format_id(h.after),
                                                  h.count)))
        if not reqs:
            return self.after_handover()
        _send(r.router, r.c, [(s, _plain_read(a)) for s, a in reqs], True, list,  # type: ignore[arg-type]
              partial(self._handed, order))
        return None

    def _handed(self, order: list[int], replies: list[bytes]) -> None:
        for p, rep in zip(order, replies, strict=True):
            if error_code(rep) is not None:
                continue  # the group or the stream went away: nothing is pending there
            # Deleted entries (nil fields) stay pending, as they would in Redis, unreturned.
            self._add(p, [e for e in _read_entries(rep) if not e.endswith(b"*-1\r\n")])
        self.after_handover()

    def after_handover(self) -> None:
        r = self.read
        cands = [p for p in self._live() if p not in self.got]
        if r.seq:
            # What was handed over, cut to COUNT and the caps (the rest handed over again).
            taken = keep(self.ps, self.key, self.got, r.count, r.noack, r.caps) if self.got \
                else []
            cut = len(taken) < self.total
            self.got, self.total = {}, 0
            self._add(-1, taken)
            return self.finish() if cut else self._next(cands)
        if r.count and self.total >= r.count:
            return self.finish()
        if r.timeout >= 0 and not self.total and self.key in self.ps.sparse \
                and len(r.keys) == 1 and r.caps is None and tracked(self.ps, self.key[0]):
            # Kept up with, and the watches say what the group may have unread: wait at
            # once, where the wait reads those partitions first (router/pstreamwait.py).
            return Wait(r, self.ps).start()
        p = self._sticky() if r.count and self.key not in self.ps.sparse else None
        if p is None:
            return self.round(cands)
        req = r._req(self.ps.keys[p], b">", r.count - self.total)
        _send(r.router, r.c, [(self.ps.slots[p], req)], True, list,  # type: ignore[arg-type]
              partial(self._stuck, p))
        return None

    def _sticky(self) -> int | None:
        """The consumer's cursor partition, or the next one after it whose primary the router
        can reach and that gave nothing by hand-over in this read (None: none). A consumer
        new to this router starts where the reads' rotating start is, so that consumers
        spread over the partitions."""
        ps, r = self.ps, self.read
        at = ps.cursor.get(self.key)
        if at is None:
            at = ps.rd % ps.n
            ps.rd = at + 1
        for j in range(ps.n):
            p = (at + j) % ps.n
            if p in self.got:
                continue
            pool = r.router.primary_pool(ps.slots[p], r.c.proto)
            if pool is not None and reachable(pool):
                ps.cursor[self.key] = p
                return p
        return None

    def _relay(self, p: int, rep: bytes, count: int) -> bool:
        """A read of this one key that one partition filled (`count` entries): its reply is
        the client's, with the logical name for the partition's (False: not such a read, or
        not such a reply)."""
        r = self.read
        if len(r.keys) != 1 or r.over:
            return False
        proto = r.c.proto
        head = keyed_header(1, proto) + keyed_pair(proto)
        real = head + bulk(self.ps.keys[p])
        at = len(real)
        # The entries' array header says how many came (no parse of the entries).
        if not rep.startswith(real) or rep[at:at + 1] != b"*" \
                or int(rep[at + 1:rep.index(b"\r\n", at)]) < count:
            return False
        r._reply(b"".join((head, bulk(self.ps.name), memoryview(rep)[at:])))
        return True

    def _stuck(self, p: int, replies: list[bytes], then: bool = True) -> None:
        """The cursor's partition answered: when it filled what COUNT left, the read is done
        and the cursor stays; else the cursor moves on to the next partition, which is asked
        for the rest (`then`: a backlog's partitions run dry one by one, so that one usually
        fills it, at one more request), and when that one comes back short too, one round
        asks the others for the rest (as a read without a backlog would)."""
        rep, ps = replies[0], self.ps
        if error_code(rep) is not None:
            if self.error is None:
                self.error = _renamed(ps, rep)
        else:
            self.answered = True
            left = self.read.count - self.total
            if not self.total and self._relay(p, rep, left):
                return None
            es = _read_entries(rep)
            self._add(p, es)
            if len(es) >= left:
                return self.finish()
        ps.cursor[self.key] = (p + 1) % ps.n
        self.got.setdefault(p, [])  # asked: not a candidate again in this read
        q = self._sticky() if then and self.error is None else None
        if q is not None:
            r = self.read
            req = r._req(ps.keys[q], b">", r.count - self.total)
            _send(r.router, r.c, [(ps.slots[q], req)], True, list,  # type: ignore[arg-type]
                  partial(self._stuck, q, then=False))
            return None
        return self.round([(p + j) % ps.n for j in range(1, ps.n)
                           if (p + j) % ps.n not in self.got])

    def _next(self, cands: list[int]) -> None:
        """Under caps: ask the next partition for what COUNT and the caps have left."""
        r = self.read
        caps = r.caps
        assert caps is not None
        if (not cands or (r.count and self.total >= r.count) or caps.left < 0
                or (self.total and caps.maxsize and caps.used >= caps.maxsize)):
            return self.finish()
        ask = r.count - self.total if r.count else 0  # 0: no COUNT
        if caps.left > 0:
            ask = min(ask, caps.left) if ask else caps.left
        p, key = cands[0], self.ps.keys[cands[0]]
        req = r._req(key, b">", ask, r.size(_head(key, r.c.proto)))
        _send(r.router, r.c, [(self.ps.slots[p], req)], True, list,  # type: ignore[arg-type]
              partial(self._nexted, p, cands[1:]))
        return None

    def _nexted(self, p: int, cands: list[int], replies: list[bytes]) -> None:
        rep = replies[0]
        if error_code(rep) is not None:
            if self.error is None:
                self.error = _renamed(self.ps, rep)
            if error_code(rep) == b"NOGROUP":  # maybe a partition added since: go on
                return self._next(cands)
            return self.finish()
        self.answered = True
        caps = self.read.caps
        assert caps is not None
        es = _read_entries(rep)
        taken = caps.take_entries(0, es)  # all of them: the node was asked for no more
        hand_over(self.ps, self.key, p, es[len(taken):], self.read.noack)
        self._add(p, taken)
        return self._next(cands)

    def _live(self) -> list[int]:
        """Every partition, from a start that turns with each read (COUNT below N is fair)."""
        ps = self.ps
        start = ps.rd % ps.n
        ps.rd = start + 1
        return [(start + j) % ps.n for j in range(ps.n)]

    def round(self, cands: list[int]) -> None:
        """Ask partitions for exactly what COUNT leaves, split evenly (fewer partitions than
        that: one entry from each of as many as are left), so a read delivers no more than
        it returns; without COUNT, every partition for everything."""
        r = self.read
        if not cands:
            return self.finish()
        if r.count:
            left = r.count - self.total
            asked, later = cands[:left], cands[left:]
            base, extra = divmod(left, len(asked))
            shares: list[int | None] = [base + (j < extra) for j in range(len(asked))]
        else:
            asked, later, shares = cands, [], [None] * len(cands)
        reqs = [(self.ps.slots[p], r._req(self.ps.keys[p], b">", n))
                for p, n in zip(asked, shares, strict=True)]
        _send(r.router, r.c, reqs, True, list,  # type: ignore[arg-type]
              partial(self._rounded, asked, shares, later))

    def _rounded(self, asked: list[int], shares: list[int | None], later: list[int],
                 replies: list[bytes]) -> None:
        full = []  # partitions that gave all they were asked for: they may have more
        for p, n, rep in zip(asked, shares, replies, strict=True):
            if error_code(rep) is not None:
                if self.error is None:
                    self.error = _renamed(self.ps, rep)
                continue
            self.answered = True
            es = _read_entries(rep)
            self._add(p, es)
            if n is not None and len(es) == n:
                full.append(p)
        count = self.read.count
        # A NOGROUP beside answers is a partition added since the group was made: go on.
        go = self.error is None or (self.answered and error_code(self.error) == b"NOGROUP")
        if go and count and self.total < count and (later or full):
            return self.round(later + full)
        return self.finish()

    def _add(self, p: int, es: list[bytes]) -> None:
        if es:
            self.got.setdefault(p, []).extend(es)
            self.total += len(es)

    def finish(self) -> None:
        r = self.read
        if r.seq:
            taken = _merged(list(self.got.values()))  # each within the caps already
            if not taken:
                r.caps.used -= self.head  # type: ignore[union-attr]  # the key is left out
        else:
            taken = keep(self.ps, self.key, self.got, r.count, r.noack)
            if r.count and self.total >= r.count:  # a backlog: the next read sticks
                self.ps.sparse.discard(self.key)
            elif r.count:
                self.ps.sparse.add(self.key)
        err = self.error
        if err is not None and not taken and not (self.answered and error_code(err) == b"NOGROUP"):
            return r.got(self.i, err)
        r.got(self.i, taken)
        return None


def _plain_read(argv: list[bytes]) -> list[bytes]:
    """A hand-over read: the same XREADGROUP without NOACK (a history read ignores it)."""
    return [a for a in argv if a.lower() != b"noack"]


def keep(ps: PStream, key: tuple[bytes, bytes], got: dict[int, list[bytes]], count: int,
         noack: bool, caps: ReadCaps | None = None, head: int = 0) -> list[bytes]:
    """The first `count` of the partitions' deliveries in ID order (all without COUNT), cut
    further to what `caps` leave (after a stream header of `head` bytes; counted there); the
    rest is handed over to the consumer's next read: each partition's rest is the end of its
    list, pending after the ID before its first entry."""
    merged = _merged([es for es in got.values()])
    taken = merged[:count] if count else merged
    if caps is not None:
        taken = caps.take_entries(head, taken)
    if len(taken) == len(merged):
        return merged
    edge = _entry_id(taken[-1])
    for p, es in got.items():
        hand_over(ps, key, p, [e for e in es if _entry_id(e) > edge], noack)
    return taken


def hand_over(ps: PStream, key: tuple[bytes, bytes], p: int, rest: list[bytes],
              noack: bool) -> None:
    """Partition p delivered `rest` (in its order) to the consumer `key`, unreturned."""
    if not rest:
        return
    ho = ps.handover.setdefault(key, {})
    h = ho.get(p)
    if noack:
        if h is not None and h.raws is not None:
            h.raws.extend(rest)
        else:
            ho[p] = Handover(0, len(rest), rest)
    elif h is None:
        ho[p] = Handover(_entry_id(rest[0]) - 1, len(rest))
    else:
        h.count += len(rest)


class Blocked(BlockedParts):
    """A read with BLOCK that found nothing: every partition (and plain key) blocks on a
    dedicated upstream connection of its own. The first answer with entries is the reply,
    under the read's caps. The other parts are unblocked with CLIENT UNBLOCK (the node's
    client ID is asked first, on the same connection), so each of them answers: nothing, or
    entries it delivered in the meantime. An XREADGROUP's late entries are handed over, so
    none is lost. A part answered -MOVED or -ASK (its slot moved) blocks again at the new
    owner for the rest of the timeout (`BlockPart.follow`)."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.c, self.cell = read.c, read.cell
        self.parts: list[BlockPart] = []
        self.over = False
        self.left = 0
        self.deadline = time.monotonic() + read.timeout / 1000 if read.timeout else 0.0

    def start(self) -> None:
        r = self.read
        r.c.blocked = self
        pstreams = r.router.pstreams
        timeout = r.argv[r.block_at]
        proto = r.c.proto
        for i, k in enumerate(r.keys):
            ps = pstreams.get(k)
            sid = r.ids[i]
            targets = (list(zip(ps.keys, ps.slots, range(ps.n), strict=True)) if ps is not None
                       else [(k, key_slot(k), -1)])
            share = r.limit() or None
            grouped = ps is not None and r.group is not None
            if share and grouped:
                share = _share(share, ps.n)  # type: ignore[union-attr]
            # MAXSIZE: a partition's header stands for the logical one (an XREADGROUP's
            # winner is its whole reply; an XREAD's reply is cut again).
            before = _head(k, proto) if grouped else 0
            for real, slot, p in targets:
                pool = r.router.primary_pool(slot, proto)
                if pool is None:
                    continue
                head = r._req(real, sid, share, r.size(_head(real, proto) if p >= 0 else 0,
                                                       before))
                argv = head[:1] + [b"BLOCK", timeout] + head[1:]
                self.parts.append(BlockPart(self, i, ps, p, pool, argv))
        self.left = len(self.parts)
        if not self.parts:
            return self.finish(null_array(r.c.proto))
        for part in self.parts:
            part.issue()
        return None

    def timeout_reply(self, proto: int) -> bytes:
        return null_array(proto)

    def answered(self, part: BlockPart, r: bytes | None) -> None:
        self.left -= 1
        es = _read_entries(r) if r is not None and error_code(r) is None else []
        rd = self.read
        if self.over:  # answered already: what this part delivered is handed over
            if rd.group is not None and part.ps is not None:
                hand_over(part.ps, (rd.group, rd.consumer), part.p, es, rd.noack)
                _late_answered(part.ps, (rd.group, rd.consumer))
            return
        if r is not None and error_code(r) not in (None, b"MOVED", b"ASK"):
            return self.finish(_renamed(part.ps, r) if part.ps is not None else r)
        if es:
            key = rd.keys[part.i]
            proto = rd.c.proto
            if part.ps is not None and rd.group is not None:
                es = keep(part.ps, (rd.group, rd.consumer), {part.p: es}, rd.limit(), rd.noack,
                          rd.caps, _head(key, proto))
                return self.finish(_read_reply([(key, es)], proto))
            if rd.count:
                es = es[:rd.count]
            reply = _read_reply([(key, es)], proto)
            if rd.caps is not None:
                reply = cap_stream_reply(reply, rd.caps, proto)
            return self.finish(reply)
        if self.left == 0:
            self.finish(null_array(rd.c.proto))
        return None

    def cancel_parts(self) -> None:
        rd = self.read
        for part in self.parts:
            if rd.group is not None and part.ps is not None and not part.done:
                part.ps.late.setdefault((rd.group, rd.consumer), [0, []])[0] += 1
            part.cancel()


def _late_answered(ps: PStream, key: tuple[bytes, bytes]) -> None:
    """One more partition of an answered blocked read answered: when it was the last, the
    consumer's reads that waited for it start."""
    late = ps.late.get(key)
    if late is None:
        return
    late[0] -= 1
    if late[0] <= 0:
        del ps.late[key]
        for start in late[1]:
            start()


class BlockPart:
    """One partition's (or plain key's) blocked read, on a dedicated connection. After a
    CLIENT UNBLOCK was sent for it, its connection serves again only once the UNBLOCK is
    answered: a late one must not end the next read made on that connection."""

    def __init__(self, b: Blocked, i: int, ps: PStream | None, p: int, pool: Pool,
                 argv: list[bytes]) -> None:
        self.b, self.i, self.ps, self.p, self.pool, self.argv = b, i, ps, p, pool, argv
        self.up: Upstream | None = None
        self.node_id: bytes | None = None
        self.cancelled = False
        self.done = False
        self.unblocking = False  # a CLIENT UNBLOCK for it is not answered yet
        self.parked: Upstream | None = None  # its connection, until then
        self.moves = 0  # redirects followed

    def issue(self, asking: bool = False) -> None:
        idle = _idle(self.b.read.router, self.pool)
        while idle:
            up, nid = idle.pop()
            if not up.closed and not up.waiting:
                self.up, self.node_id = up, nid
                break
        else:
            self.up = up = self.pool.get_dedicated()
            up.send(_CLIENT_ID, self._id)
        if asking:
            up.send(_ASKING, _ignore)
        up.send(encode_command(self.argv), self._reply)

    def follow(self, kind: bytes, slot: int, host: str, port: int) -> None:
        """The part's slot moved (-MOVED) or is moving (-ASK): block again at its owner, by
        the router's topology when that already names another node than the one that
        answered, else where the redirect says, for what is left of the timeout."""
        b = self.b
        router, proto = b.read.router, b.read.c.proto
        self.moves += 1
        router.redirects["moved" if kind == b"MOVED" else "ask"] += 1
        if b.deadline:
            left = int((b.deadline - time.monotonic()) * 1000)
            if left <= 0:
                self.done = True
                return b.answered(self, None)  # timed out meanwhile: nothing
            self.argv[2] = b"%d" % left
        pool = router.primary_pool(slot, proto) if kind == b"MOVED" else None
        if pool is None or pool.addr == self.pool.addr:
            pool = router.pool((host or self.pool.addr[0], port), proto)
        self.pool, self.node_id = pool, None
        return self.issue(asking=kind == b"ASK")

    def _id(self, r: bytes | None) -> None:
        if r is not None and r[:1] == b":":
            self.node_id = r[1:-2]
            if self.cancelled and not self.done:
                self._unblock()

    def _reply(self, r: bytes | None) -> None:
        up, self.up = self.up, None
        redirect = (parse_redirect(r) if r is not None and not self.cancelled and not self.b.over
                    and self.moves < MAX_REDIRECTS else None)
        if redirect is not None:
            if up is not None:
                self._keep(up)  # answered: it can serve another read
            return self.follow(*redirect)
        self.done = True
        if up is not None and r is not None:
            if self.unblocking:
                self.parked = up
            else:
                self._keep(up)
        self.b.answered(self, r)

    def _keep(self, up: Upstream) -> None:
        idle = _idle(self.b.read.router, self.pool)
        if self.node_id is not None and not up.closed and not up.waiting and len(idle) < 64:
            idle.append((up, self.node_id))  # its node client ID stays known
        else:
            up.close()

    def cancel(self) -> None:
        if self.done or self.cancelled:
            return
        self.cancelled = True
        if self.node_id is not None:
            self._unblock()

    def _unblock(self) -> None:
        self.unblocking = True
        up = self.pool.get(0)
        up.send(encode_command([b"CLIENT", b"UNBLOCK", self.node_id or b""]), self._unblocked)

    def _unblocked(self, _r: bytes | None) -> None:
        self.unblocking = False
        up, self.parked = self.parked, None
        if up is not None:
            self._keep(up)


def _ignore(_r: bytes | None) -> None:
    pass


def _idle(router: Router, pool: Pool) -> list[tuple[Upstream, bytes]]:
    """Dedicated connections to `pool`'s node kept for blocked partition reads, each with
    the client ID the node gave it, so that a reused one needs no CLIENT ID."""
    by_pool: dict[tuple[str, int, int], list[tuple[Upstream, bytes]]] | None = \
        router.__dict__.get("pstream_idle")
    if by_pool is None:
        by_pool = router.__dict__["pstream_idle"] = {}
    return by_pool.setdefault((pool.addr[0], pool.addr[1], id(pool)), [])


