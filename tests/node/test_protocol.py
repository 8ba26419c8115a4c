"""Bad and odd input over raw sockets, compared byte for byte with redis-server.

Every case sends the same bytes on a fresh connection to the oracle and to the node and
compares everything that comes back, plus whether the server closed the connection
(Redis replies `-ERR Protocol error: ...` and then closes). Cases run concurrently, so the
"is it quiet now?" waits overlap and the whole table costs well under a second.

Also: clients that vanish mid-command or while blocked, and a client that never reads its
replies, which must be disconnected at `client-output-buffer-limit normal` while other
clients keep being served.
"""

from __future__ import annotations

import re
import selectors
import socket
import threading
import time

import pytest
import redis

from tests.support.procs import wait_until
from tests.support.rawresp import RawClient, encode_command

K = b"proto:s"  # the key inline cases read; nothing in this module writes it
_PING = b"*1\r\n$4\r\nPING\r\n"

# (id, bytes sent on a fresh connection). Expected results come from the oracle.
CASES = [
    # protocol errors: reply, then close
    ("mbulk-not-a-number", b"*abc\r\n"),
    ("mbulk-empty-count", b"*\r\n"),
    ("mbulk-too-big", b"*2147483648\r\n"),
    ("expected-dollar", b"*1\r\n:5\r\n"),
    ("expected-dollar-got-star", b"*1\r\n*1\r\n"),
    ("bulk-negative", b"*1\r\n$-5\r\n"),
    ("bulk-not-a-number", b"*1\r\n$x\r\n"),
    ("bulk-empty-count", b"*1\r\n$\r\n"),
    ("bulk-over-proto-max-bulk-len", b"*1\r\n$536870913\r\n"),
    ("mbulk-count-line-too-long", b"*" + b"1" * 70000),
    ("bulk-count-line-too-long", b"*1\r\n$" + b"1" * 70000),
    ("inline-too-long", b"x" * 70000),
    ("inline-unbalanced-double-quote", b'SET "a\r\n'),
    ("inline-unbalanced-single-quote", b"ECHO 'a\r\n"),
    ("inline-quote-then-char", b'ECHO "a"b\r\n'),
    ("mbulk-nested-huge-count", b"*1\r\n*2147483647\r\n"),
    # (the cases above are protocol errors, see _N_PROTOCOL_ERRORS)
    # valid but unusual framing: no close
    ("mbulk-large-count-waits", b"*1048577\r\n"),
    ("mbulk-huge-count-waits", b"*2147483647\r\n"),
    ("mbulk-huge-count-after-ping", b"*1\r\n$4\r\nPING\r\n*2147483647\r\n$4\r\nPING\r\n"),
    ("error-text-with-crlf-stays-one-line",
     encode_command([b"XREADGROUP", b"GROUP", b"g\r\nx", b"c", b"STREAMS", b"k\nz", b">"])),
    ("mbulk-zero-then-ping", b"*0\r\n*1\r\n$4\r\nPING\r\n"),
    ("mbulk-minus-one-then-ping", b"*-1\r\nPING\r\n"),
    ("bulk-trailing-bytes-skipped", b"*1\r\n$4\r\nPINGxx\r\n"),
    ("partial-bulk-waits", b"*1\r\n$4\r\nPI"),
    ("missing-final-crlf-waits", b"*1\r\n$4\r\nPING\r"),
    ("blank-line-between", b"*1\r\n$4\r\nPING\r\n\n*1\r\n$4\r\nPING\r\n"),
    ("bulk-line-as-inline", b"*1\r\n$4\r\nPING\r\n$4\r\nPING\r\n"),
    # inline commands
    ("inline-ping", b"PING\r\n"),
    ("inline-ping-lf-only", b"PING\n"),
    ("inline-spaces", b"  PING  \r\n"),
    ("inline-empty-lines", b"\r\n\r\nPING\r\n"),
    ("inline-xlen", b"XLEN " + K + b"\r\n"),
    ("inline-xrange", b"XRANGE " + K + b" - +\r\n"),
    ("inline-escapes", b'ECHO "a\\x41\\n b"\r\n'),
    ("inline-single-quotes", b"ECHO 'it\\'s'\r\n"),
    ("inline-empty-quoted", b'ECHO ""\r\n'),
    ("inline-bad-hex-escape", b'ECHO "\\xzz"\r\n'),
    ("inline-tab", b"ECHO\thi\r\n"),
    # a NUL hides the newline from Redis's strchr: the line never completes (the fuzzer found
    # the node appending empty arguments forever on these)
    ("inline-nul-waits", b"ECHO ab\x00cd ef\r\nPING\r\n"),
    ("inline-nul-after-space-waits", b"ECHO a \x00\r\nPING\r\n"),
    ("inline-nul-in-quotes-waits", b'ECHO "a\x00b"\r\n'),
    ("inline-wrong-arity", b"ECHO\r\n"),
    ("inline-xadd-bad-id", b"XADD " + K + b" nope f v\r\n"),
    # unknown commands
    ("unknown-inline", b"FOO bar baz\r\n"),
    ("unknown-mbulk", b"*2\r\n$3\r\nFOO\r\n$3\r\nbar\r\n"),
    ("unknown-lowercase", b"*1\r\n$3\r\nfoo\r\n"),
    ("unknown-empty-name", b"*1\r\n$0\r\n\r\n"),
    ("unknown-long-arg-truncated", b"*2\r\n$3\r\nFOO\r\n$200\r\n" + b"a" * 200 + b"\r\n"),
    ("unknown-many-args", encode_command([b"NOPE", *[b"arg%d" % i for i in range(40)]])),
    # pipelines mixing good and bad commands: replies in order up to the protocol error
    ("pipeline-mixed", b"PING\r\n*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nXLEN\r\n$7\r\n" + K
     + b"\r\nFOO\r\n*abc\r\n*1\r\n$4\r\nPING\r\n"),
    ("pipeline-errors-keep-going", encode_command([b"XADD", K]) + b"PING\r\n"
     + encode_command([b"XRANGE", K, b"x", b"+"]) + encode_command([b"XLEN", K])),
    ("pipeline-then-bad-bulk", b"PING\r\n" * 3 + b"*1\r\n$-1\r\n" + b"PING\r\n"),
    # a read that begins with plain requests (node/protocol.py's RequestBuffer takes those),
    # then something it leaves to the other paths, in the same read
    ("pipeline-plain-then-bad-count", _PING * 2 + b"*abc\r\n" + _PING),
    ("pipeline-plain-then-leading-zero-count", _PING + b"*01\r\n$4\r\nPING\r\n" + _PING),
    ("pipeline-plain-then-leading-zero-len", _PING + b"*1\r\n$04\r\nPING\r\n" + _PING),
    ("pipeline-plain-then-expected-dollar", _PING + b"*2\r\n$4\r\nECHO\r\n:5\r\n" + _PING),
    ("pipeline-plain-then-over-max-bulk", _PING + b"*1\r\n$536870913\r\n"),
    ("pipeline-plain-then-huge-count", _PING + b"*2147483648\r\n" + _PING),
    ("plain-then-inline", _PING + b"PING\r\n" + _PING + b"ECHO x\r\n"),
    ("plain-then-zero-and-minus-one", _PING + b"*0\r\n" + _PING + b"*-1\r\n" + _PING),
    ("plain-then-trailing-bytes", _PING + b"*1\r\n$4\r\nPINGxx\r\n" + _PING),
    ("pipeline-plain-then-lf-only", _PING + b"*1\n$4\nPING\n" + _PING),
    ("plain-then-partial", _PING * 3 + b"*2\r\n$4\r\nECHO\r\n$3\r\nab"),
    ("plain-then-large-count-waits", _PING + b"*123456\r\n$4\r\nPING\r\n"),
    ("pipeline-plain-quit-then-more", _PING + encode_command([b"QUIT"]) + _PING),
    ("plain-empty-and-binary-args", encode_command([b"ECHO", b""]) + encode_command(
        [b"ECHO", b"a\r\n$3\r\n*1\r\n\x00"]) + encode_command([b"XLEN", K])),
]
_N_PROTOCOL_ERRORS = 16


def _exchange_all(addr: tuple[str, int], payloads: list[bytes], quiet: float = 0.4,
                  limit: float = 10.0) -> list[tuple[bytes, bool]]:
    """Send each payload on its own connection; collect (reply bytes, closed?) for each.

    A connection is finished when the server closes it or after `quiet` seconds without
    data. All connections run at once so that the quiet periods overlap.
    """
    socks = [socket.create_connection(addr, timeout=5) for _ in payloads]
    out = [bytearray() for _ in payloads]
    closed = [False] * len(payloads)
    for s, p in zip(socks, payloads, strict=True):
        try:
            s.sendall(p)
        except OSError:
            pass  # the server may close before reading everything; what it said still counts
        s.setblocking(False)
    sel = selectors.DefaultSelector()
    last = {}
    now = time.monotonic()
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
        last[i] = now
    deadline = now + limit
    try:
        while last and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.05):
                i = key.data
                try:
                    chunk = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    out[i] += chunk
                    last[i] = time.monotonic()
                else:
                    closed[i] = True
                    sel.unregister(key.fileobj)
                    del last[i]
            t = time.monotonic()
            for i in [i for i, ts in last.items() if t - ts >= quiet]:
                sel.unregister(socks[i])
                del last[i]
    finally:
        sel.close()
        for s in socks:
            s.close()
    return [(bytes(b), c) for b, c in zip(out, closed, strict=True)]


@pytest.fixture(scope="module")
def case_results(oracle, node) -> dict[str, tuple[tuple[bytes, bool], tuple[bytes, bool]]]:
    payloads = [p for _, p in CASES]
    results: dict[str, list] = {}

    def run(name, handle):
        results[name] = _exchange_all(handle.addr, payloads)

    threads = [threading.Thread(target=run, args=(n, h)) for n, h in (("o", oracle), ("n", node))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {cid: (results["o"][i], results["n"][i]) for i, (cid, _) in enumerate(CASES)}


def _fmt(res: tuple[bytes, bool]) -> str:
    data, closed = res
    shown = data if len(data) < 600 else data[:600] + b"...(%d bytes)" % len(data)
    return f"{shown!r} [{'closed' if closed else 'still open'}]"


@pytest.mark.parametrize("case_id", [c for c, _ in CASES])
def test_raw_input_like_redis(case_results, case_id: str) -> None:
    ours_theirs = case_results[case_id]
    theirs, ours = ours_theirs
    sent = dict(CASES)[case_id]
    assert ours == theirs, (
        f"{case_id}: sent {sent[:200]!r}\n  redis: {_fmt(theirs)}\n  node:  {_fmt(ours)}")


def test_protocol_errors_reply_and_close(case_results) -> None:
    """The first block of CASES is what Redis treats as protocol errors: reply, then close."""
    for case_id, _ in CASES[:_N_PROTOCOL_ERRORS]:
        for label, (data, closed) in zip(("redis", "node"), case_results[case_id], strict=True):
            assert data.startswith(b"-ERR Protocol error: ") and data.endswith(b"\r\n"), (
                f"{case_id} on {label}: {data[:200]!r}")
            assert closed, f"{case_id}: {label} kept the connection open after a protocol error"
    for case_id, _ in CASES[_N_PROTOCOL_ERRORS:]:
        if case_id.startswith("pipeline-"):
            continue  # these end in a protocol error on purpose
        assert not case_results[case_id][0][1], f"{case_id}: redis closed the connection"


# -- clients that go away ---------------------------------------------------------------------

def _both(oracle, node):
    return (("redis", oracle), ("node", node))


def _info_field(c: redis.Redis, section: str, name: str) -> int | None:
    v = c.info(section).get(name)
    return None if v is None else int(v)


def test_disconnect_mid_command(oracle, node) -> None:
    """A half-sent command is never executed; a complete one before it is."""
    key = b"proto:mid"
    outcome = {}
    for label, h in _both(oracle, node):
        admin = RawClient(h.host, h.port)
        admin.call("DEL", key)
        # 1. a command cut inside its last bulk
        s = socket.create_connection(h.addr)
        s.sendall(b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$3\r\n1-1\r\n$1\r\nf\r\n$5\r\nval" % (len(key), key))
        s.close()
        # 2. a complete command followed by a cut one, in one write
        s = socket.create_connection(h.addr)
        s.sendall(encode_command([b"XADD", key, b"2-1", b"f", b"v"])
                  + b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$3\r\n3-1" % (len(key), key))
        s.close()
        time.sleep(0.2)
        outcome[label] = (admin.call("PING"), admin.call("XRANGE", key, "-", "+"))
        admin.call("DEL", key)
        admin.close()
    assert outcome["redis"][1] == ("*", [("*", [("$", b"2-1"), ("*", [("$", b"f"), ("$", b"v")])])])
    assert outcome["node"] == outcome["redis"]


def test_disconnect_while_blocked(oracle, node) -> None:
    """A blocked client that disconnects is unblocked and forgotten; later writes work."""
    key = b"proto:blk"
    for label, h in _both(oracle, node):
        c = h.client(socket_timeout=5)
        c.delete(key)
        before = _info_field(c, "clients", "blocked_clients")
        s = socket.create_connection(h.addr)
        s.sendall(encode_command([b"XREAD", b"BLOCK", b"0", b"STREAMS", key, b"$"]))
        wait_until(lambda c=c, b=before: _info_field(c, "clients", "blocked_clients") == (b or 0) + 1,
                   5, what=f"{label}: the client to block")
        s.close()
        wait_until(lambda c=c, b=before: _info_field(c, "clients", "blocked_clients") == (b or 0),
                   5, what=f"{label}: the blocked client to be forgotten")
        assert c.xadd(key, {"f": "v"}, id="1-1") == b"1-1", label
        assert c.ping(), label
        c.delete(key)
        c.close()


# -- a client that never reads ------------------------------------------------------------------

_ENTRIES = 200
_VALUE = b"v" * 1000
_REQUESTS = 200          # each XRANGE reply is ~210 kB: ~42 MB if nobody stopped it
_HARD_LIMIT = 1 << 20    # client-output-buffer-limit normal 1mb 0 0


def _client_names(c: redis.Redis) -> list[str]:
    return [x.get("name", "") for x in c.client_list()]


def _slow_reader_outcome(h, label: str) -> dict:
    key = b"proto:big"
    admin = h.client(socket_timeout=10, decode_responses=False)
    old = admin.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    admin.delete(key)
    pipe = admin.pipeline(transaction=False)
    for i in range(_ENTRIES):
        pipe.xadd(key, {b"f": _VALUE}, id=f"{i + 1}-1")
    pipe.execute()
    admin.config_set("client-output-buffer-limit", f"normal {_HARD_LIMIT} 0 0")
    hog = socket.socket()
    try:
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # keep the kernel out of it
        hog.connect(h.addr)
        hog.sendall(encode_command([b"CLIENT", b"SETNAME", b"hog"]))
        hog.sendall(b"".join(encode_command([b"XRANGE", key, b"-", b"+"])
                             for _ in range(_REQUESTS)))
        # Another client is served while the hog's replies pile up.
        other = h.client(socket_timeout=5)
        served = other.ping() and other.xlen(key) == _ENTRIES
        wait_until(lambda: "hog" not in _client_names(admin), 15,
                   what=f"{label}: the non-reading client to be disconnected")
        received = 0
        hog.settimeout(5)
        while True:
            try:
                chunk = hog.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                break
            if not chunk:
                break
            received += len(chunk)
        still_served = other.ping()
    finally:
        hog.close()
        admin.config_set("client-output-buffer-limit", old)
        admin.delete(key)
    return {"served": served, "received": received,
            "still_served": still_served}


def test_output_buffer_limit_disconnects_slow_reader(oracle, node) -> None:
    full = _REQUESTS * _ENTRIES * len(_VALUE)  # a lower bound of all replies asked for
    for label, h in _both(oracle, node):
        res = _slow_reader_outcome(h, label)
        assert res["served"] and res["still_served"], f"{label}: other client not served: {res}"
        assert res["received"] < full // 2, (
            f"{label}: the non-reading client got {res['received']} bytes, about all of the "
            f"{full} it asked for: it was not disconnected at the output buffer limit")


def test_unknown_command_text_matches(oracle, node) -> None:
    """The exact unknown-command text through redis-py too (quoting of odd bytes)."""
    replies = []
    for _, h in _both(oracle, node):
        c = RawClient(h.host, h.port)
        replies.append([c.call(*a) for a in ([b"FOO"], [b"foo", b"a b", b"'q'"],
                                                [b"X" * 200, b"y"], [b"\x00\xff", b"\r\n"])])
        c.close()
    assert replies[1] == replies[0]
    assert all(re.match(rb"ERR unknown command ", r[1]) for r in replies[0])
