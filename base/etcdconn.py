"""How a process reaches etcd: endpoints, user/password, TLS, and where the defaults come from.

One `EtcdConfig` is built from the command line (`add_arguments` / `from_args`), from a node's
settings or from `./.xshard` (a local cluster that `xshard up` runs) and handed to the store.
The endpoint list is a comma list (`http://a:2379,http://b:2379`): the store talks to one at a
time and moves to the next when the current one stops answering (base/store.py), as etcd's
own clients do. `https://` endpoints, or a CA file, switch to TLS; a client certificate and
key give mutual TLS. User and password authenticate as etcdctl's `--user` does.

Secrets are better kept out of argv (which `ps` shows): every option also reads an
environment variable, `XSHARD_ETCD`, `XSHARD_ETCD_USER`, `XSHARD_ETCD_PASSWORD`, ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import aetcd
import grpc
from aetcd import exceptions as _exceptions
from aetcd import rpc as _rpc
from aetcd import watcher as _watcher

from base import statedir

NO_ETCD = ("no etcd given: pass --etcd URLS or set XSHARD_ETCD (e.g. http://127.0.0.1:2379), "
           "or run this in the directory of a cluster that `xshard up` runs (it leaves "
           "./.xshard/etcd.url there; none here)")

# option name -> (environment variable, help)
OPTIONS = {
    "etcd": ("XSHARD_ETCD", "etcd endpoints, a comma list of URLs; https:// uses TLS"),
    "etcd-user": ("XSHARD_ETCD_USER", "etcd user name (etcd auth enabled)"),
    "etcd-password": ("XSHARD_ETCD_PASSWORD", "password of --etcd-user"),
    "etcd-cacert": ("XSHARD_ETCD_CACERT", "CA bundle that signed etcd's server certificate "
                                          "(implies TLS)"),
    "etcd-cert": ("XSHARD_ETCD_CERT", "client certificate for etcd (mutual TLS)"),
    "etcd-key": ("XSHARD_ETCD_KEY", "private key of --etcd-cert"),
}


class ConfigError(ValueError):
    """A bad endpoint list or option combination; one line for the user."""


@dataclass(frozen=True)
class EtcdConfig:
    endpoints: tuple[tuple[str, int], ...] = (("127.0.0.1", 2379),)
    tls: bool = False
    user: str = ""
    password: str = ""
    cacert: str = ""
    cert: str = ""
    key: str = ""

    @classmethod
    def parse(cls, urls: str, user: str = "", password: str = "", cacert: str = "",
              cert: str = "", key: str = "") -> EtcdConfig:
        """Endpoints from "http://h:2379,https://h2:2379" (a bare host:port means http)."""
        eps = []
        schemes = set()
        for part in urls.split(","):
            part = part.strip()
            if not part:
                continue
            if "://" not in part:
                part = "http://" + part
            u = urlparse(part)
            if u.scheme not in ("http", "https"):
                raise ConfigError(f"etcd endpoint '{part}': the scheme must be http or https")
            try:
                port = u.port or 2379
            except ValueError:
                raise ConfigError(f"etcd endpoint '{part}': bad port") from None
            eps.append((u.hostname or "127.0.0.1", port))
            schemes.add(u.scheme)
        if not eps:
            raise ConfigError("no etcd endpoint given")
        if len(schemes) > 1:
            raise ConfigError("etcd endpoints mix http:// and https://")
        if bool(user) != bool(password):
            raise ConfigError("--etcd-user and --etcd-password go together")
        if bool(cert) != bool(key):
            raise ConfigError("--etcd-cert and --etcd-key go together")
        tls = "https" in schemes or bool(cacert or cert)
        return cls(tuple(eps), tls, user, password, cacert, cert, key)

    @property
    def url(self) -> str:
        """The endpoint list as the user wrote it (for messages and child processes)."""
        scheme = "https" if self.tls else "http"
        return ",".join(f"{scheme}://{h}:{p}" for h, p in self.endpoints)

    def client(self, index: int, timeout: float) -> aetcd.Client:
        """A client for endpoint `index` (a TLS one when configured)."""
        host, port = self.endpoints[index % len(self.endpoints)]
        kw = {"username": self.user, "password": self.password} if self.user else {}
        if not self.tls:
            return aetcd.Client(host=host, port=port, timeout=timeout, **kw)
        return _TlsClient(self._credentials(), host=host, port=port, timeout=timeout, **kw)

    def _credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as e:
                raise ConfigError(f"cannot read {path}: {e.strerror}") from None

        return grpc.ssl_channel_credentials(read(self.cacert), read(self.key), read(self.cert))

    def child_args(self) -> list[str]:
        """Command-line options that give a child process (node, router, controller) the same
        etcd; secrets are passed in the environment instead (see child_env)."""
        args = ["--etcd", self.url]
        for opt, val in (("--etcd-user", self.user), ("--etcd-cacert", self.cacert),
                         ("--etcd-cert", self.cert), ("--etcd-key", self.key)):
            if val:
                args += [opt, val]
        return args

    def child_env(self) -> dict[str, str]:
        return {"XSHARD_ETCD_PASSWORD": self.password} if self.password else {}


class _TlsClient(aetcd.Client):
    """aetcd speaks plain gRPC only; this is its connect() over a TLS channel."""

    def __init__(self, credentials: grpc.ChannelCredentials, **kw: object) -> None:
        super().__init__(**kw)
        self._credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        self._is_connecting = True
        try:
            target = f"{self._host}:{self._port}"
            self.channel = grpc.aio.secure_channel(target, self._credentials,
                                                   options=list(self._options.items()))
            rpc = _rpc
            if self._username:
                self.auth_stub = rpc.AuthStub(self.channel)
                try:
                    resp = await self.auth_stub.Authenticate(
                        rpc.AuthenticateRequest(name=self._username, password=self._password),
                        timeout=self._timeout)
                except rpc.AioRpcError as e:
                    _exceptions._handle_exception(e)
                self.metadata = (("token", resp.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = _watcher.Watcher(rpc.WatchStub(self.channel),
                                             timeout=self._timeout, metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False


# --- the command line ----------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser, *, etcd_help: str = "") -> None:
    """--etcd and the etcd auth/TLS options, each with its environment variable."""
    for name, (env, help_) in OPTIONS.items():
        if name == "etcd" and etcd_help:
            help_ = etcd_help
        p.add_argument(f"--{name}", default=None, metavar="URLS" if name == "etcd" else None,
                       help=f"{help_} (env {env})")


def from_args(a: argparse.Namespace, *, find_local: bool = True) -> EtcdConfig:
    """The etcd to use: options, else their environment variables; for the endpoints also the
    local cluster's (./.xshard). Without any of them a ConfigError says how to name one: a
    silent default port could be somebody else's etcd."""
    vals = {}
    for name, (env, _h) in OPTIONS.items():
        v = getattr(a, name.replace("-", "_"), None)
        vals[name] = v if v is not None else os.environ.get(env, "")
    urls = vals["etcd"] or (find_local and statedir.local_etcd_url()) or ""
    if not urls.strip():
        raise ConfigError(NO_ETCD)
    return EtcdConfig.parse(urls, vals["etcd-user"], vals["etcd-password"],
                            vals["etcd-cacert"], vals["etcd-cert"], vals["etcd-key"])


def default_cluster() -> str:
    """The cluster that `xshard up` runs here, else "xshard"."""
    with contextlib.suppress(OSError):
        return statedir.StateDir().read("cluster") or "xshard"
    return "xshard"
