"""The router benchmark runs end to end in its quick mode (numbers are not asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_router_bench_quick() -> None:
    r = subprocess.run([sys.executable, "benchmarks/router_bench.py", "--quick"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "router / direct throughput" in r.stdout
    assert "delivered" in r.stdout
