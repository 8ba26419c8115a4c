"""Introspection through a router: MONITOR shows the commands this router receives (in the
node's format, node/monitor.py); what describes one node is refused with a pointer to the
nodes; the rest of SLOWLOG and LATENCY fans out by the command table's policies.

LATENCY LATEST/HISTORY/HISTOGRAM and MEMORY STATS carry Redis's `special` response policy:
a cluster client merges them per node itself, which a single reply through a router cannot
say, so they are answered only by a node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node import errors
from node.resp import OK, error
from router.commands import router_command

if TYPE_CHECKING:
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router


@router_command(b"latency|latest", b"latency|history", b"latency|histogram", b"memory|stats")
def per_node(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    conn.fill(cell, error(errors.NOT_THROUGH_ROUTER % b" ".join(argv[:2]).upper()))


@router_command(b"monitor")
def monitor(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """Every request this router receives from now on, as a node's MONITOR shows them (a
    second MONITOR answers nothing, as in Redis)."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    new = c.id not in router.monitors
    router.monitors[c.id] = c
    conn.fill(cell, OK if new else b"")
