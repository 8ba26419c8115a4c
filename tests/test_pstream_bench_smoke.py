"""The partitioned-stream throughput benchmark runs end to end in its quick mode (figures are
not asserted): a cluster with etcd, a 12-partition stream beside a plain one, both phases,
and every entry written delivered once."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.etcd
def test_pstream_bench_quick() -> None:
    r = subprocess.run([sys.executable, "benchmarks/pstream_bench.py", "--quick"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for phase in ("XADD", "XREADGROUP \\+ XACK"):
        row = re.search(rf"^\| {phase} \| entries/s \| ([\d,]+) \| ([\d,]+) \|", r.stdout, re.M)
        assert row and all(int(x.replace(",", "")) > 0 for x in row.groups()), r.stdout
    assert "node commands per entry" in r.stdout and "/proc/loadavg" in r.stdout
    assert "Every entry written was delivered once" in r.stdout
