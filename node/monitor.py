"""MONITOR: every command a node (or a router) runs, as a line to each monitoring client.

The line is Redis's replicationFeedMonitors format:

    +1339518083.107412 [0 127.0.0.1:60866] "keys" "*"

(the time, the database and the client's address, then each argument quoted as sdscatrepr
quotes it). As in Redis 7, a command is shown once it ran (a blocked read when it is served),
admin commands (CONFIG, SLOWLOG, DEBUG ...) are not shown, and passwords are redacted.

The server keeps its monitoring clients in a dict (`monitors`), so the call path checks one
empty dict when nobody monitors; `feed` is only called when someone does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from node import command_table
from node.resp import status
from node.slowlog import redacted

if TYPE_CHECKING:
    from node.client import Client

_ESCAPES = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\n"): b"\\n", ord("\r"): b"\\r",
            ord("\t"): b"\\t", 7: b"\\a", 8: b"\\b"}
_REPR = [_ESCAPES.get(i) or (bytes([i]) if 32 <= i < 127 else b"\\x%02x" % i)
         for i in range(256)]


def quote(arg: bytes) -> bytes:
    """sdscatrepr: the argument in double quotes, escaped, non-printable bytes as \\xNN."""
    if arg.isalnum():
        return b'"%s"' % arg
    return b'"%s"' % b"".join(_REPR[b] for b in arg)


def line(addr: str, argv: list[bytes]) -> bytes:
    """One MONITOR line for a command of the client at `addr`."""
    args = b" ".join(quote(a) for a in redacted(argv))
    return status(b"%.6f [0 %s] %s" % (time.time(), addr.encode(), args))


def shown(argv: list[bytes]) -> bool:
    """Redis leaves admin commands (and those flagged skip_monitor) out of MONITOR."""
    spec = command_table.lookup_argv(argv)
    return spec is None or not ("admin" in spec.flags or "skip_monitor" in spec.flags)


def feed(monitors: dict[int, Client], c: Client, argv: list[bytes]) -> None:
    """Send `argv`, run by `c`, to every monitoring client (not to `c` itself)."""
    if not shown(argv):
        return
    data = line(c.addr, argv)
    for m in list(monitors.values()):
        if m is not c and m.conn is not None:
            m.conn.send_monitor(data)
