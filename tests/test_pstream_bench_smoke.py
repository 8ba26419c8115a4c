"""The partitioned-stream throughput benchmark runs end to end in its quick mode (figures are
not asserted): a cluster with etcd, a 12-partition stream beside a plain one, both phases,
and every entry written delivered once."""

from __future__ import annotations

import re

import pytest

from tests.support.benchtable import run_script


@pytest.mark.slow
@pytest.mark.etcd
def test_pstream_bench_quick() -> None:
    out = run_script("pstream_bench.py", "--quick")
    for phase in ("XADD", "XREADGROUP \\+ XACK"):
        row = re.search(rf"^\| {phase} \| entries/s \| ([\d,]+) \| ([\d,]+) \|", out, re.M)
        assert row and all(int(x.replace(",", "")) > 0 for x in row.groups()), out
    assert "node commands per entry" in out and "/proc/loadavg" in out
    assert "Every entry written was delivered once" in out
