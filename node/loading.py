"""Start-up loading: a node's data set from its AOF directory (base + incremental files of
effects) or, with the AOF off, from its snapshot file.

The incremental files are replayed through the same effect applier a replica uses
(node/effects.py), and a torn tail of the last file is cut while any other damage stops the
load, as Redis's `aof-load-truncated` does. The state the load leaves (the replication IDs it
ends under, the AOF's sizes) lives on the Persistence that called it (node/persistence.py).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from node import snapshot
from node.aof import HistoryMark, LoadError, Manifest, manifest_path, read_chunks, scan
from node.effects import EffectApplier, EffectStreamError

if TYPE_CHECKING:
    from node.persistence import Persistence

log = logging.getLogger("xshard.node")


def load(p: Persistence) -> None:
    """Load the AOF (base + incrs) when enabled, else the snapshot file if there is one."""
    t0 = time.perf_counter()
    cfg = p.config
    mpath = manifest_path(cfg)
    if cfg.appendonly and os.path.exists(mpath):
        with open(mpath) as f:
            p.manifest = Manifest.parse(f.read(), mpath)
        keys = load_aof(p)
    elif os.path.exists(cfg.dbfilename):
        keys = load_snapshot(p, cfg.dbfilename)
    else:
        return
    log.info("DB loaded from disk: %d keys, %.3f seconds", keys, time.perf_counter() - t0)


def load_snapshot(p: Persistence, path: str) -> int:
    """Install a snapshot file's data set; the replication IDs and offset it names become
    the node's."""
    try:
        snap = snapshot.read(path)
    except snapshot.SnapshotError as e:
        raise LoadError(f"Bad snapshot: {e}") from None
    snapshot.install(p.server, snap)
    aux = snap.aux
    p.loaded_ids = ((aux["replid"], str(aux.get("replid2", "0" * 40)),
                     int(aux.get("second_offset", -1)))
                    if isinstance(aux.get("replid"), str) else None)
    p.server.effects.offset = int(aux.get("offset", 0))
    log.info("Loaded snapshot %s: %d keys, %d stream entries", path, len(snap.data),
             snap.entries)
    return len(snap.data)


def load_aof(p: Persistence, prescan: bool = False) -> int:
    """Load the manifest's base, then replay its incremental files in order."""
    m = p.manifest
    if m.base:
        load_snapshot(p, os.path.join(p.aof_dir, m.base))
        p.aof_base_size = os.path.getsize(os.path.join(p.aof_dir, m.base))
    offset = p.server.effects.offset
    for i, (name, _seq) in enumerate(m.incrs):
        _follow_mark(p, m.marks.get(name), offset, name)
        path = os.path.join(p.aof_dir, name)
        if not os.path.exists(path):
            if i == len(m.incrs) - 1:
                continue  # created by the manifest switch, crashed before the first write
            raise LoadError(f"The AOF file {path} listed in the manifest doesn't exist")
        offset += _replay(p, path, last=i == len(m.incrs) - 1, prescan=prescan)
    p.server.effects.offset = offset
    p.end_ids = p.loaded_ids
    return len(p.server.db.data)


def _follow_mark(p: Persistence, mark: HistoryMark | None, offset: int, name: str) -> None:
    """The IDs from an incr file's manifest line on. A file that does not start where the
    files before it end (an AOF switched on over an older one) leaves the history unknown:
    a restart then resyncs in full rather than name bytes after the wrong history."""
    if mark is None:
        return  # written before marks existed: the history goes on as it was
    if mark.start != offset:
        if p.loaded_ids is not None:
            log.warning("AOF file %s starts at offset %d, not %d: its replication history "
                        "is unknown", name, mark.start, offset)
        p.loaded_ids = None
        return
    p.loaded_ids = mark.ids


def _replay(p: Persistence, path: str, last: bool, prescan: bool = False) -> int:
    """Apply one incremental file; returns the bytes applied (after any tail truncation).

    One pass: the effects are applied as the file is read, and the slow, exact check
    (`scan`) runs only when that pass met something (a malformed or unknown command, an
    effect that failed, an incomplete tail or transaction) to tell a torn tail, which is
    cut, from damage, which stops the load. At start-up a damaged file stops the node
    anyway; `prescan` (DEBUG LOADAOF, on a running node) checks first, so that nothing of
    a damaged file is applied."""
    if prescan:
        _check_replay(path, last, scan(path))
    applier = EffectApplier(p.server, republish=False)
    read = 0
    broken = False
    with open(path, "rb") as f:
        for data in read_chunks(f):
            read += len(data)
            try:
                applier.feed(data)
            except EffectStreamError:
                broken = True
                break
    if applier.client.in_multi:  # a transaction whose EXEC is not in the file
        applier.client.discard_multi()
        broken = True
    # `consumed` counts the bytes of complete commands only (the reader may hold the
    # first elements of a cut one without any unread byte left).
    if broken or applier.errors or applier.consumed != read:
        good = _check_replay(path, last, scan(path))
        if broken:  # scan() accepted what the pass could not read: the file changed
            raise LoadError(f"Bad file format reading the append only file {path}")
    else:
        good = read
    if applier.errors:
        log.warning("%d commands in %s returned errors while loading", applier.errors, path)
    p.aof_size += good
    return good


def _check_replay(path: str, last: bool, scanned: tuple[int, int, str | None]) -> int:
    """The bytes of `path` to keep, given what scan() found: a torn tail of the last file
    is cut (with a warning), any other problem stops the load."""
    good, size, problem = scanned
    if problem is not None and (problem != "torn" or not last):
        raise LoadError(f"Bad file format reading the append only file {path}: "
                        f"{problem} at offset {good}. Use 'xshard check-aof --fix "
                        f"{path}' only if the damage is at the end of the file")
    if problem == "torn":
        log.warning("!!! Warning: short read while loading the AOF file %s!!! AOF loaded "
                    "anyway because the tail is torn: truncating %d bytes at offset %d",
                    path, size - good, good)
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return good
