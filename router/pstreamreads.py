"""XREAD and XREADGROUP on partitioned streams at the router (router/pstreams.py has the
record, the other commands and the helpers both use).

A read asks every partition of each logical key and merges in ID order, COUNT applying to
the total. XREADGROUP `>` never loses a delivery: its rounds ask the partitions for no more
than COUNT leaves, and with BLOCK every partition blocks, the first answer wins and the others
are ended with CLIENT UNBLOCK. Entries a partition delivered after the read was answered stay
pending for the consumer, and the router remembers where (`Handover`): the consumer's next read
through this router reads them back from its history first. With NOACK nothing is pending, so
the router keeps their bytes instead. That next read starts only once every partition of the
blocked read has answered (`PStream.late`): a late entry is older than anything its partition
can deliver next, and would otherwise reach the consumer after a newer one.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from node.resp import (
    encode_command,
    error,
    error_code,
    null_array,
    reply_elements,
)
from node.slots import key_slot
from node.streamid import format_id
from router.forward import Forward

if TYPE_CHECKING:
    from node.commands.reads import XReadOptions
    from router.client import Cell, RouterClient
    from router.proxy import Router
    from router.upstream import Pool, Upstream
from router.pstreams import (  # the record and the helpers every command uses
    MIXED_BLOCK,
    Handover,
    PStream,
    _array,
    _entry_id,
    _first_error,
    _merged,
    _read_entries,
    _read_reply,
    _refuse,
    _renamed,
    _send,
    _share,
)

__all__ = ["run_xread", "keep", "hand_over"]


def run_xread(router: Router, c: RouterClient, argv: list[bytes], options: XReadOptions,
              cell: Cell) -> bool:
    """XREAD/XREADGROUP naming a logical stream (False when none is): see read_keys."""
    first, nkeys = options.first_key, options.nkeys
    pstreams = router.pstreams
    keys = argv[first:first + nkeys]
    named = [pstreams[k] for k in keys if k in pstreams]
    if not named:
        return False
    if options.maxcount or options.maxsize:  # Redis 8.10's caps: not split over partitions yet
        _refuse(c, cell, argv[0].upper() + b" with MAXCOUNT or MAXSIZE", named[0])
        return True
    Read(router, c, argv, options, cell).start()
    return True


class Read:
    """One XREAD/XREADGROUP over logical and plain keys. Each client key is read on its own
    (COUNT is per key, as in Redis): a plain key by one request, a logical one on its
    partitions (XREADGROUP `>`: see the module docstring). With BLOCK and nothing to answer
    at once, every partition blocks (`Blocked`)."""

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

    def start(self) -> None:
        pstreams = self.router.pstreams
        if self.timeout >= 0:
            self.c.conn.stall()  # type: ignore[union-attr]
            if self.group is not None and len(self.keys) > 1:
                return self._reply(error(MIXED_BLOCK))
        for i, k in enumerate(self.keys):
            ps = pstreams.get(k)
            if ps is None:
                self._plain(i, k)
            elif self.group is None:
                self._xread(i, ps)
            elif self.ids[i] == b">":
                GroupRead(self, i, ps).start()
            else:
                self._history(i, ps)
        return None

    def _req(self, key: bytes, sid: bytes, count: int | None = None) -> list[bytes]:
        """The read of one key without BLOCK, with COUNT `count` (None: the client's)."""
        n = self.count if count is None else count
        out = [self.argv[0]]
        if self.group is not None:
            out += [b"GROUP", self.group, self.consumer]
        if n:
            out += [b"COUNT", b"%d" % n]
        if self.noack:
            out.append(b"NOACK")
        if self.claim >= 0:
            out += [b"CLAIM", b"%d" % self.claim]
        return out + [b"STREAMS", key, sid]

    def _plain(self, i: int, k: bytes) -> None:
        Forward(self.router, self.c, encode_command(self._req(k, self.ids[i])), key_slot(k),
                self.group is not None, done=partial(self._plain_done, i)).send()

    def _plain_done(self, i: int, r: bytes) -> None:
        self.got(i, r if error_code(r) is not None else _read_entries(r))

    def _xread(self, i: int, ps: PStream) -> None:
        sid = self.ids[i]
        reqs = [(s, self._req(k, sid)) for k, s in zip(ps.keys, ps.slots, strict=True)]
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
        self.left -= 1
        if self.left:
            return
        for res in self.results:
            if isinstance(res, bytes):
                return self._reply(res)
        items = list(zip(self.keys, self.results, strict=True))
        if self.timeout < 0 or self.shown or any(e for _, e in items):
            return self._reply(_read_reply(items, self.c.proto, self.shown))  # type: ignore[arg-type]
        Blocked(self).start()
        return None

    def _reply(self, r: bytes) -> None:
        self.over = True
        conn = self.c.conn
        if conn is not None:
            conn.fill(self.cell, r)
            if self.timeout >= 0:
                conn.resume()


class GroupRead:
    """XREADGROUP `>` on one logical stream: first what was handed over, then rounds of new
    entries. A round asks every candidate partition for an even share of what COUNT leaves
    (all of it without COUNT); a partition that returns its whole share may have more and
    stays a candidate. Rounds ask for no more than COUNT leaves, so only a hand-over read
    (which asks for all that was handed over) can come back with more than COUNT: the rest is
    handed over again."""

    def __init__(self, read: Read, i: int, ps: PStream) -> None:
        self.read, self.i, self.ps = read, i, ps
        self.key = (read.group or b"", read.consumer)
        self.got: dict[int, list[bytes]] = {}  # partition -> entries, in its order
        self.total = 0
        self.error: bytes | None = None
        # A partition answered: a NOGROUP elsewhere is a partition added since the group
        # was made (its group comes with `alter`), not the client's error.
        self.answered = False

    def start(self) -> None:
        late = self.ps.late.get(self.key)
        if late is not None:  # the consumer's last blocked read has partitions to answer
            late[1].append(self.start)
            return None
        ho = self.ps.handover.pop(self.key, None)
        if not ho:
            return self.round(self._live())
        r = self.read
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
        count = self.read.count
        if count and self.total >= count:
            return self.finish()
        return self.round([p for p in self._live() if p not in self.got])

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
        if self.error is None and count and self.total < count and (later or full):
            return self.round(later + full)
        return self.finish()

    def _add(self, p: int, es: list[bytes]) -> None:
        if es:
            self.got.setdefault(p, []).extend(es)
            self.total += len(es)

    def finish(self) -> None:
        r = self.read
        taken = keep(self.ps, self.key, self.got, r.count, r.noack)
        err = self.error
        if err is not None and not taken and not (self.answered and error_code(err) == b"NOGROUP"):
            return r.got(self.i, err)
        r.got(self.i, taken)
        return None


def _plain_read(argv: list[bytes]) -> list[bytes]:
    """A hand-over read: the same XREADGROUP without NOACK (a history read ignores it)."""
    return [a for a in argv if a.lower() != b"noack"]


def keep(ps: PStream, key: tuple[bytes, bytes], got: dict[int, list[bytes]], count: int,
         noack: bool) -> list[bytes]:
    """The first `count` of the partitions' deliveries in ID order (all without COUNT); the
    rest is handed over to the consumer's next read: each partition's rest is the end of its
    list, pending after the ID before its first entry."""
    merged = _merged([es for es in got.values()])
    if not count or len(merged) <= count:
        return merged
    taken = merged[:count]
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


class Blocked:
    """A read with BLOCK that found nothing: every partition (and plain key) blocks on a
    dedicated upstream connection of its own. The first answer with entries is the reply.
    The other parts are unblocked with CLIENT UNBLOCK (the node's client ID is asked first,
    on the same connection), so each of them answers: nothing, or entries it delivered in the
    meantime. An XREADGROUP's late entries are handed over, so none is lost."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.parts: list[BlockPart] = []
        self.over = False
        self.left = 0

    def start(self) -> None:
        r = self.read
        r.c.blocked = self
        pstreams = r.router.pstreams
        timeout = r.argv[r.block_at]
        for i, k in enumerate(r.keys):
            ps = pstreams.get(k)
            sid = r.ids[i]
            targets = (list(zip(ps.keys, ps.slots, range(ps.n), strict=True)) if ps is not None
                       else [(k, key_slot(k), -1)])
            share = None
            if r.count and ps is not None and r.group is not None:
                share = _share(r.count, ps.n)
            for real, slot, p in targets:
                pool = r.router.primary_pool(slot, r.c.proto)
                if pool is None:
                    continue
                head = r._req(real, sid, share)
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
            if part.ps is not None and rd.group is not None:
                es = keep(part.ps, (rd.group, rd.consumer), {part.p: es}, rd.count, rd.noack)
            elif rd.count:
                es = es[:rd.count]
            return self.finish(_read_reply([(key, es)], rd.c.proto))
        if self.left == 0:
            self.finish(null_array(rd.c.proto))
        return None

    def finish(self, reply: bytes | None) -> None:
        if self.over:
            return
        self.over = True
        rd = self.read
        for part in self.parts:
            if rd.group is not None and part.ps is not None and not part.done:
                part.ps.late.setdefault((rd.group, rd.consumer), [0, []])[0] += 1
            part.cancel()
        rd.c.blocked = None
        if reply is not None:
            rd._reply(reply)
        else:
            rd.over = True


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

    def issue(self) -> None:
        idle = _idle(self.b.read.router, self.pool)
        while idle:
            up, nid = idle.pop()
            if not up.closed and not up.waiting:
                self.up, self.node_id = up, nid
                break
        else:
            self.up = up = self.pool.get_dedicated()
            up.send(b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n", self._id)
        up.send(encode_command(self.argv), self._reply)

    def _id(self, r: bytes | None) -> None:
        if r is not None and r[:1] == b":":
            self.node_id = r[1:-2]
            if self.cancelled and not self.done:
                self._unblock()

    def _reply(self, r: bytes | None) -> None:
        self.done = True
        up, self.up = self.up, None
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


def _idle(router: Router, pool: Pool) -> list[tuple[Upstream, bytes]]:
    """Dedicated connections to `pool`'s node kept for blocked partition reads, each with
    the client ID the node gave it, so that a reused one needs no CLIENT ID."""
    by_pool: dict[tuple[str, int, int], list[tuple[Upstream, bytes]]] | None = \
        router.__dict__.get("pstream_idle")
    if by_pool is None:
        by_pool = router.__dict__["pstream_idle"] = {}
    return by_pool.setdefault((pool.addr[0], pool.addr[1], id(pool)), [])


