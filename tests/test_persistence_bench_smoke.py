"""Smoke test for benchmarks/persistence_bench.py: the benchmark still runs end to end.

Only the shape of the table is asserted (every row has numbers on both sides and a ratio that
is their quotient); timings never are, this machine is too noisy for that.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks" / "persistence_bench.py"
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"
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
    out = tmp_path / "PERSISTENCE_RESULTS.md"
    res = subprocess.run([sys.executable, str(BENCH), "--quick", "--idle-wait", "0",
                          "--output", str(out), *extra],
                         capture_output=True, text=True, timeout=240, cwd=REPO)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    md = out.read_text()
    assert md.strip() in res.stdout  # the same table is printed
    return md


def _check_table(md: str, other: str) -> None:
    assert "persistence_bench.py --quick" in md  # the exact command line is recorded
    assert re.search(r"- Date: \d{4}-\d\d-\d\d", md)
    assert f"| measurement | metric | redis-server | {other} | ratio |" in md, md
    for name, metric in ROWS:
        row = re.search(rf"^\| {re.escape(name)} \| {metric} \| ({NUM}) \| ({NUM}) \| ({NUM}) \|",
                        md, re.MULTILINE)
        assert row, f"no row {name} / {metric}:\n{md}"
        a, b, ratio = (float(x.replace(",", "")) for x in row.groups())
        assert a > 0 and b > 0 and ratio > 0
        assert abs(ratio - b / a) <= 0.01 + 0.01 * ratio  # ours / redis-server's
    assert f"## Issue targets ({other})" in md
    assert "## Failures" not in md


def test_persistence_bench_quick_against_node(tmp_path: Path) -> None:
    if not (REPO / "node" / "persistence.py").exists():
        pytest.skip("node/persistence.py does not exist yet")
    _check_table(_run(tmp_path), "xshard node")


def test_persistence_bench_quick_redis_baseline(tmp_path: Path) -> None:
    _check_table(_run(tmp_path, "--against", "redis"), "redis-server #2")
