"""Per-connection client state: what Redis keeps in `client` apart from the socket buffers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from node.acl import User
    from node.context import ClientContext, Waiting
    from node.keyspace import Keyspace
    from node.protocol import RespConnection


class Client:
    __slots__ = (
        "id", "server", "conn", "proto", "name", "authenticated", "addr", "laddr", "ctime",
        "last_interaction_ms", "last_cmd", "in_multi", "multi_queue", "multi_failed", "in_exec",
        "watched", "dirty_cas", "blocked", "rerunning", "readonly", "asking", "lib_name",
        "lib_ver", "close_after_reply", "obuf_soft_since", "no_evict", "is_master", "woff",
        "import_slots", "user", "acl",
    )

    def __init__(self, server: ClientContext, conn: RespConnection | None, client_id: int,
                 addr: str = "", laddr: str = "") -> None:
        self.id = client_id
        self.server = server
        self.conn = conn
        self.proto = 2
        self.name: bytes | None = None
        # The ACL user (node/acl.py); `acl` is its rules, None while it may run anything.
        self.user = b"default"
        self.acl: User | None = server.acl.rules_of(b"default")
        self.authenticated = not server.acl.default_needs_auth()
        self.addr = addr
        self.laddr = laddr
        self.ctime = time.time()
        self.last_interaction_ms = int(self.ctime * 1000)  # the last command's time (idle=)
        # The last command's fullname (CLIENT LIST cmd=, set by Server.execute); None before
        # the first one and after an unknown one.
        self.last_cmd: bytes | None = None
        self.in_multi = False
        self.multi_queue: list[list[bytes]] = []
        self.multi_failed = False
        self.in_exec = False
        self.watched: set[bytes] = set()
        self.dirty_cas = False
        self.blocked: Waiting | None = None  # node.blocking.Blocked on a node
        self.rerunning = False  # True while a blocked command is re-run after its key was ready
        self.readonly = False  # READONLY: a cluster replica may serve this client's reads
        self.asking = False  # ASKING: the next command may use a slot being imported
        self.lib_name = b""
        self.lib_ver = b""
        self.close_after_reply = False
        self.obuf_soft_since = 0.0
        # CLIENT NO-EVICT: nothing is evicted here, but the flag is the client's own state and
        # CLIENT INFO shows it ('e'), as Redis does.
        self.no_evict = False
        self.is_master = False  # the client that applies a primary's effects (or the AOF)
        self.woff = 0  # effect-log offset after this client's last write (WAIT, WAITAOF)
        self.import_slots: set[int] = set()  # slots this link imports (SETSLOT IMPORTING on it)

    @property
    def db(self) -> Keyspace:
        """The node's key space. Only a node runs handlers that read keys (the router runs
        the connection-level ones), so on a node's clients this is a whole Keyspace."""
        return cast("Keyspace", self.server.db)

    def unblocked(self, reply: bytes) -> None:
        """Called by the blocking manager with the reply that releases this client."""
        if self.conn is not None:
            self.conn.on_unblocked(reply)

    def discard_multi(self) -> None:
        """multi.c discardTransaction: leave MULTI, drop the queue, forget every WATCH."""
        self.in_multi = False
        self.multi_queue = []
        self.multi_failed = False
        self.server.db.unwatch_all(self)

    def reset(self) -> None:
        """RESET: back to a fresh connection's state, keeping the id and the socket."""
        self.discard_multi()
        self.server.blocking.unblock(self, None)
        self.proto = 2
        self.name = None
        self.user = b"default"
        self.acl = self.server.acl.rules_of(b"default")
        self.authenticated = not self.server.acl.default_needs_auth()
        self.readonly = False
        self.asking = False  # ASKING: the next command may use a slot being imported
        self.no_evict = False
        self.server.monitors.pop(self.id, None)  # RESET ends MONITOR
