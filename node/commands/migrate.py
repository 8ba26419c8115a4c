"""DUMP, RESTORE, RESTORE-ASKING and MIGRATE: moving keys between servers (Redis cluster.c).

The payload is Redis's own (node/rdb.py), so keys move both ways between xshard and
redis-server. Effects: RESTORE goes out with an absolute TTL (ABSTTL) and REPLACE, so a
replica or a replayed AOF builds the same key however late it applies it; MIGRATE goes out as
a DEL of the keys the target acknowledged (nothing with COPY).

MIGRATE differs from Redis in one way: Redis blocks the whole server while it talks to the
target, we cannot block the loop. The client waits (parked like a blocked read) while the
transfer runs as a task, and writes to the keys being moved are postponed until it ends
(node/writepause.py), so no write can land between the copy and the delete.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from node import errors, rdb, slotmove
from node.blocking import Blocked
from node.client import Client
from node.commands import command
from node.errors import ResponseError
from node.link import Link
from node.resp import OK, ReplyError, bulk, encode_command, error, null, status

log = logging.getLogger("xshard.node")

_CHUNK = 64 * 1024  # MIGRATE writes each command in 64 KiB chunks, as Redis does


@command(b"dump")
def dump(c: Client, argv: list[bytes]) -> bytes:
    """DUMP key"""
    v = c.db.get(argv[1])
    if v is None:
        return null(c.proto)
    return bulk(rdb.dump_payload(v))


@command(b"restore", b"restore-asking")
def restore(c: Client, argv: list[bytes]) -> bytes:
    """RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]

    IDLETIME and FREQ are checked as Redis checks them; xshard keeps no LRU/LFU data (it never
    evicts), so they change nothing.
    """
    key = argv[1]
    replace = absttl = False
    idle = freq = -1
    j = 4
    argc = len(argv)
    while j < argc:
        opt = argv[j].lower()
        more = argc - j - 1
        if opt == b"replace":
            replace = True
        elif opt == b"absttl":
            absttl = True
        elif opt == b"idletime" and more and freq == -1:
            idle = errors.parse_int_or_error(argv[j + 1])
            if idle < 0:
                raise ReplyError(errors.INVALID_IDLETIME)
            j += 1
        elif opt == b"freq" and more and idle == -1:
            freq = errors.parse_int_or_error(argv[j + 1])
            if not 0 <= freq <= 255:
                raise ReplyError(errors.INVALID_FREQ)
            j += 1
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    db = c.db
    if not replace and db.get(key) is not None:
        raise ReplyError(errors.BUSYKEY)
    ttl = errors.parse_int_or_error(argv[2])
    if ttl < 0:
        raise ReplyError(errors.INVALID_TTL)
    payload = argv[3]
    if not rdb.check_payload(payload):
        raise ReplyError(errors.DUMP_PAYLOAD_WRONG)
    try:
        value = rdb.load_payload(payload)
    except rdb.UnsupportedType as e:
        raise ReplyError(errors.restore_unsupported(e.name)) from None
    except rdb.RdbError:
        raise ReplyError(errors.BAD_DATA_FORMAT) from None
    deleted = replace and db.delete(key)
    now = c.server.now_ms()
    if ttl and not absttl:
        ttl += now
    # checkAlreadyExpired: a primary drops it; a replica or a replay (is_master) keeps it and
    # waits for the primary's DEL, as Redis does while loading or as a replica.
    if ttl and ttl <= now and not c.is_master:
        if deleted:
            c.server.propagate([b"DEL", key])
        return OK
    db.set(key, value)
    effect = [b"RESTORE", key, b"%d" % ttl, payload, b"REPLACE"]
    if ttl:
        db.set_expire(key, ttl)
        effect.append(b"ABSTTL")
    c.server.propagate(effect)
    return OK


@command(b"xshard.restore")
def xshard_restore(c: Client, argv: list[bytes]) -> bytes:
    """XSHARD.RESTORE key HEAD|BLOCKS payload: one step of a slot move's copy of a key, in
    xshard's own format (node/slotmove.py). It goes out as its own effect: the target's
    replicas and AOF rebuild the key the same way."""
    slotmove.restore_part(c, argv[1], argv[2].lower(), argv[3])
    c.server.dirty += 1
    c.server.propagate(argv)
    return OK


# --- MIGRATE ------------------------------------------------------------------------------------
class _Options:
    __slots__ = ("copy", "replace", "username", "password", "keys")

    def __init__(self) -> None:
        self.copy = False
        self.replace = False
        self.username: bytes | None = None
        self.password: bytes | None = None
        self.keys: list[bytes] = []


def _parse_migrate(argv: list[bytes]) -> _Options:
    """migrateCommand's option loop, errors in Redis's order."""
    o = _Options()
    o.keys = [argv[3]]
    argc = len(argv)
    j = 6
    while j < argc:
        opt = argv[j].lower()
        more = argc - 1 - j
        if opt == b"copy":
            o.copy = True
        elif opt == b"replace":
            o.replace = True
        elif opt == b"auth":
            if not more:
                raise ReplyError(errors.SYNTAX)
            j += 1
            o.password = argv[j]
        elif opt == b"auth2":
            if more < 2:
                raise ReplyError(errors.SYNTAX)
            o.username, o.password = argv[j + 1], argv[j + 2]
            j += 2
        elif opt == b"keys":
            if argv[3]:
                raise ReplyError(errors.MIGRATE_KEYS_WITH_KEY)
            o.keys = argv[j + 1:]
            break
        else:
            raise ReplyError(errors.SYNTAX)
        j += 1
    return o


@command(b"migrate")
def migrate(c: Client, argv: list[bytes]) -> bytes:
    """MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password]
    [AUTH2 username password] [KEYS key [key ...]]"""
    o = _parse_migrate(argv)
    timeout = errors.parse_int_or_error(argv[5])
    dbid = errors.parse_int_or_error(argv[4])
    if timeout <= 0:
        timeout = 1000
    db = c.db
    present = [k for k in o.keys if db.get(k) is not None]
    if not present:
        return status(b"NOKEY")
    if c.in_exec:
        raise ReplyError(errors.MIGRATE_IN_EXEC)
    now = c.server.now_ms()
    cmds: list[bytes] = []
    if o.password is not None:
        auth = [b"AUTH", o.password] if o.username is None else [b"AUTH", o.username, o.password]
        cmds.append(encode_command(auth))
    cmds.append(encode_command([b"SELECT", b"%d" % dbid]))
    restore_name = b"RESTORE-ASKING" if c.server.cluster is not None else b"RESTORE"
    moved: list[bytes] = []
    for key in present:
        ttl = 0
        when = db.expires.get(key)
        if when is not None:
            ttl = when - now
            if ttl < 0:
                continue
            ttl = max(ttl, 1)
        args = [restore_name, key, b"%d" % ttl, rdb.dump_payload(db.data[key])]
        if o.replace:
            args.append(b"REPLACE")
        cmds.append(encode_command(args))
        moved.append(key)
    host = argv[1].decode(errors="replace")
    port = errors.parse_int_or_error(argv[2])
    b = Blocked([], 0, argv)
    c.server.pauses.pause_keys(moved)
    asyncio.ensure_future(_transfer(c, b, host, port, timeout / 1000, cmds,
                                    o.password is not None, moved, o.copy))
    raise b


async def _send(host: str, port: int, timeout: float, cmds: list[bytes],
                ctx: ssl.SSLContext | None = None) -> tuple[list[object], bytes | None]:
    """Send `cmds` (encoded) and read their replies, each step within `timeout` as Redis's
    syncWrite/syncReadLine; returns the replies that came back (an error reply as its
    ResponseError) and, when the link failed, the IOERR text (nothing read yet: the caller
    may retry). `ctx`: the node's TLS client context, with tls-cluster (as Redis, MIGRATE then
    goes over TLS)."""
    try:
        link = await Link.open(host, port, ssl=ctx, timeout=timeout)
    except TimeoutError:
        return [], errors.IOERR_CONNECT
    except OSError:  # Redis connects without blocking: a refusal shows up as a failed write
        return [], errors.IOERR_WRITE
    try:
        try:
            sent = [await link.write(cmd, timeout, _CHUNK, want=True) for cmd in cmds]
        except (OSError, TimeoutError):
            return [], errors.IOERR_WRITE
        replies: list[object] = []
        for n in sent:
            try:
                await link.drain(timeout, n, errors=False)
            except (OSError, TimeoutError):
                return replies, errors.IOERR_READ
            replies.append(link.reply(n))
        return replies, None
    finally:
        await link.aclose()


async def _transfer(c: Client, b: Blocked, host: str, port: int, timeout: float,
                    cmds: list[bytes], auth: bool, keys: list[bytes], copy: bool) -> None:
    """The network half of MIGRATE; ends by releasing the keys and replying."""
    server = c.server
    ctx = server.tls_client_context if server.config.tls_cluster else None
    reply: bytes
    try:
        lead = 2 if auth else 1  # AUTH and SELECT replies come first
        replies, err = await _send(host, port, timeout, cmds, ctx)
        if err is not None and not replies[lead:] and err != errors.IOERR_CONNECT:
            replies, err = await _send(host, port, timeout, cmds, ctx)  # once
        first_error = next((r for r in replies if isinstance(r, ResponseError)), None)
        acked = []
        if not any(isinstance(r, ResponseError) for r in replies[:lead]):
            acked = [k for k, r in zip(keys, replies[lead:], strict=False)
                     if not isinstance(r, ResponseError)]
        if not copy:
            for k in acked:
                if server.db.delete(k):
                    server.propagate([b"DEL", k])
            c.woff = server.effects.offset
        if first_error is not None:
            reply = error(errors.target_error(first_error.message))
        elif err is not None:
            reply = error(err)
        else:
            reply = OK
    except Exception as e:  # a bug must not leave the keys paused or the client parked
        log.exception("MIGRATE to %s:%d failed", host, port)
        reply = error(errors.internal_error(e))
    finally:
        server.pauses.resume_keys(keys)
    if c.blocked is b:  # unblock counts an error reply in errorstats
        server.blocking.unblock(c, reply)
