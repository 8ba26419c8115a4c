"""ACL: SETUSER, GETUSER, DELUSER, LIST, USERS, WHOAMI, CAT, LOG, SAVE, LOAD, GENPASS, DRYRUN,
HELP.

The users themselves live in node/acl.py; the router serves this same handler against its own
users (kept in etcd, router/aclsync.py).
"""

from __future__ import annotations

import logging
import os
import time

from node import acl as acl_mod
from node import command_table, errors
from node.client import Client
from node.commands import Subcommands
from node.resp import OK, Map, ReplyError, bulk, encode, integer, null

log = logging.getLogger("xshard.acl")

HELP = [
    b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CAT [<category>]",
    b"    List all commands that belong to <category>, or all command categories",
    b"    when no category is specified.",
    b"DELUSER <username> [<username> ...]",
    b"    Delete a list of users.",
    b"DRYRUN <username> <command> [<arg> ...]",
    b"    Returns whether the user can execute the given command without executing the command.",
    b"GETUSER <username>",
    b"    Get the user's details.",
    b"GENPASS [<bits>]",
    b"    Generate a secure 256-bit user password. The optional `bits` argument can",
    b"    be used to specify a different size.",
    b"LIST",
    b"    Show users details in config file format.",
    b"LOAD",
    b"    Reload users from the ACL file.",
    b"LOG [<count> | RESET]",
    b"    Show the ACL log entries.",
    b"SAVE",
    b"    Save the current config to the ACL file.",
    b"SETUSER <username> <attribute> [<attribute> ...]",
    b"    Create or modify a user with the specified attributes.",
    b"USERS",
    b"    List all the registered usernames.",
    b"WHOAMI",
    b"    Return the current connection username.",
    b"HELP",
    b"    Print this help.",
]


ACL = Subcommands(b"acl")  # ACL <subcommand> ...: each is a function below
acl = ACL.run  # the ACL command (router/aclsync.py runs it for the router's users)


@ACL(b"setuser")
def acl_setuser(c: Client, argv: list[bytes]) -> bytes:
    a = c.server.acl
    a.setuser(argv[2], argv[3:])
    _changed(a)
    return OK


@ACL(b"deluser")
def acl_deluser(c: Client, argv: list[bytes]) -> bytes:
    a = c.server.acl
    n = a.deluser(argv[2:])
    if n:
        _changed(a)
    return integer(n)


@ACL(b"getuser")
def acl_getuser(c: Client, argv: list[bytes]) -> bytes:
    u = c.server.acl.users.get(argv[2])
    if u is None:
        return null(c.proto)
    return encode(Map.of(
        b"flags", u.flag_words(), b"passwords", [p.encode() for p in u.passwords],
        b"commands", u.commands_text(), b"keys", u.keys_text(),
        b"channels", u.channels_text(), b"selectors", [],
    ), c.proto)


@ACL(b"list")
def acl_list(c: Client, argv: list[bytes]) -> bytes:
    users = c.server.acl.users
    return encode([users[n].describe() for n in sorted(users)], c.proto)


@ACL(b"users")
def acl_users(c: Client, argv: list[bytes]) -> bytes:
    return encode(sorted(c.server.acl.users), c.proto)


@ACL(b"whoami")
def acl_whoami(c: Client, argv: list[bytes]) -> bytes:
    return bulk(c.user)


@ACL(b"cat")
def acl_cat(c: Client, argv: list[bytes]) -> bytes:
    """ACL CAT [category]: the categories, or the commands of one."""
    if len(argv) == 2:
        return encode([x.encode() for x in acl_mod.CATEGORIES], c.proto)
    cat = argv[2].lower().decode("latin-1")
    if cat not in acl_mod.CATEGORIES:
        raise ReplyError(errors.acl_unknown_category(argv[2]))
    return encode(acl_mod.category_commands(cat), c.proto)


def _aclfile(c: Client) -> str:
    """The aclfile setting, or Redis's error when there is none (ACL LOAD and SAVE)."""
    path = c.server.config.aclfile
    if not path:
        raise ReplyError(errors.ACL_NO_FILE)
    return path


@ACL(b"load")
def acl_load(c: Client, argv: list[bytes]) -> bytes:
    a = c.server.acl
    a.load_file(_aclfile(c))
    _changed(a)
    return OK


@ACL(b"save")
def acl_save(c: Client, argv: list[bytes]) -> bytes:
    path = _aclfile(c)
    try:
        c.server.acl.save_file(path)
    except OSError as e:
        log.warning("Opening temp ACL file for ACL SAVE: %s", e)
        raise ReplyError(errors.ACL_SAVE_FAILED) from None
    return OK


@ACL(b"genpass")
def acl_genpass(c: Client, argv: list[bytes]) -> bytes:
    """ACL GENPASS [bits]: that many random bits as hex (256 by default)."""
    bits = 256
    if len(argv) > 2:
        bits = errors.parse_int_or_error(argv[2])
        if bits <= 0 or bits > 4096:
            raise ReplyError(errors.ACL_GENPASS_BITS)
    return bulk(os.urandom((bits + 7) // 8).hex()[:(bits + 3) // 4].encode())


@ACL(b"help")
def acl_help(c: Client, argv: list[bytes]) -> bytes:
    return encode(HELP, c.proto)


def _changed(a: acl_mod.Acl) -> None:
    if a.on_change is not None:
        a.on_change()


@ACL(b"dryrun")
def acl_dryrun(c: Client, argv: list[bytes]) -> bytes:
    """ACL DRYRUN user command [arg ...]: +OK, or the denial as a bulk string (Redis 7.2+
    text, naming the key); the command is not run and nothing goes to ACL LOG."""
    u = c.server.acl.users.get(argv[2])
    if u is None:
        raise ReplyError(errors.acl_dryrun_no_user(argv[2]))
    cmd = argv[3:]
    spec = command_table.lookup_argv(cmd)
    if spec is None:
        raise ReplyError(errors.acl_dryrun_no_command(argv[3]))
    n = len(cmd)
    if (spec.arity > 0 and spec.arity != n) or n < -spec.arity:
        raise ReplyError(errors.wrong_arity(spec.name))
    denied = u.denied(cmd, cmd[0].lower())
    if denied is None:
        return OK
    reason, obj = denied
    return bulk(errors.acl_denied_command(u.name, obj) if reason == b"command"
                else errors.acl_denied_key(u.name, obj))


@ACL(b"log")
def acl_log(c: Client, argv: list[bytes]) -> bytes:
    """ACL LOG [count | RESET]."""
    a = c.server.acl
    count = 10
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    if len(argv) == 3:
        if argv[2].lower() == b"reset":
            a.log.clear()
            return OK
        n = errors.string2ll(argv[2])
        if n is None or n < 0:
            raise ReplyError(errors.WAITAOF_NUMREPLICAS_RANGE)
        count = n
    now = int(time.time() * 1000)
    out = []
    for e in list(a.log)[:count]:
        out.append(Map.of(
            b"count", e.count, b"reason", e.reason, b"context", e.context, b"object", e.object,
            b"username", e.username, b"age-seconds", (now - e.created) / 1000.0,
            b"client-info", e.client_info, b"entry-id", e.entry_id,
            b"timestamp-created", e.created, b"timestamp-last-updated", e.updated,
        ))
    return encode(out, c.proto)
