"""The AOF's files: the manifest that names them, scanning effect files, `xshard check-aof`.

The layout follows Redis 7's multi-part AOF: a directory holding a base snapshot, incremental
files of effects, and a manifest of `file <name> seq <n> type b|i` lines. Our incr lines may
carry what Redis keeps in RDB aux fields, per file: the effect offset the file starts at and the
replication IDs valid from there (`startoffset`, `replid`, `replid2`, `secondoffset`), so that a
restart from the AOF alone knows which history its last bytes belong to (node/persistence.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, BinaryIO

from node import command_table
from node.effects import _command_len

_READ_CHUNK = 1 << 20


def read_chunks(f: BinaryIO) -> Iterator[bytes]:
    """An effect file's bytes in pieces of _READ_CHUNK (loading and scanning read it alike)."""
    return iter(partial(f.read, _READ_CHUNK), b"")


class LoadError(Exception):
    """Start-up cannot go on: a corrupted file (named, with the byte offset)."""


# -- the manifest ------------------------------------------------------------------------------
ReplIds = tuple[str, str, int]  # (replid, replid2, second_offset), as node/replication keeps them
_REPLID = re.compile(r"[0-9a-f]{40}\Z")


@dataclass(frozen=True)
class HistoryMark:
    """An incr file's place in the replication history: the effect offset just before its
    first byte, and the replication IDs valid from there to its end."""

    start: int
    ids: ReplIds

    def render(self) -> str:
        replid, replid2, second = self.ids
        return (f" startoffset {self.start} replid {replid} replid2 {replid2} "
                f"secondoffset {second}")

    @classmethod
    def parse(cls, fields: dict[str, str]) -> HistoryMark | None:
        """From a manifest line's fields; None if it has none; ValueError if malformed."""
        if "startoffset" not in fields:
            return None
        start, second = int(fields["startoffset"]), int(fields["secondoffset"])
        replid, replid2 = fields["replid"], fields["replid2"]
        if start < 0 or second < -1 or not _REPLID.match(replid) or not _REPLID.match(replid2):
            raise ValueError("bad history mark")
        return cls(start, (replid, replid2, second))


class Manifest:
    """`file <name> seq <n> type b|i` lines, as in Redis 7's appendonly.aof.manifest, with a
    HistoryMark on incr lines written by this version."""

    def __init__(self, base: str | None = None, base_seq: int = 0,
                 incrs: list[tuple[str, int]] | None = None,
                 marks: dict[str, HistoryMark] | None = None) -> None:
        self.base = base
        self.base_seq = base_seq
        self.incrs: list[tuple[str, int]] = incrs or []
        self.marks: dict[str, HistoryMark] = marks or {}

    @property
    def last_seq(self) -> int:
        return max([self.base_seq] + [s for _, s in self.incrs])

    def render(self) -> bytes:
        lines = []
        if self.base:
            lines.append(f"file {self.base} seq {self.base_seq} type b")
        for name, seq in self.incrs:
            mark = self.marks.get(name)
            lines.append(f"file {name} seq {seq} type i{mark.render() if mark else ''}")
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def parse(cls, text: str, path: str) -> Manifest:
        m = cls()
        for lineno, line in enumerate(text.splitlines(), 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            fields = dict(zip(words[::2], words[1::2], strict=False))
            name, kind, seq = fields.get("file"), fields.get("type"), fields.get("seq", "")
            try:
                mark = HistoryMark.parse(fields) if kind == "i" else None
            except (KeyError, ValueError):
                mark, name = None, None
            if not name or kind not in ("b", "i") or not seq.isdigit() or "/" in name:
                raise LoadError(f"Invalid AOF manifest file format: {path} line {lineno}")
            if kind == "b":
                m.base, m.base_seq = name, int(seq)
            else:
                m.incrs.append((name, int(seq)))
                if mark is not None:
                    m.marks[name] = mark
        return m

    def keep(self, base: str, base_seq: int, min_seq: int) -> Manifest:
        """After a rewrite: the new base and the incrs from `min_seq` on, marks included."""
        incrs = [(n, s) for n, s in self.incrs if s >= min_seq]
        return Manifest(base, base_seq, incrs,
                        {n: self.marks[n] for n, _ in incrs if n in self.marks})

    def files(self) -> list[str]:
        return ([self.base] if self.base else []) + [n for n, _ in self.incrs]


def manifest_path(config: Any) -> str:
    return os.path.join(config.appenddirname, f"{config.appendfilename}.manifest")


# -- scanning effect files ---------------------------------------------------------------------
def scan(path: str) -> tuple[int, int, str | None]:
    """(bytes of complete commands, file size, problem) for one incremental AOF file.

    problem is None, "torn" (an incomplete final record: safe to truncate) or a description of
    corruption; corruption is reported at the offset of the first bad command."""
    from hiredis import Reader

    reader = Reader()
    good = 0
    size = 0
    multi_at = -1
    with open(path, "rb") as f:
        for data in read_chunks(f):
            size += len(data)
            reader.feed(data)
            while True:
                try:
                    argv = reader.gets()
                except Exception as e:  # hiredis.ProtocolError
                    return good, size, f"protocol error ({e})"
                if argv is False:
                    break
                if type(argv) is not list or not argv or not all(type(a) is bytes for a in argv):
                    return good, size, "not a command"
                name = argv[0].lower()
                if command_table.lookup(name) is None:
                    return good, size, f"unknown command '{argv[0].decode(errors='replace')}'"
                if command_table.check_arity(argv, name) is not None:
                    return good, size, f"wrong number of arguments for '{name.decode()}'"
                if name == b"multi":
                    multi_at = good
                elif name == b"exec":
                    multi_at = -1
                good += _command_len(argv)
    if good < size:
        return (multi_at if multi_at >= 0 else good), size, _tail_problem(path, good, size)
    if multi_at >= 0:  # a transaction whose EXEC never reached the disk
        return multi_at, size, "torn"
    return good, size, None


def _tail_problem(path: str, good: int, size: int) -> str:
    """An unparsed tail is torn only if no complete command starts anywhere after it: a later
    complete command means the damage is in the middle, not the end."""
    from hiredis import Reader

    with open(path, "rb") as f:
        f.seek(good)
        tail = f.read()
    pos = tail.find(b"\r\n*", 1)
    while pos >= 0:
        r = Reader()
        r.feed(tail[pos + 2:])
        try:
            argv = r.gets()
        except Exception:  # noqa: BLE001 - not a command start
            argv = False
        if type(argv) is list and argv and all(type(a) is bytes for a in argv):
            return "not a command"
        pos = tail.find(b"\r\n*", pos + 1)
    return "torn"

def iter_effect_files(path: str) -> Iterator[str]:
    """The incremental files that `check-aof` should look at: a manifest names them."""
    if path.endswith(".manifest"):
        d = os.path.dirname(path)
        with open(path) as f:
            m = Manifest.parse(f.read(), path)
        for name, _ in m.incrs:
            yield os.path.join(d, name)
    else:
        yield path


def check_aof(path: str, fix: bool, out: Any = None) -> int:
    """`xshard check-aof`: report (and with `fix`, truncate) each effect file; exit status.

    Only a torn tail is repaired; damage in the middle would lose the commands after it, so
    it is reported with its offset and left for a human to decide."""
    import sys

    out = out or sys.stdout
    try:
        files = list(iter_effect_files(path))
    except (OSError, LoadError) as e:
        print(f"Cannot read {path}: {e}", file=out)
        return 1
    status = 0
    for i, f in enumerate(files):
        try:
            good, size, problem = scan(f)
        except OSError as e:
            print(f"Cannot read {f}: {e.strerror}", file=out)
            status = 1
            continue
        print(f"AOF analyzed: filename={f}, size={size}, ok_up_to={good}, diff={size - good}",
              file=out)
        if problem is None:
            print(f"AOF {f} is valid", file=out)
            continue
        torn = problem == "torn" and i == len(files) - 1
        what = "has a torn tail" if torn else f"is corrupted: {problem} at offset {good}"
        print(f"AOF {f} {what}", file=out)
        if fix and torn:
            with open(f, "r+b") as fh:
                fh.truncate(good)
                os.fsync(fh.fileno())
            print(f"Successfully truncated AOF {f} to {good} bytes", file=out)
        else:
            status = 1
            if fix:
                print(f"Not fixing {f}: the damage is not at the end; the commands after "
                      f"offset {good} would be lost", file=out)
    return status
