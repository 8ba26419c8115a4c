"""Server administration: INFO, CONFIG, DEBUG, TIME, LASTSAVE, WAIT, WAITAOF, ROLE."""

from __future__ import annotations

import logging
import time

from node import errors, info
from node.blocking import OFFSETS, Blocked
from node.client import Client
from node.commands import Subcommands, command, help_or_unknown_subcommand
from node.config import BY_NAME, ConfigError, Setting
from node.resp import OK, Map, ReplyError, Status, Verbatim, encode, integer

log = logging.getLogger("xshard.node")

_INFO_REPLY = Verbatim


@command(b"info")
def info_(c: Client, argv: list[bytes]) -> bytes:
    text = info.render(c.server, [a.decode(errors="replace") for a in argv[1:]])
    return encode(_INFO_REPLY(text), c.proto)


CONFIG_HELP = [
    b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET <pattern>", b"    Return parameters matching the glob-like <pattern> and their values.",
    b"SET <directive> <value>", b"    Set the configuration <directive> to <value>.",
    b"RESETSTAT", b"    Reset statistics reported by the INFO command.",
    b"REWRITE", b"    Rewrite the configuration file.",
    b"HELP", b"    Print this help.",
]


CONFIG = Subcommands(b"config")  # CONFIG <subcommand> ...: each is a function below


@CONFIG(b"get")
def config_get(c: Client, argv: list[bytes]) -> bytes:
    """CONFIG GET pattern [pattern ...]: each setting once, in the order first matched."""
    if len(argv) < 3:
        raise ReplyError(errors.wrong_arity(b"config|get"))
    pairs: dict[bytes, bytes] = {}
    for pat in argv[2:]:
        for k, v in c.server.config.get(pat):
            pairs.setdefault(k, v)
    return encode(Map(pairs.items()), c.proto)


@CONFIG(b"set")
def config_set(c: Client, argv: list[bytes]) -> bytes:
    """CONFIG SET name value [name value ...]: all or nothing, then each setting's listeners."""
    todo = _config_set_args(argv)
    cfg = c.server.config
    old = {s.name: getattr(cfg, s.attr) for s, _, _ in todo}
    try:
        for s, raw_name, value in todo:  # noqa: B007 - raw_name names the failing one
            if not s.mutable:
                raise ConfigError(errors.CONFIG_IMMUTABLE)
            cfg.apply(s.name, value)
        if any(s.name.startswith("tls-") for s, _, _ in todo):
            _reload_tls(c)
    except ConfigError as e:
        for name, v in old.items():  # CONFIG SET of several values is all or nothing
            setattr(cfg, BY_NAME[name].attr, v)
        raise ReplyError(errors.config_set_failed(raw_name, str(e).encode())) from None
    for s, _, _ in todo:
        for fn in c.server.config_listeners:
            fn(s.name)
    return OK


def _config_set_args(argv: list[bytes]) -> list[tuple[Setting, bytes, bytes]]:
    """CONFIG SET's (setting, name as given, value) triples, or Redis's error for an odd
    count, an unknown setting or one given twice."""
    n = len(argv)
    if n < 4 or n % 2:
        raise ReplyError(errors.wrong_arity(b"config|set"))
    todo: list[tuple[Setting, bytes, bytes]] = []
    for i in range(2, n, 2):
        s = BY_NAME.get(argv[i].decode(errors="replace").lower())
        if s is None:
            raise ReplyError(errors.config_set_unknown(argv[i]))
        if any(t[0] is s for t in todo):
            raise ReplyError(errors.config_set_failed(argv[i], errors.CONFIG_DUPLICATE.encode()))
        todo.append((s, argv[i], argv[i + 1]))
    return todo


@CONFIG(b"resetstat")
def config_resetstat(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 2:
        raise ReplyError(errors.wrong_arity(b"config|resetstat"))
    c.server.stats.reset()
    return OK


@CONFIG(b"rewrite")
def config_rewrite(c: Client, argv: list[bytes]) -> bytes:
    """CONFIG REWRITE: every setting into the --config file."""
    path = c.server.config_file
    if not path:
        raise ReplyError(errors.NO_CONFIG_FILE)
    lines = []
    for name, value in c.server.config.get(b"*"):
        lines.append(f"{name.decode()} \"{value.decode(errors='replace')}\"")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return OK


@CONFIG(b"help")
def config_help(c: Client, argv: list[bytes]) -> bytes:
    return help_or_unknown_subcommand(c, argv, b"CONFIG", CONFIG_HELP)


def _reload_tls(c: Client) -> None:
    """CONFIG SET of a tls-* setting: new contexts, or the old ones kept and an error."""
    from node import tls

    try:
        tls.configure(c.server)
    except tls.TlsError as e:
        log.warning("Failed to update TLS configuration: %s", e)
        raise ConfigError(errors.CONFIG_TLS_UPDATE) from None


@command(b"time")
def time_(c: Client, argv: list[bytes]) -> bytes:
    now = time.time()
    return encode([b"%d" % int(now), b"%d" % int((now % 1) * 1e6)], c.proto)


@command(b"lastsave")
def lastsave(c: Client, argv: list[bytes]) -> bytes:
    p = c.server.persistence
    return integer(int(p.last_save if p is not None else c.server.start_time))


@command(b"role")
def role(c: Client, argv: list[bytes]) -> bytes:
    r = c.server.replication
    if r is not None:
        return encode(r.role_reply(), c.proto)
    return encode([b"master", c.server.effects.offset, []], c.proto)


def _replicas_acked(c: Client) -> int:
    r = c.server.replication
    return r.acked_replicas(c) if r is not None else 0


@command(b"wait")
def wait(c: Client, argv: list[bytes]) -> bytes:
    r = c.server.replication
    if r is not None and r.is_replica:
        raise ReplyError(errors.WAIT_ON_REPLICA)
    numreplicas = errors.parse_int_or_error(argv[1])
    timeout = errors.parse_timeout_ms_or_error(argv[2])
    acked = _replicas_acked(c)
    if acked >= numreplicas or c.in_exec:
        return integer(acked)
    if r is not None and not c.rerunning:
        r.request_ack()  # REPLCONF GETACK now, not at the replicas' next 100 ms tick
    # Re-run whenever a replica's ack moves an offset (BlockingManager.OFFSETS).
    raise Blocked([OFFSETS], timeout, argv, on_timeout=lambda proto: integer(_replicas_acked(c)))


@command(b"waitaof")
def waitaof(c: Client, argv: list[bytes]) -> bytes:
    numlocal = errors.parse_int_or_error(argv[1])
    if not 0 <= numlocal <= 1:
        raise ReplyError(errors.WAITAOF_NUMLOCAL_RANGE)
    numreplicas = errors.parse_int_or_error(argv[2])
    if numreplicas < 0:
        raise ReplyError(errors.WAITAOF_NUMREPLICAS_RANGE)
    timeout = errors.parse_timeout_ms_or_error(argv[3])
    if numlocal and not c.server.config.appendonly:
        raise ReplyError(errors.WAITAOF_APPENDONLY_OFF)

    def counts() -> tuple[int, int]:
        p = c.server.persistence
        r = c.server.replication
        return (int(p.fsynced_for(c)) if p is not None else 0,
                r.aof_acked_replicas(c) if r is not None else 0)

    local, remote = counts()
    if (local >= numlocal and remote >= numreplicas) or c.in_exec:
        return encode([local, remote], c.proto)
    if numreplicas and c.server.replication is not None and not c.rerunning:
        c.server.replication.request_ack()
    # Re-run whenever an fsync or a replica's ack moves an offset (BlockingManager.OFFSETS).
    raise Blocked([OFFSETS], timeout, argv, on_timeout=lambda proto: encode(list(counts()), proto))


DEBUG_HELP = [
    b"DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"LOADAOF", b"    Flush the AOF buffers on disk and reload the AOF in memory.",
    b"OBJECT <key>", b"    Show low level info about `key` and associated value.",
    b"RELOAD", b"    Save the snapshot on disk and reload it back to memory.",
    b"SET-ACTIVE-EXPIRE <0|1>", b"    Setting it to 0 disables expiring keys in background.",
    b"SLEEP <seconds>", b"    Stop the server for <seconds>. Decimals allowed.",
    b"HELP", b"    Print this help.",
]


@command(b"debug")
def debug(c: Client, argv: list[bytes]) -> bytes:
    mode = c.server.config.enable_debug_command
    local = c.addr.startswith(("127.", "::1", "localhost"))
    if mode == "no" or (mode == "local" and not local):
        raise ReplyError(errors.DEBUG_DISABLED)
    sub = argv[1].lower()
    if sub == b"sleep" and len(argv) == 3:
        try:
            secs = float(argv[2])
        except ValueError:
            raise ReplyError(errors.NOT_FLOAT) from None
        time.sleep(max(secs, 0))  # DEBUG SLEEP stops the server, by definition
        return OK
    if sub in (b"reload", b"loadaof"):
        p = c.server.persistence
        if p is None:
            raise ReplyError(errors.NO_PERSISTENCE)
        try:
            p.reload(from_aof=sub == b"loadaof")
        except Exception as e:  # noqa: BLE001 - the node stays up; the reason goes back
            raise ReplyError(errors.load_failed(str(e))) from None
        return OK
    if sub == b"set-active-expire" and len(argv) == 3:
        c.server.active_expire_enabled = argv[2] != b"0"
        return OK
    if sub == b"object" and len(argv) == 3:
        v = c.db.get(argv[2])
        if v is None:
            raise ReplyError(errors.NO_SUCH_KEY)
        return encode(Status(b"Value at:0x0 refcount:1 encoding:%s serializedlength:0 lru:0 "
                             b"lru_seconds_idle:0" % type(v).__name__.lower().encode()), c.proto)
    return help_or_unknown_subcommand(c, argv, b"DEBUG", DEBUG_HELP)
