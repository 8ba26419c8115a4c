"""The partition benchmark runs end to end: one round of the flapping-link case, tabulated
(times not asserted; the counts of lost and wrongly accepted writes are)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import netns

pytestmark = [pytest.mark.slow, pytest.mark.etcd]


def test_partition_bench_one_round(tmp_path: Path) -> None:
    why = netns.available()
    if why is not None:
        pytest.skip(why)
    out = tmp_path / "PARTITION_RESULTS.md"
    r = subprocess.run([sys.executable, "benchmarks/partition_bench.py", "--rounds", "1",
                        "--cases", "flapping", "--output", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    md = out.read_text()
    row = re.search(r"^\| replication link[^|]*\| 1/1 \| (\d+) \| 0 \| 0 \| 0 \| 1/1 \|", md,
                    re.MULTILINE)
    assert row and int(row[1]) > 0, md
    assert "load average" in md
