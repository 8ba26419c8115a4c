"""Stream commands without consumer groups: XADD, XTRIM, XDEL, XLEN, XRANGE, XREVRANGE, XSETID,
XCFGSET.

Each handler is parse -> lookup -> engine (node.stream) -> reply -> effects, in Redis's order,
so that the same bad input gets the same error (t_stream.c xaddCommand & co.).

Effects: XADD goes out with its final ID instead of `*` / `ms-*`; a `~` trim (XADD or XTRIM)
goes out as the exact MAXLEN/MINID that reproduces its result, and without LIMIT, because an
approximate trim depends on the node layout and a replica or a replayed AOF must not diverge
(streamRewriteApproxSpecifier / streamRewriteTrimArgument). XDEL and XSETID go out verbatim.

Idempotent XADD (Redis 8.6, node/idmp.py): `IDMP pid iid` or `IDMPAUTO pid`. A duplicate
answers the original ID, adds nothing and emits no effect; an added entry's effect carries
`IDMP pid iid` (IDMPAUTO's computed iid) with the final ID, which is all a replica needs to
record the pair with the same stamp. XCFGSET goes out verbatim when it changes something.

XRANGE and XREVRANGE encode their entries with node.commands.entryreplies, as the read and
group commands do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import cython

from node import errors
from node.client import Client
from node.commands import command
from node.errors import string2ll, string2ull
from node.idmp import MAX_DURATION, MAX_MAXSIZE, IdmpMap, auto_iid
from node.references import ACKED, DELREF, KEEPREF, POLICIES, delete_entry
from node.references import trim as trim_by_policy
from node.resp import (
    EMPTY_ARRAY,
    OK,
    ZERO,
    ReplyError,
    array_header,
    bulk,
    integer,
    null,
    null_array,
)
from node.stream import ElementsTooLarge, IDTooSmall, Stream
from node.streamid import (
    MAX_ID,
    SEQ_MAX,
    format_id,
    parse_id_or_error,
    parse_range_id_or_error,
    parse_strict_id_or_error,
)

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.node.client import Client as _CClient
    from cython.cimports.node.commands.entryreplies import id_bulk, stream_range_reply
    from cython.cimports.node.server import Server
else:
    from node.commands.entryreplies import id_bulk, stream_range_reply

if TYPE_CHECKING:
    from node.config import Config
    from node.keyspace import Keyspace
    from node.server import Server

_WRONG_ARITY_XADD = errors.wrong_arity(b"xadd")
_U64_MAX = SEQ_MAX  # a C constant compiled


# --- ID parsing ----------------------------------------------------------------------------
def _parse_xadd_id(b: bytes) -> tuple[int, bool]:
    """An explicit XADD ID: (id, seq_given); `ms-*` gives (ms << 64, False)."""
    if len(b) > 2 and b[-2:] == b"-*" and len(b) <= 127 and b.find(b"-") == len(b) - 2:
        ms = string2ull(b[:-2])
        if ms is None:
            raise ReplyError(errors.INVALID_STREAM_ID)
        return ms << 64, False
    return parse_id_or_error(b, 0, strict=True), True


# --- XADD / XTRIM arguments (streamParseAddOrTrimArgsOrReply) -------------------------------
class TrimArgs:
    __slots__ = ("strategy", "approx", "threshold", "limit", "nomkstream", "id", "id_given",
                 "seq_given", "idmp_pid", "idmp_iid", "policy")

    def __init__(self) -> None:
        self.strategy: str | None = None  # 'maxlen' | 'minid'
        self.approx = False
        self.threshold = 0
        self.limit = 0
        self.nomkstream = False
        self.id = 0
        self.id_given = False
        self.seq_given = True
        self.idmp_pid: bytes | None = None  # IDMP / IDMPAUTO producer
        self.idmp_iid: bytes | None = None  # IDMP's iid; None with IDMPAUTO
        self.policy = KEEPREF  # Redis 8.2's KEEPREF | DELREF | ACKED (node/references.py)


def _parse_add_or_trim(c: Client, argv: list[bytes], xadd: bool) -> tuple[TrimArgs, int]:
    """Options of XADD (up to the ID) or XTRIM; returns the args and the ID position."""
    a = TrimArgs()
    argc = len(argv)
    i = 2
    limit_given = False
    while i < argc:
        moreargs = argc - 1 - i
        opt = argv[i]
        lopt = opt.lower()
        if xadd and opt == b"*":
            break
        elif (lopt == b"maxlen" or lopt == b"minid") and moreargs:
            i = _parse_strategy(a, argv, i, lopt == b"maxlen")
        elif lopt == b"limit" and moreargs:
            a.limit = errors.parse_non_negative_or_error(argv[i + 1], errors.LIMIT_NEGATIVE)
            limit_given = True
            i += 1
        elif xadd and lopt == b"nomkstream":
            a.nomkstream = True
        elif lopt in POLICIES:
            a.policy = POLICIES[lopt]
        elif xadd and lopt == b"idmpauto" and moreargs:
            _set_idmp(a, argv[i + 1], None)
            i += 1
        elif xadd and lopt == b"idmp" and moreargs >= 2:
            _set_idmp(a, argv[i + 1], argv[i + 2])
            i += 2
        elif xadd:
            a.id, a.seq_given = _parse_xadd_id(opt)
            a.id_given = True
            break
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1

    if a.limit and a.strategy is None:
        raise ReplyError(errors.LIMIT_WITHOUT_STRATEGY)
    if not xadd and a.strategy is None:
        raise ReplyError(errors.XTRIM_WITHOUT_STRATEGY)
    if limit_given:
        if not a.approx:
            raise ReplyError(errors.LIMIT_WITHOUT_APPROX)
    elif a.approx:
        a.limit = _approx_limit(c.server.config.stream_node_max_entries)
    else:
        a.limit = 0
    return a, i


def _parse_strategy(a: TrimArgs, argv: list[bytes], i: int, maxlen: bool) -> int:
    """`(MAXLEN|MINID) [=|~] threshold` at argv[i] into `a`; returns the threshold's index."""
    if a.strategy is not None:
        raise ReplyError(errors.MAXLEN_AND_MINID)
    a.approx = False
    moreargs = len(argv) - 1 - i
    nxt = argv[i + 1]
    if moreargs >= 2 and nxt == b"~":
        a.approx = True
        i += 1
    elif moreargs >= 2 and nxt == b"=":
        i += 1
    if maxlen:
        a.threshold = errors.parse_non_negative_or_error(argv[i + 1], errors.MAXLEN_NEGATIVE)
        a.strategy = "maxlen"
    else:
        a.threshold = parse_strict_id_or_error(argv[i + 1])
        a.strategy = "minid"
    return i + 1


def _set_idmp(a: TrimArgs, pid: bytes, iid: bytes | None) -> None:
    if a.idmp_pid is not None:
        raise ReplyError(errors.IDMP_TWICE)
    if not pid or iid == b"":
        raise ReplyError(errors.IDMP_EMPTY)
    a.idmp_pid = pid
    a.idmp_iid = iid


def _trim(s: Stream, a: TrimArgs) -> tuple[int, list[bytes]]:
    """Trim by `a`: (entries removed, the exact trim that reproduces it for replicas and the
    AOF, as streamRewriteTrimArgument does for `~`). ACKED's result depends on the groups, so
    it goes out as the plain trim of what it removed; DELREF goes out with DELREF."""
    assert a.strategy is not None
    deleted, stop = trim_by_policy(s, a.strategy, a.threshold, a.approx, a.limit, a.policy)
    acked = a.policy == ACKED
    if a.strategy == "maxlen":
        eff = [b"MAXLEN", b"%d" % (s.length if a.approx or acked else a.threshold)]
    else:
        eff = [b"MINID", format_id(s.edge_id(True, False) if a.approx
                                   else min(a.threshold, stop))]
    if a.policy == DELREF:
        eff.append(b"DELREF")
    return deleted, eff


# --- commands ------------------------------------------------------------------------------
def xadd(c: Client, argv: list[bytes]) -> bytes:
    """XADD key [NOMKSTREAM] [KEEPREF|DELREF|ACKED] [IDMPAUTO pid | IDMP pid iid]
    [(MAXLEN|MINID) [=|~] threshold [LIMIT count]] (*|id) field value ..."""
    # Hot paths, on an existing stream: `XADD key [MAXLEN [~] n] (*|ms-seq) field value ...`.
    # Clients mostly send `*` and `MAXLEN ~ n *`; replicas and AOF replay send explicit IDs and
    # exact MAXLEN. No option objects; anything unusual goes to _xadd_general. The ID is kept
    # as its two parts (C uint64 compiled) up to the reply: no 128-bit int.
    node = _node_of(c)
    if node is None:
        return _xadd_general(c, argv)
    argc = len(argv)
    i, maxlen = _fast_maxlen(argv, argc)
    if maxlen == -2 or argc - i < 3 or not (argc - i) & 1:
        return _xadd_general(c, argv)
    auto = argv[i] == b"*"
    ms = 0
    seq = 0
    if not auto:  # parsed before the key is looked up, as Redis does (a bad ID beats WRONGTYPE)
        ms, seq = _plain_id(argv[i])
        if (ms | seq) == 0:
            return _xadd_general(c, argv)
    db = node.db
    key = argv[1]
    s = _fast_stream(db, key)
    if s is None:
        return _xadd_general(c, argv)
    if auto:
        ms, seq = s.next_id_parts(node.now_ms())
        if (ms | seq) == 0:  # exhausted (a partition key's last millisecond)
            return _xadd_general(c, argv)
    elif s.stride and seq % s.stride != s.residue:
        raise ReplyError(errors.xadd_partition_seq(s.residue, s.stride))
    cfg = node.config
    try:
        s.append_id(ms, seq, argv[i + 1:], cfg.stream_node_max_entries,
                    cfg.stream_node_max_bytes)
    except IDTooSmall:
        raise ReplyError(errors.XADD_ID_TOO_SMALL) from None
    except ElementsTooLarge:
        raise ReplyError(errors.XADD_TOO_LARGE) from None
    reply = id_bulk(ms, seq)
    db.changed(key, True)
    eff = _fast_effect(s, argv, i, maxlen, _id_of_reply(reply), cfg)
    node.dirty += 1
    node.propagate(eff)
    return reply


# Registered here, not by decorator: compiled, xadd is a cpdef function (streams.pxd), and
# Cython drops decorators of those.
command(b"xadd")(xadd)


def _node_of(c: Client) -> Server | None:
    """The client's server, typed once for XADD's fast path: compiled, a node's Client and
    Server are read by C fields and cpdef calls, and any other context (the in-process key
    space of tests/support/inproc.py) gets None and takes the general path."""
    if cython.compiled:
        if type(c) is _CClient:
            srv = cython.cast(_CClient, c).server
            if type(srv) is Server:
                return cython.cast(Server, srv)
        return None
    return c.server


def _fast_maxlen(argv: list[bytes], argc: int) -> tuple[int, int]:
    """XADD's fast path: `MAXLEN [~] n` at argv[2] as (the ID's position, n); n is -1
    without MAXLEN and -2 when _xadd_general must parse it (`=`, a bad n)."""
    opt = argv[2]
    if not (len(opt) == 6 and argc > 6 and opt.lower() == b"maxlen"):
        return 2, -1
    i = 4 if argv[3] == b"~" else 3
    n = string2ll(argv[i])
    if n is None or n < 0:
        return i, -2
    return i + 1, n


def _plain_id(idarg: bytes) -> tuple[int, int]:
    """XADD's fast path: `ms-seq` in plain digits (what effects carry) as its parts; (0, 0)
    for anything else, which _xadd_general parses in full (0-0 itself is an error there)."""
    msb, _, seqb = idarg.partition(b"-")
    if not (msb.isdigit() and seqb.isdigit() and len(idarg) < 128):
        return 0, 0
    ms = int(msb)
    seq = int(seqb)
    if ms > SEQ_MAX or seq > SEQ_MAX:
        return 0, 0
    return ms, seq


def _fast_stream(db: Keyspace, key: bytes) -> Stream | None:
    """XADD's fast path: the existing stream at `key`, bound to its name's partition rule
    (node/stream.py); None for a new key or an exhausted stream, which _xadd_general creates
    or refuses."""
    s = db.get_stream(key)
    if s is None or (s.last_ms == _U64_MAX and s.last_seq == _U64_MAX):
        return None
    if s.stride < 0:
        s.bind_key(key)
    return s


def _id_of_reply(reply: bytes) -> bytes:
    """The ID inside id_bulk's `$<n>\r\n<id>\r\n` (n is 3 to 41 digits long)."""
    off = 4 if reply[2] == 13 else 5
    if cython.compiled:
        return PyBytes_FromStringAndSize(PyBytes_AS_STRING(reply) + off, len(reply) - 2 - off)
    return reply[off:-2]


def _fast_effect(s: Stream, argv: list[bytes], i: int, maxlen: int, ids: bytes,
                 cfg: Config) -> list[bytes]:
    """XADD's fast path, after the append: trim by `MAXLEN [~] n` (maxlen >= 0) and return
    the effect, with the final ID and a `~` trim as the exact MAXLEN that has its result."""
    if maxlen < 0:
        eff = argv[:]
        eff[2] = ids
        return eff
    if argv[3] == b"~":
        s.trim("maxlen", maxlen, True, _approx_limit(cfg.stream_node_max_entries))
        maxlen = s.length
    else:
        s.trim("maxlen", maxlen, False, 0)
    eff = [argv[0], argv[1], b"MAXLEN", b"%d" % maxlen, ids]
    eff += argv[i + 1:]
    return eff


def _approx_limit(node_max_entries: int) -> int:
    """Default work cap of a `~` trim: 100 nodes' worth of entries, clamped as Redis does."""
    lim = 100 * node_max_entries
    if lim <= 0:
        return 10000
    return min(lim, 1000000)


def _xadd_general(c: Client, argv: list[bytes]) -> bytes:
    a, idpos = _parse_add_or_trim(c, argv, True)
    nfields = len(argv) - idpos - 1
    if nfields < 2 or nfields & 1:
        raise ReplyError(_WRONG_ARITY_XADD)
    if a.id_given and a.seq_given and a.id == 0:
        raise ReplyError(errors.XADD_ID_ZERO)

    key = argv[1]
    db = c.db
    s = db.get_stream(key)
    created = s is None
    if s is None:
        if a.nomkstream:
            return null(c.proto)
        s = Stream()
    elif s.last_id == MAX_ID:
        raise ReplyError(errors.XADD_EXHAUSTED)
    if s.stride < 0:
        s.bind_key(key)

    config = c.server.config
    pid = a.idmp_pid
    iid = b""
    fields = argv[idpos + 1:]
    try:
        sid = _general_id(c, s, a)
        if pid is not None:
            iid = a.idmp_iid if a.idmp_iid is not None else auto_iid(fields)
            dup = _idmp_duplicate(s, pid, iid, sid)
            if dup is not None:
                return dup
        s.append(sid, fields, config.stream_node_max_entries, config.stream_node_max_bytes)
    except IDTooSmall:
        raise ReplyError(errors.XADD_ID_TOO_SMALL) from None
    except ElementsTooLarge:
        raise ReplyError(errors.XADD_TOO_LARGE) from None
    ids = b"%d-%d" % (sid >> 64, sid & SEQ_MAX)
    if pid is not None:
        if s.idmp is None:  # the stream's first IDMP entry: the configs' limits
            s.idmp = IdmpMap(config.stream_idmp_duration, config.stream_idmp_maxsize)
        s.idmp.record(pid, iid, sid, sid >> 64)

    if created:
        db.set(key, s)
    else:
        db.changed(key, ready=True)

    # The effect: the final ID, and a `~` trim as the exact trim that has the same result.
    eff = [argv[0], key]
    if a.nomkstream:
        eff.append(b"NOMKSTREAM")
    if pid is not None:
        eff += [b"IDMP", pid, iid]
    if a.strategy is not None:
        eff += _trim(s, a)[1]
    eff.append(ids)
    eff += fields
    c.server.dirty += 1
    c.server.propagate(eff)
    return bulk(ids)


def _general_id(c: Client, s: Stream, a: TrimArgs) -> int:
    """The ID of `*`, `ms-*` or an explicit ID on `s` (bound to its key's partition rule)."""
    if not a.id_given:
        sid = s.next_auto_id(c.server.now_ms())
        if sid == 0:  # a partition key whose last millisecond has no sequence left
            raise ReplyError(errors.XADD_EXHAUSTED)
        return sid
    if not a.seq_given:
        return s.next_seq_id(a.id >> 64)
    if s.stride > 0 and (a.id & SEQ_MAX) % s.stride != s.residue:
        raise ReplyError(errors.xadd_partition_seq(s.residue, s.stride))
    return a.id


def _idmp_duplicate(s: Stream, pid: bytes, iid: bytes, sid: int) -> bytes | None:
    """The reply to an IDMP/IDMPAUTO XADD whose (pid, iid) the stream has seen: the original
    ID. Checked before the ID, so a retried explicit-ID XADD gets its ID back instead of "ID
    too small". Now = the stream clock (node/idmp.py)."""
    m = s.idmp
    if m is None:
        return None
    orig = m.lookup(pid, iid, max(sid, s.last_id) >> 64)
    if orig is None:
        return None
    m.duplicates += 1
    return bulk(format_id(orig))


@command(b"xtrim")
def xtrim(c: Client, argv: list[bytes]) -> bytes:
    """XTRIM key (MAXLEN|MINID) [=|~] threshold [LIMIT count] [KEEPREF|DELREF|ACKED]"""
    a, _ = _parse_add_or_trim(c, argv, False)
    key = argv[1]
    s = c.db.get_stream(key)
    if s is None:
        return ZERO
    deleted, eff = _trim(s, a)
    if deleted:
        c.db.changed(key)
        c.server.dirty += deleted
        c.server.propagate([argv[0], key] + eff)
    return integer(deleted)


@command(b"xdel")
def xdel(c: Client, argv: list[bytes]) -> bytes:
    """XDEL key id [id ...]"""
    key = argv[1]
    s = c.db.get_stream(key)
    if s is None:
        return ZERO
    # All IDs are checked before anything is deleted, so the command is all or nothing.
    ids = [parse_strict_id_or_error(b) for b in argv[2:]]
    deleted = 0
    for sid in ids:
        if s.delete(sid):
            deleted += 1
    if deleted:
        c.db.changed(key)
        c.server.dirty += deleted
        c.server.propagate(argv)
    return integer(deleted)


def parse_policy_and_ids(argv: list[bytes], i: int, exact: bool = True
                         ) -> tuple[int, list[int], int]:
    """`[KEEPREF|DELREF|ACKED] IDS numids id ...` from argv[i] (XDELEX, XACKDEL; XNACK
    passes exact=False and has no policy): (policy, IDs, index after the IDs). Every ID is
    parsed before anything changes, so a bad one changes nothing."""
    policy = KEEPREF
    argc = len(argv)
    if exact and i < argc and argv[i].lower() in POLICIES:
        policy = POLICIES[argv[i].lower()]
        i += 1
    if i + 1 >= argc or argv[i].lower() != b"ids":
        raise ReplyError(errors.SYNTAX)
    numids = string2ll(argv[i + 1])
    if numids is None or numids <= 0:
        raise ReplyError(errors.NUMIDS_POSITIVE)
    i += 2
    if (argc - i != numids) if exact else (argc - i < numids):
        raise ReplyError(errors.NUMIDS_MISMATCH)
    ids = [parse_strict_id_or_error(b) for b in argv[i:i + numids]]
    return policy, ids, i + numids


def ids_reply(codes: list[int]) -> bytes:
    return array_header(len(codes)) + b"".join([integer(x) for x in codes])


@command(b"xdelex")
def xdelex(c: Client, argv: list[bytes]) -> bytes:
    """XDELEX key [KEEPREF|DELREF|ACKED] IDS numids id [id ...]  (Redis 8.2)

    One reply per ID: -1 no such entry, 1 deleted, 2 kept because a group still references
    it (ACKED). Goes out verbatim: its result is a function of the stream and its groups,
    which replicas hold identically."""
    key = argv[1]
    s = c.db.get_stream(key)
    policy, ids, _ = parse_policy_and_ids(argv, 2)
    if s is None:
        return ids_reply([-1] * len(ids))
    codes = [delete_entry(s, sid, policy) for sid in ids]
    deleted = codes.count(1)
    if deleted:
        c.db.changed(key)
        c.server.dirty += deleted
        c.server.propagate(argv)
    return ids_reply(codes)


@command(b"xlen")
def xlen(c: Client, argv: list[bytes]) -> bytes:
    """XLEN key"""
    s = c.db.get_stream(argv[1])
    return ZERO if s is None else integer(s.length)


def _xrange_generic(c: Client, argv: list[bytes], rev: bool) -> bytes:
    """XRANGE key start end [COUNT n] / XREVRANGE key end start [COUNT n].

    An incomplete start gets sequence 0 and an incomplete end the maximal sequence; '(' makes a
    bound exclusive, so `XRANGE s (1-0 (2-0` is 1-1 .. 1-18446744073709551615.
    """
    startarg, endarg = (argv[3], argv[2]) if rev else (argv[2], argv[3])
    start, startex = parse_range_id_or_error(startarg, 0)
    if startex:
        if start == MAX_ID:
            raise ReplyError(errors.INVALID_START_ID)
        start += 1
    end, endex = parse_range_id_or_error(endarg, SEQ_MAX)
    if endex:
        if end == 0:
            raise ReplyError(errors.INVALID_END_ID)
        end -= 1
    count = -1
    j = 4
    argc = len(argv)
    while j < argc:
        if argv[j].lower() == b"count" and j + 1 < argc:
            v = string2ll(argv[j + 1])
            if v is None:
                raise ReplyError(errors.NOT_INTEGER)
            count = v if v >= 0 else 0
            j += 2
        else:
            raise ReplyError(errors.SYNTAX)
    s = c.db.get_stream(argv[1])
    if s is None:
        return EMPTY_ARRAY
    if count == 0:
        return null_array(c.proto)
    n, body = stream_range_reply(s, start, end, None if count < 0 else count, rev)
    return array_header(n) + body


@command(b"xrange")
def xrange(c: Client, argv: list[bytes]) -> bytes:
    """XRANGE key start end [COUNT count]"""
    return _xrange_generic(c, argv, False)


@command(b"xrevrange")
def xrevrange(c: Client, argv: list[bytes]) -> bytes:
    """XREVRANGE key end start [COUNT count]"""
    return _xrange_generic(c, argv, True)


@command(b"xsetid")
def xsetid(c: Client, argv: list[bytes]) -> bytes:
    """XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]"""
    sid = parse_strict_id_or_error(argv[2])
    entries_added = -1
    max_xdel = 0
    i = 3
    argc = len(argv)
    while i < argc:
        moreargs = argc - 1 - i
        opt = argv[i].lower()
        if opt == b"entriesadded" and moreargs:
            entries_added = errors.parse_non_negative_or_error(
                argv[i + 1], errors.XSETID_ENTRIES_ADDED_NEGATIVE)
            i += 2
        elif opt == b"maxdeletedid" and moreargs:
            max_xdel = parse_strict_id_or_error(argv[i + 1])
            if sid < max_xdel:
                raise ReplyError(errors.XSETID_SMALLER_THAN_MAXDEL)
            i += 2
        else:
            raise ReplyError(errors.SYNTAX)
    key = argv[1]
    s = c.db.get_stream(key)
    if s is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    if sid < s.max_deleted_entry_id:
        # Redis 7.2+: never move the last ID below a deleted one, or a later XADD could reuse
        # the ID of a deleted entry (and land below the first key of a kept node).
        raise ReplyError(errors.XSETID_SMALLER_THAN_CURRENT_MAXDEL)
    if s.length > 0:
        if sid < s.last_valid_id():
            raise ReplyError(errors.XSETID_SMALLER_THAN_TOP)
        if entries_added != -1 and s.length > entries_added:
            raise ReplyError(errors.XSETID_ENTRIES_ADDED_SMALL)
    s.last_id = sid
    if entries_added != -1:
        s.entries_added = entries_added
    if max_xdel:
        s.max_deleted_entry_id = max_xdel
    c.db.changed(key)
    c.server.dirty += 1
    c.server.propagate(argv)
    return OK


@command(b"xcfgset")
def xcfgset(c: Client, argv: list[bytes]) -> bytes:
    """XCFGSET key [IDMP-DURATION seconds] [IDMP-MAXSIZE count]  (Redis 8.6)"""
    duration = maxsize = None
    i = 2
    argc = len(argv)
    while i < argc:
        opt = argv[i].lower()
        if opt == b"idmp-duration" and i + 1 < argc:
            duration = errors.parse_int_or_error(argv[i + 1])
            if not 1 <= duration <= MAX_DURATION:
                raise ReplyError(errors.IDMP_DURATION_RANGE)
        elif opt == b"idmp-maxsize" and i + 1 < argc:
            maxsize = errors.parse_int_or_error(argv[i + 1])
            if not 1 <= maxsize <= MAX_MAXSIZE:
                raise ReplyError(errors.IDMP_MAXSIZE_RANGE)
        else:
            raise ReplyError(errors.SYNTAX)
        i += 2
    if duration is None and maxsize is None:
        raise ReplyError(errors.XCFGSET_NO_PARAMETER)
    key = argv[1]
    s = c.db.get_stream(key)
    if s is None:
        raise ReplyError(errors.NO_SUCH_KEY)
    if s.idmp is None:
        config = c.server.config
        s.idmp = IdmpMap(config.stream_idmp_duration, config.stream_idmp_maxsize)
        s.idmp.configure(duration, maxsize)
    elif not s.idmp.configure(duration, maxsize):
        return OK
    c.db.changed(key)
    c.server.dirty += 1
    c.server.propagate(argv)
    return OK
