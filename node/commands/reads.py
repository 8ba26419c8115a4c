"""XREAD and XREADGROUP: one generic function, as xreadCommand in Redis 7.4 t_stream.c.

Blocking follows Redis 7.2+, where a blocked reader is simply re-run when one of its keys is
ready: with BLOCK and nothing to serve we raise `Blocked` with `$` replaced by the stream's
last ID at block time (so a re-run reads what arrived since, not what arrives after the
re-run). A re-run XREADGROUP whose key was deleted or whose group was destroyed replies with
the NOGROUP error, and WRONGTYPE if the key now holds another type (7.0 replied
"-UNBLOCKED the stream key no longer exists" instead). A re-run XREAD that finds a key of
another type keeps waiting, because Redis only re-runs XREAD for keys that hold a stream.

Effects: every entry delivered to a consumer goes out as XCLAIM, a cursor move as XGROUP
SETID with ENTRIESREAD, a new consumer as XGROUP CREATECONSUMER (see node.commands.groups).
"""

from __future__ import annotations

from itertools import islice
from time import time_ns

import cython

from node import errors
from node.blocking import Blocked
from node.client import Client
from node.commands import command
from node.commands.entryreplies import claimed_entry_reply, encode_span, entry_reply, fields_hdr
from node.commands.groups import (
    lookup_or_create_consumer,
    plain_uint,
    propagate_group_id,
    propagate_xclaim,
    xclaim_run_len,
)
from node.groups import LLONG_MAX, Consumer, ConsumerGroup
from node.resp import ReplyError, array_header, bulk, null_array
from node.stream import Stream
from node.streamid import MAX_ID, format_id, parse_id_or_error

if cython.compiled:  # called as C
    from cython.cimports.node.commands.entryreplies import encode_entries, stream_range_reply
    from cython.cimports.node.resp import keyed_header, keyed_key_header
else:
    from node.commands.entryreplies import encode_entries, stream_range_reply
    from node.resp import keyed_header, keyed_key_header

# ">" is stored as the maximal ID, as Redis does (an explicit max ID therefore acts as ">").
_NEW = MAX_ID


class XReadOptions:
    """What xreadCommand's option loop read (`parse_xread_options`), by name. Compiled, a C
    struct (reads.pxd): the node and the router read its fields as C members."""

    __slots__ = ("timeout", "count", "noack", "first_key", "nkeys", "group", "consumer",
                 "block_at", "claim", "maxcount", "maxsize")

    def __init__(self) -> None:
        self.timeout = -1  # BLOCK ms; -1: no BLOCK
        self.count = 0  # COUNT, the cap per stream; 0: none
        self.noack = False
        self.first_key = 0  # argv index of the first key (after STREAMS)
        self.nkeys = 0
        self.group: bytes | None = None  # XREADGROUP's group; None for XREAD
        self.consumer = b""
        self.block_at = 0  # argv index of BLOCK's value; 0: no BLOCK
        self.claim = -1  # CLAIM's min-idle-time; -1: no CLAIM
        self.maxcount = 0  # MAXCOUNT (8.10), the cap across streams; 0: none
        self.maxsize = 0  # MAXSIZE (8.10), the soft cap on the reply's bytes; 0: none



def _positive_or_error(b: bytes, error: bytes) -> int:
    """MAXCOUNT's and MAXSIZE's value: an integer >= 1, else `error` (0 is Redis 8.10's
    documented case; negative and non-integer values get the same text, our choice)."""
    v = plain_uint(b)
    if v < 0:
        v = errors.parse_int_or_error(b, error)
    if v < 1:
        raise ReplyError(error)
    return v


def _block_ms(b: bytes, now_ms: int) -> int:
    """BLOCK's value in ms, with Redis's errors (a negative or too large timeout)."""
    timeout = plain_uint(b)
    if timeout < 0:
        timeout = errors.parse_timeout_ms_or_error(b)
    if timeout > errors.LLONG_MAX - now_ms:
        raise ReplyError(errors.TIMEOUT_OUT_OF_RANGE)
    return timeout


def _new_options() -> XReadOptions:
    """XReadOptions' defaults; compiled, the C struct with its fields zeroed and no call of
    __init__ (a routed read makes one per request)."""
    if cython.compiled:
        o = XReadOptions.__new__(XReadOptions)
        o.timeout = o.claim = -1
        o.consumer = b""
        return o
    return XReadOptions()


def parse_xread_options(argv: list[bytes], now_ms: int) -> XReadOptions:
    """xreadCommand's option loop. Raises Redis's error for the first bad option, in Redis's
    order; MAXCOUNT below COUNT is checked once every option is read. The router reads
    XREAD/XREADGROUP with it too (BLOCK, the caps, and a multi-shard read's errors before
    any shard sees it)."""
    argc = len(argv)
    xreadgroup = len(argv[0]) == 10
    o = _new_options()
    i = 1
    while i < argc:
        moreargs = argc - i - 1
        opt = argv[i].lower()
        if opt == b"block" and moreargs:
            i += 1
            o.block_at = i
            o.timeout = _block_ms(argv[i], now_ms)
        elif opt == b"count" and moreargs:
            i += 1
            count = plain_uint(argv[i])
            o.count = count if count >= 0 else max(errors.parse_int_or_error(argv[i]), 0)
        elif opt == b"streams" and moreargs:
            o.first_key = i + 1
            n = argc - o.first_key
            if n % 2:
                raise ReplyError(errors.unbalanced_streams(xreadgroup))
            o.nkeys = n // 2
            break
        elif opt == b"group" and moreargs >= 2:
            if not xreadgroup:
                raise ReplyError(errors.GROUP_ONLY_XREADGROUP)
            o.group = argv[i + 1]
            o.consumer = argv[i + 2]
            i += 2
        elif opt == b"noack":
            if not xreadgroup:
                raise ReplyError(errors.NOACK_ONLY_XREADGROUP)
            o.noack = True
        elif opt == b"claim" and moreargs:
            if not xreadgroup:
                raise ReplyError(errors.CLAIM_ONLY_XREADGROUP)
            i += 1
            o.claim = errors.parse_int_or_error(argv[i], errors.CLAIM_MIN_IDLE)
            if o.claim < 0:
                raise ReplyError(errors.CLAIM_MIN_IDLE)
        elif opt == b"maxcount" and moreargs:
            i += 1
            o.maxcount = _positive_or_error(argv[i], errors.MAXCOUNT_POSITIVE)
        elif opt == b"maxsize" and moreargs:
            i += 1
            o.maxsize = _positive_or_error(argv[i], errors.MAXSIZE_POSITIVE)
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    if o.first_key == 0:
        raise ReplyError(errors.SYNTAX)
    if xreadgroup and o.group is None:
        raise ReplyError(errors.MISSING_GROUP)
    if o.maxcount and o.maxcount < o.count:
        raise ReplyError(errors.MAXCOUNT_BELOW_COUNT)
    return o


def _has_new(s: Stream, g: ConsumerGroup) -> bool:
    """Whether `>` finds an entry for the group: the stream has one after the group's last
    delivered ID. Redis compares with the last live entry; last_id bounds it from above, and
    serving a range that holds none has no effect, so the caller's empty result settles it.
    Compiled, a C inline (reads.pxd)."""
    return s.length != 0 and s.last_id > g.last_id


def _resolve_ids(c: Client, argv: list[bytes], o: XReadOptions, keys: list[bytes],
                 streams: list, groups: list, ids: list, dollars: list) -> None:
    """xreadCommand's first loop: each key's stream (and group), and its ID resolved (`$`,
    `>`, `+`), with Redis's errors in Redis's order; fills the four lists."""
    xreadgroup = o.group is not None
    first_id = o.first_key + o.nkeys
    db = c.db
    for idx in range(o.nkeys):
        key = keys[idx]
        arg = argv[first_id + idx]
        try:
            s = db.get_stream(key)
        except ReplyError:
            if c.rerunning and not xreadgroup:
                # Redis re-runs XREAD only for keys that hold a stream: keep waiting.
                raise Blocked(keys, o.timeout, argv) from None
            raise
        streams.append(s)
        if xreadgroup:
            g = s.groups.get(o.group) if s is not None else None
            if g is None:
                raise ReplyError(errors.nogroup_xreadgroup(key, o.group))
            groups.append(g)
        if arg == b"$":
            if xreadgroup:
                raise ReplyError(errors.DOLLAR_IN_XREADGROUP)
            ids.append(s.last_id if s is not None else 0)
            dollars.append(first_id + idx)
        elif arg == b">":
            if not xreadgroup:
                raise ReplyError(errors.GT_IN_XREAD)
            ids.append(_NEW)
        elif arg == b"+":
            # 7.4: the last entry. Resolved to "after last_id - 1", as Redis does.
            if xreadgroup:
                raise ReplyError(errors.PLUS_IN_XREADGROUP)
            if s is not None:
                if s.last_id == 0:
                    raise ReplyError(errors.PLUS_ON_ZERO)
                ids.append(s.last_id - 1)
            else:
                ids.append(0)
        else:
            ids.append(parse_id_or_error(arg, 0, strict=True))


def xread(c: Client, argv: list[bytes]) -> bytes:
    """XREAD [COUNT count] [MAXCOUNT n] [MAXSIZE bytes] [BLOCK ms] STREAMS key [key ...] id [id ...]
    XREADGROUP GROUP group consumer [COUNT count] [MAXCOUNT n] [MAXSIZE bytes] [BLOCK ms]
               [CLAIM min-idle-time] [NOACK] STREAMS key [key ...] id [id ...]

    MAXCOUNT and MAXSIZE (Redis 8.10) cap the whole reply: streams are served in key order,
    each with at most min(COUNT, what MAXCOUNT has left) entries, and once a cap is reached
    the remaining streams are left out. MAXSIZE is soft (`_Budget`)."""
    o = parse_xread_options(argv, c.server.now_ms())
    nkeys = o.nkeys
    keys = argv[o.first_key:o.first_key + nkeys]
    streams: list[Stream | None] = []
    groups: list[ConsumerGroup] = []
    ids: list[int] = []
    dollars: list[int] = []  # positions of '$' in argv, resolved if we block
    _resolve_ids(c, argv, o, keys, streams, groups, ids, dollars)

    # Serve synchronously what we can.
    proto = c.proto
    parts: list[bytes] = [b""]  # the reply's header, once the count of streams is known
    served = 0
    left = o.maxcount  # what MAXCOUNT has left (0: no cap)
    budget = _Budget(o.maxsize) if o.maxsize else None
    count = o.count
    for idx in range(nkeys):
        s = streams[idx]
        if s is None:
            continue
        if left:
            count = o.count if o.count and o.count < left else left
        if budget is not None and budget.spent():
            break  # MAXSIZE: checked before each stream
        key = keys[idx]
        head = keyed_key_header(len(key), proto)
        if budget is not None:
            budget.used += len(head) + len(key) + 2  # the header, the key and its CRLF
        if o.group is not None:
            n, body = _serve_group(c, s, groups[idx], key, o, ids[idx], count, budget)
        else:
            n, body = _serve_plain(s, ids[idx], count, budget)
        if n < 0:  # nothing to serve in this stream: no header (and no bytes) for it
            if budget is not None:
                budget.used -= len(head) + len(key) + 2
            continue
        served += 1
        # [key, entries] (RESP2) or a map entry (RESP3), the entries copied once, by the join.
        parts += [head, key, fields_hdr(n), body]
        if left:
            left -= n
            if not left:
                break  # MAXCOUNT spent: the remaining streams are left out
    if served:
        parts[0] = keyed_header(served, proto)
        return b"".join(parts)
    return _block_or_nil(c, argv, o, keys, ids, dollars)


def _serve_plain(s: Stream, gt: int, count: int, budget: _Budget | None) -> tuple[int, bytes]:
    """XREAD of one stream: entries after `gt`; (-1, b"") when there are none."""
    if not s.length or s.last_valid_id() <= gt:
        return -1, b""
    if budget is None:
        return stream_range_reply(s, gt + 1, MAX_ID, count or None, False)
    out: list[bytes] = []
    for sids, ents in s.range_chunks(gt + 1, MAX_ID, count or None, False, None):
        for sid, f in zip(sids, ents, strict=True):
            if out and budget.spent():
                return len(out), b"".join(out)
            e = entry_reply(sid, f)
            budget.add(len(e))
            out.append(e)
    return len(out), b"".join(out)


def _serve_group(c: Client, s: Stream, g: ConsumerGroup, key: bytes, o: XReadOptions, gt: int,
                 count: int, budget: _Budget | None) -> tuple[int, bytes]:
    """XREADGROUP of one stream: its history (an ID), its idle entries and then its new ones
    (CLAIM), or its new ones (`>`); (-1, b"") when `>` finds nothing."""
    groupname = o.group
    # 7.2+: the consumer is created and seen even when nothing is served.
    cons = lookup_or_create_consumer(c, key, groupname, g, o.consumer)
    if gt != _NEW:
        return _serve_history(c, s, g, cons, key, groupname, gt + 1, count, budget)
    if o.claim >= 0:
        # Redis 8.4: idle pending entries first, then new ones, all as 4 elements.
        n, body = _serve_claim(c, s, g, cons, key, groupname, o.claim, count, budget)
        if (not count or n < count) and _has_new(s, g) and (budget is None or not n
                                                             or not budget.spent()):
            n2, body2 = serve_new(c, s, g, cons, key, groupname, g.last_id + 1,
                                  count - n if count else 0, o.noack, True, budget, n == 0)
            n += n2
            body += body2
        return (n, body) if n else (-1, b"")
    if not _has_new(s, g):
        return -1, b""
    n, body = serve_new(c, s, g, cons, key, groupname, g.last_id + 1, count, o.noack, False,
                        budget)
    return (n, body) if n else (-1, b"")


def _block_or_nil(c: Client, argv: list[bytes], o: XReadOptions, keys: list[bytes],
                  ids: list[int], dollars: list[int]) -> bytes:
    """Nothing was served: block (BLOCK, with `$` pinned to the IDs it meant now) or nil."""
    if o.timeout == -1:
        return null_array(c.proto)
    if dollars:
        argv = list(argv)
        base = o.first_key + o.nkeys
        for pos in dollars:
            argv[pos] = format_id(ids[pos - base])
    if o.group is not None and o.claim < 0:
        raise Blocked(keys, o.timeout, argv, recheck=still_unserved,
                      group=(o.group, o.consumer))
    raise Blocked(keys, o.timeout, argv)


class _Budget:
    """MAXSIZE's count of the reply's bytes (Redis 8.10, a soft cap). Every byte written so
    far counts (key headers, IDs, fields, values, CRLFs) except the array or map lengths that
    are only known at the end (the outer one and each stream's entry count), as a reply
    buffer counts them when those are deferred. Output stops before an entry or a stream once
    at least one entry is written and the count has reached the cap: the first entry always
    comes back and the entry that crosses the cap is included. The first entry of a stream
    whose header was written is always written too (no stream with zero entries)."""

    __slots__ = ("maxsize", "used", "entries")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.used = 0
        self.entries = 0

    def spent(self) -> bool:
        return self.entries != 0 and self.used >= self.maxsize

    def add(self, nbytes: int) -> None:
        self.used += nbytes
        self.entries += 1


def still_unserved(c: Client, b: Blocked) -> bool:
    """Whether running a blocked `XREADGROUP ... STREAMS key... >` (no CLAIM) again would
    serve nothing: every key still a stream with the group and the consumer, none with an
    entry after the group's last ID (xread's test). If so, what that run would change is done
    here instead (the consumer's seen-time, set by every attempt as in Redis 7.2+, and the
    client's interaction time, Server.call) and the caller keeps the client parked; anything
    else (a key gone, expired or of another type, a group or consumer deleted) gets the
    whole run, with its error or its effects."""
    group = b.group
    if group is None:
        return False
    groupname, consumername = group
    server = c.server
    now = server.cmd_time_ms = time_ns() // 1000000  # as Server.call sets it for a run
    db = c.db
    conss = []
    for key in b.keys:
        try:
            s = db.get_stream(key)
        except ReplyError:
            return False
        if s is None:
            return False
        g = s.groups.get(groupname)
        if g is None:
            return False
        cons = g.consumers.get(consumername)
        if cons is None or _has_new(s, g):
            return False
        conss.append(cons)
    c.last_interaction_ms = now
    for cons in conss:
        cons.seen_time = now
    return True


command(b"xread", b"xreadgroup")(xread)  # not a decorator: compiled, xread is cpdef


def _take_within(budget: _Budget, sids: list[int], ents: list, claim: bool, parts: list,
                 forced: bool) -> tuple[list[int], bool]:
    """The entries of one node that MAXSIZE lets through, encoded into `parts`: (their IDs,
    whether the cap cut the node short)."""
    for k, (sid, f) in enumerate(zip(sids, ents, strict=True)):
        if not (forced and k == 0) and budget.spent():
            return sids[:k], True
        e = claimed_entry_reply(sid, f, 0, 0) if claim else entry_reply(sid, f)
        budget.add(len(e))
        parts.append(e)
    return sids, False


def serve_new(c: Client, s: Stream, g: ConsumerGroup, cons: Consumer, key: bytes,
              groupname: bytes, start: int, count: int, noack: bool, claim: bool = False,
              budget: _Budget | None = None, forced: bool = True) -> tuple[int, bytes]:
    """streamReplyWithRange with a group: deliver entries after the group's last ID. With
    `claim` (XREADGROUP ... CLAIM) each entry has two more elements, 0 and 0: never
    delivered before. With a MAXSIZE `budget`, entries are encoded one by one and those
    past the cap are neither delivered nor counted by the group (the first one is written
    anyway when `forced`: the stream's header is out)."""
    now = c.server.now_ms()
    n = 0
    parts: list[bytes] = []
    moved = False
    server = c.server
    # Without effect listeners an effect goes nowhere (Server.propagate), so the entries of a
    # node are delivered as one run, its XCLAIMs only counted in the offset; with listeners
    # (or inside a transaction, which collects its effects), or a slot move's tap
    # (node/slotmove.py) taking the effects of its keys, one XCLAIM each.
    # (A stand-in server without an EffectLog, as in the in-process tests, always records.)
    recording = getattr(server.effects, "recording", None)
    listening = recording is None or recording() or bool(getattr(server, "taps", None))
    metrics = getattr(server, "metrics", None)  # delivery latency (node/metrics.py)
    cut = False
    for sids, ents in s.range_chunks(start, MAX_ID, count or None, False,
                                     None if claim or budget is not None else encode_span):
        if budget is not None:
            sids, cut = _take_within(budget, sids, ents, claim, parts, forced and not n)
        elif claim:
            parts += [claimed_entry_reply(sid, f, 0, 0) for sid, f in zip(sids, ents, strict=True)]
        else:
            parts.append(ents if type(ents) is bytes else encode_entries(sids, ents))
        n += len(sids)
        if metrics is not None and sids:
            metrics.streams.observe_delivery(key, groupname, sids, now)
        if listening:
            for sid in sids:
                moved |= g.advance(s, sid)
                if not noack:
                    nack = g.deliver(sid, cons, now)
                    propagate_xclaim(c, key, groupname, g, sid, nack)
        else:
            moved |= g.advance_run(s, sids)
            if not noack:
                g.deliver_run(sids, cons, now)
                server.effects.skip(xclaim_run_len(key, groupname, cons.name, now, sids))
        if not noack and sids:
            cons.active_time = now
        if cut:
            break  # MAXSIZE reached: what follows stays undelivered
    if moved:
        # Redis sends this for NOACK only, and replicas of its XCLAIM ... LASTID effects lose
        # the group's entries_read. One SETID per read keeps them exact.
        propagate_group_id(c, key, groupname, g)
    if n:
        server.dirty += 1  # one change per stream served, however many entries (Redis 7.4)
    return n, b"".join(parts)


def _serve_history(c: Client, s: Stream, g: ConsumerGroup, cons: Consumer, key: bytes,
                   groupname: bytes, start: int, count: int, budget: _Budget | None = None
                   ) -> tuple[int, bytes]:
    """streamReplyWithRangeFromConsumerPEL: the consumer's own pending entries from `start`.

    An entry deleted from the stream is reported as [id, nil]. A served one is delivered
    again (count + 1, time now); Redis does not propagate this, we do, as XCLAIM. It is no
    change in Redis 7.4's count either (rdb_changes_since_last_save): `dirty` stays.
    """
    now = c.server.now_ms()
    sids = list(islice(cons.pel.irange(start, None), count or None))
    out: list[bytes] = []
    nil = null_array(c.proto)
    for sid in sids:
        if budget is not None and out and budget.spent():
            break  # MAXSIZE: what is not returned keeps its delivery count and time
        fields = s.get(sid)
        if fields is None:
            out.append(array_header(2) + bulk(format_id(sid)) + nil)
        else:
            out.append(entry_reply(sid, fields))
            nack = g.redeliver(sid, now)
            propagate_xclaim(c, key, groupname, g, sid, nack)
        if budget is not None:
            budget.add(len(out[-1]))
    return len(out), b"".join(out)



def _serve_claim(c: Client, s: Stream, g: ConsumerGroup, cons: Consumer, key: bytes,
                 groupname: bytes, min_idle: int, count: int, budget: _Budget | None = None
                 ) -> tuple[int, bytes]:
    """XREADGROUP ... CLAIM min-idle-time (Redis 8.4): pending entries of any consumer (or
    none: XNACK) idle at least `min_idle` ms go to `cons`, the longest idle first, each as
    [id, fields, ms since its last delivery, deliveries before this one]. NOACK does not
    apply: a claimed entry stays pending. An entry that is gone from the stream is dropped
    from the PEL and not counted, as XAUTOCLAIM does. Effects: one XCLAIM per entry."""
    now = c.server.now_ms()
    n = 0
    out: list[bytes] = []
    pel = g.pel
    done: set[int] = set()  # claimed or dropped: a second look must skip them
    while True:
        sids = [x for x in g.idle_pending(now, min_idle, count + len(done) if count else 0)
                if x not in done]
        for sid in sids:
            if count and n == count:
                break
            if budget is not None and n and budget.spent():
                count = n  # MAXSIZE: the rest is not claimed
                break
            done.add(sid)
            t, dc, _owner = pel[sid]
            fields = s.get(sid)
            if fields is None:
                propagate_xclaim(c, key, groupname, g, sid, (t, dc, cons.name))
                g.ack(sid)
                c.server.dirty += 1
                continue
            nack = g.set_nack(sid, cons, now, min(dc + 1, LLONG_MAX))
            propagate_xclaim(c, key, groupname, g, sid, nack)
            out.append(claimed_entry_reply(sid, fields, max(now - t, 0), dc))
            if budget is not None:
                budget.add(len(out[-1]))
            n += 1
        # Another look only when entries that were gone left COUNT unfilled.
        if not sids or not count or n == count:
            break
    if n:
        cons.active_time = now
        c.server.dirty += 1
    return n, b"".join(out)
