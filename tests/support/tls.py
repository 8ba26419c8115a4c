"""TLS for the tests of nodes, routers and the controller: certificates made once per session
(a CA, a server certificate for 127.0.0.1/localhost, a client certificate, and a second CA
that signed nothing the servers trust), the tls-* options that use them, and clients.

Test modules import the `tls_certs` fixture from here.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from control.certs import Tls, make_tls


@dataclass
class Certs:
    good: Tls
    other: Tls  # a different CA: its certificates are strangers to `good`'s servers

    def server_args(self, auth_clients: str = "yes") -> tuple[str, ...]:
        """A node's (or router's) tls-* options with the good CA."""
        t = self.good
        return ("--tls-cert-file", str(t.server_cert), "--tls-key-file", str(t.server_key),
                "--tls-ca-cert-file", str(t.ca), "--tls-auth-clients", auth_clients)

    def client(self, port: int, *, cert: bool = True, ca: Path | None = None,
               client_tls: Tls | None = None, **kw: object) -> redis.Redis:
        """A redis-py client over TLS (ssl=True), with our client certificate unless
        `cert=False`; `ca` overrides the CA it trusts, `client_tls` whose certificate it
        presents."""
        t = client_tls or self.good
        extra: dict[str, object] = {"ssl_certfile": str(t.client_cert),
                                    "ssl_keyfile": str(t.client_key)} if cert else {}
        # No retries: a refused handshake is what several tests expect, at once.
        kw.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.Redis(host="127.0.0.1", port=port, ssl=True,
                           ssl_ca_certs=str(ca or self.good.ca), socket_timeout=10,
                           **extra, **kw)  # type: ignore[arg-type]

    def redis_cli_args(self, cert: bool = True) -> list[str]:
        t = self.good
        args = ["--tls", "--cacert", str(t.ca)]
        return args + (["--cert", str(t.client_cert), "--key", str(t.client_key)] if cert else [])


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("tls")
    return Certs(make_tls(d / "good"), make_tls(d / "other"))


def tls_ping(certs: Certs, port: int) -> bool:
    """A probe for a TLS-only server: PING over TLS with the client certificate."""
    ctx = ssl.create_default_context(cafile=str(certs.good.ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(certs.good.client_cert), str(certs.good.client_key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                ctx.wrap_socket(raw) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False
