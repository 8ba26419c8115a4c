"""The router: one RESP endpoint in front of every shard.

A command's keys come from the node's command table and its slot from `node.slots.key_slot`,
the same code the nodes run; everything else about where a command goes comes from the same
table (router/routes.py). Replies are relayed as the bytes the node sent; they are decoded only
where the router must look inside (redirects) or merge (fan-out).

The parts, each in its own module:
- client.py: the client connection (on node/protocol.py) and its reply cells;
- routes.py: the routing table; forward.py: requests, redirects, retries, blocked reads;
- fanout.py + merge.py: commands sent to several shards and their merged replies;
- xread.py: XREAD/XREADGROUP over several slots;
- pstreams.py, pstreamwrite.py, pstreamreads.py: partitioned streams' logical names (one dict
  lookup per keyed request), their XADD and their reads;
- commands.py, transactions.py, introspection.py: what the router answers by a rule of its own;
- upstream.py: connections to the nodes; topology.py: etcd.

Connection-level commands (PING, HELLO, AUTH, CLIENT, COMMAND, ...) run on the router with the
node's own handlers, against `RouterClient` objects: the router is a `ClientContext`
(node/context.py), with small objects of its own for the parts those handlers touch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from typing import TYPE_CHECKING

from node import clients, command_table, errors, tls
from node.acl import Acl
from node.client import Client
from node.cluster import SlotMap
from node.cmdstats import CommandStats
from node.commands import load_all
from node.commands.connection import client_info_line
from node.commands.reads import parse_xread_options
from node.config import Config
from node.monitor import feed as feed_monitors
from node.preflight import preflight, rejected, unknown
from node.protocol import RespConnection
from node.resp import ReplyError, encode_command, error
from node.slots import SLOTS, key_slot
from router import aclsync, fanout, introspection, pstreamreads, pstreams, transactions  # noqa: F401 - registers router commands
from router.client import Cell, ClientConn, RouterClient, RouterCore
from router.commands import ROUTER_COMMANDS
from router.forward import BlockedRead, Forward, blocked_read, to_cell
from router.metrics import UpstreamStats
from router.outbox import Outbox
from router.pstreamwrite import relay
from router.routes import Kind, Route, build
from router.upstream import Pool
from router.xread import dollar_ids, xread_fanout

if TYPE_CHECKING:
    from node.context import Waiting

log = logging.getLogger("xshard.router")

ROUTES: dict[bytes, Route] = build(ROUTER_COMMANDS, load_all())
# The same routes by the two usual spellings of a name (xadd, XADD): a request spelled so finds
# its route without a lower() copy of its name; any other spelling goes through ROUTES.
_SPELLED: dict[bytes, Route] = {**ROUTES, **{k.upper(): v for k, v in ROUTES.items()}}
_KEYED = Kind.KEYED  # (a module global: no attribute lookup on the enum per request)
_UNKNOWN = ("", 0)  # Router.primary_addr has no entry for the shard
_CLOCK_TICK = 0.1  # seconds between updates of Router.now_ms


class RouterWatches:
    """The router's `db` for the node's connection handlers (RESET, client teardown): a
    client's watches live on its pinned upstream connection."""

    __slots__ = ()

    def unwatch_all(self, c: Client) -> None:
        transactions.unwatch_all(c)


class RouterBlocking:
    """The router's `blocking` for CLIENT UNBLOCK and client teardown: a client blocked
    through the router holds its read (router.forward.BlockedRead, router.xread.BlockedFanout)
    in `client.blocked`, and ending the read releases it."""

    __slots__ = ()

    def unblock(self, c: Client, reply: bytes | None) -> None:
        b: Waiting | None = c.blocked
        if b is not None:
            b.finish(reply)  # type: ignore[attr-defined]


class Router(RouterCore):
    """The router process's state: topology, upstream pools and clients."""

    def __init__(self, config: Config, router_id: str = "", host: str = "127.0.0.1",
                 cluster_down_timeout: float = 5.0, node_password: str = "",
                 node_user: str = "") -> None:
        self.config = config
        self.loop = asyncio.get_event_loop()
        self.outbox = Outbox(self.loop)  # writes batched per loop iteration
        self.map = SlotMap()
        # shard -> its primary's address (None: it has none), filled by node_for and emptied
        # by every topology change
        self.primary_addr: dict[str, tuple[str, int] | None] = {}
        # shard -> the pool of its primary, for RESP2 and RESP3 clients (primary_pool); emptied
        # with primary_addr
        self.primary_pools: tuple[dict[str, Pool], dict[str, Pool]] = ({}, {})
        self.slot_owner: list[str | None] = self.map.owner  # slot -> shard (SlotMap.owner)
        self.router_id = router_id or os.urandom(8).hex()
        self.host = host
        # (id, host, port, tls port) of the live routers
        self.routers: list[tuple[str, str, int, int]] = []
        self.cluster_down_timeout = cluster_down_timeout
        self.node_password = node_password
        self.node_user = node_user  # ACL user the router logs in as on the nodes ("": default)
        self.pools: dict[tuple[str, int, int, bool], Pool] = {}
        self.clients: dict[int, Client] = {}
        self.acl = Acl(self.clients)  # users (node/acl.py), shared in etcd (router/aclsync.py)
        self.acl.set_requirepass(config.requirepass)
        self.acl.client_info = client_info_line  # ACL LOG's client-info
        self.acl_sync: aclsync.AclSync | None = None  # with etcd (router/topology.py)
        self.monitors: dict[int, Client] = {}  # MONITOR clients (router/introspection.py)
        self.next_client_id = 1
        self.role = "master"
        self.db = RouterWatches()
        self.blocking = RouterBlocking()
        self.stats = CommandStats()
        self.start_time = time.time()
        self.now_ms = time.time_ns() // 1_000_000  # Router._tick keeps it
        self._clock_timer: asyncio.TimerHandle | None = None
        self.redirects = {"moved": 0, "ask": 0}
        # logical name -> its partitions (router/pstreams.py), from etcd (router/topology.py)
        self.pstreams: dict[bytes, pstreams.PStream] = {}
        self.upstream = UpstreamStats(self)  # round trips and failures (router/metrics.py)
        self.tcp_server: asyncio.AbstractServer | None = None
        self.tls_server: asyncio.AbstractServer | None = None  # --tls-port (node/tls.py)
        # --tls-cluster: nodes are reached at their tls-port with this context.
        self.tls_client_context: ssl.SSLContext | None = None

    # --- topology -------------------------------------------------------------------------------
    def set_topology(self, nodes: dict | None = None, shards: dict | None = None,
                     slots: list | None = None, version: int | None = None,
                     routers: list[tuple[str, str, int, int]] | None = None) -> None:
        self.map.update(nodes, shards, slots, version)
        self.primary_addr = {}
        self.primary_pools = ({}, {})
        self.slot_owner = self.upstream.slot_owner = self.map.owner
        if routers is not None:
            self.routers = sorted(routers)

    def node_for(self, slot: int, replica: bool) -> tuple[str, int] | None:
        shard = self.slot_owner[slot]
        if shard is None:
            return None
        if replica:
            reps = self.map.replicas_of(shard)
            if reps:
                n = reps[slot % len(reps)]
                return n.host, n.client_port(self.tls)
        addr = self.primary_addr.get(shard, _UNKNOWN)
        if addr is _UNKNOWN:  # once per shard and topology change, not per request
            p = self.map.primary_of(shard)
            addr = self.primary_addr[shard] = (
                None if p is None else (p.host, p.client_port(self.tls)))
        return addr

    def primary_pool(self, slot: int, proto: int) -> Pool | None:
        """The pool of `slot`'s primary for a client of protocol `proto` (None: the shard has
        no primary): what most requests need, found by one dict lookup per request."""
        shard = self.slot_owner[slot]
        if shard is None:
            return None
        pools = self.primary_pools[proto == 3]
        p = pools.get(shard)
        if p is None:
            addr = self.node_for(slot, False)
            if addr is None:
                return None
            p = pools[shard] = self.pool(addr, proto)
        return p

    def primaries(self) -> list[tuple[str, int]]:
        out = []
        for sid in sorted(self.map.shards):
            p = self.map.primary_of(sid)
            if p is not None:
                out.append((p.host, p.client_port(self.tls)))
        return out

    def any_primary(self) -> tuple[str, int] | None:
        """Where a keyless command goes when any node answers the same."""
        prim = self.primaries()
        return prim[0] if prim else None

    def all_nodes(self) -> list[tuple[str, int]]:
        return [(n.host, n.client_port(self.tls)) for n in self.map.nodes.values()]

    @property
    def tls(self) -> bool:
        """Nodes are reached over TLS (--tls-cluster yes)."""
        return self.tls_client_context is not None

    def serves_every_slot(self) -> bool:
        owner, primary_of = self.map.owner, self.map.primary_of
        return all(owner[s] is not None and primary_of(owner[s]) is not None  # type: ignore[arg-type]
                   for s in range(0, SLOTS, 64))

    def pool(self, addr: tuple[str, int], proto: int, readonly: bool = False) -> Pool:
        key = (addr[0], addr[1], proto, readonly)
        p = self.pools.get(key)
        if p is None:
            p = self.pools[key] = Pool(self.loop, self.outbox, addr[0], addr[1], proto, readonly,
                                       self.node_password, user=self.node_user,
                                       ssl=self.tls_client_context)
        return p

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self, port: int, bind: str = "127.0.0.1", tls_port: int = 0,
                    tls_context: ssl.SSLContext | None = None) -> int:
        """Listen; returns the plain port (0 with `port 0` and a TLS port: TLS only)."""
        self.tcp_server, self.tls_server, port = await tls.listen(
            self.loop, lambda: ClientConn(self).as_protocol(), bind, port, tls_port, tls_context)
        self._tick()
        return port

    def _tick(self) -> None:
        """The wall clock in ms, cached every 100 ms as Redis caches its own (server.mstime):
        each request stores it as its client's last interaction (CLIENT LIST idle=, in
        seconds), which a clock read per request would make cost 3% of a relayed XADD."""
        self.now_ms = time.time_ns() // 1_000_000
        self._clock_timer = self.loop.call_later(_CLOCK_TICK, self._tick)

    def close(self) -> None:
        if self._clock_timer is not None:
            self._clock_timer.cancel()
            self._clock_timer = None
        for srv in (self.tcp_server, self.tls_server):
            if srv is not None:
                srv.close()
        clients.close_all(self)
        for p in self.pools.values():
            p.close()

    # --- dispatch -------------------------------------------------------------------------------
    def dispatch(self, c: RouterClient, argv: list[bytes], cell: Cell,
                 raw: bytes | None = None) -> None:
        """Route one request; its reply goes into `cell` whenever it is ready. `raw`: the
        bytes the client sent for exactly this request, relayed as they are when the request
        goes to one node unchanged (None: it is encoded again)."""
        self.stats.total_commands += 1
        c.last_interaction_ms = self.now_ms  # CLIENT LIST idle=, as a node's call() sets it
        if self.monitors:
            feed_monitors(self.monitors, c, argv)
        conn: ClientConn = c.conn  # type: ignore[assignment]
        route = _SPELLED.get(argv[0])
        if route is None:
            route = ROUTES.get(argv[0].lower())
            if route is None:
                return conn.fill(cell, error(rejected(c, None, unknown(c, argv))))
        # The node's own checks (node/preflight.py): arity, AUTH, ACL; a denied command never
        # reaches a node.
        name = route.name
        err = preflight(self.acl, c, argv, name, route.arity)
        if err is not None:
            return conn.fill(cell, error(rejected(c, name, err)))
        if route.subs is not None and len(argv) > 1:
            route = route.subs[argv[1].lower()]
        if c.in_multi and not route.run_in_multi:
            if self.pstreams and pstreams.names_one(self, argv):
                c.multi_failed = True
                return conn.fill(cell, error(pstreams.IN_MULTI))
            return transactions.queue(self, c, argv, cell)
        kind = route.kind
        if kind is _KEYED:
            return self._keyed(c, argv, route, cell, raw)
        if kind is Kind.LOCAL:
            try:
                reply = route.handler(c, argv)
            except ReplyError as e:
                reply = error(e.message)
            return conn.fill(cell, reply)
        if kind is Kind.ROUTER:
            try:
                return route.handler(self, c, argv, cell)
            except ReplyError as e:
                return conn.fill(cell, error(e.message))
        if kind is Kind.FANOUT:
            if self.pstreams and pstreams.run_keys(self, c, argv, route, cell):
                return None
            return fanout.fan_out(self, c, argv, route, cell)
        if kind is Kind.NODE_ONLY:
            shown = b" ".join(argv[:2] if route.spec.parent is not None else argv[:1])
            return conn.fill(cell, error(errors.NOT_THROUGH_ROUTER % shown.upper()))
        addr = self.any_primary()  # Kind.ANY
        if addr is None:
            return conn.fill(cell, error(errors.CLUSTERDOWN))
        return Forward(self, c, raw or encode_command(argv), None, route.write,
                       cell=cell).send(addr=addr)

    def _keyed(self, c: RouterClient, argv: list[bytes], route: Route, cell: Cell,
               raw: bytes | None) -> None:
        fk = route.fixed_key
        if fk and fk < len(argv) and not route.blocking:  # one key, no BLOCK: XADD, GET...
            if self.pstreams:  # a logical name (router/pstreams.py): one dict lookup
                ps = self.pstreams.get(argv[fk])
                if ps is not None:
                    if route.name == b"xadd" and relay(self, c, argv, ps, cell, raw):
                        return None  # relayed as its bytes (router/pstreamwrite.py)
                    return pstreams.run(self, c, argv, route, ps, cell)
            f = to_cell(self, c, raw or encode_command(argv), key_slot(argv[fk]), route.write,
                        cell)
            return f.send()
        if route.blocking:  # XREAD, XREADGROUP
            return self._xread(c, argv, route, cell, raw)
        return self._by_keys(c, argv, route, cell, raw)

    def _xread(self, c: RouterClient, argv: list[bytes], route: Route, cell: Cell,
               raw: bytes | None) -> None:
        """XREAD/XREADGROUP: the node's own option parser finds BLOCK and the keys (they
        follow STREAMS, where the key specs' scan finds them too whenever the options parse),
        so a read costs one scan of its arguments. A read whose options do not parse takes
        the general path, where a node or the multi-slot read phrases the error."""
        try:
            options = parse_xread_options(argv, self.now_ms)  # (now: its overflow check)
        except ReplyError:
            options = None
        if options is None or not options.nkeys:
            return self._by_keys(c, argv, route, cell, raw)
        if self.pstreams and pstreamreads.run_xread(self, c, argv, options, cell):
            return None
        first, nkeys = options.first_key, options.nkeys
        slot = key_slot(argv[first])
        for i in range(first + 1, first + nkeys):
            if key_slot(argv[i]) != slot:
                return xread_fanout(self, c, argv, cell)
        if options.timeout >= 0:
            if options.group is None:  # XREAD: its `$` IDs are pinned down (BlockedRead)
                return BlockedRead(self, c, argv, options.block_at, options.timeout, slot, route.write,
                                   cell, dollars=dollar_ids(argv, options), raw=raw).start()
            b = blocked_read(self, c, argv, options.block_at, options.timeout, slot, route.write, cell,
                             raw)
            return b.start()
        f = to_cell(self, c, raw or encode_command(argv), slot, route.write, cell)
        return f.send()

    def _by_keys(self, c: RouterClient, argv: list[bytes], route: Route, cell: Cell,
                 raw: bytes | None) -> None:
        """A command whose keys the command table finds (several keys, or none by the key
        specs' rules): one slot, or -CROSSSLOT."""
        conn: ClientConn = c.conn  # type: ignore[assignment]
        positions = command_table.get_keys(argv)
        if not positions:  # a syntax the key specs do not fit: any node phrases the error
            addr = self.any_primary()
            if addr is None:
                return conn.fill(cell, error(errors.CLUSTERDOWN))
            return Forward(self, c, raw or encode_command(argv), None, route.write,
                           cell=cell).send(addr=addr)
        if self.pstreams and not route.blocking and pstreams.names_one(self, argv, positions):
            return conn.fill(cell, error(pstreams.MULTI_KEY % argv[0].upper()))
        slot = key_slot(argv[positions[0]])
        for p in positions[1:]:
            if key_slot(argv[p]) != slot:
                if route.blocking:  # XREAD, XREADGROUP
                    return xread_fanout(self, c, argv, cell)
                return conn.fill(cell, error(errors.CROSSSLOT))
        f = Forward(self, c, raw or encode_command(argv), slot, route.write, cell)
        return f.send()

    # --- clients --------------------------------------------------------------------------------
    def add_client(self, conn: RespConnection, addr: str, laddr: str) -> RouterClient:
        return clients.add_client(self, RouterClient, conn, addr, laddr)

    def remove_client(self, c: Client) -> None:
        clients.remove_client(self, c)
