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

import asyncio
import logging
from collections.abc import Callable
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Any

from node.resp import encode_command, error_code
from node.stream import Stream
from node.streamid import SEQ_MAX

if TYPE_CHECKING:
    from node.client import Client
    from node.context import ServerContext

log = logging.getLogger("xshard.node")

_FEED_PIECE = 1 << 16  # bytes handed to the RESP reader at a time (EffectApplier.feed)


class EffectLog:
    __slots__ = ("offset", "listeners", "_batch", "in_multi", "replaying")

    def __init__(self) -> None:
        self.offset = 0
        self.listeners: list[Callable[[bytes], None]] = []
        self._batch: list[bytes] | None = None
        self.in_multi = False
        self.replaying = 0  # >0 while an EffectApplier runs commands: they emit nothing

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
            self.publish(encode_command(argv))
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
            self.publish(b"".join(batch))

    def publish(self, data: bytes) -> None:
        """Hand encoded effects to every listener: those made here, and those received from
        elsewhere (a primary) as they are."""
        self.offset += len(data)
        for fn in self.listeners:
            fn(data)


class EffectBuffer:
    """One loop iteration's effects gathered for one write (the AOF's, node/persistence.py):
    an effect listener that the log calls as C when compiled. The first effect of an
    iteration schedules `flush` (loop.call_soon); the owner's flush takes `parts`. An
    interpreted listener cost ~2.2k instructions an effect, four a delivery. While not `open`
    (no file to write) effects are ignored."""

    __slots__ = ("parts", "size", "scheduled", "open", "loop", "flush")

    def __init__(self, flush: Callable[[], None]) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.scheduled = False
        self.open = False
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the owner starts
        self.flush = flush

    def __call__(self, data: bytes) -> None:
        if not self.open:
            return
        self.parts.append(data)
        self.size += len(data)
        if not self.scheduled:
            self.scheduled = True
            loop = self.loop
            if loop is None:
                loop = self.loop = asyncio.get_running_loop()
            loop.call_soon(self.flush)


class ReplicationFeed(EffectBuffer):
    """The replication's listener (node/replication/__init__.py): the iteration's effects
    go to the backlog and to every replica with one write each (its `flush`). On a replica
    with no replicas of its own, which republishes once per read from its primary, an effect
    goes straight to the backlog: nothing to batch, so no loop callback per read. `owner` is
    the Replication; the check reads its fields at each effect, as they change with roles and
    attached replicas."""

    __slots__ = ("owner",)

    def __init__(self, owner: Any, flush: Callable[[], None]) -> None:
        EffectBuffer.__init__(self, flush)
        self.owner = owner
        self.open = True

    def __call__(self, data: bytes) -> None:
        owner = self.owner
        backlog = owner.backlog
        if backlog is not None and not self.parts and owner.server.following \
                and not owner.primary.replicas:
            backlog.append(data)
            return
        EffectBuffer.__call__(self, data)


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
    c = len(argv)
    n = 4 if c < 10 else 5 if c < 100 else 3 + len(str(c))
    for a in argv:
        la = len(a)
        n += la + 6 if la < 10 else la + 7 if la < 100 else la + 5 + len(str(la))
    return n


class EffectApplier:
    """The one apply path: AOF loading and replicas feed effect bytes here.

    Commands run through the server's normal dispatch as a dedicated client that is exempt from
    write guards and whose replies are dropped. Their own effects are not re-derived: with
    `republish`, the received bytes themselves are published to the effect log, as they came
    (not re-encoded, which was a quarter of a replica's apply), so a replica's AOF, backlog
    and offset are byte-identical to its primary's. A command's bytes are found by their
    canonical length, the same count the offsets rest on (the primary encodes canonically).

    Batched XADDs: an effect log is mostly runs of `XADD key [MAXLEN n] ms-seq field value ...`
    on one key (fully specified: explicit IDs, exact trims). Such a run is collected and
    appended with one `Stream.append_many` call instead of one dispatch per effect, which is
    most of what replaying an XADD costs; the stream ends up exactly as with the commands one
    by one. Every other effect, and an XADD that the batch cannot take (a new key, options, an
    entry the stream refuses), goes through the dispatch, after the run before it.
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
        # republish: the received bytes not published yet (an open transaction's commands, a
        # partial command), their length, and how much of it is complete commands
        self.raw: list[bytes] = []
        self.raw_len = 0
        self.raw_done = 0
        # the run of batched XADDs not applied yet: key, MAXLEN (-1: none), IDs, field lists,
        # the effects themselves (to report one the stream refuses)
        self.run_key: bytes | None = None
        self.run_maxlen = -1
        self.run_sids: list[int] = []
        self.run_fields: list[list[bytes]] = []
        self.run_argvs: list[list[bytes]] = []
        from node.commands.groups import apply_setid_effect, apply_xclaim_effect, xack

        # The group effects of a delivery, applied by their handlers without the dispatch,
        # and the command stats each counts under.
        self.direct: dict[bytes, tuple[Callable[[Client, list[bytes]], bytes | None], bytes]] = {
            b"XCLAIM": (apply_xclaim_effect, b"xclaim"), b"XACK": (xack, b"xack"),
            b"XGROUP": (apply_setid_effect, b"xgroup|setid")}

    def reset_partial(self) -> None:
        """Forget what the stream had not completed: a partial command and an open
        transaction (a primary resends both from the offset we report, and a promoted
        replica must not commit half of a transaction)."""
        from hiredis import Reader

        self.reader = Reader()
        self.raw = []
        self.raw_len = self.raw_done = 0
        if self.client.in_multi:
            self.client.discard_multi()

    def feed(self, data: bytes, track: bool = True) -> int:
        """Apply every complete command in `data` (plus what was buffered); returns how many.

        Raises EffectStreamError naming the offset of the first malformed command (what came
        before it is applied). `track` False skips offset accounting (AOF loading, where the
        caller checks the file on its own)."""
        reader = self.reader
        server = self.server
        client = self.client
        republish = self.republish
        effects = server.effects
        # Batching stays off while someone must see every command on its own (MONITOR).
        batch = not server.monitors
        applied = 0
        end = len(data)
        pos = 0
        if republish:
            self.raw.append(data)
            self.raw_len += end
        done = self.raw_done  # end of the complete commands in the unpublished bytes
        publish = 0  # end of those that can be published (not in an open transaction)
        effects.replaying += 1
        try:
            while True:
                try:
                    argv = reader.gets()
                except Exception as e:  # hiredis.ProtocolError
                    raise EffectStreamError(self.consumed, f"protocol error ({e})") from None
                if argv is False:
                    if pos >= end:
                        break
                    # In pieces: hiredis moves the unread rest of its buffer after every 1 KiB
                    # it consumes, which costs as much as the parsing with a 1 MiB buffer.
                    n = min(_FEED_PIECE, end - pos)
                    reader.feed(data, pos, n)
                    pos += n
                    continue
                if type(argv) is not list or not argv:
                    raise EffectStreamError(self.consumed, "not a command")
                try:
                    b"".join(argv)  # every element a bulk string; C-speed check
                except TypeError:
                    raise EffectStreamError(self.consumed, "not a command") from None
                size = _command_len(argv) if track or republish else 0
                self.consumed += size
                done += size
                applied += 1
                if batch and not client.in_multi and self._batched(argv):
                    publish = done
                    continue
                if self.run_sids:
                    self.flush_run()
                if batch and not client.in_multi and self._direct(argv):
                    publish = done
                    continue
                reply = server.execute(client, argv)
                # A transaction is published (and counted in the offset) only once its EXEC
                # (or DISCARD) has arrived, as Redis advances a replica's offset: a link cut
                # inside MULTI resumes from before it, and nothing half-applied leaks.
                if not client.in_multi:
                    publish = done
                if reply is not None and error_code(reply) is not None:
                    self._failed(argv, self.consumed - size, reply)
        finally:
            try:
                if self.run_sids:
                    self.flush_run()
            finally:
                effects.replaying -= 1
                if republish:
                    self.raw_done = done
                    if publish:
                        self._publish_received(publish)
        return applied

    def _publish_received(self, n: int) -> None:
        """Publish the first `n` unpublished received bytes (whole commands), as they came."""
        raw = self.raw
        whole = raw[0] if len(raw) == 1 else b"".join(raw)
        rest = whole[n:]
        self.raw = [rest] if rest else []
        self.raw_len -= n
        self.raw_done -= n
        self.server.effects.publish(whole if not rest else whole[:n])

    def _failed(self, argv: list[bytes], offset: int, reply: bytes) -> None:
        self.errors += 1
        log.warning("Effect %r at offset %d failed: %r", argv[:3], offset, reply[:200])

    def _batched(self, argv: list[bytes]) -> bool:
        """Take `argv` into the run when it is `XADD key [MAXLEN n] ms-seq field value ...`
        on the run's key (or starts a new run after applying the old one)."""
        name = argv[0]
        if name != b"XADD" and name != b"xadd":
            return False
        argc = len(argv)
        i = 2
        maxlen = -1
        if argc > 6 and argv[2] == b"MAXLEN":
            mb = argv[3]
            if not (mb.isdigit() and len(mb) < 19):
                return False
            maxlen = int(mb)
            i = 4
        if argc - i < 3 or not (argc - i) & 1:
            return False
        idarg = argv[i]
        msb, _, seqb = idarg.partition(b"-")
        if not (msb.isdigit() and seqb.isdigit() and len(idarg) < 48):
            return False
        ms = int(msb)
        seq = int(seqb)
        if ms > SEQ_MAX or seq > SEQ_MAX or not (ms or seq):
            return False
        key = argv[1]
        if key != self.run_key or maxlen != self.run_maxlen:
            if self.run_sids:
                self.flush_run()
            if type(self.server.db.get(key)) is not Stream:
                return False  # a new key (or another type): the dispatch creates or refuses
            self.run_key = key
            self.run_maxlen = maxlen
        self.run_sids.append(ms << 64 | seq)
        self.run_fields.append(argv[i + 1:])
        self.run_argvs.append(argv)
        return True

    def _direct(self, argv: list[bytes]) -> bool:
        """Apply a delivery's group effect (XCLAIM of the shape propagate_xclaim writes, XACK,
        XGROUP SETID) straight through its handler: what `call()` does around it (the command
        time, stats, SLOWLOG, blocked readers' wake-up) without the dispatch and its checks,
        which a primary's effects skip anyway (node/server.py `execute`, is_master). False,
        with nothing applied, for any other command, another shape, or an error: the dispatch
        runs it then, with its own error reply and counts (the handlers fail before they
        change anything)."""
        direct = self.direct.get(argv[0])
        if direct is None or len(argv) < 4:  # XACK's arity: shorter ones get the dispatch's
            return False
        fn, name = direct
        server = self.server
        client = self.client
        t0 = perf_counter_ns()
        client.last_interaction_ms = server.cmd_time_ms = time_ns() // 1000000
        try:
            reply = fn(client, argv)
        except Exception:  # ReplyError, or a bug: the dispatch reports it
            return False
        if reply is None:
            return False
        ns = perf_counter_ns() - t0
        server.stats.timed_ns(name, ns)
        if ns // 1000 >= server.slow_usec:
            server.slow_command(client, argv, argv[0].lower(), ns // 1000)
        if server.blocking.ready:
            server.blocking.serve_ready()
        return True

    def flush_run(self) -> None:
        """Apply the collected run of XADDs: what one `call()` per effect would have done (the
        entries, WATCH and blocked readers' wake-up, the dirty count, command stats)."""
        sids, fields, argvs = self.run_sids, self.run_fields, self.run_argvs
        key, maxlen = self.run_key, self.run_maxlen
        self.run_sids, self.run_fields, self.run_argvs = [], [], []
        self.run_key = None
        server = self.server
        db = server.db
        cfg = server.config
        t0 = perf_counter_ns()
        server.cmd_time_ms = time_ns() // 1000000
        done = 0
        added = 0
        total = len(sids)
        assert key is not None
        while done < total:
            s = db.get(key)
            k = 0 if type(s) is not Stream else s.append_many(
                sids[done:] if done else sids, fields[done:] if done else fields,
                cfg.stream_node_max_entries, cfg.stream_node_max_bytes, maxlen)
            if k:
                db.changed(key, True)
                server.dirty += k
                done += k
                added += k
            if done < total:  # the stream refused this one (or is gone): the dispatch says why
                argv = argvs[done]
                reply = server.execute(self.client, argv)
                if reply is not None and error_code(reply) is not None:
                    self._failed(argv, self.consumed, reply)
                done += 1
        server.stats.timed_many(b"xadd", added, (perf_counter_ns() - t0) // 1000)
        if server.blocking.ready:
            server.blocking.serve_ready()
