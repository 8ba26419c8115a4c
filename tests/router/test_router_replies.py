"""One reply per command through a router, always, in order, well framed, compared with a node:
also when the client half-closes after its requests, and when an error the router writes
itself quotes user input with a newline. Both were found by the protocol fuzzer
(benchmarks/fuzz_bench.py; tests/support/fuzz.py)."""

from __future__ import annotations

import socket

import redis

from tests.support.cluster import Cluster
from tests.support.rawresp import RawClient, encode_command


def _half_closed(host: str, port: int, commands: list[list[bytes | str]]) -> tuple[bytes, bool]:
    """Send `commands` in one write, shut the write side, read until the server closes."""
    with RawClient(host, port, timeout=20) as rc:
        rc.send_raw(b"".join(encode_command(c) for c in commands))
        rc.sock.shutdown(socket.SHUT_WR)
        return rc.read_until_close(timeout=20)


def test_a_client_that_half_closes_still_gets_every_reply(cluster: Cluster,
                                                           r: redis.Redis) -> None:
    keys = cluster.keys_on_each_shard("h")
    commands: list[list[bytes | str]] = [["XADD", k, "1-1", "f", "v"] for k in keys]
    commands += [["XLEN", k] for k in keys] + [["PING"], ["ECHO", "last"]]
    out, closed = _half_closed(cluster.router.host, cluster.router.port, commands)
    assert closed
    want = b"".join([b"$3\r\n1-1\r\n"] * 3 + [b":1\r\n"] * 3 + [b"+PONG\r\n", b"$4\r\nlast\r\n"])
    assert out == want
    # A node does the same for its own key.
    node = cluster.primary(0)
    out, closed = _half_closed(node.host, node.port, [["XLEN", keys[0]], ["PING"]])
    assert closed and out == b":1\r\n+PONG\r\n"


def test_a_client_blocked_when_it_half_closes_is_dropped(cluster: Cluster,
                                                         r: redis.Redis) -> None:
    """As a node drops a blocked client whose peer shut its side (the read never answers)."""
    out, closed = _half_closed(cluster.router.host, cluster.router.port,
                               [["PING"], ["XREAD", "BLOCK", "0", "STREAMS", "hb", "$"]])
    assert closed and out == b"+PONG\r\n"
    assert int(r.info("clients")["blocked_clients"]) == 0


def test_an_error_the_router_writes_is_one_line(cluster: Cluster, r: redis.Redis) -> None:
    """XREADGROUP over several shards checks the group itself; a group name with CR/LF is
    quoted with spaces, as the node (and Redis's addReplyErrorFormat) quote it."""
    keys = cluster.keys_on_each_shard("g")
    argv = ["XREADGROUP", "GROUP", "a\r\nb", "c", "STREAMS", *keys[:2], "0", "0"]
    with RawClient(cluster.router.host, cluster.router.port) as rc:
        got = rc.call(*argv)
        assert rc.call("PING") == ("+", b"PONG")  # the framing held
    with RawClient(cluster.primary(0).host, cluster.primary(0).port) as rc:
        direct = rc.call("XREADGROUP", "GROUP", "a\r\nb", "c", "STREAMS", keys[0], "0")
    assert got == direct == ("-", b"NOGROUP No such key '%s' or consumer group 'a  b' in "
                             b"XREADGROUP with GROUP option" % keys[0].encode())
