"""Protocol fuzzing: inputs for the node's and the router's request parsers and command layer,
and the checks every input must pass.

One grammar, driven by a `random.Random`: hypothesis drives it through `st.randoms()` (so a
failure shrinks to a short draw), the benchmark through a seeded Random (so a million inputs
stay cheap). Two kinds of input:
- commands: 1-6 commands from the command table (subcommands too), their arguments built from
  the table's own argument docs (tokens, keys, integers, IDs) and then mutated (an argument
  dropped, replaced by an edge value or random bytes); sent as multibulk or inline, in one
  write or cut into random pieces;
- framing: valid requests cut short, huge declared counts and lengths, nested arrays,
  non-bulk elements, bad numbers, long lines, unbalanced quotes, random bytes.

Targets:
- `InprocNode`: a real `node.server.Server` and its `Connection` on an in-memory transport
  (no socket, so the benchmark's million inputs take minutes). Each input gets a fresh
  connection; afterwards the connection is dropped, and the server must hold nothing of it.
- `run_socket`: the same inputs over a real socket to a node or router process. The client
  half-closes after its input; the server must answer and close within a deadline (Redis
  closes a client at EOF), so a stuck connection is a timeout.

The checks (`Outcome.problems`): the output is well-formed RESP; no reply is the node's
"internal error" (a handler raised); with a complete multibulk input of commands that cannot
block or close, one reply per command; a connection that closed has a reason (a protocol
error, QUIT); nothing of the client is left on the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import hiredis

from node import command_table
from node.commands import load_all
from node.config import Config
from node.resp import encode_command

__all__ = ["FuzzInput", "Outcome", "InprocNode", "gen_input", "run_socket", "check_reply_bytes",
           "SOCKET_SAFE"]

# --- the grammar ------------------------------------------------------------------------------

KEYS = [b"fz:s1", b"fz:s2", b"{fz}a", b"{fz}b", b"fz:str", b"fz:list", b"fz:set"]
GROUPS = [b"g1", b"g2", b"$", b"STREAMS"]
CONSUMERS = [b"c1", b"c2", b""]
IDS = [b"0", b"0-0", b"0-1", b"1-1", b"1", b"$", b">", b"*", b"-", b"+", b"1-*", b"(1-1",
       b"18446744073709551615-18446744073709551615", b"18446744073709551615-*",
       b"18446744073709551616", b"-1", b"1-", b"-1-1", b"1-1-1", b"9999999999999-0"]
NUMBERS = [b"0", b"1", b"-1", b"2", b"10", b"100", b"1000000", b"9223372036854775807",
           b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
           b"18446744073709551615", b"1.5", b"1e3", b"nan", b"inf", b"-inf", b"0x10", b" 1",
           b"1 ", b"+1", b"", b"00", b"-0", b"2147483648", b"4294967296"]

# Left out everywhere: they stop the process or sleep it (SHUTDOWN, DEBUG), or act on other
# connections (CLIENT KILL/PAUSE), which would make another input's outcome depend on this one,
# or connect out to random hosts (MIGRATE; tests/node/test_migrate.py covers its errors).
_NEVER = {b"shutdown", b"debug", b"client|kill", b"client|pause", b"client|unpause",
          b"monitor", b"migrate"}
# Over sockets also left out: what turns the node into something else for every later input
# (a replica, a replication stream, a copy to another server, different limits).
SOCKET_SAFE_EXCLUDED = {b"replicaof", b"slaveof", b"sync", b"psync", b"migrate", b"config|set",
                        b"failover", b"replconf", b"cluster|setslot", b"save", b"bgsave",
                        b"bgrewriteaof", b"config|rewrite", b"flushall", b"flushdb"}
_BLOCKING = {b"xread", b"xreadgroup", b"wait", b"waitaof"}
_CLOSING = {b"quit"}


def _load_specs() -> list[tuple[bytes, list[bytes], list[dict]]]:
    """(table name, argv prefix, argument docs) of every command the node serves."""
    served = set(load_all())
    raw = json.load(open(command_table.JSON_PATH))["commands"]
    out = []
    for c in raw:
        name = c["name"].encode()
        if name not in served:
            continue
        if c["subcommands"]:
            for s in c["subcommands"]:
                full = s["name"].encode()
                sub = full.split(b"|", 1)[1]
                out.append((full, [name, sub], s["docs"].get("arguments", [])))
        else:
            out.append((name, [name], c["docs"].get("arguments", [])))
    return out


_SPECS = _load_specs()
def _collect_tokens(args: list[dict], out: set[bytes]) -> None:
    for a in args:
        if "token" in a:
            out.add(a["token"].encode())
        _collect_tokens(a.get("arguments", []), out)


def _all_tokens() -> list[bytes]:
    out: set[bytes] = set()
    for _, _, args in _SPECS:
        _collect_tokens(args, out)
    return sorted(out)


_TOKENS = _all_tokens()
SOCKET_SAFE = [s for s in _SPECS if s[0] not in _NEVER | SOCKET_SAFE_EXCLUDED]
_INPROC = [s for s in _SPECS if s[0] not in _NEVER]


def _atom(rng: random.Random) -> bytes:
    """Any argument at all: a token, key, ID, number, name, or random bytes."""
    r = rng.random()
    if r < 0.2:
        return rng.choice(_TOKENS)
    if r < 0.4:
        return rng.choice(KEYS)
    if r < 0.55:
        return rng.choice(IDS)
    if r < 0.75:
        return rng.choice(NUMBERS)
    if r < 0.85:
        return rng.choice(GROUPS + CONSUMERS)
    n = rng.choice((0, 1, 2, 5, 17, 100, 1000))
    return bytes(rng.getrandbits(8) for _ in range(n))


def _value(rng: random.Random, a: dict) -> bytes:
    t = a["type"]
    if rng.random() < 0.1:
        return _atom(rng)
    if t == "key":
        return rng.choice(KEYS)
    if t in ("integer", "unix-time"):
        return rng.choice(NUMBERS[:7]) if rng.random() < 0.8 else rng.choice(NUMBERS)
    if t == "pattern":
        return rng.choice((b"*", b"fz:*", b"[a-", b"\\", b"?*?*?*?*?*?*?*?*x"))
    name = a.get("name", "")
    if "id" in name or "start" in name or "end" in name or name == "threshold":
        return rng.choice(IDS)
    if "group" in name:
        return rng.choice(GROUPS)
    if "consumer" in name:
        return rng.choice(CONSUMERS)
    return rng.choice((b"f", b"v", b"1", b"x" * rng.choice((1, 10, 300))))


def _args(rng: random.Random, args: list[dict], out: list[bytes], depth: int = 0) -> None:
    for a in args:
        flags = a.get("flags", ())
        if "optional" in flags and rng.random() < 0.6:
            continue
        reps = rng.randint(1, 3) if "multiple" in flags else 1
        for i in range(reps):
            if "token" in a and (i == 0 or "multiple_token" in flags):
                out.append(a["token"].encode())
            t = a["type"]
            if t == "pure-token":
                continue
            if t == "oneof":
                if a["arguments"] and depth < 5:
                    _args(rng, [rng.choice(a["arguments"])], out, depth + 1)
            elif t == "block":
                if depth < 5:
                    _args(rng, a.get("arguments", []), out, depth + 1)
            else:
                out.append(_value(rng, a))


def _mutate(rng: random.Random, argv: list[bytes]) -> list[bytes]:
    argv = list(argv)
    for _ in range(rng.choice((1, 1, 2, 3))):
        r = rng.random()
        i = rng.randrange(1, len(argv) + 1)
        if r < 0.3 and len(argv) > 1:
            del argv[min(i, len(argv) - 1)]
        elif r < 0.6:
            argv.insert(i, _atom(rng))
        elif len(argv) > 1:
            argv[min(i, len(argv) - 1)] = _atom(rng)
    return argv


def gen_command(rng: random.Random, specs: list[tuple[bytes, list[bytes], list[dict]]]) -> list[bytes]:
    """One command: valid by the table's argument docs, then possibly mutated."""
    _, prefix, args = rng.choice(specs)
    argv = list(prefix)
    if rng.random() < 0.05:
        argv += [_atom(rng) for _ in range(rng.randint(0, 6))]
    else:
        _args(rng, args, argv)
    if rng.random() < 0.3:
        argv = _mutate(rng, argv)
    if rng.random() < 0.1:
        argv[0] = argv[0].upper() if rng.random() < 0.5 else argv[0].swapcase()
    return argv


def _inline(argv: list[bytes]) -> bytes | None:
    """The inline form of a command, when its arguments can be written inline at all."""
    parts = []
    for a in argv:
        if not a or any(ch in a for ch in b" \t\r\n\"'\\") or not a.isascii():
            parts.append(b'"' + b"".join(b"\\x%02x" % ch for ch in a) + b'"')
        else:
            parts.append(a)
    return b" ".join(parts) + b"\r\n"


def _framing(rng: random.Random) -> bytes:
    """Malformed or odd framing."""
    ok = encode_command([b"XADD", rng.choice(KEYS), b"*", b"f", b"v"])
    big = rng.choice((b"2147483647", b"2147483648", b"536870912", b"536870913",
                      b"9223372036854775807", b"99999999999999999999", b"1048577", b"-2", b"-1"))
    r = rng.randrange(14)
    if r == 0:
        return ok[:rng.randrange(1, len(ok))]  # cut short
    if r == 1:
        return b"*" + big + b"\r\n"
    if r == 2:
        return b"*1\r\n$" + big + b"\r\n" + b"x" * rng.choice((0, 10, 1000))
    if r == 3:
        depth = rng.randint(1, 200)
        return b"*1\r\n" * depth + b"$4\r\nPING\r\n"
    if r == 4:
        t = rng.choice(b":+-%~>#,_|(=!")
        return b"*2\r\n$4\r\nECHO\r\n" + bytes([t]) + b"1\r\n"
    if r == 5:
        return b"*" + rng.choice((b"", b"x", b" 1", b"1x", b"0x1", b"+1")) + b"\r\n"
    if r == 6:
        return b"*1\r\n$" + rng.choice((b"", b"x", b" 4", b"4x", b"+4")) + b"\r\nPING\r\n"
    if r == 7:
        return rng.choice((b"*", b"$", b"x")) + b"1" * rng.choice((100, 65535, 70000))
    if r == 8:
        q = rng.choice((b'ECHO "a', b"ECHO 'a", b'ECHO "a"b', b'ECHO "\\x', b"ECHO '\\'"))
        return q + b"\r\n"
    if r == 9:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    if r == 10:
        return b"*2\r\n$4\r\nECHO\r\n$3\r\nabcdef\r\n"  # bulk longer than declared
    if r == 11:
        return b"\r\n" * rng.randint(1, 5) + b"*0\r\n*-1\r\n" + ok
    if r == 12:
        return ok + ok[:rng.randrange(1, len(ok))]  # a good request, then a cut one
    return b"*3\r\n$4\r\nXADD\r\n$1\r\nk\r\n" + b"\x00" * rng.randint(1, 8)


@dataclass
class FuzzInput:
    """What is sent: `chunks` in order; `commands` when it is a list of commands."""

    chunks: list[bytes]
    commands: list[list[bytes]] = field(default_factory=list)
    multibulk: bool = False  # commands sent as complete multibulk requests

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def may_block(self) -> bool:
        for argv in self.commands:
            name = argv[0].lower()
            if name in _BLOCKING or (name == b"client" and len(argv) > 1
                                     and argv[1].lower() == b"reply"):
                return True
        return False

    @property
    def may_close(self) -> bool:
        return any(argv[0].lower() in _CLOSING for argv in self.commands)


def _split(rng: random.Random, data: bytes) -> list[bytes]:
    if len(data) < 2 or rng.random() < 0.6:
        return [data]
    cuts = sorted({rng.randrange(1, len(data)) for _ in range(rng.randint(1, 4))})
    return [data[i:j] for i, j in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def gen_input(rng: random.Random, socket_safe: bool = False) -> FuzzInput:
    specs = SOCKET_SAFE if socket_safe else _INPROC
    if rng.random() < 0.25:
        return FuzzInput(_split(rng, _framing(rng)))
    cmds = [gen_command(rng, specs) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.8:
        data = b"".join(encode_command(c) for c in cmds)
        return FuzzInput(_split(rng, data), cmds, multibulk=True)
    data = b"".join(_inline(c) or b"" for c in cmds)
    return FuzzInput(_split(rng, data), cmds)


# --- checks -----------------------------------------------------------------------------------

_NOT_ENOUGH = object()


def check_reply_bytes(out: bytes) -> tuple[list[Any], list[str]]:
    """Parse a server's whole output: (replies, problems)."""
    problems = []
    reader = hiredis.Reader(notEnoughData=_NOT_ENOUGH)
    reader.feed(out)
    replies = []
    try:
        while True:
            r = reader.gets()
            if r is _NOT_ENOUGH or r is False:
                break
            replies.append(r)
    except hiredis.ProtocolError as e:
        problems.append(f"malformed reply bytes: {e}")
    if not problems and reader.has_data():
        problems.append("reply cut short")
    for r in replies:
        if isinstance(r, hiredis.ReplyError) and "internal error" in str(r):
            problems.append(f"handler failed: {r}")
    return replies, problems


@dataclass
class Outcome:
    replies: list[Any]
    closed: bool
    blocked: bool
    problems: list[str]

    @property
    def protocol_error(self) -> bool:
        return any(isinstance(r, hiredis.ReplyError) and str(r).startswith("Protocol error")
                   for r in self.replies) or any(
            isinstance(r, hiredis.ReplyError) and "Protocol error" in str(r)
            for r in self.replies)


def _expect(inp: FuzzInput, out: Outcome) -> None:
    """The checks that need the input: reply count, a reason for a close."""
    if inp.multibulk and not inp.may_block and not out.blocked:
        n = len(inp.commands)
        if out.closed:
            if not inp.may_close and not out.protocol_error:
                out.problems.append("closed without a protocol error or QUIT")
        elif len(out.replies) != n:
            out.problems.append(f"{len(out.replies)} replies to {n} commands")
    if out.closed and not inp.commands and not out.protocol_error and inp.data.strip():
        # A framing input closes only with a protocol error (or the QUIT it may carry).
        if b"QUIT" not in inp.data.upper():
            out.problems.append("closed without a protocol error")


# --- in-process target ------------------------------------------------------------------------

class _Transport(asyncio.Transport):
    """An in-memory transport: writes are collected, close() ends the connection next turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, port: int) -> None:
        super().__init__()
        self.loop = loop
        self.port = port
        self.out = bytearray()
        self.closed = False
        self.protocol: asyncio.Protocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closed:
            self.out += data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.protocol is not None:
                self.loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return ("127.0.0.1", self.port)
        if name == "sockname":
            return ("127.0.0.1", 6379)
        return default


class _ErrorLog(logging.Handler):
    """Collects what the node logs at ERROR (a handler that raised logs its traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


class InprocNode:
    """A real node Server, fed through real Connections on in-memory transports."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from node.server import Server

        self.loop = loop
        self.server = Server(Config())
        self._defaults = dict(vars(self.server.config))
        self._port = 40000
        self.errors = _ErrorLog()
        logging.getLogger("xshard").addHandler(self.errors)
        self.runs = 0

    def close(self) -> None:
        logging.getLogger("xshard").removeHandler(self.errors)
        self.server.close()

    def _turns(self, n: int = 3) -> None:
        for _ in range(n):
            self.loop.run_until_complete(asyncio.sleep(0))

    def _connect(self) -> tuple[Any, _Transport]:
        from node.server import Connection

        self._port += 1
        conn = Connection(self.server)
        t = _Transport(self.loop, self._port)
        t.protocol = conn
        conn.connection_made(t)
        return conn, t

    def run(self, inp: FuzzInput) -> Outcome:
        """Feed one input on a fresh connection, then drop it; check what came back and what
        the server kept."""
        s = self.server
        before = len(self.errors.records)
        conn, t = self._connect()
        client = conn.client
        for chunk in inp.chunks:
            if t.closed:
                break
            conn.data_received(chunk)
            self._turns(1)
        self._turns(2)
        blocked = client is not None and client.blocked is not None
        replies, problems = check_reply_bytes(bytes(t.out))
        out = Outcome(replies, t.closed, blocked, problems)
        _expect(inp, out)
        if not t.closed:
            t.close()
        self._turns(1)
        if client is not None:
            if client.id in s.clients:
                out.problems.append("client still registered after its connection closed")
            if client.blocked is not None or any(client in q for q in s.blocking.waiting.values()):
                out.problems.append("client still blocked after its connection closed")
            if any(client in w for w in s.db.watchers.values()):
                out.problems.append("client still watching keys after its connection closed")
        out.problems += self.errors.records[before:]
        self._reset()
        return out

    def _reset(self) -> None:
        """Undo what one input may change for the next: settings, paused keys, blocked state;
        the data is flushed every 64 inputs so that it stays small."""
        s = self.server
        cfg = s.config
        changed = False
        for k, v in self._defaults.items():
            if getattr(cfg, k) != v:
                setattr(cfg, k, v)
                changed = True
        if changed:
            s.memory_limit.refresh()  # CONFIG SET maxmemory left the node refusing writes
        self.runs += 1
        if self.runs % 64 == 0:
            s.db.flush()

    def probe(self) -> bool:
        """A fresh connection still gets PONG."""
        conn, t = self._connect()
        conn.data_received(b"*1\r\n$4\r\nPING\r\n")
        self._turns(2)
        ok = bytes(t.out) == b"+PONG\r\n"
        t.close()
        self._turns(1)
        return ok


# --- socket target ----------------------------------------------------------------------------

def run_socket(host: str, port: int, inp: FuzzInput, deadline: float = 10.0) -> Outcome:
    """Send one input on a fresh connection, half-close, and read until the server closes.

    A router answers asynchronously, so for a plain list of commands the replies are read
    first, then the write side is closed. A server that neither answers nor closes before the
    deadline has a stuck connection."""
    sock = socket.create_connection((host, port), timeout=deadline)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = bytearray()
    problems: list[str] = []
    closed = reset = False
    end = time.monotonic() + deadline
    try:
        for chunk in inp.chunks:
            sock.sendall(chunk)
        want = len(inp.commands) if inp.multibulk and not inp.may_block else 0
        reader = hiredis.Reader(notEnoughData=_NOT_ENOUGH)
        got = 0
        while got < want:
            sock.settimeout(max(end - time.monotonic(), 0.01))
            data = sock.recv(65536)
            if not data:
                closed = True
                break
            out += data
            reader.feed(data)
            try:
                while got < want:
                    r = reader.gets()
                    if r is False or r is _NOT_ENOUGH:
                        break
                    got += 1
            except hiredis.ProtocolError:
                break
        if not closed:
            if inp.may_block:
                time.sleep(0.01)
            sock.shutdown(socket.SHUT_WR)
            while True:
                sock.settimeout(max(end - time.monotonic(), 0.01))
                data = sock.recv(65536)
                if not data:
                    break
                out += data
    except TimeoutError:
        problems.append(f"stuck: no reply or close within {deadline} s")
    except OSError:  # reset, broken pipe, not connected
        # Closed with our input unread (QUIT, a protocol error): the kernel resets, and what
        # the server wrote last may be lost, so the reason for the close cannot be checked.
        closed = reset = True  # closed with input unread (QUIT, a protocol error): the kernel resets
    finally:
        sock.close()
    replies, more = check_reply_bytes(bytes(out))
    o = Outcome(replies, closed, False, problems + more)
    if not reset:
        _expect(inp, o)
    return o
