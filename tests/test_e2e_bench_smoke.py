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


@pytest.mark.slow
def test_e2e_bench_cluster_targets_quick() -> None:
    """The cluster-shaped targets start (a Redis Cluster made by redis-cli, an xshard cluster
    with etcd and a controller, a partitioned stream), deliver every entry sent, and print the
    server CPU per delivered entry for each."""
    targets = ["redis-cluster", "xshard-direct", "pstream"]
    r = subprocess.run([sys.executable, "benchmarks/e2e_bench.py", "--quick", "--targets", ",".join(targets)], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.search(r"^\| \| " + re.escape(" | ".join(targets)) + r" \|$", r.stdout, re.M)
    sent = re.search(r"^\| sent /s \|(.*)\|$", r.stdout, re.M)
    delivered = re.search(r"^\| delivered \|(.*)\|$", r.stdout, re.M)
    cpu = re.search(r"^\| server CPU us / delivered \|(.*)\|$", r.stdout, re.M)
    assert sent and delivered and cpu, r.stdout
    # 1 s at 1000/s: the rate per second is the count sent.
    n = [int(x) for x in delivered.group(1).split("|")]
    assert all(x > 0 for x in n), r.stdout
    assert n == [int(x) for x in sent.group(1).split("|")], r.stdout
    assert all(float(x) > 0 for x in cpu.group(1).split("|")), r.stdout
    # Every server process of the xshard cluster is in the cost lines, etcd and controller too.
    for name in ("etcd", "controller", "router", "s0n0", "s2n1", "rc5"):
        assert f" {name}: user " in r.stdout, name
