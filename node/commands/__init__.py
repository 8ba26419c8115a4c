"""Command handlers, registered by name into one dispatch dict.

A handler is a plain function `handler(c: Client, argv: list[bytes]) -> bytes` that returns the
encoded reply. argv[0] is the command name as the client sent it; the dispatcher has already
checked arity against `node.command_table`. Errors are raised as `ReplyError`; a read that must
wait raises `node.blocking.Blocked`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from node import command_table, errors
from node.resp import ReplyError, Status, encode

if TYPE_CHECKING:
    from node.client import Client

Handler = Callable[["Client", list[bytes]], bytes]

COMMANDS: dict[bytes, Handler] = {}


def command(*names: bytes) -> Callable[[Handler], Handler]:
    """Register a handler under lower-case command names."""

    def register(fn: Handler) -> Handler:
        for name in names:
            COMMANDS[name.lower()] = fn
        return fn

    return register


class Subcommands:
    """A container command's handlers by subcommand (CONFIG GET, CLIENT KILL, ACL SETUSER...),
    as Redis's command table gives each subcommand a function of its own. `run` is the
    command's handler, registered under `name`; the dispatcher has already refused a
    subcommand the command table does not list, and load_all refuses one registered here
    that the table lacks."""

    def __init__(self, name: bytes) -> None:
        self.name = name.lower()
        self.handlers: dict[bytes, Handler] = {}
        _SUBCOMMANDS.append(self)
        command(self.name)(self.run)

    def __call__(self, *subs: bytes) -> Callable[[Handler], Handler]:
        """Register a handler under lower-case subcommand names."""

        def register(fn: Handler) -> Handler:
            for sub in subs:
                self.handlers[sub.lower()] = fn
            return fn

        return register

    def run(self, c: Client, argv: list[bytes]) -> bytes:
        """The command: its subcommand's handler runs."""
        fn = self.handlers.get(argv[1].lower())
        if fn is None:  # in the table, not served (CLIENT TRACKING...): Redis's error text
            raise ReplyError(errors.unknown_subcommand(argv[1], self.name))
        return fn(c, argv)


_SUBCOMMANDS: list[Subcommands] = []


def help_or_unknown_subcommand(c: Client, argv: list[bytes], name: bytes,
                               lines: list[bytes] | tuple[bytes, ...]) -> bytes:
    """The end of a subcommand dispatch: HELP replies with `lines`, anything else is Redis's
    unknown-subcommand error for command `name`."""
    if argv[1].lower() == b"help":
        return encode([Status(x) for x in lines], c.proto)
    raise ReplyError(errors.unknown_subcommand(argv[1], name))


class MissingCommandEntry(RuntimeError):
    """A handler is registered under a name that node/commands.json does not list."""


def load_all() -> dict[bytes, Handler]:
    """Import every command module so that their handlers register themselves.

    Every handler needs its command-table entry (node/commands.json, made by
    tools/gen_command_table.py): the dispatchers serve only commands whose arity, flags and
    keys they know, so a handler without one would never run. That mistake stops the node or
    router at start-up, naming the commands, instead of showing as `unknown command` later."""
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    missing = sorted([n for n in COMMANDS if command_table.lookup(n) is None]
                     + [t.name + b"|" + sub for t in _SUBCOMMANDS for sub in t.handlers
                        if command_table.lookup(t.name + b"|" + sub) is None])
    if missing:
        raise MissingCommandEntry(
            "handlers without a command-table entry (add them to SERVED in "
            "tools/gen_command_table.py and regenerate node/commands.json): "
            + ", ".join(n.decode() for n in missing))
    return COMMANDS
