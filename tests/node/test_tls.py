"""TLS on the node: tls-port beside port (or alone), tls-auth-clients, start-up errors as
redis-server's, and a replica over TLS (tls-replication) that follows a switch of primaries.

Clients are real: redis-py with ssl=True and redis-cli --tls. Certificates come from
tests/support/tls.py (made once per session with `cryptography`).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from control.ports import free_port
from tests.conftest import REDIS_SERVER, REPO, _node_env
from tests.support.procs import ServerProcess, wait_until
from tests.support.tls import Certs, tls_certs, tls_ping

__all__ = ["tls_certs"]

REDIS_CLI = shutil.which("redis-cli")


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory, tls_certs: Certs):  # noqa: ANN201
    """One node with a plain port and a TLS port (tls-auth-clients yes), for the module."""
    from tests.conftest import spawn_node

    tport = free_port()
    h = spawn_node(tmp_path_factory.mktemp("tls-node"), "--tls-port", str(tport),
                   *tls_certs.server_args("yes"), name="tls node")
    h.tls_port = tport  # type: ignore[attr-defined]
    yield h
    h.close()


def test_tls_clients_with_a_certificate_use_the_node(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001
    c = tls_certs.client(tls_node.tls_port)
    eid = c.xadd("tls:s", {"f": "v"})
    assert c.xrange("tls:s") == [(eid, {b"f": b"v"})]
    # The plain port serves the same data.
    assert tls_node.client().xlen("tls:s") == 1
    cfg = c.config_get("tls-*")
    assert cfg["tls-port"] == str(tls_node.tls_port)
    assert cfg["tls-auth-clients"] == "yes" and cfg["tls-replication"] == "no"
    assert cfg["tls-cert-file"] == str(tls_certs.good.server_cert)
    assert c.info("server")["tcp_port"] == tls_node.port  # the plain port comes first
    with pytest.raises(redis.ResponseError, match="immutable"):
        c.config_set("tls-port", "0")
    c.close()


def test_config_get_lists_the_tls_settings_redis_has(tls_node, oracle) -> None:  # noqa: ANN001
    ours = set(tls_node.client().config_get("tls-*"))
    theirs = set(oracle.client().config_get("tls-*"))
    if not theirs:
        pytest.skip("the oracle is built without TLS")
    assert ours == theirs
    assert tls_node.client().config_get("tls-session-cache-size") == \
        oracle.client().config_get("tls-session-cache-size")


def test_tls_auth_clients_yes_refuses_a_client_without_a_certificate(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001,E501
    c = tls_certs.client(tls_node.tls_port, cert=False)
    with pytest.raises(redis.ConnectionError):
        c.ping()
    # A certificate from a CA the node does not trust is refused too.
    c = tls_certs.client(tls_node.tls_port, client_tls=tls_certs.other)
    with pytest.raises(redis.ConnectionError):
        c.ping()
    assert tls_node.client().ping()


def test_a_client_that_does_not_trust_the_node_ca_fails_clearly(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001,E501
    c = tls_certs.client(tls_node.tls_port, ca=tls_certs.other.ca)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        c.ping()


def test_plain_tcp_on_the_tls_port_is_closed_and_nothing_breaks(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001,E501
    with socket.create_connection(("127.0.0.1", tls_node.tls_port), timeout=10) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
    assert b"PONG" not in data
    # Garbage that is not even a ClientHello, then a half-open socket: still fine.
    with socket.create_connection(("127.0.0.1", tls_node.tls_port), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\xff\xff" + b"x" * 100)
    assert tls_certs.client(tls_node.tls_port).ping()
    assert tls_node.alive


def _tls_socket(certs: Certs, port: int) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(certs.good.ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(certs.good.client_cert), str(certs.good.client_key))
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))


def _recv_until(s: ssl.SSLSocket, end: bytes) -> bytes:
    data = b""
    while not data.endswith(end):
        chunk = s.recv(65536)
        assert chunk, data[-200:]
        data += chunk
    return data


def test_requests_split_across_records_and_a_reply_past_the_write_buffer(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001,E501
    """The node decrypts on its own buffers (node/tlstransport.py): a request cut in two
    records gets no reply until its rest arrives; a pipeline of many requests in one write,
    and a reply bigger than the socket's write buffer (reading pauses and resumes), come back
    whole and in order."""
    with _tls_socket(tls_certs, tls_node.tls_port) as s:
        req = b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"
        s.sendall(req[:9])  # one TLS record: half a request
        s.settimeout(0.2)
        with pytest.raises(TimeoutError):
            s.recv(64)
        s.settimeout(10)
        s.sendall(req[9:])
        assert _recv_until(s, b"\r\n") == b"$5\r\nhello\r\n"
        n, value = 3000, b"v" * 200
        one = b"*5\r\n$4\r\nXADD\r\n$9\r\ntls:split\r\n$1\r\n*\r\n$1\r\nf\r\n$200\r\n%s\r\n" % value
        s.sendall(one * n)
        replies = b""
        while replies.count(b"\r\n") < 2 * n:
            replies += s.recv(65536)
        assert replies.count(b"$") == n and b"-ERR" not in replies
        s.sendall(b"*4\r\n$6\r\nXRANGE\r\n$9\r\ntls:split\r\n$1\r\n-\r\n$1\r\n+\r\n")
        reply = _recv_until(s, value + b"\r\n")
        while reply.count(value) < n:
            reply += _recv_until(s, value + b"\r\n")
        assert reply.startswith(b"*%d\r\n" % n) and reply.count(value) == n
    assert tls_node.client().xlen("tls:split") == n


def test_a_tls_close_notify_closes_the_connection(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001
    admin = tls_node.client()
    before = len(admin.client_list())
    s = _tls_socket(tls_certs, tls_node.tls_port)
    s.sendall(b"*1\r\n$4\r\nPING\r\n")
    assert _recv_until(s, b"\r\n") == b"+PONG\r\n"
    assert len(admin.client_list()) == before + 1
    raw = s.unwrap()  # close_notify; the node answers with its own and closes
    wait_until(lambda: len(admin.client_list()) == before, 10, what="the TLS client is gone")
    raw.close()


@pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed")
def test_redis_cli_over_tls(tls_node, tls_certs: Certs) -> None:  # noqa: ANN001
    def cli(*args: str, cert: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([REDIS_CLI, "-p", str(tls_node.tls_port),
                               *tls_certs.redis_cli_args(cert), *args],
                              capture_output=True, text=True, timeout=30)

    r = cli("XADD", "tls:cli", "1-1", "k", "v")
    assert r.stdout.strip() == "1-1", r.stderr
    assert cli("XLEN", "tls:cli").stdout.strip() == "1"
    r = cli("PING", cert=False)  # no client certificate: the handshake is refused
    assert "PONG" not in r.stdout


@pytest.mark.parametrize("mode", ["optional", "no"])
def test_tls_auth_clients_optional_and_no(xnode, tls_certs: Certs, mode: str) -> None:  # noqa: ANN001
    tport = free_port()
    xnode("--tls-port", str(tport), *tls_certs.server_args(mode))
    assert tls_certs.client(tport, cert=False).ping()
    if mode == "optional":  # a certificate, when sent, must still be good
        assert tls_certs.client(tport).ping()
        with pytest.raises(redis.ConnectionError):
            tls_certs.client(tport, client_tls=tls_certs.other).ping()


def test_config_set_reloads_certificates_for_new_handshakes(xnode, tls_certs: Certs) -> None:  # noqa: ANN001,E501
    """Certificate rotation without a restart, as CONFIG SET tls-cert-file does in Redis; a
    bad file is refused with Redis's reply and changes nothing."""
    tport = free_port()
    xnode("--tls-port", str(tport), *tls_certs.server_args("yes"))
    c = tls_certs.client(tport)
    other = tls_certs.other
    assert c.config_set("tls-cert-file", str(other.server_cert),
                        "tls-key-file", str(other.server_key))
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        tls_certs.client(tport).ping()  # trusts only the first CA
    assert tls_certs.client(tport, ca=other.ca).ping()
    assert c.ping()  # connections made before keep going
    with pytest.raises(redis.ResponseError) as e:
        c.config_set("tls-cert-file", "/nonexistent/cert.pem")
    assert str(e.value) == ("CONFIG SET failed (possibly related to argument 'tls-cert-file') "
                            "- Unable to update TLS configuration. Check server logs.")
    assert c.config_get("tls-cert-file")["tls-cert-file"] == str(other.server_cert)
    assert tls_certs.client(tport, ca=other.ca).ping()
    # tls-auth-clients too: optional lets a client without a certificate in.
    assert c.config_set("tls-auth-clients", "optional")
    assert tls_certs.client(tport, ca=other.ca, cert=False).ping()


def test_port_0_with_a_tls_port_serves_tls_only(tmp_path: Path, tls_certs: Certs) -> None:
    plain = free_port()
    proc = ServerProcess(
        "tls-only node",
        lambda p: [sys.executable, "-m", "control.cli", "node", "--port", "0", "--tls-port",
                   str(p), "--dir", str(tmp_path), *tls_certs.server_args()],
        tmp_path / "node.log", cwd=REPO, env=_node_env(),
        probe=lambda _h, p: tls_ping(tls_certs, p))
    proc.start()
    try:
        c = tls_certs.client(proc.port)
        assert c.info("server")["tcp_port"] == proc.port
        assert c.config_get("port")["port"] == "0"
        with socket.socket() as s:  # no plain listener took a random port: only one socket
            s.settimeout(1)
            assert s.connect_ex(("127.0.0.1", plain)) != 0
        assert "ready to accept connections tcp" not in proc.log_text()
        assert "ready to accept connections tls" in proc.log_text()
        c.close()
    finally:
        proc.stop()


# Start-up errors: the same lines redis-server logs, and the process exits.
_BAD = [
    (("--tls-port", "{port}"), "No tls-cert-file configured!"),
    (("--tls-port", "{port}", "--tls-cert-file", "{cert}"), "No tls-key-file configured!"),
    (("--tls-port", "{port}", "--tls-cert-file", "{cert}", "--tls-key-file", "{key}"),
     "Either tls-ca-cert-file or tls-ca-cert-dir must be specified"),
    (("--tls-port", "{port}", "--tls-cert-file", "{cert}", "--tls-key-file", "{key}",
      "--tls-auth-clients", "no", "--tls-replication", "yes"),
     "Either tls-ca-cert-file or tls-ca-cert-dir must be specified"),
]


@pytest.mark.parametrize(("args", "line"), _BAD, ids=["no-cert", "no-key", "no-ca", "repl-no-ca"])
def test_bad_tls_settings_stop_the_start_as_in_redis(tmp_path: Path, tls_certs: Certs,
                                                     args: tuple[str, ...], line: str) -> None:
    vals = {"port": str(free_port()), "cert": str(tls_certs.good.server_cert),
            "key": str(tls_certs.good.server_key)}
    argv = [a.format(**vals) for a in args]
    ours = subprocess.run([sys.executable, "-m", "control.cli", "node", "--port", "0",
                           "--dir", str(tmp_path), *argv], capture_output=True, text=True,
                          cwd=REPO, env=_node_env(), timeout=60)
    assert ours.returncode == 1
    assert line in ours.stderr and "Failed to configure TLS" in ours.stderr, ours.stderr
    if REDIS_SERVER is not None:  # the oracle says the same
        theirs = subprocess.run([REDIS_SERVER, "--port", "0", "--save", "", "--dir",
                                 str(tmp_path), *argv], capture_output=True, text=True,
                                timeout=60)
        assert theirs.returncode == 1 and line in theirs.stdout, theirs.stdout


def test_a_bad_certificate_file_is_named(tmp_path: Path, tls_certs: Certs) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    r = subprocess.run([sys.executable, "-m", "control.cli", "node", "--port", "0",
                        "--dir", str(tmp_path), "--tls-port", str(free_port()),
                        "--tls-cert-file", str(bad), "--tls-key-file",
                        str(tls_certs.good.server_key), "--tls-ca-cert-file",
                        str(tls_certs.good.ca)], capture_output=True, text=True, cwd=REPO,
                       env=_node_env(), timeout=60)
    assert r.returncode == 1 and f"Failed to load certificate: {bad}" in r.stderr, r.stderr


def test_a_replica_over_tls_follows_a_switch_of_primaries(xnode, tls_certs: Certs) -> None:  # noqa: ANN001
    """tls-replication: both links are TLS (each node presents its certificate to the other,
    tls-auth-clients yes), and after REPLICAOF NO ONE the old primary follows the new one."""
    pt, rt = free_port(), free_port()
    tls = (*tls_certs.server_args("yes"), "--tls-replication", "yes")
    p = xnode("--tls-port", str(pt), *tls)
    r = xnode("--tls-port", str(rt), *tls, "--replicaof", "127.0.0.1", str(pt))
    pc, rc = tls_certs.client(pt), tls_certs.client(rt)
    ids = [pc.xadd("tls:r", {"i": i}) for i in range(100)]
    assert pc.wait(1, 10000) == 1
    assert rc.xrange("tls:r") == pc.xrange("tls:r")
    assert rc.info("replication")["master_link_status"] == "up"
    # The primary sees the replica at its TLS port (REPLCONF listening-port).
    assert pc.info("replication")["slave0"]["port"] == rt
    # Switch: the replica becomes primary, the old primary follows it over TLS.
    rc.replicaof("NO", "ONE")
    pc.replicaof("127.0.0.1", rt)
    ids.append(rc.xadd("tls:r", {"i": "after"}))
    assert rc.wait(1, 10000) == 1
    wait_until(lambda: pc.xlen("tls:r") == len(ids), 20, what="the old primary caught up")
    assert [e[0] for e in pc.xrange("tls:r")] == ids
    assert p.alive and r.alive


def test_migrate_goes_over_tls_with_tls_cluster(xnode, tls_certs: Certs) -> None:  # noqa: ANN001
    at, bt = free_port(), free_port()
    tls = (*tls_certs.server_args("yes"), "--tls-cluster", "yes")
    xnode("--tls-port", str(at), *tls)
    xnode("--tls-port", str(bt), *tls)
    a, b = tls_certs.client(at), tls_certs.client(bt)
    a.xadd("tls:m", {"k": "v"}, id="1-1")
    assert a.migrate("127.0.0.1", bt, "tls:m", 0, 5000) == b"OK"
    assert b.xrange("tls:m") == [(b"1-1", {b"k": b"v"})] and not a.exists("tls:m")
