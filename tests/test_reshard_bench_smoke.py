"""The resharding benchmark runs end to end in its quick mode (numbers are not asserted)."""

from __future__ import annotations

import pytest

from tests.support.benchtable import run_script


@pytest.mark.slow
@pytest.mark.etcd
def test_reshard_bench_quick() -> None:
    out = run_script("reshard_bench.py", "--quick")
    assert "entries/s" in out and "MB/s" in out
    assert "longest write pause on a moving slot" in out
    assert "p99" in out
