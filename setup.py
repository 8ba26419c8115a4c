"""Builds the compiled hot path (node/native.py lists the modules) when it can.

`pip install -e .` (and a wheel build) compiles each hot module with Cython 3 in pure-Python
mode: the `.py` source plus its `.pxd` beside it. Without Cython, without a C compiler, or
when a module fails to compile, the build still succeeds and that module runs interpreted;
`XSHARD_PURE_PYTHON=1` at build time skips compiling altogether. The generated C lives under
build/, the extensions beside their sources (an editable install imports them from there).

All or nothing: when some module fails to compile, node/native.py runs every hot module
interpreted (the build says so), as the compiled ones share C types with the others.

The build says what it does, one line per module, also under pip (which hides a build's
output without -v): on the terminal when there is one, else on stderr.

Built once: an extension beside its source that was built from the sources as they are now
(the digest recorded beside it) is reused, not compiled again. pip builds each install in a
fresh temporary directory (and a fresh build environment), so without this `pip install -e
'.[spark]'` after `pip install -e .` would compile everything a second time.
To rebuild from unchanged sources (a new Cython, other directives), delete the extensions
first: `rm node/*.so node/*/*.so router/*.so`.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import threading
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
# Cython directives for every hot module. annotation_typing is off: the annotations are for
# mypy and readers, and enforcing them at run time would reject tuples for list[bytes] and
# test doubles for class annotations; the .pxd files carry the C types.
DIRECTIVES = {
    "language_level": "3",
    "annotation_typing": False,
    "boundscheck": False,
    "wraparound": True,
    "infer_types": False,
    "binding": True,
}


_NATIVE = runpy.run_path(os.path.join(HERE, "node", "native.py"))


def _modules() -> list[str]:
    return list(_NATIVE["COMPILED"])


def _say(line: str) -> None:
    """One progress line: pip captures the build's output (its build subprocesses have
    PIP_BUILD_TRACKER set), so under pip the terminal gets it directly."""
    print(line, file=sys.stderr, flush=True)
    if sys.stderr.isatty() or not (os.environ.get("PIP_BUILD_TRACKER")
                                    or os.environ.get("PIP_REQ_TRACKER")):
        return
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + "\n")
    except OSError:  # no terminal (CI, a container build): stderr it is
        pass


def _source(name: str) -> Path:
    return Path(HERE, *name.split(".")).with_suffix(".py")


def _built(name: str) -> Path | None:
    """The extension beside the module's source when it was built from the sources as they
    are now (its recorded digest matches), else None."""
    py = _source(name)
    ext = _NATIVE["_extension"](py)
    if ext is None or not Path(str(ext) + ".sources").exists() or _NATIVE["is_stale"](ext, py):
        return None
    return ext


def _extensions() -> list:
    if os.environ.get("XSHARD_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("xshard: Cython not installed; the hot path runs interpreted", file=sys.stderr)
        return []
    from setuptools import Extension

    exts = [Extension(name, [name.replace(".", "/") + ".py"]) for name in _modules()]
    fresh = [e for e in exts if _built(e.name) is not None]
    todo = [e for e in exts if _built(e.name) is None]
    if fresh:
        _say(f"xshard: {len(fresh)} of {len(exts)} hot modules already compiled from these "
             "sources: reused")
    if not todo:
        return fresh
    _say(f"xshard: translating {len(todo)} hot modules to C with Cython")
    return fresh + cythonize(todo, compiler_directives=DIRECTIVES, build_dir="build/cython",
                             nthreads=os.cpu_count() or 1, quiet=True)


class OptionalBuildExt(build_ext):
    """A module that cannot be compiled stays interpreted instead of failing the install."""

    _lock = threading.Lock()

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # one C compiler per core: the install's build time matters
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self._built: list[str] = []
        self._failed: list[str] = []
        self._done = 0
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler at all (distutils errors vary)
            _say(f"xshard: not compiling the hot path ({e}); it runs interpreted")
            return
        if self.inplace:  # the extensions were copied beside their sources: so are the records
            for name in self._built:
                self._record(name)
        total = len(self.extensions)
        if self._failed:
            _say(f"xshard: {', '.join(self._failed)} did not compile: every hot module runs "
                 "interpreted (all or nothing, node/native.py)")
        elif total:
            _say(f"xshard: the hot path is compiled ({total} modules)")

    def _record(self, name: str) -> None:
        """Note beside the extension which sources it is: node/native.py compares them with
        the sources at import time (a rebase that rewrites a file unchanged leaves it fresh)."""
        py = Path(HERE, *name.split(".")).with_suffix(".py")
        _NATIVE["record_sources"](Path(self.get_ext_fullpath(name)), py)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        with self._lock:  # build_ext compiles in parallel threads
            self._done += 1
            n = self._done
        total = len(self.extensions)
        built = _built(ext.name)
        target = Path(self.get_ext_fullpath(ext.name))
        if built is not None:  # reuse it: pip builds in a fresh directory each time
            if built.resolve() != target.resolve():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(built, target)
            _say(f"xshard: [{n}/{total}] {ext.name}: already compiled from these sources")
            self._built.append(ext.name)
            return
        _say(f"xshard: [{n}/{total}] compiling {ext.name}")
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - CompileError, LinkError, a missing cc
            _say(f"xshard: {ext.name} not compiled ({e})")
            self._failed.append(ext.name)
            return
        self._record(ext.name)
        self._built.append(ext.name)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
