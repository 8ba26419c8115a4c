"""The one RESP codec of xshard: reply encoding for RESP2 and RESP3, request framing.

Handlers return encoded bytes. Hot paths build their bytes directly with the small helpers
(`bulk`, `integer`, ...); everything else builds a tree of plain Python values and calls
`encode(value, proto)`, which maps them as follows:

    bytes            -> bulk string              str      -> bulk string (utf-8)
    int / bool       -> integer                  float    -> double (RESP3) / bulk (RESP2)
    None             -> null bulk ($-1 / _)      NULL_ARRAY -> null array (*-1 / _)
    list / tuple     -> array                    Map      -> map (%) / flat array (RESP2)
    Status           -> simple string (+)        ReplyError -> error (-)
    Verbatim         -> verbatim (=txt:) / bulk  RespSet  -> set (~) / array
    Raw              -> embedded as is (already encoded, protocol independent)
"""

from __future__ import annotations

from typing import Any

import cython

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING, PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memchr, memcpy

__all__ = [
    "Status", "Verbatim", "Raw", "Map", "RespSet", "ReplyError", "NULL_ARRAY",
    "OK", "PONG", "QUEUED", "NULL_BULK", "NULL3", "EMPTY_ARRAY", "ZERO", "ONE",
    "CRLF", "ARRAY_HEADS", "BULK_HEADS",
    "encode", "bulk", "bulk_header", "integer", "status", "error", "array_header", "null",
    "null_array", "map_header", "aggregate_header", "keyed_header", "keyed_pair",
    "keyed_key_header",
    "encode_command", "reply_scan", "reply_end", "reply_elements", "bulk_value", "int_value", "error_code",
    "parse_redirect", "Redirect",
]


class Status(bytes):
    """A simple string reply (`+OK`)."""


class Verbatim(bytes):
    """A verbatim text reply (RESP3 `=`, RESP2 bulk), used by INFO and CLIENT INFO."""


class Raw(bytes):
    """Bytes that are already RESP-encoded and identical in RESP2 and RESP3."""


class RespSet(list):
    """A set reply (RESP3 `~`, RESP2 array)."""


class Map(list):
    """A map reply as a list of (key, value) pairs; RESP2 flattens it into an array."""

    @classmethod
    def of(cls, *flat: Any) -> Map:
        it = iter(flat)
        return cls(zip(it, it, strict=True))


class ReplyError(Exception):
    """An error reply. `message` is the full text without the leading '-', e.g. b'ERR syntax error'."""

    def __init__(self, message: bytes | str) -> None:
        if isinstance(message, str):
            message = message.encode()
        message = one_line(message)
        super().__init__(message)
        self.message = message

    @property
    def code(self) -> bytes:
        """The first word (ERR, WRONGTYPE, NOGROUP...), as counted in INFO errorstats."""
        return self.message.split(b" ", 1)[0]


class _NullArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
QUEUED = b"+QUEUED\r\n"
NULL_BULK = b"$-1\r\n"
NULL3 = b"_\r\n"
EMPTY_ARRAY = b"*0\r\n"
ZERO = b":0\r\n"
ONE = b":1\r\n"


CRLF = b"\r\n"
# Headers by count and by length, made once: `%` formatting is most of the cost of a small
# reply (encode_command, and the entry encoders of node/commands/entryreplies.py).
ARRAY_HEADS = [b"*%d\r\n" % n for n in range(256)]
BULK_HEADS = [b"$%d\r\n" % n for n in range(4096)]


def bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def bulk_header(n: int) -> bytes:
    """`$<n>\r\n`: what comes before a bulk string of n bytes."""
    return BULK_HEADS[n] if 0 <= n < 4096 else b"$%d\r\n" % n


def integer(n: int) -> bytes:
    return b":%d\r\n" % n


def status(s: bytes) -> bytes:
    return b"+%s\r\n" % s


def one_line(message: bytes) -> bytes:
    """An error is one line: user input quoted in it (a group name, an ID) must not end it
    early, so CR and LF become spaces as in Redis's addReplyErrorFormat."""
    if b"\r" in message or b"\n" in message:
        return message.replace(b"\r", b" ").replace(b"\n", b" ")
    return message


def error(message: bytes) -> bytes:
    return b"-%s\r\n" % one_line(message)


def array_header(n: int) -> bytes:
    return ARRAY_HEADS[n] if 0 <= n < 256 else b"*%d\r\n" % n


def null(proto: int) -> bytes:
    return NULL3 if proto == 3 else NULL_BULK


def null_array(proto: int) -> bytes:
    return NULL3 if proto == 3 else b"*-1\r\n"


def map_header(n: int, proto: int) -> bytes:
    """A map of n pairs: `%<n>` in RESP3; RESP2 gives it as a flat array of 2n elements."""
    return b"%%%d\r\n" % n if proto == 3 else array_header(2 * n)


def aggregate_header(kind: bytes, n: int) -> bytes:
    """`<kind><n>`: an aggregate of the type (`*`, `%`, `~`, `>`) another reply has, for
    replies merged from several of those; n counts its elements (its pairs for a map)."""
    return b"%s%d\r\n" % (kind, n)


# XREAD's reply is keyed, stream by stream: a RESP3 map key -> entries, or in RESP2 an array of
# [key, entries] pairs. Its headers are formatted once for keys under 256 bytes and for up to
# 15 streams (the XREAD and XREADGROUP reply path).
_KEYED2 = [b"*%d\r\n" % n for n in range(16)]
_KEYED3 = [b"%%%d\r\n" % n for n in range(16)]
_KEY2 = [b"*2\r\n$%d\r\n" % n for n in range(256)]


def keyed_header(n: int, proto: int) -> bytes:
    """The header of a keyed reply of n keys (XREAD's): a RESP3 map of n pairs, or a RESP2
    array of n [key, value] pairs."""
    if n < 16:
        return (_KEYED2 if proto == 2 else _KEYED3)[n]
    return b"*%d\r\n" % n if proto == 2 else b"%%%d\r\n" % n


def keyed_pair(proto: int) -> bytes:
    """What comes before a key in a keyed reply: RESP2's `*2` pair (empty in a RESP3 map)."""
    return ARRAY_HEADS[2] if proto == 2 else b""


def keyed_key_header(klen: int, proto: int) -> bytes:
    """What comes before a key of klen bytes in a keyed reply: RESP2's `*2` pair and the
    key's bulk header, or (RESP3, a map) the bulk header alone."""
    if klen < 256:
        return _KEY2[klen] if proto == 2 else BULK_HEADS[klen]
    return b"*2\r\n$%d\r\n" % klen if proto == 2 else b"$%d\r\n" % klen


def _format_double(x: float) -> bytes:
    if x != x:
        return b"nan"
    if x in (float("inf"), float("-inf")):
        return b"inf" if x > 0 else b"-inf"
    if x == int(x) and abs(x) < 1e17:
        return b"%d" % int(x)
    return repr(x).encode()


def encode(value: Any, proto: int = 2) -> bytes:
    """Encode a reply tree; see the module docstring for the mapping."""
    out: list[bytes] = []
    _encode_into(value, proto, out)
    return b"".join(out)


def _encode_into(v: Any, proto: int, out: list[bytes]) -> None:
    """The common reply values; the others are `_encode_other`'s."""
    t = type(v)
    if t is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(v), v))
    elif t is list or t is tuple:
        out.append(array_header(len(v)))
        for item in v:
            _encode_into(item, proto, out)
    elif t is int:
        out.append(b":%d\r\n" % v)
    elif v is None:
        out.append(NULL3 if proto == 3 else NULL_BULK)
    elif t is Raw:
        out.append(v)
    elif t is Status:
        out.append(b"+%s\r\n" % v)
    elif t is Map:
        out.append(b"%%%d\r\n" % len(v) if proto == 3 else array_header(2 * len(v)))
        for k, item in v:
            _encode_into(k, proto, out)
            _encode_into(item, proto, out)
    else:
        _encode_other(v, t, proto, out)


def _encode_other(v: Any, t: type, proto: int, out: list[bytes]) -> None:
    if t is str:
        b = v.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    elif t is bool:
        out.append(ONE if v else ZERO)
    elif t is float:
        d = _format_double(v)
        out.append(b",%s\r\n" % d if proto == 3 else b"$%d\r\n%s\r\n" % (len(d), d))
    elif v is NULL_ARRAY:
        out.append(null_array(proto))
    elif t is Verbatim:
        if proto == 3:
            out.append(b"=%d\r\ntxt:%s\r\n" % (len(v) + 4, v))
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(v), v))
    elif t is RespSet:
        out.append(b"~%d\r\n" % len(v) if proto == 3 else array_header(len(v)))
        for item in v:
            _encode_into(item, proto, out)
    elif isinstance(v, ReplyError):
        out.append(b"-%s\r\n" % v.message)
    elif isinstance(v, dict):
        _encode_into(Map(v.items()), proto, out)
    elif isinstance(v, bytes):  # other bytes subclasses
        out.append(b"$%d\r\n%s\r\n" % (len(v), v))
    else:
        raise TypeError(f"cannot encode {t.__name__} as RESP")


def encode_command(argv: list[bytes] | tuple[bytes, ...]) -> bytes:
    """A request (array of bulk strings): the wire form of effects and of upstream commands."""
    n = len(argv)
    if cython.compiled and n < 256:
        out = _encode_command_c(argv, n)
        if out is not None:
            return out
    parts = [ARRAY_HEADS[n] if n < 256 else b"*%d\r\n" % n]
    heads = BULK_HEADS
    for a in argv:
        k = len(a)
        parts.append(heads[k] if k < 4096 else b"$%d\r\n" % k)
        parts.append(a)
        parts.append(CRLF)
    return b"".join(parts)


def _encode_command_c(argv: list[bytes] | tuple[bytes, ...], n: int) -> bytes | None:
    """encode_command compiled: the size summed, one bytes allocated and every piece copied
    into place. A join of the 3n+1 pieces cost ~3.3k instructions an effect under callgrind
    (a buffer taken and released per piece), ~30% of a delivery's four effects. None for
    what it does not take (an argument that is not bytes, or of 4096 bytes or more)."""
    heads = BULK_HEADS
    head = ARRAY_HEADS[n]
    total = len(head)
    for a in argv:
        if type(a) is not bytes:
            return None
        k = len(a)
        if k >= 4096:
            return None
        total += len(heads[k]) + k + 2
    out = PyBytes_FromStringAndSize(cython.NULL, total)
    p = PyBytes_AS_STRING(out)
    k = len(head)
    memcpy(p, PyBytes_AS_STRING(head), k)
    p += k
    for a in argv:
        k = len(a)
        h = heads[k]
        memcpy(p, PyBytes_AS_STRING(h), len(h))
        p += len(h)
        memcpy(p, PyBytes_AS_STRING(a), k)
        p += k
        p[0] = 13
        p[1] = 10
        p += 2
    return out


# --- requests ----------------------------------------------------------------------------------
# Requests are framed by hiredis on the hot path. These two functions cover what hiredis cannot:
# inline commands (telnet, `redis-cli` pipes) and Redis's exact protocol-error texts and limits,
# which must be known before a huge declared length is buffered.

PROTO_INLINE_MAX_SIZE = 64 * 1024
PROTO_UNAUTH_MULTIBULK = 10
PROTO_UNAUTH_BULK = 16384
INT_MAX = (1 << 31) - 1


def check_request_header(buf: bytes, max_bulk: int, authed: bool) -> bytes | None:
    """Validate the headers of a (possibly partial) multibulk request at the start of `buf`.

    Returns Redis's protocol-error text (without 'ERR Protocol error: ') or None if nothing is
    wrong so far. Mirrors processMultibulkBuffer in Redis's networking.c.
    """
    nl = buf.find(b"\r\n")
    if nl < 0:
        return b"too big mbulk count string" if len(buf) > PROTO_INLINE_MAX_SIZE else None
    n = _strict_ll(buf[1:nl])
    if n is None or n > INT_MAX:
        return b"invalid multibulk length"
    if n > PROTO_UNAUTH_MULTIBULK and not authed:
        return b"unauthenticated multibulk length"
    pos = nl + 2
    for _ in range(max(n, 0)):
        if pos >= len(buf):
            return None
        if buf[pos] != 36:  # '$'
            return b"expected '$', got '%s'" % buf[pos:pos + 1]
        nl = buf.find(b"\r\n", pos)
        if nl < 0:
            return b"too big bulk count string" if len(buf) - pos > PROTO_INLINE_MAX_SIZE else None
        ln = _strict_ll(buf[pos + 1:nl])
        if ln is None or ln < 0 or ln > max_bulk:
            return b"invalid bulk length"
        if ln > PROTO_UNAUTH_BULK and not authed:
            return b"unauthenticated bulk length"
        pos = nl + 2 + ln + 2
    return None


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_HEX = b"0123456789abcdefABCDEF"


def split_inline_args(line: bytes) -> list[bytes] | None:
    """Redis sdssplitargs: spaces separate, "double" quotes take escapes, 'single' take \\'.

    Returns None for unbalanced quotes (or a closing quote not followed by a space). Redis
    reads the line as a C string, so a NUL byte ends it (parse_request never passes one).
    """
    line = line.split(b"\0", 1)[0]
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in b" \n\r\t\v\f":
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        quote = 0  # the open quote, 34 (") or 39 ('), or 0 outside quotes
        while True:
            if quote:
                if i >= n:
                    return None
                ch = line[i]
                if quote == 34 and ch == 92 and i + 3 < n and line[i + 1] == 120 \
                        and line[i + 2] in _HEX and line[i + 3] in _HEX:  # \xHH
                    cur.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif quote == 34 and ch == 92 and i + 1 < n:
                    i += 1
                    cur += _ESCAPES.get(line[i], bytes([line[i]]))
                elif quote == 39 and ch == 92 and i + 1 < n and line[i + 1] == 39:
                    i += 1
                    cur.append(39)
                elif ch == quote:  # the closing quote must end the argument
                    if i + 1 < n and line[i + 1] not in b" \n\r\t\v\f":
                        return None
                    i += 1
                    break
                else:
                    cur.append(ch)
            else:
                if i >= n:
                    break
                ch = line[i]
                if ch in b" \n\r\t\v\f":
                    break
                if ch == 34 or ch == 39:
                    quote = ch
                else:
                    cur.append(ch)
            i += 1
        args.append(bytes(cur))


class ProtocolError(Exception):
    """A malformed request; `text` is Redis's reason (after 'Protocol error: ')."""

    def __init__(self, text: bytes) -> None:
        super().__init__(text)
        self.text = text


SKIP: list[bytes] = []  # parse_request's "nothing to run" (empty line, *0, *-1)


def parse_request(buf: bytes, pos: int, max_bulk: int, authed: bool) -> tuple[list[bytes] | None, int]:
    """Parse one request at `pos` exactly as Redis's processInlineBuffer/processMultibulkBuffer.

    Returns (argv, end), (SKIP, end) for a request that runs nothing, or (None, pos) when more
    bytes are needed; raises ProtocolError. This is the slow path: hiredis frames ordinary
    traffic, and this takes over for inline commands and anything hiredis rejects.
    """
    n = len(buf)
    if pos >= n:
        return None, pos
    if buf[pos] != 42:  # not '*': an inline command
        nl = buf.find(b"\n", pos)
        if nl >= 0 and buf.find(b"\0", pos, nl) >= 0:
            nl = -1  # Redis finds the newline with strchr, which stops at a NUL: no line yet
        if nl < 0:
            if n - pos > PROTO_INLINE_MAX_SIZE:
                raise ProtocolError(b"too big inline request")
            return None, pos
        line = buf[pos:nl]
        if line.endswith(b"\r"):
            line = line[:-1]
        argv = split_inline_args(line)
        if argv is None:
            raise ProtocolError(b"unbalanced quotes in request")
        return (argv or SKIP), nl + 1
    head = multibulk_header(buf, pos, authed)
    if head is None:
        return None, pos
    count, p = head
    if count <= 0:
        return SKIP, p
    args: list[bytes] = []
    p = collect_bulks(buf, p, count, args, max_bulk, authed)
    return (args, p) if len(args) == count else (None, pos)


def multibulk_header(buf: bytes, pos: int, authed: bool) -> tuple[int, int] | None:
    """The declared count of the multibulk request at `pos` and where its elements start, or
    None while the header line is incomplete; raises ProtocolError as Redis does."""
    cr = buf.find(b"\r", pos)
    if cr < 0:
        if len(buf) - pos > PROTO_INLINE_MAX_SIZE:
            raise ProtocolError(b"too big mbulk count string")
        return None
    if cr + 1 >= len(buf):
        return None
    count = _strict_ll(buf[pos + 1:cr])
    if count is None or count > INT_MAX:
        raise ProtocolError(b"invalid multibulk length")
    if count > PROTO_UNAUTH_MULTIBULK and not authed:
        raise ProtocolError(b"unauthenticated multibulk length")
    return count, cr + 2


def collect_bulks(buf: bytes, p: int, count: int, argv: list[bytes], max_bulk: int,
                  authed: bool) -> int:
    """Append the complete bulk strings at `p` to `argv` until it holds `count`; returns where
    the next unread byte is. A caller can keep `argv` between reads and go on from there, so
    a request declaring millions of elements is read once, not again on every read."""
    n = len(buf)
    while len(argv) < count:
        if p >= n:
            return p
        cr = buf.find(b"\r", p)
        if cr < 0:
            if n - p > PROTO_INLINE_MAX_SIZE:
                raise ProtocolError(b"too big bulk count string")
            return p
        if buf[p] != 36:  # '$'
            raise ProtocolError(b"expected '$', got '%s'" % buf[p:p + 1])
        if cr + 1 >= n:
            return p
        ln = _strict_ll(buf[p + 1:cr])
        if ln is None or ln < 0 or ln > max_bulk:
            raise ProtocolError(b"invalid bulk length")
        if ln > PROTO_UNAUTH_BULK and not authed:
            raise ProtocolError(b"unauthenticated bulk length")
        start = cr + 2
        if start + ln + 2 > n:
            return p
        argv.append(buf[start:start + ln])
        p = start + ln + 2  # Redis skips the two bytes after a bulk without looking at them
    return p


def _strict_ll(b: bytes) -> int | None:
    """Redis string2ll on a header number: no spaces, no '+', no leading zeros."""
    if not b or len(b) > 20:
        return None
    if b == b"0":
        return 0
    digits = b[1:] if b[:1] == b"-" else b
    if not digits.isdigit() or digits[:1] == b"0":
        return None
    return int(b)


# --- framing replies (the router relays them without decoding) --------------------------------
_AGGREGATE = frozenset(b"*~>")  # counted elements
_PAIRS = frozenset(b"%|")  # counted pairs (an attribute `|` is followed by the reply itself)
_BLOBS = frozenset(b"$=!")  # length-prefixed payloads


def reply_scan(buf: bytes | bytearray, pos: int, need: int = 1) -> tuple[int, int]:
    """Step over whole reply elements from `pos` while `need` of them remain.

    Returns (pos, need): need 0 means a reply ended at pos; otherwise pos is the start of the
    first incomplete element, and scanning resumes there once more bytes arrived, so a reply
    is scanned once however it is chunked. Only framing is done, so a proxy can forward
    replies as the bytes they are."""
    if cython.compiled and type(buf) is bytes:
        got = _scan_bytes(buf, pos, need)
        if got is not None:
            return got
    n = len(buf)
    while need:
        if pos >= n:
            return pos, need
        e = buf.find(b"\r\n", pos)
        if e < 0:
            return pos, need
        t = buf[pos]
        if t in _BLOBS:
            ln = int(buf[pos + 1:e])
            end = e + 2 if ln < 0 else e + 4 + ln
            if end > n:
                return pos, need
            pos = end
        elif t in _AGGREGATE or t in _PAIRS:
            cnt = int(buf[pos + 1:e])
            pos = e + 2
            if cnt > 0:
                need += cnt * 2 if t in _PAIRS else cnt
            if t == 124:  # b"|": the attribute's reply follows it
                need += 1
        else:
            pos = e + 2
        need -= 1
    return pos, 0


def _scan_bytes(buf: bytes, pos: int, need: int) -> tuple[int, int] | None:
    """reply_scan over `bytes`, compiled: a C loop with memchr and the lengths read as C
    integers (the router frames every reply it relays with it). None on a length that is not
    a plain decimal number: the general loop then says what int() says about it."""
    n = len(buf)
    base = PyBytes_AS_STRING(buf)
    while need:
        if pos >= n:
            return pos, need
        q = cython.cast(cython.p_char, memchr(base + pos, 13, n - pos))
        while q != cython.NULL and (q - base + 1 >= n or q[1] != 10):
            e = q - base + 1
            q = cython.cast(cython.p_char, memchr(base + e, 13, n - e)) if e < n else cython.NULL
        if q == cython.NULL:
            return pos, need
        e = q - base
        t = cython.cast(cython.uchar, base[pos])
        if t == 36 or t == 61 or t == 33 or t == 42 or t == 126 or t == 62 or t == 37 \
                or t == 124:  # $ = ! (a payload)  * ~ > (elements)  % | (pairs)
            i = pos + 1
            neg = i < e and base[i] == 45
            if neg:
                i += 1
            if i >= e:
                return None
            v = 0
            while i < e:
                d = base[i] - 48
                if d < 0 or d > 9 or v > 100_000_000_000_000:
                    return None
                v = v * 10 + d
                i += 1
            neg = neg and v > 0  # int(b"-0") is 0
            if t == 36 or t == 61 or t == 33:
                end = e + 2 if neg else e + 4 + v
                if end > n:
                    return pos, need
                pos = end
            else:
                pos = e + 2
                if not neg and v > 0:
                    need += v * 2 if t == 37 or t == 124 else v
                if t == 124:  # b"|": the attribute's reply follows it
                    need += 1
        else:
            pos = e + 2
        need -= 1
    return pos, 0


def reply_end(buf: bytes, pos: int = 0) -> int:
    """The offset just past the complete reply that starts at `pos`, or -1 if more bytes are
    needed."""
    end, need = reply_scan(buf, pos)
    return -1 if need else end


# --- reading replies ---------------------------------------------------------------------------
# A proxy relays replies as bytes. The few it must look into are read here and nowhere else:
# aggregates are split into their elements' bytes (so a merge re-frames them without decoding),
# and errors are classified by their code, as redis-py's parse_error does, never by a prefix
# match at the call site.

def reply_elements(r: bytes) -> tuple[bytes, list[bytes]]:
    """(type byte, each element's bytes) of an aggregate reply; a map gives keys and values
    alternately, and a null aggregate gives no elements."""
    e = r.find(b"\r\n")
    n = int(r[1:e])
    pos = e + 2
    out = []
    for _ in range(max(n, 0) * (2 if r[:1] == b"%" else 1)):
        end = reply_end(r, pos)
        out.append(r[pos:end])
        pos = end
    return r[:1], out


def bulk_value(r: bytes) -> bytes:
    """The payload of a bulk string reply."""
    e = r.find(b"\r\n")
    return r[e + 2:e + 2 + int(r[1:e])]


def int_value(r: bytes) -> int:
    """The value of an integer reply."""
    return int(r[1:-2])


def error_code(r: bytes) -> bytes | None:
    """The code of an error reply (b"ERR", b"MOVED", b"NOGROUP", ...); None if `r` is not one."""
    if r[:1] != b"-":
        return None
    end = len(r) - 2
    sp = r.find(b" ", 1, end)
    return r[1:sp if sp > 0 else end]


Redirect = tuple[bytes, int, str, int]


def parse_redirect(r: bytes) -> Redirect | None:
    """(b"MOVED" or b"ASK", slot, host, port) of a redirect reply; None for any other reply.

    The host may be empty: Redis sends `-MOVED 3999 :6380` when the target is on the host the
    client already talks to."""
    code = error_code(r)
    if code != b"MOVED" and code != b"ASK":
        return None
    try:
        _, slot, target = r[1:-2].split(b" ", 2)
        host, _, port = target.rpartition(b":")
        return code, int(slot), host.decode(), int(port)
    except ValueError:
        return None
