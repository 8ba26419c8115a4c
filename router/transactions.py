"""MULTI/EXEC/DISCARD/WATCH/UNWATCH through the router.

A transaction lives on one node, so all of its keys must be in one slot (-CROSSSLOT otherwise,
which makes EXEC abort, as a node does). Commands are queued on the router and sent at EXEC as
one MULTI ... EXEC on a dedicated upstream connection. WATCH pins that connection (and the
slot) from the WATCH on, so the node sees the watch and a change by another client aborts the
EXEC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node import command_table, errors
from node.resp import OK, QUEUED, encode, encode_command, error
from node.slots import key_slot
from router.commands import router_command

if TYPE_CHECKING:
    from node.client import Client
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router

__all__ = ["queue", "unwatch_all"]


def _ignore(_reply: bytes | None) -> None:
    pass


def _conn(c: RouterClient) -> ClientConn:
    return c.conn  # type: ignore[return-value]


def _discard(c: RouterClient) -> None:
    c.in_multi = False
    c.multi_queue = []
    c.multi_failed = False
    c.txn_slot = None


def unwatch_all(c: Client) -> None:
    """Forget the client's watches: its pinned connection goes, and the node's watch with it."""
    up = getattr(c, "watch_conn", None)
    if up is not None:
        up.close()
        c.watch_conn = None  # type: ignore[attr-defined]
    c.watched.clear()


def queue(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """A command inside MULTI: its keys must share the transaction's slot."""
    for p in command_table.get_keys(argv):
        s = key_slot(argv[p])
        if c.txn_slot is None:
            c.txn_slot = s
        elif s != c.txn_slot:
            c.multi_failed = True
            return _conn(c).fill(cell, error(errors.CROSSSLOT))
    c.multi_queue.append(argv)
    return _conn(c).fill(cell, QUEUED)


@router_command(b"multi")
def multi(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    if c.in_multi:
        return _conn(c).fill(cell, error(errors.MULTI_NESTED))
    c.in_multi = True
    c.multi_queue = []
    c.multi_failed = False
    c.txn_slot = c.watch_slot if c.watch_conn is not None else None
    return _conn(c).fill(cell, OK)


@router_command(b"discard")
def discard(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    if not c.in_multi:
        return _conn(c).fill(cell, error(errors.DISCARD_WITHOUT_MULTI))
    _discard(c)
    unwatch_all(c)
    return _conn(c).fill(cell, OK)


@router_command(b"exec")
def exec_(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    conn = _conn(c)
    if not c.in_multi:
        return conn.fill(cell, error(errors.EXEC_WITHOUT_MULTI))
    queued, failed, slot = c.multi_queue, c.multi_failed, c.txn_slot
    _discard(c)
    up = c.watch_conn
    c.watch_conn = None
    if failed or not queued:
        if up is not None:
            up.close()
        return conn.fill(cell, error(errors.EXECABORT) if failed else encode([], c.proto))
    if up is None:
        addr = router.node_for(slot, False) if slot is not None else router.any_primary()
        if addr is None:
            return conn.fill(cell, error(errors.SLOT_NOT_SERVED))
        up = router.pool(addr, c.proto).get_dedicated()
    pool = router.pool((up.host, up.port), c.proto)
    if any(command_table.is_write_argv(a, a[0].lower()) for a in queued):
        c.written.add((up.host, up.port))
    conn.stall()
    dedicated = up

    def on_exec(r: bytes | None) -> None:
        pool.release(dedicated)
        conn.fill(cell, r if r is not None else error(errors.EXECABORT_NODE_GONE))
        conn.resume()

    up.send(encode_command([b"MULTI"]) + b"".join(encode_command(a) for a in queued), _ignore)
    for _ in queued:
        up.send(b"", _ignore)  # +QUEUED (or an error, which makes EXEC abort)
    up.send(encode_command([b"EXEC"]), on_exec)
    return None


@router_command(b"watch")
def watch(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    conn = _conn(c)
    if c.in_multi:
        return conn.fill(cell, error(errors.WATCH_IN_MULTI))
    slots = {key_slot(k) for k in argv[1:]}
    if len(slots) > 1 or (c.watch_conn is not None and slots != {c.watch_slot}):
        return conn.fill(cell, error(errors.CROSSSLOT))
    slot = slots.pop()
    if c.watch_conn is None:
        addr = router.node_for(slot, False)
        if addr is None:
            return conn.fill(cell, error(errors.SLOT_NOT_SERVED))
        c.watch_conn = router.pool(addr, c.proto).get_dedicated()
        c.watch_slot = slot
    c.watch_conn.send(encode_command(argv), lambda r: conn.fill(cell, r if r is not None else
                                                                 error(errors.CLUSTERDOWN)))
    return None


@router_command(b"unwatch")
def unwatch(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    unwatch_all(c)
    _conn(c).fill(cell, OK)
