"""MULTI/EXEC/DISCARD/WATCH/UNWATCH.

Queueing happens in the dispatcher (Server.execute); EXEC runs the queue through the normal call
path with the effects wrapped in MULTI/EXEC, so replicas and the AOF apply it atomically.
"""

from __future__ import annotations

from node import errors
from node.client import Client
from node.commands import command
from node.resp import OK, ReplyError, array_header, error, null_array


@command(b"multi")
def multi(c: Client, argv: list[bytes]) -> bytes:
    if c.in_multi:
        raise ReplyError(errors.MULTI_NESTED)
    c.in_multi = True
    c.multi_queue = []
    c.multi_failed = False
    return OK


@command(b"discard")
def discard(c: Client, argv: list[bytes]) -> bytes:
    if not c.in_multi:
        raise ReplyError(errors.DISCARD_WITHOUT_MULTI)
    c.discard_multi()
    return OK


@command(b"exec")
def exec_(c: Client, argv: list[bytes]) -> bytes:
    if not c.in_multi:
        raise ReplyError(errors.EXEC_WITHOUT_MULTI)
    if c.multi_failed:
        c.discard_multi()
        raise ReplyError(errors.EXECABORT)
    if c.dirty_cas:
        c.discard_multi()
        return null_array(c.proto)
    queue = c.multi_queue
    c.db.unwatch_all(c)  # WATCH has done its job (Redis unwatches before running the queue)
    server = c.server
    replies = []
    c.in_exec = True
    server.effects.begin_transaction()
    try:
        for cmd in queue:
            name = cmd[0].lower()
            # ACL rules may have changed since the command was queued (execCommand re-checks).
            err = server.acl.check(c, cmd, name) if c.acl is not None else None
            if err is not None:
                server.stats.error(err)
                replies.append(error(err))
                continue
            handler = server.handler(name)
            replies.append(server.call(c, cmd, name, handler) or null_array(c.proto))
    finally:
        server.effects.end_transaction()
        c.in_exec = False
        c.discard_multi()  # still "in MULTI" while the queue ran, as CLIENT INFO shows
    return array_header(len(replies)) + b"".join(replies)


@command(b"watch")
def watch(c: Client, argv: list[bytes]) -> bytes:
    if c.in_multi:
        raise ReplyError(errors.WATCH_IN_MULTI)
    for key in argv[1:]:
        c.db.watch(c, key)
    return OK


@command(b"unwatch")
def unwatch(c: Client, argv: list[bytes]) -> bytes:
    c.db.unwatch_all(c)
    return OK
