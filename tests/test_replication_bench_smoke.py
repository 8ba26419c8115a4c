"""Smoke test for benchmarks/replication_bench.py: the benchmark still runs end to end.

Only the table's shape is asserted (numbers on both sides, a ratio that is their quotient);
timings never are, this machine is too noisy for that.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.benchtable import check_rows, run_quick

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
    md = run_quick("replication_bench.py", tmp_path / "REPLICATION_RESULTS.md", timeout=280)
    assert "replication_bench.py --quick" in md
    check_rows(md, ROWS, "xshard node")
