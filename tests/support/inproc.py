"""An in-process key space for effect-replay tests: handlers run without a server process.

`InprocServer` is a node.context.DataContext: what the data handlers and Keyspace use, for
real (a Config, an EffectLog, a dirty count), with a fixed clock. `propagate` records each
effect in `recorded` so a test can apply them to a second key space (a replica, an AOF replay)
and compare the states.
"""

from __future__ import annotations

from node.blocking import Blocked
from node.commands import load_all
from node.config import Config
from node.effects import EffectLog
from node.keyspace import Keyspace
from node.resp import ReplyError


class _NoWaiters:
    """No client ever blocks in process, so a key made ready has no one to wake."""

    waiting: dict[bytes, object] = {}

    def signal_ready(self, key: bytes) -> None:
        pass


class InprocServer:
    """Just what the handlers and Keyspace use, with propagate() recording."""

    def __init__(self) -> None:
        self.config = Config()
        self.blocking = _NoWaiters()
        self.effects = EffectLog()
        # With a listener, handlers record every effect (one XCLAIM per delivery, not only a
        # dirty count), which is what the replay tests compare.
        self.effects.listen(lambda data: None)
        self.recorded: list[list[bytes]] = []
        self.role = "master"
        self.dirty = 0
        self.active_expire_enabled = True
        self.clock = 1_700_000_000_000
        self.db = Keyspace(self)

    def now_ms(self) -> int:
        return self.clock

    def propagate(self, argv: list[bytes]) -> None:
        """As Server.propagate: an effect is no change in `dirty` (the handlers count those)."""
        self.recorded.append(list(argv))


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


def group_state(server: InprocServer, key: bytes = b"s") -> object:
    """A stream's groups exactly (cursor, counter, PEL with NACKs, consumer PELs) and its
    entries: what a replay of the effects must reproduce."""
    s = server.db.get_stream(key)
    if s is None:
        return None
    out = {}
    for name, g in s.groups.items():
        out[name] = (g.last_id, g.entries_read, dict(g.pel.items()),
                     {n: list(c.pel) for n, c in g.consumers.items()})
    return out, s.dump_state()
