"""An in-process key space for effect-replay tests: handlers run without a server process.

Only what the command handlers and Keyspace touch is here; `propagate` records the effects so a
test can apply them to a second key space (a replica, an AOF replay) and compare the states.
"""

from __future__ import annotations

from node.blocking import Blocked
from node.commands import load_all
from node.keyspace import Keyspace
from node.resp import ReplyError


class _Config:
    stream_node_max_entries = 100
    stream_node_max_bytes = 4096


class _Blocking:
    def signal_ready(self, key: bytes) -> None:
        pass


class InprocServer:
    """Just what the handlers and Keyspace use, with propagate() recording."""

    def __init__(self) -> None:
        self.config = _Config()
        self.blocking = _Blocking()
        self.effects: list[list[bytes]] = []
        self.dirty = 0
        self.clock = 1_700_000_000_000
        self.db = Keyspace(self)  # type: ignore[arg-type]

    def now_ms(self) -> int:
        return self.clock

    def propagate(self, argv: list[bytes]) -> None:
        self.effects.append(list(argv))


class InprocClient:
    proto = 2
    rerunning = False

    def __init__(self, server: InprocServer) -> None:
        self.server = server
        self.db = server.db


def run(server: InprocServer, argv: list[bytes]) -> bytes:
    """Run one command's handler; errors and blocks become their wire replies."""
    handler = load_all()[argv[0].lower()]
    try:
        return handler(InprocClient(server), argv)  # type: ignore[arg-type]
    except ReplyError as e:
        return b"-" + e.message
    except Blocked:
        return b"*-1\r\n"
