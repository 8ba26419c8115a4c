"""The shard-scaling benchmark runs end to end in its quick mode (N = 1 only; figures are not
asserted): an xshard cluster and a Redis Cluster on the same pinned CPU, and its table."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.etcd
def test_scale_bench_quick() -> None:
    r = subprocess.run([sys.executable, "benchmarks/scale_bench.py", "--quick"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for workload in ("keys", "pstream"):
        row = re.search(rf"^\| 1 \| [^|]+ \| {workload} \| ([\d,]+) \| 1\.00 \|[^|]*\| ([\d,]+) \|",
                        r.stdout, re.M)
        assert row and all(int(x.replace(",", "")) > 0 for x in row.groups()), r.stdout
    assert "/proc/loadavg" in r.stdout
