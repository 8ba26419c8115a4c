"""The Spark benchmark runs end to end in its quick mode (numbers are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchtable import check_rows, run_quick

pytest.importorskip("pyspark")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_spark_bench_quick(tmp_path: Path) -> None:
    md = run_quick("spark_bench.py", tmp_path / "out.md", timeout=360)
    check_rows(md, [("read (Spark source, 3 shards vs redis-py XRANGE loop)", "entries/s"),
                    ("write (Spark sink with IDMP vs redis-py pipelined XADD)", "entries/s")],
               "xshard")
