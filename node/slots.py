"""Keys to Redis Cluster hash slots: CRC16 (XMODEM) of the key or of its {hash tag}, mod 16384.

The one slot function of xshard: nodes, routers and the pipeline import it from here, so that
everybody agrees on where a key lives.
"""

from __future__ import annotations

from binascii import crc_hqx

import cython

from base.records import SLOTS  # noqa: F401 - one count for the slot map and the hash

if cython.compiled:
    from cython.cimports.cpython.bytes import PyBytes_AS_STRING
    from cython.cimports.libc.string import memchr



def key_slot(key: bytes) -> int:
    """The slot of a key. Only the text between the first '{' and the next '}' is hashed,
    unless that is empty (then the whole key is)."""
    # binascii.crc_hqx is CRC-16/XMODEM (poly 0x1021, initial 0), the CRC16 of Redis Cluster.
    if cython.compiled and type(key) is bytes:  # the router's per-request case: memchr
        n = len(key)
        base = PyBytes_AS_STRING(key)
        q = cython.cast(cython.p_char, memchr(base, 123, n))  # b"{"
        if q != cython.NULL:
            s = q - base
            q = cython.cast(cython.p_char, memchr(q + 1, 125, n - s - 1))  # b"}"
            if q != cython.NULL and q - base > s + 1:
                key = key[s + 1:q - base]
        return crc_hqx(key, 0) & 16383
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc_hqx(key, 0) & 16383


def keys_in_slots(slots: list[int], per_slot: int = 1, prefix: str = "k") -> list[str]:
    """`per_slot` key names `<prefix><n>` in each of `slots` (found by counting), slot by slot:
    for tests, benchmarks and tools that need keys in given slots."""
    want: dict[int, list[str]] = {s: [] for s in slots}
    i = 0
    while any(len(v) < per_slot for v in want.values()):
        k = f"{prefix}{i}"
        s = key_slot(k.encode())
        if s in want and len(want[s]) < per_slot:
            want[s].append(k)
        i += 1
    return [k for v in want.values() for k in v]
