"""The checks a command passes before it runs, the same on a node and on a router.

Redis's processCommand refuses a command, in this order, for: an unknown name, a wrong arity
(or an unknown subcommand of a container), a client that has not authenticated, and an ACL
rule. The node (node/server.py `Server.execute`) then adds its own checks (cluster
redirection, the write fence, MISCONF, NOREPLICAS, READONLY); the router
(router/proxy.py `Router.dispatch`) routes instead. Both call `preflight` for the shared part
and `rejected` when a command is refused, so a client sees one behaviour through either.

Both callers are on the hot path: compiled (node/preflight.pxd), these are C calls with the
client's fields read as C fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node import command_table, errors

if TYPE_CHECKING:
    from node.acl import Acl
    from node.client import Client

__all__ = ["preflight", "rejected", "unknown"]

_NO_AUTH = command_table.NO_AUTH


def preflight(acl: Acl, c: Client, argv: list[bytes], name: bytes, arity: int) -> bytes | None:
    """The error text for a known command that may not run, else None.

    `name` is the command's lower-case top-level name and `arity` its arity from the command
    table, 0 for a container (its subcommand decides: command_table.check_arity). It also sets
    the command CLIENT LIST shows (Redis's c->lastcmd): before the checks, as processCommand
    does, so that a refused command shows too; a container's is its subcommand's fullname."""
    c.last_cmd = name
    n = len(argv)
    if arity == 0 or (n != arity if arity > 0 else n < -arity):
        if arity == 0:  # 'client|list'; None for an unknown subcommand
            c.last_cmd = command_table.stat_name(argv, name)
        err = command_table.check_arity(argv, name)
        if err is not None:
            return err
    if not c.authenticated and name not in _NO_AUTH:
        return errors.NOAUTH
    if c.acl is not None:  # None: the user may run anything (node/acl.py)
        return acl.check(c, argv, name)
    return None


def unknown(c: Client, argv: list[bytes]) -> bytes:
    """The error for a command name the server does not know; CLIENT LIST then shows
    cmd=NULL, as Redis's c->lastcmd after a lookup that failed."""
    c.last_cmd = None
    return errors.unknown_command(argv[0], argv[1:])


def rejected(c: Client, name: bytes | None, message: bytes) -> bytes:
    """server.c rejectCommand: a refused command inside MULTI makes EXEC fail, and a refused
    EXEC aborts the transaction, quoting the reason (execCommandAbort). Returns the error
    text to send; `name` is None for an unknown command."""
    if c.in_multi:
        c.multi_failed = True
    if name == b"exec":
        c.discard_multi()
        if not message.startswith(b"EXECABORT "):  # check_arity phrases EXEC's own
            message = errors.execabort_because(message)
    return message
