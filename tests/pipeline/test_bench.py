"""The Spark benchmark runs end to end in its quick mode, in the tests' shared SparkSession
(numbers are not asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.benchtable import REPO, check_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(400)]


def test_spark_bench_quick(spark, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    sys.path.insert(0, str(REPO))
    from benchmarks import spark_bench

    out = tmp_path / "out.md"
    assert spark_bench.main(["--quick", "--output", str(out)], spark=spark) == 0
    md = out.read_text()
    assert md.strip() in capsys.readouterr().out  # the same table is printed
    assert f"Spark {spark.sparkContext.master};" in md
    check_rows(md, [("read (Spark source, 3 shards vs redis-py XRANGE loop)", "entries/s"),
                    ("write (Spark sink with IDMP vs redis-py pipelined XADD)", "entries/s")],
               "xshard")
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session goes on
