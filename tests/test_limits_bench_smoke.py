"""The idle-connection and slow-consumer benchmark runs end to end (numbers not asserted)."""

from __future__ import annotations

import pytest

from tests.support.benchtable import run_script


@pytest.mark.slow
def test_limits_bench_quick() -> None:
    out = run_script("limits_bench.py", "--quick", "--no-write")
    assert "| xshard node | 500 |" in out and "| xshard node | XRANGE | 40 |" in out
