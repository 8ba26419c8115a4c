"""The delivery-latency benchmark runs end to end in its quick mode (numbers not asserted),
and every entry a producer process sent is delivered to a consumer process."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_e2e_bench_quick() -> None:
    r = subprocess.run([sys.executable, "benchmarks/e2e_bench.py", "--quick", "--targets",
                        "redis,node"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    sent = re.search(r"^\| sent /s \| (\d+) \| (\d+) \|", r.stdout, re.M)
    delivered = re.search(r"^\| delivered \| (\d+) \| (\d+) \|", r.stdout, re.M)
    assert sent and delivered, r.stdout
    assert int(sent.group(1)) > 0 and int(sent.group(2)) > 0
    # 1 s at 1000/s: the rate per second is the count sent.
    assert delivered.groups() == sent.groups()
    assert "p99.9 ms" in r.stdout
