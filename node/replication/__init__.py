"""Replication: primary -> replica streaming of the effect log (`server.replication`).

The effect log (node/effects.py) is the replication stream: its bytes are what a replica applies
and its running length is the replication offset. The package is split by side:

- `backlog.py`: the last bytes of the stream, for partial resyncs;
- `primary.py`: replicas attached to this node (PSYNC/SYNC, full-sync snapshots, ACKs, WAIT);
- `replica.py`: this node's link to its primary (handshake, loading a full sync, the live
  stream through the one apply path);
- this module, the facade the rest of the node uses: the replication IDs, role changes
  (REPLICAOF), the fan-out of effects, the good-replica count behind NOREPLICAS
  (Server.check_noreplicas), the cron and INFO/ROLE.

Offsets: `effects.offset` counts bytes of effects; PSYNC asks for the next byte (offset + 1), as
Redis does. A node keeps two replication IDs: `replid` names the history it writes now and
`replid2` the history it followed before a promotion, valid up to `second_offset` (exclusive of
the first byte of the new history). That lets the sibling replicas of a promoted one continue
partially.

The backlog is made lazily, as Redis makes it: when the first replica attaches, when this node
follows a primary, or at start-up when the loaded data names its history (replicas of the node
before its restart can then continue). A primary frees it after `repl-backlog-ttl` seconds
without replicas. Without a backlog no effect is encoded for replication (with no AOF either,
none is encoded at all), but the offset advances all the same (node/effects.py): unlike Redis,
whose master_repl_offset stands still without a backlog, our offset is also the AOF's length.

Restarts: the IDs are kept with the data, as Redis keeps them in RDB aux fields: in every
snapshot, and on every AOF incr file's manifest line (node/aof.py), where a change of ID starts
a new file, so the IDs loaded are those of the last byte loaded. A node restarted with
--replicaof continues under them. One restarted without (a primary, or a cluster node whose role
etcd gives later) takes a new ID and keeps the loaded one as replid2, valid up to what it loaded:
a replica that holds more of that history than the restarted primary must not continue from it.
Until it writes under its new ID, its data is exactly the loaded history, so when it is made a
replica it asks for that one (`psync_position`): a primary that has this history as a prefix
continues it, any other answers with a full resync, and a divergent tail never survives.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from node import errors
from node.effects import ReplicationFeed
from node.replication.backlog import Backlog
from node.replication.primary import ZERO_ID, PrimarySide
from node.replication.replica import ReplicaSide
from node.resp import error

if TYPE_CHECKING:
    from node.client import Client
    from node.server import Server

__all__ = ["Replication", "ZERO_ID", "new_replid"]

log = logging.getLogger("xshard.node")

CRON_PERIOD_S = 0.1


def new_replid() -> str:
    return os.urandom(20).hex()


class Replication:
    """`server.replication`: IDs, backlog, attached replicas and the link to a primary."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = server.loop
        self.replid = new_replid()
        self.replid2 = ZERO_ID
        self.second_offset = -1
        self.replid_is_ours = True  # made here and never shared: see psync_position
        self.backlog: Backlog | None = None  # see ensure_backlog
        self.replicas_seen = time.monotonic()  # for repl-backlog-ttl
        # The effect stream's listener, compiled (node/effects.py): its `parts` are the
        # iteration's effects not yet written to the backlog and the replicas.
        self.feed = ReplicationFeed(self, self.flush)
        self.feed.loop = self.loop
        self.primary = PrimarySide(self)
        self.replica = ReplicaSide(self)
        server.config_listeners.append(self._config_changed)
        server.role = "master"

    # --- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Take the IDs of a loaded data set, connect to --replicaof if set, start the cron."""
        target = self.server.config.replicaof.split()
        loaded = getattr(self.server.persistence, "loaded_ids", None)
        if loaded is not None:
            offset = self.server.effects.offset
            if target:
                # A restarted replica continues the history it had: PSYNC with it. Whether an
                # ID with nothing under it was made here is not kept, so psync_position may
                # ask by the older name (as every node that knows the newer one knows it).
                self.replid, self.replid2, self.second_offset = loaded
            else:
                # A restarted primary may have lost its last writes (everysec): what replicas
                # hold beyond the loaded offset is another history. Keep the loaded one as
                # replid2, valid up to exactly what was loaded (by its older name when the
                # newer names no byte: a node restarted twice is still found by it).
                replid, replid2, second = loaded
                self.replid2 = replid2 if replid2 != ZERO_ID and second == offset + 1 else replid
                self.second_offset = offset + 1
            self.ensure_backlog()
        if len(target) == 2:
            try:
                port = int(target[1])
            except ValueError:
                port = -1
            if 0 <= port <= 65535:
                self.set_master(target[0], port)
            else:
                log.warning("Ignoring replicaof '%s': invalid port", self.server.config.replicaof)
        self.loop.call_later(CRON_PERIOD_S, self._cron)

    def snapshot_aux(self) -> dict[str, Any]:
        """Written into every snapshot (persistence adds "offset")."""
        return {"replid": self.replid, "replid2": self.replid2,
                "second_offset": self.second_offset}

    def psync_position(self) -> tuple[str, int]:
        """The (replication ID, offset) this node asks its primary to continue from.

        Our own ID with nothing written under it yet (a restarted primary, a promotion that
        saw no write) names no byte: the data is exactly replid2's history up to here, and
        only that name can let a primary continue it."""
        offset = self.server.effects.offset
        if self.replid_is_ours and self.replid2 != ZERO_ID and self.second_offset == offset + 1:
            return self.replid2, offset
        return self.replid, offset

    @property
    def is_replica(self) -> bool:
        return self.replica.master_host is not None

    @property
    def master_host(self) -> str | None:
        return self.replica.master_host

    @property
    def master_port(self) -> int:
        return self.replica.master_port

    def shutdown(self) -> None:
        self.replica.drop_link()
        self.primary.shutdown()

    # --- the effect stream (both roles: a replica republishes what it applies) ---------------
    def ensure_backlog(self) -> Backlog:
        """The backlog, made now (starting at the current offset) if there is none: from here
        on every effect is kept for partial resyncs."""
        backlog = self.backlog
        if backlog is None:
            self.replicas_seen = time.monotonic()
            backlog = self.backlog = Backlog(self.server.config.repl_backlog_size,
                                             self.server.effects.offset)
            self.server.effects.listen(self.feed)
            log.info("Replication backlog created at offset %d (replication IDs '%s' and '%s')",
                     backlog.start, self.replid, self.replid2)
        return backlog

    def _free_backlog(self, idle: float) -> None:
        self.flush()
        self.server.effects.unlisten(self.feed)
        self.backlog = None
        log.info("Replication backlog freed after %d seconds without connected replicas.",
                 int(idle))

    def flush(self) -> None:
        """Once per loop iteration: the iteration's effects go to the backlog and to every
        replica with one write each."""
        feed = self.feed
        feed.scheduled = False
        out = feed.parts
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        feed.parts = []
        feed.size = 0
        if self.backlog is not None:
            self.backlog.append(data)
        self.primary.feed(data)

    # --- role changes ---------------------------------------------------------------------------
    def set_master(self, host: str, port: int) -> None:
        """REPLICAOF host port: follow a primary (continuing our history if it can)."""
        was_master = not self.is_replica
        self.replica.follow(host, port)
        self.server.role = "slave"
        self.server.config.replicaof = f"{host} {port}"
        if was_master:
            self._unblock_writers()
        # Our replicas must learn the new history (they will mostly continue partially).
        self.primary.disconnect_all("replication ID changed")

    def unset_master(self) -> None:
        """REPLICAOF NO ONE: promotion. The history followed so far stays valid as replid2."""
        if not self.is_replica:
            return
        self.replica.unfollow()
        self.server.role = "master"
        self.server.config.replicaof = ""
        self.shift_replid()
        self.primary.disconnect_all("replication ID changed")
        log.info("MASTER MODE enabled (user request from 'id=? addr=? laddr=?')")

    def shift_replid(self) -> None:
        """Start a new history here: the one followed so far stays valid as replid2."""
        self.flush()
        self.replid2 = self.replid
        self.second_offset = self.server.effects.offset + 1
        self.replid = new_replid()
        self.replid_is_ours = True
        log.info("Setting secondary replication ID to %s, valid up to offset: %d. New "
                 "replication ID is %s", self.replid2, self.second_offset, self.replid)
        self._history_changed()

    def continue_history(self, replid: str) -> None:
        """+CONTINUE from a primary whose history has another name from here on (it was
        promoted): the name we had stays valid as replid2, and our replicas must learn it."""
        if replid == self.replid:
            return
        self.flush()
        self.replid2 = self.replid
        self.second_offset = self.server.effects.offset + 1
        self.replid = replid
        self.replid_is_ours = False
        log.info("Master replication ID changed to %s", replid)
        self.primary.disconnect_all("replication ID changed")
        self._history_changed()

    def took_history(self, replid: str) -> None:
        """A full sync installed the primary's data set and, with it, its history."""
        self.replid, self.replid2, self.second_offset = replid, ZERO_ID, -1
        self.replid_is_ours = False

    def _history_changed(self) -> None:
        p = self.server.persistence
        if p is not None:
            p.history_changed()

    def _unblock_writers(self) -> None:
        """Clients blocked in XREADGROUP would write on a replica: release them (Redis)."""
        err = error(errors.UNBLOCKED_ROLE_CHANGE)
        for c in list(self.server.clients.values()):
            b = c.blocked
            # A postponed write (node/writepause.py) runs again when its pause ends and is
            # redirected then, as a switchover wants (control/switchover.py).
            if b is not None and b.argv and not getattr(b, "postponed", False) and \
                    b.argv[0].lower() in (b"xreadgroup", b"wait", b"waitaof"):
                self.server.blocking.unblock(c, err)

    # --- what commands ask ------------------------------------------------------------------
    def replconf(self, c: Client, argv: list[bytes]) -> bytes:
        return self.primary.replconf(c, argv)

    def psync(self, c: Client, argv: list[bytes], sync: bool = False) -> bytes:
        return self.primary.psync(c, argv, sync)

    def acked_replicas(self, c: Client) -> int:
        """WAIT: replicas that acknowledged the client's last write."""
        return self.primary.acked(c.woff)

    def aof_acked_replicas(self, c: Client) -> int:
        """WAITAOF: replicas whose AOF fsync covers the client's last write."""
        return self.primary.aof_acked(c.woff)

    def request_ack(self) -> None:
        self.primary.request_ack()

    def good_replicas(self) -> int:
        """Replicas online within min-replicas-max-lag (Server.check_noreplicas)."""
        return self.primary.good_replicas()

    # --- cron -----------------------------------------------------------------------------------
    def _cron(self) -> None:
        try:
            now = time.monotonic()
            self.replica.cron(now)
            self.primary.cron(now)
            if self.primary.replicas or self.is_replica:
                self.replicas_seen = now
            else:
                ttl = self.server.config.repl_backlog_ttl
                if self.backlog is not None and ttl and now - self.replicas_seen > ttl:
                    self._free_backlog(now - self.replicas_seen)
        except Exception:
            log.exception("replication cron failed")
        self.loop.call_later(CRON_PERIOD_S, self._cron)

    def _config_changed(self, name: str) -> None:
        if name == "repl-backlog-size" and self.backlog is not None:
            self.backlog.resize(self.server.config.repl_backlog_size)

    # --- introspection --------------------------------------------------------------------------
    def role_reply(self) -> list[Any]:
        offset = self.server.effects.offset
        if self.is_replica:
            return self.replica.role_reply(offset)
        return [b"master", offset, self.primary.role_entries()]

    def info_fields(self) -> list[tuple[str, object]]:
        cfg = self.server.config
        now = time.monotonic()
        offset = self.server.effects.offset
        out = (self.replica.info_fields(now, offset) if self.is_replica
               else [("role", "master")])
        out.append(("connected_slaves", len(self.primary.replicas)))
        if not self.is_replica and cfg.min_replicas_to_write and cfg.min_replicas_max_lag:
            out.append(("min_slaves_good_slaves", self.primary.good_replicas()))
        out += self.primary.info_fields(now)
        out += [("master_failover_state", "no-failover"), ("master_replid", self.replid),
                ("master_replid2", self.replid2), ("master_repl_offset", offset),
                ("second_repl_offset", self.second_offset)]
        b = self.backlog
        out += [("repl_backlog_active", int(b is not None)),
                ("repl_backlog_size", cfg.repl_backlog_size),
                ("repl_backlog_first_byte_offset", b.start + 1 if b is not None else 0),
                ("repl_backlog_histlen", b.histlen if b is not None else 0)]
        return out

    def stats_fields(self) -> list[tuple[str, object]]:
        return self.primary.stats_fields()
