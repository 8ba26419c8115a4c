"""The idle-connection and slow-consumer benchmark runs end to end (numbers not asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_limits_bench_quick() -> None:
    r = subprocess.run([sys.executable, "benchmarks/limits_bench.py", "--quick", "--no-write"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "| xshard node | 500 |" in r.stdout and "| xshard node | XRANGE | 40 |" in r.stdout
