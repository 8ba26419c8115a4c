"""The one apply path (node/effects.py EffectApplier), in process: what a replica republishes
and counts in its offset when a transaction arrives in pieces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from node.client import Client
from node.config import Config
from node.effects import EffectApplier
from node.resp import encode_command
from node.server import Server


@pytest.fixture
def server(loop: asyncio.AbstractEventLoop) -> Iterator[Server]:
    yield Server(Config())


def _cmds(*argvs: list[bytes]) -> bytes:
    return b"".join(encode_command(a) for a in argvs)


def test_transaction_is_published_only_when_exec_arrives(server: Server) -> None:
    published: list[bytes] = []
    server.effects.listen(published.append)
    ap = EffectApplier(server, republish=True)
    head = _cmds([b"XADD", b"s", b"1-1", b"f", b"v"], [b"MULTI"],
                 [b"XADD", b"s", b"2-1", b"f", b"v"])
    ap.feed(head)
    # The XADD before MULTI is out; the open transaction is neither applied nor counted.
    assert b"".join(published) == _cmds([b"XADD", b"s", b"1-1", b"f", b"v"])
    assert server.effects.offset == len(b"".join(published))
    c = Client(server, None, 9)
    assert server.execute(c, [b"XLEN", b"s"]) == b":1\r\n"
    tail = _cmds([b"XADD", b"s", b"3-1", b"f", b"v"], [b"EXEC"])
    ap.feed(tail)
    assert b"".join(published) == head + tail
    assert server.effects.offset == len(head + tail)
    assert server.execute(c, [b"XLEN", b"s"]) == b":3\r\n"


def test_a_cut_transaction_is_dropped_and_can_be_resent(server: Server) -> None:
    published: list[bytes] = []
    server.effects.listen(published.append)
    ap = EffectApplier(server, republish=True)
    block = _cmds([b"MULTI"], [b"XADD", b"s", b"1-1", b"f", b"v"], [b"EXEC"])
    ap.feed(block[:-10])  # the link dies inside the transaction (and inside EXEC)
    ap.reset_partial()  # a partial resync starts from the offset we reported: 0
    assert server.effects.offset == 0
    ap.feed(block)  # the primary sends the whole transaction again
    assert b"".join(published) == block
    c = Client(server, None, 9)
    assert server.execute(c, [b"XLEN", b"s"]) == b":1\r\n"


def test_effect_length_without_encoding_matches_the_encoding() -> None:
    """With no listener the offset advances by _command_len: it must be the encoded length."""
    from node.effects import _command_len

    for n in (1, 9, 10, 11, 99, 100, 101, 999, 1000, 12345):
        for argc in (1, 2, 9, 10, 11, 120):
            argv = [b"x" * (n if i % 2 else i % 7) for i in range(argc)]
            assert _command_len(argv) == len(encode_command(argv)), (n, argc)


def test_received_bytes_are_republished_as_they_came(server: Server) -> None:
    """A replica forwards what its primary sent, not a re-encoding of it: the chunk that holds
    whole commands is published itself, and one cut inside a command is published up to the
    last whole one, the rest with the chunk that completes it."""
    published: list[bytes] = []
    server.effects.listen(published.append)
    ap = EffectApplier(server, republish=True)
    chunk = _cmds([b"XADD", b"s", b"1-1", b"f", b"v"], [b"XADD", b"s", b"2-1", b"f", b"v"],
                  [b"XGROUP", b"CREATE", b"s", b"g", b"0"])
    ap.feed(chunk)
    assert len(published) == 1 and published[0] is chunk
    more = _cmds([b"XADD", b"s", b"3-1", b"f", b"w"], [b"XDEL", b"s", b"1-1"])
    ap.feed(more[:30])
    ap.feed(more[30:])
    assert b"".join(published) == chunk + more
    assert server.effects.offset == len(chunk + more)
