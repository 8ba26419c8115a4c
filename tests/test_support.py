"""The test machinery tests itself: process spawning, port races, log dumps, node fixtures."""

from __future__ import annotations

import signal
import socket
import sys
import time

import pytest

from control.ports import CLUSTER_MAX_PORT
from tests.support import procs
from tests.support.procs import ProcessError, ServerProcess, free_port


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_free_port_is_bindable() -> None:
    p = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))


def test_free_port_suits_cluster_mode_and_avoids_ephemeral_ports() -> None:
    # redis-server --cluster-enabled yes refuses ports above 55535 (its bus is port + 10000),
    # and a port from the kernel's ephemeral range may be taken by any outgoing connection
    # before the server binds it. The old picker (bind to port 0) broke both rules about one
    # run in five.
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
    for _ in range(300):
        p = free_port()
        assert p <= CLUSTER_MAX_PORT
        assert not lo <= p <= hi


def test_free_port_does_not_hand_out_a_port_twice_in_a_row() -> None:
    """Ports picked before anything binds them (a node's plain and TLS ports) must differ: a
    full run once gave a node's plain port to the TLS port picked just before for another."""
    from control.ports import free_block

    picked = [free_port() for _ in range(500)]
    assert len(set(picked)) == len(picked)
    base = free_block(20)
    assert not set(range(base, base + 20)) & set(picked)
    assert not set(range(base, base + 20)) & {free_port() for _ in range(200)}


def test_early_exit_reports_code_and_log(tmp_path) -> None:
    proc = ServerProcess("boom", lambda port: _py("print('boom at start'); raise SystemExit(3)"),
                         tmp_path / "boom.log", ready_timeout=10)
    with pytest.raises(ProcessError) as e:
        proc.start()
    assert "exited with code 3" in str(e.value) and "boom at start" in str(e.value)


def test_ready_timeout_kills_the_process(tmp_path) -> None:
    proc = ServerProcess("mute", lambda port: _py("import time; time.sleep(60)"),
                         tmp_path / "mute.log", ready_timeout=1)
    with pytest.raises(ProcessError, match="did not answer"):
        proc.start()
    assert not proc.alive


def test_stop_escalates_to_sigkill(tmp_path) -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    proc = ServerProcess("stubborn", lambda port: _py(code), tmp_path / "s.log",
                         probe=lambda h, p: True)
    proc.start()
    time.sleep(0.3)  # let it install the handler
    assert proc.stop(timeout=0.5) == -signal.SIGKILL
    assert "SIGKILL" in proc.log_text()


def test_port_race_is_retried_on_a_fresh_port(tmp_path, monkeypatch, redis_server_bin) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    ports = iter([busy])
    real = procs.free_port
    monkeypatch.setattr(procs, "free_port", lambda host="127.0.0.1": next(ports, None) or real(host))
    proc = ServerProcess(
        "racer", lambda port: [redis_server_bin, "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"],
        tmp_path / "r.log", ready_timeout=10)
    try:
        assert proc.port == busy
        proc.start()
        assert proc.port != busy and proc.alive
        assert "already in use" in proc.log_text().lower()
    finally:
        proc.stop()
        taken.close()


def test_xnode_lifecycle(xnode) -> None:
    n = xnode()
    assert n.client().ping()
    port = n.port
    n.client().xadd("s", {"f": "v"}, id="1-1")
    n.restart()
    assert n.port == port and n.client().ping()
    n.kill()
    assert not n.alive
    n.start()
    assert n.client().ping()
    assert "ready to accept" in n.log.lower()
    assert n.dir is not None and n.dir.is_dir()


def test_r_is_flushed_between_tests_part1(r) -> None:
    r.set("left-over", "1")


def test_r_is_flushed_between_tests_part2(r) -> None:
    assert r.dbsize() == 0


def test_protocol_fixture_reaches_r(r, protocol: int) -> None:
    assert r.connection_pool.connection_kwargs.get("protocol") == protocol
