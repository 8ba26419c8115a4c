"""The router benchmark runs end to end in its quick mode (numbers are not asserted)."""

from __future__ import annotations

import pytest

from tests.support.benchtable import run_script


@pytest.mark.slow
def test_router_bench_quick() -> None:
    out = run_script("router_bench.py", "--quick")
    assert "router / direct throughput" in out
    assert "delivered" in out
