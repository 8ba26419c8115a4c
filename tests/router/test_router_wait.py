"""WAIT through a router: a WAIT that blocks holds up nobody else, and a client that leaves
while its WAIT blocks leaves nothing blocked on a node.

A client's commands to a node share one upstream connection with other clients (router/
upstream.py, pinned by client id modulo the pool size, 2); a WAIT after writes must go on that
connection, which then leaves the pool for the WAIT. The protocol fuzzer found the hang these
tests pin down: WAIT 1 0 after a write (this set-up has no replicas, so it blocks for ever),
then the client half-closed; every later client pinned to the same connection got no reply.
"""

from __future__ import annotations

import redis

from tests.support.cluster import Cluster
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient, encode_command

POOL_SIZE = 2  # router/upstream.py Pool's default


def _client_on(cluster: Cluster, parity: int) -> RawClient:
    """A raw router client whose id pins it to upstream connection `parity` of each pool."""
    return _client_and_id(cluster, parity)[0]


def _client_and_id(cluster: Cluster, parity: int) -> tuple[RawClient, int]:
    while True:
        rc = RawClient(cluster.router.host, cluster.router.port, timeout=20)
        cid = rc.call("CLIENT", "ID")[1]
        if cid % POOL_SIZE == parity:
            return rc, cid
        rc.close()


def _blocked_on_node(cluster: Cluster, key: str) -> int:
    node = cluster.primary(cluster.shard_of(key)).client()
    try:
        return int(node.info("clients")["blocked_clients"])
    finally:
        node.close()


def test_a_blocked_wait_after_writes_holds_up_no_other_client(cluster: Cluster,
                                                              r: redis.Redis) -> None:
    waiter, wid = _client_and_id(cluster, 0)
    others = [_client_on(cluster, 0), _client_on(cluster, 1)]
    try:
        assert waiter.call("SET", "{w}a", "1") == ("+", b"OK")
        waiter.send_raw(encode_command(["WAIT", "1", "0"]))  # no replicas: blocks for ever
        wait_until(lambda: _blocked_on_node(cluster, "{w}a") == 1, 10, what="the WAIT blocked")
        for i, o in enumerate(others):  # same shard, both shared connections
            assert o.pipeline([["SET", "{w}b", str(i)], ["GET", "{w}b"]]) == \
                [("+", b"OK"), ("$", str(i).encode())]
        assert int(r.info("clients")["blocked_clients"]) == 1  # the router counts it
        # CLIENT UNBLOCK ends it as a timeout: the ack count (0: no replicas here).
        assert r.execute_command("CLIENT", "UNBLOCK", wid) == 1
        assert waiter.read_reply() == (":", 0)
        wait_until(lambda: _blocked_on_node(cluster, "{w}a") == 0, 10, what="the node's WAIT ended")
        assert waiter.call("GET", "{w}a") == ("$", b"1")  # the waiter goes on as before
    finally:
        waiter.close()
        for o in others:
            o.close()


def test_a_client_that_leaves_during_wait_leaves_nothing_blocked(cluster: Cluster,
                                                                r: redis.Redis) -> None:
    # The fuzzer's input (seed 102 of benchmarks/fuzz_bench.py): after a client left during
    # such a WAIT, this pipeline got 2 replies to 5 commands, then nothing.
    pipeline = [["RENAMENX", "{fz}a", "+1"], ["COMMAND", "LIST"], ["XINFO", "STREAM", "fz:list"],
                ["SADD", "{fz}b", "x" * 300], ["ECHO", "done"]]
    for parity in range(POOL_SIZE):
        waiter = _client_on(cluster, parity)
        assert waiter.call("XADD", "{fz}b", "*", "f", "v")[0] == "$"
        waiter.send_raw(encode_command(["WAIT", "1", "0"]))
        wait_until(lambda: _blocked_on_node(cluster, "{fz}b") == 1, 10, what="the WAIT blocked")
        waiter.sock.shutdown(1)  # the fuzzer half-closes, then waits for the close
        assert waiter.read_until_close(timeout=10) == (b"", True)
        waiter.close()
        wait_until(lambda: _blocked_on_node(cluster, "{fz}b") == 0, 10,
                   what="the node forgot the WAIT")
        for p in range(POOL_SIZE):
            with _client_on(cluster, p) as o:
                got = o.pipeline(pipeline)
                assert len(got) == len(pipeline) and got[-1] == ("$", b"done")
        assert int(r.info("clients")["blocked_clients"]) == 0
        r.delete("{fz}a", "{fz}b")


def test_commands_sent_before_a_wait_run_before_those_sent_after(cluster: Cluster,
                                                                 r: redis.Redis) -> None:
    """The connection a WAIT takes may still carry other clients' requests; the one that
    replaces it writes nothing until they are answered, so a client whose XADD went on the old
    connection and whose XLEN goes on the new one counts the entry. The node pauses writes
    (CLIENT PAUSE WRITE), so the XADD waits there with the WAIT behind it, while a read on
    another connection would run at once."""
    writer = _client_on(cluster, 0)
    waiter = _client_on(cluster, 0)
    node = cluster.primary(cluster.shard_of("{o}n")).client()
    try:
        assert waiter.call("SET", "{o}w", "1") == ("+", b"OK")
        assert node.execute_command("CLIENT", "PAUSE", 20000, "WRITE")
        writer.send_raw(encode_command(["XADD", "{o}n", "*", "f", "v"]))
        waiter.send_raw(encode_command(["WAIT", "0", "0"]))  # takes the shared connection
        wait_until(lambda: r.info("clients")["blocked_clients"] == 1, 10, what="the WAIT sent")
        before = r.info("stats")["total_commands_processed"]
        writer.send_raw(encode_command(["XLEN", "{o}n"]))  # on the connection that replaced it
        wait_until(lambda: r.info("stats")["total_commands_processed"] >= before + 2, 10,
                   what="the router took the XLEN")
        node.execute_command("CLIENT", "UNPAUSE")
        assert waiter.read_reply() == (":", 0)
        assert writer.read_reply()[0] == "$"
        assert writer.read_reply() == (":", 1)
    finally:
        node.execute_command("CLIENT", "UNPAUSE")
        node.close()
        writer.close()
        waiter.close()
