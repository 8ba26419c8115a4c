"""The byte sizes of Redis's listpack encoding, which decide where a stream node ends.

A stream keeps, for each node, the exact size Redis's listpack for it would have
(node/stream.py), so that nodes split where Redis's do and `~` trims and XINFO's
radix-tree-keys agree with Redis. These functions compute those sizes without building the
listpack; node/rdb.py builds the real bytes for DUMP. Compiled with node/stream.py
(node/native.py)."""

from __future__ import annotations

from node.streamid import SEQ_MAX

_I64 = 1 << 63
_U64 = 1 << 64

# --- listpack sizes ---------------------------------------------------------------------------
# A listpack element is its encoding plus a "backlen" of 1-5 bytes. Redis stores a string that
# parses as a canonical int64 (lpStringToInt64) as an integer.


def _isz(v: int) -> int:
    """Size of an integer element (encoding + 1 backlen byte)."""
    if 0 <= v <= 127:
        return 2
    if -4096 <= v <= 4095:
        return 3
    if -32768 <= v <= 32767:
        return 4
    if -8388608 <= v <= 8388607:
        return 5
    if -2147483648 <= v <= 2147483647:
        return 6
    return 10


def _backlen(n: int) -> int:
    if n <= 127:
        return 1
    if n < 16383:
        return 2
    if n < 2097151:
        return 3
    if n < 268435455:
        return 4
    return 5


def _ssz(n: int) -> int:
    """Size of a string element of n bytes."""
    enc = 1 + n if n < 64 else (2 + n if n < 4096 else 5 + n)
    return enc + _backlen(enc)


_SSZ = [_ssz(n) for n in range(4096)]
_INTSTART = frozenset(b"-0123456789")
_LLMAX = (1 << 63) - 1


def _as_int(b: bytes) -> int | None:
    """lpStringToInt64: canonical decimal int64 (no '+', no spaces, no leading zeros)."""
    if b.isdigit():
        if b[0] == 48 and len(b) > 1:
            return None
        v = int(b)
        return v if v <= _LLMAX else None
    if b[0] == 45 and len(b) > 1 and b[1] != 48:
        t = b[1:]
        if t.isdigit():
            v = -int(t)
            return v if v >= -_I64 else None
    return None


def _esz(b: bytes) -> int:
    """Size of one stored field or value."""
    n = len(b)
    if 0 < n < 21 and b[0] in _INTSTART:
        v = _as_int(b)
        if v is not None:
            return _isz(v)
    return _SSZ[n] if n < 4096 else _ssz(n)


# Integer element sizes of canonical decimal strings by digit count, without int(): for digit
# strings of one length without leading zeros, bytes order is numeric order. (limit, size if
# <= limit, size otherwise); limit None: one size for the whole length; size 0: beyond int64,
# stored as a string.
_POS_ISZ: list[tuple[bytes | None, int, int]] = [
    (None, 0, 0), (None, 2, 2), (None, 2, 2), (b"127", 2, 3), (b"4095", 3, 4), (b"32767", 4, 5),
    (None, 5, 5), (b"8388607", 5, 6), (None, 6, 6), (None, 6, 6), (b"2147483647", 6, 10),
    *[(None, 10, 10)] * 8, (b"9223372036854775807", 10, 0), (None, 0, 0)]
_NEG_ISZ: list[tuple[bytes | None, int, int]] = [  # by digits after the '-'
    (None, 0, 0), (None, 3, 3), (None, 3, 3), (None, 3, 3), (b"4096", 3, 4), (b"32768", 4, 5),
    (None, 5, 5), (b"8388608", 5, 6), (None, 6, 6), (None, 6, 6), (b"2147483648", 6, 10),
    *[(None, 10, 10)] * 8, (b"9223372036854775808", 10, 0)]


def _sum_esz(items: list[bytes], start: int = 0, step: int = 1) -> int:
    """Sum of _esz over items[start::step], with lpStringToInt64 + _isz inlined as table
    lookups because XADD runs it on every value (the values of `[f1, v1, ...]` are start 1,
    step 2: no slice). A value is sized as an int only if it is all digits (after an optional
    '-'), has no leading zero, and fits int64."""
    s = 0
    i = start
    end = len(items)
    while i < end:  # (a range with a variable step is a Python object even compiled)
        b = items[i]
        i += step
        n = len(b)
        if n < 21 and n:
            c0 = b[0]
            if 48 <= c0 <= 57:
                if (c0 != 48 or n == 1) and b.isdigit():
                    lim, lo, hi = _POS_ISZ[n]
                    z = lo if lim is None or b <= lim else hi
                    if z:
                        s += z
                        continue
            elif c0 == 45 and n > 1 and b[1] != 48:
                t = b[1:]
                if t.isdigit():
                    lim, lo, hi = _NEG_ISZ[n - 1]
                    z = lo if lim is None or t <= lim else hi
                    if z:
                        s += z
                        continue
        # (statements, not one conditional expression: compiled, a Python operand anywhere in
        # an expression makes the whole sum Python ints)
        if n < 64:
            s += n + 2
        elif n < 4096:
            s += _SSZ[n]
        else:
            s += _ssz(n)
    return s


def _s64(x: int) -> int:
    """A uint64 difference as Redis stores it: reinterpreted as int64."""
    x &= SEQ_MAX
    return x - _U64 if x >= _I64 else x


def _counters_size(live: int, ndel: int) -> int:
    return (2 if live < 128 else _isz(live)) + (2 if ndel < 128 else _isz(ndel))
