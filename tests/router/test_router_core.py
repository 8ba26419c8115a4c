"""The router in front of 3 real nodes (a static --topology map, no etcd): what a plain client
sees. Cluster-wide behaviour with etcd and failovers is tested in tests/control/; multi-key
and fan-out commands in test_router_multikey.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.router.conftest import ROUTER_ARGS
from tests.support.cluster import Cluster
from tests.support.ioredis import ioredis_dir
from tests.support.procs import wait_until

__all__ = ["ioredis_dir"]


def test_commands_land_on_the_owning_shard(cluster: Cluster, r: redis.Redis) -> None:
    keys = cluster.keys_on_each_shard()
    for k in keys:
        r.xadd(k, {"f": "v"})
    for i, k in enumerate(keys):
        direct = cluster.primary(i).client()
        assert direct.xlen(k) == 1
        assert all(cluster.primary(j).client().exists(k) == 0 for j in range(3) if j != i)
    assert r.dbsize() == 3
    assert sorted(r.keys("*")) == sorted(k.encode() for k in keys)
    assert sorted(r.scan_iter(count=1)) == sorted(k.encode() for k in keys)
    assert r.delete(*keys, "missing") == 3


def test_pipeline_replies_keep_their_order_across_shards(r: redis.Redis) -> None:
    p = r.pipeline(transaction=False)
    expected = []
    for i in range(600):
        k = f"p{i % 11}"
        p.xadd(k, {"i": i}, id=f"{i + 1}-0")
        expected.append(f"{i + 1}-0".encode())
        p.xlen(k)
        expected.append(i // 11 + 1)
    assert p.execute() == expected


def test_multi_shard_xread_merges_in_key_order(cluster: Cluster, r: redis.Redis) -> None:
    keys = cluster.keys_on_each_shard("x")
    for n, k in enumerate(reversed(keys)):
        r.xadd(k, {"n": n}, id=f"{n + 1}-0")
    got = r.xread({k: 0 for k in keys})
    assert [name for name, _ in got] == [k.encode() for k in keys]
    r3 = cluster.client(protocol=3)
    assert list(r3.xread({keys[2]: 0, keys[0]: 0})) == [keys[2].encode(), keys[0].encode()]
    assert r.xread({k: "$" for k in keys}, block=200) == []


def test_blocking_xread_across_shards_is_woken_by_any_shard(cluster: Cluster,
                                                            r: redis.Redis) -> None:
    keys = cluster.keys_on_each_shard("b")

    def later() -> None:
        time.sleep(0.3)
        cluster.client().xadd(keys[1], {"x": "1"}, id="5-1")

    threading.Thread(target=later).start()
    got = r.xread({k: "$" for k in keys}, block=5000)  # a timeout would answer []
    assert got == [[keys[1].encode(), [(b"5-1", {b"x": b"1"})]]]
    # The waits on the other shards were cancelled: nothing stays blocked on the nodes.
    time.sleep(0.2)
    assert all(n.client().info("clients")["blocked_clients"] == 0 for n in cluster.primaries())


def test_blocked_client_that_disconnects_frees_the_node(cluster: Cluster) -> None:
    key = cluster.keys_on_each_shard("d")[0]
    s = socket.create_connection(("127.0.0.1", cluster.router.port))
    s.sendall(b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$%d\r\n%s\r\n"
              b"$1\r\n$\r\n" % (len(key), key.encode()))
    node = cluster.primary(0).client()
    deadline = time.monotonic() + 5
    while node.info("clients")["blocked_clients"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.info("clients")["blocked_clients"] == 1
    s.close()
    deadline = time.monotonic() + 5
    while node.info("clients")["blocked_clients"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.info("clients")["blocked_clients"] == 0


def test_xreadgroup_block_on_one_shard_and_across_shards(cluster: Cluster,
                                                         r: redis.Redis) -> None:
    keys = cluster.keys_on_each_shard("g")
    for k in keys:
        r.xgroup_create(k, "grp", "$", mkstream=True)

    def later() -> None:
        time.sleep(0.2)
        cluster.client().xadd(keys[0], {"a": "1"}, id="7-0")

    threading.Thread(target=later).start()
    got = r.xreadgroup("grp", "c1", {keys[0]: ">"}, block=5000)
    assert got == [[keys[0].encode(), [(b"7-0", {b"a": b"1"})]]]
    # Across shards, without BLOCK: fan out and merge.
    r.xadd(keys[2], {"b": "2"}, id="8-0")
    got = r.xreadgroup("grp", "c1", {k: ">" for k in keys})
    assert got == [[keys[2].encode(), [(b"8-0", {b"b": b"2"})]]]
    # Across shards with BLOCK and nothing to deliver: refused rather than risk a delivery.
    with pytest.raises(redis.ResponseError, match="same slot"):
        r.xreadgroup("grp", "c1", {k: ">" for k in keys}, block=100)


def test_transactions_in_one_slot(r: redis.Redis) -> None:
    p = r.pipeline(transaction=True)
    p.xadd("{t}a", {"f": 1}, id="1-0")
    p.xadd("{t}b", {"f": 2}, id="1-0")
    p.xlen("{t}a")
    assert p.execute() == [b"1-0", b"1-0", 1]
    p = r.pipeline(transaction=True)
    p.xadd("ta", {"f": 1})
    p.xadd("tb", {"f": 2})
    with pytest.raises(redis.ResponseError):
        p.execute()
    # WATCH pins the slot's node: a change by another client aborts the EXEC.
    with r.pipeline() as p:
        p.watch("{w}x")
        r.xadd("{w}x", {"other": "1"})
        p.multi()
        p.xadd("{w}x", {"mine": "1"})
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.xlen("{w}x") == 1


def test_refused_exec_aborts_the_transaction_as_on_redis(cluster: Cluster, oracle) -> None:  # noqa: ANN001
    """server.c rejectCommand, which the router shares with the nodes (node/preflight.py): a
    refused EXEC (here for its arity) aborts the transaction and quotes why, so the next EXEC
    has no MULTI; a refused command inside MULTI makes EXEC fail."""
    from tests.support.rawresp import RawClient

    script = [["MULTI"], ["XLEN", "{t}x"], ["EXEC", "extra"], ["EXEC"], ["XLEN", "{t}x"],
              ["MULTI"], ["XLEN", "{t}x", "extra"], ["EXEC"], ["MULTI"], ["NOSUCH", "a"],
              ["EXEC"]]
    replies = []
    for port in (cluster.router.port, oracle.port):
        raw = RawClient("127.0.0.1", port, timeout=10)
        replies.append([raw.call(*cmd) for cmd in script])
        raw.close()
    for cmd, ours, theirs in zip(script, *replies, strict=True):
        assert ours == theirs, f"{cmd}: router {ours} redis {theirs}"


def test_cross_slot_command_is_refused(r: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="same slot"):
        r.execute_command("RENAME", "a", "b")


def test_wait_goes_to_the_written_shards(cluster: Cluster, r: redis.Redis) -> None:
    keys = cluster.keys_on_each_shard("w")
    r.xadd(keys[0], {"a": 1})
    r.xadd(keys[2], {"a": 1})
    assert r.execute_command("WAIT", 0, 100) == 0  # no replicas in this set-up
    assert r.execute_command("WAITAOF", 0, 0, 100) == [0, 0]


def test_connection_commands_are_answered_by_the_router(cluster: Cluster,
                                                        r: redis.Redis) -> None:
    assert r.ping()
    assert r.echo("hi") == b"hi"
    r.client_setname("me")
    assert r.client_getname() in ("me", b"me")
    assert r.command_count() > 20
    r3 = cluster.client(protocol=3)
    assert r3.ping()
    slots = r.execute_command("CLUSTER", "SLOTS")
    assert slots[0][:2] == [0, 16383] and slots[0][2][1] == cluster.router.port


def test_a_shard_that_is_down_gets_clusterdown(xcluster: Callable[..., Cluster]) -> None:
    c = xcluster(shards=3, replicas=0, etcd=False, routers=1, router_args=ROUTER_ARGS)
    key = c.keys_on_each_shard("z")[1]
    c.primary(1).kill()
    t0 = time.monotonic()
    with pytest.raises(redis.exceptions.ClusterDownError):
        c.client().xadd(key, {"a": 1})
    assert time.monotonic() - t0 >= 0.25  # waited out --cluster-down-timeout-ms first
    other = c.keys_on_each_shard("z")[0]
    assert c.client().xadd(other, {"a": 1})  # the other shards are unaffected


def test_auth_at_the_router_and_to_the_nodes(xcluster: Callable[..., Cluster]) -> None:
    c = xcluster(shards=3, replicas=0, etcd=False, routers=1,
                 router_args=(*ROUTER_ARGS, "--requirepass", "rpw", "--node-password", "npw"),
                 node_args=("--requirepass", "npw"))
    anon = c.client(protocol=2)
    with pytest.raises(redis.AuthenticationError):
        anon.xlen("k")
    s = socket.create_connection(("127.0.0.1", c.router.port))
    s.sendall(b"DBSIZE\r\nPING\r\n")
    time.sleep(0.2)
    assert s.recv(200) == b"-NOAUTH Authentication required.\r\n" * 2
    s.close()
    authed = c.client(password="rpw")
    assert authed.xadd("k", {"a": 1})
    assert authed.xlen("k") == 1
    with pytest.raises(redis.AuthenticationError):
        c.client(password="wrong").ping()
    r3 = redis.Redis(host="127.0.0.1", port=c.router.port, protocol=3, password="rpw")
    assert r3.xlen("k") == 1


def test_malformed_request_gets_protocol_error_and_close(cluster: Cluster) -> None:
    s = socket.create_connection(("127.0.0.1", cluster.router.port))
    s.sendall(b"*1\r\n$x\r\n")
    data = s.recv(200)
    assert data.startswith(b"-ERR Protocol error")
    s.settimeout(2)
    assert s.recv(10) == b""  # closed
    s.close()
    assert cluster.client().ping()  # the router is fine


# --- routers that find each other in etcd: cluster-aware clients spread over them ------------------
@pytest.mark.etcd
def test_redis_cluster_client_through_two_routers(xcluster: Callable[..., Cluster]) -> None:
    c = xcluster(shards=3, replicas=0, controller=False, routers=2)
    probe = c.client(0)
    deadline = time.monotonic() + 10
    while len(probe.execute_command("CLUSTER", "SLOTS")) < 2:
        assert time.monotonic() < deadline, "routers did not see each other"
        time.sleep(0.1)
    ranges = probe.execute_command("CLUSTER", "SLOTS")
    assert sorted(r[2][1] for r in ranges) == sorted(r.port for r in c.routers)
    assert ranges[0][0] == 0 and ranges[-1][1] == 16383
    rc = redis.RedisCluster(host="127.0.0.1", port=c.router.port)
    try:
        for i in range(60):
            rc.xadd(f"rc{i}", {"i": i})
        assert all(rc.xlen(f"rc{i}") == 1 for i in range(60))
    finally:
        rc.close()
    nodes = c.primaries()
    assert sum(n.client().dbsize() for n in nodes) == 60  # spread over the real shards
    assert all(n.client().dbsize() > 0 for n in nodes)


# --- the node's differential workload, through the router, against redis-server ----------------
@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15])
def test_differential_workload_through_the_router(cluster: Cluster, oracle, seed: int,  # noqa: ANN001
                                                  protocol: int) -> None:
    """The keys of the workload live on different shards (s1, s2, {t}s3+{t}s4 and `other`),
    so multi-key reads fan out and merge; every reply must equal redis-server's."""
    from tests.node.test_differential import KNOWN_DIFFERENCES
    from tests.support.diff import compare_run
    from tests.support.gen import DEFAULT_KEYS, StreamWorkload
    from tests.support.rawresp import RawClient

    shards = {cluster.shard_of(k) for k in DEFAULT_KEYS}
    assert len(shards) >= 2, "the workload's keys should span shards"
    o = RawClient(oracle.host, oracle.port, timeout=10)
    n = RawClient("127.0.0.1", cluster.router.port, timeout=10)
    try:
        for c in (o, n):
            if protocol == 3:
                assert c.hello(3)[0] == "%"
            assert c.call("FLUSHALL") == ("+", b"OK")
        mismatch = compare_run(o, n, StreamWorkload(seed).commands(300), KNOWN_DIFFERENCES,
                               oracle.version[:2])
        if mismatch is not None:
            pytest.fail(mismatch.report(f"router differential seed={seed} RESP{protocol}",
                                        "pytest tests/router/test_router_core.py -k differential"),
                        pytrace=False)
    finally:
        for c in (o, n):
            c.call("FLUSHALL")
            c.close()


def test_router_restarted_mid_load(xcluster: Callable[..., Cluster]) -> None:
    """A router holds no state: restarted under a write load, clients reconnect and carry on,
    and every acknowledged write is on the shards."""
    c = xcluster(shards=3, replicas=0, etcd=False, routers=1, router_args=ROUTER_ARGS)
    acked: list[tuple[str, bytes]] = []
    errors: list[str] = []
    failures = 0
    stop = threading.Event()

    def writer() -> None:
        nonlocal failures
        r = c.client(socket_timeout=5, protocol=2)
        i = 0
        while not stop.is_set():
            key = f"rr{i % 9}"
            try:
                acked.append((key, r.xadd(key, {"i": i})))
            except (redis.RedisError, OSError, TypeError) as e:
                # The router is down or still connecting to its shards: not acknowledged,
                # try again on a fresh client. TypeError too: redis-py can trip over its own
                # socket closed under it ("argument must be an int, or have a fileno()").
                failures += 1
                errors.append(repr(e))
                r.close()
                r = c.client(socket_timeout=5, protocol=2)
                time.sleep(0.05)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        wait_until(lambda: len(acked) > 10, 30, what="writes through the router")
        c.router.restart()  # same port
        before = len(acked)
        try:
            wait_until(lambda: len(acked) > before + 10, 30, what="writes to resume")
        except TimeoutError as e:
            raise AssertionError(f"{e}; writer alive={t.is_alive()}, "
                                 f"last errors: {errors[-3:]}") from None
    finally:
        stop.set()
        t.join(15)
    r = c.client()
    present = {k: {e for e, _ in r.xrange(k)} for k in {k for k, _ in acked}}
    assert all(e in present[k] for k, e in acked)


IOREDIS_SCRIPT = r"""
const Redis = require("ioredis");
const cluster = new Redis.Cluster([{host: "127.0.0.1", port: Number(process.argv[2])}],
                                  {redisOptions: {maxRetriesPerRequest: 3}});
(async () => {
  const ids = [];
  for (let i = 0; i < 30; i++) ids.push(await cluster.xadd(`io${i}`, "*", "i", String(i)));
  const lens = [];
  for (let i = 0; i < 30; i++) lens.push(await cluster.xlen(`io${i}`));
  const read = await cluster.xread("COUNT", 1, "STREAMS", "{io}a", "0");
  await cluster.xadd("{io}a", "1-1", "f", "v");
  const read2 = await cluster.xread("COUNT", 1, "STREAMS", "{io}a", "0");
  console.log(JSON.stringify({ids: ids.length, lens, read, read2}));
  cluster.disconnect();
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


def test_ioredis_cluster_client_through_a_router(cluster: Cluster, r: redis.Redis,
                                                  ioredis_dir: Path) -> None:
    import subprocess

    script = ioredis_dir / "cluster.js"
    script.write_text(IOREDIS_SCRIPT)
    res = subprocess.run(["node", str(script), str(cluster.router.port)], cwd=ioredis_dir,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-1000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["ids"] == 30 and out["lens"] == [1] * 30
    assert out["read"] is None
    assert out["read2"] == [["{io}a", [["1-1", ["f", "v"]]]]]
    assert sum(n.client().dbsize() for n in cluster.primaries()) == 31


def test_many_blocked_consumers_through_the_router(cluster: Cluster, r: redis.Redis) -> None:
    """20 consumers blocked in XREADGROUP (and 10 in XREAD) through the router: every entry
    is delivered to exactly one group consumer and seen by every XREAD reader."""
    key = "many"
    r.xgroup_create(key, "g", "$", mkstream=True)
    got: list[bytes] = []
    seen: dict[int, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def consumer(i: int) -> None:
        c = cluster.client(protocol=2)
        while not stop.is_set():
            for _, entries in c.xreadgroup("g", f"c{i}", {key: ">"}, count=5, block=200) or []:
                with lock:
                    got.extend(e for e, _ in entries)
                c.xack(key, "g", *[e for e, _ in entries])

    def reader(i: int) -> None:
        c = cluster.client(protocol=3)
        last = "$"
        while not stop.is_set():
            res = c.xread({key: last}, block=200)
            for entries in (res or {}).values():
                for batch in entries:
                    with lock:
                        seen[i] = seen.get(i, 0) + len(batch)
                    last = batch[-1][0]

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(20)]
    threads += [threading.Thread(target=reader, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    produced = [r.xadd(key, {"n": n}) for n in range(200)]
    deadline = time.monotonic() + 15
    while (len(got) < 200 or min(seen.values(), default=0) < 200 or len(seen) < 10) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(10)
    assert sorted(got) == sorted(produced)  # each exactly once
    assert seen == {i: 200 for i in range(10)}
    assert r.xpending(key, "g")["pending"] == 0
