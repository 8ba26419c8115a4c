"""Throughput of one commit against an older one, side by side in one run.

Each round runs `benchmarks/node_bench.py` and `benchmarks/router_bench.py` (quick settings)
from a checkout of each commit, alternately, so both see the same
machine load. Each figure is taken as a ratio to redis-server measured in the same
benchmark run (node_bench's ratio, router_bench's ops/s divided by its redis-server row),
which cancels most of the load; the result is the median over rounds of new / old.

    python benchmarks/compare_commits.py --old 17a5a39 [--new main] [--rounds 3] [--output FILE]

Both sides run from `git archive` extracts, so editing the working tree meanwhile changes
nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def checkout(rev: str, into: Path) -> Path:
    """The tree of `rev`, extracted with git archive (no worktree is registered)."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                          capture_output=True).stdout
    tar = into / "tree.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="data")
    return into / "tree"


def node_ratios(tree: Path, tmp: Path) -> dict[str, float]:
    out = tmp / "nb.md"
    subprocess.run([sys.executable, "benchmarks/node_bench.py", "--quick", "--only",
                    "xadd,xadd-p16,xrange", "--idle-wait", "0", "--retries", "0", "--output",
                    str(out)], cwd=tree, check=True, capture_output=True, timeout=600)
    rows = re.findall(r"^\| (\S+) \| ops/s \| [\d,.]+ \| [\d,.]+ \| ([\d.]+) \|",
                      out.read_text(), re.M)
    return {f"node {name} (x redis)": float(r) for name, r in rows}


def router_ratios(tree: Path) -> dict[str, float]:
    res = subprocess.run([sys.executable, "benchmarks/router_bench.py", "--quick"], cwd=tree,
                         check=True, capture_output=True, text=True, timeout=600).stdout
    ops = {k: float(v) for k, v in re.findall(
        r"^\s+(redis-server direct|node direct|node via router)\s+(\d+)", res, re.M)}
    red = ops["redis-server direct"]
    return {"router XADD: node direct (x redis)": ops["node direct"] / red,
            "router XADD: via router (x redis)": ops["node via router"] / red}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the commit to compare with")
    ap.add_argument("--new", default="HEAD", help="the commit measured against --old "
                    "(default: HEAD)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--output", default="")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="compare-"))
    (tmp / "old").mkdir()
    (tmp / "new").mkdir()
    old = checkout(a.old, tmp / "old")
    new = checkout(a.new, tmp / "new")
    new_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", a.new],
                             capture_output=True, text=True).stdout.strip()
    got: dict[str, dict[str, list[float]]] = {"new": {}, "old": {}}
    loads = [os.getloadavg()[0]]
    for rnd in range(a.rounds):
        for side, tree in (("new", new), ("old", old)) if rnd % 2 == 0 else (
                ("old", old), ("new", new)):
            for k, v in {**node_ratios(tree, tmp), **router_ratios(tree)}.items():
                got[side].setdefault(k, []).append(v)
            loads.append(os.getloadavg()[0])
            print(f"round {rnd} {side} done (load {loads[-1]:.1f})", flush=True)
    lines = [
        f"Compared: {a.new} ({new_rev}) against {a.old}, {a.rounds} rounds, alternating; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average (1 min) "
        f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs.",
        "",
        "| figure | old (median) | new (median) | new / old |",
        "|---|---:|---:|---:|",
    ]
    for k in got["new"]:
        o, n = statistics.median(got["old"][k]), statistics.median(got["new"][k])
        lines.append(f"| {k} | {o:.3f} | {n:.3f} | {n / o:.2f} |")
    print("\n".join(lines))
    if a.output:
        Path(a.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
