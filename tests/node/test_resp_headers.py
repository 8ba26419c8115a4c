"""The aggregate headers of node/resp.py that handlers and the router frame replies with: each
must give what `encode` gives the same value, on both sides of the sizes its tables cover
(16 keyed streams, 256-byte keys), in RESP2 and RESP3. And `encode_command`, the wire form of
effects and of the router's upstream requests, against hiredis's own encoder, on both sides of
what its compiled copy takes (255 arguments, 4095-byte ones, bytes only)."""

from __future__ import annotations

import hiredis
import pytest

from node import resp

ENTRIES = [[b"1-1", [b"f", b"v"]]]


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 300])
def test_map_header_is_what_encode_gives_a_map(proto: int, n: int) -> None:
    pairs = [(b"k%d" % i, i) for i in range(n)]
    body = b"".join(resp.bulk(k) + resp.integer(v) for k, v in pairs)
    assert resp.map_header(n, proto) + body == resp.encode(resp.Map(pairs), proto)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 300])
def test_keyed_reply_is_a_map_or_an_array_of_pairs(proto: int, n: int) -> None:
    """XREAD's reply: RESP3 a map key -> entries, RESP2 an array of [key, entries]."""
    keys = [b"s%d" % i for i in range(n)]
    got = resp.keyed_header(n, proto) + b"".join(
        resp.keyed_key_header(len(k), proto) + k + resp.CRLF + resp.encode(ENTRIES, proto)
        for k in keys)
    want = (resp.Map((k, ENTRIES) for k in keys) if proto == 3
            else [[k, ENTRIES] for k in keys])
    assert got == resp.encode(want, proto)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("klen", [0, 1, 255, 256, 4096, 5000])
def test_keyed_key_header_is_the_pair_and_the_bulk_header(proto: int, klen: int) -> None:
    key = b"k" * klen
    head = resp.keyed_key_header(klen, proto)
    assert head + key + resp.CRLF == resp.keyed_pair(proto) + resp.bulk(key)
    assert resp.keyed_pair(proto) == (b"*2\r\n" if proto == 2 else b"")


def test_aggregate_header_keeps_the_kind() -> None:
    assert resp.aggregate_header(b"~", 3) + b":1\r\n:2\r\n:3\r\n" == resp.encode(
        resp.RespSet([1, 2, 3]), 3)
    assert resp.aggregate_header(b"*", 0) == resp.EMPTY_ARRAY
    assert resp.aggregate_header(b"%", 1) + resp.bulk(b"a") + resp.ONE == resp.encode(
        resp.Map([(b"a", 1)]), 3)


@pytest.mark.parametrize("argv", [
    [b"PING"], [b""], [b"XADD", b"s", b"*", b"f", b"v"],
    [b"ECHO", b"a\r\n$3\r\n*1\r\n\x00"],
    [b"x" * 4095], [b"x" * 4096, b"y"], [b"a"] * 255, [b"a"] * 256,
    (b"XACK", b"s", b"g", b"1-1"),  # effects may be tuples
    [b"SET", bytearray(b"k"), memoryview(b"v")],  # not bytes: the join takes them
], ids=lambda a: f"{len(a)}args")
def test_encode_command_is_what_hiredis_packs(argv) -> None:  # noqa: ANN001
    assert resp.encode_command(argv) == hiredis.pack_command(tuple(bytes(a) for a in argv))


def test_encode_command_refuses_text() -> None:
    with pytest.raises(TypeError):
        resp.encode_command([b"SET", "k", b"v"])
