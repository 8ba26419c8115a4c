"""Commands the router answers itself or routes by a rule of its own (router/routes.py ROUTER).

- WAIT / WAITAOF: the nodes this client wrote to since its last WAIT, merged by the table's
  response policy (agg_min).
- SCAN: every shard in turn, behind one cursor.
- CONFIG GET reads one node; CONFIG RESETSTAT goes to every node (CONFIG SET does too, by its
  request policy, without a rule here).
- ROLE and CLUSTER describe the router (INFO does too, in router/introspection.py): CLUSTER
  answers as a cluster made of the live routers, each owning an even share of the slots, so
  cluster-aware clients spread over the routers and never see -MOVED.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from node import command_table, errors
from node.cluster import client_port, redis_id
from node.resp import (
    Verbatim,
    array_header,
    bulk_value,
    encode,
    encode_command,
    error,
    error_code,
    integer,
    reply_elements,
)
from node.slots import SLOTS, key_slot
from node.tls import on_tls
from router import merge
from router.fanout import BlockedParts, to_nodes
from router.forward import Forward

if TYPE_CHECKING:
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router
    from router.upstream import Pool, Upstream

__all__ = ["ROUTER_COMMANDS", "router_command", "scan_cursor", "router_ranges"]

RouterCommand = Callable[["Router", "RouterClient", list[bytes], "Cell"], None]
ROUTER_COMMANDS: dict[bytes, RouterCommand] = {}
"""Router commands by name, or by fullname (b"config|get") for one subcommand."""


def router_command(*names: bytes) -> Callable[[RouterCommand], RouterCommand]:
    def register(fn: RouterCommand) -> RouterCommand:
        for n in names:
            ROUTER_COMMANDS[n] = fn
        return fn
    return register


def _conn(c: RouterClient) -> ClientConn:
    return c.conn  # type: ignore[return-value]


@router_command(b"wait", b"waitaof")
def wait(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """WAIT and WAITAOF go to every node the client wrote to since its last WAIT, on the same
    pinned connection that carried the writes, so the node counts acks of those writes; that
    connection leaves the pool for the WAIT (Pool.detach), since a WAIT that blocks must not
    hold up the other clients that shared it. A client that wrote nothing waits on connections
    of its own. A node that died (or was demoted) since cannot vouch for the writes: it counts
    as 0, which is the truth for the client's writes there, rather than an error."""
    pinned = bool(c.written)
    targets = sorted(c.written) or router.primaries()
    c.written = set()
    c.wrote_last = None
    zero = integer(0) if len(argv) == 3 else encode([0, 0], c.proto)
    if not targets:
        return _conn(c).fill(cell, zero)
    Wait(router, c, argv, targets, pinned, zero, cell)
    return None


class Wait(BlockedParts):
    """A WAIT/WAITAOF in flight: it is the client's `blocked` (CLIENT UNBLOCK, a disconnect)
    and holds the connections it waits on; ending it early closes them, which is how a node
    forgets a blocked client."""

    __slots__ = ("c", "cell", "policy", "zero", "replies", "left", "ups", "over")

    def __init__(self, router: Router, c: RouterClient, argv: list[bytes],
                 targets: list[tuple[str, int]], pinned: bool, zero: bytes, cell: Cell) -> None:
        self.c = c
        self.cell = cell
        self.policy = command_table.lookup(argv[0].lower()).response_policy  # type: ignore[union-attr]
        self.zero = zero
        self.replies: list[bytes | None] = [None] * len(targets)
        self.left = len(targets)
        self.ups: list[tuple[Pool, Upstream]] = []
        self.over = False
        c.blocked = self
        _conn(c).stall()
        data = encode_command(argv)
        for i, addr in enumerate(targets):
            pool = router.pool(addr, c.proto)
            up = pool.detach(c.id) if pinned else pool.get_dedicated()
            self.ups.append((pool, up))
            up.send(data, partial(self.got, i))

    def got(self, i: int, r: bytes | None) -> None:
        if self.over:
            return
        pool, up = self.ups[i]
        pool.release(up)
        self.replies[i] = self.zero if r is None or error_code(r) is not None else r
        self.left -= 1
        if self.left == 0:
            self.finish(self._merged())

    def _merged(self) -> bytes:
        return merge.merge(self.policy, [self.zero if r is None else r for r in self.replies],
                           self.c.proto)

    def timeout_reply(self, proto: int) -> bytes:
        """CLIENT UNBLOCK ... TIMEOUT: the nodes that have not answered count as 0 (the acks
        they had are unknown here, and fewer is the safe side)."""
        return self._merged()

    def cancel_parts(self) -> None:
        """The WAIT is over (`finish`): close the connections still waiting."""
        for i, (_pool, up) in enumerate(self.ups):
            if self.replies[i] is None:  # still waiting there: the node forgets it on close
                up.after_sent(up.close, keep=1)


def scan_cursor(shard: int, node_next: int, shards: int) -> int:
    """The router's SCAN cursor after a node answered `node_next` for shard `shard`: the low 8
    bits name the shard, the rest is the node's cursor rounded down. Node cursors are 63-bit
    key-hash positions, so rounding only makes a node repeat a key now and then, which SCAN
    allows, and never skips one."""
    if node_next == 0:
        return 0 if shard + 1 >= shards else shard + 1
    return max(node_next & ~0xFF, 0x100) | shard


@router_command(b"scan")
def scan(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """SCAN over every shard in turn (see scan_cursor)."""
    conn = _conn(c)
    prim = router.primaries()
    cursor = errors.string2ull(argv[1])
    if cursor is None:
        return conn.fill(cell, error(errors.INVALID_CURSOR))
    shard, node_cursor = cursor & 0xFF, cursor & ~0xFF
    if shard >= len(prim):
        return conn.fill(cell, encode([b"0", []], c.proto))

    def done(r: bytes) -> None:
        if error_code(r) is not None:
            return conn.fill(cell, r)
        cur, keys = reply_elements(r)[1]
        out = scan_cursor(shard, int(bulk_value(cur)), len(prim))
        return conn.fill(cell, array_header(2) + encode(b"%d" % out, c.proto) + keys)

    Forward(router, c, encode_command([argv[0], b"%d" % node_cursor] + argv[2:]), None, False,
            done=done).send(addr=prim[shard])
    return None


@router_command(b"client|pause", b"client|unpause")
def client_pause(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """CLIENT PAUSE is a node's (xshard failover uses it for a switchover); a router has no
    writes of its own to pause."""
    _conn(c).fill(cell, error(errors.NOT_THROUGH_ROUTER % b" ".join(argv[:2]).upper()))


@router_command(b"config|get")
def config_get(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """Every node has the same settings as far as a router's client can tell: ask one."""
    addr = router.any_primary() or next(iter(router.all_nodes()), None)
    if addr is None:
        return _conn(c).fill(cell, error(errors.CLUSTERDOWN))
    return Forward(router, c, encode_command(argv), None, False, cell=cell).send(addr=addr)


@router_command(b"config|resetstat")
def config_resetstat(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """Every node's statistics (Redis 7.2+ gives it request_policy:all_nodes)."""
    to_nodes(router, c, argv, router.all_nodes(), False, "all_succeeded", cell)


@router_command(b"role")
def role(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    _conn(c).fill(cell, encode([b"master", 0, []], c.proto))


# --- CLUSTER: the live routers as a cluster that owns every slot ---------------------------------
def router_ranges(routers: list[tuple[str, str, int, int]]
                  ) -> list[tuple[int, int, tuple[str, str, int, int]]]:
    """(first slot, last slot, (id, host, port, tls port)) for each router: an even split."""
    n = len(routers)
    return [(i * SLOTS // n, (i + 1) * SLOTS // n - 1, r) for i, r in enumerate(routers)]


@router_command(b"cluster")
def cluster(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    conn = _conn(c)
    sub = argv[1].lower()
    ranges = router_ranges(router.routers or [(router.router_id, router.host,
                                               router.config.port, router.config.tls_port)])
    # A TLS client is told the routers' TLS ports, a plain one the plain ports (as nodes do).
    tls = on_tls(c)
    if sub == b"slots":
        return conn.fill(cell, encode([[s, e, [h.encode(), client_port(p, tp, tls),
                                               redis_id(i).encode(), {}]]
                                       for s, e, (i, h, p, tp) in ranges], c.proto))
    if sub == b"shards":
        def ports(p: int, tp: int) -> dict[bytes, int]:
            return {k: v for k, v in ((b"port", p), (b"tls-port", tp)) if v}

        return conn.fill(cell, encode([{
            b"slots": [s, e], b"nodes": [{
                b"id": redis_id(i).encode(), **ports(p, tp), b"ip": h.encode(),
                b"endpoint": h.encode(), b"role": b"master", b"replication-offset": 0,
                b"health": b"online"}]} for s, e, (i, h, p, tp) in ranges], c.proto))
    if sub == b"nodes":
        lines = []
        for s, e, (i, h, p, tp) in ranges:
            p = client_port(p, tp, tls)
            me = "myself," if i == router.router_id else ""
            lines.append(f"{redis_id(i)} {h}:{p}@{p + 10000} {me}master - 0 0 1 connected "
                         f"{s}-{e}")
        return conn.fill(cell, encode(Verbatim(("\n".join(lines) + "\n").encode()), c.proto))
    if sub == b"info":
        ok = router.serves_every_slot()
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
    forward = partial(Forward(router, c, encode_command(argv), None, False, cell=cell).send)
    if sub in (b"countkeysinslot", b"getkeysinslot"):
        slot = errors.string2ll(argv[2])
        if slot is not None and 0 <= slot < SLOTS:
            return Forward(router, c, encode_command(argv), slot, False, cell=cell).send()
    addr = router.any_primary()
    if addr is None:
        return conn.fill(cell, error(errors.CLUSTERDOWN))
    return forward(addr=addr)
