"""REPLICAOF/SLAVEOF, REPLCONF, PSYNC and SYNC: the commands of `node.replication`.

Redis's replicaofCommand shapes the replies: `REPLICAOF NO ONE` promotes (a no-op on a primary),
`REPLICAOF host port` answers `+OK Already connected to specified master` when nothing changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from node import errors
from node.client import Client
from node.commands import command
from node.resp import OK, ReplyError, status

if TYPE_CHECKING:
    from node.replication import Replication

log = logging.getLogger("xshard.node")


def _replication(c: Client) -> Replication:
    r = c.server.replication
    if r is None:
        raise ReplyError(errors.NO_REPLICATION)
    return r


@command(b"replicaof", b"slaveof")
def replicaof(c: Client, argv: list[bytes]) -> bytes:
    r = _replication(c)
    if argv[1].lower() == b"no" and argv[2].lower() == b"one":
        if r.is_replica:
            r.unset_master()
        return OK
    port = errors.parse_int_or_error(argv[2], errors.INVALID_MASTER_PORT)
    if not 0 <= port <= 65535:
        raise ReplyError(errors.INVALID_MASTER_PORT)
    host = argv[1].decode(errors="replace")
    if r.is_replica and r.master_host.lower() == host.lower() and r.master_port == port:
        log.info("REPLICAOF would result into synchronization with the master we are already "
                 "connected with. No operation performed.")
        return status(b"OK Already connected to specified master")
    r.set_master(host, port)
    return OK


@command(b"replconf")
def replconf(c: Client, argv: list[bytes]) -> bytes:
    r = c.server.replication
    if r is None:  # AOF loading at start-up runs the stream's REPLCONF GETACK: nothing to do
        return OK if not c.is_master else b""
    return r.replconf(c, argv)


@command(b"psync")
def psync(c: Client, argv: list[bytes]) -> bytes:
    if c.is_master:
        return b""
    return _replication(c).psync(c, argv)


@command(b"sync")
def sync(c: Client, argv: list[bytes]) -> bytes:
    if c.is_master:
        return b""
    return _replication(c).psync(c, argv, sync=True)
