"""When a reply may leave with `appendfsync everysec` (node/persistence.py, the reply gate).

A reply must never reach a client before the effects it may reflect reached the AOF file (a
killed process then loses nothing acknowledged). The first reply of a loop iteration behind
unwritten effects writes them at once and leaves at once (a woken XREADGROUP's delivery does not
wait behind the iteration's other events); later ones in the iteration wait for its write.

In-process: a real Server with its Persistence and AOF files, connections on real socket pairs;
the connection class records what the AOF file held at the moment each reply was sent.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.config import Config
from node.persistence import Persistence
from node.server import Connection, Server


class _Recording(Connection):
    """A node connection that notes, for every send, the AOF's incr file as it was then."""

    __slots__ = ("sent", "aof_dir")

    def __init__(self, server: Server, aof_dir: Path) -> None:
        super().__init__(server)
        self.sent: list[tuple[bytes, bytes]] = []
        self.aof_dir = aof_dir

    def send(self, data: bytes) -> None:
        incr = b"".join(p.read_bytes() for p in sorted(self.aof_dir.glob("*.incr.*")))
        self.sent.append((data, incr))
        super().send(data)


@pytest.fixture
def aof_node(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    cfg = Config()
    cfg.appendonly = True
    cfg.appendfsync = "everysec"
    cfg.appenddirname = str(tmp_path / "aof")
    cfg.dbfilename = str(tmp_path / "dump.xsnap")
    cfg.save = ""
    srv = Server(cfg)
    p = srv.persistence = Persistence(srv)
    p.load()
    p.start()
    try:
        yield srv, tmp_path / "aof"
    finally:
        for c in list(srv.clients.values()):
            if c.conn is not None:
                c.conn.close()
        p.shutdown(False)
        p.io.shutdown()


def _connect(loop: asyncio.AbstractEventLoop, srv: Server, aof: Path
             ) -> tuple[_Recording, socket.socket]:
    ours, peer = socket.socketpair()
    conn = _Recording(srv, aof)
    loop.run_until_complete(loop.connect_accepted_socket(conn.as_protocol, sock=ours))
    assert conn.client is not None
    return conn, peer


def _turn(loop: asyncio.AbstractEventLoop) -> None:
    """Let the loop run the callbacks that are ready (one iteration's worth)."""
    loop.run_until_complete(asyncio.sleep(0))


def test_first_reply_of_an_iteration_leaves_at_once_after_the_aof_write(
        loop: asyncio.AbstractEventLoop, aof_node: tuple[Server, Path]) -> None:
    srv, aof = aof_node
    writer, wpeer = _connect(loop, srv, aof)
    r1, p1 = _connect(loop, srv, aof)
    r2, p2 = _connect(loop, srv, aof)
    try:
        w = writer.client
        assert w is not None and r1.client is not None and r2.client is not None
        for key in (b"s1", b"s2"):
            assert srv.execute(w, [b"XGROUP", b"CREATE", key, b"g", b"$", b"MKSTREAM"]) == b"+OK\r\n"
        _turn(loop)
        for conn, key in ((r1, b"s1"), (r2, b"s2")):
            assert srv.execute(conn.client, [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"0",
                                             b"STREAMS", key, b">"]) is None
        # One iteration: an XADD wakes r1, then another XADD wakes r2.
        srv.execute(w, [b"XADD", b"s1", b"1-1", b"f", b"first"])
        assert len(r1.sent) == 1, "the woken reader's reply waited for the iteration's callbacks"
        reply, on_disk = r1.sent[0]
        assert b"first" in reply and b"first" in on_disk  # the effect was in the file first
        # ... and so was the delivery the reply shows (the PEL entry a restart must keep)
        assert on_disk.count(b"XCLAIM") == 1 and b"SETID" in on_disk
        srv.execute(w, [b"XADD", b"s2", b"1-1", b"f", b"second"])
        assert r2.sent == []  # the iteration's early write is used: it waits for _flush
        _turn(loop)
        assert len(r2.sent) == 1
        reply, on_disk = r2.sent[0]
        assert b"second" in reply and b"second" in on_disk
        # The next iteration may write early again.
        assert srv.execute(r1.client, [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"0",
                                       b"STREAMS", b"s1", b">"]) is None
        srv.execute(w, [b"XADD", b"s1", b"2-1", b"f", b"third"])
        assert len(r1.sent) == 2 and b"third" in r1.sent[1][1]
    finally:
        for s in (wpeer, p1, p2):
            s.close()


def test_a_failed_write_lets_the_reply_pass(loop: asyncio.AbstractEventLoop,
                                            aof_node: tuple[Server, Path]) -> None:
    """everysec keeps Redis's rule: a write the disk refuses stays buffered for a retry, the
    reply still goes (writes get MISCONF from then on)."""
    srv, aof = aof_node
    writer, wpeer = _connect(loop, srv, aof)
    r1, p1 = _connect(loop, srv, aof)
    p = srv.persistence
    assert p is not None
    try:
        w = writer.client
        assert w is not None and r1.client is not None
        srv.execute(w, [b"XGROUP", b"CREATE", b"s1", b"g", b"$", b"MKSTREAM"])
        _turn(loop)
        assert srv.execute(r1.client, [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"0",
                                       b"STREAMS", b"s1", b">"]) is None
        good = p.fd
        p.fd = os.open(os.devnull, os.O_RDONLY)  # write() fails with EBADF
        try:
            srv.execute(w, [b"XADD", b"s1", b"1-1", b"f", b"v"])
            assert len(r1.sent) == 1 and p.write_error is not None and p.effbuf.parts
        finally:
            os.close(p.fd)
            p.fd = good
        _turn(loop)
        assert p.write_error is None and not p.effbuf.parts  # retried by the iteration's _flush
        assert b"1-1" in b"".join(x.read_bytes() for x in aof.glob("*.incr.*"))
    finally:
        wpeer.close()
        p1.close()
