"""SLOWLOG: the last `slowlog-max-len` commands that ran for `slowlog-log-slower-than` us or
longer, as Redis's slowlog.c keeps them.

An entry is what SLOWLOG GET shows: id, unix time, microseconds, the arguments (at most 32,
the last one saying how many more there were; each at most 128 bytes, saying how many more
bytes), the client's address and name. The dispatch path only compares a command's time with
the server's `slow_usec` (node/server.py); commands at or over it come here.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

from node.resp import encode, integer

if TYPE_CHECKING:
    from node.client import Client
    from node.config import Config

MAX_ARGC = 32  # SLOWLOG_ENTRY_MAX_ARGC
MAX_STRING = 128  # SLOWLOG_ENTRY_MAX_STRING
REDACTED = b"(redacted)"
_SECRET_SETTINGS = frozenset((b"requirepass", b"masterauth"))


def redacted(argv: list[bytes]) -> list[bytes]:
    """`argv` with passwords replaced by '(redacted)', as Redis shows them in SLOWLOG and
    MONITOR: AUTH's arguments, HELLO's AUTH pair, MIGRATE's AUTH/AUTH2 and the values of
    CONFIG SET requirepass/masterauth."""
    name = argv[0].lower()
    if name == b"auth":
        return argv[:1] + [REDACTED] * (len(argv) - 1)
    if name not in (b"hello", b"migrate", b"config"):
        return argv
    out = list(argv)
    if name == b"config":
        if len(out) > 2 and out[1].lower() == b"set":
            for j in range(2, len(out) - 1, 2):
                if out[j].lower() in _SECRET_SETTINGS:
                    out[j + 1] = REDACTED
        return out
    for j, a in enumerate(argv):
        word = a.lower()
        n = 2 if word == b"auth2" or (word == b"auth" and name == b"hello") else (
            1 if word == b"auth" else 0)
        for k in range(j + 1, min(j + 1 + n, len(out))):
            out[k] = REDACTED
    return out


class SlowLog:
    """The entries, newest first, and the next entry id (never reset, as in Redis)."""

    __slots__ = ("config", "entries", "next_id")

    def __init__(self, config: Config) -> None:
        self.config = config
        self.entries: deque[tuple[int, int, int, list[bytes], bytes, bytes]] = deque()
        self.next_id = 0

    def threshold(self) -> int | None:
        """The microseconds from which a command is logged; None while the log is off."""
        t = self.config.slowlog_log_slower_than
        return None if t < 0 or self.config.slowlog_max_len == 0 else t

    def push(self, c: Client, argv: list[bytes], usec: int) -> None:
        """slowlogPushEntryIfNeeded: log `argv` if it ran for the threshold or longer."""
        t = self.threshold()
        if t is None or usec < t:
            return
        argv = redacted(argv)
        n = len(argv)
        shown = argv[:MAX_ARGC]
        if n > MAX_ARGC:
            shown[-1] = b"... (%d more arguments)" % (n - MAX_ARGC + 1)
        shown = [a if len(a) <= MAX_STRING else
                 a[:MAX_STRING] + b"... (%d more bytes)" % (len(a) - MAX_STRING) for a in shown]
        self.entries.appendleft((self.next_id, int(time.time()), usec, shown,
                                 c.addr.encode(), c.name or b""))
        self.next_id += 1
        self.trim()

    def trim(self) -> None:
        """Drop the oldest entries over slowlog-max-len (also after CONFIG SET lowers it)."""
        while len(self.entries) > max(self.config.slowlog_max_len, 0):
            self.entries.pop()

    def get_reply(self, count: int, proto: int) -> bytes:
        """SLOWLOG GET [count]: the newest `count` entries (-1: all)."""
        picked = list(self.entries) if count < 0 else list(self.entries)[:count]
        return encode([[i, t, us, args, addr, name] for i, t, us, args, addr, name in picked],
                      proto)

    def len_reply(self) -> bytes:
        return integer(len(self.entries))

    def reset(self) -> None:
        self.entries.clear()
