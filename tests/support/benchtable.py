"""Checks shared by the benchmark smoke tests: run a benchmark's --quick mode, and check the
shape of its results table (numbers on both sides and a ratio that is their quotient).
Timings are never asserted; this machine is too noisy for that."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"


def run_script(script: str, *args: str, timeout: float = 300) -> str:
    """Run `benchmarks/<script> args...` from the repository; its stdout, once it exited 0
    (the output's tails are the assertion's message otherwise)."""
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def run_quick(script: str, out: Path, *extra: str, timeout: float = 240) -> str:
    """Run `benchmarks/<script> --quick --output out`; returns the table, which must also
    have been printed."""
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--quick",
                          "--output", str(out), *extra],
                         capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    md = out.read_text()
    assert md.strip() in res.stdout  # the same table is printed
    return md


def check_rows(md: str, rows: list[tuple[str, str]], other: str) -> None:
    """Every (measurement, metric) row has positive numbers for redis-server and `other`, and
    a ratio equal to other / redis-server."""
    assert f"| measurement | metric | redis-server | {other} | ratio |" in md, md
    for name, metric in rows:
        row = re.search(rf"^\| {re.escape(name)} \| {metric} \| ({NUM}) \| ({NUM}) \| ({NUM}) \|",
                        md, re.MULTILINE)
        assert row, f"no row {name} / {metric}:\n{md}"
        a, b, ratio = (float(x.replace(",", "")) for x in row.groups())
        assert a > 0 and b > 0 and ratio > 0
        assert abs(ratio - b / a) <= 0.01 + 0.01 * ratio  # ours / redis-server's
