"""The resharding benchmark runs end to end in its quick mode (numbers are not asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.etcd
def test_reshard_bench_quick() -> None:
    r = subprocess.run([sys.executable, "benchmarks/reshard_bench.py", "--quick"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "entries/s" in r.stdout and "MB/s" in r.stdout
    assert "longest write pause on a moving slot" in r.stdout
    assert "p99" in r.stdout
