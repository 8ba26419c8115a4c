"""Read by mypy only (tests/test_typecheck.py): each server implements its part of the
contract in node/context.py. A function that returns an implementation as its Protocol does
not type-check unless every member is there with a compatible type."""

from __future__ import annotations

from node.blocking import Blocked, BlockingManager
from node.context import (
    ClientContext,
    ConnectionOwner,
    DataContext,
    ReadySignal,
    ServerContext,
    Unblocker,
    Waiting,
    Watches,
)
from node.keyspace import Keyspace
from node.server import Server
from router.forward import BlockedRead
from router.proxy import Router, RouterBlocking, RouterWatches
from router.xread import BlockedFanout
from tests.support.inproc import InprocServer


def node_server(s: Server) -> ServerContext:
    return s


def router(r: Router) -> ClientContext:
    return r


def router_accepts_connections(r: Router) -> ConnectionOwner:
    return r


def inproc_server(s: InprocServer) -> DataContext:
    return s


def node_parts(k: Keyspace, b: BlockingManager) -> tuple[Watches, Unblocker, ReadySignal]:
    return k, b, b


def router_parts(w: RouterWatches, b: RouterBlocking) -> tuple[Watches, Unblocker]:
    return w, b


def waiting(a: Blocked, b: BlockedRead, c: BlockedFanout) -> tuple[Waiting, Waiting, Waiting]:
    return a, b, c
