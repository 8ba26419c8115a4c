"""Stream IDs: one int per ID, and Redis's rules for reading and writing them.

An ID `ms-seq` is the int `ms << 64 | seq`, so that comparing two IDs is one int comparison and
"the next ID" is `+ 1` (t_stream.c streamIncrID). The parsers follow streamGenericParseIDOrReply
and streamParseStrictIDOrReply, so that the same odd input (spaces, signs, `-`/`+`, a missing
sequence) gets the same result as on Redis. XADD's own `ms-*` form stays with XADD.
"""

from __future__ import annotations

from node import errors
from node.errors import ULLONG_MAX, string2ull
from node.resp import ReplyError

SEQ_MAX = ULLONG_MAX  # the largest sequence number (and the largest ms)
MAX_ID = (ULLONG_MAX << 64) | ULLONG_MAX  # `+`: 18446744073709551615-18446744073709551615


def format_id(sid: int) -> bytes:
    return b"%d-%d" % (sid >> 64, sid & SEQ_MAX)


def parse_id(b: bytes, missing_seq: int = 0, strict: bool = False) -> int | None:
    """Redis streamGenericParseIDOrReply without the '*' sequence form; None if invalid.

    `missing_seq` is the sequence of a bare `ms` (0 for a start, SEQ_MAX for an end); `strict`
    refuses the `-` and `+` shorthands (streamParseStrictIDOrReply)."""
    # The form every effect and most clients send, `digits-digits`, in three C calls: for
    # plain digits string2ull is strtoull, whatever the leading zeros (a replica parses an ID
    # in every XCLAIM, XACK and XGROUP SETID it applies, and this module runs interpreted).
    msb, dash, seqb = b.partition(b"-")
    if dash and msb.isdigit() and seqb.isdigit() and len(b) <= 127:
        ms = int(msb)
        seq = int(seqb)
        if ms > ULLONG_MAX or seq > ULLONG_MAX:
            return None
        return ms << 64 | seq
    if b[:1].isalpha():
        return None  # a word (XCLAIM's TIME, the option that ends its IDs): strtoull stops at once
    if len(b) > 127:
        return None
    if not strict:
        if b == b"-":
            return 0
        if b == b"+":
            return MAX_ID
    elif b in (b"-", b"+"):
        return None
    dash = b.find(b"-")
    if dash >= 0:
        ms = string2ull(b[:dash])
        seq = string2ull(b[dash + 1:])
        if ms is None or seq is None:
            return None
    else:
        ms = string2ull(b)
        if ms is None:
            return None
        seq = missing_seq
    return ms << 64 | seq


def parse_id_or_error(b: bytes, missing_seq: int = 0, strict: bool = False) -> int:
    sid = parse_id(b, missing_seq, strict)
    if sid is None:
        raise ReplyError(errors.INVALID_STREAM_ID)
    return sid


def parse_strict_id_or_error(b: bytes) -> int:
    """streamParseStrictIDOrReply: '-' and '+' are invalid, a bare `ms` means `ms-0`."""
    return parse_id_or_error(b, 0, strict=True)


def parse_range_id_or_error(b: bytes, missing_seq: int) -> tuple[int, bool]:
    """An XRANGE/XPENDING bound: returns (id, exclusive). '(' makes it exclusive."""
    if b[:1] == b"(" and len(b) > 1:
        return parse_id_or_error(b[1:], missing_seq, strict=True), True
    return parse_id_or_error(b, missing_seq), False
