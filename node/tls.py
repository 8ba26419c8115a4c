"""TLS contexts from Redis's tls-* settings: the listener's (tls-port) and the outgoing links'.

One place builds both, so that the node, the router and the controller read the same options
the same way. As in Redis:
- the server context presents tls-cert-file/tls-key-file and asks clients for a certificate
  according to tls-auth-clients (yes: required, optional: checked if sent, no: not asked);
- the client context (replication, router->node, controller->node links) presents
  tls-client-cert-file/tls-client-key-file, or tls-cert-file/tls-key-file when those are
  unset, and trusts tls-ca-cert-file/tls-ca-cert-dir. It checks the peer's chain but not its
  host name: nodes are reached at addresses etcd or REPLICAOF give, which certificates
  rarely list (Redis does the same).
A bad setting raises TlsError with the line Redis logs, and the process refuses to start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from node.tlstransport import TlsLayer

_VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}
_PROTOCOLS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


class TlsError(ValueError):
    """A TLS setting that cannot be used; the message names the file or option."""


@dataclass(frozen=True)
class TlsSettings:
    """The tls-* values a process uses (a node's Config, or a router's options)."""

    cert_file: str = ""
    key_file: str = ""
    key_file_pass: str = ""
    client_cert_file: str = ""
    client_key_file: str = ""
    client_key_file_pass: str = ""
    ca_cert_file: str = ""
    ca_cert_dir: str = ""
    auth_clients: str = "yes"
    protocols: str = ""
    ciphers: str = ""
    prefer_server_ciphers: bool = False
    dh_params_file: str = ""
    session_caching: bool = True

    @classmethod
    def of(cls, config: Any) -> TlsSettings:
        """From anything with the settings as attributes (node.config.Config)."""
        return cls(config.tls_cert_file, config.tls_key_file, config.tls_key_file_pass,
                   config.tls_client_cert_file, config.tls_client_key_file,
                   config.tls_client_key_file_pass, config.tls_ca_cert_file,
                   config.tls_ca_cert_dir, config.tls_auth_clients, config.tls_protocols,
                   config.tls_ciphers, config.tls_prefer_server_ciphers,
                   config.tls_dh_params_file, config.tls_session_caching)

    @property
    def has_ca(self) -> bool:
        return bool(self.ca_cert_file or self.ca_cert_dir)


def server_context(t: TlsSettings, *, needs_ca: bool = False,
                   into: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """The listener's context. `needs_ca`: something else (tls-replication) verifies peers,
    so a CA is required even when clients are not asked for certificates. `into`: load the
    settings into this (live) context instead of a new one (see reload)."""
    if not t.cert_file:
        raise TlsError("No tls-cert-file configured!")
    if not t.key_file:
        raise TlsError("No tls-key-file configured!")
    if (needs_ca or t.auth_clients != "no") and not t.has_ca:
        raise TlsError("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when "
                       "tls-cluster, tls-replication or tls-auth-clients are enabled!")
    ctx = into or ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, t)
    _load_chain(ctx, t.cert_file, t.key_file, t.key_file_pass)
    ctx.verify_mode = _VERIFY[t.auth_clients]
    for flag, on in ((ssl.OP_CIPHER_SERVER_PREFERENCE, t.prefer_server_ciphers),
                     (ssl.OP_NO_TICKET, not t.session_caching)):
        ctx.options = ctx.options | flag if on else ctx.options & ~flag
    if t.dh_params_file:
        try:
            ctx.load_dh_params(t.dh_params_file)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"Failed to load DH params file: {t.dh_params_file}: "
                           f"{_reason(e)}") from None
    return ctx


def client_context(t: TlsSettings) -> ssl.SSLContext:
    """The context of an outgoing link to a TLS port (a replica's, a router's, ...)."""
    if not t.has_ca:
        raise TlsError("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when "
                       "tls-cluster, tls-replication or tls-auth-clients are enabled!")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    _common(ctx, t)
    cert, key, pw = ((t.client_cert_file, t.client_key_file, t.client_key_file_pass)
                     if t.client_cert_file else (t.cert_file, t.key_file, t.key_file_pass))
    if cert:
        _load_chain(ctx, cert, key, pw)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def configure(server: Any) -> None:
    """A node's contexts from its settings (node.server.Server): at start, and again on
    CONFIG SET of a tls-* setting (reload). Raises TlsError."""
    cfg = server.config
    t = TlsSettings.of(cfg)
    needs_ca = cfg.tls_replication or cfg.tls_cluster
    if cfg.tls_port:
        fresh = server_context(t, needs_ca=needs_ca)  # fails before anything changed
        if server.tls_context is None:
            server.tls_context = fresh
        else:  # the listener keeps its context object: new handshakes see the new files
            server_context(t, needs_ca=needs_ca, into=server.tls_context)
    server.tls_client_context = client_context(t) if needs_ca else None


def _common(ctx: ssl.SSLContext, t: TlsSettings) -> None:
    """CA, protocol versions and ciphers: the same for both sides."""
    if t.has_ca:
        try:
            ctx.load_verify_locations(cafile=t.ca_cert_file or None, capath=t.ca_cert_dir or None)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"Failed to load CA certificate(s) file/directory: "
                           f"{t.ca_cert_file or t.ca_cert_dir}: {_reason(e)}") from None
    if t.protocols:
        versions = []
        for p in t.protocols.lower().split():
            if p not in _PROTOCOLS:
                raise TlsError(f"Invalid tls-protocols specified. Use a combination of "
                               f"'TLSv1.2' and 'TLSv1.3': '{p}'")
            versions.append(_PROTOCOLS[p])
        ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    else:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if t.ciphers:
        try:
            ctx.set_ciphers(t.ciphers)
        except ssl.SSLError as e:
            raise TlsError(f"Failed to configure ciphers: {_reason(e)}") from None


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, password: str) -> None:
    if not key:
        raise TlsError(f"No key file for certificate {cert}")
    try:
        ctx.load_cert_chain(cert, key, password or None)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(f"Failed to load certificate: {cert}: {_reason(e)}") from None


def _reason(e: Exception) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    return getattr(e, "strerror", None) or str(e)


async def listen(loop: asyncio.AbstractEventLoop, protocol: Callable[[], Any],
                 hosts: str | Sequence[str], port: int, tls_port: int,
                 ctx: ssl.SSLContext | None, backlog: int = 511
                 ) -> tuple[asyncio.AbstractServer | None, asyncio.AbstractServer | None, int]:
    """Redis's listeners, for nodes and routers alike: `port` plain and `tls_port` with TLS
    (the same protocol: after the handshake a TLS client is any client). As in Redis, `port 0`
    with a tls-port means TLS only; without one, port 0 picks a free port. Returns the plain
    and TLS servers and the plain port bound (0: none)."""
    plain = secure = None
    if port or not tls_port:
        plain = await loop.create_server(protocol, hosts, port, reuse_address=True,
                                         backlog=backlog)
        port = plain.sockets[0].getsockname()[1]
    if tls_port:
        if ctx is None:
            raise TlsError("a tls-port needs the listener's TLS context")
        sctx = ctx  # decryption on memory buffers (node/tlstransport.py), not uvloop's
        secure = await loop.create_server(lambda: TlsLayer(sctx, protocol, loop), hosts,
                                          tls_port, reuse_address=True, backlog=backlog)
    return plain, secure, port


def on_tls(c: Any) -> bool:
    """Whether a client (node.client.Client) came in over TLS: the port it is told in
    redirections and CLUSTER replies depends on it."""
    conn = c.conn
    t = conn.transport if conn is not None else None
    return t is not None and t.get_extra_info("ssl_object") is not None


# --- the router's and the controller's command line (the node's come from node/config.py) --

def add_arguments(p: argparse.ArgumentParser, *, listener: bool) -> None:
    """The tls-* options of `xshard router` (`listener`: it serves clients too) and
    `xshard controller`, with the node's names and meanings."""
    if listener:
        p.add_argument("--tls-port", metavar="PORT", type=int, default=0, help="TLS port to listen on, "
                       "besides --port (default: 0, none; with --port 0, TLS only)")
    p.add_argument("--tls-cluster", metavar="yes/no", choices=("yes", "no"), default="no", help="reach the "
                   "nodes over TLS, at their tls-port (default: no)")
    p.add_argument("--tls-cert-file", metavar="FILE", default="", help="certificate (PEM): the server one "
                   "on tls-port, and the client one towards nodes unless "
                   "--tls-client-cert-file is given")
    p.add_argument("--tls-key-file", metavar="FILE", default="", help="private key of --tls-cert-file")
    # The passphrases also come from the environment (as the node's do), to keep them off argv.
    p.add_argument("--tls-key-file-pass", metavar="PASS",
                   default=os.environ.get("XSHARD_TLS_KEY_FILE_PASS", ""),
                   help="passphrase of --tls-key-file (env XSHARD_TLS_KEY_FILE_PASS)")
    p.add_argument("--tls-client-cert-file", metavar="FILE", default="", help="client certificate towards "
                   "the nodes (default: --tls-cert-file)")
    p.add_argument("--tls-client-key-file", metavar="FILE", default="", help="private key of "
                   "--tls-client-cert-file")
    p.add_argument("--tls-client-key-file-pass", metavar="PASS",
                   default=os.environ.get("XSHARD_TLS_CLIENT_KEY_FILE_PASS", ""),
                   help="passphrase of --tls-client-key-file (env XSHARD_TLS_CLIENT_KEY_FILE_PASS)")
    p.add_argument("--tls-ca-cert-file", metavar="FILE", default="", help="CA bundle that client and node "
                   "certificates must chain to")
    p.add_argument("--tls-ca-cert-dir", metavar="DIR", default="", help="directory of CA certificates")
    if listener:
        p.add_argument("--tls-auth-clients", metavar="yes/no/optional", choices=("yes", "no", "optional"),
                       default="yes", help="TLS clients must present a certificate "
                       "(default: yes)")
    p.add_argument("--tls-protocols", metavar="LIST", default="", help='TLS versions, e.g. "TLSv1.2 '
                   'TLSv1.3" (default: both)')
    p.add_argument("--tls-ciphers", metavar="LIST", default="", help="OpenSSL cipher list for TLSv1.2")


def contexts_from_args(a: argparse.Namespace) -> tuple[ssl.SSLContext | None,
                                                        ssl.SSLContext | None]:
    """(the listener's context or None, the node links' context or None) from the options
    of add_arguments; raises TlsError."""
    t = TlsSettings(a.tls_cert_file, a.tls_key_file, a.tls_key_file_pass,
                    a.tls_client_cert_file, a.tls_client_key_file, a.tls_client_key_file_pass,
                    a.tls_ca_cert_file, a.tls_ca_cert_dir,
                    getattr(a, "tls_auth_clients", "no"), a.tls_protocols, a.tls_ciphers)
    tls_cluster = a.tls_cluster == "yes"
    server = server_context(t, needs_ca=tls_cluster) if getattr(a, "tls_port", 0) else None
    return server, client_context(t) if tls_cluster else None
