"""Builds the compiled hot path (node/native.py lists the modules) when it can.

`pip install -e .` (and a wheel build) compiles each hot module with Cython 3 in pure-Python
mode: the `.py` source plus its `.pxd` beside it. Without Cython, without a C compiler, or
when a module fails to compile, the build still succeeds and that module runs interpreted;
`XSHARD_PURE_PYTHON=1` at build time skips compiling altogether. The generated C lives under
build/, the extensions beside their sources (an editable install imports them from there).
"""

from __future__ import annotations

import os
import runpy
import sys
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
    return cythonize(exts, compiler_directives=DIRECTIVES, build_dir="build/cython",
                     nthreads=os.cpu_count() or 1, quiet=True)


class OptionalBuildExt(build_ext):
    """A module that cannot be compiled stays interpreted instead of failing the install."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # one C compiler per core: the install's build time matters
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self._built: list[str] = []
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler at all (distutils errors vary)
            print(f"xshard: not compiling the hot path ({e}); it runs interpreted",
                  file=sys.stderr)
            return
        if self.inplace:  # the extensions were copied beside their sources: so are the records
            for name in self._built:
                self._record(name)

    def _record(self, name: str) -> None:
        """Note beside the extension which sources it is: node/native.py compares them with
        the sources at import time (a rebase that rewrites a file unchanged leaves it fresh)."""
        py = Path(HERE, *name.split(".")).with_suffix(".py")
        _NATIVE["record_sources"](Path(self.get_ext_fullpath(name)), py)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - CompileError, LinkError, a missing cc
            print(f"xshard: {ext.name} not compiled ({e}); it runs interpreted",
                  file=sys.stderr)
            return
        self._record(ext.name)
        self._built.append(ext.name)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
