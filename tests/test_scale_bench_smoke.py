"""The shard-scaling benchmark runs end to end in its quick mode (N = 1 only; figures are not
asserted): an xshard cluster and a Redis Cluster on the same pinned CPU, and its table."""

from __future__ import annotations

import re

import pytest

from tests.support.benchtable import run_script


@pytest.mark.slow
@pytest.mark.etcd
def test_scale_bench_quick() -> None:
    out = run_script("scale_bench.py", "--quick")
    for workload in ("keys", "pstream"):
        row = re.search(rf"^\| 1 \| [^|]+ \| {workload} \| ([\d,]+) \| 1\.00 \|[^|]*\| ([\d,]+) \|",
                        out, re.M)
        assert row and all(int(x.replace(",", "")) > 0 for x in row.groups()), out
    assert "/proc/loadavg" in out
