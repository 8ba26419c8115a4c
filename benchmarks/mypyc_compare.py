"""Cython or mypyc: the same hot functions interpreted, built by Cython and built by mypyc.

    python benchmarks/mypyc_compare.py [--n 5000] [--cpu 1] [--no-callgrind]

Three scratch copies of `node/` (in a temporary directory, never in the repo): one left as
source, one with node/resp.py, node/listpack.py and node/streamid.py compiled by Cython with
setup.py's directives and their `.pxd` files (streamid has none: it is compiled untyped), one
with the same three modules compiled by mypyc in one group. mypyc refuses classes that
subclass `bytes` or `list` (resp.py's Status, Map, ...) unless they are marked non-native, so
the mypyc copy gets `@mypyc_attr(native_class=False)` on them (and needs mypy_extensions at
run time); the other sources compile as they are.

Each operation is run N times by `deque.extend(map(op, range(N)))`. Instructions are counted
by callgrind inside `deque_extend` only (one dump per operation; a do-nothing operation is
subtracted, so the figure is the call from interpreted code plus the work). Wall time is the
best of 5 `timeit` repeats with the process pinned to one CPU (`--cpu`); on a shared machine
read the instructions first and note `uptime`.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULES = ["node/resp.py", "node/listpack.py", "node/streamid.py"]
VARIANTS = ["interpreted", "cython", "mypyc"]

# The operations (name, statement over the imported modules r, lp, sid and the data below).
FIELDS = [tok for i in range(1, 6) for tok in (b"f%d" % i, b"value%05d" % i)]
OPS = [
    ("encode_command (XADD, 13 args)", "r.encode_command(XADD)"),
    ("encode (XRANGE reply, 10 entries)", "r.encode(ENTRIES)"),
    ("reply_scan (that reply)", "r.reply_scan(REPLY, 0)"),
    ("_sum_esz (10 fields and values)", "lp._sum_esz(VALUES)"),
    ("parse_id (b'1700000000000-5')", "sid.parse_id(ID)"),
    ("format_id", "sid.format_id(SID)"),
]
WORKER = """
import sys, collections, timeit
sys.path.insert(0, {root!r})
import node.resp as r, node.listpack as lp, node.streamid as sid
FIELDS = {fields!r}
XADD = [b"XADD", b"s", b"1700000000000-0", *FIELDS]
ENTRIES = [[b"1700000000000-%d" % i, list(FIELDS)] for i in range(10)]
REPLY = r.encode(ENTRIES)
VALUES = [b"f1", b"value00001", b"12345", b"-17", b"0", b"f3", b"9223372036854775808", b"x" * 70,
          b"f5", b"value00005"]
ID = b"1700000000000-5"
SID = sid.parse_id(ID)
assert all(m.__file__.endswith({ext!r}) for m in (r, lp, sid)), [m.__file__ for m in (r, lp, sid)]
ops = {ops!r}
fns = [lambda i: None] + [eval("lambda i: " + stmt) for _, stmt in ops]
if {callgrind!r}:
    d = collections.deque(maxlen=0)
    for f in fns:
        d.extend(map(f, range({n})))
else:
    for f in fns[1:]:
        t = min(timeit.repeat(lambda: f(0), number={n}, repeat=5))
        print("%.1f" % (t / {n} * 1e9))
"""


def _directives() -> dict:
    """setup.py's Cython directives, read without running setup()."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DIRECTIVES":
            return ast.literal_eval(node.value)
    raise SystemExit("DIRECTIVES not found in setup.py")


def _copy(dest: Path, keep_pxd: bool) -> None:
    ignore = ["*.so", "__pycache__", *([] if keep_pxd else ["*.pxd"])]
    shutil.copytree(REPO / "node", dest / "node", ignore=shutil.ignore_patterns(*ignore))


def _mark_non_native(path: Path) -> None:
    """mypyc compiles classes as native classes, which cannot subclass bytes or list."""
    src = re.sub(r"^(class \w+\((?:bytes|list)\):)", r"@mypyc_attr(native_class=False)\n\1",
                 path.read_text(), flags=re.M)
    src = src.replace("from typing import Any\n",
                      "from typing import Any\n\nfrom mypy_extensions import mypyc_attr\n", 1)
    path.write_text(src)


def build(tmp: Path) -> dict[str, float]:
    """Builds the three copies; returns each compiler's build time in seconds."""
    times = {}
    _copy(tmp / "interpreted", keep_pxd=False)
    _copy(tmp / "cython", keep_pxd=True)
    setup = ("from setuptools import setup, Extension\nfrom Cython.Build import cythonize\n"
             f"setup(ext_modules=cythonize([Extension(m[:-3].replace('/', '.'), [m]) for m in "
             f"{MODULES!r}], compiler_directives={_directives()!r}, build_dir='build', "
             "quiet=True), script_args=['build_ext', '--inplace'])\n")
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", setup], cwd=tmp / "cython", check=True,
                   stdout=subprocess.DEVNULL)
    times["cython"] = time.monotonic() - t
    _copy(tmp / "mypyc", keep_pxd=False)
    _mark_non_native(tmp / "mypyc" / "node" / "resp.py")
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "mypyc", *MODULES], cwd=tmp / "mypyc", check=True,
                   stdout=subprocess.DEVNULL)
    times["mypyc"] = time.monotonic() - t
    return times


def _worker(root: Path, n: int, callgrind: bool) -> str:
    ext = ".py" if root.name == "interpreted" else ".so"
    return WORKER.format(root=str(root), fields=FIELDS, ext=ext, ops=OPS, n=n,
                         callgrind=callgrind)


def instructions(root: Path, n: int) -> list[float]:
    """Instructions per operation, the do-nothing operation subtracted."""
    out = root / "cg.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    "--collect-atstart=no", "--toggle-collect=deque_extend",
                    "--dump-after=deque_extend", sys.executable, "-c",
                    _worker(root, n, True)], check=True, capture_output=True)
    dumps = sorted(root.glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
    totals = [int(re.search(rb"^totals: (\d+)", p.read_bytes(), re.M).group(1))
              for p in dumps[-(len(OPS) + 1):]]
    return [(t - totals[0]) / n for t in totals[1:]]


def wall_ns(root: Path, n: int, cpu: int) -> list[float]:
    cmd = ["taskset", "-c", str(cpu), sys.executable, "-c", _worker(root, n, False)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5000, help="operations per measurement")
    ap.add_argument("--cpu", type=int, default=1, help="the CPU the wall-time runs are pinned to")
    ap.add_argument("--no-callgrind", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mypyc-compare-") as d:
        tmp = Path(d)
        times = build(tmp)
        print(f"build time: Cython {times['cython']:.1f} s, mypyc {times['mypyc']:.1f} s "
              f"({len(MODULES)} modules); load: {os.getloadavg()[0]:.2f}")
        rows = {v: {} for v in VARIANTS}
        for v in VARIANTS:
            if not args.no_callgrind:
                rows[v]["instr"] = instructions(tmp / v, args.n)
            rows[v]["ns"] = wall_ns(tmp / v, args.n, args.cpu)
        print(f"load after: {os.getloadavg()[0]:.2f}")
        metrics = ["ns"] if args.no_callgrind else ["instr", "ns"]
        head = " | ".join(f"{v} {m}" for m in metrics for v in VARIANTS)
        print(f"| operation | {head} |")
        print("|---" + "|---:" * len(metrics) * len(VARIANTS) + "|")
        for i, (name, _) in enumerate(OPS):
            cells = " | ".join(f"{rows[v][m][i]:,.0f}" for m in metrics for v in VARIANTS)
            print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
