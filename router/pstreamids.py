"""Which partition the IDs of a command on a partitioned stream name (seq mod stride), on the
path of every XACK: compiled with the relay (router/pstreamids.pxd), so that checking the
100 IDs of one read's XACK costs about what relaying them does, not a Python int per ID.

Only what decides where the request goes is read here: the digits after an ID's last `-`.
A request whose IDs are not all of that shape, or name different partitions, takes the
split path (router/pstreams.py), which parses each ID as Redis does and answers its errors;
an ID whose part before that `-` is not a number goes to the node, which answers Redis's
error for it.
"""

from __future__ import annotations

import cython

from node.streamid import SEQ_MAX

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING

__all__ = ["one_partition"]

_SEQ_MAX_TENTH = SEQ_MAX // 10  # one more digit could overflow 64 bits


def one_partition(ids: list[bytes], stride: int, n: int) -> int:
    """The partition every ID names when that is one of the stream's `n` partitions, else
    -1 (no ID, an ID that does not end `-digits`, a sequence over 2**64 - 1, IDs of different
    partitions, or a partition that does not exist)."""
    p = -1
    for b in ids:
        q = _seq_mod(b, stride)
        if q < 0 or (p >= 0 and q != p):
            return -1
        p = q
    return p if p < n else -1


def _seq_mod(b: bytes, stride: int) -> int:
    """The sequence number of `b` (the digits after its last `-`, 1 to 20 of them) mod
    stride; -1 when there are none or it exceeds 2**64 - 1."""
    if cython.compiled:  # read from the end of the bytes' buffer: only the digits
        s = PyBytes_AS_STRING(b)
        ln = len(b)
        i = ln - 1
        while i >= 0 and 48 <= s[i] <= 57:
            i -= 1
        if i < 0 or s[i] != 45 or i == ln - 1 or ln - 1 - i > 20:
            return -1
        v = 0
        for j in range(i + 1, ln):
            d = s[j] - 48
            if v > _SEQ_MAX_TENTH or (v == _SEQ_MAX_TENTH and d > 5):
                return -1
            v = v * 10 + d
        return v % stride
    _, dash, seq = b.rpartition(b"-")
    if not dash or not seq.isdigit() or len(seq) > 20:
        return -1
    x = int(seq)
    return -1 if x > SEQ_MAX else x % stride
