"""The request reader (node/protocol.py RequestBuffer): plain requests taken by a C loop.

- `take` accepts exactly the canonical encoding of a request within the limits, and gives
  the arguments and the end the exact parser (node/resp.py parse_request) gives; anything
  else stays where it starts. Checked on the module in use (compiled when built) and on its
  interpreted twin loaded from the source.
- A real node Connection fed a pipeline split at every byte offset (and at random 3-way
  splits) answers exactly as when the pipeline comes in one read: the reader hands the rest
  of a read to hiredis and the exact parser at every possible point.
- What the read loop does around each command still holds: the raw bytes the router relays,
  a deep pipeline yielding to the loop, a client that blocks with requests behind it.

tests/test_native.py runs this module again with XSHARD_PURE_PYTHON=1.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest

import node.protocol
from node.resp import ProtocolError, parse_request
from tests.support.fuzz import InprocNode
from tests.support.rawresp import encode_command

_SOURCE = Path(node.protocol.__file__).resolve().parent / "protocol.py"
MAX_BULK = 512 * 1024 * 1024


def _source_module() -> ModuleType:
    """node/protocol.py interpreted, whatever extension is built beside it."""
    spec = importlib.util.spec_from_file_location("_protocol_source", _SOURCE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module", params=["in-use", "source"])
def module(request: pytest.FixtureRequest) -> ModuleType:
    return node.protocol if request.param == "in-use" else _source_module()


def _canonical(buf: bytes, pos: int, max_count: int, max_len: int) -> tuple[list[bytes], int] | None:
    """The request at `pos` if it is the canonical encoding of its arguments within limits."""
    try:
        argv, end = parse_request(buf, pos, MAX_BULK, True)
    except ProtocolError:
        return None
    if not argv or argv is None or buf[pos:pos + 1] != b"*":
        return None
    if len(argv) > max_count or any(len(a) > max_len for a in argv):
        return None
    return (argv, end) if encode_command(argv) == buf[pos:end] else None


_ODD = [b"*0\r\n", b"*-1\r\n", b"*01\r\n$4\r\nPING\r\n", b"*1\r\n$04\r\nPING\r\n", b"*1\r\n:5\r\n",
        b"*1\r\n$-1\r\n", b"*1\r\n*1\r\n$1\r\nx\r\n", b"*1\r\n$4\r\nPINGxx\r\n", b"*1\n$4\nPING\n",
        b"*1\r\n$4\r\nPING\n\n", b"*+1\r\n$1\r\nx\r\n", b"*1\r\n$+1\r\nx\r\n", b"PING\r\n", b"\r\n",
        b"*123456\r\n", b"*1 \r\n$1\r\nx\r\n", b"*1\r\n$1 \r\nx\r\n", b"*1\r\n$1\rxx\r\n",
        b"*1\r\n$99999999999999999999\r\n", b"*999999\r\n", b"*1\r\n$0\r\n\r\n"]


def _random_stream(rnd: random.Random) -> bytes:
    parts = []
    for _ in range(rnd.randint(1, 6)):
        if rnd.random() < 0.75:
            argv = [rnd.randbytes(rnd.choice([0, 1, 2, 9, 10, 11, 99, 100, 300]))
                    for _ in range(rnd.choice([1, 2, 3, 9, 10, 11, 13]))]
            parts.append(encode_command(argv))
        else:
            parts.append(rnd.choice(_ODD))
    data = b"".join(parts)
    if rnd.random() < 0.3:  # cut anywhere, or change one byte
        data = data[:rnd.randint(0, len(data))]
    elif rnd.random() < 0.2 and data:
        i = rnd.randrange(len(data))
        data = data[:i] + bytes([rnd.choice(b"*$\r\n0123456789-x")]) + data[i + 1:]
    return data


def test_take_accepts_exactly_the_canonical_requests(module: ModuleType) -> None:
    rnd = random.Random(5)
    taken = 0
    for _ in range(3000):
        data = _random_stream(rnd)
        max_count, max_len = rnd.choice([(99_999, MAX_BULK), (10, 16384), (3, 10)])
        rb = module.RequestBuffer()
        rb.buf = data
        pos = 0
        while True:
            want = _canonical(data, pos, max_count, max_len)
            got = rb.take(max_count, max_len)
            if got is None:
                assert want is None, (data, pos)
                assert rb.pos == pos
                break
            assert want is not None, (data, pos, got)
            assert (got, rb.pos) == want
            assert all(type(a) is bytes for a in got)
            taken += 1
            pos = rb.pos
    assert taken > 2000  # most streams begin with plain requests


def test_take_limits(module: ModuleType) -> None:
    rb = module.RequestBuffer()
    for data, max_count, max_len, ok in [
            (encode_command([b"x"] * 10), 10, 16384, True),
            (encode_command([b"x"] * 11), 10, 16384, False),
            (encode_command([b"x" * 16384]), 10, 16384, True),
            (encode_command([b"x" * 16385]), 10, 16384, False),
            (encode_command([b"x"] * 99_999), 99_999, MAX_BULK, True),
            (encode_command([b"x"] * 100_000), 99_999, MAX_BULK, False),
            (b"", 10, 10, False)]:
        rb.buf = data
        rb.pos = 0
        assert (rb.take(max_count, max_len) is not None) == ok
    rb.buf = None
    assert rb.take(10, 10) is None


# --- a real node Connection, fed in pieces ----------------------------------------------------

@pytest.fixture
def inproc(loop: asyncio.AbstractEventLoop):
    n = InprocNode(loop)
    n.server.config.requirepass = None
    yield n
    n.close()


def _feed(inproc: InprocNode, chunks: list[bytes], turns: int = 3) -> tuple[bytes, bool]:
    conn, t = inproc._connect()
    for ch in chunks:
        if t.closed:
            break
        conn.data_received(ch)
    inproc._turns(turns)
    out = bytes(t.out), t.closed
    if not t.closed:
        t.close()
    inproc._turns(1)
    return out


def _pipeline(key: bytes) -> bytes:
    return b"".join([
        encode_command([b"XADD", key, b"1-1", b"f", b"v" * 20]),
        encode_command([b"ECHO", b"a\r\nb*1\r\n$3"]),
        encode_command([b"XLEN", key]),
        b"PING\r\n",  # inline: the exact parser, then back
        encode_command([b"ECHO", b""]),
        b"*0\r\n",
        encode_command([b"XRANGE", key, b"-", b"+"]),
        b"*1\r\n$04\r\nPING\r\n",  # hiredis takes it, Redis does not: the exact parser's error
    ])


def test_every_split_offset_answers_as_one_read(inproc: InprocNode) -> None:
    whole, closed = _feed(inproc, [_pipeline(b"rr:whole")])
    assert closed and whole.startswith(b"$3\r\n1-1\r\n") and b"Protocol error" in whole
    data = _pipeline(b"rr:00000")
    for i in range(1, len(data)):
        key = b"rr:%05d" % i
        p = _pipeline(key)
        assert _feed(inproc, [p[:i], p[i:]]) == (whole, True), i
    rnd = random.Random(3)
    for j in range(150):
        p = _pipeline(b"rr:%05d" % (len(data) + j))
        a, b = sorted(rnd.sample(range(1, len(p)), 2))
        assert _feed(inproc, [p[:a], p[a:b], p[b:]]) == (whole, True), (a, b)


def test_raw_is_the_read_that_held_exactly_one_request(inproc: InprocNode) -> None:
    conn, t = inproc._connect()
    seen: list[tuple[list[bytes], bytes | None]] = []
    run = conn.execute

    def execute(c, argv):  # noqa: ANN001, ANN202
        seen.append((list(argv), conn.raw))
        return run(c, argv)

    conn.execute = execute
    one = encode_command([b"ECHO", b"one"])
    conn.data_received(one)
    conn.data_received(one + one)
    conn.data_received(one[:5])
    conn.data_received(one[5:])
    conn.data_received(one)
    inproc._turns(2)
    assert [r for _, r in seen] == [one, None, None, None, one]
    assert bytes(t.out) == b"$3\r\none\r\n" * 5
    t.close()
    inproc._turns(1)


def test_deep_pipeline_yields_to_the_loop(inproc: InprocNode) -> None:
    conn, t = inproc._connect()
    conn.data_received(encode_command([b"PING"]) * 300)
    assert bytes(t.out) == b"+PONG\r\n" * 128  # the rest runs on the next loop iterations
    inproc._turns(4)
    assert bytes(t.out) == b"+PONG\r\n" * 300
    t.close()
    inproc._turns(1)


def test_requests_behind_a_blocked_one_wait_for_it(inproc: InprocNode) -> None:
    conn, t = inproc._connect()
    conn.data_received(encode_command([b"XREAD", b"BLOCK", b"0", b"STREAMS", b"rr:blk", b"$"])
                       + encode_command([b"ECHO", b"after"]))
    conn.data_received(encode_command([b"ECHO", b"later"]))
    inproc._turns(2)
    assert bytes(t.out) == b""
    _feed(inproc, [encode_command([b"XADD", b"rr:blk", b"1-1", b"f", b"v"])])
    inproc._turns(3)
    out = bytes(t.out)
    assert out.startswith(b"*1\r\n*2\r\n$6\r\nrr:blk\r\n") and out.endswith(
        b"$5\r\nafter\r\n$5\r\nlater\r\n"), out
    t.close()
    inproc._turns(1)


def test_read_path_runs_an_overriding_process() -> None:
    """A read calls `_process` itself where a subclass overrides it (the router flushes its
    outbox there), and the base's body directly where none does."""
    from node.protocol import RespConnection
    from node.server import Connection

    class Overriding(RespConnection):
        def _process(self) -> int:
            return RespConnection._process(self)

    assert RespConnection(None, None)._own_process  # type: ignore[arg-type]
    assert not Overriding(None, None)._own_process  # type: ignore[arg-type]
    assert Connection._process is RespConnection._process  # the node: the direct path
