"""Metrics of the router, the controller and cluster nodes (router/metrics.py,
control/metrics.py), read over HTTP from real processes on a real etcd."""

from __future__ import annotations

import shutil

import pytest

from tests.support.procs import free_port, wait_until
from tests.support.scrape import fetch, get, promtool_check, samples, value

pytestmark = [pytest.mark.etcd, pytest.mark.slow]


def _total(text: str, name: str, **labels: str) -> float:
    return sum(v for k, v in samples(text, name).items()
               if all(dict(k).get(lk) == lv for lk, lv in labels.items()))


def test_router_controller_and_node_metrics(xcluster) -> None:
    c = xcluster(shards=2, replicas=1, controller=False)
    ctl_port, router_port, node_port = free_port(), free_port(), free_port()
    c.start_controller("--metrics-port", str(ctl_port))
    c.start_router("--metrics-port", str(router_port))
    extra = c.start_node("0", "s0n9", "--metrics-port", str(node_port))
    wait_until(lambda: get(ctl_port, "/readyz")[0] == 200, 20, what="controller ready")
    wait_until(lambda: get(router_port, "/readyz")[0] == 200, 20, what="router ready")
    wait_until(lambda: get(node_port, "/readyz")[0] == 200, 20, what="node ready")
    c.wait_ready()

    r = c.client()
    keys = c.keys_on_each_shard()
    for k in keys:
        r.xadd(k, {"a": 1})
    text = fetch(router_port)
    assert value(text, "xshard_router_requests_total") >= len(keys)
    for shard in ("0", "1"):
        assert value(text, "xshard_router_upstream_duration_seconds_count", shard=shard) >= 1
        assert value(text, "xshard_router_upstream_errors_total", shard=shard) == 0
    assert value(text, "xshard_router_slotmap_version") > 0
    assert value(text, "xshard_router_redirects_total", kind="moved") == 0
    assert value(text, "xshard_connected_clients") >= 1
    wait_until(lambda: value(fetch(router_port), "xshard_etcd_rtt_seconds_count") >= 1, 10,
               what="a keep-alive round trip")

    ctl = fetch(ctl_port)
    wait_until(lambda: value(fetch(ctl_port), "xshard_controller_leader") == 1, 20,
               what="controller leads")
    assert _total(ctl, "xshard_failovers_total") == 0
    assert {dict(k)["shard"] for k in samples(ctl, "xshard_failovers_total")} == {"0", "1"}

    node = fetch(node_port)
    assert value(node, "xshard_role", role="replica") == 1
    assert value(node, "xshard_node_fenced") == 0

    if shutil.which("promtool"):
        for port in (ctl_port, router_port, node_port):
            assert promtool_check(fetch(port)) == "", port

    # A primary dies: the controller fails its shard over and counts it; the router's
    # requests to that shard wait for the new primary.
    dead = c.primary("0")
    k0 = keys[0] if c.shard_of(keys[0]) == 0 else keys[1]
    dead.kill()
    r.xadd(k0, {"after": 1})  # waits out the failover (--cluster-down-timeout-ms 5000)
    wait_until(lambda: _total(fetch(ctl_port), "xshard_failovers_total", shard="0") == 1, 30,
               what="failover counted")
    text = fetch(router_port)
    assert value(text, "xshard_router_upstream_errors_total", shard="0") >= 1
    assert value(text, "xshard_router_clusterdown_waits_total") >= 1
    del extra


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_static_router_metrics(xcluster) -> None:
    c = xcluster(shards=1, replicas=0, controller=False, etcd=False)
    port = free_port()
    c.start_router("--metrics-port", str(port))
    c.client().xadd("s", {"a": 1})
    text = fetch(port)
    assert value(text, "xshard_router_slotmap_version") == 1
    assert "xshard_etcd_rtt_seconds" not in text
    assert promtool_check(text) == ""
