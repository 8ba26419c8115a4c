"""Protocol fuzzing of the node and the router (tests/support/fuzz.py), bounded for CI.

- In process, under hypothesis: random commands from the command table with arguments built
  from its argument docs and then mutated, and malformed framing, fed to a real node Server
  through its real Connection; every input must leave well-formed replies, one per command,
  no handler failure and nothing of the connection behind.
- Over sockets, seeded: the same inputs to a real node process and a real router in front of
  two shards; nothing may hang, the processes stay up, and their clients and memory come back.
- Regressions for what the fuzzer found, each with its input.

`benchmarks/fuzz_bench.py` runs the same checks on a million inputs.
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.harness import proc_status_kib, rss_kib
from tests.support.fuzz import FuzzInput, InprocNode, gen_input, run_socket
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient, encode_command


@pytest.fixture
def inproc(loop: asyncio.AbstractEventLoop):
    node = InprocNode(loop)
    yield node
    node.close()


def _explain(inp: FuzzInput, problems: list[str]) -> str:
    return f"input {inp.commands or inp.chunks!r}\nproblems: {problems}"


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_inproc(inproc: InprocNode, rng: random.Random) -> None:
    """One input per example on a node whose data carries over between examples, as a real
    server's does."""
    inp = gen_input(rng)
    out = inproc.run(inp)
    assert not out.problems, _explain(inp, out.problems)
    assert inproc.probe()


def _socket_run(host: str, port: int, seed: int, n: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        inp = gen_input(rng, socket_safe=True)
        out = run_socket(host, port, inp)
        assert not out.problems, f"seed {seed} input {i}: " + _explain(inp, out.problems)


def _clients(c: redis.Redis) -> int:
    return int(c.info("clients")["connected_clients"])


@pytest.mark.slow
def test_fuzz_node_process(xnode) -> None:
    """A real node: after a few hundred inputs it still answers, its client count is back to
    the baseline and its memory has not run away."""
    h = xnode()
    c = h.client()
    base_clients = _clients(c)
    _socket_run(h.host, h.port, 1, 150)  # warm-up: first-use allocations
    c.flushall()
    rss0 = rss_kib(h.pid)
    _socket_run(h.host, h.port, 2, 300)
    c.flushall()
    assert c.ping()
    wait_until(lambda: _clients(c) == base_clients, timeout=10, what="the fuzz clients gone")
    grown = rss_kib(h.pid) - rss0
    assert grown < 64 * 1024, f"RSS grew by {grown} KiB over 300 inputs"


@pytest.mark.slow
def test_fuzz_router_process(xcluster) -> None:
    """A real router in front of two shards, fed the same way; the nodes behind it stay up."""
    cl = xcluster(shards=2, replicas=0, controller=False, etcd=False, routers=1)
    r = cl.routers[0]
    c = r.client()
    base_clients = _clients(c)
    _socket_run(r.host, r.port, 3, 300)
    assert c.ping()
    wait_until(lambda: _clients(c) == base_clients, timeout=10, what="the fuzz clients gone")
    for n in cl.nodes.values():
        assert n.alive and n.client().ping()


# -- regressions ------------------------------------------------------------------------------

def test_huge_declared_count_allocates_nothing(xnode) -> None:
    """`*2147483647` made hiredis allocate 2^31 list slots at once (16 GB of address space,
    and every full garbage collection walked them for ~25 s). Now such a request goes to the
    exact parser, which, as Redis does, keeps only what arrived, also when the header comes in
    pieces or nested."""
    h = xnode()
    vm0 = proc_status_kib(h.pid, "VmSize")
    socks = []
    for pieces in ([b"*2147483647\r\n"], [b"*21474", b"83647\r\n"], [b"*2", b"1", b"47483647\r\n"],
                   [b"*1\r\n$4\r\nPING\r\n*536870912\r\n"]):
        s = socket.create_connection(h.addr)
        for p in pieces:
            s.sendall(p)
        socks.append(s)
    nested = RawClient(h.host, h.port)
    nested.send_raw(b"*1\r\n*2147483647\r\n")
    data, closed = nested.read_until_close()
    assert data == b"-ERR Protocol error: expected '$', got '*'\r\n" and closed
    c = h.client()
    assert c.ping()
    grown = proc_status_kib(h.pid, "VmSize") - vm0
    assert grown < 1024 * 1024, f"address space grew by {grown} KiB"
    for s in socks:
        s.close()


def test_request_with_many_elements_collected_in_pieces(xnode) -> None:
    """A request declaring more than 100000 elements is collected as it arrives (not parsed
    again from its start on every read) and then runs like any other."""
    h = xnode()
    c = h.client()
    c.xadd("big", {"f": "v"}, id="1-1")
    ids = [b"%d-%d" % (i + 2, 0) for i in range(100_001)] + [b"1-1"]
    req = encode_command([b"XDEL", b"big", *ids])
    raw = RawClient(h.host, h.port)
    for i in range(0, len(req), 4093):  # odd-sized pieces, splitting headers and bulks
        raw.send_raw(req[i:i + 4093])
    assert raw.read_reply() == (":", 1)
    assert raw.call("PING") == ("+", b"PONG")
    assert c.xlen("big") == 0


def test_glob_pattern_does_not_backtrack(node, oracle) -> None:
    """`KEYS ?*?*?*?*?*?*?*?*x` against a long key: one regex with `.*` per star backtracked
    exponentially and held the node (and, through a fan-out, a router's reply) for minutes.
    Same answers as Redis, which fixed the same hang in 7.0.9."""
    long_key = b"fz:" + b"a" * 200
    for h in (node, oracle):
        c = h.client()
        c.set(long_key, b"v")
        c.set(b"fz:" + b"a" * 7 + b"x", b"v")
        try:
            assert sorted(c.keys(b"?*?*?*?*?*?*?*?*x")) == [b"fz:aaaaaaax"]
            assert c.keys(b"*a*a*a*a*a*a*a*a*a*a*b") == []
            assert sorted(c.scan(0, match=b"f*?*?*?*?*?*?*?*", count=1000)[1]) == sorted(
                [long_key, b"fz:aaaaaaax"])
        finally:
            c.delete(long_key, b"fz:aaaaaaax")


def test_set_expire_time_beyond_64_bits_is_refused(node, oracle) -> None:
    """`SET k v EXAT 9223372036854775807` stored an expire time past 64 bits, and a later PTTL
    answered an integer no client can read (found by the compiled 1M-input run). Redis
    refuses such times; the largest that fits is kept."""
    cases = [["EXAT", "9223372036854775807"], ["EX", "9223372036854775807"],
             ["EX", "9223372036854775"], ["PX", "9223372036854775807"],
             ["EXAT", "9223372036854776"], ["PXAT", "9223372036854775807"]]
    got = []
    for h in (node, oracle):
        with RawClient(h.host, h.port) as rc:
            out = []
            for opt, v in cases:
                out.append(rc.call("SET", "fz:exp", "x", opt, v))
                out.append(rc.call("PTTL", "fz:exp")[0])  # a well-framed integer
            rc.call("DEL", "fz:exp")
            got.append(out)
    assert got[0] == got[1]
    assert got[0][0][0] == "-" and got[0][-2] == ("+", b"OK")
