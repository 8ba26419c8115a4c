"""One generic fan-out for every command whose table row says so (router/routes.py FANOUT).

The request policy says where the command goes, the response policy how the replies merge
(router/merge.py), as Redis's cluster clients do with the same tips:
- multi_shard (DEL, EXISTS, TOUCH, UNLINK): one request per slot, each naming that slot's keys
  in the client's order; keys of one slot go straight to its owner;
- all_shards (DBSIZE, KEYS, FLUSHALL, FLUSHDB): every shard's primary;
- all_nodes (CONFIG SET): every node, replicas included.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from node import command_table, errors
from node.resp import encode_command, error
from node.slots import key_slot
from router import merge
from router.forward import Forward, Gather
from router.routes import Route, split_by_slot

if TYPE_CHECKING:
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router

__all__ = ["fan_out", "to_nodes", "BlockedParts"]


def fan_out(router: Router, c: RouterClient, argv: list[bytes], route: Route,
            cell: Cell) -> None:
    policy = route.request_policy
    if policy == "multi_shard":
        return _multi_shard(router, c, argv, route, cell)
    addrs = router.primaries() if policy == "all_shards" else router.all_nodes()
    return to_nodes(router, c, argv, addrs, route.write, route.response_policy, cell)


def to_nodes(router: Router, c: RouterClient, argv: list[bytes], addrs: list[tuple[str, int]],
             write: bool, response_policy: str | None, cell: Cell) -> None:
    """The same request to every address, merged by the response policy."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    if not addrs:
        return conn.fill(cell, error(errors.CLUSTERDOWN))
    data = encode_command(argv)
    return Gather.send(router, c, [(a, None, data) for a in addrs], write,
                       partial(merge.merge, response_policy, proto=c.proto),
                       partial(conn.fill, cell))


def _multi_shard(router: Router, c: RouterClient, argv: list[bytes], route: Route,
                 cell: Cell) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    positions = command_table.get_keys(argv)
    if not positions:  # a syntax the key specs do not fit: let a node phrase it
        return Forward(router, c, encode_command(argv), None, route.write, cell=cell).send(
            addr=router.any_primary())
    slot = key_slot(argv[positions[0]])
    if all(key_slot(argv[p]) == slot for p in positions[1:]):
        return Forward(router, c, encode_command(argv), slot, route.write, cell=cell).send()
    spec = route.spec
    step = spec.key_specs[0].keystep if spec.key_specs else 1
    head, tail = argv[:positions[0]], argv[positions[-1] + step:]
    units = [argv[p:p + step] for p in positions]
    groups = list(split_by_slot([argv[p] for p in positions]).items())
    reqs = [(None, slot, encode_command(head + [a for i in idx for a in units[i]] + tail))
            for (slot, _), idx in groups]
    order = [idx for _, idx in groups]
    if route.response_policy is not None:
        merged = partial(merge.merge, route.response_policy, proto=c.proto)
    else:
        merged = partial(merge.in_key_order, order, nkeys=len(positions))
    Gather.send(router, c, reqs, route.write, merged, partial(conn.fill, cell))
    return None


class BlockedParts:
    """A client's blocking command served by parts on several upstream connections (a
    multi-shard or partitioned read, a WAIT), and what `client.blocked` holds meanwhile:
    `finish` ends the parts still waiting and gives the client the reply (None: it went
    away). Subclasses have `c`, `cell` and `over`, and say how their parts end."""

    __slots__ = ()
    c: RouterClient
    cell: Cell
    over: bool

    def cancel_parts(self) -> None:
        raise NotImplementedError

    def finish(self, reply: bytes | None) -> None:
        if self.over:
            return
        self.over = True  # type: ignore[misc]  # a slot of the subclass
        self.cancel_parts()
        c = self.c
        c.blocked = None
        conn = c.conn
        if reply is not None and conn is not None:
            conn.fill(self.cell, reply)
            conn.resume()
