"""The fuzzing benchmark runs end to end on a few inputs (its counts are not asserted)."""

from __future__ import annotations

import pytest

from tests.support.benchtable import run_script


@pytest.mark.slow
def test_fuzz_bench_small() -> None:
    out = run_script("fuzz_bench.py", "--inputs", "300", "--socket-inputs", "30", "--no-write")
    assert "### In process" in out and "a router in front of two shards" in out
    assert "problems: 0" in out, out
