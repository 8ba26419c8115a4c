"""How the router relays bytes: when a request or a reply leaves (router/outbox.py), and that a
request goes to the node as the bytes the client sent."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import hiredis
import pytest
import redis
import uvloop

from router.main import load_topology_file
from router.outbox import Outbox
from router.upstream import Upstream
from tests.conftest import REPO, NodeHandle, _node_env
from tests.router.conftest import ROUTER_ARGS
from tests.support.cluster import Cluster
from tests.support.procs import LOCALHOST, ServerProcess


class _Transport:
    """Records what an upstream connection writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


class _NoEndOfIteration:
    """A loop whose call_soon never runs: whatever waits for the end of the loop iteration
    (Outbox.run) never leaves."""

    def __init__(self) -> None:
        self.dropped = 0

    def call_soon(self, fn: Callable[[], None], *args: object) -> None:
        self.dropped += 1


def _ignore(_reply: bytes | None) -> None:
    pass


def _connected(loop: asyncio.AbstractEventLoop) -> tuple[Outbox, Upstream, _Transport]:
    """An upstream connection with its outbox, writing to a recording transport."""
    outbox = Outbox(loop)
    up = Upstream("127.0.0.1", 0, [], outbox)
    t = _Transport()
    up.transport = t
    return outbox, up, t


def test_a_request_for_an_idle_node_is_urgent_a_busy_one_batches() -> None:
    loop = asyncio.new_event_loop()
    try:
        outbox, up, t = _connected(loop)
        up.send(b"a", _ignore)
        assert outbox.urgent and t.writes == []  # queued, and marked to leave at once
        outbox.now()
        assert t.writes == [b"a"] and not outbox.urgent
        up.send(b"b", _ignore)  # "a" is in flight: batch with what else comes this iteration
        up.send(b"c", _ignore)
        assert not outbox.urgent and t.writes == [b"a"]
        loop.run_until_complete(asyncio.sleep(0))  # the end of the iteration
        assert t.writes == [b"a", b"bc"]
    finally:
        loop.close()


def test_a_held_read_asks_for_the_end_of_the_iteration_only_for_what_it_left() -> None:
    """Within a read callback (held), a write that leaves at the read's end asks for no
    end-of-iteration callback; one that batches still gets it."""
    loop = asyncio.new_event_loop()
    try:
        outbox, up, t = _connected(loop)
        held = outbox.hold()
        up.send(b"a", _ignore)  # an idle node: urgent, written before the read returns
        assert outbox.urgent
        outbox.now()
        outbox.unhold(held)
        assert t.writes == [b"a"] and not outbox.scheduled  # (no callback asked for)
        held = outbox.hold()
        up.send(b"b", _ignore)  # "a" is in flight: "b" waits for the end of the iteration
        outbox.unhold(held)
        assert outbox.scheduled and t.writes == [b"a"]
        loop.run_until_complete(asyncio.sleep(0))
        assert t.writes == [b"a", b"b"] and not outbox.scheduled
    finally:
        loop.close()


def test_delivery_crosses_the_router_without_waiting_for_the_loop(cluster: Cluster) -> None:
    """A blocked XREADGROUP woken by an XADD, through a router whose end-of-iteration writes
    never happen: the XADD must reach the node and the entry the reader as soon as each is
    read, in both directions, on new and on reused connections."""
    from node.config import Config
    from router.proxy import Router

    topo = load_topology_file(str(cluster.topology_file))
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    router = Router(Config(), cluster_down_timeout=1.0)
    try:
        stub = _NoEndOfIteration()
        router.outbox = Outbox(stub)  # type: ignore[arg-type]
        router.set_topology(topo["nodes"], topo["shards"], topo["slots"], 1)
        port = loop.run_until_complete(router.start(0))

        async def exchange() -> list[bytes]:
            rd, wr = await asyncio.open_connection("127.0.0.1", port)
            prd, pwr = await asyncio.open_connection("127.0.0.1", port)
            got = []
            node = cluster.primary(cluster.shard_of("relay:s")).client()

            async def call(r: asyncio.StreamReader, w: asyncio.StreamWriter, *argv: bytes,
                           ) -> bytes:
                w.write(b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a)
                                                          for a in argv))
                return await r.read(65536)

            got.append(await call(prd, pwr, b"DEL", b"relay:s"))
            got.append(await call(prd, pwr, b"XGROUP", b"CREATE", b"relay:s", b"g", b"$",
                                  b"MKSTREAM"))
            for i in range(2):  # the second read reuses the dedicated connection
                wr.write(b"*9\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nc\r\n"
                         b"$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$7\r\nrelay:s\r\n$1\r\n>\r\n")
                await wr.drain()
                while int(node.info("clients")["blocked_clients"]) < 1:
                    await asyncio.sleep(0.001)  # the router runs meanwhile
                got.append(await call(prd, pwr, b"XADD", b"relay:s", b"%d-1" % (i + 1),
                                      b"f", b"v"))
                got.append(await rd.read(65536))
            wr.close()
            pwr.close()
            return got

        got = loop.run_until_complete(asyncio.wait_for(exchange(), 20))
        assert got[:2] == [b":0\r\n", b"+OK\r\n"]
        assert got[2] == b"$3\r\n1-1\r\n" and got[4] == b"$3\r\n2-1\r\n"
        assert b"1-1" in got[3] and b"relay:s" in got[3]
        assert b"2-1" in got[5]
        # Each read's writes left at its end: the end-of-iteration callback was not even asked
        # for (router/outbox.py `hold`), so the stub had nothing to drop.
        assert stub.dropped == 0
    finally:
        router.close()
        loop.run_until_complete(asyncio.sleep(0.01))
        loop.close()
        asyncio.set_event_loop(None)


def _roundtrip(port: int, chunks: list[bytes], replies: int) -> list[object]:
    """Send `chunks` as separate writes, read `replies` replies."""
    rd = hiredis.Reader()
    out: list[object] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for ch in chunks:
            s.sendall(ch)
            time.sleep(0.02)  # so that the router reads them apart (not asserted either way)
        while len(out) < replies:
            x = rd.gets()
            if x is False:
                data = s.recv(65536)
                assert data, f"closed after {out}"
                rd.feed(data)
            else:
                out.append(x)
    return out


def test_requests_relayed_as_their_bytes_or_encoded(cluster: Cluster) -> None:
    """Whatever shape the client's reads take, each request reaches its node once and whole:
    a read holding exactly one request is relayed as its bytes; a request over two reads, a
    pipeline, one behind an empty array, or an inline command after a relayed request are
    not mistaken for it."""
    port = cluster.router.port
    xadd = b"*5\r\n$4\r\nXADD\r\n$7\r\nrelay:b\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n"
    r = cluster.client()
    r.delete("relay:b")
    got = _roundtrip(port, [xadd], 1)  # one read, one request
    got += _roundtrip(port, [xadd[:20], xadd[20:]], 1)  # one request over two reads
    got += _roundtrip(port, [xadd * 3], 3)  # a pipeline in one read
    got += _roundtrip(port, [b"*0\r\n" + xadd], 1)  # an empty array, then a request
    got += _roundtrip(port, [xadd, b"XADD relay:b * f inline\r\n"], 2)  # then an inline one
    assert len(got) == 8 and all(type(x) is bytes and b"-" in x for x in got), got
    assert r.xlen("relay:b") == 8
    assert r.xrange("relay:b")[-1][1] == {b"f": b"inline"}
    r.delete("relay:b")


def test_requests_behind_a_blocked_read_run_when_it_ends(cluster: Cluster) -> None:
    """A client's requests wait while its blocked read does, whether they came in the read's
    own write or later, and run in order once it ends; a read that nothing queued behind ends
    without anything else to run."""
    port = cluster.router.port
    r = cluster.client()
    r.delete("relay:w")
    r.xgroup_create("relay:w", "g", "$", mkstream=True)
    read = (b"*11\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nc\r\n$5\r\nCOUNT\r\n"
            b"$1\r\n1\r\n$5\r\nBLOCK\r\n$3\r\n100\r\n$7\r\nSTREAMS\r\n$7\r\nrelay:w\r\n$1\r\n>\r\n")
    ping, echo = b"*1\r\n$4\r\nPING\r\n", b"*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n"
    # (the second write is meant to come while the read waits: not asserted either way)
    got = _roundtrip(port, [read + ping, echo], 3)
    got += _roundtrip(port, [read], 1)  # nothing behind it
    got += _roundtrip(port, [read, echo + ping], 3)
    assert got == [None, b"PONG", b"x", None, None, b"x", b"PONG"], got
    r.delete("relay:w")


def test_a_relayed_read_encodes_nothing(cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
                                        ) -> None:
    """A read holding one keyed request is relayed without encoding it again, and so is each
    request of a pipeline (its own bytes, node/protocol.py keep_spans); one that came in two
    reads is encoded."""
    from node.config import Config
    from router import proxy
    from router.proxy import Router

    encoded: list[list[bytes]] = []
    real = proxy.encode_command

    def spy(argv: list[bytes]) -> bytes:
        encoded.append(list(argv))
        return real(argv)

    monkeypatch.setattr(proxy, "encode_command", spy)
    topo = load_topology_file(str(cluster.topology_file))
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    router = Router(Config(), cluster_down_timeout=1.0)
    try:
        router.set_topology(topo["nodes"], topo["shards"], topo["slots"], 1)
        port = loop.run_until_complete(router.start(0))

        async def calls() -> list[object]:
            rd, wr = await asyncio.open_connection("127.0.0.1", port)
            reader = hiredis.Reader()
            got: list[object] = []
            xadd = b"*5\r\n$4\r\nXADD\r\n$7\r\nrelay:e\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n"
            for chunks, n in (([b"*2\r\n$3\r\nDEL\r\n$7\r\nrelay:e\r\n"], 1),  # its bytes
                              ([xadd * 2], 2),  # a pipeline: each request's bytes
                              ([xadd[:9], xadd[9:]], 1),  # over two reads: encoded
                              ([b"*2\r\n$4\r\nXLEN\r\n$7\r\nrelay:e\r\n"], 1)):
                for ch in chunks:
                    wr.write(ch)
                    await wr.drain()
                    await asyncio.sleep(0.02)  # read apart (either way the reply is right)
                want = len(got) + n
                while len(got) < want:
                    x = reader.gets()
                    if x is False:
                        reader.feed(await rd.read(65536))
                    else:
                        got.append(x)
            wr.close()
            return got

        got = loop.run_until_complete(asyncio.wait_for(calls(), 20))
        assert got[0] == 0 and got[-1] == 3 and all(b"-" in x for x in got[1:4]), got
        assert [a[0] for a in encoded] == [b"XADD"], encoded  # only the one over two reads
    finally:
        router.close()
        loop.run_until_complete(asyncio.sleep(0.01))
        loop.close()
        asyncio.set_event_loop(None)


def test_the_primary_address_follows_every_topology_change() -> None:
    """node_for keeps each shard's primary address between requests; a new topology (a
    failover, a moved node) must be what the next request goes to."""
    from node.config import Config
    from router.proxy import Router

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        router = Router(Config())
        nodes = {"a": {"host": "127.0.0.1", "port": 7001, "shard": "0", "role": "primary"},
                 "b": {"host": "127.0.0.1", "port": 7002, "shard": "0", "role": "replica"}}
        shards = {"0": {"primary": "a", "replicas": ["b"], "epoch": 1}}
        router.set_topology(nodes, shards, [[0, 16383, "0"]], 1)
        assert router.node_for(5, False) == ("127.0.0.1", 7001)
        assert router.node_for(6, False) == ("127.0.0.1", 7001)
        router.set_topology(shards={"0": {"primary": "b", "replicas": ["a"], "epoch": 2}})
        assert router.node_for(5, False) == ("127.0.0.1", 7002)
        router.set_topology(shards={"0": {"primary": None, "replicas": [], "epoch": 3}})
        assert router.node_for(5, False) is None
        nodes["b"]["port"] = 7003
        router.set_topology(nodes, {"0": {"primary": "b", "replicas": [], "epoch": 4}})
        assert router.node_for(5, False) == ("127.0.0.1", 7003)
    finally:
        loop.close()
        asyncio.set_event_loop(None)


# --- XADD on a partitioned stream's logical name (router/pstreamwrite.py) ----------------------
# A router that reads its map from a topology file takes partitioned streams from it too.
PS_PARTS = 4


def _ps_keys(name: str) -> list[str]:
    from control.streamctl import DEFAULT_STRIDE, partition_key, spread_tags
    return [partition_key(t, name, p, DEFAULT_STRIDE) for p, t in enumerate(spread_tags(PS_PARTS))]


@pytest.fixture(scope="module")
def prouter(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeHandle]:
    """A second router over the package's cluster whose topology file names the partitioned
    streams `ev` and `kv` (key field `user`), in the etcd record's format."""
    from control.streamctl import DEFAULT_STRIDE
    assert cluster.topology_file is not None
    topo = json.loads(cluster.topology_file.read_text())
    topo["pstreams"] = {name: {"partitions": PS_PARTS, "stride": DEFAULT_STRIDE,
                               "key_field": field, "keys": _ps_keys(name)}
                        for name, field in (("ev", None), ("kv", "user"))}
    base = tmp_path_factory.mktemp("prouter")
    (base / "topology.json").write_text(json.dumps(topo))

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "control.cli", "router", "--port", str(port),
                "--topology", str(base / "topology.json"), *ROUTER_ARGS]

    proc = ServerProcess("prouter", argv, base / "router.log", cwd=REPO, env=_node_env()).start()
    h = NodeHandle("prouter", LOCALHOST, proc.port, proc)
    yield h
    h.close()


def _cmd(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def _exchange(port: int, requests: list[bytes], replies: int) -> list[object]:
    """Send `requests` in one write and read `replies` replies."""
    reader = hiredis.Reader()
    got: list[object] = []
    with socket.create_connection((LOCALHOST, port), timeout=10) as s:
        s.sendall(b"".join(requests))
        while len(got) < replies:
            data = s.recv(65536)
            assert data, "the router closed the connection"
            reader.feed(data)
            while (rep := reader.gets()) is not False:
                got.append(rep)
    return got


def _partition_of(sid: bytes) -> int:
    from control.streamctl import DEFAULT_STRIDE
    return int(sid.split(b"-")[1]) % DEFAULT_STRIDE


def test_a_pipeline_of_spread_writes_goes_to_one_partition(prouter: NodeHandle,
                                                           r: redis.Redis) -> None:
    """Writes without a key field that arrive in one client read go to one partition (one
    upstream write, appended as a batch), the next read's to the next partition: 8 pipelines
    of 20 sent as one write each cover all 4 partitions, each pipeline at most 2 of them (2
    only if TCP split its bytes, which one loopback segment does not)."""
    for k in range(8):
        reqs = [_cmd(b"XADD", b"ev", b"*", b"pipe", b"%d" % k, b"i", b"%d" % i) for i in range(20)]
        ids = _exchange(prouter.port, reqs, 20)
        assert all(isinstance(i, bytes) and b"-" in i for i in ids), ids
    pr = prouter.client()
    per = [{int(f[b"pipe"]) for _, f in pr.xrange(key)} for key in _ps_keys("ev")]
    assert all(per), per  # every partition took some
    for k in range(8):
        assert sum(k in pipes for pipes in per) <= 2, per
    assert pr.xlen("ev") == 160
    # each partition's entries of one pipeline are in the order they were sent
    for key in _ps_keys("ev"):
        entries = [(int(f[b"pipe"]), int(f[b"i"])) for _, f in pr.xrange(key)]
        assert entries == sorted(entries)
    # one partition takes at most STICKY_WRITES (100) of a read: a pipeline of 250 reaches 3
    reqs = [_cmd(b"XADD", b"ev", b"*", b"pipe", b"99", b"i", b"%d" % i) for i in range(250)]
    assert len(_exchange(prouter.port, reqs, 250)) == 250
    counts = [sum(f[b"pipe"] == b"99" for _, f in pr.xrange(key)) for key in _ps_keys("ev")]
    assert sum(counts) == 250 and sum(1 for n in counts if n) >= 3, counts


def test_xadd_written_otherwise_still_reaches_a_partition(prouter: NodeHandle,
                                                          r: redis.Redis, cluster: Cluster
                                                          ) -> None:
    """The relay splices a partition key's bulk in where the name's is, at an offset that
    depends on the request's argument count (lengths have no leading zeros: the parser
    refuses those, as Redis does); an inline command or a key field is parsed and encoded
    again. Every entry lands whole in the partition its ID names, and nothing is written under
    the logical name itself."""
    def wide(n: int, tag: bytes) -> bytes:  # XADD ev * with n field/value pairs
        return _cmd(b"XADD", b"ev", b"*", b"a", tag,
                    *[x for i in range(n - 1) for x in (b"f%d" % i, b"v%d" % i)])
    reqs = [wide(1, b"1"), wide(4, b"2"), wide(60, b"3"),  # 5, 11 and 123 arguments
            _cmd(b"xadd", b"ev", b"*", b"a", b"4"),
            b"XADD ev * a 5\r\n"]
    ids = _exchange(prouter.port, reqs, len(reqs))
    assert all(isinstance(i, bytes) and b"-" in i for i in ids), ids
    pr = prouter.client()
    got = {sid: f for key in _ps_keys("ev") for sid, f in pr.xrange(key)}
    assert sorted(int(f[b"a"]) for f in got.values()) == [1, 2, 3, 4, 5]
    assert len(got[ids[2]]) == 60 and got[ids[2]][b"f58"] == b"v58"
    keys = _ps_keys("ev")
    for sid in ids:
        assert sid in {s for s, _ in pr.xrange(keys[_partition_of(sid)])}
    for shard in range(cluster.shards):
        assert cluster.primary(shard).client().exists("ev") == 0
    # a key field picks the partition by its value: one user's entries in one partition, in order
    for i in range(12):
        pr.xadd("kv", {"user": f"u{i % 3}", "i": i})
    for key in _ps_keys("kv"):
        rows = [(f[b"user"], int(f[b"i"])) for _, f in pr.xrange(key)]
        assert rows == sorted(rows, key=lambda x: x[1])
    users = [{f[b"user"] for _, f in pr.xrange(key)} for key in _ps_keys("kv")]
    assert sum(len(u) for u in users) == 3  # each user in exactly one partition
    assert pr.xlen("kv") == 12


def test_a_bad_pstreams_entry_in_a_topology_file_is_refused(cluster: Cluster,
                                                            tmp_path: Path) -> None:
    """A router does not start on a topology file whose partitioned streams it cannot read:
    it says which part is bad and exits 1."""
    assert cluster.topology_file is not None
    topo = json.loads(cluster.topology_file.read_text())
    topo["pstreams"] = {"ev": {"partitions": 4}}  # no stride, no keys
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(topo))
    p = subprocess.run([sys.executable, "-m", "control.cli", "router", "--port", "0",
                        "--topology", str(path)], cwd=REPO, env=_node_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "bad 'pstreams'" in p.stderr and "cannot read topology" in p.stderr
