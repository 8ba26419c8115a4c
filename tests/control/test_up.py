"""`xshard up` as a user runs it: restart after a failover, supervision of what it started,
--detach / down / logs, a second `up` in the same directory, and the other commands finding
the local cluster (./.xshard or XSHARD_ETCD). Real processes throughout."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from base.store import read_view
from control.ports import free_block
from tests.conftest import REPO
from tests.support.procs import wait_until

pytestmark = pytest.mark.etcd

READY = "Ctrl-C stops the cluster."
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def xshard(*args: str, cwd: Path, timeout: float = 60,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "control.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=env or ENV)


class Up:
    """One foreground `xshard up`; its console is read by a thread into `lines`."""

    def __init__(self, cwd: Path, args: list[str]) -> None:
        self.cwd = cwd
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "control.cli", "up", *args],
                                     cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=ENV)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 90) -> None:
        try:
            wait_until(lambda: text in self.out or self.proc.poll() is not None, timeout,
                       what=repr(text))
        except TimeoutError:
            raise AssertionError(f"no {text!r} from xshard up:\n{self.out}") from None
        assert text in self.out, f"xshard up exited ({self.proc.returncode}):\n{self.out}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Callable[..., Up]]:
    """Factory: up(*extra) starts `xshard up` in tmp_path (2 shards x 1 replica, 1 router on a
    free block of ports unless given) and waits until it is ready; all stopped at teardown,
    including a detached one (through `xshard down`)."""
    started: list[Up] = []
    base = free_block(6)

    def factory(*extra: str, wait: bool = True) -> Up:
        args = ["--shards", "2", "--replicas", "1", "--port", str(base), "--router-port",
                str(base + 4), "--cluster", "uptest", *extra]
        u = Up(tmp_path, args)
        u.base = base
        started.append(u)
        if wait:
            u.wait_for(READY)
        return u

    yield factory
    for u in started:
        u.stop()
    if (tmp_path / ".xshard" / "up.pid").exists():
        xshard("down", cwd=tmp_path)


def _serves(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=2).ping()
    except redis.RedisError:
        return False


def _write(port: int, keys: list[str], n: int, tag: str,
           ids: dict[str, list[bytes]] | None = None) -> dict[str, list[bytes]]:
    """n entries per key through the router, then a WAIT for one replica.

    Every ID an XADD returned goes into `ids` as it comes back, so an attempt that fails
    half-way (a shard still switching over) still records what it wrote."""
    r = redis.Redis(port=port, socket_timeout=10)
    ids = {k: [] for k in keys} if ids is None else ids
    try:
        for i in range(n):
            for k in keys:
                ids[k].append(r.xadd(k, {"tag": tag, "i": str(i)}))
        if r.execute_command("WAIT", 1, 5000) < 1:
            raise redis.RedisError("WAIT: no replica acknowledged")
    finally:
        r.close()
    return ids


def test_up_again_after_a_failover_serves_every_acknowledged_write(up, tmp_path) -> None:  # noqa: ANN001
    u = up()
    router = u.base + 4
    keys = [f"k{i}" for i in range(12)]
    acked = _write(router, keys, 5, "before")
    url1 = (tmp_path / ".xshard" / "etcd.url").read_text().strip()
    r = xshard("failover", "0", "--force", cwd=tmp_path)  # finds the cluster in ./.xshard
    assert r.returncode == 0 and "s0n1 is the new primary" in r.stdout, r.stdout + r.stderr

    def write_after() -> bool:
        # IDs go straight into `acked`: an attempt that fails on one shard after writing to
        # another must not leave entries the final check cannot account for.
        try:
            _write(router, keys, 3, "after", acked)
        except redis.RedisError:
            return False
        return True

    wait_until(write_after, 30, interval=0.2, what="writes after the failover")
    assert u.stop() == 0, u.out
    u2 = up()  # waits until it says it is ready (this used to give up after 20 s)
    assert "the primaries did not come up" not in u2.out
    assert (tmp_path / ".xshard" / "etcd.url").read_text().strip() == url1  # same etcd port
    assert "using the existing cluster 'uptest' (2 shards" in u2.out, u2.out
    assert "start 6 nodes" not in u2.out and "already exists" not in u2.out
    v = read_view(url1, "uptest")
    assert v.shards["0"].value.primary == "s0n1"  # etcd's roles decided
    r = redis.Redis(port=router, socket_timeout=10)
    for k in keys:
        assert [e[0] for e in r.xrange(k)] == acked[k], k
    r.close()


def _pid_of(port: int) -> int:
    return int(redis.Redis(port=port, socket_timeout=2).info("server")["process_id"])


def test_up_restarts_what_dies_and_says_so(up, tmp_path) -> None:  # noqa: ANN001
    u = up()
    node_port, router = u.base + 1, u.base + 4  # s0n1 (a replica) and the router
    for name, port in (("s0n1", node_port), ("router0", router)):
        pid = _pid_of(port)
        os.kill(pid, signal.SIGKILL)
        u.wait_for(f"{name} exited", 30)
        wait_until(lambda p=port, old=pid: _serves(p) and _pid_of(p) != old, 60,
                   interval=0.2, what=f"{name} restarted")
        assert re.search(rf"xshard up: {name} exited .*restarting", u.out), u.out
        assert re.search(rf"xshard up: {name} restarted \(pid \d+\)", u.out), u.out
    ctl = int(re.search(r"controller \(pid (\d+)\)", u.out).group(1))
    os.kill(ctl, signal.SIGKILL)
    u.wait_for("controller restarted", 60)
    url = (tmp_path / ".xshard" / "etcd.url").read_text().strip()
    wait_until(lambda: read_view(url, "uptest").leader is not None, 30, what="a leader again")
    assert u.stop() == 0


def test_detach_down_logs_and_a_second_up(tmp_path) -> None:  # noqa: ANN001
    """In a directory of its own (--dir), which every command is given."""
    base = free_block(6)
    d = ["--dir", "state"]
    args = ["--shards", "1", "--replicas", "1", "--port", str(base), "--router-port",
            str(base + 2), "--cluster", "det", *d]
    r = xshard("up", "--detach", *args, cwd=tmp_path, timeout=120)
    try:
        _detached(tmp_path, base, args, r)
    finally:
        xshard("down", *d, cwd=tmp_path, timeout=90)


def _detached(tmp_path: Path, base: int, args: list[str],
              r: subprocess.CompletedProcess) -> None:
    d = ["--dir", "state"]
    assert r.returncode == 0, r.stdout + r.stderr
    assert "xshard down --dir" in r.stdout and "s0n1" in r.stdout, r.stdout
    pid = int((tmp_path / "state" / "up.pid").read_text())
    os.kill(pid, 0)  # the supervisor runs in the background
    assert _serves(base + 2)
    # A second `up` here says so at once.
    again = xshard("up", *args, cwd=tmp_path, timeout=30)
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stderr.strip() == f"xshard up: already running (pid {pid}); " \
                                   "xshard down stops it", again.stderr
    # logs: one process, all of them, following.
    lg = xshard("logs", "s0n0", *d, cwd=tmp_path)
    assert lg.returncode == 0 and "ready to accept connections" in lg.stdout, lg.stderr
    lg = xshard("logs", *d, cwd=tmp_path)
    assert re.search(r"^s0n1 +\| .*ready to accept connections", lg.stdout, re.M), lg.stdout
    assert re.search(r"^controller +\| ", lg.stdout, re.M), lg.stdout
    bad = xshard("logs", "nosuch", *d, cwd=tmp_path)
    assert bad.returncode == 1 and "no log 'nosuch'" in bad.stderr and "s0n0" in bad.stderr
    # -f follows: the supervisor's own log (up.log) tells of a restart as it happens.
    follow = subprocess.Popen([sys.executable, "-m", "control.cli", "logs", "up", "-f", *d],
                              cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=ENV)
    lines: list[str] = []
    t = threading.Thread(target=lambda: lines.extend(iter(follow.stdout.readline, "")),
                         daemon=True)
    t.start()
    try:
        wait_until(lambda: any("running in the background" in x for x in lines), 30,
                   what="logs -f prints the log so far")
        os.kill(_pid_of(base + 1), signal.SIGKILL)
        wait_until(lambda: any("s0n1 exited" in x for x in lines), 30,
                   what="logs -f prints what is appended")
        wait_until(lambda: _serves(base + 1), 60, what="s0n1 back")
    finally:
        follow.terminate()
        follow.wait(10)
    # down stops everything and the directory is free again.
    down = xshard("down", *d, cwd=tmp_path, timeout=90)
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    for port in range(base, base + 3):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"
    down = xshard("down", *d, cwd=tmp_path)
    assert down.returncode == 1 and "no cluster running" in down.stderr


def test_commands_find_the_cluster_from_xshard_etcd(up, tmp_path) -> None:  # noqa: ANN001
    u = up()
    url = (tmp_path / ".xshard" / "etcd.url").read_text().strip()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    st = xshard("status", "--cluster", "uptest", cwd=elsewhere,
                env={**ENV, "XSHARD_ETCD": url})
    assert st.returncode == 0 and "s1n1" in st.stdout, st.stdout + st.stderr
    st = xshard("status", cwd=tmp_path)  # the cluster name and etcd from ./.xshard
    assert st.returncode == 0 and "cluster uptest" in st.stdout, st.stderr
    assert u.stop() == 0


def test_status_shows_lag_in_seconds_and_the_groups_furthest_behind(up, tmp_path) -> None:  # noqa: ANN001
    """Every process up starts has a metrics port, listed in prometheus/targets.json; status
    reads the replicas' lag in seconds and the groups' lag from the primaries' metrics."""
    u = up()
    targets = json.loads((tmp_path / ".xshard" / "prometheus" / "targets.json").read_text())
    assert sorted(t["labels"]["node"] for t in targets) == [
        "controller", "router0", "s0n0", "s0n1", "s1n0", "s1n1"]
    r = redis.Redis(port=u.base + 4, socket_timeout=10)
    for i in range(30):
        r.xadd("jobs", {"i": i})
    r.xgroup_create("jobs", "slow", id="0")
    r.xreadgroup("slow", "c", {"jobs": ">"}, count=3)
    assert r.execute_command("WAIT", 1, 5000) >= 1

    def status() -> str:
        st = xshard("status", cwd=tmp_path)
        assert st.returncode == 0, st.stderr
        return st.stdout

    wait_until(lambda: re.search(r"^\S*\s+jobs\s+slow\s+27\s+3\s", status(), re.M)
               is not None, 20, what="the group in status")
    out = status()
    assert "LAG(BYTES)" in out and "LAG(S)" in out
    replica_rows = [line.split() for line in out.splitlines() if " replica " in line]
    assert len(replica_rows) == 2 and all(re.fullmatch(r"\d+\.\d", row[-1])
                                          for row in replica_rows), out
    assert u.stop() == 0


def test_up_with_more_shards_starts_them_and_rebalances(tmp_path) -> None:  # noqa: ANN001
    base = free_block(8)
    args = ["--replicas", "1", "--port", str(base), "--router-port", str(base + 7),
            "--cluster", "grow"]
    router = base + 7
    u = Up(tmp_path, ["--shards", "2", *args])
    try:
        u.wait_for(READY)
        keys = [f"g{i}" for i in range(30)]
        acked = _write(router, keys, 4, "two")
    finally:
        assert u.stop() == 0, u.out
    u = Up(tmp_path, ["--shards", "3", *args])
    try:
        u.wait_for("rebalancing:", 120)
        assert "adding shards 2" in u.out, u.out
        url = (tmp_path / ".xshard" / "etcd.url").read_text().strip()

        def even() -> bool:
            v = read_view(url, "grow")
            if v.migrations or not v.slots:
                return False
            n = [sum(b - a + 1 for a, b, sid in v.slots.value if sid == s) for s in "012"]
            return max(n) - min(n) <= 1 and all(v.live(v.shards[s].value.primary) for s in "012")

        wait_until(even, 120, interval=0.5, what="the slots spread over three shards")
        v = read_view(url, "grow")
        assert sorted(v.shards["2"].value.members()) == ["s2n0", "s2n1"]
        r = redis.Redis(port=router, socket_timeout=10)
        for k in keys:
            assert [e[0] for e in r.xrange(k)] == acked[k], k
        assert redis.Redis(port=base + 4).dbsize() > 0  # s2n0 holds some of them
        r.close()
    finally:
        assert u.stop() == 0, u.out
    smaller = xshard("up", "--shards", "2", *args, cwd=tmp_path, timeout=60)
    assert smaller.returncode == 1
    assert "has 3 shards; start it with --shards 3 (xshard remove-shard makes it smaller)" \
        in smaller.stderr, smaller.stderr


def test_up_with_tls_serves_tls_clients_and_replicates_over_tls(tmp_path) -> None:  # noqa: ANN001
    from control.ports import port_in_use
    from control.up import TLS_OFFSET

    base = next(b for b in iter(lambda: free_block(4), None)
                if not any(port_in_use(b + TLS_OFFSET + i) for i in range(4)))
    u = Up(tmp_path, ["--shards", "1", "--replicas", "1", "--port", str(base), "--router-port",
                      str(base + 3), "--cluster", "uptls", "--tls"])
    try:
        u.wait_for(READY)
        t = tmp_path / ".xshard" / "tls"
        assert f"--tls --cacert {t / 'ca.pem'}" in u.out
        kw = {"ssl": True, "ssl_ca_certs": str(t / "ca.pem"), "ssl_certfile": str(t / "client.pem"),
              "ssl_keyfile": str(t / "client-key.pem"), "socket_timeout": 10}
        r = redis.Redis(port=base + 3 + TLS_OFFSET, **kw)
        eid = r.xadd("k", {"a": "1"})
        assert r.execute_command("WAIT", 1, 5000) == 1
        primary = redis.Redis(port=base + TLS_OFFSET, **kw)
        assert primary.xrange("k") == [(eid, {b"a": b"1"})]
        # The replica's link to its primary is the TLS one (tls-replication).
        replica = redis.Redis(port=base + 1 + TLS_OFFSET, **kw)
        assert replica.info("replication")["master_port"] == base + TLS_OFFSET
        for c in (r, primary, replica):
            c.close()
    finally:
        assert u.stop() == 0, u.out
