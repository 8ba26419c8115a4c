"""SAVE, BGSAVE, BGREWRITEAOF and SHUTDOWN: the commands of `node.persistence`."""

from __future__ import annotations

import logging
from collections.abc import Callable

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
    return _started(c, p.bgsave, b"Background saving")


@command(b"bgrewriteaof")
def bgrewriteaof(c: Client, argv: list[bytes]) -> bytes:
    p = _persistence(c)
    if p.rewrite_in_progress:
        raise ReplyError(errors.REWRITE_IN_PROGRESS)
    if not c.server.config.appendonly:
        raise ReplyError(errors.REWRITE_NEEDS_AOF)
    return _started(c, p.rewrite, b"Background append only file rewriting")


def _started(c: Client, start: Callable[[], object], what: bytes) -> bytes:
    """Start a background job: "scheduled" when the one forked saver is busy (the job waits
    for it), else "started", as Redis words it."""
    busy = _persistence(c).saver.busy
    start()
    return encode(Status(what + (b" scheduled" if busy else b" started")), c.proto)


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
