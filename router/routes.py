"""How the router serves each command, decided once from the command table.

One rule list, applied to every command and subcommand of node/commands.json (first match):

    a router command (router/commands.py, router/transactions.py) -> ROUTER
    ACL (the router's own users, node/acl.py)                        -> LOCAL
    ACL category @connection (PING, HELLO, AUTH, CLIENT, COMMAND..) -> LOCAL: the node's own
                                                       handler runs on the router's client
    request_policy multi_shard / all_shards / all_nodes            -> FANOUT, merged by the
                                                       response_policy (router/merge.py)
    a command with keys                                             -> KEYED: the slot's owner
    ACL category @admin (SAVE, DEBUG, REPLICAOF, LASTSAVE...)       -> NODE_ONLY: it is about
                                                       one node, which a router cannot choose
    anything else (TIME, XINFO HELP...)                             -> ANY: any primary answers

The policies are Redis's own command tips, as cluster clients use them; `special` policies
(INFO, SCAN) must have a router command. Nothing here does I/O: tests check the table alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any

from node import command_table
from node.command_table import CommandSpec
from node.slots import key_slot

__all__ = ["Kind", "Route", "build", "split_by_slot"]


class Kind(IntEnum):
    KEYED = 0
    LOCAL = 1
    ROUTER = 2
    FANOUT = 3
    NODE_ONLY = 4
    ANY = 5


_FANOUT_POLICIES = frozenset(("multi_shard", "all_shards", "all_nodes"))


class Route:
    """A command's routing, with what dispatch needs at hand (one dict lookup per request)."""

    __slots__ = ("kind", "spec", "name", "handler", "arity", "write", "blocking", "no_auth",
                 "run_in_multi", "request_policy", "response_policy", "subs", "fixed_key")

    def __init__(self, kind: Kind, spec: CommandSpec, handler: Any = None) -> None:
        self.kind = kind
        self.spec = spec
        self.name: bytes = spec.name  # the fullname (CLIENT LIST cmd=), a C field compiled
        self.handler = handler  # the node handler (LOCAL) or the router command (ROUTER)
        # 0 for a container: its subcommand decides (node/preflight.py, check_arity).
        self.arity: int = 0 if spec.subcommands else spec.arity
        self.write = "write" in spec.flags
        self.blocking = "blocking" in spec.flags  # XREAD, XREADGROUP: BLOCK and fan-out
        top = spec.parent.name if spec.parent is not None else spec.name
        self.no_auth = top in command_table.NO_AUTH
        self.run_in_multi = top in command_table.RUN_IN_MULTI
        self.request_policy = spec.request_policy
        self.response_policy = spec.response_policy
        self.subs: dict[bytes, Route] | None = None
        # The index of the one key of a single-key command (XADD, GET, XINFO STREAM...), else
        # 0: its slot is that key's, without asking the key specs (command_table.get_keys).
        self.fixed_key: int = spec.fixed_key

    def __repr__(self) -> str:
        return f"Route({self.spec.name.decode()!r}, {self.kind.name})"


def _route(spec: CommandSpec, router_commands: dict[bytes, Any],
           local: dict[bytes, Any]) -> Route:
    top = spec.parent.name if spec.parent is not None else spec.name
    cmd = router_commands.get(spec.name) or router_commands.get(top)
    if cmd is not None:
        return Route(Kind.ROUTER, spec, cmd)
    if "@connection" in spec.acl_categories or top == b"acl":
        return Route(Kind.LOCAL, spec, local[top])
    if spec.request_policy in _FANOUT_POLICIES:
        return Route(Kind.FANOUT, spec)
    if spec.request_policy == "special" or spec.response_policy == "special":
        raise ValueError(f"{spec.name!r} has a special routing policy but no router command")
    if spec.has_keys:
        return Route(Kind.KEYED, spec)
    if "@admin" in spec.acl_categories:
        return Route(Kind.NODE_ONLY, spec)
    return Route(Kind.ANY, spec)


def build(router_commands: dict[bytes, Callable[..., None]],
          local: dict[bytes, Callable[..., bytes]]) -> dict[bytes, Route]:
    """Routes by lower-case command name; a container's Route has its subcommands in `subs`.

    `router_commands` maps a name or fullname (b"config|get") to a router command, `local`
    a top-level name to the node's handler."""
    table: dict[bytes, Route] = {}
    for name, spec in command_table.TABLE.items():
        route = _route(spec, router_commands, local)
        if spec.subcommands:
            route.subs = {sub: _route(s, router_commands, local)
                          for sub, s in spec.subcommands.items()}
        table[name] = route
    return table


def split_by_slot(keys: Iterable[bytes]) -> dict[tuple[int, int], list[int]]:
    """Key indexes grouped by slot, in first-seen order: a node refuses keys of two slots
    (-CROSSSLOT) even when it owns both. A key given twice goes to a second request for the
    same slot, so that every request names each key once and replies can be matched to
    positions by name."""
    groups: dict[tuple[int, int], list[int]] = {}
    seen: dict[bytes, int] = {}  # key -> requests of its slot that already name it
    for i, k in enumerate(keys):
        n = seen.get(k, 0)
        seen[k] = n + 1
        groups.setdefault((key_slot(k), n), []).append(i)
    return groups
