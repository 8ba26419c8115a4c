"""The chart's dashboard and rules against a real Prometheus scraping a real cluster.

`xshard up --prometheus` starts the cluster, writes targets.json and prometheus.yml and runs
Debian's `prometheus` on them. The test makes lag (a group that is behind, a consumer that never
acknowledges), then asks Prometheus's HTTP API: every dashboard query and recording rule returns
series, every alert expression parses and every metric it selects has series, the lag equals
XINFO GROUPS, the delivery histogram counts what was delivered, and NodeDown and StuckConsumer
turn true after a kill and a stall."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import redis

from control.ports import free_block
from tests.control.test_up import READY, Up
from tests.support.procs import wait_until
from tests.support.scrape import fetch, promtool_check
from tests.test_dashboard_rules import BUILTINS, dashboard, dashboard_exprs, rules

pytestmark = [
    pytest.mark.etcd, pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="prometheus/promtool (Debian package prometheus) not installed"),
]

# What Grafana would put in for its interval variables with a 1 s scrape interval.
INTERVALS = {"__rate_interval": "15s", "__interval": "5s", "__range": "5m"}


def _grafana(expr: str) -> str:
    """The query Grafana sends with every variable at All (.*)."""
    for name, v in INTERVALS.items():
        expr = expr.replace("$" + name, v)
    out = re.sub(r"\$\{?(\w+)\}?", ".*", expr)
    assert "$" not in out
    return out


class Prom:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def api(self, path: str, **params: object) -> dict:
        q = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read())

    def query(self, expr: str) -> list[dict]:
        r = self.api("query", query=expr)
        assert r["status"] == "success", (expr, r)
        return r["data"]["result"]

    def true_since(self, expr: str, start: float) -> bool:
        """Did `expr` return anything at some evaluation between `start` and now?"""
        r = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{time.time():.3f}",
                     step="0.5")
        assert r["status"] == "success", (expr, r)
        return bool(r["data"]["result"])


def _selected_metrics(expr: str) -> set[str]:
    names = set(re.findall(r"\b(xshard_\w+|process_\w+|up)\b(?=\s*[{\[)])", expr))
    return {n for n in names if n not in BUILTINS}


def test_dashboard_and_rules_on_a_real_prometheus(tmp_path: Path) -> None:
    base = free_block(6)
    u = Up(tmp_path, ["--shards", "2", "--replicas", "1", "--port", str(base), "--router-port",
                      str(base + 4), "--cluster", "promtest", "--prometheus",
                      "--scrape-interval", "1"])
    try:
        u.wait_for(READY)
        m = re.search(r"prometheus: (http://\S+)", u.out)
        assert m, u.out
        prom = Prom(m.group(1))
        _check(prom, tmp_path / ".xshard", base + 4)
    finally:
        u.stop()


def _check(prom: Prom, state: Path, router_port: int) -> None:
    targets = json.loads((state / "prometheus" / "targets.json").read_text())
    kinds = sorted(t["labels"]["kind"] for t in targets)
    assert kinds == ["controller"] + ["node"] * 4 + ["router"]
    for t in targets:
        assert t["labels"]["cluster"] == "promtest" and t["labels"]["node"]
        assert ("shard" in t["labels"]) == (t["labels"]["kind"] == "node")
    assert "rule_files" in (state / "prometheus" / "prometheus.yml").read_text()

    # Lag: "behind" read 10 of 50, "stuck" holds 5 it never acknowledges.
    r = redis.Redis(port=router_port, socket_timeout=10)
    for i in range(50):
        r.xadd("orders", {"i": i})
        r.xadd(f"other{i % 3}", {"i": i})
    r.xgroup_create("orders", "behind", id="0")
    r.xgroup_create("orders", "stuck", id="0")
    for _ in range(2):
        r.xreadgroup("behind", "c1", {"orders": ">"}, count=5)
    r.xreadgroup("stuck", "sleeper", {"orders": ">"}, count=5)
    for e in r.xreadgroup("behind", "c1", {"orders": "0"})[0][1]:
        r.xack("orders", "behind", e[0])
    assert r.execute_command("WAIT", 1, 5000) >= 1

    def all_up() -> bool:
        active = prom.api("targets")["data"]["activeTargets"]
        return len(active) == len(targets) and all(t["health"] == "up" for t in active)

    wait_until(all_up, 60, what="every target up in Prometheus")
    # Every process's exposition passes promtool.
    for t in targets:
        port = int(t["targets"][0].rsplit(":", 1)[1])
        assert promtool_check(fetch(port)) == "", t["labels"]

    # Every dashboard query returns series (rates need a few scrapes first).
    exprs = [_grafana(e) for e in dashboard_exprs()]
    wait_until(lambda: all(prom.query(e) for e in exprs), 60,
               what="every dashboard query to return series: " + "; ".join(
                   e for e in exprs if not prom.query(e)))
    for v in dashboard()["templating"]["list"]:
        if v["type"] == "query":  # label_values(metric{...}, label) has values
            metric, label = re.match(r"label_values\((.*), (\w+)\)$", v["query"]["query"]
                                     ).groups()
            vals = prom.api("label/" + label + "/values", **{"match[]": _grafana(metric)})
            assert vals["status"] == "success" and vals["data"], v["name"]

    # Recording rules return series; alert expressions parse and select live metrics.
    records = [x["record"] for x in rules() if "record" in x]
    wait_until(lambda: all(prom.query(rec) for rec in records), 60,
               what="recording rules evaluated")
    for x in rules():
        if "alert" in x:
            prom.query(x["expr"])  # asserts status success: it parses and evaluates
            for name in _selected_metrics(x["expr"]):
                assert prom.query(f"count({name})"), (x["alert"], name)

    # The lag Prometheus has is XINFO GROUPS's, and the histogram counts the deliveries.
    groups = {g["name"].decode(): g for g in r.xinfo_groups("orders")}

    def lag(group: str) -> float | None:
        res = prom.query(f'xshard_stream_group_lag{{stream="orders", group="{group}", '
                         'kind="node"} and on (instance) xshard_role{role="primary"} == 1')
        return float(res[0]["value"][1]) if res else None

    wait_until(lambda: lag("behind") == groups["behind"]["lag"] == 40
               and lag("stuck") == groups["stuck"]["lag"] == 45, 30, what="lag as XINFO")

    def delivered(group: str) -> float:
        res = prom.query(f'sum(xshard_delivery_latency_seconds_count{{stream="orders", '
                         f'group="{group}"}})')
        return float(res[0]["value"][1]) if res else -1

    wait_until(lambda: delivered("behind") == 10 and delivered("stuck") == 5, 30,
               what="delivery counts")

    # StuckConsumer: its expression, with the 5-minute threshold lowered to 2 s, turns true
    # for the group whose consumer never acknowledges, and only for it.
    stuck = next(x for x in rules() if x.get("alert") == "StuckConsumer")["expr"]
    fast = re.sub(r">\s*300\b", "> 2", stuck)
    assert fast != stuck
    wait_until(lambda: {s["metric"]["group"] for s in prom.query(fast)} == {"stuck"}, 30,
               what="StuckConsumer true")

    # NodeDown: a node that does not answer its scrapes. It is frozen (SIGSTOP), not killed:
    # `xshard up` restarts a killed node within about a second, which could fall between two
    # scrapes, so that no scrape ever failed.
    node_down = next(x for x in rules() if x.get("alert") == "NodeDown")["expr"]
    assert not prom.query(node_down)
    victim = next(t for t in targets if t["labels"]["node"] == "s1n1")
    pid = _pid_of(victim)
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: prom.true_since(node_down, t0), 30, what="NodeDown true")
    finally:
        os.kill(pid, signal.SIGCONT)
    res = prom.api("query_range", query=node_down, start=f"{t0:.3f}", end=f"{time.time():.3f}",
                   step="0.5")["data"]["result"]
    assert {s["metric"]["node"] for s in res} == {"s1n1"}
    wait_until(lambda: not prom.query(node_down), 30, what="NodeDown false once it answers")


def _pid_of(target: dict) -> int:
    """The pid of the process serving a metrics target (from /proc, by its listening port)."""
    port = int(target["targets"][0].rsplit(":", 1)[1])
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--metrics-port" in cmd and cmd[cmd.index(b"--metrics-port") + 1] == b"%d" % port:
            return int(p.name)
    raise AssertionError(f"no process with --metrics-port {port}")
