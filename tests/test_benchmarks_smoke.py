"""Smoke test for benchmarks/node_bench.py: the one-command benchmark still runs end to end.

It asserts only that a ratio table with numbers comes out (for the node, and for the
redis-vs-redis baseline); timings are never asserted, this machine is too noisy for that.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks" / "node_bench.py"
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"

pytestmark = pytest.mark.skipif(shutil.which("redis-benchmark") is None
                                or shutil.which("redis-server") is None,
                                reason="needs redis-server and redis-benchmark")


def _run(tmp_path: Path, *extra: str) -> str:
    out = tmp_path / "RESULTS.md"
    res = subprocess.run([sys.executable, str(BENCH), "--quick", "--only", "xadd",
                          "--idle-wait", "0", "--retries", "0", "--output", str(out), *extra],
                         capture_output=True, text=True, timeout=90, cwd=REPO)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    md = out.read_text()
    assert md.strip() in res.stdout  # the same table is printed
    return md


def _check_table(md: str, other: str) -> None:
    assert "## How to read this" in md
    assert "node_bench.py --quick --only xadd" in md  # the exact command line is recorded
    assert re.search(r"- Date: \d{4}-\d\d-\d\d", md)
    header = f"| measurement | metric | redis-server | {other} | ratio |"
    assert header in md, md
    row = re.search(rf"^\| xadd \| ops/s \| ({NUM}) \| ({NUM}) \| ({NUM}) \| higher \|", md,
                    re.MULTILINE)
    assert row, md
    a, b, ratio = (float(x.replace(",", "")) for x in row.groups())
    assert a > 0 and b > 0 and ratio > 0
    assert abs(ratio - b / a) <= 0.01 + 0.01 * ratio  # the ratio is ours / redis-server's
    assert "## Failures" not in md


def test_bench_quick_xadd_against_node(tmp_path: Path) -> None:
    # Until the node has its launcher and stream commands there is nothing to benchmark.
    for part in ("control/cli.py", "node/commands/streams.py"):
        if not (REPO / part).exists():
            pytest.skip(f"{part} does not exist yet")
    _check_table(_run(tmp_path), "xshard node")


def test_bench_quick_xadd_redis_baseline(tmp_path: Path) -> None:
    _check_table(_run(tmp_path, "--against", "redis"), "redis-server #2")


def test_rewriting_a_results_file_keeps_the_notes_written_by_hand(tmp_path: Path) -> None:
    """A script rewrites its figures; the before/after notes below KEEP_MARK stay."""
    from benchmarks.harness import KEEP_MARK, finish_results

    out = tmp_path / "R.md"
    finish_results(["# figures", "| a | 1 |"], out)
    assert "| a | 1 |" in out.read_text() and KEEP_MARK not in out.read_text()
    out.write_text(out.read_text() + f"\n{KEEP_MARK}\n\n## Before and after\nby hand\n")
    finish_results(["# figures", "| a | 2 |"], out)
    text = out.read_text()
    assert "| a | 2 |" in text and "| a | 1 |" not in text
    assert text.index("| a | 2 |") < text.index(KEEP_MARK) < text.index("by hand")
    assert text.count(KEEP_MARK) == 1
