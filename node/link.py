"""The one RESP client for node-to-node links: the controller, the CLI, slot moves and MIGRATE.

A `Link` is one connection to a server (over TLS when given a context; AUTH [user] password
first when given a password) that pipelines: `send` writes a command at once and never waits or
raises, a task reads the replies in order and counts them, and `drain` waits until they are in.
Error replies come back as typed exceptions through node/errors.py's one table
(EXCEPTION_CLASSES: MovedError, NoAuthError, BusyKeyError...); a lost link is a
ConnectionError, no answer in time a TimeoutError. redis-py is only a test dependency, so this
is hiredis over asyncio streams.

The control plane asks nodes a handful of things (INFO replication, REPLICAOF, PING) rarely,
each on a connection of its own with one hard timeout (`call`, `call_all`): a node that froze
costs one timeout and leaves nothing behind. A slot move keeps one Link open and streams the
image and the effects through it, bounded by `window`.

`NodeOps` is everything the controller does to nodes, in one narrow class, so that controller
decisions can be unit-tested with scripted nodes (tests/control/test_controller_unit.py) the
way kvrocks-controller tests its controller with mock nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from ssl import SSLContext
from typing import TYPE_CHECKING

import hiredis

from node.cluster import client_port
from node.errors import ResponseError, reply_error
from node.resp import encode_command

if TYPE_CHECKING:
    from base.records import NodeRecord

Arg = bytes | str | int


class Link:
    """A pipelined connection to one server: sends commands, counts and keeps their replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.sent = 0
        self.acked = 0
        self.bytes = 0
        self.acked_bytes = 0  # bytes of the commands answered so far
        # The first failure: an error reply (a ResponseError) or the link's loss.
        self.error: Exception | None = None
        self.lost: ConnectionError | None = None
        self._replies: dict[int, object] = {}  # replies of the commands whose answer is wanted
        self._want: set[int] = set()
        self._ends: deque[int] = deque()  # `bytes` after each unanswered command
        self._parser = hiredis.Reader(replyError=reply_error)
        self._changed = asyncio.Event()
        self._task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, host: str, port: int, *, password: str = "", user: str = "",
                   ssl: SSLContext | None = None, timeout: float = 2.0) -> Link:
        """Connect within `timeout` (TimeoutError, else OSError), over TLS with `ssl` (the
        server's tls-port), and send AUTH first when `password` is set (as ACL user `user`
        when that is set too): a refused login is the first error reply, NoAuthError or
        WrongPassError, raised by the first `drain`."""
        r, w = await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=ssl, server_hostname=host if ssl else None), timeout)
        link = cls(r, w)
        for argv in auth_commands(password, user):
            link.send(argv)
        return link

    def send(self, argv: list[bytes] | tuple[bytes, ...], want: bool = False) -> int:
        """Write one command; returns its number, by which `reply` finds its answer when
        `want` is set."""
        return self.send_raw(encode_command(argv), want)

    def send_raw(self, data: bytes, want: bool = False) -> int:
        """Write one encoded command. Never raises (a slot move calls it inside the commands
        whose effects it forwards): a link that is gone only records it."""
        if self.lost is None:
            try:
                self.writer.write(data)
            except (RuntimeError, OSError) as e:  # uvloop: "the handler is closed"
                self._lose(f"link lost ({type(e).__name__})")
        return self._count(len(data), want)

    def _count(self, size: int, want: bool) -> int:
        self.bytes += size
        self.sent += 1
        self._ends.append(self.bytes)
        if want:
            self._want.add(self.sent)
        return self.sent

    async def write(self, data: bytes, timeout: float, chunk: int = 64 * 1024,
                    want: bool = False) -> int:
        """Write one encoded command in `chunk`s, each taken by the socket within `timeout`
        (TimeoutError, or ConnectionError): MIGRATE's bounded writes (Redis syncWrite)."""
        for pos in range(0, len(data), chunk):
            if self.lost is None:
                try:
                    self.writer.write(data[pos:pos + chunk])
                except (RuntimeError, OSError) as e:
                    self._lose(f"link lost ({type(e).__name__})")
            if self.writer.transport.get_write_buffer_size() > chunk:
                await self._flush(timeout)
            if self.lost is not None:
                raise self.lost
        return self._count(len(data), want)

    async def _flush(self, timeout: float) -> None:
        """Wait (at most `timeout`: TimeoutError) until the socket has taken what is
        buffered down to the transport's low-water mark."""
        if self.lost is None and self.writer.transport.get_write_buffer_size():
            try:
                await asyncio.wait_for(self.writer.drain(), timeout)
            except (RuntimeError, OSError) as e:
                self._lose(f"link lost ({type(e).__name__})")

    def reply(self, n: int) -> object:
        """The answer to command `n` (sent with `want`): a value, or a ResponseError for an
        error reply; None while it has not come."""
        return self._replies.pop(n, None)

    @property
    def in_flight(self) -> int:
        return self.bytes - self.acked_bytes

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = ConnectionError(why)
            if self.error is None:
                self.error = self.lost

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    self._lose("the server closed the link")
                    break
                self._parser.feed(data)
                while (r := self._parser.gets()) is not False:
                    self.acked += 1
                    if self._ends:
                        self.acked_bytes = self._ends.popleft()
                    if isinstance(r, ResponseError) and self.error is None:
                        self.error = r
                    if self.acked in self._want:
                        self._want.discard(self.acked)
                        self._replies[self.acked] = r
                self._changed.set()
        except (OSError, asyncio.IncompleteReadError) as e:
            self._lose(f"link lost ({type(e).__name__})")
        except hiredis.ProtocolError as e:
            self._lose(f"protocol error ({e})")
            self.writer.close()
        finally:
            self._changed.set()

    def _check(self, errors: bool) -> None:
        e = self.error if errors else self.lost
        if e is not None:
            raise e

    async def drain(self, timeout: float, upto: int | None = None, errors: bool = True) -> None:
        """Wait until every command sent so far (or the first `upto`) is answered; what is
        sent meanwhile is not waited for. Raises the link's loss (ConnectionError),
        TimeoutError, and with `errors` the first error reply any command got."""
        deadline = time.monotonic() + timeout
        upto = self.sent if upto is None else upto
        await self._flush(timeout)
        while self.acked < upto:
            self._check(errors)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer in {timeout:.1f}s")
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        if errors:
            self._check(errors)

    async def window(self, limit: int, commands: int, timeout: float) -> None:
        """Wait until at most `limit` of the bytes sent, and at most `commands` commands,
        are unanswered."""
        floor = self.bytes - limit
        n = 0
        if self.acked_bytes < floor:
            for end in self._ends:  # answers needed: up to the first command ending past floor
                n += 1
                if end >= floor:
                    break
        n = max(n, self.sent - self.acked - commands)
        if n > 0:
            await self.drain(timeout, self.acked + n)

    async def call(self, *argv: Arg, timeout: float) -> object:
        """One command, its answer within `timeout` (an error reply raises)."""
        n = self.send(_argv(argv), want=True)
        await self.drain(timeout, n)
        return self.reply(n)

    def close(self) -> None:
        self._task.cancel()
        self.writer.close()

    async def aclose(self) -> None:
        """close(), then wait (briefly) for the transport to go, so nothing is left behind."""
        self.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)


def _argv(argv: tuple[Arg, ...] | list[Arg]) -> list[bytes]:
    return [a if isinstance(a, bytes) else str(a).encode() for a in argv]


async def call(host: str, port: int, *argv: Arg, timeout: float = 1.0,
               password: str = "", ssl: SSLContext | None = None, user: str = "") -> object:
    """Send one command (after AUTH when `password` is set: as ACL user `user` when that is
    set too) and return the decoded reply; raises a ResponseError on an error reply,
    OSError / TimeoutError when the node cannot be reached."""
    return (await call_all(host, port, [argv], timeout=timeout, password=password,
                           ssl=ssl, user=user))[-1]


async def call_all(host: str, port: int, commands: list[tuple | list], timeout: float = 1.0,
                   password: str = "", ssl: SSLContext | None = None,
                   user: str = "") -> list[object]:
    """Send `commands` in one write on a connection of their own (after AUTH when `password`
    is set), so that they run back to back, all within `timeout`; their decoded replies, or
    the first error reply raised as its ResponseError. `ssl`: over TLS, to the node's
    tls-port (--tls-cluster)."""
    async def run() -> list[object]:
        link = await Link.open(host, port, password=password, user=user, ssl=ssl,
                               timeout=timeout)
        try:
            sent = [link.send(_argv(c), want=True) for c in commands]
            await link.drain(timeout)
            return [link.reply(n) for n in sent]
        finally:
            await link.aclose()

    return await asyncio.wait_for(run(), timeout)


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
