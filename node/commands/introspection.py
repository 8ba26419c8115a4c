"""COMMAND and its subcommands (server.c commandCommand and friends).

    COMMAND
    COMMAND COUNT
    COMMAND INFO [command-name ...]
    COMMAND DOCS [command-name ...]
    COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]
    COMMAND GETKEYS command [arg ...]
    COMMAND GETKEYSANDFLAGS command [arg ...]
    COMMAND HELP

Every reply is built by node/command_table.py from the same table that checks arity and finds
keys, so what COMMAND says is what the node (and the router) actually do.
"""

from __future__ import annotations

from node import command_table as table
from node import errors
from node.client import Client
from node.commands import command
from node.resp import ReplyError


@command(b"command")
def command_(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 1:
        return table.command_reply(c.proto)
    sub = argv[1].lower()
    # The dispatcher has checked the subcommand's arity against the table; the guards below
    # only keep a direct call from indexing past argv.
    if sub == b"info":
        return table.info_reply(argv[2:], c.proto)
    if sub == b"docs":
        return table.docs_reply(argv[2:], c.proto)
    if sub == b"count" and len(argv) == 2:
        return table.count_reply()
    if sub == b"list":
        return table.list_reply(argv[2:], c.proto)
    if sub == b"getkeys" and len(argv) >= 3:
        return table.getkeys_reply(argv[2:], False, c.proto)
    if sub == b"getkeysandflags" and len(argv) >= 3:
        return table.getkeys_reply(argv[2:], True, c.proto)
    if sub == b"help" and len(argv) == 2:
        return table.help_reply(argv[0])
    if sub in (b"count", b"getkeys", b"getkeysandflags", b"help"):
        raise ReplyError(errors.wrong_arity(b"command|" + sub))
    raise ReplyError(errors.unknown_subcommand(argv[1], argv[0]))
