"""The server contract: what the rest of the code uses of "the server", written down.

Command handlers, `Client`, `Keyspace`, `BlockingManager`, `EffectApplier` and the RESP
connection (node/protocol.py) all reach into one server object. These Protocols list exactly
what each of them uses, in layers, so that a server that offers only some of it says which:

    ConnectionOwner  what a RESP connection needs: accept, count, hand over clients
    ClientContext    + what `Client` and the connection-level handlers use (PING, HELLO, AUTH,
                     CLIENT, COMMAND, RESET, QUIT ...): settings, clients, role, watches, unblock
    DataContext      what `Keyspace` and the data handlers use (streams, groups, keys): the
                     command's time, effects, the dirty count, ready keys
    ServerContext    all of it, plus what the node's other handlers, `BlockingManager` and
                     `EffectApplier` use: dispatch, persistence, replication, cluster, ...

Three servers implement it, and a type check proves it (tests/test_typecheck.py runs mypy on
tests/typecheck/conformance.py):
- node.server.Server: ServerContext;
- router.proxy.Router: ClientContext, with small objects of its own for `db` (watches live on
  pinned upstream connections) and `blocking` (a blocked read ends by closing its upstream);
- tests/support/inproc.py InprocServer: DataContext, for handler tests without a process.

Attributes are read-only properties here so that an implementation may narrow their type
(the node's `db` is a whole `Keyspace`, the router's only has `unwatch_all`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from node.acl import Acl
    from node.blocking import Blocked, BlockingManager
    from node.client import Client
    from node.cluster import ClusterState
    from node.cmdstats import CommandStats
    from node.commands import Handler
    from node.config import Config
    from node.effects import EffectLog
    from node.keyspace import Keyspace
    from node.latency import LatencyMonitor
    from node.membership.agent import Agent
    from node.persistence import Persistence
    from node.protocol import RespConnection
    from node.replication import Replication
    from node.server import ReplyGate
    from node.slowlog import SlowLog
    from node.snapshot import ChildSaver

__all__ = [
    "Waiting", "Watches", "Unblocker", "ReadySignal", "ConnectionOwner", "ClientContext",
    "DataContext", "ServerContext",
]


class Waiting(Protocol):
    """What `client.blocked` holds while a client waits (node.blocking.Blocked on a node, a
    blocked read on the router): CLIENT UNBLOCK asks it for the timeout reply."""

    def timeout_reply(self, proto: int) -> bytes: ...


class Watches(Protocol):
    def unwatch_all(self, c: Client) -> None: ...


class Unblocker(Protocol):
    def unblock(self, c: Client, reply: bytes | None) -> None: ...


class ReadySignal(Protocol):
    # The keys clients wait on; while it is empty signal_ready does nothing, so a write
    # (Keyspace.changed) skips the call.
    @property
    def waiting(self) -> Mapping[bytes, object]: ...

    def signal_ready(self, key: bytes) -> None: ...


class ConnectionOwner(Protocol):
    """node/protocol.py RespConnection: accepting and serving one client socket."""

    @property
    def config(self) -> Config: ...
    @property
    def clients(self) -> dict[int, Client]: ...
    @property
    def stats(self) -> CommandStats: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def add_client(self, conn: RespConnection, addr: str, laddr: str) -> Client: ...
    def remove_client(self, c: Client) -> None: ...


class ClientContext(ConnectionOwner, Protocol):
    """`Client` and the connection-level handlers (node/commands/connection.py)."""

    role: str  # "master" or "slave", as ROLE and HELLO say
    start_time: float  # time.time() at start (LASTSAVE before any save, uptime)
    monitors: dict[int, Client]  # MONITOR clients by id (node/monitor.py); RESET leaves it
    acl: Acl  # the users (node/acl.py): AUTH, HELLO AUTH and ACL

    @property
    def db(self) -> Watches: ...
    @property
    def blocking(self) -> Unblocker: ...


class DataContext(Protocol):
    """`Keyspace` and the data handlers (streams, groups, keys)."""

    role: str
    dirty: int  # changes since start, as Redis's server.dirty counts them (handlers add)
    active_expire_enabled: bool  # DEBUG SET-ACTIVE-EXPIRE

    @property
    def config(self) -> Config: ...
    @property
    def effects(self) -> EffectLog: ...
    @property
    def blocking(self) -> ReadySignal: ...

    def now_ms(self) -> int:
        """The running command's time, fixed for its duration (commandTimeSnapshot)."""

    def propagate(self, argv: list[bytes]) -> None:
        """Record one effect of the running command (node/effects.py)."""


class ServerContext(ClientContext, DataContext, Protocol):
    """The node: everything above, plus what the node's other handlers, `BlockingManager`
    and `EffectApplier` use."""

    run_id: str
    cmd_time_ms: int
    persistence: Persistence | None  # set at start-up
    replication: Replication | None  # set at start-up
    child_saver: ChildSaver | None  # the forked saver, once one ran
    cluster: ClusterState | None  # set when the node is part of a cluster
    agent: Agent | None  # the etcd membership agent (node/membership/agent.py), with --etcd
    config_file: str  # the --config file, "" without one
    peak_memory: int  # the highest RSS INFO has seen (used_memory_peak)
    reply_gate: ReplyGate | None
    config_listeners: list[Callable[[str], None]]
    shutdown_hook: Callable[[], None] | None
    tcp_server: asyncio.AbstractServer | None
    tls_server: asyncio.AbstractServer | None  # tls-port's listener (node/tls.py)
    tls_context: ssl.SSLContext | None
    tls_client_context: ssl.SSLContext | None  # replication and MIGRATE under TLS
    slowlog: SlowLog  # SLOWLOG (node/slowlog.py)
    latency: LatencyMonitor  # LATENCY (node/latency.py)
    slow_usec: int  # a command that ran this long (us) goes to slow_command

    @property
    def db(self) -> Keyspace: ...
    @property
    def blocking(self) -> BlockingManager: ...

    def execute(self, c: Client, argv: list[bytes]) -> bytes | None: ...
    def call(self, c: Client, argv: list[bytes], name: bytes,
             handler: Handler) -> bytes | None: ...
    def handler(self, name: bytes) -> Handler: ...
    def rerun_blocked(self, c: Client, argv: list[bytes]) -> bytes | None: ...
    def count_released(self, c: Client, b: Blocked, reply: bytes) -> None: ...
    def slow_command(self, c: Client, argv: list[bytes], name: bytes, usec: int) -> None: ...
