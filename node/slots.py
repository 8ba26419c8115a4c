"""Keys to Redis Cluster hash slots: CRC16 (XMODEM) of the key or of its {hash tag}, mod 16384.

The one slot function of xshard: nodes, routers and the pipeline import it from here, so that
everybody agrees on where a key lives.
"""

from __future__ import annotations

from binascii import crc_hqx

SLOTS = 16384


def key_slot(key: bytes) -> int:
    """The slot of a key. Only the text between the first '{' and the next '}' is hashed,
    unless that is empty (then the whole key is)."""
    # binascii.crc_hqx is CRC-16/XMODEM (poly 0x1021, initial 0), the CRC16 of Redis Cluster.
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc_hqx(key, 0) & 16383
