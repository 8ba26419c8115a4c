"""The router: one RESP endpoint in front of every shard (DESIGN §3).

A client connection parses requests with hiredis (the node's exact parser handles inline
commands) and gives every request a *cell* in a FIFO; replies fill cells in any order and leave
in request order, so commands that went to different shards still answer in order. A command's
keys come from the node's command table and its slot from `node.slots.key_slot`, the same
code the nodes run. Replies are relayed as the bytes the node sent; they are decoded only where
the router must look inside (redirects) or merge (fan-out).

Connection-level commands (PING, HELLO, AUTH, CLIENT, COMMAND, …) run on the router with the
node's own handlers, against `node.client.Client` objects: the router offers the few server
attributes they use (`config`, `clients`, `role`, `db.unwatch_all`, `blocking.unblock`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import hiredis

from node import REDIS_VERSION, command_table, errors
from node.client import Client
from node.cluster import SlotMap, redis_id
from node.commands import COMMANDS, load_all
from node.commands.reads import parse_xread_options
from node.config import Config
from node.resp import (
    OK,
    QUEUED,
    ProtocolError,
    ReplyError,
    Verbatim,
    encode,
    encode_command,
    integer,
    null_array,
    parse_request,
    reply_end,
)
from node.server import accept_client
from node.slots import SLOTS, key_slot
from node.streamid import parse_id
from router.upstream import Pool, Upstream

log = logging.getLogger("xshard.router")

load_all()
# Connection-level commands that the router answers itself, with the node's handlers.
_LOCAL = {name: COMMANDS[name] for name in (
    b"ping", b"echo", b"auth", b"hello", b"select", b"quit", b"reset", b"readonly",
    b"readwrite", b"asking", b"client", b"command", b"time")}
_NOAUTH_OK = frozenset((b"auth", b"hello", b"quit", b"reset"))
_MULTI_IMMEDIATE = frozenset((b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"))
_NODE_ONLY = frozenset((b"debug", b"save", b"bgsave", b"bgrewriteaof", b"shutdown",
                        b"replicaof", b"slaveof", b"psync", b"sync", b"replconf", b"lastsave"))
_SUMMED = frozenset((b"del", b"unlink", b"exists", b"touch"))
_RETRYABLE = (b"-CLUSTERDOWN", b"-TRYAGAIN", b"-LOADING", b"-MASTERDOWN")
_MAX_REDIRECTS = 5
_MAX_CELLS = 20000  # pending replies per client before its reading pauses


class _Blocking:
    """What CLIENT UNBLOCK and RESET see of a client blocked through the router."""

    def __init__(self, on_unblock: Callable[[bytes | None], None]) -> None:
        self.on_unblock = on_unblock

    def timeout_reply(self, proto: int) -> bytes:
        return null_array(proto)


class RouterClient(Client):
    """A client of the router: a node client plus what routing needs to remember."""

    __slots__ = ("written", "txn_slot", "watch_conn", "watch_slot")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.written: set[tuple[str, int]] = set()  # nodes written since the last WAIT
        self.txn_slot: int | None = None
        self.watch_conn: Upstream | None = None
        self.watch_slot: int | None = None


class Router:
    """The router process's state: topology, upstream pools and clients."""

    def __init__(self, config: Config, router_id: str = "", host: str = "127.0.0.1",
                 cluster_down_timeout: float = 5.0, node_password: str = "") -> None:
        self.config = config
        self.loop = asyncio.get_event_loop()
        self.map = SlotMap()
        self.router_id = router_id or os.urandom(8).hex()
        self.host = host
        self.routers: list[tuple[str, str, int]] = []  # (id, host, port) of live routers
        self.cluster_down_timeout = cluster_down_timeout
        self.node_password = node_password
        self.pools: dict[tuple[str, int, int, bool], Pool] = {}
        self.clients: dict[int, Client] = {}
        self.next_client_id = 1
        self.role = "master"
        self.db = self  # for Client.reset / CLIENT handlers: unwatch_all
        self.blocking = self  # ... and unblock
        self.start_time = time.time()
        self.requests = 0
        self.redirects = {"moved": 0, "ask": 0}
        self.tcp_server: asyncio.AbstractServer | None = None

    # --- the facade the node's connection handlers use ----------------------------------------
    def unwatch_all(self, c: Client) -> None:
        conn = c.watch_conn
        if conn is not None:
            conn.close()
            c.watch_conn = None
        c.watched.clear()

    def unblock(self, c: Client, reply: bytes | None) -> None:
        b = c.blocked
        if isinstance(b, _Blocking):
            b.on_unblock(reply)

    # --- topology -------------------------------------------------------------------------------
    def set_topology(self, nodes: dict | None = None, shards: dict | None = None,
                     slots: list | None = None, version: int | None = None,
                     routers: list[tuple[str, str, int]] | None = None) -> None:
        self.map.update(nodes, shards, slots, version)
        if routers is not None:
            self.routers = sorted(routers)

    def node_for(self, slot: int, replica: bool) -> tuple[str, int] | None:
        shard = self.map.owner[slot]
        if shard is None:
            return None
        if replica:
            reps = self.map.replicas_of(shard)
            if reps:
                n = reps[slot % len(reps)]
                return n.host, n.port
        p = self.map.primary_of(shard)
        return None if p is None else (p.host, p.port)

    def primaries(self) -> list[tuple[str, int]]:
        out = []
        for sid in sorted(self.map.shards):
            p = self.map.primary_of(sid)
            if p is not None:
                out.append((p.host, p.port))
        return out

    def pool(self, addr: tuple[str, int], proto: int, readonly: bool = False) -> Pool:
        key = (addr[0], addr[1], proto, readonly)
        p = self.pools.get(key)
        if p is None:
            p = self.pools[key] = Pool(self.loop, addr[0], addr[1], proto, readonly,
                                       self.node_password)
        return p

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self, port: int, bind: str = "127.0.0.1") -> int:
        self.tcp_server = await self.loop.create_server(lambda: ClientConn(self), bind, port,
                                                        reuse_address=True)
        return self.tcp_server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.tcp_server is not None:
            self.tcp_server.close()
        for c in list(self.clients.values()):
            if c.conn is not None:
                c.conn.close()
        for p in self.pools.values():
            p.close()

    # --- dispatch -------------------------------------------------------------------------------
    def dispatch(self, c: Client, argv: list[bytes], cell: list) -> None:
        """Route one request; its reply (bytes) goes into `cell` whenever it is ready."""
        self.requests += 1
        conn: ClientConn = c.conn  # type: ignore[assignment]
        name = argv[0].lower()
        if command_table.lookup(name) is None:
            if c.in_multi:
                c.multi_failed = True
            return conn.fill(cell, b"-%s\r\n" % errors.unknown_command(argv[0], argv[1:]))
        err = command_table.check_arity(argv, name)
        if err is not None:
            if c.in_multi:
                c.multi_failed = True
            return conn.fill(cell, b"-%s\r\n" % err)
        if not c.authenticated and name not in _NOAUTH_OK:
            return conn.fill(cell, b"-%s\r\n" % errors.NOAUTH)
        if c.in_multi and name not in _MULTI_IMMEDIATE:
            return self._queue(c, argv, name, cell)
        local = _LOCAL.get(name)
        if local is not None:
            try:
                reply = local(c, argv)
            except ReplyError as e:
                reply = b"-%s\r\n" % e.message
            conn.fill(cell, reply)
            if c.close_after_reply:
                conn.close_when_flushed()
            return None
        special = _ROUTER_COMMANDS.get(name)
        if special is not None:
            try:
                return special(self, c, argv, cell)
            except ReplyError as e:
                return conn.fill(cell, b"-%s\r\n" % e.message)
        if name in _NODE_ONLY:
            return conn.fill(cell, b"-ERR '%s' is not supported through a router; send it to a "
                                   b"node" % argv[0])
        return self._route_keys(c, argv, name, cell)

    def _route_keys(self, c: Client, argv: list[bytes], name: bytes, cell: list) -> None:
        conn: ClientConn = c.conn  # type: ignore[assignment]
        positions = command_table.get_keys(argv)
        write = command_table.is_write_argv(argv, name)
        if not positions:  # XINFO HELP and friends: any node answers the same
            prim = self.primaries()
            if not prim:
                return conn.fill(cell, b"-CLUSTERDOWN The cluster is down\r\n")
            return self.forward(c, encode_command(argv), None, write, conn.filler(cell),
                                addr=prim[0])
        slots = [key_slot(argv[p]) for p in positions]
        if slots.count(slots[0]) != len(slots):
            return _multi_slot(self, c, argv, name, positions, slots, cell)
        if name in (b"xread", b"xreadgroup") and _block_ms(argv) is not None:
            return self._blocking(c, argv, slots[0], write, cell)
        self.forward(c, encode_command(argv), slots[0], write, conn.filler(cell))
        return None

    # --- forwarding with redirects and retries ---------------------------------------------------
    def forward(self, c: Client, data: bytes, slot: int | None, write: bool,
                done: Callable[[bytes], None], attempt: int = 0, deadline: float = 0.0,
                addr: tuple[str, int] | None = None, conn: Upstream | None = None) -> None:
        """Send `data` to the owner of `slot` (or to `addr`, or on `conn`), following MOVED/ASK
        and waiting out failovers; `done` gets the final reply bytes."""
        if conn is None:
            replica = c.readonly and not write
            if addr is None:
                addr = self.node_for(slot, replica) if slot is not None else None
                if addr is None:
                    return self._retry_later(c, data, slot, write, done, attempt, deadline,
                                             b"-CLUSTERDOWN Hash slot not served\r\n")
            if write:
                c.written.add(addr)
            conn = self.pool(addr, c.proto, replica and addr not in self.primaries()).get(c.id)

        def on_reply(r: bytes | None) -> None:
            self._on_reply(r, c, data, slot, write, done, attempt, deadline)

        conn.send(data, on_reply)

    def _on_reply(self, r: bytes | None, c: Client, data: bytes, slot: int | None, write: bool,
                  done: Callable[[bytes], None], attempt: int, deadline: float) -> None:
        if r is None:
            # The node went away with our request in flight. A failover will name a new
            # primary; until then (or the deadline) we retry. A write may have happened:
            # like any client that lost a connection, this is at-least-once.
            return self._retry_later(c, data, slot, write, done, attempt, deadline,
                                     b"-CLUSTERDOWN The cluster is down\r\n")
        if r[:1] == b"-" and attempt < _MAX_REDIRECTS:
            if r.startswith(b"-MOVED ") or r.startswith(b"-ASK "):
                kind, _slot, target = r[1:].split(b" ", 2)
                host, _, port = target.strip().rpartition(b":")
                addr = (host.decode(), int(port))
                if kind == b"MOVED":
                    self.redirects["moved"] += 1
                    return self.forward(c, data, slot, write, done, attempt + 1, deadline,
                                        addr=addr)
                self.redirects["ask"] += 1
                up = self.pool(addr, c.proto).get(c.id)
                up.send(encode_command([b"ASKING"]), lambda _r: None)
                return self.forward(c, data, slot, write, done, attempt + 1, deadline, conn=up)
            if r.startswith(_RETRYABLE) and slot is not None:
                return self._retry_later(c, data, slot, write, done, attempt, deadline, r)
        done(r)
        return None

    def _retry_later(self, c: Client, data: bytes, slot: int | None, write: bool,
                     done: Callable[[bytes], None], attempt: int, deadline: float,
                     final: bytes) -> None:
        now = time.monotonic()
        if not deadline:
            deadline = now + self.cluster_down_timeout
        if now >= deadline or c.conn is None or c.conn.closing:
            done(final)
            return
        self.loop.call_later(0.05, self.forward, c, data, slot, write, done, attempt,
                             deadline)

    # --- blocking reads --------------------------------------------------------------------------
    def _blocking(self, c: Client, argv: list[bytes], slot: int, write: bool, cell: list) -> None:
        """A BLOCK read gets its own upstream connection; the client's later requests wait, as
        they would on a node. A failover or slot move re-issues it with the time left."""
        conn: ClientConn = c.conn  # type: ignore[assignment]
        block = _block_ms(argv) or 0
        deadline = time.monotonic() + block / 1000 if block else 0.0
        state: dict[str, Any] = {"up": None, "over": False, "issued": False}

        def finish(reply: bytes | None) -> None:
            if state["over"]:
                return
            state["over"] = True
            up = state["up"]
            if up is not None:
                up.close()
            c.blocked = None
            if reply is not None:
                conn.fill(cell, reply)
                conn.resume()

        def issue(addr: tuple[str, int] | None = None, attempt: int = 0) -> None:
            if state["over"]:
                return
            if addr is None:
                addr = self.node_for(slot, c.readonly and not write)
            if addr is None:
                return self.loop.call_later(0.05, issue, None, attempt)
            args = list(argv)
            if deadline and state["issued"]:  # a re-issue gets only the time that is left
                left = int((deadline - time.monotonic()) * 1000)
                if left <= 0:
                    return finish(null_array(c.proto))
                _set_block(args, left)
            state["issued"] = True
            pool = self.pool(addr, c.proto, c.readonly and not write)
            up = state["up"] = pool.get_dedicated()
            if write:
                c.written.add(addr)

            def on_reply(r: bytes | None) -> None:
                if state["over"]:
                    return
                state["up"] = None
                pool.release(up)  # answered: the connection is clean and can serve again
                if r is None or r.startswith(_RETRYABLE):
                    return self.loop.call_later(0.05, issue, None, attempt)
                if r.startswith((b"-MOVED ", b"-ASK ")) and attempt < _MAX_REDIRECTS:
                    host, _, port = r.split(b" ", 2)[2].strip().rpartition(b":")
                    return issue((host.decode(), int(port)), attempt + 1)
                return finish(r)

            up.send(encode_command(args), on_reply)
            return None

        c.blocked = _Blocking(finish)
        conn.stall()
        issue()

    # --- transactions ------------------------------------------------------------------------------
    def _queue(self, c: Client, argv: list[bytes], name: bytes, cell: list) -> None:
        conn: ClientConn = c.conn  # type: ignore[assignment]
        for p in command_table.get_keys(argv):
            s = key_slot(argv[p])
            if c.txn_slot is None:
                c.txn_slot = s
            elif s != c.txn_slot:
                c.multi_failed = True
                return conn.fill(cell, b"-CROSSSLOT Keys in request don't hash to the same "
                                       b"slot\r\n")
        c.multi_queue.append(argv)
        return conn.fill(cell, QUEUED)

    # --- client bookkeeping ------------------------------------------------------------------------
    def add_client(self, conn: ClientConn, addr: str, laddr: str) -> Client:
        c = RouterClient(self, conn, self.next_client_id, addr, laddr)
        self.next_client_id += 1
        self.clients[c.id] = c
        return c

    def remove_client(self, c: Client) -> None:
        self.unblock(c, None)
        self.unwatch_all(c)
        self.clients.pop(c.id, None)


def _block_ms(argv: list[bytes]) -> int | None:
    """BLOCK's value in XREAD/XREADGROUP (None without BLOCK); arguments before STREAMS only."""
    for i in range(1, len(argv) - 1):
        a = argv[i].lower()
        if a == b"streams":
            return None
        if a == b"block":
            v = errors.string2ll(argv[i + 1])
            return v if v is not None and v >= 0 else None
    return None


def _set_block(argv: list[bytes], ms: int) -> None:
    for i in range(1, len(argv) - 1):
        if argv[i].lower() == b"block":
            argv[i + 1] = b"%d" % max(ms, 1)
            return


# --- the client side -------------------------------------------------------------------------------
class ClientConn(asyncio.Protocol):
    """One client socket: parse, dispatch, and write replies in request order."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader()
        self.client: Client | None = None
        self.cells: deque[list] = deque()
        self.closing = False
        self._close_after = False
        self._stalled = 0
        self._backlog: deque[list[bytes]] = deque()
        self._slow = b""
        self._paused = False
        self._write_paused = False
        self._pending = 0

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client = accept_client(self.router, self, transport)
        if self.client is None:
            self.closing = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.client is not None:
            self.router.remove_client(self.client)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._maybe_resume()

    def data_received(self, data: bytes) -> None:
        if self.closing or self.client is None:
            return
        if self._slow or (data[:1] != b"*" and self._pending == 0):
            self._slow += data
            self._parse_slow()
            return
        self.reader.feed(data)
        self._pending += len(data)
        while True:
            try:
                argv = self.reader.gets()
            except hiredis.ProtocolError as e:
                self._protocol_error(str(e).encode())
                return
            if argv is False:
                break
            self._pending = 0
            if type(argv) is not list or not all(type(a) is bytes for a in argv):
                self._protocol_error(b"expected '$', got something else")
                return
            if argv:
                self.submit(argv)
            if self.closing:
                return
        if self._pending > self.router.config.client_query_buffer_limit:
            self._protocol_error(b"query buffer limit exceeded")

    def _parse_slow(self) -> None:
        buf, pos = self._slow, 0
        cfg = self.router.config
        while True:
            try:
                argv, end = parse_request(buf, pos, cfg.proto_max_bulk_len,
                                          self.client is not None and self.client.authenticated)
            except ProtocolError as e:
                self._protocol_error(e.text)
                return
            if argv is None:
                break
            pos = end
            if type(argv) is list and argv:
                self.submit(argv)
        rest = buf[pos:]
        self._slow = b""
        if rest[:1] == b"*":
            self.data_received(rest)
        elif rest:
            self._slow = rest

    def _protocol_error(self, text: bytes) -> None:
        cell = self.new_cell()
        self.fill(cell, b"-ERR Protocol error: %s\r\n" % text)
        self.close_when_flushed()

    def submit(self, argv: list[bytes]) -> None:
        if self._stalled:
            self._backlog.append(argv)
            return
        cell = self.new_cell()
        self.router.dispatch(self.client, argv, cell)  # type: ignore[arg-type]
        if len(self.cells) > _MAX_CELLS:
            self._pause()

    # ordering of replies
    def new_cell(self) -> list:
        cell = [None]
        self.cells.append(cell)
        return cell

    def filler(self, cell: list) -> Callable[[bytes], None]:
        return lambda data: self.fill(cell, data)

    def fill(self, cell: list, data: bytes) -> None:
        cell[0] = data
        cells = self.cells
        if cells and cells[0] is cell:
            out = []
            while cells and cells[0][0] is not None:
                out.append(cells.popleft()[0])
            if self.transport is not None and not self.closing:
                self.transport.write(b"".join(out))
            if self._close_after and not cells:
                self.close()
            elif self._paused and len(cells) < _MAX_CELLS // 2:
                self._maybe_resume()

    # flow control: a blocked command holds the client's later requests, as on a node
    def stall(self) -> None:
        self._stalled += 1

    def resume(self) -> None:
        self._stalled -= 1
        while self._backlog and not self._stalled and not self.closing:
            self.submit(self._backlog.popleft())

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _maybe_resume(self) -> None:
        if self._paused and not self._write_paused and self.transport is not None \
                and not self.closing:
            self._paused = False
            self.transport.resume_reading()

    def close_when_flushed(self) -> None:
        self._close_after = True
        if not self.cells:
            self.close()

    def close(self, force: bool = False) -> None:
        if self.transport is not None and not self.closing:
            self.closing = True
            if force:
                self.transport.abort()
            else:
                self.transport.close()

    def on_unblocked(self, reply: bytes) -> None:  # node.client.Client.unblocked
        pass


# --- commands the router answers by fanning out or from its own view ------------------------------
RouterCommand = Callable[[Router, Client, list[bytes], list], None]
_ROUTER_COMMANDS: dict[bytes, RouterCommand] = {}


def router_command(*names: bytes) -> Callable[[RouterCommand], RouterCommand]:
    def register(fn: RouterCommand) -> RouterCommand:
        for n in names:
            _ROUTER_COMMANDS[n] = fn
        return fn
    return register


def gather(router: Router, c: Client, requests: list[tuple[tuple[str, int] | None, int | None,
                                                           bytes]],
           write: bool, merge: Callable[[list[bytes]], bytes], cell: list) -> None:
    """Send several requests (to an address or a slot's owner) and fill `cell` with
    merge(replies in request order); the first error reply wins."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if not requests:
        return conn.fill(cell, merge([]))
    return _gather_to(router, c, requests, write, merge, conn.filler(cell))


def _int_of(r: bytes) -> int:
    return int(r[1:-2])


def _elements(r: bytes) -> tuple[bytes, list[bytes]]:
    """(type byte, element byte strings) of an aggregate reply; a null gives (type, [])."""
    e = r.find(b"\r\n")
    n = int(r[1:e])
    pos = e + 2
    out = []
    for _ in range(max(n, 0) * (2 if r[:1] == b"%" else 1)):
        end = reply_end(r, pos)
        out.append(r[pos:end])
        pos = end
    return r[:1], out


def _bulk_value(r: bytes) -> bytes:
    e = r.find(b"\r\n")
    return r[e + 2:e + 2 + int(r[1:e])]


def _slot_groups(keys: list[bytes]) -> dict[tuple[int, int], list[int]]:
    """Key indexes grouped by slot, in first-seen order: a node refuses keys of two slots
    (-CROSSSLOT) even when it owns both. A key given twice goes to a second request for the
    same slot, so that every request names each key once and replies can be matched to
    positions by name."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, k in enumerate(keys):
        slot = key_slot(k)
        n = 0
        while any(keys[j] == k for j in groups.get((slot, n), ())):
            n += 1
        groups.setdefault((slot, n), []).append(i)
    return groups


def _multi_slot(router: Router, c: Client, argv: list[bytes], name: bytes,
                positions: list[int], slots: list[int], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if name in _SUMMED:
        keys = argv[1:]
        reqs = []
        for idx in _slot_groups(keys).values():
            reqs.append((None, key_slot(keys[idx[0]]),
                         encode_command([argv[0]] + [keys[i] for i in idx])))
        return gather(router, c, reqs, name != b"exists",
                      lambda rs: integer(sum(_int_of(r) for r in rs)), cell)
    if name in (b"xread", b"xreadgroup"):
        return _xread_fanout(router, c, argv, name, cell)
    return conn.fill(cell, b"-CROSSSLOT Keys in request don't hash to the same slot\r\n")




def _stream_reply_items(r: bytes) -> list[tuple[bytes, bytes]]:
    """[(key, the bytes that describe it)] from an XREAD reply (RESP2 array of [key, entries],
    or a RESP3 map key -> entries); [] for a null reply."""
    if r[:1] not in (b"*", b"%") or r.startswith(b"*-1"):
        return []
    kind, els = _elements(r)
    if kind == b"%":
        return [(_bulk_value(els[i]), els[i] + els[i + 1]) for i in range(0, len(els), 2)]
    return [(_bulk_value(_elements(el)[1][0]), el) for el in els]


def _first_error(keys: list[bytes], groups: list[list[int]], replies: list[bytes]) -> bytes | None:
    """The error Redis would give: the one about the earliest key in argument order. A shard
    reports its own first failing key; NOGROUP names it, other errors count from the shard's
    first key."""
    best: tuple[int, bytes] | None = None
    for idx, r in zip(groups, replies, strict=True):
        if r[:1] != b"-":
            continue
        pos = idx[0]
        start = r.find(b"No such key '")
        if start >= 0:
            end = r.find(b"' or consumer group", start)
            name = r[start + 13:end]
            pos = next((i for i in idx if keys[i] == name), pos)
        if best is None or pos < best[0]:
            best = (pos, r)
    return best[1] if best else None


def _merge_stream_replies(keys: list[bytes], groups: list[list[int]], replies: list[bytes],
                          proto: int) -> bytes:
    """One XREAD reply from the shards' replies, in request order. A shard answers for its
    keys in their order, leaving out those without entries (and repeating a key given twice),
    so its elements are matched to its key positions in sequence."""
    items: list[tuple[int, bytes]] = []
    for idx, r in zip(groups, replies, strict=True):
        j = 0
        for k, raw in _stream_reply_items(r):
            while j < len(idx) and keys[idx[j]] != k:
                j += 1
            if j == len(idx):
                break
            items.append((idx[j], raw))
            j += 1
    if not items:
        return null_array(proto)
    items.sort(key=lambda t: t[0])
    return (b"%%%d\r\n" if proto == 3 else b"*%d\r\n") % len(items) + b"".join(
        raw for _, raw in items)


def _xread_fanout(router: Router, c: Client, argv: list[bytes], name: bytes,
                  cell: list, groups_checked: bool = False) -> None:
    """XREAD over several shards: one request per shard, merged in key order. With BLOCK the
    first non-empty answer wins and the other waits are cancelled. XREADGROUP BLOCK across
    shards is served only when a non-blocking pass finds entries (no delivery can be lost)."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    try:  # argument errors come before any key's (NOGROUP, WRONGTYPE), as in Redis
        options = parse_xread_options(argv, int(time.time() * 1000))
    except ReplyError as e:
        return conn.fill(cell, b"-%s\r\n" % e.message)
    _timeout, _count, _noack, first, nkeys, group, _consumer = options
    head, keys, ids = argv[:first], argv[first:first + nkeys], argv[first + nkeys:]
    groups = _slot_groups(keys)
    if any(router.map.owner[slot] is None for slot, _ in groups):
        return conn.fill(cell, b"-CLUSTERDOWN Hash slot not served\r\n")
    block = _block_ms(argv)
    write = name == b"xreadgroup"
    order = list(groups.values())

    def merge(rs: list[bytes]) -> bytes:
        err = _first_error(keys, order, rs)
        return err if err is not None else _merge_stream_replies(keys, order, rs, c.proto)

    if write and not groups_checked:
        # One node checks every key's group before it delivers anything; across shards a
        # missing group on one shard must not leave deliveries made on another unreturned.
        return _check_groups(router, c, argv, keys, group or b"", cell)
    if block is not None and write:
        head = _without_block(head)

        def after_probe(merged: bytes) -> None:
            if merged[:1] == b"-" or _stream_reply_items(merged):
                return conn.fill(cell, merged)
            return conn.fill(cell, b"-CROSSSLOT Keys in request don't hash to the same slot\r\n")

        reqs = [(None, key_slot(keys[idx[0]]),
                 encode_command(head + [keys[i] for i in idx] + [ids[i] for i in idx]))
                for idx in groups.values()]
        _gather_to(router, c, reqs, True, merge, after_probe, merge_errors=True)
        return None
    reqs = [(None, key_slot(keys[idx[0]]),
             encode_command(head + [keys[i] for i in idx] + [ids[i] for i in idx]))
            for idx in groups.values()]
    if block is None:
        return _gather_to(router, c, reqs, write, merge, conn.filler(cell), merge_errors=True)
    # What is there already is answered at once, from every shard (as one node would); only
    # when nothing is there do the shards block, and the first to answer wins.
    probe = [(a, sl, encode_command(_without_block(head) + [keys[i] for i in idx]
                                    + [ids[i] for i in idx]))
             for (a, sl, _), idx in zip(reqs, order, strict=True)]

    conn.stall()  # the client's later requests wait while this read is in progress

    def probed(merged: bytes) -> None:
        if merged[:1] == b"-" or _stream_reply_items(merged):
            conn.fill(cell, merged)
            conn.resume()
            return
        _xread_block_fanout(router, c, reqs, keys, order, cell)  # resumes when answered

    _gather_to(router, c, probe, False, merge, probed, merge_errors=True)
    return None


def _check_groups(router: Router, c: Client, argv: list[bytes], keys: list[bytes],
                  group: bytes, cell: list) -> None:
    """XINFO GROUPS for every key, in key order; the first key whose group is missing (or
    whose value is not a stream) gets Redis's error, else the XREADGROUP goes ahead."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    reqs = [(None, key_slot(k), encode_command([b"XINFO", b"GROUPS", k])) for k in keys]

    ids = argv[len(argv) - len(keys):]

    def decide(_: bytes) -> None:
        # Per key, in order, as xreadCommand does: the group, then the ID.
        for k, r, eid in zip(keys, replies, ids, strict=True):
            if r[:1] == b"-":
                if r.startswith(b"-WRONGTYPE"):
                    return conn.fill(cell, r)
                return conn.fill(cell, b"-NOGROUP No such key '%s' or consumer group '%s' in "
                                       b"XREADGROUP with GROUP option\r\n" % (k, group))
            if not _has_group(r, group):
                return conn.fill(cell, b"-NOGROUP No such key '%s' or consumer group '%s' in "
                                       b"XREADGROUP with GROUP option\r\n" % (k, group))
            if eid == b"$":
                return conn.fill(cell, b"-%s\r\n" % errors.DOLLAR_IN_XREADGROUP)
            if eid == b"+":
                return conn.fill(cell, b"-%s\r\n" % errors.PLUS_IN_XREADGROUP)
            if eid != b">" and parse_id(eid) is None:
                return conn.fill(cell, b"-%s\r\n" % errors.INVALID_STREAM_ID)
        _xread_fanout(router, c, argv, b"xreadgroup", cell, groups_checked=True)
        return None

    replies: list[bytes] = []

    def keep(rs: list[bytes]) -> bytes:
        replies.extend(rs)
        return b""

    _gather_to(router, c, reqs, False, keep, decide, merge_errors=True)


def _has_group(reply: bytes, group: bytes) -> bool:
    """Whether an XINFO GROUPS reply lists `group` (its `name` field)."""
    r = hiredis.Reader()
    r.feed(reply)
    groups = r.gets()
    for g in groups or []:
        if isinstance(g, dict):
            if g.get(b"name") == group:
                return True
        elif isinstance(g, list) and len(g) > 1 and g[1] == group:
            return True
    return False


def _gather_to(router: Router, c: Client, reqs: list, write: bool,
               merge: Callable[[list[bytes]], bytes], done: Callable[[bytes], None],
               merge_errors: bool = False) -> None:
    """Send the requests, then done(merge(replies)); the first error wins unless
    `merge_errors` (then merge sees the errors and picks)."""
    replies: list[bytes | None] = [None] * len(reqs)
    left = [len(reqs)]

    def one(i: int) -> Callable[[bytes], None]:
        def got(r: bytes) -> None:
            replies[i] = r
            left[0] -= 1
            if left[0] == 0:
                errs = [x for x in replies if x is not None and x[:1] == b"-"]
                if errs and not merge_errors:
                    done(errs[0])
                else:
                    done(merge(replies))  # type: ignore[arg-type]
        return got

    for i, (addr, slot, data) in enumerate(reqs):
        router.forward(c, data, slot, write, one(i), addr=addr)


def _without_block(head: list[bytes]) -> list[bytes]:
    out = []
    skip = False
    for a in head:
        if skip:
            skip = False
            continue
        if a.lower() == b"block":
            skip = True
            continue
        out.append(a)
    return out


def _xread_block_fanout(router: Router, c: Client, reqs: list, keys: list[bytes],
                        order: list[list[int]], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    ups: list[Upstream] = []
    state = {"over": False, "left": len(reqs)}

    def finish(reply: bytes | None) -> None:
        if state["over"]:
            return
        state["over"] = True
        for up in ups:
            up.close()
        c.blocked = None
        if reply is not None:
            conn.fill(cell, reply)
            conn.resume()

    def got_for(i: int) -> Callable[[bytes | None], None]:
        def got(r: bytes | None) -> None:
            if state["over"]:
                return
            state["left"] -= 1
            if r is not None and r[:1] == b"-":
                return finish(r)
            if r is not None and _stream_reply_items(r):
                return finish(_merge_stream_replies(keys, [order[i]], [r], c.proto))
            if state["left"] == 0:
                finish(null_array(c.proto))
            return None
        return got

    c.blocked = _Blocking(finish)
    for i, (_addr, slot, data) in enumerate(reqs):
        addr = router.node_for(slot, c.readonly)
        if addr is None:
            finish(b"-CLUSTERDOWN Hash slot not served\r\n")
            return
        up = router.pool(addr, c.proto, c.readonly and addr not in router.primaries()) \
            .get_dedicated()
        ups.append(up)
        up.send(data, got_for(i))


@router_command(b"multi")
def _multi(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if c.in_multi:
        return conn.fill(cell, b"-ERR MULTI calls can not be nested\r\n")
    c.in_multi = True
    c.multi_queue = []
    c.multi_failed = False
    c.txn_slot = c.watch_slot if c.watch_conn is not None else None
    return conn.fill(cell, OK)


@router_command(b"discard")
def _discard(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if not c.in_multi:
        return conn.fill(cell, b"-ERR DISCARD without MULTI\r\n")
    c.in_multi = False
    c.multi_queue = []
    c.multi_failed = False
    router.unwatch_all(c)
    return conn.fill(cell, OK)


@router_command(b"exec")
def _exec(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if not c.in_multi:
        return conn.fill(cell, b"-ERR EXEC without MULTI\r\n")
    queue, failed, slot = c.multi_queue, c.multi_failed, c.txn_slot
    c.in_multi, c.multi_queue, c.multi_failed, c.txn_slot = False, [], False, None
    up = c.watch_conn
    c.watch_conn = None
    if failed:
        if up is not None:
            up.close()
        return conn.fill(cell, b"-EXECABORT Transaction discarded because of previous "
                               b"errors.\r\n")
    if not queue:
        if up is not None:
            up.close()
        return conn.fill(cell, encode([], c.proto))
    if up is None:
        addr = router.node_for(slot, False) if slot is not None else \
            (router.primaries() or [None])[0]
        if addr is None:
            return conn.fill(cell, b"-CLUSTERDOWN Hash slot not served\r\n")
        up = router.pool(addr, c.proto).get_dedicated()
    pool = router.pool((up.host, up.port), c.proto)
    if any(command_table.is_write_argv(a, a[0].lower()) for a in queue):
        c.written.add((up.host, up.port))
    conn.stall()

    def on_exec(r: bytes | None) -> None:
        pool.release(up)
        conn.fill(cell, r if r is not None else
                  b"-EXECABORT Transaction discarded because the node went away\r\n")
        conn.resume()

    data = encode_command([b"MULTI"]) + b"".join(encode_command(a) for a in queue)
    up.send(data, lambda r: None)  # +OK of MULTI
    for _ in queue:
        up.send(b"", lambda r: None)  # +QUEUED (or an error, which makes EXEC abort)
    up.send(encode_command([b"EXEC"]), on_exec)
    return None


@router_command(b"watch")
def _watch(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if c.in_multi:
        return conn.fill(cell, b"-ERR WATCH inside MULTI is not allowed\r\n")
    slots = {key_slot(k) for k in argv[1:]}
    if len(slots) > 1 or (c.watch_conn is not None and slots != {c.watch_slot}):
        return conn.fill(cell, b"-CROSSSLOT Keys in request don't hash to the same slot\r\n")
    slot = slots.pop()
    if c.watch_conn is None:
        addr = router.node_for(slot, False)
        if addr is None:
            return conn.fill(cell, b"-CLUSTERDOWN Hash slot not served\r\n")
        c.watch_conn = router.pool(addr, c.proto).get_dedicated()
        c.watch_slot = slot
    c.watch_conn.send(encode_command(argv), conn.filler(cell))
    return None


@router_command(b"unwatch")
def _unwatch(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    router.unwatch_all(c)
    c.conn.fill(cell, OK)  # type: ignore[union-attr]


@router_command(b"wait", b"waitaof")
def _wait(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    """WAIT and WAITAOF go to every node the client wrote to since its last WAIT (on the same
    pinned connection, so the node counts acks of those writes); the answer is the minimum."""
    targets = sorted(c.written) or router.primaries()
    c.written = set()
    data = encode_command(argv)
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if not targets:
        return conn.fill(cell, integer(0) if len(argv) == 3 else encode([0, 0], c.proto))
    if argv[0].lower() == b"wait":
        merge = lambda rs: integer(min(_int_of(r) for r in rs))  # noqa: E731
    else:
        def merge(rs: list[bytes]) -> bytes:
            pairs = [[_int_of(x) for x in _elements(r)[1]] for r in rs]
            return encode([min(p[0] for p in pairs), min(p[1] for p in pairs)], c.proto)
    conn.stall()
    zero = integer(0) if len(argv) == 3 else encode([0, 0], c.proto)
    replies: list[bytes] = []

    def one(r: bytes | None) -> None:
        # A node that died (or was demoted) since the write cannot vouch for it: it counts
        # as 0, which is the truth for the client's writes there, rather than an error.
        replies.append(zero if r is None or r[:1] == b"-" else r)
        if len(replies) == len(targets):
            conn.fill(cell, merge(replies))
            conn.resume()

    for addr in targets:
        # The same pinned connection that carried the writes, so the node counts their acks.
        router.pool(addr, c.proto).get(c.id).send(data, one)
    return None


@router_command(b"dbsize")
def _dbsize(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    gather(router, c, [(a, None, encode_command(argv)) for a in router.primaries()], False,
           lambda rs: integer(sum(_int_of(r) for r in rs)), cell)


@router_command(b"keys")
def _keys(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    def merge(rs: list[bytes]) -> bytes:
        els = [e for r in rs for e in _elements(r)[1]]
        return (b"*%d\r\n" % len(els)) + b"".join(els)
    gather(router, c, [(a, None, encode_command(argv)) for a in router.primaries()], False,
           merge, cell)


@router_command(b"flushall", b"flushdb")
def _flush(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    gather(router, c, [(a, None, encode_command(argv)) for a in router.primaries()], True,
           lambda rs: OK, cell)


@router_command(b"scan")
def _scan(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    """SCAN over every shard in turn. The cursor's low 8 bits name the shard, the rest is the
    node's cursor rounded down (node cursors are 63-bit key-hash positions, so rounding only
    makes a node repeat a key now and then, which SCAN allows, and never skips one)."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    prim = router.primaries()
    cursor = errors.string2ull(argv[1])
    if cursor is None:
        return conn.fill(cell, b"-ERR invalid cursor\r\n")
    idx, node_cursor = cursor & 0xFF, cursor & ~0xFF
    if idx >= len(prim):
        return conn.fill(cell, encode([b"0", []], c.proto))

    def done(r: bytes) -> None:
        if r[:1] == b"-":
            return conn.fill(cell, r)
        _, (cur, keys) = _elements(r)
        nxt = int(_bulk_value(cur))
        if nxt == 0:
            out = 0 if idx + 1 >= len(prim) else idx + 1
        else:
            out = max(nxt & ~0xFF, 0x100) | idx
        return conn.fill(cell, b"*2\r\n" + encode(b"%d" % out, c.proto) + keys)

    router.forward(c, encode_command([argv[0], b"%d" % node_cursor] + argv[2:]), None, False,
                   done, addr=prim[idx])
    return None


@router_command(b"config")
def _config(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    """CONFIG GET reads one node; CONFIG SET/RESETSTAT apply to every node."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    sub = argv[1].lower()
    nodes = [(n.host, n.port) for n in router.map.nodes.values()]
    if not nodes:
        return conn.fill(cell, b"-CLUSTERDOWN The cluster is down\r\n")
    if sub in (b"get", b"help"):
        return router.forward(c, encode_command(argv), None, False, conn.filler(cell),
                              addr=router.primaries()[0] if router.primaries() else nodes[0])
    if sub == b"rewrite":
        return conn.fill(cell, b"-ERR CONFIG REWRITE is not supported through a router\r\n")
    return gather(router, c, [(a, None, encode_command(argv)) for a in nodes], False,
                  lambda rs: OK, cell)


@router_command(b"role")
def _role(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    c.conn.fill(cell, encode([b"master", 0, []], c.proto))  # type: ignore[union-attr]


@router_command(b"info")
def _info(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    up = int(time.time() - router.start_time)
    fields = [
        "# Server", f"redis_version:{REDIS_VERSION}", "redis_mode:standalone", "xshard_role:router",
        f"process_id:{os.getpid()}", f"run_id:{redis_id(router.router_id)}",
        f"tcp_port:{router.config.port}", f"uptime_in_seconds:{up}", "",
        "# Clients", f"connected_clients:{len(router.clients)}",
        f"blocked_clients:{sum(1 for x in router.clients.values() if x.blocked)}", "",
        "# Stats", f"total_commands_processed:{router.requests}",
        f"redirects_moved:{router.redirects['moved']}",
        f"redirects_ask:{router.redirects['ask']}", "",
        "# Replication", "role:master", "connected_slaves:0", "",
        "# Cluster", "cluster_enabled:0", f"slotmap_version:{router.map.version}",
    ]
    c.conn.fill(cell, encode(Verbatim(("\r\n".join(fields) + "\r\n").encode()), c.proto))  # type: ignore[union-attr]


# --- CLUSTER: the live routers as a cluster that owns every slot ---------------------------------
def _router_ranges(router: Router) -> list[tuple[int, int, tuple[str, str, int]]]:
    routers = router.routers or [(router.router_id, router.host, router.config.port)]
    n = len(routers)
    return [(i * SLOTS // n, (i + 1) * SLOTS // n - 1, r) for i, r in enumerate(routers)]


@router_command(b"cluster")
def _cluster(router: Router, c: Client, argv: list[bytes], cell: list) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    sub = argv[1].lower()
    ranges = _router_ranges(router)
    if sub == b"slots":
        return conn.fill(cell, encode([[s, e, [h.encode(), p, redis_id(i).encode(), {}]]
                                       for s, e, (i, h, p) in ranges], c.proto))
    if sub == b"shards":
        return conn.fill(cell, encode([{
            b"slots": [s, e], b"nodes": [{
                b"id": redis_id(i).encode(), b"port": p, b"ip": h.encode(),
                b"endpoint": h.encode(), b"role": b"master", b"replication-offset": 0,
                b"health": b"online"}]} for s, e, (i, h, p) in ranges], c.proto))
    if sub == b"nodes":
        lines = []
        for s, e, (i, h, p) in ranges:
            me = "myself," if i == router.router_id else ""
            lines.append(f"{redis_id(i)} {h}:{p}@{p + 10000} {me}master - 0 0 1 connected "
                         f"{s}-{e}")
        return conn.fill(cell, encode(Verbatim(("\n".join(lines) + "\n").encode()), c.proto))
    if sub == b"info":
        ok = all(router.map.owner[s] is not None and
                 router.map.primary_of(router.map.owner[s]) is not None  # type: ignore[arg-type]
                 for s in range(0, SLOTS, 64))
        text = (f"cluster_state:{'ok' if ok else 'fail'}\r\ncluster_slots_assigned:{SLOTS}\r\n"
                f"cluster_slots_ok:{SLOTS if ok else 0}\r\ncluster_slots_pfail:0\r\n"
                f"cluster_slots_fail:{0 if ok else SLOTS}\r\n"
                f"cluster_known_nodes:{len(ranges)}\r\ncluster_size:{len(ranges)}\r\n"
                f"cluster_current_epoch:1\r\ncluster_my_epoch:1\r\n")
        return conn.fill(cell, encode(Verbatim(text.encode()), c.proto))
    if sub == b"myid":
        return conn.fill(cell, encode(redis_id(router.router_id).encode(), c.proto))
    if sub == b"keyslot":
        return conn.fill(cell, integer(key_slot(argv[2])))
    if sub in (b"countkeysinslot", b"getkeysinslot"):
        slot = errors.string2ll(argv[2])
        if slot is None or not 0 <= slot < SLOTS:
            return router.forward(c, encode_command(argv), None, False, conn.filler(cell),
                                  addr=(router.primaries() or [("127.0.0.1", 0)])[0])
        return router.forward(c, encode_command(argv), slot, False, conn.filler(cell))
    return router.forward(c, encode_command(argv), None, False, conn.filler(cell),
                          addr=(router.primaries() or [("127.0.0.1", 0)])[0])

