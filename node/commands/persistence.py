"""SAVE, BGSAVE, BGREWRITEAOF and SHUTDOWN: the commands of `node.persistence`."""

from __future__ import annotations

import logging

from node import errors
from node.client import Client
from node.commands import command
from node.resp import OK, ReplyError, Status, encode

log = logging.getLogger("xshard.node")


def _persistence(c: Client):  # noqa: ANN202 - node.persistence.Persistence
    p = c.server.persistence
    if p is None:
        raise ReplyError(errors.NO_PERSISTENCE)
    return p


@command(b"save")
def save(c: Client, argv: list[bytes]) -> bytes:
    p = _persistence(c)
    if p.bgsave_in_progress:
        raise ReplyError(errors.BGSAVE_IN_PROGRESS)
    try:
        p.save()
    except OSError as e:
        p._saved(False)
        log.warning("Failed opening the snapshot file %s for saving: %s",
                    c.server.config.dbfilename, e.strerror)
        raise ReplyError(errors.SAVE_FAILED) from None
    return OK


@command(b"bgsave")
def bgsave(c: Client, argv: list[bytes]) -> bytes:
    p = _persistence(c)
    schedule = False
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"schedule"):
        raise ReplyError(errors.SYNTAX)
    if len(argv) == 2:
        schedule = True
    if p.bgsave_in_progress:
        raise ReplyError(errors.BGSAVE_IN_PROGRESS)
    if p.saver.busy and not schedule:
        raise ReplyError(errors.BGSAVE_CHILD_ACTIVE)
    busy = p.saver.busy
    p.bgsave()
    return encode(Status(b"Background saving scheduled" if busy else
                         b"Background saving started"), c.proto)


@command(b"bgrewriteaof")
def bgrewriteaof(c: Client, argv: list[bytes]) -> bytes:
    p = _persistence(c)
    if p.rewrite_in_progress:
        raise ReplyError(errors.REWRITE_IN_PROGRESS)
    if not c.server.config.appendonly:
        raise ReplyError(errors.REWRITE_NEEDS_AOF)
    busy = p.saver.busy
    p.rewrite()
    return encode(Status(b"Background append only file rewriting scheduled" if busy else
                         b"Background append only file rewriting started"), c.proto)


@command(b"shutdown")
def shutdown(c: Client, argv: list[bytes]) -> bytes:
    save: bool | None = None
    for a in argv[1:]:
        w = a.lower()
        if w == b"nosave":
            save = False
        elif w == b"save":
            save = True
        elif w in (b"now", b"force"):
            pass
        elif w == b"abort":
            raise ReplyError(errors.NO_SHUTDOWN)
        else:
            raise ReplyError(errors.SYNTAX)
    p = c.server.persistence
    if p is not None:
        try:
            p.shutdown(save)
        except OSError as e:
            log.warning("Error trying to save the DB, can't exit: %s", e.strerror)
            raise ReplyError(errors.SHUTDOWN_FAILED) from None
        p.shut_down = True
    log.warning("User requested shutdown...")
    if c.server.shutdown_hook is not None:
        c.server.loop.call_soon(c.server.shutdown_hook)
    c.close_after_reply = True
    return b""
