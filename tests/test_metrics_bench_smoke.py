"""Smoke test for benchmarks/metrics_bench.py: it runs end to end and writes its tables.
Timings are never asserted (the machine is shared and noisy)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("redis-benchmark") is None
                                 or shutil.which("redis-server") is None,
                                 reason="needs redis-server and redis-benchmark")]


def test_metrics_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "METRICS.md"
    res = subprocess.run([sys.executable, "benchmarks/metrics_bench.py", "--quick", "--output",
                          str(out)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    md = out.read_text()
    assert "| XADD, 50 clients |" in md and "| XADD, 50 clients, pipeline 16 |" in md
    assert "| 1000 streams exported |" in md and "Load average" in md
