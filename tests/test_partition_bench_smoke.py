"""The partition benchmark runs end to end: one round of the flapping-link case (a replication
link with 5% loss, a slow proxy and 1 s outages), tabulated. Times are not asserted; that
nothing was lost, wrongly accepted or promoted, and that the streams ended equal, is. This is
the flapping case's test (tests/control/test_partitions.py has the others)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import netns
from tests.support.benchtable import run_script

pytestmark = [pytest.mark.slow, pytest.mark.etcd]


def test_partition_bench_one_round(tmp_path: Path) -> None:
    why = netns.available()
    if why is not None:
        pytest.skip(why)
    out = tmp_path / "PARTITION_RESULTS.md"
    run_script("partition_bench.py", "--rounds", "1", "--cases", "flapping", "--output",
               str(out))
    md = out.read_text()
    row = re.search(r"^\| replication link[^|]*\| 1/1 \| (\d+) \| 0 \| 0 \| 0 \| 1/1 \|", md,
                    re.MULTILINE)
    assert row and int(row[1]) > 0, md
    assert "nothing promoted 1/1" in md, md  # the flapping link alone fails nothing over
    assert "load average" in md
