"""The node's RESP server: one asyncio Protocol per connection and the one dispatch path.

The hot path is synchronous: the connection (node/protocol.py) feeds hiredis, runs every
complete command through `Server.execute`, and writes all replies of the batch with one
transport.write. Nothing on it awaits; a read that must wait parks the client in
`node.blocking` and the connection stops processing (and reading) until it is released.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Protocol

import cython

from node import clients, command_table, errors, tls
from node.acl import Acl
from node.blocking import Blocked, BlockingManager
from node.client import Client
from node.cmdstats import CallStats, CommandStats
from node.commands import Handler, load_all
from node.config import Config
from node.effects import EffectLog
from node.keyspace import Keyspace
from node.latency import LatencyMonitor
from node.memlimit import MemoryLimit
from node.monitor import feed as feed_monitors
from node.preflight import preflight, rejected, unknown
from node.protocol import RespConnection
from node.resp import QUEUED, ReplyError, error, error_code
from node.slotmove import MoveStats
from node.slowlog import SlowLog
from node.writepause import WritePauses

if cython.compiled:
    from cython.cimports.posix.time import (
        CLOCK_MONOTONIC,
        CLOCK_REALTIME,
        clock_gettime,
        timespec,
    )

if TYPE_CHECKING:
    from node.cluster import ClusterState
    from node.membership.agent import Agent
    from node.metrics import NodeCollector
    from node.persistence import Persistence
    from node.replication import Replication
    from node.snapshot import ChildSaver

log = logging.getLogger("xshard.node")

_MULTI_IMMEDIATE = command_table.RUN_IN_MULTI


def _clock_ns(wall: bool) -> int:
    """time_ns() (wall) or perf_counter_ns() (CLOCK_MONOTONIC); compiled, clock_gettime
    itself: call() reads the clocks three times per command."""
    if cython.compiled:
        ts = cython.declare(timespec)
        clock_gettime(CLOCK_REALTIME if wall else CLOCK_MONOTONIC, cython.address(ts))
        return ts.tv_sec * 1000000000 + ts.tv_nsec
    return time_ns() if wall else perf_counter_ns()


def _bit_length(v: int) -> int:
    """int.bit_length of a duration in ns (the latency histogram's bucket), a C loop compiled."""
    if cython.compiled:
        n = 0
        while v:
            v >>= 1
            n += 1
        return n
    return v.bit_length()


def client_info(c: Client) -> bytes:
    """CLIENT INFO's line for ACL LOG entries (the router's too)."""
    from node.commands.connection import client_info_line
    return client_info_line(c)


def _queues_a_write(c: Client) -> bool:
    """A write among the commands of the client's transaction (EXEC counts as a write then)."""
    return any(command_table.is_write_argv(a, a[0].lower()) for a in c.multi_queue)


class Command:
    """One dispatch-table entry: what execute() needs of a command without asking the command
    table per request (compiled, its fields are C fields: node/server.pxd).

    `arity` is 0 for a container (its subcommand decides, command_table.check_arity), `write`
    -1 where it is judged per request (containers, EXEC)."""

    __slots__ = ("name", "handler", "arity", "write")

    def __init__(self, name: bytes, handler: Handler, arity: int, write: int) -> None:
        self.name = name
        self.handler = handler
        self.arity = arity
        self.write = write


class ReplyGate(Protocol):
    def hold(self, conn: Connection, data: bytes) -> bool:
        """Take `data` to send later (after an fsync); False means send it now."""


class Server:
    """Process-wide node state: key space, clients, blocking, effects and dispatch.

    It implements node.context.ServerContext, the contract the rest of the node relies on."""

    def __init__(self, config: Config, config_file: str = "") -> None:
        self.config = config
        self.config_file = config_file  # absolute path of --config, for CONFIG REWRITE
        self.loop: asyncio.AbstractEventLoop = asyncio.get_event_loop()
        self.db = Keyspace(self)
        self.blocking = BlockingManager(self)
        self.effects = EffectLog()
        self.stats = CommandStats()
        # Its per-command dict, read by call() as a C field (stats is never replaced; RESETSTAT
        # clears the dict in place).
        self._calls: dict[bytes, CallStats] = self.stats.calls
        self.slowlog = SlowLog(config)
        self.latency = LatencyMonitor(config)
        self.clients: dict[int, Client] = {}
        self.acl = Acl(self.clients, config.acllog_max_len)  # users (node/acl.py)
        self.acl.set_requirepass(config.requirepass)
        self.acl.client_info = client_info
        self.monitors: dict[int, Client] = {}  # MONITOR clients by id (node/monitor.py)
        self.next_client_id = 1
        self.start_time = time.time()
        self.run_id = os.urandom(20).hex()
        self.dirty = 0  # changes since start (rdb_changes_since_last_save counts from a save)
        self.role = "master"
        self.peak_memory = 0  # the highest RSS INFO has seen (used_memory_peak)
        self.active_expire_enabled = True  # DEBUG SET-ACTIVE-EXPIRE 0 turns the cycle off
        self.cmd_time_ms = int(time.time() * 1000)
        self.tcp_server: asyncio.AbstractServer | None = None
        # tls-port's listener and the contexts node/main.py builds from the tls-* settings
        # (node/tls.py): the server one for it, the client one for replication and MIGRATE.
        self.tls_server: asyncio.AbstractServer | None = None
        self.tls_context: ssl.SSLContext | None = None
        self.tls_client_context: ssl.SSLContext | None = None
        self.pauses_held = False  # bool(self.pauses), kept by WritePauses
        self.pauses = WritePauses(self)  # keys and slots whose writes wait (MIGRATE, slot moves)
        self.taps: list[Callable[[list[bytes]], None]] = []  # effect followers (slot moves)
        self.move_stats = MoveStats()
        # Set by persistence while `appendfsync always` holds replies until their fsync.
        self.reply_gate: ReplyGate | None = None
        # The parts node/main.py wires in; a bare Server (in-process tests) has none of them.
        self.persistence: Persistence | None = None
        self.replication: Replication | None = None
        self.child_saver: ChildSaver | None = None  # the one forked saver (snapshot, sync)
        self.agent: Agent | None = None  # etcd membership and the write fence (node/membership/agent.py)
        self.cluster: ClusterState | None = None  # set when the node is part of a cluster
        self.config_listeners: list[Callable[[str], None]] = []  # CONFIG SET, per setting
        self.shutdown_hook: Callable[[], None] | None = None  # SHUTDOWN stops the process
        # A command that ran this long (us) goes to slow_command: the smaller of the SLOWLOG
        # and latency-monitor thresholds, so that the call path makes one comparison.
        self.slow_usec = 0
        self.config_listeners.append(self._slow_threshold)
        self.config_listeners.append(self._acl_settings)
        self._slow_threshold("")
        self.oom = False  # used memory is over maxmemory (node/memlimit.py keeps it)
        self.memory_limit = MemoryLimit(self)
        self.metrics: NodeCollector | None = None  # with --metrics-port (node/metrics.py)
        # One Command per handler (load_all refuses a handler without a command-table entry).
        # `_dispatch` holds them by lower-case name, `_spelled` by the spellings clients send
        # (lower and upper case) so that execute() finds most commands without lowering the
        # name first.
        self._dispatch: dict[bytes, Command] = {}
        self._spelled: dict[bytes, Command] = {}
        for name, handler in load_all().items():
            spec = command_table.TABLE[name]
            plain = not spec.subcommands
            write = -1 if not plain or name == b"exec" else int(command_table.is_write(name))
            cmd = Command(name, handler, spec.arity if plain else 0, write)
            self._dispatch[name] = self._spelled[name] = self._spelled[name.upper()] = cmd
        # The spelling of the last command execute() found, and its Command.
        self._last_spelling: bytes | None = None
        self._last_command: Command | None = None
        # The write checks' inputs as fields, kept in step where they change: CONFIG SET (the
        # listener below), Persistence's error fields, following a primary (ReplicaSide).
        self.persistence_healthy = True
        self.following = False
        self.min_replicas_to_write = self.min_replicas_max_lag = 0
        self.replica_read_only = True
        self.config_listeners.append(self._write_check_settings)
        self._write_check_settings("")
        # Keys made ready for blocked clients (the never-replaced dict of node/blocking.py),
        # read by call() per command.
        self._ready: dict[bytes, None] = self.blocking.ready

    # --- the command path ---------------------------------------------------------------------
    def now_ms(self) -> int:
        """The time of the running command, fixed for its duration (Redis commandTimeSnapshot)."""
        return self.cmd_time_ms

    def propagate(self, argv: list[bytes]) -> None:
        """Emit one effect. It does not count as a change: handlers add to `dirty` what Redis
        adds (one per XADD, one per deleted entry, ...), and some effects (a lazy expiry's DEL,
        an XCLAIM per delivered entry) are no change in Redis's count. With no listener the
        effect log only advances its offset (node/effects.py)."""
        self.effects.emit(argv)
        if self.taps and not self.effects.replaying:
            for tap in self.taps:  # slot moves follow their slot's effects (node/slotmove.py)
                tap(argv)

    def execute(self, c: Client, argv: list[bytes]) -> bytes | None:
        """Run one client command; None means the client is now blocked.

        The checks come in Redis processCommand's order: unknown command, arity, AUTH, ACL,
        cluster redirection, then for writes the fence, MISCONF, NOREPLICAS and READONLY; inside MULTI
        the command is queued only once it passed them all."""
        raw = argv[0]
        cmd = self._last_command
        if cmd is None or raw != self._last_spelling:  # a pipeline repeats its command
            cmd = self._spelled.get(raw)
            if cmd is not None:
                self._last_spelling, self._last_command = raw, cmd
            else:
                cmd = self._dispatch.get(raw.lower())
                if cmd is None:
                    return self.reject(c, None, unknown(c, argv))
        name = cmd.name
        err = preflight(self.acl, c, argv, name, cmd.arity)
        if err is not None:
            return self.reject(c, name, err, argv)
        if not c.is_master:  # what a primary sent us (or the AOF holds) is never refused
            if self.cluster is not None:
                redirect = self._redirection(c, argv, name)
                if redirect is not None:
                    return redirect
            # EXEC counts as a write when it would run one: a transaction queued before a
            # fence (or a disk error) must not commit after it.
            write = cmd.write
            if write < 0:
                write = command_table.is_write_argv(argv, name) or (
                    name == b"exec" and c.in_multi and _queues_a_write(c))
            if write or self.oom:
                err = self.refusal(c, argv, name, write)
                if err is not None:
                    return self.reject(c, name, err, argv)
        if c.in_multi and name not in _MULTI_IMMEDIATE:
            c.multi_queue.append(argv)
            return QUEUED
        # bool(self.pauses) as a C field (WritePauses keeps it): __bool__ is an interpreted call.
        if self.pauses_held and not c.is_master and self.pauses.holds(c, argv, name):
            if c.blocked is None:
                self.pauses.postpone(c, argv)
            return None
        return self.call(c, argv, name, cmd.handler)

    def _redirection(self, c: Client, argv: list[bytes], name: bytes) -> bytes | None:
        """The cluster's redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN...) for a command this
        node may not serve, else None. A redirect is no rejectCommand: EXEC drops its
        transaction, and the reply is the redirect itself."""
        err = self.cluster.check(c, argv, name)  # type: ignore[union-attr]
        if c.asking and name != b"asking" and not c.in_multi:
            c.asking = False  # ASKING covers the next command only (or one MULTI)
        if err is None:
            return None
        if name == b"exec":
            c.discard_multi()
        elif c.in_multi:
            c.multi_failed = True
        return self._refuse(name, err, argv)

    def reject(self, c: Client, name: bytes | None, message: bytes,
               argv: list[bytes] | None = None) -> bytes:
        """server.c rejectCommand: the command does not run; inside MULTI the transaction is
        flagged so that EXEC fails, and a rejected EXEC aborts it, quoting the reason
        (execCommandAbort). `name` is None for an unknown command."""
        return self._refuse(name, rejected(c, name, message), argv)

    def _refuse(self, name: bytes | None, message: bytes, argv: list[bytes] | None) -> bytes:
        """Count a refused command (rejected_calls, errorstats) and encode its error."""
        self.stats.error(message)
        if name is not None:
            st = self.stats.entry_argv(name, argv or [name])
            if st is not None:
                st.rejected += 1
        return error(message)

    # --- write checks (processCommand, in Redis's order) ----------------------------------------
    def refusal(self, c: Client, argv: list[bytes], name: bytes, write: bool) -> bytes | None:
        """Why a command may not run now, or None: the cluster fence (writes), OOM (over
        maxmemory, node/memlimit.py), then for writes MISCONF, NOREPLICAS, READONLY."""
        err = self.check_fence() if write and self.agent is not None else None
        if err is None and self.oom:
            err = self.memory_limit.check(c, argv, name)
        if err is None and write:
            if not self.persistence_healthy:
                err = self.check_misconf()
            if err is None and self.replication is not None:
                if self.min_replicas_to_write:
                    err = self.check_noreplicas()
                if err is None and self.following:
                    err = self.check_readonly()
        return err

    def check_fence(self) -> bytes | None:
        """CLUSTERDOWN on a primary whose etcd lease or role is not fresh (node/membership/agent.py):
        until the deadline of the last fence that passed (`Agent.fresh_until`) without asking."""
        agent = self.agent
        if agent is None:
            return None
        if agent.fresh_until > time.monotonic():
            return None
        return agent.fence()

    def check_misconf(self) -> bytes | None:
        """MISCONF while the AOF cannot be written or the last snapshot failed.

        The healthy case is one C field, `persistence_healthy`, kept by Persistence's setters
        of its error fields (`Persistence.healthy`): `Persistence.misconf` is an interpreted
        call that every write would otherwise pay for."""
        p = self.persistence
        if p is None or self.persistence_healthy or p.healthy:
            return None
        return p.misconf()

    def check_noreplicas(self) -> bytes | None:
        """NOREPLICAS on a primary with fewer good replicas than min-replicas-to-write."""
        r = self.replication
        if (r is not None and self.min_replicas_to_write and self.min_replicas_max_lag
                and not self.following and r.good_replicas() < self.min_replicas_to_write):
            return errors.NOREPLICAS
        return None

    def check_readonly(self) -> bytes | None:
        """READONLY on a replica (replica-read-only yes): its data comes from its primary."""
        if self.replication is not None and self.following and self.replica_read_only:
            return errors.READONLY
        return None

    def call(self, c: Client, argv: list[bytes], name: bytes, handler: Handler) -> bytes | None:
        """Redis call(): run the handler, count it, and serve keys it made ready."""
        t0 = _clock_ns(False)
        c.last_interaction_ms = self.cmd_time_ms = _clock_ns(True) // 1000000
        failed = 0
        effects = self.effects
        offset = effects.offset
        try:
            reply = handler(c, argv)
        except ReplyError as e:
            failed = 1
            self.stats.error(e.message)
            reply = error(e.message)
        except Blocked as b:
            if c.blocked is not None:  # a re-run that is still unserved: keep waiting
                reply = None
            elif c.in_exec:
                reply = b.timeout_reply(c.proto)
            else:
                b.original = argv
                self.blocking.block(c, b)
                reply = None
        except Exception as e:  # a bug must never take the node down
            log.exception("command %r failed", argv[:3])
            failed = 1
            msg = errors.internal_error(e)
            self.stats.error(msg)
            reply = error(msg)
        ns = _clock_ns(False) - t0
        b = c.blocked
        if b is not None:
            # A blocked command is one call, counted when it is released (Redis
            # updateStatsOnUnblock): here if this re-run served it, else by the blocking
            # manager on a timeout or CLIENT UNBLOCK. Its time adds up until then.
            b.usec += ns // 1000
            ns = b.usec * 1000
        usec = ns // 1000
        if b is None or reply is not None:
            st = self._calls.get(name)
            if st is None:  # a new command, or a container ('config|get' counts apart)
                st = self.stats.entry_argv(name, argv)
            if st is not None:
                st.calls += 1
                st.usec += usec
                st.failed += failed
                st.hist[_bit_length(ns)] += 1  # the latency histogram (node/cmdstats.py)
            self.stats.total_commands += 1
            if usec >= self.slow_usec:
                self.slow_command(c, argv if b is None else b.original, name, usec)
            if self.monitors:
                feed_monitors(self.monitors, c, argv if b is None else b.original)
        if effects.offset != offset:
            c.woff = effects.offset
        if self._ready and not c.in_exec:
            self.blocking.serve_ready()
        return reply

    def count_released(self, c: Client, b: Blocked, reply: bytes) -> None:
        """A blocked command released without running again (timeout, CLIENT UNBLOCK, a role
        change): one call, and an error reply counts as rejected, as in Redis 7.2+; SLOWLOG
        and MONITOR see it now (updateStatsOnUnblock)."""
        st = self.stats.timed(b.argv, b.usec)
        if b.usec >= self.slow_usec:
            self.slow_command(c, b.original, b.argv[0].lower(), b.usec)
        if self.monitors:
            feed_monitors(self.monitors, c, b.original)
        code = error_code(reply)
        if code is not None:
            self.stats.error(code)
            if st is not None:
                st.rejected += 1

    def slow_command(self, c: Client, argv: list[bytes], name: bytes, usec: int) -> None:
        """A command at or over slow_usec: SLOWLOG and the latency monitor's command events
        (`fast-command` for commands flagged fast), each by its own threshold."""
        spec = command_table.lookup(name)
        if spec is None or "skip_slowlog" not in spec.flags:  # EXEC: its commands are logged
            self.slowlog.push(c, argv, usec)
        fast = spec is not None and "fast" in spec.flags
        self.latency.add_if_needed(b"fast-command" if fast else b"command", usec // 1000)

    def _acl_settings(self, setting: str) -> None:
        if setting == "requirepass":
            self.acl.set_requirepass(self.config.requirepass)
        elif setting == "acllog-max-len":
            self.acl.log_max = self.config.acllog_max_len

    def _write_check_settings(self, setting: str) -> None:
        """The settings the write checks read, as fields (any CONFIG SET refreshes them)."""
        cfg = self.config
        self.min_replicas_to_write = cfg.min_replicas_to_write
        self.min_replicas_max_lag = cfg.min_replicas_max_lag
        self.replica_read_only = cfg.replica_read_only

    def _slow_threshold(self, setting: str) -> None:
        if setting and setting not in ("slowlog-log-slower-than", "slowlog-max-len",
                                       "latency-monitor-threshold"):
            return
        limits = [self.config.latency_monitor_threshold * 1000 or None,
                  self.slowlog.threshold()]
        self.slow_usec = min((x for x in limits if x is not None), default=1 << 62)

    def handler(self, name: bytes) -> Handler:
        return self._dispatch[name].handler

    def rerun_blocked(self, c: Client, argv: list[bytes]) -> bytes | None:
        """Re-run a blocked client's command after a key it waits on became ready."""
        b = c.blocked
        if b is not None and b.postponed:
            # A write that waited for a pause: run it again from the top (it may now be
            # redirected), and deliver its reply here; None keeps the caller from replying.
            self.blocking.unblock(c, None)
            reply = self.execute(c, argv)
            if reply is not None:
                c.unblocked(reply)
            return None
        cmd = self._dispatch[argv[0].lower()]
        c.rerunning = True
        try:
            return self.call(c, argv, cmd.name, cmd.handler)
        finally:
            c.rerunning = False

    # --- clients --------------------------------------------------------------------------------
    def add_client(self, conn: RespConnection | None, addr: str, laddr: str) -> Client:
        return clients.add_client(self, Client, conn, addr, laddr)

    def remove_client(self, c: Client) -> None:
        clients.remove_client(self, c)

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on port, and on tls-port with TLS; as in Redis, `port 0` with a tls-port
        means TLS only (without one, port 0 picks a free port)."""
        cfg = self.config
        self.tcp_server, self.tls_server, cfg.port = await tls.listen(
            self.loop, lambda: Connection(self).as_protocol(), cfg.bind.split() or ["127.0.0.1"],
            cfg.port, cfg.tls_port, self.tls_context, cfg.tcp_backlog)
        self.loop.call_later(1 / cfg.hz, self._cron)

    def _cron(self) -> None:
        """serverCron: active expiry and output-buffer soft limits, a few times a second."""
        try:
            self.cmd_time_ms = int(time.time() * 1000)
            self.stats.sample()  # INFO instantaneous_* (node/cmdstats.py)
            self.memory_limit.refresh()
            self.db.active_expire()
            if self.blocking.ready:
                self.blocking.serve_ready()
            for c in list(self.clients.values()):
                if c.conn is not None:
                    c.conn.check_output_limit()
        except Exception:
            log.exception("cron failed")
        self.loop.call_later(1 / self.config.hz, self._cron)

    def close(self) -> None:
        for srv in (self.tcp_server, self.tls_server):
            if srv is not None:
                srv.close()
        clients.close_all(self)


class Connection(RespConnection):
    """One client socket of the node (node/protocol.py does the parsing and flow control):
    replies may wait for an fsync (`appendfsync always`), and output-buffer limits apply."""

    __slots__ = ("held", "srv")

    def __init__(self, server: Server) -> None:
        super().__init__(server, server.execute)
        # `server` again, typed: C field reads on the reply path when compiled. The base's
        # `server` is untyped (the router's owner is no Server); reading it into a typed local
        # instead costs a type test and a reference per batch (+20 instructions a reply batch
        # under callgrind), and cython.cast a Python call per batch interpreted.
        self.srv = server
        self.held: list[tuple[int, bytes]] | None = None  # replies waiting for an fsync

    def _write(self, data: bytes) -> None:
        if not self._held(data):
            self.send(data)

    def _flush_replies(self, data: bytes) -> None:
        """`_write` by C calls (the read path's once per batch); a subclass (the tests') goes
        through `_write` and `send`, which it may override."""
        if type(self) is not Connection:
            self._write(data)
        elif not self._held(data):
            Connection.send(self, data)

    def _held(self, data: bytes) -> bool:
        """Not to be sent now: the connection is closing, or the reply gate keeps `data`
        until an fsync covers it."""
        if self.transport is None or self._closing:
            return True
        gate = self.srv.reply_gate
        return gate is not None and bool(gate.hold(self, data))

    def send(self, data: bytes) -> None:
        """Write to the socket now (the reply gate calls this once an fsync covered `data`)."""
        t = self.transport
        if t is None or self._closing:
            return
        self.srv.stats.net_output_bytes += len(data)
        t.write(data)
        if self._write_paused:
            self.check_output_limit()

    def check_output_limit(self) -> None:
        """client-output-buffer-limit for normal clients: hard limit, or soft for too long."""
        t, c = self.transport, self.client
        if t is None or c is None or self._closing:
            return
        over, c.obuf_soft_since = self.srv.config.obuf_over_limit(
            "normal", t.get_write_buffer_size(), c.obuf_soft_since, time.monotonic())
        if over:
            log.warning("Client id=%d addr=%s scheduled to be closed ASAP for overcoming of "
                        "output buffer limits.", c.id, c.addr)
            self.srv.stats.obuf_disconnections += 1
            self.close(force=True)

    def on_unblocked(self, reply: bytes) -> None:
        self._write(reply)
        if self.client is not None and self.client.close_after_reply:
            self.close()
            return
        self._resume_reading()
        # Commands pipelined behind the blocked one run now, outside the releasing client's
        # command so that its reply order is not disturbed.
        self.srv.loop.call_soon(self._process)
