"""Replication: primary -> replica streaming of the effect log, both ends (`server.replication`).

The effect log (node/effects.py) is the replication stream: its bytes are what a replica applies
and its running length is the replication offset (DESIGN §1). This module adds, on the primary
side, a backlog of recent effect bytes, the PSYNC/SYNC handshake and the per-replica links; on
the replica side, the link to the primary: Redis's handshake shape over RESP (PING, AUTH,
REPLCONF listening-port, REPLCONF capa psync2, PSYNC replid offset+1), a full resync that loads
the primary's snapshot, or a partial one that continues from the backlog, and then the live
stream fed to the one apply path (`EffectApplier`).

Shapes on the wire follow Redis:
- `+FULLRESYNC <replid> <offset>` then `$<len>\r\n<snapshot bytes>` (no trailing CRLF), then the
  effects after <offset>; `+CONTINUE <replid>` then the backlog from the asked offset.
- While a snapshot is being prepared the primary sends a bare `\n` every second (keepalive).
- Replicas send `REPLCONF ACK <offset> FACK <aof-fsynced-offset>` every 100 ms and on GETACK.

Offsets: `effects.offset` counts bytes of effects; PSYNC asks for the next byte (offset + 1), as
Redis does. A node keeps two replication IDs: `replid` names the history it writes now and
`replid2` the history it followed before a promotion, valid up to `second_offset` (exclusive of
the first byte of the new history). That lets the sibling replicas of a promoted one continue
partially.

Nothing here blocks the loop: a full sync forks a child (ChildSaver) to write the snapshot,
streams the file in bounded chunks that respect the transport's write-buffer water marks, and
buffers the live effects per replica meanwhile (bounded by client-output-buffer-limit `slave`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import hiredis

from node import errors, snapshot
from node.effects import EffectApplier, EffectStreamError
from node.resp import encode_command

if TYPE_CHECKING:
    from node.client import Client
    from node.server import Server

log = logging.getLogger("xshard.node")

ZERO_ID = "0" * 40
ACK_PERIOD_S = 0.1  # replicas acknowledge this often (DESIGN §1)
CRON_PERIOD_S = 0.1
BULK_CHUNK = 256 * 1024  # snapshot bytes read from disk per write
BULK_TURN = 1024 * 1024  # at most this much of a snapshot is written per loop turn
WRITE_HIGH = 1024 * 1024  # transport water marks for a replica being sent a snapshot
WRITE_LOW = 256 * 1024
_PING = encode_command([b"PING"])
_GETACK = encode_command([b"REPLCONF", b"GETACK", b"*"])


def new_replid() -> str:
    return os.urandom(20).hex()


class Backlog:
    """The last `size` bytes (at least) of the effect stream, for partial resyncs.

    Held as a deque of chunks (one per flush, so a handful per loop iteration); whole chunks
    are dropped from the front while the rest still covers `size` bytes. `start` is the effect
    offset just before the first byte held, so the backlog covers offsets (start, end].
    """

    __slots__ = ("size", "chunks", "histlen", "start")

    def __init__(self, size: int, start: int) -> None:
        self.size = size
        self.chunks: deque[bytes] = deque()
        self.histlen = 0
        self.start = start

    @property
    def end(self) -> int:
        return self.start + self.histlen

    def reset(self, start: int) -> None:
        self.chunks.clear()
        self.histlen = 0
        self.start = start

    def append(self, data: bytes) -> None:
        self.chunks.append(data)
        self.histlen += len(data)
        chunks = self.chunks
        while self.histlen - len(chunks[0]) >= self.size:
            n = len(chunks.popleft())
            self.histlen -= n
            self.start += n

    def resize(self, size: int) -> None:
        self.size = size
        chunks = self.chunks
        while chunks and self.histlen - len(chunks[0]) >= size:
            n = len(chunks.popleft())
            self.histlen -= n
            self.start += n

    def covers(self, offset: int) -> bool:
        """Whether a replica that holds `offset` bytes can continue from here."""
        return self.start <= offset <= self.end

    def since(self, offset: int) -> list[bytes]:
        """The bytes after `offset` (which `covers`), as chunks."""
        skip = offset - self.start
        out = []
        for ch in self.chunks:
            if skip >= len(ch):
                skip -= len(ch)
                continue
            out.append(ch[skip:] if skip else ch)
            skip = 0
        return out


# -- primary side ---------------------------------------------------------------------------------
class SyncJob:
    """One snapshot for full resyncs: replicas that asked before its child forked share it."""

    __slots__ = ("path", "offset", "links", "forked", "done", "size", "users")

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = -1
        self.links: list[ReplicaLink] = []
        self.forked = False
        self.done = False
        self.size = 0
        self.users = 0  # links still sending the file

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and self.done:
            _unlink(self.path)


class ReplicaLink(asyncio.Protocol):
    """A replica attached to this node: the client connection after its PSYNC.

    PSYNC swaps the connection's protocol for this one (transport.set_protocol), so the
    replication stream has its own flow control and the replica's ACKs are read without the
    command path. States (INFO's names): wait_bgsave (snapshot being written; live effects are
    buffered once FULLRESYNC was sent), send_bulk (streaming the snapshot), online.
    """

    def __init__(self, repl: Replication, client: Client, transport: asyncio.Transport,
                 ip: str, port: int, capa: set[bytes]) -> None:
        self.repl = repl
        self.client = client
        self.transport = transport
        self.ip = ip
        self.port = port
        self.capa = capa
        self.state = "wait_bgsave"
        self.ack_off = 0
        self.fack_off = -1
        self.ack_time = time.monotonic()
        self.buffer: list[bytes] | None = None  # effects after the snapshot's offset
        self.buffer_len = 0
        self.job: SyncJob | None = None
        self.file: Any = None
        self.left = 0
        self.paused = False
        self.closed = False
        self.reader = hiredis.Reader()
        self.soft_since = 0.0
        self.sync_started = time.monotonic()

    @property
    def name(self) -> str:
        return f"{self.ip}:{self.port}"

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # pragma: no cover
        pass

    def data_received(self, data: bytes) -> None:
        self.repl.server.stats.net_input_bytes += len(data)
        self.reader.feed(data)
        acked = False
        while True:
            try:
                argv = self.reader.gets()
            except hiredis.ProtocolError:
                self.close("protocol error from replica")
                return
            if argv is False:
                break
            if (type(argv) is list and len(argv) >= 3 and argv[0].lower() == b"replconf"
                    and argv[1].lower() == b"ack"):
                try:
                    off = int(argv[2])
                    fack = int(argv[4]) if len(argv) >= 5 and argv[3].lower() == b"fack" else -1
                except (ValueError, IndexError):
                    continue
                self.ack_time = time.monotonic()
                if off > self.ack_off:
                    self.ack_off = off
                    acked = True
                if fack > self.fack_off:
                    self.fack_off = fack
                    acked = True
            # anything else from a replica (PING) needs no answer
        if acked:
            self.repl.server.blocking.offsets_advanced()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.state == "send_bulk":
            self._send_bulk()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            log.info("Connection with replica %s lost.", self.name)
        self._cleanup()

    # sending
    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self.repl.server.stats.net_output_bytes += len(data)
        self.transport.write(data)

    def feed(self, data: bytes) -> None:
        """Live effects: written when online, buffered while a snapshot is on its way."""
        if self.state == "online":
            self.write(data)
            if self.paused:
                self.check_limit(self.transport.get_write_buffer_size())
        elif self.buffer is not None:
            self.buffer.append(data)
            self.buffer_len += len(data)
            self.check_limit(self.buffer_len + self.transport.get_write_buffer_size())

    def check_limit(self, size: int) -> None:
        """client-output-buffer-limit slave: a replica too far behind is dropped (it will
        resync) instead of growing the primary's memory without bound."""
        over, self.soft_since = self.repl.server.config.obuf_over_limit(
            "slave", size, self.soft_since, time.monotonic())
        if over:
            log.warning("Client %s (replica) scheduled to be closed ASAP for overcoming of "
                        "output buffer limits.", self.name)
            self.close("output buffer limit", abort=True)

    def start_bulk(self, job: SyncJob) -> None:
        """The snapshot is on disk: send `$<len>\r\n` and the file, in bounded chunks."""
        try:
            self.file = open(job.path, "rb")  # noqa: SIM115 - closed in _finish_bulk/_cleanup
        except OSError as e:
            log.warning("Can't open the sync snapshot %s: %s", job.path, e)
            self.close("snapshot unreadable")
            return
        job.users += 1
        self.state = "send_bulk"
        self.left = job.size
        self.transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        self.write(b"$%d\r\n" % job.size)
        self._send_bulk()

    def _send_bulk(self) -> None:
        if self.closed or self.state != "send_bulk" or self.file is None:
            return
        sent = 0
        while self.left and not self.paused and sent < BULK_TURN:
            chunk = self.file.read(min(BULK_CHUNK, self.left))
            if not chunk:
                self.close("snapshot file shorter than expected")
                return
            self.left -= len(chunk)
            sent += len(chunk)
            self.write(chunk)
        if self.left:
            if not self.paused:  # yield to the loop, then go on
                self.repl.loop.call_soon(self._send_bulk)
            return
        self._finish_bulk()

    def _finish_bulk(self) -> None:
        self.file.close()
        self.file = None
        if self.job is not None:
            self.job.release()
            self.job = None
        buf, self.buffer, self.buffer_len = self.buffer or [], None, 0
        self.state = "online"
        self.ack_time = time.monotonic()
        if buf:
            self.write(b"".join(buf))
        log.info("Synchronization with replica %s succeeded", self.name)

    def send_keepalive(self) -> None:
        if self.state == "wait_bgsave":
            self.write(b"\n")

    def close(self, why: str, abort: bool = False) -> None:
        if self.closed:
            return
        log.info("Closing replica %s: %s", self.name, why)
        self._cleanup()
        if abort:
            self.transport.abort()
        else:
            self.transport.close()

    def _cleanup(self) -> None:
        first = not self.closed
        self.closed = True
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.job is not None:
            if self in self.job.links:
                self.job.links.remove(self)
            if self.state == "send_bulk":
                self.job.release()
            self.job = None
        if first:
            self.repl._replica_gone(self)


# -- replica side ---------------------------------------------------------------------------------
class MasterLink(asyncio.Protocol):
    """This node's connection to its primary: handshake, full or partial sync, live stream."""

    def __init__(self, repl: Replication) -> None:
        self.repl = repl
        self.transport: asyncio.Transport | None = None
        self.state = "connecting"  # handshake, sync, connected
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
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.state = "handshake"
        self.last_io = time.monotonic()
        log.info("MASTER <-> REPLICA sync started")
        self.expect = ["ping"]
        self._send([b"PING"])

    def connection_lost(self, exc: Exception | None) -> None:
        was = self.state
        self._drop_bulk()
        if not self.closed:
            self.closed = True
            self.repl._master_link_lost(self, was)

    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        repl = self.repl
        repl.server.stats.net_input_bytes += len(data)
        if self.state == "connected":
            repl.apply(data)
            return
        self.buf += data
        try:
            self._advance()
        except _LinkError as e:
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
        repl = self.repl
        while not self.closed:
            if self.state == "sync":
                if not self._receive_bulk():
                    return
                continue
            if self.state == "connected":
                if self.buf:
                    rest, self.buf = bytes(self.buf), bytearray()
                    repl.apply(rest)
                return
            line = self._line()
            if line is None:
                return
            what = self.expect.pop(0) if self.expect else "unexpected"
            if what == "ping":
                # NOAUTH proves the primary is alive; AUTH comes next.
                if line[:1] == b"-" and not line.startswith((b"-NOAUTH", b"-NOPERM",
                                                              b"-ERR operation not permitted")):
                    raise _LinkError(f"Error reply to PING from master: '{line.decode(errors='replace')}'")
                cfg = repl.server.config
                cmds = []
                if cfg.masterauth:
                    self.expect.append("auth")
                    cmds.append([b"AUTH", cfg.masteruser.encode(), cfg.masterauth.encode()]
                                if cfg.masteruser else [b"AUTH", cfg.masterauth.encode()])
                port = cfg.replica_announce_port or cfg.port
                self.expect.append("port")
                cmds.append([b"REPLCONF", b"listening-port", b"%d" % port])
                if cfg.replica_announce_ip:
                    self.expect.append("ip")
                    cmds.append([b"REPLCONF", b"ip-address", cfg.replica_announce_ip.encode()])
                self.expect.append("capa")
                cmds.append([b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
                self._send(*cmds)
            elif what == "auth":
                if line[:1] == b"-":
                    raise _LinkError(f"Unable to AUTH to MASTER: {line.decode(errors='replace')}")
            elif what in ("port", "ip", "capa"):
                if line[:1] == b"-":
                    log.info("(Non critical) Master does not understand REPLCONF %s: %s", what,
                             line.decode(errors="replace"))
                if not self.expect:
                    replid, offset = repl.replid, repl.server.effects.offset
                    log.info("Trying a partial resynchronization (request %s:%d).", replid,
                             offset + 1)
                    self.expect.append("psync")
                    self._send([b"PSYNC", replid.encode(), b"%d" % (offset + 1)])
            elif what == "psync":
                self._psync_reply(line)
            else:
                raise _LinkError(f"Unexpected reply from master: {line[:100]!r}")

    def _psync_reply(self, line: bytes) -> None:
        repl = self.repl
        words = line.split()
        if words[:1] == [b"+FULLRESYNC"] and len(words) >= 3:
            self.full_replid = words[1].decode()
            self.full_offset = int(words[2])
            log.info("Full resync from master: %s:%d", self.full_replid, self.full_offset)
            self.state = "sync"
            self.bulk_left = -1
            return
        if words[:1] == [b"+CONTINUE"]:
            new = words[1].decode() if len(words) > 1 else repl.replid
            log.info("Successful partial resynchronization with master.")
            repl.continued(new)
            self.state = "connected"
            return
        raise _LinkError(f"Unexpected reply to PSYNC from master: {line.decode(errors='replace')}")

    def _receive_bulk(self) -> bool:
        """Write the snapshot to a temp file as it arrives; False while more is needed."""
        if self.bulk_left < 0:
            line = self._line()
            if line is None:
                return False
            if line[:1] == b"-":
                raise _LinkError(f"Master aborted the sync: {line.decode(errors='replace')}")
            if line[:1] != b"$":
                raise _LinkError(f"Bad protocol from MASTER, the first byte is not '$': {line[:50]!r}")
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
            self.repl.load_full_sync(path, self.full_replid, self.full_offset)
        finally:
            _unlink(path)
        self.state = "connected"
        return True

    def _drop_bulk(self) -> None:
        if self.bulk_fd >= 0:
            os.close(self.bulk_fd)
            self.bulk_fd = -1
        if self.bulk_path:
            _unlink(self.bulk_path)
            self.bulk_path = ""

    def send_ack(self) -> None:
        if self.state != "connected" or self.transport is None or self.closed:
            return
        s = self.repl.server
        self._send([b"REPLCONF", b"ACK", b"%d" % s.effects.offset, b"FACK",
                    b"%d" % self.repl.fsynced_offset()])

    def close(self) -> None:
        if self.closed:
            return
        was = self.state
        self.closed = True
        self._drop_bulk()
        if self.transport is not None:
            self.transport.abort()
        self.repl._master_link_lost(self, was)


class _LinkError(Exception):
    pass


# -- the coordinator ------------------------------------------------------------------------------
class Replication:
    """`server.replication`: IDs, backlog, attached replicas and the link to a primary."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = server.loop
        cfg = server.config
        self.replid = new_replid()
        self.replid2 = ZERO_ID
        self.second_offset = -1
        p = server.persistence
        aux = getattr(p, "loaded_aux", None) or {}
        self.loaded_replid = aux.get("replid") if isinstance(aux.get("replid"), str) else None
        self.backlog = Backlog(cfg.repl_backlog_size, server.effects.offset)
        self.replicas: list[ReplicaLink] = []
        self.pending_conf: dict[int, dict[str, Any]] = {}  # client id -> REPLCONF before PSYNC
        self.jobs: list[SyncJob] = []
        self._job_seq = 0
        self._out: list[bytes] = []
        self._flush_scheduled = False
        # replica side
        self.master_host: str | None = None
        self.master_port = 0
        self.link: MasterLink | None = None
        self.link_up_since = 0.0
        self.link_down_since = 0.0  # 0: never connected
        self.reconnect_delay = 0.1
        self._connect_handle: asyncio.TimerHandle | None = None
        self._connecting = False
        self.applier: EffectApplier | None = None
        self.ack_requested = False
        self.last_ack_sent = 0.0
        self.last_ping = time.monotonic()
        self.last_keepalive = time.monotonic()
        # INFO stats
        self.sync_full = 0
        self.sync_partial_ok = 0
        self.sync_partial_err = 0
        server.effects.listen(self._on_effect)
        server.config_listeners.append(self._config_changed)
        server.role = "master"

    # --- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Take the IDs of a loaded data set, connect to --replicaof if set, start the cron."""
        target = self.server.config.replicaof.split()
        if self.loaded_replid:
            if target:
                # A restarted replica continues the history it had: PSYNC with it.
                self.replid = self.loaded_replid
                aux = self.server.persistence.loaded_aux
                self.replid2 = str(aux.get("replid2", ZERO_ID))
                self.second_offset = int(aux.get("second_offset", -1))
            else:
                # A restarted primary may have lost its last writes (everysec): what replicas
                # hold beyond the loaded offset is another history. Keep the loaded one as
                # replid2, valid up to exactly what was loaded.
                self.replid2 = self.loaded_replid
                self.second_offset = self.server.effects.offset + 1
        if len(target) == 2:
            try:
                port = int(target[1])
            except ValueError:
                port = -1
            if 0 <= port <= 65535:
                self.set_master(target[0], port)
            else:
                log.warning("Ignoring replicaof '%s': invalid port", self.server.config.replicaof)
        self.loop.call_later(CRON_PERIOD_S, self._cron)

    def snapshot_aux(self) -> dict[str, Any]:
        """Written into every snapshot (persistence adds "offset")."""
        return {"replid": self.replid, "replid2": self.replid2,
                "second_offset": self.second_offset}

    @property
    def is_replica(self) -> bool:
        return self.master_host is not None

    # --- the effect stream (both roles: a replica republishes what it applies) ---------------
    def _on_effect(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Once per loop iteration: the iteration's effects go to the backlog and to every
        replica with one write each (DESIGN §6)."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        self._out = []
        self.backlog.append(data)
        for link in self.replicas:
            link.feed(data)

    # --- primary side: PSYNC, REPLCONF, ACKs -------------------------------------------------
    def replconf(self, c: Client, argv: list[bytes]) -> bytes:
        """REPLCONF <option> <value> ...: options a replica sends before PSYNC."""
        if len(argv) % 2 == 0:
            raise_reply(errors.SYNTAX)
        opt0 = argv[1].lower()
        if opt0 == b"ack":
            return b""  # only meaningful on a replica link (ReplicaLink reads those)
        if opt0 == b"getack":
            if c.is_master:  # from our primary's stream (AOF replay has no link: a no-op)
                self.ack_requested = True
                self.loop.call_soon(self._ack_if_requested)
            return b""
        conf = self.pending_conf.setdefault(c.id, {"capa": set()})
        for i in range(1, len(argv), 2):
            opt, val = argv[i].lower(), argv[i + 1]
            if opt == b"listening-port":
                try:
                    conf["port"] = int(val)
                except ValueError:
                    raise_reply(errors.NOT_INTEGER)
            elif opt == b"ip-address":
                conf["ip"] = val.decode(errors="replace")
            elif opt == b"capa":
                conf["capa"].add(val.lower())
            elif opt in (b"rdb-only", b"rdb-filter-only"):
                pass
            else:
                raise_reply(b"ERR Unrecognized REPLCONF option: %s" % argv[i])
        return b"+OK\r\n"

    def psync(self, c: Client, argv: list[bytes], sync: bool = False) -> bytes:
        """PSYNC replid offset / SYNC: attach `c` as a replica (partial or full resync)."""
        conn = c.conn
        if conn is None or conn.transport is None:
            return b""
        if self.is_replica and (self.link is None or self.link.state != "connected"):
            raise_reply(errors.NOMASTERLINK)
        if c.in_multi:
            raise_reply(b"ERR Command not allowed inside a transaction")
        self._flush()  # the backlog must end at effects.offset
        conf = self.pending_conf.pop(c.id, {"capa": set()})
        peer = (conn.transport.get_extra_info("peername") or ("?", 0))
        ip = conf.get("ip") or str(peer[0])
        port = conf.get("port", 0)
        transport = conn.transport
        link = ReplicaLink(self, c, transport, ip, port, conf["capa"])
        name = f"{ip}:{port}"
        log.info("Replica %s asks for synchronization", name)
        if not sync:
            want_id = argv[1].decode(errors="replace")
            try:
                want = int(argv[2]) - 1  # PSYNC names the next byte; we count bytes held
            except ValueError:
                want = -2
            reason = self._partial_refusal(want_id, want)
            if reason is None:
                transport.set_protocol(link)
                self.replicas.append(link)
                link.state = "online"
                link.write(b"+CONTINUE %s\r\n" % self.replid.encode())
                for chunk in self.backlog.since(want):
                    link.write(chunk)
                self.sync_partial_ok += 1
                log.info("Partial resynchronization request from %s accepted. Sending %d bytes "
                         "of backlog starting from offset %d.", name, self.backlog.end - want,
                         want + 1)
                return b""
            if want_id != "?":
                self.sync_partial_err += 1
            log.info("Partial resynchronization not accepted: %s", reason)
        transport.set_protocol(link)
        self.replicas.append(link)
        self.sync_full += 1
        self._full_sync(link, send_fullresync=not sync)
        return b""

    def _partial_refusal(self, want_id: str, want: int) -> str | None:
        if want_id == self.replid:
            pass
        elif want_id == self.replid2 and want_id != ZERO_ID:
            if want + 1 > self.second_offset:
                return (f"Requested offset for second ID was {want + 1}, but I can reply up to "
                        f"{self.second_offset}")
        else:
            return (f"Replication ID mismatch (Replica asked for '{want_id}', my replication IDs "
                    f"are '{self.replid}' and '{self.replid2}')")
        if not self.backlog.covers(want):
            return (f"Unable to partial resync with replica for lack of backlog (Replica request "
                    f"was: {want + 1}).")
        return None

    def _full_sync(self, link: ReplicaLink, send_fullresync: bool) -> None:
        """Attach `link` to a snapshot whose child has not forked yet, or request one."""
        link.state = "wait_bgsave"
        link.capa.add(b"-fullresync" if not send_fullresync else b"+fullresync")
        for job in self.jobs:
            if not job.forked:
                job.links.append(link)
                link.job = job
                return
        saver = self.server.child_saver
        if saver is None:
            saver = self.server.child_saver = snapshot.ChildSaver(self.server)
        self._job_seq += 1
        job = SyncJob(os.path.abspath(f"repl-sync-{os.getpid()}-{self._job_seq}.xsnap"))
        job.links.append(link)
        link.job = job
        self.jobs.append(job)
        log.info("Starting BGSAVE for SYNC with target: disk")
        saver.request(job.path, lambda: self._job_forking(job),
                      lambda ok, aux: self._job_done(job, ok))

    def _job_forking(self, job: SyncJob) -> dict[str, Any]:
        """At fork time: the snapshot holds exactly the effects up to now."""
        self._flush()
        job.forked = True
        job.offset = self.server.effects.offset
        for link in job.links:
            if b"-fullresync" not in link.capa:
                link.write(b"+FULLRESYNC %s %d\r\n" % (self.replid.encode(), job.offset))
            link.buffer = []
            link.buffer_len = 0
        return {"ctime": int(time.time()), "offset": job.offset, **self.snapshot_aux()}

    def _job_done(self, job: SyncJob, ok: bool) -> None:
        if job in self.jobs:
            self.jobs.remove(job)
        job.done = True
        links = [lk for lk in job.links if not lk.closed]
        if not ok:
            log.warning("BGSAVE for replication failed")
            for link in links:
                link.close("snapshot for the sync failed")
            _unlink(job.path)
            return
        try:
            job.size = os.path.getsize(job.path)
        except OSError:
            job.size = -1
        if job.size < 0 or not links:
            _unlink(job.path)
            for link in links:
                link.close("snapshot for the sync is missing")
            return
        job.users += 1  # held while the links start
        for link in links:
            link.start_bulk(job)
        job.release()

    def _replica_gone(self, link: ReplicaLink) -> None:
        if link in self.replicas:
            self.replicas.remove(link)
        self.server.remove_client(link.client)
        self.server.blocking.offsets_advanced()

    def disconnect_replicas(self) -> None:
        for link in list(self.replicas):
            link.close("replication ID changed")

    def acked_replicas(self, c: Client) -> int:
        """WAIT: replicas that acknowledged the client's last write."""
        woff = c.woff
        return sum(1 for lk in self.replicas if lk.state == "online" and lk.ack_off >= woff)

    def aof_acked_replicas(self, c: Client) -> int:
        """WAITAOF: replicas whose AOF fsync covers the client's last write."""
        woff = c.woff
        return sum(1 for lk in self.replicas if lk.state == "online" and lk.fack_off >= woff)

    def request_ack(self) -> None:
        """A WAIT is waiting: ask the replicas for an ACK now instead of in up to 100 ms."""
        if any(lk.state == "online" for lk in self.replicas) and not self._getack_pending:
            self._getack_pending = True
            self.loop.call_soon(self._send_getack)

    _getack_pending = False

    def _send_getack(self) -> None:
        self._getack_pending = False
        if not self.is_replica:
            # In the stream, so that backlog offsets stay equal to effect offsets.
            self.server.effects.publish_raw(_GETACK)

    def good_replicas(self) -> int:
        lag = self.server.config.min_replicas_max_lag
        now = time.monotonic()
        return sum(1 for lk in self.replicas if lk.state == "online" and now - lk.ack_time <= lag)

    # --- replica side ---------------------------------------------------------------------------
    def set_master(self, host: str, port: int) -> None:
        """REPLICAOF host port: follow a primary (continuing our history if it can)."""
        was_master = self.master_host is None
        self._drop_link()
        self.master_host, self.master_port = host, port
        self.server.role = "slave"
        self.server.config.replicaof = f"{host} {port}"
        if was_master:
            self._unblock_writers()
        # Our replicas must learn the new history (they will mostly continue partially).
        self.disconnect_replicas()
        log.info("Connecting to MASTER %s:%d", host, port)
        self.reconnect_delay = 0.1
        self._schedule_connect(0)

    def unset_master(self) -> None:
        """REPLICAOF NO ONE: promotion. The history followed so far stays valid as replid2."""
        if self.master_host is None:
            return
        if self.applier is not None:
            # A transaction cut in half by the lost link was never published or counted:
            # drop it, as Redis does, rather than commit half of it.
            self.applier.reset_partial()
        self._drop_link()
        self.master_host, self.master_port = None, 0
        self.server.role = "master"
        self.server.config.replicaof = ""
        self.applier = None
        self.shift_replid()
        self.disconnect_replicas()
        log.info("MASTER MODE enabled (user request from 'id=? addr=? laddr=?')")

    def shift_replid(self) -> None:
        self._flush()
        self.replid2 = self.replid
        self.second_offset = self.server.effects.offset + 1
        self.replid = new_replid()
        log.info("Setting secondary replication ID to %s, valid up to offset: %d. New "
                 "replication ID is %s", self.replid2, self.second_offset, self.replid)

    def _unblock_writers(self) -> None:
        """Clients blocked in XREADGROUP would write on a replica: release them (Redis)."""
        err = b"-%s\r\n" % errors.UNBLOCKED_ROLE_CHANGE
        for c in list(self.server.clients.values()):
            b = c.blocked
            if b is not None and b.argv and b.argv[0].lower() in (b"xreadgroup", b"wait",
                                                                   b"waitaof"):
                self.server.blocking.unblock(c, err)

    def _drop_link(self) -> None:
        if self._connect_handle is not None:
            self._connect_handle.cancel()
            self._connect_handle = None
        link, self.link = self.link, None
        if link is not None:
            link.closed = True
            link._drop_bulk()
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
                await asyncio.wait_for(
                    self.loop.create_connection(lambda: link, host, port),
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

    def _master_link_lost(self, link: MasterLink, state: str) -> None:
        if self.link is not link:
            return
        self.link = None
        if self.link_up_since:
            self.link_down_since = time.monotonic()
            log.info("Connection with master lost.")
        self.link_up_since = 0.0
        self._retry()

    def continued(self, new_replid: str) -> None:
        """+CONTINUE: keep the data set; adopt the primary's (possibly new) replication ID."""
        self._link_up()
        if new_replid != self.replid:
            self.replid2 = self.replid
            self.second_offset = self.server.effects.offset + 1
            self.replid = new_replid
            log.info("Master replication ID changed to %s", new_replid)
            self.disconnect_replicas()
        if self.applier is None:
            self.applier = EffectApplier(self.server, republish=True)
        else:
            # The primary resends from the first byte we did not publish: a partial command
            # and a whole unfinished transaction.
            self.applier.reset_partial()

    def load_full_sync(self, path: str, replid: str, offset: int) -> None:
        """The primary's snapshot arrived: replace the data set and take its history."""
        t0 = time.perf_counter()
        try:
            snap = snapshot.read(path)
        except (snapshot.SnapshotError, OSError) as e:
            raise _LinkError(f"Failed trying to load the MASTER synchronization DB from disk: {e}") from None
        self._flush()
        self.disconnect_replicas()
        snapshot.install(self.server, snap)
        self.server.effects.offset = offset
        self.backlog.reset(offset)
        self.replid, self.replid2, self.second_offset = replid, ZERO_ID, -1
        self.applier = EffectApplier(self.server, republish=True)
        self.server.dirty += 1
        log.info("MASTER <-> REPLICA sync: Finished with success (%d keys, %.3f s)",
                 len(snap.data), time.perf_counter() - t0)
        p = self.server.persistence
        if p is not None:
            p.dataset_replaced(path)
        self._link_up()

    def _link_up(self) -> None:
        self.link_up_since = time.monotonic()
        self.reconnect_delay = 0.1
        self.last_ack_sent = 0.0

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

    def _ack_if_requested(self) -> None:
        if self.ack_requested:
            self.ack_requested = False
            self._send_ack()

    def _send_ack(self) -> None:
        if self.link is not None:
            self.link.send_ack()
            self.last_ack_sent = time.monotonic()

    def fsynced_offset(self) -> int:
        p = self.server.persistence
        if p is None or not self.server.config.appendonly:
            return -1
        return int(p.synced_offset)

    # --- cron -----------------------------------------------------------------------------------
    def _cron(self) -> None:
        try:
            self._cron_once()
        except Exception:
            log.exception("replication cron failed")
        self.loop.call_later(CRON_PERIOD_S, self._cron)

    def _cron_once(self) -> None:
        now = time.monotonic()
        cfg = self.server.config
        link = self.link
        if link is not None:
            if link.state == "connected" and now - self.last_ack_sent >= ACK_PERIOD_S:
                self._send_ack()
            if now - link.last_io > cfg.repl_timeout:
                log.warning("MASTER timeout: no data nor PING received...")
                link.close()
        if self.replicas:
            if not self.is_replica and now - self.last_ping >= cfg.repl_ping_replica_period:
                self.last_ping = now
                self.server.effects.publish_raw(_PING)
            if now - self.last_keepalive >= 1.0:
                self.last_keepalive = now
                for lk in self.replicas:
                    lk.send_keepalive()
            for lk in list(self.replicas):
                if lk.state == "online" and now - lk.ack_time > cfg.repl_timeout:
                    lk.close("timeout")
                elif lk.state == "online" and lk.paused:
                    lk.check_limit(lk.transport.get_write_buffer_size())
        else:
            self.last_ping = now
        if self.pending_conf:
            for cid in [cid for cid in self.pending_conf if cid not in self.server.clients]:
                del self.pending_conf[cid]

    def _config_changed(self, name: str) -> None:
        if name == "repl-backlog-size":
            self.backlog.resize(self.server.config.repl_backlog_size)

    # --- introspection --------------------------------------------------------------------------
    def link_state(self) -> str:
        """ROLE's state of the link to the primary."""
        link = self.link
        if link is None:
            return "connect"
        if link.state == "connecting":
            return "connecting"
        if link.state == "handshake":
            return "handshake"
        if link.state == "sync":
            return "sync"
        return "connected"

    def role_reply(self) -> list[Any]:
        offset = self.server.effects.offset
        if self.master_host is not None:
            up = self.link is not None and self.link.state == "connected"
            return [b"slave", self.master_host.encode(), self.master_port,
                    self.link_state().encode(), offset if up else -1]
        return [b"master", offset,
                [[lk.ip.encode(), b"%d" % lk.port, b"%d" % lk.ack_off]
                 for lk in self.replicas if lk.state == "online"]]

    def info_fields(self) -> list[tuple[str, object]]:
        s = self.server
        cfg = s.config
        now = time.monotonic()
        out: list[tuple[str, object]] = []
        offset = s.effects.offset
        if self.master_host is not None:
            link = self.link
            up = link is not None and link.state == "connected"
            out += [("role", "slave"), ("master_host", self.master_host),
                    ("master_port", self.master_port),
                    ("master_link_status", "up" if up else "down"),
                    ("master_last_io_seconds_ago", int(now - link.last_io) if up and link else -1),
                    ("master_sync_in_progress", int(link is not None and link.state == "sync"))]
            if link is not None and link.state == "sync" and link.bulk_left >= 0:
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
        else:
            out.append(("role", "master"))
        out.append(("connected_slaves", len(self.replicas)))
        if self.master_host is None and cfg.min_replicas_to_write and cfg.min_replicas_max_lag:
            out.append(("min_slaves_good_slaves", self.good_replicas()))
        for i, lk in enumerate(self.replicas):
            out.append((f"slave{i}", f"ip={lk.ip},port={lk.port},state={lk.state},"
                                     f"offset={lk.ack_off},lag={int(now - lk.ack_time)}"))
        out += [("master_failover_state", "no-failover"), ("master_replid", self.replid),
                ("master_replid2", self.replid2), ("master_repl_offset", offset),
                ("second_repl_offset", self.second_offset), ("repl_backlog_active", 1),
                ("repl_backlog_size", self.backlog.size),
                ("repl_backlog_first_byte_offset", self.backlog.start + 1),
                ("repl_backlog_histlen", self.backlog.histlen)]
        return out

    def stats_fields(self) -> list[tuple[str, object]]:
        return [("sync_full", self.sync_full), ("sync_partial_ok", self.sync_partial_ok),
                ("sync_partial_err", self.sync_partial_err)]

    def shutdown(self) -> None:
        self._drop_link()
        for lk in list(self.replicas):
            lk.close("shutdown")
        for job in self.jobs:
            _unlink(job.path)


def raise_reply(message: bytes) -> None:
    from node.resp import ReplyError

    raise ReplyError(message)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
