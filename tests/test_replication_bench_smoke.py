"""Smoke test for benchmarks/replication_bench.py: the benchmark still runs end to end.

Only the table's shape is asserted (numbers on both sides, a ratio that is their quotient);
timings never are, this machine is too noisy for that.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks" / "replication_bench.py"
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"
ROWS = [
    ("xadd, no replicas", "ops/s"),
    ("xadd, 2 replicas", "ops/s"),
    ("xadd 2 replicas / none", r"ratio \(target >= 0\.85\)"),
    ("replica lag at 80% load", "p50 ms"),
    ("replica lag at 80% load", r"p99 ms \(target < 100\)"),
    ("replica lag at 80% load", "offered XADD/s"),
]

pytestmark = [pytest.mark.skipif(shutil.which("redis-benchmark") is None
                                 or shutil.which("redis-server") is None,
                                 reason="needs redis-server and redis-benchmark"),
              pytest.mark.timeout(300)]


def test_replication_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "REPLICATION_RESULTS.md"
    res = subprocess.run([sys.executable, str(BENCH), "--quick", "--output", str(out)],
                         capture_output=True, text=True, timeout=280, cwd=REPO)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    md = out.read_text()
    assert md.strip() in res.stdout
    assert "replication_bench.py --quick" in md
    assert "| measurement | metric | redis-server | xshard node | ratio |" in md
    for name, metric in ROWS:
        row = re.search(rf"^\| {re.escape(name)} \| {metric} \| ({NUM}) \| ({NUM}) \| ({NUM}) \|",
                        md, re.MULTILINE)
        assert row, f"no row {name} / {metric}:\n{md}"
        a, b, ratio = (float(x.replace(",", "")) for x in row.groups())
        assert a > 0 and b > 0 and ratio > 0
        assert abs(ratio - b / a) <= 0.01 + 0.01 * ratio
