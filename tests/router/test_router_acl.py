"""ACL users through routers: enforced by the router itself, shared through etcd, and the
router's own user on the nodes."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

import pytest
import redis

from tests.router.conftest import ROUTER_ARGS
from tests.support.cluster import Cluster


def _wait(pred: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _users(r: redis.Redis) -> set[bytes]:
    return set(r.execute_command("ACL", "USERS"))


@pytest.fixture
def acl_cluster(xcluster: Callable[..., Cluster], tmp_path) -> Cluster:
    """Two shards and two routers on etcd; the nodes know a user `xrouter` that the routers
    log in as, and their default user needs a password the routers do not have."""
    h = hashlib.sha256(b"rpw").hexdigest()
    aclfile = tmp_path / "nodes.acl"
    aclfile.write_text(f"user xrouter on #{h} ~* &* +@all\nuser default on nopass ~* &* +@all\n")
    return xcluster(shards=2, replicas=0, routers=2,
                    node_args=("--aclfile", str(aclfile)),
                    router_args=(*ROUTER_ARGS, "--node-user", "xrouter", "--node-password", "rpw"))


@pytest.mark.slow
def test_users_are_shared_by_the_routers_and_enforced_by_them(acl_cluster: Cluster) -> None:
    c = acl_cluster
    r0, r1 = c.client(0), c.client(1)
    assert r0.execute_command("ACL", "SETUSER", "app", "on", ">apw", "~app:*", "+@stream",
                              "-xdel", "+ping", "+acl|whoami") == b"OK"
    # SETUSER answered once etcd had it; the other router applies it from its watch.
    _wait(lambda: b"app" in _users(r1), "the user on router 1")
    assert r1.execute_command("ACL", "GETUSER", "app") == r0.execute_command(
        "ACL", "GETUSER", "app")
    app = c.client(1, username="app", password="apw")
    assert app.execute_command("ACL", "WHOAMI") == b"app"
    keys = c.keys_on_each_shard("app:")
    for k in keys:
        assert app.xadd(k, {"f": "v"})
    with pytest.raises(redis.exceptions.NoPermissionError, match="No permissions to access a key"):
        app.xadd("other", {"f": "v"})
    with pytest.raises(redis.exceptions.NoPermissionError, match="'xdel' command"):
        app.xdel(keys[0], "0-1")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'set' command"):
        app.set("app:x", "1")
    # Nothing denied reached a node: the key does not exist, and the nodes logged no denial
    # (the router's user may do anything there).
    assert r0.exists("other", "app:x") == 0
    for n in c.primaries():
        assert n.client().execute_command("ACL", "LOG") == []
    log = [dict(zip(e[::2], e[1::2], strict=True)) for e in r1.execute_command("ACL", "LOG")]
    # (redis-py's CLIENT SETINFO on connecting is denied too: +@stream does not cover it)
    assert {(e[b"reason"], e[b"object"]) for e in log} >= {
        (b"key", b"other"), (b"command", b"xdel"), (b"command", b"set")}
    assert all(b"user=app" in e[b"client-info"] for e in log)
    # The router logs in to the nodes as its own user.
    for n in c.primaries():
        assert b"user=xrouter" in n.client().execute_command("CLIENT", "LIST")
    # A rule change through router 1 reaches the clients of router 0 at once.
    app0 = c.client(0, username="app", password="apw")
    assert app0.xlen(keys[0]) == 1
    r1.execute_command("ACL", "SETUSER", "app", "-xlen")
    _wait(lambda: b"-xlen" in r0.execute_command("ACL", "GETUSER", "app")[5],
          "the rule on router 0")
    with pytest.raises(redis.exceptions.NoPermissionError):
        app0.xlen(keys[0])
    # DELUSER through router 0 removes it from both and disconnects its clients.
    assert r0.execute_command("ACL", "DELUSER", "app") == 1
    _wait(lambda: b"app" not in _users(r1), "the deletion on router 1")
    with pytest.raises(redis.ConnectionError):
        app.ping()
    with pytest.raises(redis.AuthenticationError):
        c.client(1, username="app", password="apw").ping()


@pytest.mark.slow
def test_concurrent_setuser_on_two_routers_keeps_both(acl_cluster: Cluster) -> None:
    c = acl_cluster
    errors: list[BaseException] = []

    def add(router: int, prefix: str) -> None:
        r = c.client(router)
        try:
            for i in range(10):
                r.execute_command("ACL", "SETUSER", f"{prefix}{i}", "on", ">p", "~*", "+@read")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(i, f"u{i}_")) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    want = {f"u{i}_{j}".encode() for i in (0, 1) for j in range(10)}
    for i in (0, 1):
        _wait(lambda i=i: want <= _users(c.client(i)), f"every user on router {i}")
    # A bad rule is refused by the router that got it and never reaches etcd.
    with pytest.raises(redis.ResponseError, match="Unknown command or category"):
        c.client(0).execute_command("ACL", "SETUSER", "bad", "+@nope")
    assert b"bad" not in _users(c.client(1))


@pytest.mark.slow
def test_redis_cluster_client_with_a_user(acl_cluster: Cluster) -> None:
    c = acl_cluster
    c.client(0).execute_command("ACL", "SETUSER", "rc", "on", ">rcpw", "~rc:*", "+@all",
                                "-@dangerous")
    _wait(lambda: b"rc" in _users(c.client(1)), "the user on router 1")
    rc = redis.RedisCluster(host="127.0.0.1", port=c.router.port, username="rc",
                            password="rcpw")
    try:
        for k in c.keys_on_each_shard("rc:"):
            assert rc.xadd(k, {"f": "v"})
            assert rc.xlen(k) == 1
        with pytest.raises(redis.exceptions.NoPermissionError):
            rc.xadd("elsewhere", {"f": "v"})
    finally:
        rc.close()


def test_static_router_keeps_its_own_users(xcluster: Callable[..., Cluster]) -> None:
    c = xcluster(shards=1, replicas=0, etcd=False, routers=1, router_args=ROUTER_ARGS)
    r = c.client()
    assert r.execute_command("ACL", "SETUSER", "ro", "on", ">p", "%R~*", "+@read") == b"OK"
    ro = c.client(username="ro", password="p")
    assert ro.xlen("k") == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        ro.xadd("k", {"f": "v"})
    # ACL DRYRUN asks the router's users (tests/node/test_acl.py compares it with valkey).
    assert r.execute_command("ACL", "DRYRUN", "ro", "xlen", "k") == b"OK"
    assert r.execute_command("ACL", "DRYRUN", "ro", "xadd", "k", "*", "f", "v") == \
        b"User ro has no permissions to run the 'xadd' command"
    assert r.execute_command("ACL", "DELUSER", "ro") == 1
    assert _users(r) == {b"default"}
