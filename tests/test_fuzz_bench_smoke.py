"""The fuzzing benchmark runs end to end on a few inputs (its counts are not asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_fuzz_bench_small() -> None:
    r = subprocess.run([sys.executable, "benchmarks/fuzz_bench.py", "--inputs", "300",
                        "--socket-inputs", "30", "--no-write"], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "### In process" in r.stdout and "a router in front of two shards" in r.stdout
    assert "problems: 0" in r.stdout, r.stdout
