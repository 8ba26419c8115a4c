"""maxmemory with Redis's `noeviction` policy: over the limit, commands that may add data fail.

A stream store has nothing it may evict (entries are data, not cache), so `noeviction` is the
only policy. As in Redis's processCommand, over the limit:
- commands flagged denyoom in the command table (XADD, XGROUP CREATE, SET, RESTORE, ...) get
  `-OOM command not allowed when used memory > 'maxmemory'.`;
- inside MULTI every command but EXEC, DISCARD, QUIT and RESET is refused (queuing itself uses
  memory), and EXEC is refused when it would run a denyoom command;
- reads, XACK, XDEL, XTRIM, DEL and every other command that frees memory keep working;
- a replica never refuses (replica-ignore-maxmemory: its data is its primary's), and neither is
  what a primary sends (those commands do not pass this check at all).

Used memory is the process's RSS, the figure INFO reports as used_memory, so it includes the
interpreter (~30 MB at start). It is sampled by the server's cron (`hz` times a second) rather
than per command, so a burst of writes may pass the limit by what arrives in one tick. Freed
memory returns to the OS only as Python releases whole arenas, so after deleting data the
node may stay over its limit for longer than Redis would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node import command_table, errors
from node.info import rss_bytes

if TYPE_CHECKING:
    from node.client import Client
    from node.server import Server

__all__ = ["MemoryLimit"]

_ALWAYS_IN_MULTI = frozenset((b"exec", b"discard", b"quit", b"reset"))


class MemoryLimit:
    """Samples used memory and keeps `server.oom` true while it is over maxmemory."""

    __slots__ = ("server", "used")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.used = 0
        server.config_listeners.append(self._config_changed)

    def _config_changed(self, setting: str) -> None:
        if setting in ("", "maxmemory"):
            self.refresh()

    def refresh(self) -> None:
        """Take a sample and set `server.oom` (from the cron, and on CONFIG SET maxmemory)."""
        s = self.server
        limit = s.config.maxmemory
        if not limit:
            s.oom = False
            return
        self.used = rss_bytes()
        replica = s.replication is not None and s.replication.is_replica
        s.oom = self.used > limit and not replica

    def check(self, c: Client, argv: list[bytes], name: bytes) -> bytes | None:
        """The OOM error if this command may not run while over the limit, else None."""
        if c.in_multi:
            if name not in _ALWAYS_IN_MULTI:
                return errors.OOM
            deny = name == b"exec" and any(
                command_table.is_denyoom_argv(a, a[0].lower()) for a in c.multi_queue)
        else:
            deny = command_table.is_denyoom_argv(argv, name)
        return errors.OOM if deny else None
