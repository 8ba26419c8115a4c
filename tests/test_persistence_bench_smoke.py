"""Smoke test for benchmarks/persistence_bench.py: the benchmark still runs end to end.

Only the shape of the table is asserted (every row has numbers on both sides and a ratio that
is their quotient); timings never are, this machine is too noisy for that.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.benchtable import REPO, check_rows, run_quick

ROWS = [
    ("xadd, appendonly no", "ops/s"),
    ("xadd, appendfsync everysec", "ops/s"),
    ("xadd everysec / own no-persistence", r"ratio \(target >= 0\.9\)"),
    ("xadd, appendfsync always", "ops/s"),
    ("startup from snapshot, 100,000 entries", "seconds"),
    ("startup from snapshot, 100,000 entries", "entries/s"),
    ("startup from aof, 100,000 entries", "seconds"),
    ("startup from aof, 100,000 entries", "entries/s"),
    ("rewrite+bgsave under load, 100,000 entries", r"PING max during rewrite \(ms\)"),
    ("rewrite+bgsave under load, 100,000 entries", "rewrite seconds"),
    ("rewrite+bgsave under load, 100,000 entries", r"PING max during bgsave \(ms\)"),
    ("rewrite+bgsave under load, 100,000 entries", "bgsave seconds"),
]

pytestmark = pytest.mark.skipif(shutil.which("redis-benchmark") is None
                                or shutil.which("redis-server") is None,
                                reason="needs redis-server and redis-benchmark")


def _run(tmp_path: Path, *extra: str) -> str:
    return run_quick("persistence_bench.py", tmp_path / "PERSISTENCE_RESULTS.md",
                     "--idle-wait", "0", *extra)


def _check_table(md: str, other: str) -> None:
    assert "persistence_bench.py --quick" in md  # the exact command line is recorded
    assert re.search(r"- Date: \d{4}-\d\d-\d\d", md)
    check_rows(md, ROWS, other)
    assert f"## Issue targets ({other})" in md
    assert "## Failures" not in md


def test_persistence_bench_quick_against_node(tmp_path: Path) -> None:
    if not (REPO / "node" / "persistence.py").exists():
        pytest.skip("node/persistence.py does not exist yet")
    _check_table(_run(tmp_path), "xshard node")


def test_persistence_bench_quick_redis_baseline(tmp_path: Path) -> None:
    _check_table(_run(tmp_path, "--against", "redis"), "redis-server #2")
