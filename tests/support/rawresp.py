"""A raw RESP client for tests that compare replies byte for byte.

redis-py turns replies into Python values and so hides exactly what compatibility tests must
see: the type byte (a null bulk `$-1` versus a null array `*-1`, `+OK` versus `$2 OK`, a RESP3
map versus an array), and it raises on errors. This client keeps every reply as a tagged tree:

    ('+', b'OK')  ('-', b'ERR ...')  (':', 5)  ('$', b'data')  ('$', None)  ('*', [...])
    ('*', None)   ('%', [(k, v), ...])  ('~', [...])  ('_', None)  (',', b'1.5')  ('#', b't')
    ('(', b'123')  ('=', b'txt:...')  ('!', b'ERR ...')  ('>', [...])  ('|', attrs, reply)

Trees compare with ==, and `show()` prints one the way a developer wants to read it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

__all__ = ["RawClient", "ConnectionClosed", "encode_command", "show", "brief", "Reply"]

Reply = tuple  # a tagged tree as described above


class ConnectionClosed(ConnectionError):
    """The server closed the connection (or reset it) before a full reply arrived."""


def encode_command(args: Iterable[bytes | str | int]) -> bytes:
    """Encode one command as a RESP multibulk request."""
    parts = []
    n = 0
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        n += 1
    return b"*%d\r\n" % n + b"".join(parts)


class RawClient:
    """A blocking socket speaking RESP, returning tagged reply trees."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._pos = 0

    # -- requests ----------------------------------------------------------------------------

    def call(self, *args: bytes | str | int) -> Reply:
        """Send one command and read its reply."""
        self.sock.sendall(encode_command(args))
        return self.read_reply()

    def pipeline(self, commands: Iterable[Iterable[bytes | str | int]]) -> list[Reply]:
        """Send all commands in one write, then read one reply per command."""
        cmds = list(commands)
        self.sock.sendall(b"".join(encode_command(c) for c in cmds))
        return [self.read_reply() for _ in cmds]

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def hello(self, proto: int) -> Reply:
        """Switch protocol (HELLO 2|3); the reply is returned but rarely worth comparing."""
        return self.call("HELLO", str(proto))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------

    def read_until_close(self, timeout: float = 2.0, limit: int = 64 << 20) -> tuple[bytes, bool]:
        """Read everything until EOF or `timeout` seconds of silence.

        Returns (unparsed bytes, closed): `closed` is True when the server closed (or reset)
        the connection, False when it merely went quiet.
        """
        data = bytes(self._buf[self._pos:])
        self._buf.clear()
        self._pos = 0
        self.sock.settimeout(timeout)
        while len(data) < limit:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return data, False
            except (ConnectionResetError, BrokenPipeError):
                return data, True
            if not chunk:
                return data, True
            data += chunk
        return data, False

    def read_reply(self) -> Reply:
        line = self._line()
        t = line[:1]
        rest = line[1:]
        if t == b"+":
            return ("+", rest)
        if t == b"-":
            return ("-", rest)
        if t == b":":
            return (":", int(rest))
        if t == b"$":
            n = int(rest)
            return ("$", None) if n < 0 else ("$", self._bulk(n))
        if t == b"*":
            n = int(rest)
            return ("*", None) if n < 0 else ("*", [self.read_reply() for _ in range(n)])
        if t == b"%":
            n = int(rest)
            return ("%", [(self.read_reply(), self.read_reply()) for _ in range(n)])
        if t == b"~":
            return ("~", [self.read_reply() for _ in range(int(rest))])
        if t == b">":
            return (">", [self.read_reply() for _ in range(int(rest))])
        if t == b"_":
            return ("_", None)
        if t in (b",", b"#", b"("):
            return (t.decode(), rest)
        if t in (b"=", b"!"):
            return (t.decode(), self._bulk(int(rest)))
        if t == b"|":
            n = int(rest)
            attrs = [(self.read_reply(), self.read_reply()) for _ in range(n)]
            return ("|", attrs, self.read_reply())
        raise ValueError(f"unparsable reply line {bytes(line)!r}")

    def _fill(self) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError) as e:
            raise ConnectionClosed(str(e)) from e
        if not chunk:
            raise ConnectionClosed("server closed the connection")
        self._buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self._buf.find(b"\r\n", self._pos)
            if i >= 0:
                line = bytes(self._buf[self._pos:i])
                self._pos = i + 2
                return line
            self._fill()

    def _bulk(self, n: int) -> bytes:
        while len(self._buf) - self._pos < n + 2:
            self._fill()
        data = bytes(self._buf[self._pos:self._pos + n])
        self._pos += n + 2
        return data


def _s(b: bytes) -> str:
    r = repr(b)[2:-1]
    return '"' + r.replace('"', '\\"') + '"'


def show(reply: Any, indent: str = "") -> str:
    """Render a reply tree readably: one element per line for aggregates, type visible."""
    if not isinstance(reply, tuple) or not reply:
        return indent + repr(reply)
    t = reply[0]
    if t in ("+", "-", "!", ",", "#", "("):
        v = reply[1]
        return f"{indent}{t}{v.decode(errors='backslashreplace') if isinstance(v, bytes) else v}"
    if t == ":":
        return f"{indent}(integer) {reply[1]}"
    if t in ("$", "="):
        return f"{indent}(nil bulk)" if reply[1] is None else indent + _s(reply[1])
    if t == "_":
        return f"{indent}(null)"
    if t in ("*", "~", ">"):
        items = reply[1]
        if items is None:
            return f"{indent}(nil array)"
        if not items:
            return f"{indent}{t}(empty)"
        inner = "\n".join(show(x, indent + "  ") for x in items)
        return f"{indent}{t}{len(items)}\n{inner}"
    if t == "%":
        items = reply[1]
        if not items:
            return f"{indent}%(empty)"
        lines = [f"{indent}%{len(items)}"]
        for k, v in items:
            lines.append(show(k, indent + "  ") + " =>")
            lines.append(show(v, indent + "    "))
        return "\n".join(lines)
    if t == "|":
        return f"{indent}|attrs {reply[1]!r}\n" + show(reply[2], indent)
    return indent + repr(reply)


def brief(reply: Any, limit: int = 300) -> str:
    """One-line rendering: `[ "1-1", ["f", "v"] ]`, `{k: v}` for maps, `nil`, `:5`, `-ERR ..`."""
    def r(x: Any) -> str:
        if not isinstance(x, tuple) or not x:
            return repr(x)
        t, v = x[0], x[1]
        if t in ("+", "-", "!", ",", "#", "("):
            return t + (v.decode(errors="backslashreplace") if isinstance(v, bytes) else str(v))
        if t == ":":
            return f":{v}"
        if t in ("$", "="):
            return "nil" if v is None else _s(v)
        if t == "_":
            return "null"
        if t in ("*", "~", ">"):
            if v is None:
                return "nil-array"
            return ("" if t == "*" else t) + "[" + ", ".join(r(e) for e in v) + "]"
        if t == "%":
            return "{" + ", ".join(f"{r(k)}: {r(val)}" for k, val in v) + "}"
        return repr(x)
    s = r(reply)
    return s if len(s) <= limit else s[:limit] + f"...({len(s)} chars)"
