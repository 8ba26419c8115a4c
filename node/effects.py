"""The effect log: the one place where writes become deterministic RESP commands.

Every write is reduced to effects that a replica or a restart can apply blindly (XADD with its
final ID, `~` trims as exact ones, deliveries as XCLAIM ... FORCE JUSTID LASTID). The same bytes
feed the AOF and the replication stream, and their running length is the replication offset.
Consumers subscribe with `listen`. With none (no AOF, and no replication backlog because no
replica ever attached) an effect is not even encoded: the offset still advances by the length
its encoding would have, so that offsets stay the same whoever listens, and a later AOF or
replica lines up with them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from node.resp import encode_command

if TYPE_CHECKING:
    from node.context import ServerContext

log = logging.getLogger("xshard.node")


class EffectLog:
    __slots__ = ("offset", "listeners", "_batch", "in_multi", "replaying")

    def __init__(self) -> None:
        self.offset = 0
        self.listeners: list[Callable[[bytes], None]] = []
        self._batch: list[bytes] | None = None
        self.in_multi = False
        self.replaying = 0  # >0 while an EffectApplier runs commands: they emit nothing

    def publish_raw(self, data: bytes) -> None:
        """Publish effect bytes received from elsewhere (a primary) as they are."""
        self._publish(data)

    def listen(self, fn: Callable[[bytes], None]) -> None:
        if fn not in self.listeners:
            self.listeners.append(fn)

    def unlisten(self, fn: Callable[[bytes], None]) -> None:
        if fn in self.listeners:
            self.listeners.remove(fn)

    def recording(self) -> bool:
        """Whether an emitted effect is encoded (someone listens, or a transaction collects
        them): callers that can skip building an effect ask this first."""
        return bool(self.listeners) or self._batch is not None

    def skip(self, nbytes: int) -> None:
        """Count effects that were not built (nobody listens) by the bytes they would have
        had, so that offsets are the same whoever listens (see _command_len)."""
        if not self.replaying:
            self.offset += nbytes

    def emit(self, argv: list[bytes]) -> None:
        if self.replaying:
            return
        if self._batch is not None:
            self._batch.append(encode_command(argv))
        elif self.listeners:
            self._publish(encode_command(argv))
        else:
            self.offset += _command_len(argv)

    def begin_transaction(self) -> None:
        """Effects of EXEC are wrapped in MULTI/EXEC so that they apply atomically."""
        if not self.replaying:
            self._batch = []

    def end_transaction(self) -> None:
        batch, self._batch = self._batch, None
        if batch:
            if len(batch) > 1:
                batch.insert(0, encode_command([b"MULTI"]))
                batch.append(encode_command([b"EXEC"]))
            self._publish(b"".join(batch))

    def _publish(self, data: bytes) -> None:
        self.offset += len(data)
        for fn in self.listeners:
            fn(data)


class EffectStreamError(Exception):
    """A byte sequence that is not a well-formed effect stream, at `offset` within it."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset
        self.reason = reason


def _command_len(argv: list[bytes]) -> int:
    """Bytes of `argv` in canonical RESP (what encode_command writes), without encoding it.

    `$<len>\r\n<arg>\r\n` is len + 5 + digits(len); the common one- and two-digit lengths
    skip str() (this runs for every effect when nothing listens)."""
    n = 3 + len(str(len(argv)))
    for a in argv:
        la = len(a)
        n += la + 6 if la < 10 else la + 7 if la < 100 else la + 5 + len(str(la))
    return n


class EffectApplier:
    """The one apply path: AOF loading and replicas feed effect bytes here.

    Commands run through the server's normal dispatch as a dedicated client that is exempt from
    write guards and whose replies are dropped. Their own effects are not re-derived: with
    `republish`, the received bytes themselves are published to the effect log, so a replica's
    AOF, backlog and offset are byte-identical to its primary's.
    """

    def __init__(self, server: ServerContext, republish: bool) -> None:
        from hiredis import Reader

        from node.client import Client

        self.server = server
        self.republish = republish
        self.client = Client(server, None, 0, "master", "")
        self.client.authenticated = True
        self.client.acl = None  # a primary's effects are never checked (Redis's NULL user)
        self.client.is_master = True
        self.reader = Reader()
        self.consumed = 0  # bytes of complete commands applied
        self.errors = 0
        self.pending: list[bytes] = []  # an open transaction's commands, not yet published

    def reset_partial(self) -> None:
        """Forget what the stream had not completed: a partial command and an open
        transaction (a primary resends both from the offset we report, and a promoted
        replica must not commit half of a transaction)."""
        from hiredis import Reader

        self.reader = Reader()
        self.pending = []
        if self.client.in_multi:
            self.client.discard_multi()

    def feed(self, data: bytes, track: bool = True) -> int:
        """Apply every complete command in `data` (plus what was buffered); returns how many.

        Raises EffectStreamError naming the offset of the first malformed command. `track`
        False skips offset accounting (AOF loading, where scan() already checked the bytes)."""
        reader = self.reader
        reader.feed(data)
        server = self.server
        execute = server.execute
        client = self.client
        republish = self.republish
        effects = server.effects
        applied = 0
        out: list[bytes] = []
        effects.replaying += 1
        try:
            while True:
                try:
                    argv = reader.gets()
                except Exception as e:  # hiredis.ProtocolError
                    raise EffectStreamError(self.consumed, f"protocol error ({e})") from None
                if argv is False:
                    break
                if type(argv) is not list or not argv:
                    raise EffectStreamError(self.consumed, "not a command")
                try:
                    b"".join(argv)  # every element a bulk string; C-speed check
                except TypeError:
                    raise EffectStreamError(self.consumed, "not a command") from None
                if republish:
                    enc = encode_command(argv)
                    size = len(enc)
                elif track:
                    size = _command_len(argv)
                else:
                    size = 0
                self.consumed += size
                applied += 1
                reply = execute(client, argv)
                if republish:
                    # A transaction is published (and counted in the offset) only once its
                    # EXEC has arrived, as Redis advances a replica's offset: a link cut
                    # inside MULTI resumes from before it, and nothing half-applied leaks.
                    if client.in_multi:
                        self.pending.append(enc)
                    elif self.pending:  # EXEC or DISCARD closed it
                        out += self.pending
                        out.append(enc)
                        self.pending = []
                    else:
                        out.append(enc)
                if reply is not None and reply[:1] == b"-":
                    self.errors += 1
                    log.warning("Effect %r at offset %d failed: %r", argv[:3],
                                self.consumed - size, reply[:200])
        finally:
            effects.replaying -= 1
            if out:
                effects.publish_raw(b"".join(out))
        return applied
