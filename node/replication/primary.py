"""The primary side of replication: replicas attached to this node, PSYNC and full syncs.

A replica connects as a client, sends REPLCONF (listening-port, capa) and then PSYNC. PSYNC
swaps the client's protocol for a `ReplicaLink`, which owns the connection from then on. The
answer is `+CONTINUE <replid>` and the backlog after the asked offset, or `+FULLRESYNC <replid>
<offset>` and a snapshot that a forked child writes (`SyncJob`; replicas that ask before the
child forks share it), streamed in bounded chunks that respect the transport's write-buffer
water marks, then the live effects buffered meanwhile (bounded by client-output-buffer-limit
`slave`). While the snapshot is being prepared the link sends a bare `\\n` every second, as
Redis does, so that the replica's timeout does not fire.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import hiredis

from node import errors, snapshot
from node.resp import OK, ReplyError, bulk_header, encode_command, status

if TYPE_CHECKING:
    from node.client import Client
    from node.replication import Replication
    from node.replication.backlog import Backlog

log = logging.getLogger("xshard.node")

ZERO_ID = "0" * 40
BULK_CHUNK = 256 * 1024  # snapshot bytes read from disk per write
BULK_TURN = 1024 * 1024  # at most this much of a snapshot is written per loop turn
WRITE_HIGH = 1024 * 1024  # transport water marks for a replica being sent a snapshot
WRITE_LOW = 256 * 1024
_PING = encode_command([b"PING"])
_GETACK = encode_command([b"REPLCONF", b"GETACK", b"*"])


class ReplicaState(enum.Enum):
    """A replica link's state; the values are INFO's names."""

    WAIT_BGSAVE = "wait_bgsave"  # the snapshot is being written; effects buffer after FULLRESYNC
    SEND_BULK = "send_bulk"  # streaming the snapshot file
    ONLINE = "online"  # live effects go straight to the socket


ONLINE = ReplicaState.ONLINE


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
            unlink(self.path)


class ReplicaLink(asyncio.Protocol):
    """A replica attached to this node: the client connection after its PSYNC.

    It has its own flow control for the replication stream and reads the replica's ACKs
    without the command path."""

    def __init__(self, primary: PrimarySide, client: Client, transport: asyncio.Transport,
                 ip: str, port: int, capa: set[bytes]) -> None:
        self.primary = primary
        self.stats = primary.repl.server.stats
        self.client = client
        self.transport = transport
        self.ip = ip
        self.port = port
        self.capa = capa
        self.state = ReplicaState.WAIT_BGSAVE
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

    @property
    def name(self) -> str:
        return f"{self.ip}:{self.port}"

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # pragma: no cover
        pass

    def data_received(self, data: bytes) -> None:
        self.stats.net_repl_input_bytes += len(data)  # INFO total_net_repl_input_bytes
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
            self.primary.repl.server.blocking.offsets_advanced()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.state is ReplicaState.SEND_BULK:
            self._send_bulk()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            log.info("Connection with replica %s lost.", self.name)
        self._cleanup()

    # sending
    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self.stats.net_repl_output_bytes += len(data)
        self.transport.write(data)

    def feed(self, data: bytes) -> None:
        """Live effects: written when online, buffered while a snapshot is on its way."""
        if self.state is ONLINE:
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
        over, self.soft_since = self.primary.repl.server.config.obuf_over_limit(
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
        self.state = ReplicaState.SEND_BULK
        self.left = job.size
        self.transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        self.write(bulk_header(job.size))
        self._send_bulk()

    def _send_bulk(self) -> None:
        if self.closed or self.state is not ReplicaState.SEND_BULK or self.file is None:
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
                self.primary.repl.loop.call_soon(self._send_bulk)
            return
        self._finish_bulk()

    def _finish_bulk(self) -> None:
        self.file.close()
        self.file = None
        if self.job is not None:
            self.job.release()
            self.job = None
        buf, self.buffer, self.buffer_len = self.buffer or [], None, 0
        self.state = ONLINE
        self.ack_time = time.monotonic()
        if buf:
            self.write(b"".join(buf))
        log.info("Synchronization with replica %s succeeded", self.name)

    def send_keepalive(self) -> None:
        if self.state is ReplicaState.WAIT_BGSAVE:
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
            if self.state is ReplicaState.SEND_BULK:
                self.job.release()
            self.job = None
        if first:
            self.primary.replica_gone(self)


class PrimarySide:
    """The replicas of this node (`Replication.primary`): handshake, resyncs, ACKs, WAIT."""

    def __init__(self, repl: Replication) -> None:
        self.repl = repl
        self.server = repl.server
        self.replicas: list[ReplicaLink] = []
        self.pending_conf: dict[int, dict[str, Any]] = {}  # client id -> REPLCONF before PSYNC
        self.jobs: list[SyncJob] = []
        self._job_seq = 0
        self._getack_pending = False
        self.last_ping = time.monotonic()
        self.last_keepalive = time.monotonic()
        # INFO stats
        self.sync_full = 0
        self.sync_partial_ok = 0
        self.sync_partial_err = 0

    # --- the handshake ------------------------------------------------------------------------
    def replconf(self, c: Client, argv: list[bytes]) -> bytes:
        """REPLCONF <option> <value> ...: options a replica sends before PSYNC."""
        if len(argv) % 2 == 0:
            raise ReplyError(errors.SYNTAX)
        opt0 = argv[1].lower()
        if opt0 == b"ack":
            return b""  # only meaningful on a replica link (ReplicaLink reads those)
        if opt0 == b"getack":
            if c.is_master:  # from our primary's stream (AOF replay has no link: a no-op)
                self.repl.replica.ack_requested_by_primary()
            return b""
        conf = self.pending_conf.setdefault(c.id, {"capa": set()})
        for i in range(1, len(argv), 2):
            opt, val = argv[i].lower(), argv[i + 1]
            if opt == b"listening-port":
                try:
                    conf["port"] = int(val)
                except ValueError:
                    raise ReplyError(errors.NOT_INTEGER) from None
            elif opt == b"ip-address":
                conf["ip"] = val.decode(errors="replace")
            elif opt == b"capa":
                conf["capa"].add(val.lower())
            elif opt in (b"rdb-only", b"rdb-filter-only"):
                pass
            else:
                raise ReplyError(errors.replconf_unrecognized(argv[i]))
        return OK

    def psync(self, c: Client, argv: list[bytes], sync: bool = False) -> bytes:
        """PSYNC replid offset / SYNC: attach `c` as a replica (partial or full resync)."""
        conn = c.conn
        if conn is None or conn.transport is None:
            return b""
        repl = self.repl
        if repl.is_replica and not repl.replica.connected:
            raise ReplyError(errors.NOMASTERLINK)
        if c.in_multi:
            raise ReplyError(errors.COMMAND_IN_MULTI)
        repl.flush()  # the backlog must end at effects.offset
        backlog = repl.ensure_backlog()
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
            reason = self._partial_refusal(want_id, want, backlog)
            if reason is None:
                transport.set_protocol(link)
                self.replicas.append(link)
                link.state = ONLINE
                link.write(status(b"CONTINUE %s" % repl.replid.encode()))
                for chunk in backlog.since(want):
                    link.write(chunk)
                self.sync_partial_ok += 1
                log.info("Partial resynchronization request from %s accepted. Sending %d bytes "
                         "of backlog starting from offset %d.", name, backlog.end - want,
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

    def _partial_refusal(self, want_id: str, want: int, backlog: Backlog) -> str | None:
        repl = self.repl
        if want_id == repl.replid:
            pass
        elif want_id == repl.replid2 and want_id != ZERO_ID:
            if want + 1 > repl.second_offset:
                return (f"Requested offset for second ID was {want + 1}, but I can reply up to "
                        f"{repl.second_offset}")
        else:
            return (f"Replication ID mismatch (Replica asked for '{want_id}', my replication IDs "
                    f"are '{repl.replid}' and '{repl.replid2}')")
        if not backlog.covers(want):
            return (f"Unable to partial resync with replica for lack of backlog (Replica request "
                    f"was: {want + 1}).")
        return None

    # --- full resyncs -------------------------------------------------------------------------
    def _full_sync(self, link: ReplicaLink, send_fullresync: bool) -> None:
        """Attach `link` to a snapshot whose child has not forked yet, or request one."""
        link.state = ReplicaState.WAIT_BGSAVE
        link.capa.add(b"-fullresync" if not send_fullresync else b"+fullresync")
        for job in self.jobs:
            if not job.forked:
                job.links.append(link)
                link.job = job
                return
        server = self.server
        saver = server.child_saver
        if saver is None:
            saver = server.child_saver = snapshot.ChildSaver(server)
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
        repl = self.repl
        repl.flush()
        job.forked = True
        job.offset = self.server.effects.offset
        for link in job.links:
            if b"-fullresync" not in link.capa:
                link.write(status(b"FULLRESYNC %s %d" % (repl.replid.encode(), job.offset)))
            link.buffer = []
            link.buffer_len = 0
        return {"ctime": int(time.time()), "offset": job.offset, **repl.snapshot_aux()}

    def _job_done(self, job: SyncJob, ok: bool) -> None:
        if job in self.jobs:
            self.jobs.remove(job)
        job.done = True
        links = [lk for lk in job.links if not lk.closed]
        if not ok:
            log.warning("BGSAVE for replication failed")
            for link in links:
                link.close("snapshot for the sync failed")
            unlink(job.path)
            return
        try:
            job.size = os.path.getsize(job.path)
        except OSError:
            job.size = -1
        if job.size < 0 or not links:
            unlink(job.path)
            for link in links:
                link.close("snapshot for the sync is missing")
            return
        job.users += 1  # held while the links start
        for link in links:
            link.start_bulk(job)
        job.release()

    # --- links come and go --------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        for link in self.replicas:
            link.feed(data)

    def replica_gone(self, link: ReplicaLink) -> None:
        if link in self.replicas:
            self.replicas.remove(link)
        self.server.remove_client(link.client)
        self.server.blocking.offsets_advanced()

    def disconnect_all(self, why: str) -> None:
        for link in list(self.replicas):
            link.close(why)

    # --- WAIT, WAITAOF, min-replicas ----------------------------------------------------------
    def acked(self, woff: int) -> int:
        """WAIT: replicas that acknowledged offset `woff`."""
        return sum(1 for lk in self.replicas if lk.state is ONLINE and lk.ack_off >= woff)

    def aof_acked(self, woff: int) -> int:
        """WAITAOF: replicas whose AOF fsync covers offset `woff`."""
        return sum(1 for lk in self.replicas if lk.state is ONLINE and lk.fack_off >= woff)

    def request_ack(self) -> None:
        """A WAIT is waiting: ask the replicas for an ACK now instead of in up to 100 ms."""
        if any(lk.state is ONLINE for lk in self.replicas) and not self._getack_pending:
            self._getack_pending = True
            self.repl.loop.call_soon(self._send_getack)

    def _send_getack(self) -> None:
        self._getack_pending = False
        if not self.repl.is_replica:
            # In the stream, so that backlog offsets stay equal to effect offsets.
            self.server.effects.publish(_GETACK)

    def good_replicas(self) -> int:
        lag = self.server.config.min_replicas_max_lag
        now = time.monotonic()
        return sum(1 for lk in self.replicas if lk.state is ONLINE and now - lk.ack_time <= lag)

    # --- cron, introspection, shutdown --------------------------------------------------------
    def cron(self, now: float) -> None:
        """PINGs in the stream, keepalives during a snapshot, timeouts, output limits."""
        cfg = self.server.config
        if self.replicas:
            if not self.repl.is_replica and now - self.last_ping >= cfg.repl_ping_replica_period:
                self.last_ping = now
                self.server.effects.publish(_PING)
            if now - self.last_keepalive >= 1.0:
                self.last_keepalive = now
                for lk in self.replicas:
                    lk.send_keepalive()
            for lk in list(self.replicas):
                if lk.state is ONLINE and now - lk.ack_time > cfg.repl_timeout:
                    lk.close("timeout")
                elif lk.state is ONLINE and lk.paused:
                    lk.check_limit(lk.transport.get_write_buffer_size())
        else:
            self.last_ping = now
        if self.pending_conf:
            clients = self.server.clients
            for cid in [cid for cid in self.pending_conf if cid not in clients]:
                del self.pending_conf[cid]

    def role_entries(self) -> list[list[bytes]]:
        return [[lk.ip.encode(), b"%d" % lk.port, b"%d" % lk.ack_off]
                for lk in self.replicas if lk.state is ONLINE]

    def info_fields(self, now: float) -> list[tuple[str, object]]:
        return [(f"slave{i}", f"ip={lk.ip},port={lk.port},state={lk.state.value},"
                              f"offset={lk.ack_off},lag={int(now - lk.ack_time)}")
                for i, lk in enumerate(self.replicas)]

    def stats_fields(self) -> list[tuple[str, object]]:
        return [("sync_full", self.sync_full), ("sync_partial_ok", self.sync_partial_ok),
                ("sync_partial_err", self.sync_partial_err)]

    def shutdown(self) -> None:
        self.disconnect_all("shutdown")
        for job in self.jobs:
            unlink(job.path)


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
