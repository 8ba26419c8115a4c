"""Smoke test for benchmarks/tls_bench.py: one tiny round still produces its tables (timings
are never asserted)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("redis-benchmark") is None
                                or shutil.which("redis-server") is None,
                                reason="needs redis-server and redis-benchmark")


def test_tls_bench_runs_one_small_round(tmp_path: Path) -> None:
    out = tmp_path / "TLS.md"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tls_bench.py"), "--rounds",
                        "1", "--requests", "2000", "--output", str(out)], capture_output=True,
                       text=True, timeout=180, cwd=REPO)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    text = out.read_text()
    for row in ("| redis-server | 1 |", "| redis-server | 16 |", "| xshard node | 1 |",
                "| xshard node | 16 |", "| tls | 16 |"):
        assert row in text, text
    assert "negotiated: redis-server TLSv1" in text and "xshard node TLSv1" in text, text
