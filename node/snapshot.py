"""The binary snapshot: the whole key space in one versioned, checksummed file.

Streams are written as their sealed blocks exactly as they sit in memory (node/stream.py), so
loading is a copy of bytes objects, not a re-parse of entries. The file is a sequence of records,
each `type (1 byte) | length (u32) | payload | crc32 (u32 over type, length and payload)`; payloads
are `marshal` data (fast C code for ints, bytes, str, tuples and lists). The checksum is verified
before a payload is unmarshalled, so a corrupted file is reported with its offset, never loaded.

Records: `A` aux fields (replication id and offset, creation time), `K` a non-stream key, `S` a
stream head (counters, consumer groups and, from version 2, the IDMP map or None) followed by
`B` records that carry its blocks in chunks, and `E` the end (the number of keys). A large stream is spread over many `B` records so
that neither writing nor reading ever holds a second copy of it in one buffer.

Background saves fork, as Redis does: the child sees a frozen copy-on-write image of the key
space and writes it while the parent keeps serving. The parent polls the child from a loop timer.
"""

from __future__ import annotations

import gc
import logging
import marshal
import os
import signal
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from node.groups import dump_groups, load_groups
from node.idmp import IdmpMap
from node.stream import Stream

if TYPE_CHECKING:
    from node.keyspace import Keyspace
    from node.server import Server

log = logging.getLogger("xshard.node")

MAGIC = b"XSHARDSNAP"
# 2: a stream head carries its IDMP map (node/idmp.py); 3: a pending entry may be unowned
# (released by XNACK), which an older loader cannot read, so it refuses the file by its
# version instead of failing on the missing consumer. Versions 1 and 2 load.
VERSION = 3
_HEAD = struct.Struct("<BI")
_CRC = struct.Struct("<I")
_BLOCKS_PER_RECORD = 256
_MARSHAL_VERSION = 4
_KINDS = {bytes: "string", deque: "list", set: "set"}


class SnapshotError(Exception):
    """A snapshot that cannot be loaded; the message names the file and byte offset."""


@dataclass
class Snapshot:
    """What a snapshot file holds once loaded."""

    aux: dict[str, Any] = field(default_factory=dict)
    data: dict[bytes, Any] = field(default_factory=dict)
    expires: dict[bytes, int] = field(default_factory=dict)
    entries: int = 0  # stream entries loaded, for the start-up log line


# -- writing ----------------------------------------------------------------------------------
def _record(kind: bytes, payload: bytes) -> bytes:
    head = _HEAD.pack(kind[0], len(payload))
    return head + payload + _CRC.pack(zlib.crc32(payload, zlib.crc32(head)))


def records(db: Keyspace, aux: dict[str, Any]) -> Iterator[bytes]:
    """The snapshot as a sequence of byte chunks (header first)."""
    yield MAGIC + struct.pack("<H", VERSION)
    yield _record(b"A", marshal.dumps(aux, _MARSHAL_VERSION))
    n = 0
    expires = db.expires
    for key, value in db.data.items():
        n += 1
        exp = expires.get(key)
        if type(value) is Stream:
            s = value
            head = (key, exp, (s.length, s.last_id, s.first_id, s.max_deleted_entry_id,
                               s.entries_added), dump_groups(s), s.num_blocks(),
                    s.idmp.dump_state() if s.idmp is not None else None)
            yield _record(b"S", marshal.dumps(head, _MARSHAL_VERSION))
            chunk: list[tuple] = []
            for b in s.blocks():
                chunk.append(b.state())
                if len(chunk) == _BLOCKS_PER_RECORD:
                    yield _record(b"B", marshal.dumps(chunk, _MARSHAL_VERSION))
                    chunk = []
            if chunk:
                yield _record(b"B", marshal.dumps(chunk, _MARSHAL_VERSION))
        else:
            kind = _KINDS[type(value)]
            v = value if kind == "string" else list(value)
            yield _record(b"K", marshal.dumps((key, exp, kind, v), _MARSHAL_VERSION))
    yield _record(b"E", marshal.dumps((n,), _MARSHAL_VERSION))


def write(db: Keyspace, path: str, aux: dict[str, Any]) -> int:
    """Write a snapshot to `path` durably (temp file, fsync, rename, fsync dir); returns its size."""
    tmp = f"{path}.tmp-{os.getpid()}"
    size = 0
    try:
        with open(tmp, "wb", buffering=1 << 20) as f:
            for chunk in records(db, aux):
                f.write(chunk)
                size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        replace_durably(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return size


def replace_durably(tmp: str, path: str) -> None:
    """Atomically put `tmp` at `path` and make the rename itself survive a crash."""
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- reading ----------------------------------------------------------------------------------
def _read_records(f: BinaryIO, path: str) -> Iterator[tuple[int, int, Any]]:
    pos = len(MAGIC) + 2
    while True:
        head = f.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise SnapshotError(f"{path}: truncated at offset {pos} (no end record)")
        kind, length = _HEAD.unpack(head)
        payload = f.read(length)
        crc = f.read(_CRC.size)
        if len(payload) < length or len(crc) < _CRC.size:
            raise SnapshotError(f"{path}: truncated record at offset {pos}")
        if _CRC.unpack(crc)[0] != zlib.crc32(payload, zlib.crc32(head)):
            raise SnapshotError(f"{path}: checksum mismatch in record at offset {pos}")
        try:
            value = marshal.loads(payload)
        except (ValueError, EOFError, TypeError) as e:
            raise SnapshotError(f"{path}: bad record at offset {pos}: {e}") from None
        yield kind, pos, value
        pos += _HEAD.size + length + _CRC.size


def read(path: str) -> Snapshot:
    """Load a snapshot file; raises SnapshotError (naming file and offset) or OSError."""
    snap = Snapshot()
    with open(path, "rb", buffering=1 << 20) as f:
        magic = f.read(len(MAGIC) + 2)
        if magic[:len(MAGIC)] != MAGIC or len(magic) < len(MAGIC) + 2:
            raise SnapshotError(f"{path}: not an xshard snapshot (bad magic at offset 0)")
        version = struct.unpack("<H", magic[len(MAGIC):])[0]
        if version > VERSION:
            raise SnapshotError(f"{path}: snapshot version {version} is newer than this "
                                f"server's {VERSION}")
        stream: Stream | None = None
        blocks_left = 0
        for kind, pos, value in _read_records(f, path):
            try:
                if kind == ord("B"):
                    if stream is None or blocks_left < len(value):
                        raise SnapshotError(f"{path}: unexpected block record at offset {pos}")
                    stream.add_blocks(value)
                    blocks_left -= len(value)
                    continue
                if blocks_left:
                    raise SnapshotError(f"{path}: stream cut short before offset {pos}")
                stream = None
                if kind == ord("A"):
                    snap.aux.update(value)
                elif kind == ord("S"):
                    key, exp, counters, groups, blocks_left = value[:5]
                    stream = Stream()
                    if len(value) > 5 and value[5] is not None:  # version 2
                        stream.idmp = IdmpMap.from_state(value[5])
                    (stream.length, stream.last_id, stream.first_id,
                     stream.max_deleted_entry_id, stream.entries_added) = counters
                    load_groups(stream, groups)
                    snap.entries += stream.length
                    _put(snap, key, stream, exp)
                elif kind == ord("K"):
                    key, exp, tname, v = value
                    _put(snap, key, v if tname == "string" else
                         deque(v) if tname == "list" else set(v), exp)
                elif kind == ord("E"):
                    if value[0] != len(snap.data):
                        raise SnapshotError(f"{path}: end record at offset {pos} counts "
                                            f"{value[0]} keys, found {len(snap.data)}")
                    return snap
                else:
                    raise SnapshotError(f"{path}: unknown record type {kind} at offset {pos}")
            except SnapshotError:
                raise
            except (ValueError, TypeError, KeyError, IndexError) as e:
                raise SnapshotError(f"{path}: malformed record at offset {pos}: {e}") from None
    raise SnapshotError(f"{path}: no end record")  # pragma: no cover - _read_records raises first


def _put(snap: Snapshot, key: bytes, value: Any, exp: int | None) -> None:
    snap.data[key] = value
    if exp is not None:
        snap.expires[key] = exp


def install(server: Server, snap: Snapshot) -> None:
    """Replace the key space with a loaded snapshot (blocked readers of vanished keys wake)."""
    db = server.db
    db.flush()
    db.load(snap.data, snap.expires)
    for key in snap.data:
        db.changed(key, ready=True)


# -- background saves -------------------------------------------------------------------------
class ChildSaver:
    """One forked child at a time writes a snapshot; later requests queue behind it.

    Redis runs one child at a time for the same reason: two children would double the
    copy-on-write cost. `on_done(ok, aux)` runs in the parent when the child has exited.
    """

    POLL_S = 0.01

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pid = 0
        self.started = 0.0
        self.path = ""
        self._aux: dict[str, Any] = {}
        self._on_done: Callable[[bool, dict[str, Any]], None] | None = None
        self._queue: deque[tuple[str | Callable[[], str], Callable[[], dict[str, Any]],
                                 Callable[[bool, dict[str, Any]], None]]] = deque()
        self.last_fork_ms = 0.0
        self.total_forks = 0  # INFO total_forks

    @property
    def busy(self) -> bool:
        return self.pid != 0

    def request(self, path: str | Callable[[], str], aux: Callable[[], dict[str, Any]],
                on_done: Callable[[bool, dict[str, Any]], None]) -> None:
        """Queue a background snapshot; `aux()` and then a callable `path()` are evaluated at
        fork time."""
        self._queue.append((path, aux, on_done))
        if not self.pid:
            self._start_next()

    def _start_next(self) -> None:
        while self._queue and not self.pid:
            path_or_fn, aux_fn, on_done = self._queue.popleft()
            try:
                aux = aux_fn()
            except OSError as e:
                log.warning("Can't prepare a background save: %s", e)
                on_done(False, {})
                continue
            path = path_or_fn() if callable(path_or_fn) else path_or_fn
            t0 = time.perf_counter()
            try:
                pid = os.fork()
            except OSError as e:
                log.warning("Can't fork for a background save: %s", e)
                on_done(False, aux)
                continue
            if pid == 0:  # the child never returns
                _child_main(self.server, path, aux)
            self.last_fork_ms = (time.perf_counter() - t0) * 1000
            self.total_forks += 1
            self.pid, self.path, self._aux, self._on_done = pid, path, aux, on_done
            self.started = time.time()
            log.info("Background saving started by pid %d", pid)
            self.server.loop.call_later(self.POLL_S, self._poll)

    def _poll(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 1 << 8
        if pid == 0:
            self.server.loop.call_later(self.POLL_S, self._poll)
            return
        ok = os.waitstatus_to_exitcode(status) == 0
        on_done, aux = self._on_done, self._aux
        self.pid, self._on_done = 0, None
        if ok:
            log.info("Background saving terminated with success")
        else:
            log.warning("Background saving error")
        try:
            if on_done is not None:
                on_done(ok, aux)
        finally:
            self._start_next()

    def kill(self) -> None:
        """Stop a running child (shutdown, or a snapshot nobody needs any more)."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            try:
                os.unlink(f"{self.path}.tmp-{self.pid}")
            except OSError:
                pass
            self.pid = 0
        self._queue.clear()


def _child_main(server: Server, path: str, aux: dict[str, Any]) -> None:
    """In the forked child: write and exit, touching nothing the parent's loop owns."""
    code = 1
    try:
        gc.disable()  # a collection would touch (and so copy) every object in the heap
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        # Client and listening sockets stay the parent's: a child holding them would keep a
        # port bound after the parent died.
        os.closerange(3, _max_fd())
        write(server.db, path, aux)
        code = 0
    except BaseException as e:  # noqa: BLE001 - the exit code is the report
        code = 1
        try:  # stderr is the parent's log; the parent logs "Background saving error" too
            os.write(2, f"{os.getpid()}:C snapshot child failed writing {path}: {e!r}\n"
                     .encode(errors="replace"))
        except OSError:
            pass
    finally:
        os._exit(code)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 65536
