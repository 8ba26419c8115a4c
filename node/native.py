"""Which path runs: the Cython-compiled hot modules, or the same `.py` source interpreted.

The hot modules (`COMPILED`) are plain Python in Cython's pure-Python mode: a `.pxd` beside a
`.py` types its classes and locals when compiled and is ignored when interpreted. setup.py
compiles them when Cython and a C compiler are present; the extension then sits next to the
source and Python's import system prefers it.

This module decides, per hot module, which of the two is imported:
- `XSHARD_PURE_PYTHON=1` forces the source (the differential tests run both paths);
- all or nothing: when the build compiled some hot modules but not others (one failed to
  compile), every one runs from source, with a warning, as the compiled ones share C-level
  types with the others;
- an extension built from other sources than the `.py` and `.pxd` beside it is stale (the
  source was edited, or a checkout changed it, after the build): the source runs and a
  warning says to rebuild, because a stale extension would silently run old code. setup.py
  records a digest of the sources beside each extension it builds (`<extension>.sources`),
  so a rebase or checkout that rewrites a file with the same content does not make it stale;
  without that record, an extension older than its sources is stale.

`install()` runs from `node/__init__.py`, before any hot module is imported, and is
idempotent. `compiled()` is what INFO reports as `xshard_compiled`.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import re
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "PURE_ENV", "compiled", "install", "is_stale", "pure_forced",
           "record_sources", "source_digest", "why_interpreted"]

# The modules setup.py compiles (dotted names; the `.py` and optional `.pxd` are beside). The
# router's are here too: it imports `node` first, so this finder covers them.
COMPILED = [
    "node.blocking",
    "node.client",
    "node.cmdstats",
    "node.commands.entryreplies",
    "node.commands.groups",
    "node.commands.reads",
    "node.commands.streams",
    "node.effects",
    "node.groups",
    "node.keyspace",
    "node.listpack",
    "node.preflight",
    "node.protocol",
    "node.resp",
    "node.server",
    "node.slots",
    "node.stream",
    "node.streamnodes",
    # The router's relay: parse (node.protocol), route, forward, relay the reply.
    "router.client",
    "router.forward",
    "router.metrics",
    "router.outbox",
    "router.proxy",
    "router.pstreamids",
    "router.pstreamwrite",
    "router.routes",
    "router.upstream",
]

PURE_ENV = "XSHARD_PURE_PYTHON"
_ROOT = Path(__file__).resolve().parent.parent
_source: bool | None = None  # decided at the first hot import
log = logging.getLogger("xshard.native")


def pure_forced() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _extension(py: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        so = py.with_suffix(suffix)
        if so.exists():
            return so
    return None


_CIMPORT = re.compile(rb"^\s*(?:from\s+(?:cython\.cimports\.)?([\w.]+)\s+c?import|cimport\s+([\w.]+))",
                      re.M)


def _package_root(py: Path) -> Path:
    """The folder that holds the module's top-level package (the first parent without an
    __init__.py)."""
    root = py.parent
    while (root / "__init__.py").exists():
        root = root.parent
    return root


def _declarations(py: Path) -> list[Path]:
    """The `.pxd` files the module's C layout depends on: its own and, transitively, those of
    every module it or they cimport (`from node.stream cimport Stream`, pure-Python mode's
    `from cython.cimports.node.stream import ...`)."""
    root = _package_root(py)
    seen: set[Path] = set()
    todo = [py, py.with_suffix(".pxd")]
    while todo:
        src = todo.pop()
        if not src.exists():
            continue
        for m in _CIMPORT.finditer(src.read_bytes()):
            name = (m.group(1) or m.group(2)).decode()
            pxd = root.joinpath(*name.split(".")).with_suffix(".pxd")
            if pxd.exists() and pxd not in seen:
                seen.add(pxd)
                todo.append(pxd)
    seen.discard(py.with_suffix(".pxd"))
    return sorted(seen)


def source_digest(py: Path) -> str:
    """A digest of what an extension is compiled from: the `.py`, the `.pxd` beside it, and
    the `.pxd` of every module they cimport: an extension built against another module's old
    declarations (a Stream with fewer fields) reads that module's objects with the wrong
    layout, so it must be rebuilt when any of them changes, not only its own."""
    h = hashlib.sha256(py.read_bytes())
    own = py.with_suffix(".pxd")
    if own.exists():
        h.update(b"\0pxd\0" + own.read_bytes())
    root = _package_root(py)
    for pxd in _declarations(py):
        h.update(b"\0" + str(pxd.relative_to(root)).encode() + b"\0" + pxd.read_bytes())
    return h.hexdigest()


def _record(ext: Path) -> Path:
    return ext.with_name(ext.name + ".sources")


def record_sources(ext: Path, py: Path) -> None:
    """Note beside a freshly built extension which sources it was built from (setup.py)."""
    _record(ext).write_text(source_digest(py) + "\n")


def is_stale(ext: Path, py: Path) -> bool:
    """True when the extension was not built from the `.py` and `.pxd` as they are now: by the
    digest setup.py recorded, else (no record) by modification times."""
    record = _record(ext)
    if record.exists() and record.stat().st_mtime >= ext.stat().st_mtime:
        return record.read_text().strip() != source_digest(py)
    built = ext.stat().st_mtime
    pxd = py.with_suffix(".pxd")
    return (py.stat().st_mtime > built or (pxd.exists() and pxd.stat().st_mtime > built)
            or any(d.stat().st_mtime > built for d in _declarations(py)))


def _paths(name: str) -> tuple[Path, Path | None]:
    py = _ROOT.joinpath(*name.split(".")).with_suffix(".py")
    return py, _extension(py)


def _use_source() -> bool:
    """All or nothing: the compiled modules share C-level types (a .pxd cimports another's
    class), so one stale extension, or one hot module the build did not compile while others
    it did, sends every hot module to its source."""
    global _source
    if _source is None:
        paths = [(name, *_paths(name)) for name in COMPILED]
        reason = "" if pure_forced() else why_interpreted(paths)
        if reason:
            print(f"xshard: {reason}; the hot path runs interpreted (rebuild: pip install -e .)",
                  file=sys.stderr)
        _source = pure_forced() or bool(reason)
    return _source


def why_interpreted(paths: list[tuple[str, Path, Path | None]]) -> str:
    """Why the extensions that are there must not run ("" when they may): some are stale, or
    the build compiled only some of the hot modules. (name, source, extension or None) each."""
    stale = [ext.name for _n, py, ext in paths if ext is not None and is_stale(ext, py)]
    if stale:
        return f"{', '.join(stale)} older than the source"
    missing = [name for name, _py, ext in paths if ext is None]
    if missing and len(missing) < len(paths):
        return f"{', '.join(missing)} not compiled (a partial build)"
    return ""


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Hands out the `.py` of a hot module when the extensions must not run."""

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _HOT:
            return None
        py, ext = _paths(fullname)
        if ext is None or not _use_source():
            return None  # the ordinary finder: the extension if built, else the source
        return importlib.util.spec_from_file_location(fullname, py)


_HOT = frozenset(COMPILED)
_finder = _SourceFinder()


def install() -> None:
    """Put the finder first on sys.meta_path (once)."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def compiled() -> bool:
    """True when the hot modules imported so far (all of them once the node runs) are the
    compiled extensions."""
    mods = [sys.modules.get(name) for name in COMPILED]
    loaded = [m for m in mods if m is not None]
    return bool(loaded) and all(
        isinstance(getattr(m, "__loader__", None), importlib.machinery.ExtensionFileLoader)
        for m in loaded)
