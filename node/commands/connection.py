"""Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT, READONLY..."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from node import REDIS_VERSION, errors
from node.client import Client
from node.commands import Subcommands, command
from node.resp import (
    OK,
    PONG,
    Map,
    ReplyError,
    Status,
    Verbatim,
    bulk,
    encode,
    error,
    integer,
    null,
    status,
)
from node.writepause import ALL, WRITE

if TYPE_CHECKING:
    from node.server import Server


@command(b"ping")
def ping(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 2:
        raise ReplyError(errors.wrong_arity(b"ping"))
    return PONG if len(argv) == 1 else bulk(argv[1])


@command(b"echo")
def echo(c: Client, argv: list[bytes]) -> bytes:
    return bulk(argv[1])


def _check_password(c: Client, user: bytes, password: bytes, cmd: bytes) -> None:
    """Log in as `user` (node/acl.py); a failure is an ACL LOG entry and WRONGPASS."""
    if not c.server.acl.authenticate(c, user, password, cmd):
        raise ReplyError(errors.WRONGPASS)


@command(b"auth")
def auth(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    if len(argv) == 2:
        if c.server.acl.users[b"default"].nopass:
            raise ReplyError(errors.AUTH_NOT_CONFIGURED)
        _check_password(c, b"default", argv[1], argv[0])
    else:
        _check_password(c, argv[1], argv[2], argv[0])
    return OK


def _valid_client_name(name: bytes) -> bool:
    return all(33 <= ch <= 126 for ch in name)


@command(b"hello")
def hello(c: Client, argv: list[bytes]) -> bytes:
    proto = c.proto
    if len(argv) >= 2:
        v = errors.string2ll(argv[1])
        if v is None:
            raise ReplyError(errors.PROTO_NOT_INTEGER)
        if v < 2 or v > 3:
            raise ReplyError(errors.NOPROTO)
        proto = v
    setname = None
    i = 2
    while i < len(argv):
        opt = argv[i].lower()
        more = len(argv) - i - 1
        if opt == b"auth" and more >= 2:
            _check_password(c, argv[i + 1], argv[i + 2], argv[0])
            i += 3
        elif opt == b"setname" and more >= 1:
            setname = argv[i + 1]
            if not _valid_client_name(setname):
                raise ReplyError(errors.INVALID_CLIENT_NAME)
            i += 2
        else:
            raise ReplyError(errors.hello_syntax(argv[i]))
    if not c.authenticated:
        raise ReplyError(errors.HELLO_NOAUTH)
    if setname is not None:
        c.name = setname or None
    c.proto = proto
    return encode(Map.of(
        b"server", b"redis", b"version", REDIS_VERSION.encode(), b"proto", proto, b"id", c.id,
        b"mode", b"standalone", b"role", c.server.role.encode(), b"modules", [],
    ), proto)


@command(b"select")
def select(c: Client, argv: list[bytes]) -> bytes:
    n = errors.parse_int_or_error(argv[1])
    if n != 0:
        raise ReplyError(errors.DB_INDEX_OUT_OF_RANGE)
    return OK


@command(b"quit")
def quit_(c: Client, argv: list[bytes]) -> bytes:
    c.close_after_reply = True
    return OK


@command(b"reset")
def reset(c: Client, argv: list[bytes]) -> bytes:
    c.reset()
    return status(b"RESET")


@command(b"readonly", b"readwrite")
def readonly(c: Client, argv: list[bytes]) -> bytes:
    """READONLY / READWRITE: may this client read from a cluster replica (node/cluster.py)."""
    c.readonly = argv[0].lower() == b"readonly"
    return OK


@command(b"asking")
def asking(c: Client, argv: list[bytes]) -> bytes:
    """The next command may use a slot this node is importing (node/cluster.py)."""
    c.asking = True
    return OK


# --- CLIENT ----------------------------------------------------------------------------------
def client_info_line(c: Client) -> bytes:
    """One line of CLIENT LIST / CLIENT INFO, in Redis 7.4's field order."""
    now = time.time()
    flags = "".join(f for f, on in (
        ("x", c.in_multi), ("b", c.blocked is not None), ("d", c.dirty_cas),
        ("c", c.close_after_reply), ("r", c.readonly), ("e", c.no_evict),
    ) if on) or "N"
    obl = c.conn.transport.get_write_buffer_size() if c.conn and c.conn.transport else 0
    name = (c.name or b"").decode(errors="replace")
    return (
        f"id={c.id} addr={c.addr} laddr={c.laddr} fd=8 name={name} age={int(now - c.ctime)} "
        f"idle={int(now - c.last_interaction_ms / 1000)} flags={flags} db=0 sub=0 psub=0 ssub=0 "
        f"multi={len(c.multi_queue) if c.in_multi else -1} watch={len(c.watched)} qbuf=0 "
        f"qbuf-free=0 argv-mem=0 multi-mem=0 rbs=1024 rbp=0 obl={obl} oll=0 omem={obl} "
        f"tot-mem={1024 + obl} events=r cmd={(c.last_cmd or b'NULL').decode()} user={c.user.decode(errors='replace')} "
        f"redir=-1 resp={c.proto} lib-name={c.lib_name.decode(errors='replace')} "
        f"lib-ver={c.lib_ver.decode(errors='replace')}"
    ).encode()


CLIENT_HELP = [
    b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CACHING (YES|NO)", b"    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    b"GETREDIR", b"    Return the client ID we are redirecting to when tracking is enabled.",
    b"GETNAME", b"    Return the name of the current connection.",
    b"ID", b"    Return the ID of the current connection.",
    b"INFO", b"    Return information about the current client connection.",
    b"KILL <ip:port>", b"    Kill connection made from <ip:port>.",
    b"KILL <option> <value> [<option> <value> [...]]",
    b"    Kill connections. Options are:",
    b"    * ADDR (<ip:port>|<unixsocket>:0)", b"      Kill connections made from the specified address",
    b"    * LADDR (<ip:port>|<unixsocket>:0)", b"      Kill connections made to specified local address",
    b"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", b"      Kill connections by type.",
    b"    * USER <username>", b"      Kill connections authenticated by <username>.",
    b"    * SKIPME (YES|NO)", b"      Skip killing current connection (default: yes).",
    b"    * ID <client-id>", b"      Kill connections by client id.",
    b"    * MAXAGE <maxage>", b"      Kill connections older than the specified age.",
    b"LIST [options ...]", b"    Return information about client connections. Options:",
    b"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", b"      Return clients of specified type.",
    b"UNPAUSE", b"    Stop the current client pause, resuming traffic.",
    b"PAUSE <timeout> [WRITE|ALL]", b"    Suspend all, or just write, clients for <timeout> milliseconds.",
    b"REPLY (ON|OFF|SKIP)", b"    Control the replies sent to the current connection.",
    b"SETNAME <name>", b"    Assign the name <name> to the current connection.",
    b"SETINFO <option> <value>", b"    Set client meta attr. Options are:",
    b"    * LIB-NAME: the client lib name.", b"    * LIB-VER: the client lib version.",
    b"UNBLOCK <clientid> [TIMEOUT|ERROR]",
    b"    Unblock the specified blocked client.",
    b"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    b"         [OPTIN] [OPTOUT] [NOLOOP]", b"    Control server assisted client side caching.",
    b"TRACKINGINFO", b"    Report tracking status for the current connection.",
    b"NO-EVICT (ON|OFF)", b"    Protect current client connection from eviction.",
    b"NO-TOUCH (ON|OFF)",
    b"    Will not touch LRU/LFU stats when this mode is on.",
    b"HELP", b"    Print this help.",
]


def _client_arity(argv: list[bytes], ok: bool) -> None:
    if not ok:
        raise ReplyError(errors.wrong_arity(b"client|" + argv[1].lower()))


CLIENT = Subcommands(b"client")  # CLIENT <subcommand> ...: each is a function below


@CLIENT(b"id")
def client_id(c: Client, argv: list[bytes]) -> bytes:
    _client_arity(argv, len(argv) == 2)
    return integer(c.id)


@CLIENT(b"setname")
def client_setname(c: Client, argv: list[bytes]) -> bytes:
    _client_arity(argv, len(argv) == 3)
    if not _valid_client_name(argv[2]):
        raise ReplyError(errors.INVALID_CLIENT_NAME)
    c.name = argv[2] or None
    return OK


@CLIENT(b"getname")
def client_getname(c: Client, argv: list[bytes]) -> bytes:
    _client_arity(argv, len(argv) == 2)
    return bulk(c.name) if c.name else null(c.proto)


@CLIENT(b"setinfo")
def client_setinfo(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT SETINFO LIB-NAME|LIB-VER value."""
    _client_arity(argv, len(argv) == 4)
    attr = argv[2].lower()
    if attr not in (b"lib-name", b"lib-ver"):
        raise ReplyError(errors.unrecognized_option(argv[2]))
    if not all(33 <= ch <= 126 for ch in argv[3]):
        raise ReplyError(errors.invalid_client_info(attr))
    if attr == b"lib-name":
        c.lib_name = argv[3]
    else:
        c.lib_ver = argv[3]
    return OK


@CLIENT(b"info")
def client_info(c: Client, argv: list[bytes]) -> bytes:
    _client_arity(argv, len(argv) == 2)
    return encode(Verbatim(client_info_line(c) + b"\n"), c.proto)


_CLIENT_TYPES = (b"normal", b"master", b"replica", b"slave", b"pubsub")


@CLIENT(b"list")
def client_list(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT LIST [TYPE type] [ID id [id ...]]."""
    ids = _client_list_ids(argv)
    lines = [client_info_line(x) + b"\n" for x in c.server.clients.values()
             if ids is None or x.id in ids]
    return encode(Verbatim(b"".join(lines)), c.proto)


def _client_list_ids(argv: list[bytes]) -> set[int] | None:
    """The ids CLIENT LIST's options select, None for every client. Every client here is
    a normal one, so another TYPE selects none."""
    n = len(argv)
    ids: set[int] | None = None
    i = 2
    while i < n:
        opt = argv[i].lower()
        if opt == b"type" and i + 1 < n:
            t = argv[i + 1].lower()
            if t not in _CLIENT_TYPES:
                raise ReplyError(errors.unknown_client_type(argv[i + 1]))
            if t != b"normal":
                ids = set()
            i += 2
        elif opt == b"id" and i + 1 < n:
            ids = set() if ids is None else ids
            for a in argv[i + 1:]:
                v = errors.string2ll(a)
                if v is None or v <= 0:
                    raise ReplyError(errors.INVALID_CLIENT_ID)
                ids.add(v)
            i = n
        else:
            raise ReplyError(errors.SYNTAX)
    return ids


@CLIENT(b"unblock")
def client_unblock(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 if that client was blocked and is now released."""
    n = len(argv)
    _client_arity(argv, n in (3, 4))
    cid = errors.parse_int_or_error(argv[2])
    reply_error = False
    if n == 4:
        how = argv[3].lower()
        if how not in (b"timeout", b"error"):
            raise ReplyError(errors.UNBLOCK_REASON)
        reply_error = how == b"error"
    server = c.server
    target = server.clients.get(cid)
    if target is None or target.blocked is None:
        return integer(0)
    b = target.blocked
    reply = error(errors.UNBLOCKED_BY_CLIENT) if reply_error else b.timeout_reply(target.proto)
    server.blocking.unblock(target, reply)
    return integer(1)


@CLIENT(b"pause")
def client_pause(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT PAUSE timeout [WRITE|ALL]."""
    n = len(argv)
    if n > 4:
        raise ReplyError(errors.subcommand_syntax(argv[1], b"CLIENT"))
    mode = ALL
    if n == 4:
        m = argv[3].lower()
        if m not in (b"write", b"all"):
            raise ReplyError(errors.CLIENT_PAUSE_MODE)
        mode = WRITE if m == b"write" else ALL
    c.server.pauses.pause_clients(errors.parse_timeout_ms_or_error(argv[2]), mode)
    return OK


@CLIENT(b"unpause")
def client_unpause(c: Client, argv: list[bytes]) -> bytes:
    _client_arity(argv, len(argv) == 2)
    c.server.pauses.unpause_clients()
    return OK


@CLIENT(b"no-evict")
def client_no_evict(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT NO-EVICT ON|OFF: nothing is evicted here, but CLIENT INFO shows the flag."""
    _client_arity(argv, len(argv) == 3)
    v = argv[2].lower()
    if v not in (b"on", b"off"):
        raise ReplyError(errors.SYNTAX)
    c.no_evict = v == b"on"
    return OK


@CLIENT(b"reply")
def client_reply(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT REPLY ON (OFF and SKIP are not served)."""
    _client_arity(argv, len(argv) == 3)
    if argv[2].lower() == b"on":
        return OK
    raise ReplyError(errors.SYNTAX)


@CLIENT(b"help")
def client_help(c: Client, argv: list[bytes]) -> bytes:
    _client_arity(argv, len(argv) == 2)
    return encode([Status(line) for line in CLIENT_HELP], c.proto)


@CLIENT(b"kill")
def client_kill(c: Client, argv: list[bytes]) -> bytes:
    """CLIENT KILL addr:port (OK), or CLIENT KILL filter value [...] (how many were killed)."""
    server = c.server
    if len(argv) == 3:  # the old form: CLIENT KILL addr:port
        for x in list(server.clients.values()):
            if x.addr.encode() == argv[2]:
                _kill(c, x)
                return OK
        raise ReplyError(errors.NO_SUCH_CLIENT)
    f = KillFilter(c, argv)
    if f.ctype in (b"replica", b"slave", b"master"):
        return integer(_kill_links(server, f.ctype, f.match,
                                   f.cid is None and f.addr is None and f.laddr is None))
    killed = 0
    if f.ctype is None or f.ctype == b"normal":
        for x in list(server.clients.values()):
            if f.match(x) and not (f.skipme and x is c):
                _kill(c, x)
                killed += 1
    return integer(killed)


class KillFilter:
    """CLIENT KILL's filters (ID, ADDR, LADDR, TYPE, USER, SKIPME, MAXAGE), parsed or
    refused with Redis's error; `match` tells whether a client passes all of them."""

    __slots__ = ("cid", "addr", "laddr", "ctype", "user", "maxage", "skipme", "now")

    def __init__(self, c: Client, argv: list[bytes]) -> None:
        if len(argv) % 2 != 0:
            raise ReplyError(errors.SYNTAX)
        self.cid: int | None = None
        self.addr: bytes | None = None
        self.laddr: bytes | None = None
        self.ctype: bytes | None = None
        self.user: bytes | None = None
        self.maxage = 0
        self.skipme = True
        for i in range(2, len(argv), 2):
            self._option(c, argv[i].lower(), argv[i + 1])
        self.now = time.time()

    def _option(self, c: Client, opt: bytes, val: bytes) -> None:
        if opt == b"id":
            self.cid = errors.string2ll(val)
            if self.cid is None or self.cid <= 0:
                raise ReplyError(errors.CLIENT_ID_NOT_POSITIVE)
        elif opt == b"addr":
            self.addr = val
        elif opt == b"laddr":
            self.laddr = val
        elif opt == b"type":
            self.ctype = val.lower()
            if self.ctype not in _CLIENT_TYPES:
                raise ReplyError(errors.unknown_client_type(val))
        elif opt == b"user":
            if val not in c.server.acl.users:
                raise ReplyError(errors.no_such_user(val))
            self.user = val
        elif opt == b"skipme":
            if val.lower() not in (b"yes", b"no"):
                raise ReplyError(errors.SYNTAX)
            self.skipme = val.lower() == b"yes"
        elif opt == b"maxage":
            self.maxage = errors.parse_int_or_error(val)
        else:
            raise ReplyError(errors.SYNTAX)

    def match(self, x: Client) -> bool:
        return not ((self.cid is not None and x.id != self.cid)
                    or (self.addr is not None and x.addr.encode() != self.addr)
                    or (self.laddr is not None and x.laddr.encode() != self.laddr)
                    or (self.user is not None and x.user != self.user)
                    or (self.maxage and self.now - x.ctime < self.maxage))


def _kill_links(server: Server, ctype: bytes, match: Callable[[Client], bool],
                unfiltered: bool) -> int:
    """CLIENT KILL TYPE replica|master: replication links are not in `server.clients` (after
    PSYNC a replica's connection belongs to node/replication/primary.py). A killed replica
    reconnects and resyncs, partially when it can, as in Redis; so does a replica whose
    master link is killed (that link matches only when no ID/ADDR/LADDR filter is given)."""
    r = server.replication
    if r is None:
        return 0
    if ctype == b"master":
        link = r.replica.link
        if link is None or link.transport is None or not unfiltered:
            return 0
        link.transport.close()
        return 1
    killed = 0
    for lk in list(r.primary.replicas):
        if not lk.closed and match(lk.client):
            lk.close("killed by CLIENT KILL")
            killed += 1
    return killed


def _kill(me: Client, target: Client) -> None:
    if target is me:
        me.close_after_reply = True
    elif target.conn is not None:
        target.conn.close()
