"""CLIENT PAUSE / UNPAUSE (node/writepause.py), side by side with redis-server.

A paused client waits and gets no error; reads go on under WRITE; the later end and the
stricter mode of two pauses win; a key that expires during a pause is not deleted (no effect
is emitted) but reads as gone; UNPAUSE releases the waiting clients in order.
"""

from __future__ import annotations

import threading

import pytest
import redis

from tests.conftest import NodeHandle
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient

ERRORS = [
    ["CLIENT", "PAUSE"], ["CLIENT", "PAUSE", "abc"], ["CLIENT", "PAUSE", "-1"],
    ["CLIENT", "PAUSE", "10", "foo"], ["CLIENT", "PAUSE", "abc", "foo"],
    ["CLIENT", "PAUSE", "1", "2", "3"], ["CLIENT", "UNPAUSE", "x"],
    ["CLIENT", "PAUSE", "0", "WRITE"], ["CLIENT", "UNPAUSE"],
]


@pytest.fixture(params=["node", "oracle"])
def server(request: pytest.FixtureRequest) -> NodeHandle:
    """The node or the session's redis-server, empty and unpaused before and after: other
    tests share the oracle, so a key or a pause they left must not decide these."""
    h: NodeHandle = request.getfixturevalue(request.param)
    c = RawClient("127.0.0.1", h.port)
    c.call("CLIENT", "UNPAUSE")
    c.call("FLUSHALL")
    c.close()
    yield h
    c = RawClient("127.0.0.1", h.port)
    c.call("CLIENT", "UNPAUSE")
    c.call("FLUSHALL")
    c.close()


def test_argument_errors_match_redis(node: NodeHandle, oracle: NodeHandle) -> None:
    def run(port: int) -> list:
        c = RawClient("127.0.0.1", port)
        try:
            return [c.call(*cmd) for cmd in ERRORS]
        finally:
            c.close()

    assert run(node.port) == run(oracle.port)


def _blocked(r: redis.Redis) -> int:
    """This test's clients that wait (flag `b`), by name: INFO's blocked_clients would also
    count clients that other tests left blocked on the shared oracle."""
    return sum(1 for c in r.client_list()
               if c["name"].startswith(_WAITER) and "b" in c["flags"])


_WAITER = "pause-test-"


def _client(server: NodeHandle, i: int) -> redis.Redis:
    r = server.client()
    r.client_setname(f"{_WAITER}{i}")
    return r


def _in_thread(fn, *args) -> tuple[threading.Thread, list]:  # noqa: ANN001
    out: list = []

    def run() -> None:
        try:
            out.append(fn(*args))
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_write_pause_holds_writes_not_reads_until_unpause(server: NodeHandle) -> None:
    admin = server.client()
    admin.xadd("s", {"f": "0"}, id="1-0")
    admin.execute_command("CLIENT", "PAUSE", 100000, "WRITE")
    writers = [_client(server, i) for i in range(3)]
    started = [_in_thread(w.xadd, "s", {"f": str(i)}) for i, w in enumerate(writers)]
    wait_until(lambda: _blocked(admin) == 3, 10, what="three writers waiting")
    # CLIENT LIST names the command a paused client waits to run (Redis sets it before the
    # pause check), not the one it ran before (CLIENT SETNAME)
    assert {c["cmd"] for c in admin.client_list() if c["name"].startswith(_WAITER)} == {"xadd"}
    assert admin.xlen("s") == 1  # reads are served, the writes did not run
    assert admin.xrange("s") == [(b"1-0", {b"f": b"0"})]
    admin.execute_command("CLIENT", "UNPAUSE")
    for t, out in started:
        t.join(10)
        assert out and not isinstance(out[0], Exception), out
    assert admin.xlen("s") == 4
    assert _blocked(admin) == 0


def test_all_pause_holds_reads_too(server: NodeHandle) -> None:
    # Under ALL even UNPAUSE waits (Redis too), so this pause ends by its timeout.
    admin = server.client()
    admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
    t, out = _in_thread(server.client().xlen, "s")
    t.join(0.5)
    assert not out, out  # still waiting
    t.join(20)
    assert out == [0]


def test_a_shorter_pause_does_not_shorten_a_running_one(server: NodeHandle) -> None:
    admin = server.client()
    admin.execute_command("CLIENT", "PAUSE", 100000, "WRITE")
    admin.execute_command("CLIENT", "PAUSE", 1, "WRITE")
    w = _client(server, 0)
    t, out = _in_thread(w.set, "k", "v")
    wait_until(lambda: _blocked(admin) == 1, 10, what="the writer waiting")
    admin.execute_command("CLIENT", "UNPAUSE")
    t.join(10)
    assert out == [True]


def test_the_pause_ends_by_itself(server: NodeHandle) -> None:
    admin = server.client()
    admin.execute_command("CLIENT", "PAUSE", 200, "WRITE")
    assert server.client().xadd("s", {"f": "v"}, id="5-0") == b"5-0"  # waits, then runs


def test_no_expiry_during_a_write_pause(server: NodeHandle) -> None:
    admin = server.client()
    admin.xadd("e", {"f": "v"})
    admin.pexpire("e", 50)
    admin.execute_command("CLIENT", "PAUSE", 100000, "WRITE")
    wait_until(lambda: not admin.exists("e"), 10, what="the key to read as expired")
    assert admin.dbsize() == 1  # still there: expiring it would be a write
    admin.execute_command("CLIENT", "UNPAUSE")
    wait_until(lambda: admin.dbsize() == 0, 10, what="the key to be expired after the pause")
