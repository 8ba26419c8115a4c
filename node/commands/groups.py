"""Consumer-group commands: XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM (Redis 7.4 t_stream.c).

Each handler is parse -> lookup -> engine (node.groups) -> reply -> effects, in Redis's order,
so that the same bad input gets the same error.

Effects (node/effects.py): every change of a pending entry goes out as one idempotent
`XCLAIM key group consumer 0 id TIME ms RETRYCOUNT n FORCE JUSTID LASTID last-id`
(streamPropagateXCLAIM), a cursor move as `XGROUP SETID key group id ENTRIESREAD n`
(streamPropagateGroupID), and a new consumer as `XGROUP CREATECONSUMER key group consumer`
(streamPropagateConsumerCreation). XACK and XGROUP go out verbatim. Unlike Redis we also emit
CREATECONSUMER for consumers that XCLAIM / XAUTOCLAIM / XREADGROUP create, so that a replica
or a replayed AOF has exactly the same consumers.

WATCH: Redis does not call signalModifiedKey for group-only changes (XREADGROUP, XACK, XCLAIM,
XAUTOCLAIM, XGROUP without MKSTREAM), so they do not abort a MULTI watching the key; checked
against redis-server. We do the same: see `_group_changed`.
"""

from __future__ import annotations

import re

import cython

from node import command_table as table
from node import errors
from node.client import Client
from node.commands import command
from node.commands.entryreplies import entry_reply
from node.commands.streams import ids_reply, parse_policy_and_ids
from node.errors import string2ll
from node.groups import Consumer, ConsumerGroup, Nack, clamp_entries_read, create_group
from node.references import delete_entry
from node.resp import (
    OK,
    ONE,
    ZERO,
    ReplyError,
    array_header,
    bulk,
    integer,
)
from node.stream import Stream
from node.streamid import (
    MAX_ID,
    SEQ_MAX,
    format_id,
    parse_id,
    parse_id_or_error,
    parse_range_id_or_error,
    parse_strict_id_or_error,
)

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.cpython.long import PyLong_AsUnsignedLongLongMask
    from cython.cimports.node.commands.entryreplies import _ndigits, _put_dec
    from cython.cimports.node.streamnodes import _sid_ms, _sid_of
else:
    from node.commands.entryreplies import _ndigits
    from node.streamnodes import _sid_of

_LLONG_MAX = errors.LLONG_MAX
# XAUTOCLAIM: COUNT is at most LONG_MAX / max(sizeof(streamID), attempts_factor).
_XAUTOCLAIM_MAX_COUNT = _LLONG_MAX // 16
_ATTEMPTS_FACTOR = 10
# Redis allocates COUNT x 16 bytes for the deleted IDs before claiming anything and refuses
# the command when that allocation fails, so its limit depends on the machine (on 24 GiB:
# 10^9 works, 10^10 fails with glibc malloc; jemalloc's virtual reservations go further). We
# allocate nothing per COUNT, and use a fixed cut-off instead: 2^30 entries, 16 GiB in Redis.
_XAUTOCLAIM_ALLOC_COUNT = 1 << 30


def subcommand_syntax_error(argv: list[bytes]) -> ReplyError:
    """addReplySubcommandSyntaxError."""
    return ReplyError(errors.subcommand_syntax(argv[1], argv[0]))


def help_reply(argv: list[bytes], lines: list[bytes]) -> bytes:
    """addReplyHelp for a subcommand dispatcher: the command's own header first, HELP last."""
    return table.help_reply(argv[0], tuple(lines))


def _group_changed(c: Client, key: bytes) -> None:
    """A change to a stream's groups only. Redis does not signalModifiedKey for these, so
    WATCH is not aborted (checked against redis-server 7.0; 7.4 is the same code). The key
    space is still told through effects; keep this the one place to change if that policy
    changes."""


def _group_written(c: Client, key: bytes, argv: list[bytes], changes: int = 1) -> None:
    """A group change made by `argv` itself: counted as `changes` writes and propagated as is."""
    _group_changed(c, key)
    c.server.dirty += changes
    c.server.propagate(argv)


# --- effects (streamPropagateXCLAIM / GroupID / ConsumerCreation) ---------------------------
def propagate_xclaim(c: Client, key: bytes, groupname: bytes, g: ConsumerGroup, sid: int,
                     nack: Nack) -> None:
    """XCLAIM key group consumer 0 id TIME ms RETRYCOUNT n FORCE JUSTID LASTID last-id.

    Idempotent: it sets the NACK's owner, time and count whatever they were, creates it if
    needed (FORCE), deletes it if the entry no longer exists, and moves the group's last ID
    forward only. JUSTID avoids reading the entry on the replica.
    """
    if c.server.effects.replaying:
        return  # applying effects (a replica, AOF loading) emits none: skip building it
    ids = _id_text(sid)
    last = g.last_id
    c.server.propagate([b"XCLAIM", key, groupname, nack[2], b"0", ids, b"TIME",
                        _dec_text(nack[0]), b"RETRYCOUNT", _dec_text(nack[1]), b"FORCE",
                        b"JUSTID", b"LASTID", ids if last == sid else _id_text(last)])


def _dec_text(v: int) -> bytes:
    """`%d` of a time or a count; compiled, a C loop into a stack buffer (a `%` format is
    ~800 instructions, two per XCLAIM effect)."""
    if not cython.compiled or v < 0 or v > _LLONG_MAX:
        return b"%d" % v
    buf = cython.declare(cython.char[24])
    return PyBytes_FromStringAndSize(buf, _put_dec(buf, 0, v))


def _arg_len(n: int) -> int:
    """Bytes of one bulk string of length n in a RESP request: $<n>\\r\\n<arg>\\r\\n."""
    if cython.compiled:
        return n + 5 + _ndigits(n)
    return n + 5 + len(str(n))


def _id_len(sid: int) -> int:
    """Characters of `ms-seq` (3 to 41), compiled: two C loops, no string or shift."""
    if cython.compiled:
        return _ndigits(_sid_ms(sid)) + 1 + _ndigits(PyLong_AsUnsignedLongLongMask(sid))
    return _ndigits(sid >> 64) + 1 + _ndigits(sid & SEQ_MAX)


def _id_text(sid: int) -> bytes:
    """`ms-seq`; compiled, written by C loops into a stack buffer (format_id, node/streamid.py,
    is an interpreted call and a `%` format)."""
    if not cython.compiled:
        return b"%d-%d" % (sid >> 64, sid & SEQ_MAX)
    buf = cython.declare(cython.char[48])
    p = _put_dec(buf, 0, _sid_ms(sid))
    buf[p] = 45
    p = _put_dec(buf, p + 1, PyLong_AsUnsignedLongLongMask(sid))
    return PyBytes_FromStringAndSize(buf, p)


def xclaim_run_len(key: bytes, groupname: bytes, consumer: bytes, now_ms: int,
                   sids: list[int]) -> int:
    """The bytes that propagate_xclaim would emit for a run of new entries delivered at
    `now_ms` (count 1, each one's LASTID the entry itself, as the group advances through
    them), without building them: a node that nobody listens to still counts its offset."""
    fixed = (5 + _arg_len(6) + _arg_len(len(key)) + _arg_len(len(groupname))  # *14 XCLAIM
             + _arg_len(len(consumer)) + _arg_len(1) + _arg_len(4)  # consumer 0 TIME
             + _arg_len(len(b"%d" % now_ms)) + _arg_len(10) + _arg_len(1)  # ms RETRYCOUNT 1
             + _arg_len(5) + _arg_len(6) + _arg_len(6))  # FORCE JUSTID LASTID
    total = fixed * len(sids)
    # The ID twice (entry and LASTID), each a bulk string: $n\r\n...\r\n.
    for sid in sids:
        if cython.compiled:
            n = _id_len(sid)
        else:
            n = len(b"%d-%d" % (sid >> 64, sid & SEQ_MAX))
        total += 2 * n + (12 if n < 10 else 14)
    return total


def _named(nack: Nack, cons: Consumer) -> Nack:
    """The NACK of an entry that is gone, for the XCLAIM effect that drops it: an unowned
    one (XNACK) is named after the consumer that found it (an XCLAIM needs a consumer)."""
    return nack if nack[2] is not None else (nack[0], nack[1], cons.name)


def propagate_group_id(c: Client, key: bytes, groupname: bytes, g: ConsumerGroup) -> None:
    """XGROUP SETID key group last-id ENTRIESREAD n: the group cursor, exactly."""
    er = -1 if g.entries_read is None else g.entries_read
    c.server.propagate([b"XGROUP", b"SETID", key, groupname, _id_text(g.last_id),
                        b"ENTRIESREAD", b"%d" % er])


def propagate_consumer_creation(c: Client, key: bytes, groupname: bytes, name: bytes) -> None:
    c.server.propagate([b"XGROUP", b"CREATECONSUMER", key, groupname, name])


def lookup_or_create_consumer(c: Client, key: bytes, groupname: bytes, g: ConsumerGroup,
                              name: bytes) -> Consumer:
    """The named consumer, created (and propagated) if missing; its seen-time is now."""
    now = c.server.now_ms()
    cons = g.consumers.get(name)
    if cons is None:
        cons = g.create_consumer(name, now)
        assert cons is not None
        c.server.dirty += 1
        propagate_consumer_creation(c, key, groupname, name)
    cons.seen_time = now
    return cons


# --- XGROUP --------------------------------------------------------------------------------
_XGROUP_HELP = [
    b"CREATE <key> <groupname> <id|$> [option]",
    b"    Create a new consumer group. Options are:",
    b"    * MKSTREAM",
    b"      Create the empty stream if it does not exist.",
    b"    * ENTRIESREAD entries_read",
    b"      Set the group's entries_read counter (internal use).",
    b"CREATECONSUMER <key> <groupname> <consumer>",
    b"    Create a new consumer in the specified group.",
    b"DELCONSUMER <key> <groupname> <consumer>",
    b"    Remove the specified consumer.",
    b"DESTROY <key> <groupname>",
    b"    Remove the specified group.",
    b"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    b"    Set the current group ID and entries_read counter.",
]


def _xgroup_options(argv: list[bytes], sub: bytes) -> tuple[bool, int | None]:
    """XGROUP CREATE/SETID's options after the ID: (MKSTREAM, ENTRIESREAD or None for -1,
    the invalid counter), with Redis's errors; any other subcommand takes none."""
    create, setid = sub == b"create", sub == b"setid"
    mkstream = False
    entries_read: int | None = None  # -1 / invalid unless ENTRIESREAD says otherwise
    argc = len(argv)
    i = 5
    while i < argc:
        opt = _option(argv[i])
        if create and opt == b"mkstream":
            mkstream = True
            i += 1
        elif (create or setid) and opt == b"entriesread" and i + 1 < argc:
            v = plain_uint(argv[i + 1])
            if v < 0:
                v = string2ll(argv[i + 1])
            if v is None:
                raise ReplyError(errors.NOT_INTEGER)
            if v < 0 and v != -1:
                raise ReplyError(errors.ENTRIESREAD_NEGATIVE)
            entries_read = None if v == -1 else v
            i += 2
        else:
            raise subcommand_syntax_error(argv)
    return mkstream, entries_read


def _stored_entries_read(c: Client, argv: list[bytes], s: Stream, entries_read: int | None
                         ) -> tuple[int | None, list[bytes]]:
    """ENTRIESREAD as stored (clamped to entries-added, node/groups.py), and the command to
    propagate: with the stored value, so that a replica stores exactly the same. Applying
    effects stores the value as given: a primary's counter can exceed entries-added after an
    XSETID ENTRIESADDED, and its XGROUP SETID effect must not be cut on the replica."""
    if c.server.effects.replaying:
        return entries_read, argv
    stored = clamp_entries_read(s, entries_read)
    if stored == entries_read:
        return entries_read, argv
    argv = list(argv)
    j = len(argv) - 2  # the last ENTRIESREAD holds the value (a value is never a token)
    while _option(argv[j]) != b"entriesread":
        j -= 1
    argv[j + 1] = b"%d" % stored
    return stored, argv


@command(b"xgroup")
def xgroup(c: Client, argv: list[bytes]) -> bytes:
    """XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
    XGROUP SETID key group id|$ [ENTRIESREAD n]
    XGROUP DESTROY key group
    XGROUP CREATECONSUMER key group consumer
    XGROUP DELCONSUMER key group consumer
    XGROUP HELP"""
    argc = len(argv)
    sub = _option(argv[1])
    if argc < 4:  # everything but HELP takes a key and a group name
        if argc == 2 and sub == b"help":
            return help_reply(argv, _XGROUP_HELP)
        raise subcommand_syntax_error(argv)
    key, groupname = argv[2], argv[3]
    mkstream, entries_read = _xgroup_options(argv, sub)
    s = c.db.get_stream(key)
    g: ConsumerGroup | None = None
    if not mkstream:
        if s is None:
            raise ReplyError(errors.XGROUP_NO_KEY)
        g = s.groups.get(groupname)
        if g is None and sub in (b"setid", b"createconsumer", b"delconsumer"):
            raise ReplyError(errors.nogroup_for_key(groupname, key))
    if sub == b"create" and 5 <= argc <= 8:
        return _xgroup_create(c, argv, s, entries_read)
    if sub == b"setid" and argc in (5, 7):
        return _xgroup_setid(c, argv, s, g, entries_read)
    if sub == b"destroy" and argc == 4:
        assert s is not None
        if g is None:
            return ZERO
        del s.groups[groupname]
        _group_changed(c, key)
        # Wake blocked XREADGROUP clients of this group: re-run, they get -NOGROUP.
        c.server.blocking.signal_ready(key)
        c.server.dirty += 1
        c.server.propagate(argv)
        return ONE
    if sub == b"createconsumer" and argc == 5:
        assert g is not None
        if g.create_consumer(argv[4], c.server.now_ms()) is None:
            return ZERO
        _group_written(c, key, argv)
        return ONE
    if sub == b"delconsumer" and argc == 5:
        assert g is not None
        pending = g.delete_consumer(argv[4])
        if pending is None:
            return ZERO
        _group_written(c, key, argv)
        return integer(pending)
    raise subcommand_syntax_error(argv)


def _xgroup_create(c: Client, argv: list[bytes], s: Stream | None, entries_read: int | None
                   ) -> bytes:
    """XGROUP CREATE key group id|$ ...: the stream made here with MKSTREAM, once the command
    can no longer fail."""
    key, groupname = argv[2], argv[3]
    if argv[4] == b"$":
        sid = s.last_id if s is not None else 0
    else:
        sid = parse_strict_id_or_error(argv[4])
    if s is None:
        s = Stream()
        c.db.set(key, s)  # a new key: signals it ready and breaks WATCH, as dbAdd does
    if groupname in s.groups:
        raise ReplyError(errors.BUSYGROUP)
    entries_read, argv = _stored_entries_read(c, argv, s, entries_read)
    create_group(s, groupname, sid, entries_read)
    _group_written(c, key, argv)
    return OK


def _xgroup_setid(c: Client, argv: list[bytes], s: Stream | None, g: ConsumerGroup | None,
                  entries_read: int | None) -> bytes:
    """XGROUP SETID key group id|$ [ENTRIESREAD n]: the group's cursor and counter."""
    assert s is not None and g is not None
    sid = s.last_id if argv[4] == b"$" else (
        _plain_id_c(argv[4]) if cython.compiled else None)
    if sid is None:
        sid = parse_id_or_error(argv[4], 0)
    entries_read, argv = _stored_entries_read(c, argv, s, entries_read)
    g.last_id = sid
    g.entries_read = entries_read
    # Redis does not signal the key ready here: a blocked XREADGROUP is served at the
    # next write to the stream, not because its group moved back.
    _group_written(c, argv[2], argv)
    return OK


# --- XACK ----------------------------------------------------------------------------------
# Plain `ms-seq` IDs joined by single spaces: checked by one regex match for a whole XACK.
_PLAIN_IDS = re.compile(rb"\d{1,20}-\d{1,20}(?: \d{1,20}-\d{1,20})*")
_ULL_MAX = SEQ_MAX


def parse_strict_ids_or_error(args: list[bytes]) -> list[int]:
    """Many strict IDs (XACK): a fast path for plain `ms-seq`, else streamParseStrictID."""
    if cython.compiled:
        fast = _plain_ids_c(args)
        if fast is not None:
            return fast
    else:
        joined = b" ".join(args)
        if _PLAIN_IDS.fullmatch(joined):
            nums = list(map(int, joined.replace(b"-", b" ").split()))
            # As many IDs as arguments: no argument held a space, so each is one `ms-seq`.
            if len(nums) == 2 * len(args):
                ms, seq = nums[0::2], nums[1::2]
                if max(ms) <= SEQ_MAX and max(seq) <= SEQ_MAX:
                    return [m << 64 | q for m, q in zip(ms, seq, strict=True)]
    return [parse_strict_id_or_error(a) for a in args]  # parse_id reads `ms-seq` fast too


def _plain_ids_c(args: list[bytes]) -> list[int] | None:
    """Compiled: every argument a plain `ms-seq` (see _plain_id_c), parsed by C loops; None
    as soon as one is anything else, for the general path to parse (and refuse) them all."""
    if type(args) is not list:
        return None
    out = []
    for a in args:
        sid = _plain_id_c(a)
        if sid is None:
            return None
        out.append(sid)
    return out


def _dec(p: bytes, i: int, n: int, out: list[int]) -> int:
    """Compiled only: the decimal digits of p[i:n] up to the first other byte, into out[0];
    the index where they stop, or -1 past 2^64-1."""
    lim = _ULL_MAX
    v = 0
    while i < n:
        ch = p[i]
        if ch < 48 or ch > 57:
            break
        d = ch - 48
        if v > (lim - d) // 10:
            return -1
        v = v * 10 + d
        i += 1
    out[0] = v
    return i


def _plain_id_c(a: bytes) -> int | None:
    """Compiled only: a plain `ms-seq` (ASCII digits on both sides, each part at most 2^64-1,
    at most 127 bytes, as the general parser wants) in C; None for anything else. Every
    parser, strict or not, reads this form the same way."""
    if type(a) is not bytes:
        return None
    n = len(a)
    if n > 127:
        return None
    ms = seq = 0
    p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(a))
    i = _dec(p, 0, n, cython.address(ms))
    if i <= 0 or i >= n - 1 or p[i] != 45:
        return None
    if _dec(p, i + 1, n, cython.address(seq)) != n:
        return None
    return _sid_of(ms, seq)


def plain_uint(a: bytes) -> int:
    """`0` or digits without a leading zero, fewer than 19 (what clients and effects send: COUNT,
    BLOCK, XCLAIM's integers, ENTRIESREAD); -1 for anything else, which then takes errors.py's
    string2ll rules. Compiled, one C loop (no chain of interpreted calls)."""
    if type(a) is not bytes:
        return -1
    n = len(a)
    if n == 0 or n > 18:
        return -1
    if not cython.compiled:
        return int(a) if a.isdigit() and (a[0] != 48 or n == 1) else -1
    v = 0
    p = cython.cast(cython.p_uchar, PyBytes_AS_STRING(a))
    if p[0] == 48 and n > 1:
        return -1
    if _dec(p, 0, n, cython.address(v)) != n:
        return -1
    return v


def _int_arg(b: bytes, error: bytes) -> int:
    """errors.parse_int_or_error, the plain form first (a replica parses three integers in
    every XCLAIM effect, and errors.py runs interpreted)."""
    v = plain_uint(b)
    if v >= 0:
        return v
    return errors.parse_int_or_error(b, error)


def _strict_id(b: bytes) -> int | None:
    """parse_id(b, 0, strict=True), the plain `ms-seq` first in C when compiled, and a word
    (XCLAIM's TIME, the option that ends its IDs in every effect) refused there too, as
    parse_id refuses anything that starts with an ASCII letter."""
    if cython.compiled:
        sid = _plain_id_c(b)
        if sid is not None:
            return sid
        if type(b) is bytes and len(b):
            ch = cython.cast(cython.p_uchar, PyBytes_AS_STRING(b))[0]
            if 65 <= ch <= 90 or 97 <= ch <= 122:
                return None
    return parse_id(b, 0, strict=True)


def _option(b: bytes) -> bytes:
    """An option word in lower case: the upper-case spellings that effects use are looked
    up instead of lowered (a method call and a new object per option)."""
    return _LOWER.get(b) or b.lower()


_LOWER = {w.upper(): w for w in (b"force", b"justid", b"lastid", b"time", b"retrycount",
                                  b"idle", b"setid", b"entriesread")}


def xack(c: Client, argv: list[bytes]) -> bytes:
    """XACK key group id [id ...]: all IDs are parsed before any is acknowledged."""
    key = argv[1]
    db = c.db
    s = db.get_stream(key)
    g = s.groups.get(argv[2]) if s is not None else None
    if g is None:
        return ZERO
    ids = parse_strict_ids_or_error(argv[3:])
    acked = g.ack_many(ids)
    if acked:
        _group_written(c, key, argv, acked)
    return integer(acked)


command(b"xack")(xack)  # not a decorator: compiled, xack is cpdef


@command(b"xackdel")
def xackdel(c: Client, argv: list[bytes]) -> bytes:
    """XACKDEL key group [KEEPREF|DELREF|ACKED] IDS numids id [id ...]  (Redis 8.2)

    Per ID: acknowledge it in the group, then delete the entry by the policy, atomically.
    One reply per ID: -1 no such entry (its pending ID is still acknowledged), 1 deleted, 2
    acknowledged but kept because another group still references it (ACKED). No key or no
    group: -1 for every ID, as XACK answers 0. Goes out verbatim, like XACK."""
    key = argv[1]
    s = c.db.get_stream(key)
    g = s.groups.get(argv[2]) if s is not None else None
    policy, ids, _ = parse_policy_and_ids(argv, 3)
    if s is None or g is None:
        return ids_reply([-1] * len(ids))
    codes = []
    acked = 0
    for sid in ids:
        acked += g.ack(sid)
        codes.append(delete_entry(s, sid, policy))
    deleted = codes.count(1)
    if deleted:
        c.db.changed(key)
    if deleted or acked:
        c.server.dirty += deleted + acked
        c.server.propagate(argv)
    return ids_reply(codes)


# --- XNACK ---------------------------------------------------------------------------------
_XNACK_MODES = {b"silent": -1, b"fail": 0, b"fatal": 1}


@command(b"xnack")
def xnack(c: Client, argv: list[bytes]) -> bytes:
    """XNACK key group SILENT|FAIL|FATAL IDS numids id [id ...] [RETRYCOUNT n] [FORCE]
    (Redis 8.8)

    Each pending ID becomes unowned with delivery time 0, so the next CLAIM (or XCLAIM,
    XAUTOCLAIM) of any idle time takes it at once. Its delivery count: SILENT one less (not
    below 0), FAIL the same, FATAL LLONG_MAX; RETRYCOUNT sets it instead. FORCE also creates
    such an entry for an ID that is not pending, if the entry exists (base count 0), as
    XCLAIM's FORCE does. An ID given twice is released once. Replies with the number of IDs
    released. Effects: `XNACK key group FAIL IDS n id... RETRYCOUNT count FORCE`, one per
    resulting count, which sets exactly what was set here.
    """
    key, groupname = argv[1], argv[2]
    mode = _XNACK_MODES.get(argv[3].lower())
    if mode is None:
        raise ReplyError(errors.XNACK_MODE)
    _policy, ids, j = parse_policy_and_ids(argv, 4, exact=False)
    retrycount = -1
    force = False
    argc = len(argv)
    while j < argc:
        opt = argv[j].lower()
        if opt == b"retrycount" and j + 1 < argc:
            j += 1
            retrycount = errors.parse_int_or_error(argv[j], errors.XNACK_RETRYCOUNT)
            if retrycount < 0:
                raise ReplyError(errors.XNACK_RETRYCOUNT)
        elif opt == b"force":
            force = True
        else:
            raise ReplyError(errors.xnack_unknown_option(argv[j]))
        j += 1
    s = c.db.get_stream(key)
    g = s.groups.get(groupname) if s is not None else None
    if s is None or g is None:
        raise ReplyError(errors.nogroup_key_or_group(key, groupname))
    pel = g.pel
    by_count: dict[int, list[bytes]] = {}
    released = 0
    for sid in dict.fromkeys(ids):
        nack = pel.get(sid)
        if nack is None:
            if not force or sid not in s:
                continue
            dc = 0
        else:
            dc = nack[1]
        if retrycount >= 0:
            dc = retrycount
        elif mode < 0:
            dc = max(dc - 1, 0)
        elif mode > 0:
            dc = _LLONG_MAX
        g.release(sid, dc)
        released += 1
        by_count.setdefault(dc, []).append(format_id(sid))
    if released:
        _group_changed(c, key)
        # A reader blocked with CLAIM can take these now (the others re-run and wait again).
        c.server.blocking.signal_ready(key)
        c.server.dirty += released
        for dc, sids in by_count.items():
            c.server.propagate([b"XNACK", key, groupname, b"FAIL", b"IDS", b"%d" % len(sids),
                                *sids, b"RETRYCOUNT", b"%d" % dc, b"FORCE"])
    return integer(released)


# --- XCLAIM --------------------------------------------------------------------------------
def _xclaim_options(argv: list[bytes], j: int, now: int) -> tuple[int, int, bool, bool, int]:
    """XCLAIM's options from argv[j] on: (RETRYCOUNT or -1, delivery time from IDLE/TIME or
    -1, FORCE, JUSTID, LASTID or 0), with Redis's error texts."""
    argc = len(argv)
    retrycount = deliverytime = -1
    force = justid = False
    last_id = 0
    while j < argc:
        moreargs = argc - 1 - j
        opt = _option(argv[j])
        if opt == b"force":
            force = True
        elif opt == b"justid":
            justid = True
        elif opt == b"idle" and moreargs:
            j += 1
            deliverytime = now - _int_arg(argv[j], errors.XCLAIM_IDLE)
        elif opt == b"time" and moreargs:
            j += 1
            deliverytime = _int_arg(argv[j], errors.XCLAIM_TIME)
        elif opt == b"retrycount" and moreargs:
            j += 1
            retrycount = _int_arg(argv[j], errors.XCLAIM_RETRYCOUNT)
        elif opt == b"lastid" and moreargs:
            j += 1
            sid = _strict_id(argv[j])
            if sid is None:
                raise ReplyError(errors.INVALID_STREAM_ID)
            last_id = sid
        else:
            raise ReplyError(errors.xclaim_unknown_option(argv[j]))
        j += 1
    return retrycount, deliverytime, force, justid, last_id


def xclaim(c: Client, argv: list[bytes]) -> bytes:
    """XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-ms]
    [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id]"""
    key, groupname, name = argv[1], argv[2], argv[3]
    s = c.db.get_stream(key)
    g = s.groups.get(groupname) if s is not None else None
    if s is None or g is None:
        raise ReplyError(errors.nogroup_key_or_group(key, groupname))
    minidle = _int_arg(argv[4], errors.XCLAIM_MIN_IDLE)
    if minidle < 0:
        minidle = 0

    # IDs first, up to the first argument that is not one: the options follow.
    argc = len(argv)
    ids: list[int] = []
    j = 5
    while j < argc:
        sid = _strict_id(argv[j])
        if sid is None:
            break
        ids.append(sid)
        j += 1

    now = c.server.now_ms()
    retrycount, deliverytime, force, justid, last_id = _xclaim_options(argv, j, now)
    out = _claim(c, key, groupname, s, g, name, ids, minidle, retrycount, deliverytime, force,
                 justid, last_id, now, True)
    return array_header(len(out)) + b"".join(out)


def _claim(c: Client, key: bytes, groupname: bytes, s: Stream, g: ConsumerGroup, name: bytes,
           ids: list[int], minidle: int, retrycount: int, deliverytime: int, force: bool,
           justid: bool, last_id: int, now: int, replies: bool) -> list[bytes]:
    """XCLAIM once its arguments are read: the claimed entries' replies (IDs with JUSTID),
    or (not `replies`) as many empty ones. The one body of the command and of a replica's
    apply of its delivery effects, whose replies nobody reads."""
    propagate_last_id = False
    if last_id > g.last_id:
        g.last_id = last_id
        propagate_last_id = True

    # A bogus delivery time (negative, or in the future) becomes now rather than an error:
    # clients compute it from their own clocks.
    if deliverytime < 0 or deliverytime > now:
        deliverytime = now

    # Redis 7.2+: the consumer exists (and is seen) even if nothing gets claimed.
    cons = lookup_or_create_consumer(c, key, groupname, g, name)
    pel = g.pel
    out: list[bytes] = []
    for sid in ids:
        nack = pel.get(sid)
        # JUSTID (every XCLAIM effect a replica applies) needs to know only that the entry
        # lives, not its fields.
        fields = None if justid else s.get(sid)
        if (sid not in s) if justid else fields is None:
            # The entry is gone: drop its NACK (and say so to replicas).
            if nack is not None:
                c.server.dirty += 1
                propagate_xclaim(c, key, groupname, g, sid, _named(nack, cons))
                propagate_last_id = False
                g.ack(sid)
            continue
        if nack is None:
            if not force:
                continue
            dcount = 1  # streamCreateNACK, then counted below like any other
        else:
            if minidle and now - nack[0] < minidle:
                continue
            dcount = nack[1]
        if retrycount >= 0:
            dcount = retrycount
        elif not justid and dcount < _LLONG_MAX:  # XNACK FATAL's count stays at the top
            dcount += 1
        nack = g.set_nack(sid, cons, deliverytime, dcount)
        out.append((bulk_id(sid) if justid else entry_reply(sid, fields)) if replies else b"")
        cons.active_time = now
        c.server.dirty += 1
        propagate_xclaim(c, key, groupname, g, sid, nack)
        propagate_last_id = False
    if propagate_last_id:
        c.server.dirty += 1
        propagate_group_id(c, key, groupname, g)
    _group_changed(c, key)
    return out


def apply_xclaim_effect(c: Client, argv: list[bytes]) -> bytes | None:
    """A delivery's effect as propagate_xclaim writes it (`XCLAIM key group consumer 0 id TIME
    ms RETRYCOUNT n FORCE JUSTID LASTID last-id`, one of them per delivered entry on a replica)
    applied as xclaim() applies it, without its option parser; the reply is the count of
    entries claimed (a replica drops it). None, with nothing done, for any other shape or a key
    that is not a live stream with that group: the caller dispatches those, and the command's
    own checks and errors apply."""
    if (len(argv) != 14 or argv[4] != b"0" or argv[6] != b"TIME" or argv[8] != b"RETRYCOUNT"
            or argv[10] != b"FORCE" or argv[11] != b"JUSTID" or argv[12] != b"LASTID"):
        return None
    sid = _strict_id(argv[5])
    last_id = _strict_id(argv[13])
    deliverytime = plain_uint(argv[7])
    retrycount = plain_uint(argv[9])
    if sid is None or last_id is None or deliverytime < 0 or retrycount < 0:
        return None
    s, g = _live_group(c, argv[1], argv[2])
    if g is None:
        return None
    out = _claim(c, argv[1], argv[2], s, g, argv[3], [sid], 0, retrycount, deliverytime, True,
                 True, last_id, c.server.now_ms(), False)
    return integer(len(out))


def apply_setid_effect(c: Client, argv: list[bytes]) -> bytes | None:
    """The cursor effect of a delivering read as propagate_group_id writes it (`XGROUP SETID
    key group ms-seq ENTRIESREAD n`, n -1 for none) applied as XGROUP SETID applies an effect
    (the counter stored as given), without the subcommand's parser; None, with nothing done,
    for any other shape or key: the caller dispatches those."""
    if len(argv) != 7 or argv[1] != b"SETID" or argv[5] != b"ENTRIESREAD":
        return None
    sid = _strict_id(argv[4])
    er = argv[6]
    n = -1 if er == b"-1" else plain_uint(er)
    if sid is None or (n < 0 and er != b"-1"):
        return None
    _s, g = _live_group(c, argv[2], argv[3])
    if g is None:
        return None
    g.last_id = sid
    g.entries_read = None if n < 0 else n
    _group_written(c, argv[2], argv)
    return OK


def _live_group(c: Client, key: bytes, groupname: bytes
                ) -> tuple[Stream | None, ConsumerGroup | None]:
    """The stream at `key` and its group, when both exist and the key has no TTL (the
    dispatch decides what a volatile key holds now); else (None, None)."""
    db = c.db
    if db.expires and key in db.expires:
        return None, None
    s = db.data.get(key)
    if type(s) is not Stream:
        return None, None
    g = s.groups.get(groupname)
    return (s, g) if g is not None else (None, None)


command(b"xclaim")(xclaim)  # not a decorator: compiled, xclaim is cpdef


def bulk_id(sid: int) -> bytes:
    return bulk(_id_text(sid))


# --- XAUTOCLAIM ----------------------------------------------------------------------------
@command(b"xautoclaim")
def xautoclaim(c: Client, argv: list[bytes]) -> bytes:
    """XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]

    Reply: [next-start-id, [claimed...], [IDs that were pending but no longer exist]].
    """
    minidle = errors.parse_int_or_error(argv[4], errors.XAUTOCLAIM_MIN_IDLE)
    if minidle < 0:
        minidle = 0
    start, startex = parse_range_id_or_error(argv[5], 0)
    if startex:
        if start == MAX_ID:
            raise ReplyError(errors.INVALID_START_ID)
        start += 1
    count = 100
    justid = False
    argc = len(argv)
    j = 6
    while j < argc:
        moreargs = argc - 1 - j
        opt = argv[j].lower()
        if opt == b"count" and moreargs:
            v = string2ll(argv[j + 1])
            if v is None or v < 1 or v > _XAUTOCLAIM_MAX_COUNT:
                raise ReplyError(errors.XAUTOCLAIM_COUNT)
            count = v
            j += 1
        elif opt == b"justid":
            justid = True
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1

    key, groupname, name = argv[1], argv[2], argv[3]
    s = c.db.get_stream(key)
    g = s.groups.get(groupname) if s is not None else None
    if s is None or g is None:
        raise ReplyError(errors.nogroup_key_or_group(key, groupname))
    if count > _XAUTOCLAIM_ALLOC_COUNT:  # before the consumer exists, as in Redis
        raise ReplyError(errors.XAUTOCLAIM_COUNT_TOO_HIGH)

    cons = lookup_or_create_consumer(c, key, groupname, g, name)
    now = c.server.now_ms()
    attempts = count * _ATTEMPTS_FACTOR
    pel = g.pel
    keys = pel.keys()
    i = pel.bisect_left(start)
    out: list[bytes] = []
    deleted: list[int] = []
    while attempts and count and i < len(keys):
        attempts -= 1
        sid = keys[i]
        nack = pel[sid]
        fields = s.get(sid)
        if fields is None:
            # Gone from the stream: drop the NACK, report the ID; it counts toward COUNT.
            c.server.dirty += 1
            propagate_xclaim(c, key, groupname, g, sid, _named(nack, cons))
            g.ack(sid)  # the next ID slides into position i
            deleted.append(sid)
            count -= 1
            continue
        i += 1
        if minidle and now - nack[0] < minidle:
            continue
        nack = g.set_nack(sid, cons, now,
                          nack[1] if justid else min(nack[1] + 1, _LLONG_MAX))
        out.append(bulk_id(sid) if justid else entry_reply(sid, fields))
        count -= 1
        cons.active_time = now
        c.server.dirty += 1
        propagate_xclaim(c, key, groupname, g, sid, nack)
    cursor = keys[i] if i < len(keys) else 0
    _group_changed(c, key)
    return b"".join([array_header(3), bulk_id(cursor), array_header(len(out)), *out,
                     array_header(len(deleted)), *[bulk_id(sid) for sid in deleted]])

