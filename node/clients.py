"""The table of connected clients that every server keeps (the node's and the router's).

A server gives each accepted connection a `Client` with the next id, counts it
(total_connections_received) and, when the connection goes, releases what the client held:
a blocked read, its watches, its MONITOR entry. node/server.py `Server` and router/proxy.py
`Router` both do it through these functions; only the client class differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from node.context import ClientContext

if TYPE_CHECKING:
    from node.client import Client
    from node.protocol import RespConnection

__all__ = ["ClientTable", "add_client", "close_all", "remove_client"]

C = TypeVar("C", bound="Client")


class ClientTable(ClientContext, Protocol):
    """What the two functions use of a server: a ClientContext with an id counter."""

    next_client_id: int  # the id the next client gets (CLIENT ID), from 1


def add_client(server: ClientTable, make: type[C], conn: RespConnection | None, addr: str,
               laddr: str) -> C:
    """A new client of `server`, of class `make`, with the next id, counted and registered."""
    c = make(server, conn, server.next_client_id, addr, laddr)
    server.next_client_id += 1
    server.clients[c.id] = c
    server.stats.total_connections += 1
    return c


def remove_client(server: ClientTable, c: Client) -> None:
    """The client's connection went: end its blocked read, drop its watches, forget it."""
    server.blocking.unblock(c, None)
    server.db.unwatch_all(c)
    server.clients.pop(c.id, None)
    server.monitors.pop(c.id, None)


def close_all(server: ClientTable) -> None:
    """Close every client's connection (the server is stopping)."""
    for c in list(server.clients.values()):
        if c.conn is not None:
            c.conn.close()
