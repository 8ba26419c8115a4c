"""The command table: arity, flags, key positions and docs of every command xshard serves.

Redis builds its table from src/commands/*.json; ours is node/commands.json, dumped from a real
redis-server by tools/gen_command_table.py. This module reads it once at import and is the one
source for: the dispatcher's arity check (`check_arity`), write detection (`is_write`), key
extraction (`get_keys`, also used by the router and COMMAND GETKEYS), the routing tips
(`CommandSpec.request_policy` / `response_policy`, from Redis's command tips, which the router
routes keyless and multi-key commands by), and the COMMAND replies (INFO, DOCS, COUNT, LIST,
GETKEYS, GETKEYSANDFLAGS, HELP) in RESP2 and RESP3.

It is a leaf: it imports only the codec and the error texts, never a client or the server.

Key extraction follows Redis's getKeysFromCommandWithSpecs (db.c): the key specs
(begin_search + find_keys) for every command, except where Redis has a getkeys procedure that
knows better. XREAD/XREADGROUP find their STREAMS token by xreadGetKeys's rule (skip the
options, because "STREAMS" may also be a group, consumer or key name); Redis itself prefers the
key spec's plain keyword search there, which is fooled by e.g.
`XREADGROUP COUNT 1 GROUP g STREAMS STREAMS k 0`, so in that corner (and only there) our COMMAND
GETKEYS answers with the key the command really touches instead of Redis's. SET uses setGetKeys
(only its key flags depend on GET).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from node import errors
from node.patterns import stringmatch
from node.resp import (
    EMPTY_ARRAY,
    Map,
    ReplyError,
    RespSet,
    Status,
    array_header,
    bulk,
    encode,
    integer,
    map_header,
    null,
    status,
)

__all__ = [
    "CommandSpec", "KeySpec", "lookup", "lookup_argv", "check_arity", "is_write",
    "is_denyoom_argv", "get_keys",
    "get_keys_and_flags", "CONTAINERS", "TABLE", "command_reply", "info_reply", "docs_reply",
    "count_reply", "list_reply", "getkeys_reply", "help_reply", "HELP_LINES",
]

JSON_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "commands.json")


class KeySpec:
    """One Redis key spec: where the keys start (begin_search) and how many follow (find_keys)."""

    __slots__ = ("flags", "bs_type", "index", "keyword", "startfrom", "fk_type", "lastkey",
                 "keystep", "limit", "keynumidx", "firstkey", "raw")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.flags: tuple[str, ...] = tuple(raw["flags"])
        bs, fk = raw["begin_search"], raw["find_keys"]
        self.bs_type: str = bs["type"]
        self.index = int(bs["spec"].get("index", 0))
        self.keyword: bytes = bs["spec"].get("keyword", "").encode()
        self.startfrom = int(bs["spec"].get("startfrom", 0))
        self.fk_type: str = fk["type"]
        s = fk["spec"]
        self.lastkey = int(s.get("lastkey", 0))
        self.keystep = int(s.get("keystep", 1))
        self.limit = int(s.get("limit", 0))
        self.keynumidx = int(s.get("keynumidx", 0))
        self.firstkey = int(s.get("firstkey", 0))


class CommandSpec:
    """One command or subcommand. `name` is Redis's fullname: b"xadd", b"xgroup|create"."""

    __slots__ = ("name", "arity", "flags", "flag_list", "first_key", "last_key", "step",
                 "acl_categories", "tips", "request_policy", "response_policy", "key_specs",
                 "subcommands", "docs", "origin", "parent", "has_keys", "getkeys_proc",
                 "fixed_key", "_info", "_docs")

    def __init__(self, raw: dict[str, Any], parent: CommandSpec | None = None) -> None:
        self.name: bytes = raw["name"].encode()
        self.arity: int = raw["arity"]
        self.flags: frozenset[str] = frozenset(raw["flags"])
        # In Redis's reply order (addReplyCommandFlags walks a fixed table).
        self.flag_list: tuple[str, ...] = tuple(raw["flags"])
        self.first_key: int = raw["first_key"]
        self.last_key: int = raw["last_key"]
        self.step: int = raw["step"]
        self.acl_categories: tuple[str, ...] = tuple(raw["acl_categories"])
        self.tips: tuple[str, ...] = tuple(raw["tips"])
        # Redis's routing tips for cluster clients (and our router): where a keyless or
        # multi-key command goes (multi_shard, all_shards, all_nodes, special) and how the
        # replies merge (agg_sum, agg_min, all_succeeded, one_succeeded, special, ...).
        # None when the command has no such tip.
        self.request_policy: str | None = _tip(self.tips, "request_policy:")
        self.response_policy: str | None = _tip(self.tips, "response_policy:")
        self.key_specs: tuple[KeySpec, ...] = tuple(KeySpec(k) for k in raw["key_specs"])
        self.docs: dict[str, Any] = raw["docs"]
        self.origin: str = raw.get("origin", "")
        self.parent = parent
        # Keep Redis's (arbitrary) order from the file: the JSON is sorted by name.
        self.subcommands: dict[bytes, CommandSpec] = {}
        for sub in raw.get("subcommands", []):
            spec = CommandSpec(sub, self)
            self.subcommands[spec.name.split(b"|", 1)[1]] = spec
        self.getkeys_proc: Callable[[CommandSpec, list[bytes]], KeyRefs | None] | None = \
            _GETKEYS_PROCS.get(self.name)
        # Redis doesCommandHaveKeys: a getkeys proc, or a key spec that is not NOT_KEY.
        self.has_keys = self.getkeys_proc is not None or any(
            "not_key" not in k.flags for k in self.key_specs)
        # get_keys fast path: the index of the one key of a single-key command (XADD, GET,
        # XINFO STREAM ...), else 0.
        self.fixed_key = 0
        if len(self.key_specs) == 1 and self.getkeys_proc is None:
            k = self.key_specs[0]
            if (k.bs_type == "index" and k.fk_type == "range" and k.lastkey == 0
                    and "not_key" not in k.flags and "incomplete" not in k.flags):
                self.fixed_key = k.index
        self._info: list[bytes | None] = [None, None, None, None]
        self._docs: list[bytes | None] = [None, None, None, None]

    @property
    def is_container(self) -> bool:
        return bool(self.subcommands)

    def __repr__(self) -> str:
        return f"CommandSpec({self.name.decode()!r}, arity={self.arity})"


def _tip(tips: tuple[str, ...], prefix: str) -> str | None:
    for t in tips:
        if t.startswith(prefix):
            return t[len(prefix):]
    return None


# --- getkeys procedures (Redis db.c), for commands whose key specs are not the whole story ---
KeyRefs = list[tuple[int, tuple[str, ...]]]


def _xread_get_keys(cmd: CommandSpec, argv: list[bytes]) -> KeyRefs | None:
    """db.c xreadGetKeys's scan, Redis's key-spec count: the keys of XREAD/XREADGROUP.

    The STREAMS token is found by skipping the options, as xreadGetKeys does, because
    "STREAMS" may also be a consumer group, consumer or key name and a plain keyword search
    can stop too early. The keys after it are counted by the key spec's range rule (half of
    what follows, rounded down: what Redis answers for an unbalanced list too), so every argv
    where both find the same STREAMS gets Redis's exact answer. Without an option-level
    STREAMS the key spec decides (None here), as in Redis.
    """
    argc = len(argv)
    streams_pos = -1
    i = 1
    while i < argc:
        arg = argv[i].lower()
        if arg == b"block" or arg == b"count":
            i += 2
        elif arg == b"group":
            i += 3
        elif arg == b"claim" or arg == b"maxcount" or arg == b"maxsize":  # Redis 8.4, 8.10
            i += 2
        elif arg == b"noack":
            i += 1
        elif arg == b"streams":
            streams_pos = i
            break
        else:
            break
    if streams_pos == -1:
        return None
    num = (argc - streams_pos - 1) // 2
    if num == 0:
        return []
    # xreadGetKeys gives its keys no flags; the spec's flags are what Redis answers.
    flags = cmd.key_specs[0].flags if cmd.key_specs else ()
    return [(p, flags) for p in range(streams_pos + 1, streams_pos + 1 + num)]


_SET_GET_FLAGS = ("RW", "access", "update")
_SET_FLAGS = ("OW", "update")


def _set_get_keys(cmd: CommandSpec, argv: list[bytes]) -> KeyRefs:
    """db.c setGetKeys: the key is always argv[1]; GET makes it a read as well as a write."""
    for a in argv[3:]:
        if a.lower() == b"get":
            return [(1, _SET_GET_FLAGS)]
    return [(1, _SET_FLAGS)]


_MIGRATE_SKIP = {b"copy": 0, b"replace": 0, b"auth": 1, b"auth2": 2}


def _migrate_get_keys(cmd: CommandSpec, argv: list[bytes]) -> KeyRefs:
    """db.c migrateGetKeys: argv[3], or every argument after KEYS (options skipped, since a
    password may read "keys"); nothing when KEYS comes with a non-empty key argument."""
    flags = cmd.key_specs[0].flags if cmd.key_specs else ()
    argc = len(argv)
    i = 6
    while i < argc:
        arg = argv[i].lower()
        if arg == b"keys":
            if argv[3]:
                return []
            return [(p, flags) for p in range(i + 1, argc)]
        i += 1 + _MIGRATE_SKIP.get(arg, 0)
    return [(3, flags)] if argc > 3 else []


_GETKEYS_PROCS: dict[bytes, Callable[[CommandSpec, list[bytes]], KeyRefs | None]] = {
    b"xread": _xread_get_keys,
    b"xreadgroup": _xread_get_keys,
    b"set": _set_get_keys,
    b"migrate": _migrate_get_keys,
}

# Commands whose getkeys proc is preferred over the key specs (Redis prefers the specs unless
# they carry VARIABLE_FLAGS; for XREAD* we prefer the proc, see the module docstring).
_PROC_FIRST = frozenset({b"xread", b"xreadgroup"})


# --- the table -------------------------------------------------------------------------------
def _load(path: str) -> dict[bytes, CommandSpec]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {spec.name: spec for spec in (CommandSpec(raw) for raw in data["commands"])}


TABLE: dict[bytes, CommandSpec] = _load(JSON_PATH)
"""Top-level commands by lower-case name, in the order of the file (sorted by name)."""

_ALL: dict[bytes, CommandSpec] = dict(TABLE)
for _c in TABLE.values():
    for _s in _c.subcommands.values():
        _ALL[_s.name] = _s

CONTAINERS: frozenset[bytes] = frozenset(n for n, c in TABLE.items() if c.subcommands)
"""Commands with subcommands: the dispatcher must resolve argv[1] before checking arity."""

# Hot path: name -> arity for plain commands, name -> {sub: (arity, fullname)} for containers.
_ARITY: dict[bytes, int | dict[bytes, tuple[int, bytes]]] = {}
for _n, _c in TABLE.items():
    if _c.subcommands:
        _ARITY[_n] = {k: (s.arity, s.name) for k, s in _c.subcommands.items()}
    else:
        _ARITY[_n] = _c.arity
_WRITE: frozenset[bytes] = frozenset(n for n, c in _ALL.items() if "write" in c.flags)
# Commands that may use more memory: refused with OOM over maxmemory (Redis's CMD_DENYOOM).
_DENYOOM: frozenset[bytes] = frozenset(n for n, c in _ALL.items() if "denyoom" in c.flags)
del _n, _c, _s

NO_AUTH: frozenset[bytes] = frozenset(n for n, c in TABLE.items() if "no_auth" in c.flags)
"""Commands a client may send before it authenticated (AUTH, HELLO, QUIT, RESET)."""

RUN_IN_MULTI = frozenset((b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"))
"""Commands that run at once inside MULTI instead of being queued (Redis processCommand)."""


def lookup(name_lower: bytes) -> CommandSpec | None:
    """A command by lower-case name; "xgroup|create" names a subcommand (lookupCommandBySds)."""
    return _ALL.get(name_lower)


def lookup_argv(argv: list[bytes]) -> CommandSpec | None:
    """Redis lookupCommand: the subcommand when argv[0] is a container and argv[1] exists."""
    base = TABLE.get(argv[0].lower())
    if base is None or len(argv) == 1 or not base.subcommands:
        return base
    return base.subcommands.get(argv[1].lower())


def lookup_by_fullname(name: bytes) -> CommandSpec | None:
    """COMMAND INFO/DOCS argument: any case, "a|b" for subcommands, None if unknown."""
    return _ALL.get(name.lower())


def stat_name(argv: list[bytes], name: bytes) -> bytes | None:
    """The name commandstats counts a call under: 'config|get' for a known subcommand (Redis
    counts subcommands apart), `name` for a plain command or a container alone, None for an
    unknown subcommand (Redis has no command to count it under)."""
    a = _ARITY.get(name)
    if a.__class__ is int or a is None or len(argv) == 1:
        return name
    sub = a.get(argv[1].lower())  # type: ignore[union-attr]
    return None if sub is None else sub[1]


def check_arity(argv: list[bytes], name: bytes | None = None) -> bytes | None:
    """The error text Redis's processCommand gives for this argv, or None if it may run.

    Covers unknown command, unknown subcommand of a container, and wrong arity (named by the
    fullname: 'xgroup|create'). `name` is argv[0] already lower-cased, if the caller has it.
    """
    if name is None:
        name = argv[0].lower()
    n = len(argv)
    a = _ARITY.get(name)
    if a.__class__ is int:
        if (a > 0 and a != n) or n < -a:  # type: ignore[operator]
            if name == b"exec":
                # rejectCommandSds: a rejected EXEC aborts the transaction (the dispatcher
                # must discard it) and says so.
                return errors.EXEC_ARITY_ABORT
            return errors.wrong_arity(name)
        return None
    if a is None:
        return errors.unknown_command(argv[0], argv[1:])
    if n == 1:
        # A container alone runs as itself: COMMAND (arity -1) does, XGROUP (-2) does not.
        return None if TABLE[name].arity == -1 else errors.wrong_arity(name)
    sub = a.get(argv[1].lower())  # type: ignore[union-attr]
    if sub is None:
        return errors.unknown_subcommand(argv[1], argv[0])
    arity = sub[0]
    if (arity > 0 and arity != n) or n < -arity:
        return errors.wrong_arity(sub[1])
    return None


def is_write(name: bytes) -> bool:
    """True for commands flagged `write`; pass a fullname (b"xgroup|create") for subcommands."""
    return name in _WRITE


def _subcommand_flagged(argv: list[bytes], name: bytes, flagged: frozenset[bytes]) -> bool:
    """A container command (XGROUP ...) carries the flags of the subcommand it is called with."""
    return (len(argv) > 1 and type(_ARITY.get(name)) is dict
            and name + b"|" + argv[1].lower() in flagged)


def is_write_argv(argv: list[bytes], name: bytes) -> bool:
    """is_write for a request: containers (XGROUP ...) are judged by their subcommand."""
    return name in _WRITE or _subcommand_flagged(argv, name, _WRITE)


def is_denyoom_argv(argv: list[bytes], name: bytes) -> bool:
    """The denyoom flag for a request (containers by their subcommand, as is_write_argv)."""
    return name in _DENYOOM or _subcommand_flagged(argv, name, _DENYOOM)


# --- key extraction --------------------------------------------------------------------------
def _keys_from_specs(cmd: CommandSpec, argv: list[bytes]) -> KeyRefs | None:
    """db.c getKeysUsingKeySpecs; None where Redis returns -1 (a spec that does not fit)."""
    argc = len(argv)
    out: KeyRefs = []
    for spec in cmd.key_specs:
        if "not_key" in spec.flags:
            continue
        first = _begin_search(spec, argv)
        if first is None:
            return None
        if not first:  # the keyword is not there: this spec has no keys here
            continue
        span = _find_keys(spec, argv, first)
        if span is None:
            return None
        first, last = span
        if last >= argc or last < first or first >= argc:
            return None
        out.extend((i, spec.flags) for i in range(first, last + 1, spec.keystep))
        if "incomplete" in spec.flags:
            return None
    return out


def _begin_search(spec: KeySpec, argv: list[bytes]) -> int | None:
    """The index of a spec's first key (begin_search), 0 when its keyword is absent, None for
    a begin_search type Redis has no rule for."""
    if spec.bs_type == "index":
        return spec.index
    if spec.bs_type != "keyword":
        return None
    argc = len(argv)
    kw = spec.keyword.lower()
    if spec.startfrom > 0:
        start, end, step = spec.startfrom, argc - 1, 1
    else:
        start, end, step = argc + spec.startfrom, 0, -1
    if start > end:
        step = -1
    i = start
    while i != end and 1 <= i < argc:
        if argv[i].lower() == kw:
            return i + 1
        i += step
    return 0


def _find_keys(spec: KeySpec, argv: list[bytes], first: int) -> tuple[int, int] | None:
    """(first, last) key index by a spec's find_keys from its begin_search index; None where
    the spec does not fit (a bad key count, an unknown find_keys type)."""
    argc = len(argv)
    if spec.fk_type == "range":
        if spec.lastkey >= 0:
            return first, first + spec.lastkey
        if not spec.limit:
            return first, argc + spec.lastkey
        return first, first + ((argc - first) // spec.limit + spec.lastkey)
    if spec.fk_type != "keynum":
        return None
    if spec.keynumidx >= argc or first + spec.keynumidx >= argc:
        return None
    numkeys = errors.string2ll(argv[first + spec.keynumidx])
    if numkeys is None or numkeys < 0:
        return None
    first += spec.firstkey
    return first, first + numkeys - 1


def get_keys_and_flags(argv: list[bytes]) -> KeyRefs | None:
    """(argv index, key-spec flags) of every key; None if the command cannot have keys here.

    Mirrors getKeysFromCommandWithSpecs: key specs unless they carry VARIABLE_FLAGS or fail, then
    the getkeys proc. Unknown commands and commands without keys give [] (not None).
    """
    cmd = lookup_argv(argv)
    if cmd is None or not cmd.has_keys:
        return []
    return _get_keys(cmd, argv)


def _get_keys(cmd: CommandSpec, argv: list[bytes]) -> KeyRefs | None:
    proc = cmd.getkeys_proc
    if proc is not None and cmd.name in _PROC_FIRST:
        got = proc(cmd, argv)
        if got is not None:
            return got or None
        return _keys_from_specs(cmd, argv)
    specs = cmd.key_specs
    if specs and not any("variable_flags" in k.flags for k in specs):
        got = _keys_from_specs(cmd, argv)
        if got is not None:
            return got
    if proc is not None:
        return proc(cmd, argv) or None
    return None


def get_keys(argv: list[bytes]) -> list[int]:
    """Argument indexes of the keys of a full command, [] if none or the syntax is broken."""
    cmd = TABLE.get(argv[0].lower())
    if cmd is None:
        return []
    if cmd.subcommands and len(argv) > 1:
        cmd = cmd.subcommands.get(argv[1].lower())
        if cmd is None:
            return []
    fk = cmd.fixed_key
    if fk:  # one fixed-position key (XADD, XACK, XINFO STREAM, GET ...)
        return [fk] if fk < len(argv) else []
    refs = _get_keys(cmd, argv) if cmd.has_keys else None
    return [p for p, _ in refs] if refs else []


# --- COMMAND replies -------------------------------------------------------------------------
def _status_set(items: tuple[str, ...] | list[str]) -> RespSet:
    return RespSet(Status(x.encode()) for x in items)


def _generic(v: Any, key: str = "") -> Any:
    """JSON -> reply tree for key specs and docs: dicts are maps, `flags` are sets of status."""
    if isinstance(v, dict):
        return Map((k.encode(), _generic(x, k)) for k, x in v.items())
    if isinstance(v, list):
        if key in ("flags", "doc_flags"):
            return _status_set(v)
        if key == "history":  # a set of [version, text] pairs
            return RespSet(_generic(x) for x in v)
        return [_generic(x) for x in v]
    if isinstance(v, str):
        return v.encode()
    return v


def _info_tree(cmd: CommandSpec) -> list[Any]:
    """server.c addReplyCommandInfo: the ten fields, with Redis's reply types."""
    return [
        cmd.name, cmd.arity, _status_set(cmd.flag_list),
        cmd.first_key, cmd.last_key, cmd.step,
        _status_set(cmd.acl_categories),
        RespSet(t.encode() for t in cmd.tips),
        RespSet(_generic(k.raw) for k in cmd.key_specs),
        # addReplyCommandSubCommands: an array when there are subcommands, else an empty set.
        [_info_tree(s) for s in cmd.subcommands.values()] if cmd.subcommands else RespSet(),
    ]


def _docs_tree(cmd: CommandSpec) -> Map:
    """server.c addReplyCommandDocs: a map in Redis's field order; subcommands as a map."""
    d = cmd.docs
    out = Map()
    for k in _DOC_KEYS:
        if k in d:
            v = d[k]
            if k == "arguments":
                out.append((b"arguments", [_arg_tree(a) for a in v]))
            else:
                out.append((k.encode(), _generic(v, k)))
    if cmd.subcommands:
        out.append((b"subcommands",
                    Map((s.name, _docs_tree(s)) for s in cmd.subcommands.values())))
    return out


_DOC_KEYS = ("summary", "since", "group", "complexity", "module", "doc_flags",
             "deprecated_since", "replaced_by", "history", "arguments")
_ARG_KEYS = ("name", "type", "display_text", "key_spec_index", "token", "summary", "since",
             "deprecated_since", "flags")


def _arg_tree(arg: dict[str, Any]) -> Map:
    """server.c addReplyCommandArgList, one argument."""
    out = Map()
    for k in _ARG_KEYS:
        if k in arg:
            out.append((k.encode(), _generic(arg[k], k)))
    if "arguments" in arg:
        out.append((b"arguments", [_arg_tree(a) for a in arg["arguments"]]))
    return out


def _proto_slot(proto: int) -> int:
    return 3 if proto == 3 else 2


def _encoded(cache: list[bytes | None], tree: Callable[[CommandSpec], Any], cmd: CommandSpec,
             proto: int) -> bytes:
    """A command's INFO or DOCS reply, encoded once per protocol and kept in `cache`."""
    p = _proto_slot(proto)
    b = cache[p]
    if b is None:
        b = cache[p] = encode(tree(cmd), p)
    return b


def _info_bytes(cmd: CommandSpec, proto: int) -> bytes:
    return _encoded(cmd._info, _info_tree, cmd, proto)


def _docs_bytes(cmd: CommandSpec, proto: int) -> bytes:
    return _encoded(cmd._docs, _docs_tree, cmd, proto)


_ALL_INFO: dict[int, bytes] = {}


def command_reply(proto: int) -> bytes:
    """COMMAND and COMMAND INFO with no names: the info of every top-level command."""
    p = _proto_slot(proto)
    b = _ALL_INFO.get(p)
    if b is None:
        b = _ALL_INFO[p] = array_header(len(TABLE)) + b"".join(
            _info_bytes(c, p) for c in TABLE.values())
    return b


def info_reply(names: list[bytes], proto: int) -> bytes:
    """COMMAND INFO [name ...]: one entry per name, a null for unknown names."""
    if not names:
        return command_reply(proto)
    nil = null(proto)
    parts = [array_header(len(names))]
    for n in names:
        cmd = lookup_by_fullname(n)
        parts.append(nil if cmd is None else _info_bytes(cmd, proto))
    return b"".join(parts)


def docs_reply(names: list[bytes], proto: int) -> bytes:
    """COMMAND DOCS [name ...]: a map name -> docs (RESP2: flat array); unknown names skipped."""
    cmds = list(TABLE.values()) if not names else [
        c for c in (lookup_by_fullname(n) for n in names) if c is not None]
    return map_header(len(cmds), proto) + b"".join(bulk(c.name) + _docs_bytes(c, proto)
                                                   for c in cmds)


def count_reply() -> bytes:
    """COMMAND COUNT: top-level commands only, as Redis counts server.commands."""
    return integer(len(TABLE))


def list_reply(args: list[bytes], proto: int) -> bytes:
    """COMMAND LIST [FILTERBY MODULE name | ACLCAT cat | PATTERN pattern] (args after LIST)."""
    filt: Callable[[CommandSpec], bool] | None = None
    i = 0
    while i < len(args):
        if args[i].lower() == b"filterby" and len(args) - 1 - i == 2:
            kind, arg = args[i + 1].lower(), args[i + 2]
            if kind == b"module":
                filt = _no_command  # xshard loads no modules
            elif kind == b"aclcat":
                cat = "@" + arg.decode("latin-1").lower()
                filt = lambda c, cat=cat: cat in c.acl_categories  # noqa: E731
            elif kind == b"pattern":
                filt = lambda c, pat=arg: stringmatch(pat, c.name, nocase=True)  # noqa: E731
            else:
                raise ReplyError(errors.SYNTAX)
            i += 3
        else:
            raise ReplyError(errors.SYNTAX)
    names = []
    for c in TABLE.values():
        for x in (c, *c.subcommands.values()):
            if filt is None or filt(x):
                names.append(x.name)
    return array_header(len(names)) + b"".join(bulk(n) for n in names)


def _no_command(_c: CommandSpec) -> bool:
    return False


def getkeys_reply(target: list[bytes], with_flags: bool, proto: int) -> bytes:
    """COMMAND GETKEYS / GETKEYSANDFLAGS <full command> (db.c getKeysSubcommandImpl)."""
    cmd = lookup_argv(target) if target else None
    if cmd is None:
        raise ReplyError(errors.GETKEYS_INVALID_COMMAND)
    if not cmd.has_keys:
        raise ReplyError(errors.GETKEYS_NO_KEYS)
    n = len(target)
    if (cmd.arity > 0 and cmd.arity != n) or n < -cmd.arity:
        raise ReplyError(errors.GETKEYS_WRONG_ARITY)
    refs = _get_keys(cmd, target)
    if not refs:  # no key found, or a spec that does not fit: the same to Redis
        if "no_mandatory_keys" not in cmd.flags:
            raise ReplyError(errors.GETKEYS_INVALID_ARGS)
        return EMPTY_ARRAY
    if not with_flags:
        return encode([target[p] for p, _ in refs], proto)
    return encode([[target[p], _status_set(f)] for p, f in refs], proto)


HELP_LINES: tuple[bytes, ...] = (
    b"(no subcommand)",
    b"    Return details about all Redis commands.",
    b"COUNT",
    b"    Return the total number of commands in this Redis server.",
    b"LIST",
    b"    Return a list of all commands in this Redis server.",
    b"INFO [<command-name> ...]",
    b"    Return details about multiple Redis commands.",
    b"    If no command names are given, documentation details for all",
    b"    commands are returned.",
    b"DOCS [<command-name> ...]",
    b"    Return documentation details about multiple Redis commands.",
    b"    If no command names are given, documentation details for all",
    b"    commands are returned.",
    b"GETKEYS <full-command>",
    b"    Return the keys from a full Redis command.",
    b"GETKEYSANDFLAGS <full-command>",
    b"    Return the keys and the access flags from a full Redis command.",
)


def help_reply(name: bytes = b"COMMAND", lines: tuple[bytes, ...] = HELP_LINES) -> bytes:
    """networking.c addReplyHelp: a header naming the command, the lines, then HELP."""
    out = [status(b"%s <subcommand> [<arg> [value] [opt] ...]. Subcommands are:" % name.upper())]
    out.extend(status(line) for line in lines)
    out += [status(b"HELP"), status(b"    Print this help.")]
    return array_header(len(lines) + 3) + b"".join(out)


