"""A minimal RESP client for the control plane: one command per connection, hard timeouts.

The controller and the CLI ask nodes a handful of things (INFO replication, REPLICAOF, PING)
rarely; redis-py is only a test dependency, so this is hiredis over asyncio streams. Nodes
with `requirepass` get AUTH first, on the same connection.

`NodeOps` is everything the controller does to nodes, in one narrow class, so that controller
decisions can be unit-tested with scripted nodes (tests/control/test_controller_unit.py) the
way kvrocks-controller tests its controller with mock nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
from ssl import SSLContext
from typing import TYPE_CHECKING

import hiredis

from node.cluster import client_port
from node.resp import encode_command

if TYPE_CHECKING:
    from base.records import NodeRecord


class NodeError(Exception):
    """The node answered with an error, or could not be reached in time."""


async def call(host: str, port: int, *argv: bytes | str | int, timeout: float = 1.0,
               password: str = "", ssl: SSLContext | None = None, user: str = "") -> object:
    """Send one command (after AUTH when `password` is set: as ACL user `user` when that is
    set too) and return the decoded reply; raises NodeError on an error reply, OSError /
    TimeoutError when the node cannot be reached."""
    return (await call_all(host, port, [argv], timeout=timeout, password=password,
                           ssl=ssl, user=user))[-1]


async def call_all(host: str, port: int, commands: list[tuple | list], timeout: float = 1.0,
                   password: str = "", ssl: SSLContext | None = None,
                   user: str = "") -> list[object]:
    """Send `commands` in one write on one connection (after AUTH when `password` is set), so
    that they run back to back; their decoded replies, or NodeError for the first error.
    `ssl`: over TLS, to the node's tls-port (--tls-cluster)."""
    cmds = auth_commands(password, user) + [
        [a if isinstance(a, bytes) else str(a).encode() for a in argv] for argv in commands]

    async def run() -> list[object]:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=ssl, server_hostname=host if ssl else None)
        try:
            writer.write(b"".join(encode_command(c) for c in cmds))
            parser = hiredis.Reader()
            replies: list[object] = []
            while len(replies) < len(cmds):
                reply = parser.gets()
                if reply is not False:
                    replies.append(reply)
                    continue
                data = await reader.read(65536)
                if not data:
                    raise ConnectionResetError("connection closed by the node")
                parser.feed(data)
            return replies
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    replies = await asyncio.wait_for(run(), timeout)
    for reply in replies:
        if isinstance(reply, hiredis.ReplyError):
            raise NodeError(str(reply))
    return replies[len(replies) - len(commands):]


def auth_commands(password: str, user: str = "") -> list[list[bytes]]:
    """AUTH [user] password, or nothing without a password (the node's default user)."""
    if not password:
        return []
    return [[b"AUTH", user.encode(), password.encode()] if user else [b"AUTH", password.encode()]]


def parse_info(raw: bytes) -> dict[str, str]:
    out = {}
    for line in raw.decode(errors="replace").splitlines():
        if ":" in line and not line.startswith("#"):
            k, _, v = line.partition(":")
            out[k] = v
    return out


async def info(host: str, port: int, section: str = "replication",
               timeout: float = 1.0, password: str = "",
               ssl: SSLContext | None = None, user: str = "") -> dict[str, str]:
    reply = await call(host, port, "INFO", section, timeout=timeout, password=password, ssl=ssl,
                       user=user)
    return parse_info(reply if isinstance(reply, bytes) else b"")


def repl_offset(fields: dict[str, str]) -> int:
    """How much of the shard's effect stream a node holds: a replica's processed offset,
    else (a primary, or a node without replication) its own offset."""
    for k in ("slave_repl_offset", "master_repl_offset"):
        if k in fields:
            try:
                return int(fields[k])
            except ValueError:
                pass
    return 0


async def refused(host: str, port: int, timeout: float = 0.3) -> bool:
    """True only when the port actively refuses connections (the process is gone); a timeout
    (frozen or partitioned) is not proof of death."""
    try:
        _r, w = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except ConnectionRefusedError:
        return True
    except (TimeoutError, OSError):
        return False
    w.close()
    return False


class NodeOps:
    """What the controller asks of and tells to nodes; `password` is sent as AUTH (as ACL user
    `user` when set, --node-user), and with `tls` (--tls-cluster) nodes are reached over TLS
    at their tls-port."""

    def __init__(self, password: str = "", timeout: float = 0.5,
                 tls: SSLContext | None = None, user: str = "") -> None:
        self.password = password
        self.timeout = timeout
        self.tls = tls
        self.user = user

    def addr(self, rec: NodeRecord) -> tuple[str, int]:
        """Where a node is reached: its tls-port with TLS (when it has one), else its port.
        A replica told to follow this address with REPLICAOF gets the same kind of port,
        which is what it needs with tls-replication."""
        return rec.host, client_port(rec.port, rec.tls_port, self.tls is not None)

    async def _call_all(self, host: str, port: int, commands: list[tuple | list]) -> list[object]:
        return await call_all(host, port, commands, timeout=self.timeout,
                              password=self.password, ssl=self.tls, user=self.user)

    async def _call(self, host: str, port: int, *argv: bytes | str | int) -> object:
        return (await self._call_all(host, port, [argv]))[-1]

    async def offset(self, host: str, port: int) -> int:
        """How much of the shard's stream the node holds (raises when it cannot tell)."""
        reply = await self._call(host, port, "INFO", "replication")
        return repl_offset(parse_info(reply if isinstance(reply, bytes) else b""))

    async def promote(self, host: str, port: int) -> None:
        await self._call(host, port, "REPLICAOF", "NO", "ONE")

    async def replicate(self, host: str, port: int, to_host: str, to_port: int) -> None:
        await self._call(host, port, "REPLICAOF", to_host, to_port)

    async def refused(self, host: str, port: int) -> bool:
        return await refused(host, port)

    async def primary_link_up(self, host: str, port: int) -> bool | None:
        """The replica's `master_link_status` (True: up, False: down), None when it cannot be
        asked. A crashed primary's sockets are closed by its kernel, so its replicas see the
        link go down at once; a live primary behind a partition keeps it up."""
        try:
            reply = await self._call(host, port, "INFO", "replication")
        except Exception:
            return None
        status = parse_info(reply if isinstance(reply, bytes) else b"").get("master_link_status")
        return None if status is None else status == "up"

    async def pause_writes(self, host: str, port: int, ms: int) -> None:
        """CLIENT PAUSE ms WRITE (a switchover, control/switchover.py)."""
        await self._call(host, port, "CLIENT", "PAUSE", ms, "WRITE")

    async def unpause(self, host: str, port: int) -> None:
        await self._call(host, port, "CLIENT", "UNPAUSE")

    async def serves_as(self, host: str, port: int) -> str:
        """"master" when the node is primary by ROLE and by its etcd view (it takes writes),
        "slave" when its view names another primary (it answers writes -MOVED), else ""."""
        role, text = await self._call_all(host, port, [["ROLE"], ["CLUSTER", "NODES"]])
        lines = (text if isinstance(text, bytes) else b"").decode().splitlines()
        flags = next((f for f in (line.split(" ")[2] for line in lines if line.count(" ") > 2)
                      if "myself" in f), "")
        if "slave" in flags:
            return "slave"
        if "master" in flags and isinstance(role, list) and role[0] == b"master":
            return "master"
        return ""
