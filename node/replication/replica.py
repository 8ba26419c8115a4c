"""The replica side of replication: this node's link to its primary.

Redis's handshake shape over RESP: PING, AUTH, REPLCONF listening-port, REPLCONF capa psync2,
then PSYNC <replid> <offset+1>. The answer is `+CONTINUE <replid>` (the primary continues from
its backlog) or `+FULLRESYNC <replid> <offset>` followed by `$<len>\\r\\n` and a snapshot (no
trailing CRLF), which is written to a temporary file as it arrives and then replaces the data
set. After either, the live stream goes to the one apply path (`EffectApplier`), which
republishes the applied bytes, so this node's offset, backlog and AOF stay byte-identical to
its primary's. Bare `\\n` lines from the primary are keepalives while it prepares a snapshot.

The replica acknowledges with `REPLCONF ACK <offset> FACK <aof-fsynced-offset>` every 100 ms
and whenever the stream carries `REPLCONF GETACK`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from typing import TYPE_CHECKING

from node import gctuning, snapshot, tlstransport
from node.effects import EffectApplier, EffectStreamError
from node.protocol import set_nodelay
from node.replication.primary import unlink
from node.resp import encode_command, error_code

if TYPE_CHECKING:
    from node.replication import Replication

log = logging.getLogger("xshard.node")

ACK_PERIOD_S = 0.1  # replicas acknowledge this often


class LinkState(enum.Enum):
    """The state of the link to the primary; the values are ROLE's names."""

    CONNECTING = "connecting"  # TCP connect in flight
    HANDSHAKE = "handshake"  # PING, AUTH, REPLCONF, PSYNC
    SYNC = "sync"  # receiving a full-sync snapshot
    CONNECTED = "connected"  # applying the live stream


class LinkError(Exception):
    """The primary said something the handshake cannot go on with; the link is dropped."""


def _error(line: bytes) -> bytes | None:
    """The code of an error reply line of the handshake (`_line()` drops the CRLF)."""
    return error_code(line + b"\r\n")


class MasterLink(asyncio.Protocol):
    """This node's connection to its primary: handshake, full or partial sync, live stream."""

    def __init__(self, side: ReplicaSide) -> None:
        self.side = side
        self.transport: asyncio.Transport | None = None
        self.state = LinkState.CONNECTING
        self.buf = bytearray()
        self.expect: list[str] = []  # replies still awaited during the handshake
        self.bulk_left = -1
        self.bulk_fd = -1
        self.bulk_path = ""
        self.bulk_size = 0
        self.full_replid = ""
        self.full_offset = 0
        self.last_io = time.monotonic()
        self.closed = False

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.closed:  # dropped (REPLICAOF changed) while connecting
            transport.abort()
            return
        set_nodelay(transport)
        self.state = LinkState.HANDSHAKE
        self.last_io = time.monotonic()
        log.info("MASTER <-> REPLICA sync started")
        self.expect = ["ping"]
        self._send([b"PING"])

    def connection_lost(self, exc: Exception | None) -> None:
        self.drop_bulk()
        if not self.closed:
            self.closed = True
            self.side.link_lost(self)

    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        side = self.side
        side.server.stats.net_repl_input_bytes += len(data)
        if self.state is LinkState.CONNECTED:
            side.apply(data)
            return
        self.buf += data
        try:
            self._advance()
        except LinkError as e:
            log.warning("%s", e)
            self.close()

    # handshake
    def _send(self, *commands: list[bytes]) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(b"".join(encode_command(a) for a in commands))

    def _line(self) -> bytes | None:
        """The next reply line, skipping the primary's bare-newline keepalives."""
        while self.buf[:1] == b"\n":
            del self.buf[:1]
        i = self.buf.find(b"\r\n")
        if i < 0:
            return None
        line = bytes(self.buf[:i])
        del self.buf[:i + 2]
        return line

    def _advance(self) -> None:
        side = self.side
        while not self.closed:
            if self.state is LinkState.SYNC:
                if not self._receive_bulk():
                    return
                continue
            if self.state is LinkState.CONNECTED:
                if self.buf:
                    rest, self.buf = bytes(self.buf), bytearray()
                    side.apply(rest)
                return
            line = self._line()
            if line is None:
                return
            what = self.expect.pop(0) if self.expect else "unexpected"
            if what == "ping":
                # NOAUTH proves the primary is alive; AUTH comes next.
                code = _error(line)
                if code is not None and code not in (b"NOAUTH", b"NOPERM") and \
                        not line.startswith(b"-ERR operation not permitted"):
                    raise LinkError(f"Error reply to PING from master: '{line.decode(errors='replace')}'")
                self._send_replconf()
            elif what == "auth":
                if _error(line) is not None:
                    raise LinkError(f"Unable to AUTH to MASTER: {line.decode(errors='replace')}")
            elif what in ("port", "ip", "capa"):
                if _error(line) is not None:
                    log.info("(Non critical) Master does not understand REPLCONF %s: %s", what,
                             line.decode(errors="replace"))
                if not self.expect:
                    replid, offset = side.repl.psync_position()
                    log.info("Trying a partial resynchronization (request %s:%d).", replid,
                             offset + 1)
                    self.expect.append("psync")
                    self._send([b"PSYNC", replid.encode(), b"%d" % (offset + 1)])
            elif what == "psync":
                self._psync_reply(line)
            else:
                raise LinkError(f"Unexpected reply from master: {line[:100]!r}")

    def _send_replconf(self) -> None:
        cfg = self.side.server.config
        cmds = []
        if cfg.masterauth:
            self.expect.append("auth")
            cmds.append([b"AUTH", cfg.masteruser.encode(), cfg.masterauth.encode()]
                        if cfg.masteruser else [b"AUTH", cfg.masterauth.encode()])
        # Redis announces the port its primary could reach it on over the same kind of link.
        port = cfg.replica_announce_port or (
            cfg.tls_port if cfg.tls_replication and cfg.tls_port else cfg.port)
        self.expect.append("port")
        cmds.append([b"REPLCONF", b"listening-port", b"%d" % port])
        if cfg.replica_announce_ip:
            self.expect.append("ip")
            cmds.append([b"REPLCONF", b"ip-address", cfg.replica_announce_ip.encode()])
        self.expect.append("capa")
        cmds.append([b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
        self._send(*cmds)

    def _psync_reply(self, line: bytes) -> None:
        words = line.split()
        if words[:1] == [b"+FULLRESYNC"] and len(words) >= 3:
            self.full_replid = words[1].decode()
            self.full_offset = int(words[2])
            log.info("Full resync from master: %s:%d", self.full_replid, self.full_offset)
            self.state = LinkState.SYNC
            self.bulk_left = -1
            return
        if words[:1] == [b"+CONTINUE"]:
            new = words[1].decode() if len(words) > 1 else self.side.repl.replid
            log.info("Successful partial resynchronization with master.")
            self.side.continued(new)
            self.state = LinkState.CONNECTED
            return
        raise LinkError(f"Unexpected reply to PSYNC from master: {line.decode(errors='replace')}")

    def _receive_bulk(self) -> bool:
        """Write the snapshot to a temp file as it arrives; False while more is needed."""
        if self.bulk_left < 0:
            line = self._line()
            if line is None:
                return False
            if _error(line) is not None:
                raise LinkError(f"Master aborted the sync: {line.decode(errors='replace')}")
            if line[:1] != b"$":
                raise LinkError(f"Bad protocol from MASTER, the first byte is not '$': {line[:50]!r}")
            self.bulk_left = self.bulk_size = int(line[1:])
            self.bulk_path = f"temp-{os.getpid()}-{int(time.time() * 1000)}.xsnap"
            self.bulk_fd = os.open(self.bulk_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            log.info("MASTER <-> REPLICA sync: receiving %d bytes from master to disk",
                     self.bulk_size)
        if self.bulk_left:
            n = min(self.bulk_left, len(self.buf))
            if n:
                view = memoryview(self.buf)
                try:
                    os.write(self.bulk_fd, view[:n])
                finally:
                    view.release()
                del self.buf[:n]
                self.bulk_left -= n
            if self.bulk_left:
                return False
        os.close(self.bulk_fd)
        self.bulk_fd = -1
        path, self.bulk_path = self.bulk_path, ""
        try:
            self.side.load_full_sync(path, self.full_replid, self.full_offset)
        finally:
            unlink(path)
        self.state = LinkState.CONNECTED
        return True

    def drop_bulk(self) -> None:
        if self.bulk_fd >= 0:
            os.close(self.bulk_fd)
            self.bulk_fd = -1
        if self.bulk_path:
            unlink(self.bulk_path)
            self.bulk_path = ""

    def send_ack(self) -> None:
        if self.state is not LinkState.CONNECTED or self.transport is None or self.closed:
            return
        side = self.side
        self._send([b"REPLCONF", b"ACK", b"%d" % side.server.effects.offset, b"FACK",
                    b"%d" % side.fsynced_offset()])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.drop_bulk()
        if self.transport is not None:
            self.transport.abort()
        self.side.link_lost(self)


class ReplicaSide:
    """This node's primary (`Replication.replica`): connect, resync, apply, acknowledge."""

    def __init__(self, repl: Replication) -> None:
        self.repl = repl
        self.server = repl.server
        self.loop = repl.loop
        self._master_host: str | None = None
        self.master_port = 0
        self.link: MasterLink | None = None
        self.link_up_since = 0.0
        self.link_down_since = 0.0  # 0: never connected
        self.reconnect_delay = 0.1
        self._connect_handle: asyncio.TimerHandle | None = None
        self.applier: EffectApplier | None = None
        self.ack_requested = False
        self.last_ack_sent = 0.0

    @property
    def master_host(self) -> str | None:
        """The primary followed (replicaof), or None on a primary."""
        return self._master_host

    @master_host.setter
    def master_host(self, host: str | None) -> None:
        # The write path reads whether the node follows a primary as a C field of the server
        # (READONLY, NOREPLICAS: Server.refusal), kept in step here.
        self._master_host = host
        self.server.following = host is not None

    @property
    def connected(self) -> bool:
        return self.link is not None and self.link.state is LinkState.CONNECTED

    # --- following a primary ------------------------------------------------------------------
    def follow(self, host: str, port: int) -> None:
        self.drop_link()
        self.master_host, self.master_port = host, port
        log.info("Connecting to MASTER %s:%d", host, port)
        self.reconnect_delay = 0.1
        self._schedule_connect(0)

    def unfollow(self) -> None:
        """Promotion: stop following. A transaction cut in half by the lost link was never
        published or counted: drop it, as Redis does, rather than commit half of it."""
        if self.applier is not None:
            self.applier.reset_partial()
        self.drop_link()
        self.master_host, self.master_port = None, 0
        self.applier = None

    def drop_link(self) -> None:
        if self._connect_handle is not None:
            self._connect_handle.cancel()
            self._connect_handle = None
        link, self.link = self.link, None
        if link is not None:
            link.closed = True
            link.drop_bulk()
            if link.transport is not None:
                link.transport.abort()
            if self.link_up_since:
                self.link_down_since = time.monotonic()
            self.link_up_since = 0.0

    def _schedule_connect(self, delay: float) -> None:
        if self._connect_handle is not None:
            self._connect_handle.cancel()
        self._connect_handle = self.loop.call_later(delay, self._connect)

    def _connect(self) -> None:
        self._connect_handle = None
        if self.master_host is None or self.link is not None:
            return
        link = self.link = MasterLink(self)
        host, port = self.master_host, self.master_port

        async def go() -> None:
            try:
                # tls-replication: the primary's address is its TLS port (node/tls.py).
                ctx = self.server.tls_client_context if self.server.config.tls_replication \
                    else None
                await asyncio.wait_for(tlstransport.connect(self.loop, lambda: link, host, port,
                                                            ctx),
                                       timeout=self.server.config.repl_timeout)
            except (TimeoutError, OSError) as e:
                if self.link is link:
                    log.warning("Error condition on socket for SYNC: %s", e)
                    self.link = None
                    self._retry()

        self.loop.create_task(go())

    def _retry(self) -> None:
        if self.master_host is None:
            return
        delay = self.reconnect_delay
        self.reconnect_delay = min(self.reconnect_delay * 2, 1.0)
        self._schedule_connect(delay)

    def link_lost(self, link: MasterLink) -> None:
        if self.link is not link:
            return
        self.link = None
        if self.link_up_since:
            self.link_down_since = time.monotonic()
            log.info("Connection with master lost.")
        self.link_up_since = 0.0
        self._retry()

    # --- resyncs ------------------------------------------------------------------------------
    def continued(self, new_replid: str) -> None:
        """+CONTINUE: keep the data set; adopt the primary's (possibly new) replication ID."""
        self._link_up()
        self.repl.continue_history(new_replid)
        self.repl.ensure_backlog()
        if self.applier is None:
            self.applier = EffectApplier(self.server, republish=True)
        else:
            # The primary resends from the first byte we did not publish: a partial command
            # and a whole unfinished transaction.
            self.applier.reset_partial()

    def load_full_sync(self, path: str, replid: str, offset: int) -> None:
        """The primary's snapshot arrived: replace the data set and take its history."""
        t0 = time.perf_counter()
        with gctuning.paused():  # a bulk load (node/gctuning.py)
            try:
                snap = snapshot.read(path)
            except (snapshot.SnapshotError, OSError) as e:
                raise LinkError("Failed trying to load the MASTER synchronization DB from "
                                f"disk: {e}") from None
            repl = self.repl
            repl.flush()
            repl.primary.disconnect_all("replication ID changed")
            server = self.server
            snapshot.install(server, snap)
            del snap
        gctuning.settle()
        server.effects.offset = offset
        repl.ensure_backlog().reset(offset)
        repl.took_history(replid)
        self.applier = EffectApplier(server, republish=True)
        server.dirty += 1
        log.info("MASTER <-> REPLICA sync: Finished with success (%d keys, %.3f s)",
                 len(server.db.data), time.perf_counter() - t0)
        p = server.persistence
        if p is not None:
            p.dataset_replaced(path)
        self._link_up()

    def _link_up(self) -> None:
        self.link_up_since = time.monotonic()
        self.reconnect_delay = 0.1
        self.last_ack_sent = 0.0

    # --- the live stream and ACKs -------------------------------------------------------------
    def apply(self, data: bytes) -> None:
        """The live stream from the primary: through the one apply path."""
        applier = self.applier
        if applier is None:
            return
        try:
            applier.feed(data)
        except EffectStreamError as e:
            log.warning("Bad replication stream from master: %s; reconnecting", e)
            if self.link is not None:
                self.link.close()
            return
        if self.ack_requested:
            self._ack_if_requested()

    def ack_requested_by_primary(self) -> None:
        """REPLCONF GETACK in the stream: answer once the bytes fed so far are applied."""
        self.ack_requested = True
        self.loop.call_soon(self._ack_if_requested)

    def _ack_if_requested(self) -> None:
        if self.ack_requested:
            self.ack_requested = False
            self.send_ack()

    def send_ack(self) -> None:
        if self.link is not None:
            self.link.send_ack()
            self.last_ack_sent = time.monotonic()

    def fsynced_offset(self) -> int:
        p = self.server.persistence
        if p is None or not self.server.config.appendonly:
            return -1
        return int(p.synced_offset)

    # --- cron and introspection ---------------------------------------------------------------
    def cron(self, now: float) -> None:
        link = self.link
        if link is None:
            return
        if link.state is LinkState.CONNECTED and now - self.last_ack_sent >= ACK_PERIOD_S:
            self.send_ack()
        if now - link.last_io > self.server.config.repl_timeout:
            log.warning("MASTER timeout: no data nor PING received...")
            link.close()

    def link_state(self) -> str:
        """ROLE's state of the link to the primary."""
        link = self.link
        return "connect" if link is None else link.state.value

    def role_reply(self, offset: int) -> list:
        return [b"slave", (self.master_host or "").encode(), self.master_port,
                self.link_state().encode(), offset if self.connected else -1]

    def info_fields(self, now: float, offset: int) -> list[tuple[str, object]]:
        cfg = self.server.config
        link = self.link
        up = self.connected
        out: list[tuple[str, object]] = [
            ("role", "slave"), ("master_host", self.master_host),
            ("master_port", self.master_port),
            ("master_link_status", "up" if up else "down"),
            ("master_last_io_seconds_ago", int(now - link.last_io) if up and link else -1),
            ("master_sync_in_progress", int(link is not None and link.state is LinkState.SYNC))]
        if link is not None and link.state is LinkState.SYNC and link.bulk_left >= 0:
            out += [("master_sync_total_bytes", link.bulk_size),
                    ("master_sync_read_bytes", link.bulk_size - link.bulk_left),
                    ("master_sync_left_bytes", link.bulk_left),
                    ("master_sync_last_io_seconds_ago", int(now - link.last_io))]
        out += [("slave_read_repl_offset", offset), ("slave_repl_offset", offset)]
        if not up:
            out.append(("master_link_down_since_seconds",
                        int(now - self.link_down_since) if self.link_down_since else -1))
        out += [("slave_priority", cfg.replica_priority),
                ("slave_read_only", int(cfg.replica_read_only)), ("replica_announced", 1)]
        return out
