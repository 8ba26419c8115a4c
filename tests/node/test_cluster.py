"""The cluster protocol on a node: the slot function, CLUSTER replies and redirects.

KEYSLOT is compared with a cluster-enabled redis-server; the reply shapes are checked on a node
whose cluster state is set in-process (the etcd agent that feeds it in production is tested in
tests/control/)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import hiredis
import pytest

from node.client import Client
from node.cluster import ClusterState, redis_id
from node.config import Config
from node.server import Server
from node.slots import key_slot
from tests.conftest import NodeHandle, _oracle_binary, spawn_node
from tests.support.rawresp import RawClient


@pytest.fixture(scope="module")
def cluster_oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeHandle]:
    binary = _oracle_binary(None)
    if binary is None:
        pytest.skip("redis-server not found")
    base = tmp_path_factory.mktemp("cluster-oracle")
    h = spawn_node(base, "--cluster-enabled", "yes", "--cluster-config-file",
                   str(base / "nodes.conf"), name="oracle (cluster mode)", impl="redis",
                   binary=binary)
    yield h
    h.close()


def _keys(seed: int, n: int) -> list[bytes]:
    rnd = random.Random(seed)
    alphabet = b"ab{}xyz01\x00\xff"
    out = [b"", b"{", b"}", b"{}", b"{}x", b"x{}", b"{a}", b"{a}b", b"a{b}c{d}", b"{{a}}",
           b"}{a}", b"a{", b"a{b", b"\xff" * 40, b"{user1000}.following"]
    for _ in range(n):
        out.append(bytes(rnd.choice(alphabet) for _ in range(rnd.randint(1, 12))))
    return out


def test_key_slot_matches_redis(cluster_oracle: NodeHandle) -> None:
    r = cluster_oracle.client()
    keys = _keys(7, 400)
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.execute_command("CLUSTER", "KEYSLOT", k)
    want = pipe.execute()
    assert [key_slot(k) for k in keys] == want


@pytest.fixture
def state(loop: asyncio.AbstractEventLoop) -> Iterator[tuple[Server, Client, ClusterState]]:
    s = Server(Config())
    c = Client(s, None, 1)
    st = s.cluster = ClusterState(s, "n1", "0")
    st.update(
        nodes={"n1": {"host": "127.0.0.1", "port": 7001, "shard": "0", "role": "primary"},
               "n2": {"host": "127.0.0.1", "port": 7002, "shard": "1", "role": "primary"},
               "n3": {"host": "127.0.0.1", "port": 7003, "shard": "0", "role": "replica"}},
        shards={"0": {"primary": "n1", "replicas": ["n3"], "epoch": 3},
                "1": {"primary": "n2", "replicas": [], "epoch": 1}},
        slots=[[0, 8191, "0"], [8192, 16383, "1"]], version=9)
    yield s, c, st


def _reply(data: bytes):  # noqa: ANN202
    r = hiredis.Reader()
    r.feed(data)
    return r.gets()


def _key_in(lo: int, hi: int) -> bytes:
    i = 0
    while not lo <= key_slot(b"k%d" % i) <= hi:
        i += 1
    return b"k%d" % i


def test_redirects(state: tuple[Server, Client, ClusterState]) -> None:
    s, c, _ = state
    mine, theirs = _key_in(0, 8191), _key_in(8192, 16383)
    assert _reply(s.execute(c, [b"XADD", mine, b"1-1", b"f", b"v"])) == b"1-1"
    err = _reply(s.execute(c, [b"XLEN", theirs]))
    assert str(err) == f"MOVED {key_slot(theirs)} 127.0.0.1:7002"
    # CLIENT LIST's cmd= names the redirected command: Redis sets it before the redirect
    assert c.last_cmd == b"xlen"
    assert str(_reply(s.execute(c, [b"XREAD", b"STREAMS", mine, theirs, b"0", b"0"]))) == \
        "CROSSSLOT Keys in request don't hash to the same slot"
    # Same-slot multi-key commands are fine: hash tags put keys together.
    assert _reply(s.execute(c, [b"DEL", b"{%s}a" % mine, b"{%s}b" % mine])) == 0
    # Keyless commands are never redirected.
    assert _reply(s.execute(c, [b"PING"])) == b"PONG"


def test_replica_serves_reads_only_after_readonly(
        state: tuple[Server, Client, ClusterState]) -> None:
    s, c, st = state
    st.myid = "n3"  # now this node is shard 0's replica
    key = _key_in(0, 8191)
    moved = f"MOVED {key_slot(key)} 127.0.0.1:7001"
    assert str(_reply(s.execute(c, [b"XLEN", key]))) == moved
    s.execute(c, [b"READONLY"])
    assert _reply(s.execute(c, [b"XLEN", key])) == 0
    assert str(_reply(s.execute(c, [b"XADD", key, b"*", b"f", b"v"]))) == moved
    s.execute(c, [b"READWRITE"])
    assert str(_reply(s.execute(c, [b"XLEN", key]))) == moved


def test_cluster_replies(state: tuple[Server, Client, ClusterState]) -> None:
    s, c, _ = state
    ids = {n: redis_id(n).encode() for n in ("n1", "n2", "n3")}
    assert _reply(s.execute(c, [b"CLUSTER", b"SLOTS"])) == [
        [0, 8191, [b"127.0.0.1", 7001, ids["n1"], []], [b"127.0.0.1", 7003, ids["n3"], []]],
        [8192, 16383, [b"127.0.0.1", 7002, ids["n2"], []]],
    ]
    assert _reply(s.execute(c, [b"CLUSTER", b"MYID"])) == ids["n1"]
    nodes = _reply(s.execute(c, [b"CLUSTER", b"NODES"])).decode().splitlines()
    mine = next(line for line in nodes if "myself" in line).split()
    assert mine[:3] == [ids["n1"].decode(), "127.0.0.1:7001@17001", "myself,master"]
    assert mine[-1] == "0-8191"
    replica = next(line for line in nodes if ids["n3"].decode() in line).split()
    assert replica[2:4] == ["slave", ids["n1"].decode()]
    info = _reply(s.execute(c, [b"CLUSTER", b"INFO"])).decode()
    assert "cluster_state:ok\r\n" in info and "cluster_size:2\r\n" in info
    assert "cluster_my_epoch:3\r\n" in info
    shards = _reply(s.execute(c, [b"CLUSTER", b"SHARDS"]))
    assert shards[0][:2] == [b"slots", [0, 8191]]
    assert [n[1] for n in shards[0][3]] == [ids["n1"], ids["n3"]]
    key = _key_in(0, 8191)
    s.execute(c, [b"XADD", key, b"1-1", b"f", b"v"])
    slot = b"%d" % key_slot(key)
    assert _reply(s.execute(c, [b"CLUSTER", b"COUNTKEYSINSLOT", slot])) == 1
    assert _reply(s.execute(c, [b"CLUSTER", b"GETKEYSINSLOT", slot, b"5"])) == [key]


def test_a_dead_node_stays_listed_as_failed(state: tuple[Server, Client, ClusterState]) -> None:
    """n3's lease is gone (it is no longer in `nodes`) but shard 0 still names it; n9 was never
    seen alive here. Both are listed, flagged `fail`, as Redis lists a node it marked failed."""
    s, c, st = state
    st.update(nodes={"n1": {"host": "127.0.0.1", "port": 7001, "shard": "0", "role": "primary"},
                     "n2": {"host": "127.0.0.1", "port": 7002, "shard": "1", "role": "primary"}},
              shards={"0": {"primary": "n1", "replicas": ["n3", "n9"], "epoch": 3},
                      "1": {"primary": "n2", "replicas": [], "epoch": 1}})
    lines = {line.split()[0]: line.split()
             for line in _reply(s.execute(c, [b"CLUSTER", b"NODES"])).decode().splitlines()}
    n1, n3, n9 = (redis_id(n) for n in ("n1", "n3", "n9"))
    assert lines[n3][1:] == ["127.0.0.1:7003@17003", "slave,fail", n1, "0", "0", "3",
                             "disconnected"]
    assert lines[n9][1:3] == [":0@0", "slave,fail"]
    assert len(lines) == 4
    def pairs(flat: list) -> dict:
        return dict(zip(flat[::2], flat[1::2], strict=True))

    shard0 = pairs(_reply(s.execute(c, [b"CLUSTER", b"SHARDS"]))[0])
    health = {pairs(n)[b"id"]: pairs(n)[b"health"] for n in shard0[b"nodes"]}
    assert health == {n1.encode(): b"online", n3.encode(): b"fail", n9.encode(): b"fail"}
    assert b"cluster_known_nodes:4\r\n" in _reply(s.execute(c, [b"CLUSTER", b"INFO"]))
    # A replica etcd no longer names is forgotten.
    st.update(shards={"0": {"primary": "n1", "replicas": [], "epoch": 4},
                      "1": {"primary": "n2", "replicas": [], "epoch": 1}})
    assert len(_reply(s.execute(c, [b"CLUSTER", b"NODES"])).decode().splitlines()) == 2


def test_cluster_argument_errors_match_redis(cluster_oracle: NodeHandle,
                                             state: tuple[Server, Client, ClusterState]) -> None:
    s, c, _ = state
    r = RawClient(cluster_oracle.host, cluster_oracle.port)
    for cmd in ([b"CLUSTER", b"COUNTKEYSINSLOT", b"99999"], [b"CLUSTER", b"COUNTKEYSINSLOT", b"x"],
                [b"CLUSTER", b"GETKEYSINSLOT", b"1", b"-1"],
                [b"CLUSTER", b"GETKEYSINSLOT", b"16384", b"1"], [b"CLUSTER", b"FOO"],
                [b"CLUSTER", b"KEYSLOT"]):
        kind, want = r.call(*cmd)
        assert kind == "-", (cmd, want)
        assert s.execute(c, cmd) == b"-%s\r\n" % want, cmd
    r.close()


def test_standalone_node_has_cluster_disabled(xnode, oracle: NodeHandle) -> None:  # noqa: ANN001
    h = xnode()
    for cmd in (["CLUSTER", "SLOTS"], ["CLUSTER", "INFO"]):
        errs = []
        for node in (h, oracle):
            try:
                node.client().execute_command(*cmd)
                errs.append(None)
            except Exception as e:  # noqa: BLE001
                errs.append(str(e))
        assert errs[0] == errs[1], cmd

