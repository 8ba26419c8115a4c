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
from node.commands.entryreplies import encode_span, entry_reply, fields_hdr
from node.commands.groups import (
    lookup_or_create_consumer,
    plain_uint,
    propagate_group_id,
    propagate_xclaim,
    xclaim_run_len,
)
from node.groups import LLONG_MAX, Consumer, ConsumerGroup
from node.resp import ReplyError, null_array
from node.stream import Stream
from node.streamid import MAX_ID, format_id, parse_id_or_error

if cython.compiled:  # called as C
    from cython.cimports.node.commands.entryreplies import encode_entries, stream_range_reply
else:
    from node.commands.entryreplies import encode_entries, stream_range_reply

# ">" is stored as the maximal ID, as Redis does (an explicit max ID therefore acts as ">").
_NEW = MAX_ID

# A read's reply headers, formatted once: [key, entries] (RESP2) or a map entry (RESP3) for
# keys under 256 bytes, and the outer array or map for up to 15 streams.
_KEY2 = [b"*2\r\n$%d\r\n" % n for n in range(256)]
_KEY3 = [b"$%d\r\n" % n for n in range(256)]
_ARRAY2 = [b"*%d\r\n" % n for n in range(16)]
_MAP3 = [b"%%%d\r\n" % n for n in range(16)]


XReadOptions = tuple[int, int, bool, int, int, bytes | None, bytes, int, int]


def parse_xread_options(argv: list[bytes], now_ms: int) -> XReadOptions:
    """xreadCommand's option loop: (timeout ms or -1, count, noack, index of the first key,
    number of keys, group or None, consumer, index of BLOCK's value or 0, CLAIM's
    min-idle-time or -1). Raises Redis's
    error for the first bad option, in Redis's order. The router reads XREAD/XREADGROUP with
    it too (BLOCK, and a multi-shard read's errors before any shard sees it)."""
    argc = len(argv)
    xreadgroup = len(argv[0]) == 10
    timeout = -1
    count = 0
    noack = False
    streams_arg = 0
    nkeys = 0
    groupname: bytes | None = None
    consumername = b""
    block_arg = 0
    claim = -1
    i = 1
    while i < argc:
        moreargs = argc - i - 1
        o = argv[i].lower()
        if o == b"block" and moreargs:
            i += 1
            block_arg = i
            timeout = plain_uint(argv[i])
            if timeout < 0:
                timeout = errors.parse_timeout_ms_or_error(argv[i])
            if timeout > errors.LLONG_MAX - now_ms:
                raise ReplyError(errors.TIMEOUT_OUT_OF_RANGE)
        elif o == b"count" and moreargs:
            i += 1
            count = plain_uint(argv[i])
            if count < 0:
                count = max(errors.parse_int_or_error(argv[i]), 0)
        elif o == b"streams" and moreargs:
            streams_arg = i + 1
            n = argc - streams_arg
            if n % 2:
                raise ReplyError(errors.unbalanced_streams(xreadgroup))
            nkeys = n // 2
            break
        elif o == b"group" and moreargs >= 2:
            if not xreadgroup:
                raise ReplyError(errors.GROUP_ONLY_XREADGROUP)
            groupname = argv[i + 1]
            consumername = argv[i + 2]
            i += 2
        elif o == b"noack":
            if not xreadgroup:
                raise ReplyError(errors.NOACK_ONLY_XREADGROUP)
            noack = True
        elif o == b"claim" and moreargs:
            if not xreadgroup:
                raise ReplyError(errors.CLAIM_ONLY_XREADGROUP)
            i += 1
            claim = errors.parse_int_or_error(argv[i], errors.CLAIM_MIN_IDLE)
            if claim < 0:
                raise ReplyError(errors.CLAIM_MIN_IDLE)
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    if streams_arg == 0:
        raise ReplyError(errors.SYNTAX)
    if xreadgroup and groupname is None:
        raise ReplyError(errors.MISSING_GROUP)
    return timeout, count, noack, streams_arg, nkeys, groupname, consumername, block_arg, claim


def _has_new(s: Stream, g: ConsumerGroup) -> bool:
    """Whether `>` finds an entry for the group: the stream has one after the group's last
    delivered ID. Redis compares with the last live entry; last_id bounds it from above, and
    serving a range that holds none has no effect, so the caller's empty result settles it.
    Compiled, a C inline (reads.pxd)."""
    return s.length != 0 and s.last_id > g.last_id


def xread(c: Client, argv: list[bytes]) -> bytes:
    """XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]
    XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK] [CLAIM min-idle-time]
               STREAMS key [key ...] id [id ...]"""
    xreadgroup = len(argv[0]) == 10
    timeout, count, noack, streams_arg, nkeys, groupname, consumername, _, claim = \
        parse_xread_options(argv, c.server.now_ms())

    keys = argv[streams_arg:streams_arg + nkeys]
    db = c.db
    streams: list[Stream | None] = []
    groups: list[ConsumerGroup] = []
    ids: list[int] = []
    dollars: list[int] = []  # positions of '$' in argv, resolved if we block
    for idx in range(nkeys):
        key = keys[idx]
        arg = argv[streams_arg + nkeys + idx]
        try:
            s = db.get_stream(key)
        except ReplyError:
            if c.rerunning and groupname is None:
                # Redis re-runs XREAD only for keys that hold a stream: keep waiting.
                raise Blocked(keys, timeout, argv) from None
            raise
        streams.append(s)
        if groupname is not None:
            g = s.groups.get(groupname) if s is not None else None
            if g is None:
                raise ReplyError(errors.nogroup_xreadgroup(key, groupname))
            groups.append(g)
        if arg == b"$":
            if xreadgroup:
                raise ReplyError(errors.DOLLAR_IN_XREADGROUP)
            ids.append(s.last_id if s is not None else 0)
            dollars.append(streams_arg + nkeys + idx)
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

    # Serve synchronously what we can.
    proto = c.proto
    parts: list[bytes] = [b""]  # the reply's header, once the count of streams is known
    served = 0
    for idx in range(nkeys):
        s = streams[idx]
        if s is None:
            continue
        gt = ids[idx]
        if groupname is not None:
            g = groups[idx]
            key = keys[idx]
            history = gt != _NEW
            # 7.2+: the consumer is created and seen even when nothing is served.
            cons = lookup_or_create_consumer(c, key, groupname, g, consumername)
            if history:
                n, body = _serve_history(c, s, g, cons, key, groupname, gt + 1, count)
            elif claim >= 0:
                # Redis 8.4: idle pending entries first, then new ones, all as 4 elements.
                n, body = _serve_claim(c, s, g, cons, key, groupname, claim, count)
                if (not count or n < count) and _has_new(s, g):
                    n2, body2 = serve_new(c, s, g, cons, key, groupname, g.last_id + 1,
                                          count - n if count else 0, noack, True)
                    n += n2
                    body += body2
                if not n:
                    continue
            else:
                if not _has_new(s, g):
                    continue
                n, body = serve_new(c, s, g, cons, key, groupname, g.last_id + 1, count, noack)
                if not n:
                    continue
        else:
            if not s.length or s.last_valid_id() <= gt:
                continue
            n, body = stream_range_reply(s, gt + 1, MAX_ID, count or None, False)
        key = keys[idx]
        served += 1
        # [key, entries] (RESP2) or a map entry (RESP3), the entries copied once, by the join.
        klen = len(key)
        parts += [(_KEY2 if proto == 2 else _KEY3)[klen] if klen < 256 else
                  (b"*2\r\n$%d\r\n" if proto == 2 else b"$%d\r\n") % klen,
                  key, fields_hdr(n), body]
    if served:
        parts[0] = ((_ARRAY2 if proto == 2 else _MAP3)[served] if served < 16 else
                    (b"*%d\r\n" if proto == 2 else b"%%%d\r\n") % served)
        return b"".join(parts)

    if timeout != -1:
        if dollars:
            argv = list(argv)
            for pos in dollars:
                argv[pos] = format_id(ids[pos - streams_arg - nkeys])
        if groupname is not None and claim < 0 and consumername is not None:
            raise Blocked(keys, timeout, argv, recheck=still_unserved,
                          group=(groupname, consumername))
        raise Blocked(keys, timeout, argv)
    return null_array(proto)


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


def serve_new(c: Client, s: Stream, g: ConsumerGroup, cons: Consumer, key: bytes,
              groupname: bytes, start: int, count: int, noack: bool, claim: bool = False
              ) -> tuple[int, bytes]:
    """streamReplyWithRange with a group: deliver entries after the group's last ID. With
    `claim` (XREADGROUP ... CLAIM) each entry has two more elements, 0 and 0: never
    delivered before."""
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
    for sids, ents in s.range_chunks(start, MAX_ID, count or None, False,
                                     None if claim else encode_span):
        n += len(sids)
        if metrics is not None:
            metrics.streams.observe_delivery(key, groupname, sids, now)
        if claim:
            parts += [b"*4" + entry_reply(sid, f)[2:] + b":0\r\n:0\r\n"
                      for sid, f in zip(sids, ents, strict=True)]
        else:
            parts.append(ents if type(ents) is bytes else encode_entries(sids, ents))
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
        if not noack:
            cons.active_time = now
    if moved:
        # Redis sends this for NOACK only, and replicas of its XCLAIM ... LASTID effects lose
        # the group's entries_read. One SETID per read keeps them exact.
        propagate_group_id(c, key, groupname, g)
    if n:
        server.dirty += 1  # one change per stream served, however many entries (Redis 7.4)
    return n, b"".join(parts)


def _serve_history(c: Client, s: Stream, g: ConsumerGroup, cons: Consumer, key: bytes, groupname: bytes,
                   start: int, count: int) -> tuple[int, bytes]:
    """streamReplyWithRangeFromConsumerPEL: the consumer's own pending entries from `start`.

    An entry deleted from the stream is reported as [id, nil]. A served one is delivered
    again (count + 1, time now); Redis does not propagate this, we do, as XCLAIM. It is no
    change in Redis 7.4's count either (rdb_changes_since_last_save): `dirty` stays.
    """
    now = c.server.now_ms()
    sids = list(islice(cons.pel.irange(start, None), count or None))
    out: list[bytes] = []
    nil = b"*-1\r\n" if c.proto == 2 else b"_\r\n"
    for sid in sids:
        fields = s.get(sid)
        if fields is None:
            ids = format_id(sid)
            out.append(b"*2\r\n$%d\r\n%s\r\n%s" % (len(ids), ids, nil))
        else:
            out.append(entry_reply(sid, fields))
            nack = g.redeliver(sid, now)
            propagate_xclaim(c, key, groupname, g, sid, nack)
    return len(sids), b"".join(out)



def _serve_claim(c: Client, s: Stream, g: ConsumerGroup, cons: Consumer, key: bytes,
                 groupname: bytes, min_idle: int, count: int) -> tuple[int, bytes]:
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
            out.append(b"*4" + entry_reply(sid, fields)[2:]
                       + b":%d\r\n:%d\r\n" % (max(now - t, 0), dc))
            n += 1
        # Another look only when entries that were gone left COUNT unfilled.
        if not sids or not count or n == count:
            break
    if n:
        cons.active_time = now
        c.server.dirty += 1
    return n, b"".join(out)
