"""Persistence: the append-only file of effects, snapshots and rewrites (start-up loading is
node/loading.py).

The AOF is the effect stream itself (node/effects.py): the listener below appends exactly the
bytes that replication ships, so a file offset is a replication offset. Its layout follows
Redis 7's multi-part AOF (node/aof.py): a directory holding a base snapshot, one or more
incremental files of effects, and a small manifest that names them. A rewrite opens a fresh incremental file at the instant a
child forks to write the new base, so base + new incr is always the whole data set; the manifest
is switched atomically when the base is complete.

Write path: effects collect in a buffer during a loop iteration and reach the file with one
write when the iteration's ready callbacks run (after every socket event of the iteration), or
earlier, when the iteration's first reply that may reflect them is about to leave: that reply
(a woken XREADGROUP's delivery) is sent at once instead of waiting behind the other clients'
commands of the iteration, and the file still has every effect a reply shows before the reply
leaves, the order of Redis's beforeSleep. One such early write per iteration at most, so a busy
loop writes the file at most twice per turn. With `appendfsync always` replies are held
until an fsync covers the effects they may have seen; the fsync runs in a thread so that the
loop keeps serving, and every write made meanwhile shares the next one (group commit).
`everysec` fsyncs once a second in a thread; `no` leaves it to the kernel.

A failed write or fsync keeps the unwritten bytes, refuses writes with MISCONF, and retries from
the cron until the disk accepts them: nothing acknowledged is dropped.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from base.histogram import Histogram
from node import errors, loading, snapshot
from node.aof import (
    HistoryMark,
    Manifest,
    ReplIds,
    check_aof,  # noqa: F401 - `xshard check-aof` (control/cli.py) imports it from here
    manifest_path,
)
from node.effects import EffectBuffer

if TYPE_CHECKING:
    from node.server import Connection, Server

log = logging.getLogger("xshard.node")



# -- the persistence engine --------------------------------------------------------------------
class _MisconfField:
    """A field MISCONF depends on: setting it refreshes `Persistence.healthy` and its copy on
    the server, `Server.persistence_healthy`, the one C field Server.check_misconf reads per
    write (the four read by name cost a compiled XADD ~0.6k instructions). The value stays in
    the instance's `__dict__` under the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else obj.__dict__[self.name]

    def __set__(self, obj: Any, value: str | None) -> None:
        d = obj.__dict__
        d[self.name] = value
        d["healthy"] = healthy = (d.get("write_error") is None and d.get("fsync_error") is None
                                  and d.get("manifest_error") is None
                                  and d.get("last_bgsave_status") != "err")
        obj.server.persistence_healthy = healthy


class Persistence:
    """Owns the AOF directory and the snapshot file of one node (`server.persistence`)."""

    # `healthy` is False while any of these says writes cannot be persisted (misconf()).
    write_error = _MisconfField()
    fsync_error = _MisconfField()
    manifest_error = _MisconfField()
    last_bgsave_status = _MisconfField()

    def __init__(self, server: Server) -> None:
        self.server = server
        self.config = server.config
        self.aof_dir = server.config.appenddirname
        self.saver = snapshot.ChildSaver(server)
        server.child_saver = self.saver
        # The replication IDs valid at the end of what load() loaded (None: unknown), and
        # those of the incr file being appended to.
        self.loaded_ids: ReplIds | None = None
        self.end_ids: ReplIds | None = None
        # AOF state
        # The iteration's effects, gathered by a compiled listener (node/effects.py): its
        # `parts`, their `size`, whether the write is `scheduled`; `fd >= 0` is its `open`.
        self.effbuf = EffectBuffer(self._flush)
        self.fd = -1
        self.manifest = Manifest()
        self.incr_name = ""
        self.wrote_early = False  # this iteration's one early write happened (hold)
        self.written_offset = 0  # effect offset of the last byte written to the file
        self.synced_offset = 0  # effect offset covered by the last completed fsync
        self.io_pending = 0  # jobs queued on the I/O thread (fsyncs, manifest switches)
        self.manifest_error: str | None = None
        self.generation = 0  # bumped when the data set is replaced wholesale
        self.io = ThreadPoolExecutor(1, thread_name_prefix="aof-io")
        self.last_fsync = time.monotonic()
        self.write_error: str | None = None
        self.fsync_error: str | None = None
        self.held: set[Connection] = set()
        self.aof_size = 0  # bytes in the current incr file(s) since the base
        self.aof_base_size = 0
        self.aof_rewrites = 0
        self.rewrite_in_progress = False
        self.rewrite_scheduled = False
        self.last_rewrite_status = "ok"
        self.last_rewrite_time = -1
        self.rewrite_started = 0.0
        # snapshot state
        self.last_save = int(time.time())
        self.dirty_at_save = 0
        self.bgsave_in_progress = False
        self.last_bgsave_status = "ok"
        self.loading = 0
        self.shut_down = False
        self.last_fsync_seconds = 0.0
        self.fsync_times = Histogram()  # xshard_aof_fsync_duration_seconds (node/metrics.py)
        self.error_count = 0  # failed writes, fsyncs, manifest switches, saves, rewrites
        server.config_listeners.append(self.config_changed)

    @property
    def fd(self) -> int:
        return self._fd

    @fd.setter
    def fd(self, fd: int) -> None:
        self._fd = fd
        self.effbuf.open = fd >= 0

    # --- start-up (node/loading.py) ------------------------------------------------------------
    def load(self) -> None:
        """Load the AOF (base + incrs) when enabled, else the snapshot file if there is one."""
        loading.load(self)

    def start(self) -> None:
        """After loading: open the AOF for appending (creating its first base) and listen."""
        self.written_offset = self.synced_offset = self.server.effects.offset
        self.dirty_at_save = self.server.dirty
        if self.config.appendonly:
            # Only an open AOF listens: with appendonly no, effects are not even encoded
            # (node/effects.py), which is a third of a plain XADD's cost.
            self.effbuf.loop = self.server.loop
            self.server.effects.listen(self.effbuf)
            self._open_aof()
        self._apply_fsync_policy()
        self.server.loop.call_later(1.0 / max(self.config.hz, 1), self._second_tick)

    def _open_aof(self) -> None:
        os.makedirs(self.aof_dir, exist_ok=True)
        m = self.manifest
        if m.incrs and self._ids() != self.end_ids:
            # The node took other IDs than its files end with (a restarted primary): what it
            # writes from now on goes to a new incr file that names them.
            self._new_incr(m.last_seq + 1, sync=True)
            return
        if not m.base and not m.incrs:
            # A fresh AOF starts from a base that holds what is loaded now (maybe nothing).
            seq = 1
            base = f"{self.config.appendfilename}.{seq}.base.xsnap"
            self.aof_base_size = snapshot.write(self.server.db, os.path.join(self.aof_dir, base),
                                                self._aux())
            m = self.manifest = Manifest(base, seq, [])
            self._new_incr(m.last_seq, sync=True)
            return
        if not m.incrs:
            self._new_incr(m.last_seq + 1, sync=True)
            return
        self.incr_name = m.incrs[-1][0]
        self.fd = os.open(os.path.join(self.aof_dir, self.incr_name),
                          os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _new_incr(self, seq: int, sync: bool = False) -> None:
        """Switch appends to a fresh incremental file and record it in the manifest.

        The fsyncs (the new file, the manifest, what is still dirty in the old file) run on
        the I/O thread: up to a second of everysec data may be waiting there, and the loop
        must not wait for it. Offsets stay ordered across files because that thread is FIFO:
        no later fsync completes (and so no held reply leaves) before the switch is durable."""
        name = f"{self.config.appendfilename}.{seq}.incr.aof"
        fd = os.open(os.path.join(self.aof_dir, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                     0o644)
        self.manifest.incrs.append((name, seq))
        ids = self._ids()
        if ids is not None:
            # Bytes still in the buffer go to the new file: it starts before them.
            self.manifest.marks[name] = HistoryMark(self.server.effects.offset - self.effbuf.size,
                                                    ids)
        self.end_ids = ids
        data = self.manifest.render()
        old = self.fd
        self.fd, self.incr_name = fd, name
        target = self.written_offset

        def switch() -> None:
            os.fsync(fd)
            self._write_manifest(data)
            if old >= 0:
                try:
                    os.fdatasync(old)
                finally:
                    os.close(old)

        if sync:
            switch()
        else:
            self._io(switch, target if old >= 0 else None, manifest=True)

    def _write_manifest(self, data: bytes | None = None) -> None:
        path = manifest_path(self.config)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.manifest.render() if data is None else data)
            f.flush()
            os.fsync(f.fileno())
        snapshot.replace_durably(tmp, path)

    def _io(self, job: Callable[[], None], target: int | None = None,
            manifest: bool = False) -> asyncio.Future[None]:
        """Run `job` on the persistence I/O thread (FIFO). With `target`, the job is an fsync
        that makes the effects up to that offset durable; `manifest` jobs write the manifest,
        and until one succeeds writes are refused (the files it names are the data set)."""
        self.io_pending += 1
        t0 = time.perf_counter()
        fut = self.server.loop.run_in_executor(self.io, job)
        fut.add_done_callback(lambda f: self._io_done(f, target, t0, manifest))
        return fut

    def _io_wait(self) -> None:
        """Block until every queued I/O job ran (DEBUG LOADAOF, shutdown)."""
        self.io.submit(lambda: None).result()

    def _ids(self) -> ReplIds | None:
        r = self.server.replication
        if r is None or not hasattr(r, "snapshot_aux"):
            return None
        aux = r.snapshot_aux()
        return aux["replid"], aux["replid2"], aux["second_offset"]

    def history_changed(self) -> None:
        """The replication IDs changed (a promotion, a primary that continues under a new
        ID): the effects from here on belong to the new history. They go to a new incr file
        whose manifest line names it, made durable before any of them is written, so that a
        restart from the AOF never counts them under the old ID (node/replication/)."""
        if self.fd < 0 or self._ids() == self.end_ids:
            return
        self._flush()
        self._io_wait()  # a queued manifest switch must not land after this one
        try:
            self._new_incr(self.manifest.last_seq + 1, sync=True)
        except OSError as e:
            log.warning("Can't switch the AOF to a new file for the new replication ID: %s", e)
            self.manifest_error = str(e.strerror or e)

    def _aux(self) -> dict[str, Any]:
        aux: dict[str, Any] = {"ctime": int(time.time()), "offset": self.server.effects.offset}
        r = self.server.replication
        if r is not None and hasattr(r, "snapshot_aux"):
            aux.update(r.snapshot_aux())
        return aux

    # --- the write path -----------------------------------------------------------------------
    def _flush(self) -> None:
        """Write the iteration's effects with one write; with `always`, start the fsync."""
        self.effbuf.scheduled = False
        self.wrote_early = False
        self._write_buf()
        if self.held and self.config.appendfsync != "always":
            self._release_held(everything=True)
        if self.config.appendfsync == "always":
            self._start_fsync()
        elif self.config.appendfsync == "no":
            self.synced_offset = max(self.synced_offset, 0)

    def _write_buf(self) -> None:
        """The buffered effects to the file with one write (kept for a retry if it fails)."""
        eb = self.effbuf
        parts = eb.parts
        if parts and self._fd >= 0:
            data = b"".join(parts) if len(parts) > 1 else parts[0]
            target = self.server.effects.offset
            try:
                n = os.write(self._fd, data)
            except OSError as e:
                self._write_failed(e.errno, data, 0)
                return
            if n < len(data):
                self._write_failed(errno.ENOSPC, data, n)
                return
            eb.parts = []
            eb.size = 0
            self.aof_size += n
            self.written_offset = target
            if self.write_error is not None:
                log.warning("AOF write error looks solved, Redis can write again.")
                self.write_error = None

    def _write_failed(self, err: int, data: bytes, written: int) -> None:
        if written:
            # A short write: take it back if we can, so the file never holds half a record;
            # if we cannot, those bytes are on disk and only the rest is retried.
            try:
                os.ftruncate(self.fd, os.lseek(self.fd, 0, os.SEEK_END) - written)
            except OSError:
                self.aof_size += written
                self.effbuf.parts = [data[written:]]
                self.effbuf.size = len(data) - written
        self.error_count += 1
        if self.write_error is None:
            log.warning("Error writing to the AOF file: %s", os.strerror(err))
        self.write_error = os.strerror(err)
        if self.config.appendfsync == "always":
            self._abort_held()
        else:  # as Redis: the write stays in memory and in the buffer (retried), replies go
            self._release_held(everything=True)

    def _abort_held(self) -> None:
        """`always` promised no reply before the disk has the effect. When the disk refuses,
        the clients waiting on it are disconnected: they must treat the write as unknown, as
        after any lost connection. Until the disk works again replies pass (writes get
        MISCONF), so readers are not stuck behind an error."""
        for conn in list(self.held):
            conn.held = None
            conn.close(force=True)
        self.held.clear()

    def _start_fsync(self) -> None:
        if self.io_pending or self.fd < 0 or self.written_offset <= self.synced_offset:
            return
        fd = self.fd
        self._io(lambda: os.fdatasync(fd), self.written_offset)

    def _io_done(self, fut: Any, target: int | None, t0: float, manifest: bool) -> None:
        self.io_pending -= 1
        exc = fut.exception()
        if exc is not None:
            self.error_count += 1
            if manifest:
                log.warning("Can't write the AOF manifest: %s", exc)
                self.manifest_error = str(getattr(exc, "strerror", exc))
            else:
                if self.fsync_error is None:
                    log.warning("Can't fsync the AOF file: %s", exc)
                self.fsync_error = str(getattr(exc, "strerror", exc))
            self._abort_held()
            return
        if manifest:
            self.manifest_error = None
        if target is not None:
            self.last_fsync = time.monotonic()
            self.last_fsync_seconds = time.perf_counter() - t0
            self.fsync_times.observe(self.last_fsync_seconds)
            if self.config.appendfsync == "always":  # Redis's latency event of that name
                self.server.latency.add_if_needed(b"aof-fsync-always",
                                                  int(self.last_fsync_seconds * 1000))
            self.fsync_error = None
            self.synced_offset = max(self.synced_offset, target)
            if self.held:
                self._release_held()
            self.server.blocking.offsets_advanced()
        if self.config.appendfsync == "always" and self.written_offset > self.synced_offset:
            self._start_fsync()

    # --- replies held for `always` ------------------------------------------------------------
    def hold(self, conn: Connection, data: bytes) -> bool:
        """The reply gate. With `always`: keep `data` until an fsync covers every effect it
        may reflect. Otherwise the effects only reach the file (write(), no fsync) before the
        reply leaves, as Redis writes its AOF buffer before replying: a killed process then
        never loses an acknowledged write, only a crashed machine can (up to a second)."""
        if self.config.appendfsync != "always":
            eb = self.effbuf
            if conn.held is None and not (eb.parts and eb.scheduled
                                          and self.write_error is None):
                return False
            if conn.held is None and not self.wrote_early:
                # The iteration's first reply behind unwritten effects: write them now and
                # send it, rather than after the iteration's other events (the _flush already
                # scheduled ends the iteration's allowance). A failed write lets it pass, as
                # _flush would.
                self.wrote_early = True
                self._write_buf()
                return False
            # Held only until this loop iteration's write of the AOF buffer (_flush).
            if conn.held is None:
                conn.held = []
                self.held.add(conn)
            conn.held.append((0, data))
            return True
        need = self.server.effects.offset
        if (need <= self.synced_offset or self.write_error is not None
                or self.fsync_error is not None) and conn.held is None:
            return False
        if conn.held is None:
            conn.held = []
            self.held.add(conn)
        conn.held.append((need, data))
        if not self.effbuf.scheduled and not self.io_pending:
            self._flush()
        return True

    def _release_held(self, everything: bool = False) -> None:
        synced = self.synced_offset
        for conn in list(self.held):
            items = conn.held or []
            i = 0
            while i < len(items) and (everything or items[i][0] <= synced):
                i += 1
            if i:
                conn.send(b"".join(d for _, d in items[:i]))
            if i == len(items):
                conn.held = None
                self.held.discard(conn)
            else:
                conn.held = items[i:]

    def _apply_fsync_policy(self) -> None:
        always = self.config.appendonly and self.config.appendfsync == "always"
        self.server.reply_gate = self if self.config.appendonly else None
        if not always and self.held:
            self._release_held(everything=True)

    # --- refusing writes ----------------------------------------------------------------------
    def misconf(self) -> bytes | None:
        """The MISCONF error while writes cannot be persisted (Server.check_misconf)."""
        err = self.write_error or self.fsync_error or self.manifest_error
        if err is not None:
            return errors.misconf_aof(err)
        if self.last_bgsave_status == "err" and self.config.save and not self.config.appendonly:
            return errors.MISCONF_RDB
        return None

    # --- the once-a-second tick ----------------------------------------------------------------
    def _second_tick(self) -> None:
        try:
            self.cron()
        except Exception:
            log.exception("persistence cron failed")
        self.server.loop.call_later(1.0 / max(self.config.hz, 1), self._second_tick)

    def cron(self) -> None:
        """Retry failed writes, fsync everysec, run save points and automatic rewrites."""
        if self.fd >= 0:
            if self.manifest_error is not None and not self.io_pending:
                data = self.manifest.render()
                self._io(lambda: self._write_manifest(data), manifest=True)
            if self.effbuf.parts and not self.effbuf.scheduled:
                self._flush()
            now = time.monotonic()
            if self.fsync_error is not None or (
                    self.config.appendfsync == "everysec" and now - self.last_fsync >= 1.0):
                self.last_fsync = now
                self._start_fsync()
            self._maybe_auto_rewrite()
        self._maybe_save_point()

    def _maybe_auto_rewrite(self) -> None:
        pct = self.config.auto_aof_rewrite_percentage
        if not pct or self.rewrite_in_progress or self.saver.busy:
            return
        base = max(self.aof_base_size, 1)
        if self.aof_size >= self.config.auto_aof_rewrite_min_size and \
                self.aof_size * 100 >= base * pct:
            log.info("Starting automatic rewriting of AOF on %d%% growth",
                     self.aof_size * 100 // base)
            self.rewrite()

    def _maybe_save_point(self) -> None:
        words = self.config.save.split()
        if len(words) < 2 or self.bgsave_in_progress or self.saver.busy:
            return
        changes = self.server.dirty - self.dirty_at_save
        elapsed = time.time() - self.last_save
        for i in range(0, len(words) - 1, 2):
            secs, n = int(words[i]), int(words[i + 1])
            if changes >= n and elapsed > secs:
                log.info("%d changes in %d seconds. Saving...", n, secs)
                self.bgsave()
                return

    # --- snapshots ----------------------------------------------------------------------------
    def save(self) -> None:
        """SAVE: in the loop (blocking, by definition)."""
        snapshot.write(self.server.db, self.config.dbfilename, self._aux())
        self._saved(True)

    def _saved(self, ok: bool) -> None:
        self.last_bgsave_status = "ok" if ok else "err"
        self.error_count += not ok
        if ok:
            self.last_save = int(time.time())
            self.dirty_at_save = self.server.dirty

    def bgsave(self) -> None:
        self.bgsave_in_progress = True
        dirty = [0]

        def aux() -> dict[str, Any]:
            dirty[0] = self.server.dirty
            return self._aux()

        def done(ok: bool, _aux: dict[str, Any]) -> None:
            self.bgsave_in_progress = False
            self._saved(ok)
            if ok:
                self.dirty_at_save = dirty[0]

        self.saver.request(self.config.dbfilename, aux, done)

    # --- AOF rewrite --------------------------------------------------------------------------
    def rewrite(self) -> None:
        """BGREWRITEAOF: switch to a new incr file now and fork a child to write the new base."""
        if not self.config.appendonly:
            return
        self.rewrite_in_progress = True
        self.rewrite_started = time.time()
        seq = [0]
        generation = self.generation

        def aux() -> dict[str, Any]:
            # Runs at fork time: what the child writes is exactly the state before this point.
            self._flush()
            seq[0] = self.manifest.last_seq + 1
            self._new_incr(seq[0])
            self.aof_size = 0
            return self._aux()

        def done(ok: bool, _aux: dict[str, Any]) -> None:
            self.last_rewrite_time = int(time.time() - self.rewrite_started)
            tmp_base = os.path.join(self.aof_dir, f".rewrite-{seq[0]}.base.xsnap")
            if generation != self.generation:  # the data set it saved was replaced since
                self.rewrite_in_progress = False
                _unlink(tmp_base)
                return
            if not ok or not self.config.appendonly:
                self.rewrite_in_progress = False
                self.error_count += not ok
                self.last_rewrite_status = "err"
                _unlink(tmp_base)
                return
            base = f"{self.config.appendfilename}.{seq[0]}.base.xsnap"
            old = self.manifest
            self.manifest = old.keep(base, seq[0], seq[0])
            data = self.manifest.render()
            gone = [os.path.join(self.aof_dir, n) for n in old.files()
                    if n not in self.manifest.files()]
            self.aof_base_size = os.path.getsize(tmp_base)
            base_path = os.path.join(self.aof_dir, base)

            def switch() -> None:
                os.replace(tmp_base, base_path)
                self._write_manifest(data)
                for path in gone:
                    _unlink(path)

            def switched(f: asyncio.Future[None]) -> None:
                # As in Redis, the rewrite is over once the new manifest is on disk: INFO shows
                # aof_rewrite_in_progress:0 only when the files it names are the AOF.
                self.rewrite_in_progress = False
                if f.cancelled() or f.exception() is not None:
                    self.last_rewrite_status = "err"
                    return
                self.aof_rewrites += 1
                self.last_rewrite_status = "ok"
                log.info("Background AOF rewrite finished successfully")

            self._io(switch, manifest=True).add_done_callback(switched)

        # The child writes under a temporary name (known once aux() picked the seq); `done`
        # renames it.
        self.saver.request(lambda: os.path.join(self.aof_dir, f".rewrite-{seq[0]}.base.xsnap"),
                           aux, done)

    def reload(self, from_aof: bool) -> None:
        """DEBUG RELOAD (save a snapshot and load it back) and DEBUG LOADAOF (fsync the AOF
        and replay it into an empty key space): proof that what is on disk is the data set."""
        if from_aof:
            if self.fd < 0:
                raise OSError(errno.EINVAL, "appendonly is off")
            self._flush()
            self._io_wait()  # manifest switches and renames reach the disk first
            os.fsync(self.fd)
            self.server.db.flush()
            self.server.effects.offset = 0
            self.aof_size = 0
            loading.load_aof(self, prescan=True)
        else:
            self.save()
            loading.load_snapshot(self, self.config.dbfilename)

    def dataset_replaced(self, snapshot_path: str | None = None) -> None:
        """A replica installed a whole new data set: the AOF restarts at once from a new base
        (the snapshot it was loaded from, when given), so that no effect of the new data set
        is ever appended behind the old one."""
        if not self.config.appendonly or self.fd < 0:
            return
        self.generation += 1  # a rewrite of the old data set still running is void
        self._flush()
        self._io_wait()
        seq = self.manifest.last_seq + 1
        base = f"{self.config.appendfilename}.{seq}.base.xsnap"
        base_path = os.path.join(self.aof_dir, base)
        linked = False
        if snapshot_path is not None:
            try:
                os.link(snapshot_path, base_path)
                linked = True
            except OSError:
                pass
        if not linked:
            snapshot.write(self.server.db, base_path, self._aux())
        old = self.manifest
        self.manifest = Manifest(base, seq, [])
        self._new_incr(seq, sync=True)
        for name in old.files():
            if name not in self.manifest.files():
                _unlink(os.path.join(self.aof_dir, name))
        self.aof_base_size = os.path.getsize(base_path)
        self.aof_size = 0
        self.written_offset = self.synced_offset = self.server.effects.offset
        if self.held:
            self._release_held()

    # --- runtime configuration ----------------------------------------------------------------
    def config_changed(self, name: str) -> None:
        if name == "appendonly":
            if self.config.appendonly and self.fd < 0:
                self.effbuf.loop = self.server.loop
                self.server.effects.listen(self.effbuf)
                self.manifest = Manifest()
                mpath = manifest_path(self.config)
                if os.path.exists(mpath):  # an old AOF: replaced by a rewrite of the present
                    with open(mpath) as f:
                        self.manifest = Manifest.parse(f.read(), mpath)
                os.makedirs(self.aof_dir, exist_ok=True)
                self.written_offset = self.synced_offset = self.server.effects.offset
                if self.manifest.base or self.manifest.incrs:
                    self._new_incr(self.manifest.last_seq + 1)
                    self.rewrite()
                else:
                    self._open_aof()
            elif not self.config.appendonly and self.fd >= 0:
                self.server.effects.unlisten(self.effbuf)
                self._flush()
                try:
                    os.fsync(self.fd)
                except OSError:
                    pass
                os.close(self.fd)
                self.fd = -1
                self.effbuf.parts, self.effbuf.size = [], 0
                self.write_error = self.fsync_error = None
                self.synced_offset = self.written_offset = self.server.effects.offset
        if name in ("appendonly", "appendfsync"):
            self._apply_fsync_policy()

    # --- WAITAOF and shutdown -----------------------------------------------------------------
    def fsynced_for(self, c: Any) -> bool:
        return self.fd >= 0 and self.synced_offset >= c.woff

    def shutdown(self, save: bool | None) -> None:
        """Flush and fsync the AOF; write a snapshot when save points are set (or asked)."""
        if self.shut_down:
            return
        self.shut_down = True
        self.saver.kill()
        if self.fd >= 0:
            self._flush()
            try:
                self._io_wait()
                os.fsync(self.fd)
            except OSError as e:
                log.warning("Error fsyncing the AOF on shutdown: %s", e)
        if save or (save is None and self.config.save.split()):
            log.info("Saving the final snapshot before exiting.")
            self.save()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # --- INFO persistence ---------------------------------------------------------------------
    def info_fields(self) -> list[tuple[str, object]]:
        s = self.server
        now = time.time()
        return [
            ("loading", self.loading), ("async_loading", 0),
            ("rdb_changes_since_last_save", s.dirty - self.dirty_at_save),
            ("rdb_bgsave_in_progress", int(self.bgsave_in_progress)),
            ("rdb_last_save_time", self.last_save),
            ("rdb_last_bgsave_status", self.last_bgsave_status),
            ("rdb_current_bgsave_time_sec",
             int(now - self.saver.started) if self.bgsave_in_progress else -1),
            ("rdb_last_cow_size", 0),
            ("aof_enabled", int(self.config.appendonly)),
            ("aof_rewrite_in_progress", int(self.rewrite_in_progress)),
            ("aof_rewrite_scheduled", int(self.rewrite_scheduled)),
            ("aof_last_rewrite_time_sec", self.last_rewrite_time),
            ("aof_current_rewrite_time_sec",
             int(now - self.rewrite_started) if self.rewrite_in_progress else -1),
            ("aof_last_bgrewrite_status", self.last_rewrite_status),
            ("aof_rewrites", self.aof_rewrites),
            ("aof_last_write_status", "err" if self.write_error or self.fsync_error or self.manifest_error
             else "ok"),
            ("aof_last_cow_size", 0),
            ("module_fork_in_progress", 0),
            ("module_fork_last_cow_size", 0),
        ] + ([
            ("aof_current_size", self.aof_size + self.aof_base_size),
            ("aof_base_size", self.aof_base_size),
            ("aof_pending_rewrite", 0),
            ("aof_buffer_length", self.effbuf.size),
            ("aof_pending_bio_fsync", int(self.io_pending > 0)),
            ("aof_delayed_fsync", 0),
        ] if self.config.appendonly else [])


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
