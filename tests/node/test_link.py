"""node/link.py, the one client for node-to-node links, against real servers: xshard nodes and
redis-server. Each error reply comes back as the class node/errors.py's table gives its code
(the reply is the server's own, never a made-up one); TLS, AUTH as an ACL user, timeouts and
a link the server closes are checked the same way."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from collections.abc import Iterator

import pytest

from base.records import owners
from node import errors
from node.link import Link, call, call_all
from node.slots import key_slot, keys_in_slots
from tests.conftest import NodeHandle, spawn_node
from tests.support.procs import free_port, wait_until
from tests.support.tls import Certs, tls_certs

__all__ = ["tls_certs"]


def run(coro):  # noqa: ANN001, ANN201 - a coroutine, its result
    return asyncio.run(coro)


def raised(host: str, port: int, *commands: list, **kw) -> errors.ResponseError:  # noqa: ANN003
    """The error reply the last of `commands` got (the ones before it answer anything)."""
    async def go() -> errors.ResponseError:
        link = await Link.open(host, port, **kw)
        try:
            ns = [link.send([str(a).encode() if not isinstance(a, bytes) else a for a in c],
                            want=True) for c in commands]
            await link.drain(5, errors=False)
            r = link.reply(ns[-1])
            assert isinstance(r, errors.ResponseError), r
            return r
        finally:
            await link.aclose()
    return run(go())


@pytest.fixture(params=["xshard", "redis"])
def server(request: pytest.FixtureRequest) -> NodeHandle:
    """The session's xshard node, and the session's redis-server."""
    return request.getfixturevalue("node" if request.param == "xshard" else "oracle")


@pytest.fixture
def fresh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          xnode) -> Iterator:  # noqa: ANN001
    """Factory: `fresh(kind, *args)` starts a server of its own (kind "xshard" or "redis")
    that a test may reconfigure; all are stopped at teardown."""
    made: list[NodeHandle] = []

    def start(kind: str, *args: str) -> NodeHandle:
        if kind == "xshard":
            return xnode(*args)
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server not on PATH")
        h = spawn_node(tmp_path_factory.mktemp("link-redis"), *args, name="redis-server",
                       impl="redis", binary=binary)
        made.append(h)
        return h

    yield start
    for h in made:
        h.close()


# --- pipelining ----------------------------------------------------------------------------------

def test_pipelined_commands_come_back_in_order(server: NodeHandle) -> None:
    assert run(call(*server.addr, "PING")) == b"PONG"
    assert run(call_all(*server.addr, [["ECHO", "a"], ["ECHO", b"b"], ["ECHO", 3]])) == \
        [b"a", b"b", b"3"]

    async def go() -> None:
        link = await Link.open(*server.addr)
        try:
            first = link.send([b"ECHO", b"x" * 100_000], want=True)
            link.send([b"PING"])  # answered, counted, not kept
            last = link.send([b"ECHO", b"y"], want=True)
            assert link.sent == 3 and link.in_flight == link.bytes
            await link.drain(5)
            assert link.acked == 3 and link.in_flight == 0
            assert link.reply(first) == b"x" * 100_000 and link.reply(last) == b"y"
            assert link.reply(2) is None
            assert await link.call("ECHO", "z", timeout=5) == b"z"
        finally:
            await link.aclose()

    run(go())


# --- error replies -------------------------------------------------------------------------------

def test_error_replies_of_both_servers_map_to_their_classes(server: NodeHandle) -> None:
    """Codes that the shared xshard node and redis-server both answer."""
    addr = server.addr
    c = server.client()
    c.delete("link:s")
    try:
        c.xadd("link:s", {"f": "v"}, id="1-1")
        payload = c.dump("link:s")
        e = raised(*addr, ["NO-SUCH-COMMAND"])
        assert type(e) is errors.ResponseError and e.code == b"ERR"
        assert str(e).startswith("ERR unknown command")
        e = raised(*addr, ["XGROUP", "CREATE", "link:s", "g", "0"],
                   ["XGROUP", "CREATE", "link:s", "g", "0"])
        assert type(e) is errors.BusyGroupError and e.code == b"BUSYGROUP"
        e = raised(*addr, ["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "link:s", ">"])
        assert type(e) is errors.NoGroupError
        e = raised(*addr, ["RESTORE", "link:s", "0", payload])
        assert type(e) is errors.BusyKeyError and e.message == errors.BUSYKEY
        e = raised(*addr, ["MULTI"], ["XADD", "link:s"], ["EXEC"])
        assert type(e) is errors.ExecAbortError
        e = raised(*addr, ["AUTH", "link-nobody", "pw"])
        assert type(e) is errors.WrongPassError and isinstance(e, errors.AuthError)
        c.execute_command("ACL", "SETUSER", "link-ping", "on", ">pw", "~*", "+ping", "+auth")
        e = raised(*addr, ["XLEN", "link:s"], user="link-ping", password="pw")
        assert type(e) is errors.NoPermError
        e = raised(*addr, ["CLIENT", "PAUSE", "100", "NOPE"])
        assert type(e) is errors.ResponseError
    finally:
        c.execute_command("ACL", "DELUSER", "link-ping")
        c.delete("link:s")
        c.close()


def test_wrongtype_from_redis_server(oracle) -> None:  # noqa: ANN001
    c = oracle.client()
    try:
        c.set("link:str", "v")
        e = raised(*oracle.addr, ["XLEN", "link:str"])
        assert type(e) is errors.WrongTypeError and e.message == errors.WRONGTYPE
    finally:
        c.delete("link:str")
        c.close()


@pytest.mark.parametrize("kind", ["xshard", "redis"])
def test_noauth_readonly_oom_and_unblocked(fresh, kind: str) -> None:  # noqa: ANN001
    """Servers of the test's own: one with requirepass, a replica of a primary that is not
    there, one over maxmemory."""
    h = fresh(kind, "--requirepass", "pw")
    e = raised(*h.addr, ["PING"])
    assert type(e) is errors.NoAuthError and isinstance(e, errors.AuthError)
    assert run(call(*h.addr, "PING", password="pw")) == b"PONG"
    with pytest.raises(errors.WrongPassError):
        run(call(*h.addr, "PING", password="bad"))

    rep = fresh(kind)
    rep.client().execute_command("REPLICAOF", "127.0.0.1", str(free_port()))
    e = raised(*rep.addr, ["XADD", "link:s", "*", "f", "v"])
    assert type(e) is errors.ReadOnlyError and e.message == errors.READONLY

    full = fresh(kind)
    full.client().config_set("maxmemory", "1")
    e = raised(*full.addr, ["XADD", "link:s", "*", "f", "v"])
    assert type(e) is errors.OutOfMemoryError

    async def unblocked() -> errors.ResponseError:
        link = await Link.open(*full.addr)
        try:
            cid = await link.call("CLIENT", "ID", timeout=5)
            n = link.send([b"XREAD", b"BLOCK", b"0", b"STREAMS", b"link:none", b"$"], want=True)
            other = full.client()
            wait_until(lambda: other.execute_command("CLIENT", "UNBLOCK", cid, "ERROR") == 1, 5,
                       what="the XREAD blocked")
            other.close()
            await link.drain(5, errors=False)
            return link.reply(n)  # type: ignore[return-value]
        finally:
            await link.aclose()

    e = run(unblocked())
    assert type(e) is errors.UnblockedError


def test_cluster_errors_from_redis_server(fresh) -> None:  # noqa: ANN001
    """MOVED, ASK, CLUSTERDOWN and CROSSSLOT from two redis-server nodes in cluster mode."""
    a = fresh("redis", "--cluster-enabled", "yes")
    b = fresh("redis", "--cluster-enabled", "yes")
    ca, cb = a.client(), b.client()
    key = "link:k"
    slot = key_slot(key.encode())
    e = raised(*a.addr, ["XLEN", key])
    assert type(e) is errors.ClusterDownError
    ca.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, slot)
    cb.execute_command("CLUSTER", "ADDSLOTSRANGE", slot + 1, 16383)
    ca.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port)
    wait_until(lambda: ca.execute_command("CLUSTER", "INFO").decode().count(
        "cluster_state:ok") and cb.execute_command("CLUSTER", "INFO").decode().count(
        "cluster_state:ok"), 20, what="the two nodes' cluster ok")
    e = raised(*b.addr, ["XLEN", key])
    assert type(e) is errors.MovedError and (e.slot, e.port) == (slot, a.port)
    bid = cb.execute_command("CLUSTER", "MYID").decode()
    ca.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", bid)
    e = raised(*a.addr, ["XLEN", key])  # the key is not there: ask the importing node
    assert type(e) is errors.AskError and (e.slot, e.port) == (slot, b.port)
    other = next(k for k in keys_in_slots([slot + 1], per_slot=1))
    e = raised(*a.addr, ["DEL", key, other])
    assert type(e) is errors.CrossSlotError


@pytest.mark.etcd
def test_moved_from_an_xshard_node(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=0, controller=False)
    owner = owners(c.view().slots.value)
    slot = next(s for s in range(16384) if owner[s] == "1")
    key = keys_in_slots([slot], per_slot=1)[0]
    target = c.nodes[c.primary_id("1")]
    e = raised(*c.nodes[c.primary_id("0")].addr, ["XLEN", key])
    assert type(e) is errors.MovedError
    assert (e.slot, e.host, e.port) == (slot, target.host, target.port)


# --- logging in ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["xshard", "redis"])
def test_login_as_an_acl_user(fresh, tmp_path, kind: str) -> None:  # noqa: ANN001
    """AUTH user password on open (what a slot move's link did not send before); without the
    user, the same password is the default user's and is refused."""
    acl = tmp_path / "users.acl"
    acl.write_text("user default off\nuser ctl on >cpw ~* &* +@all\n")
    h = fresh(kind, "--aclfile", str(acl))
    assert run(call(*h.addr, "ACL", "WHOAMI", user="ctl", password="cpw")) == b"ctl"
    with pytest.raises(errors.WrongPassError):
        run(call(*h.addr, "PING", password="cpw"))
    with pytest.raises(errors.NoAuthError):
        run(call(*h.addr, "PING"))


# --- TLS -----------------------------------------------------------------------------------------

def _context(certs: Certs, cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.good.ca))
    if cert:
        ctx.load_cert_chain(str(certs.good.client_cert), str(certs.good.client_key))
    return ctx


@pytest.mark.parametrize("kind", ["xshard", "redis"])
def test_tls(fresh, tls_certs: Certs, kind: str) -> None:  # noqa: ANN001
    """To the tls-port with the client certificate (tls-auth-clients yes), as user and
    password; without the certificate the server refuses the link."""
    tport = free_port()
    fresh(kind, "--tls-port", str(tport), *tls_certs.server_args("yes"),
              "--requirepass", "pw")
    assert run(call("127.0.0.1", tport, "ACL", "WHOAMI", password="pw", user="default",
                    ssl=_context(tls_certs), timeout=5)) == b"default"
    with pytest.raises((OSError, TimeoutError)):  # refused in the handshake, or at the read
        run(call("127.0.0.1", tport, "PING", password="pw", ssl=_context(tls_certs, False),
                 timeout=5))


# --- timeouts and lost links ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["xshard", "redis"])
def test_no_answer_in_time_is_a_timeout_and_a_closed_link_a_connection_error(
        fresh, kind: str) -> None:  # noqa: ANN001
    h = fresh(kind)
    admin = h.client()
    admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")  # ends by itself (UNPAUSE waits too)
    with pytest.raises(TimeoutError):
        run(call(*h.addr, "PING", timeout=0.3))

    async def held() -> None:
        link = await Link.open(*h.addr)
        try:
            n = link.send([b"PING"], want=True)
            with pytest.raises(TimeoutError):
                await link.drain(0.3)
            await link.drain(5)  # the same link goes on once the server answers
            assert link.reply(n) == b"PONG"
        finally:
            await link.aclose()

    run(held())
    with pytest.raises(ConnectionError):
        run(call_all(*h.addr, [["QUIT"], ["PING"]], timeout=5))
    with pytest.raises(OSError):  # nothing listens there
        run(call("127.0.0.1", free_port(), "PING"))
