"""The chart's dashboard and rules against a real Prometheus scraping a real cluster.

`xshard up --prometheus` starts the cluster, writes targets.json and prometheus.yml and runs
Debian's `prometheus` on them. The test makes lag (a group that is behind, a consumer that never
acknowledges) on a plain stream and on a partitioned one (`xshard stream create`), then asks Prometheus's HTTP API: every dashboard query and recording rule returns
series, every alert expression parses and every metric it selects has series, the lag equals
XINFO GROUPS, the delivery histogram counts what was delivered, the partitioned stream's
recorded totals equal what the router answers for its name, and NodeDown and StuckConsumer
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

from base.store import read_view
from control.ports import free_block
from tests.control.test_up import READY, Up, xshard
from tests.support.procs import wait_until
from tests.support.scrape import fetch, promtool_check
from tests.test_dashboard_rules import BUILTINS, dashboard, dashboard_exprs, grafana, rules

pytestmark = [
    pytest.mark.etcd, pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="prometheus/promtool (Debian package prometheus) not installed"),
]

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
    pev = _partitioned_stream(state, r, prom)
    # Every process's exposition passes promtool.
    for t in targets:
        port = int(t["targets"][0].rsplit(":", 1)[1])
        assert promtool_check(fetch(port)) == "", t["labels"]

    # Every dashboard query returns series (rates need a few scrapes first).
    exprs = [grafana(e) for e in dashboard_exprs()]
    wait_until(lambda: all(prom.query(e) for e in exprs), 60,
               what="every dashboard query to return series: " + "; ".join(
                   e for e in exprs if not prom.query(e)))
    for v in dashboard()["templating"]["list"]:
        if v["type"] == "query":  # label_values(metric{...}, label) has values
            metric, label = re.match(r"label_values\((.*), (\w+)\)$", v["query"]["query"]
                                     ).groups()
            vals = prom.api("label/" + label + "/values", **{"match[]": grafana(metric)})
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
    _check_partitioned(prom, r, pev)

    # StuckConsumer: its expression, with the 5-minute threshold lowered to 2 s, turns true
    # for the groups whose consumer never acknowledges, and only for them: "stuck" on orders,
    # and "pg" on the partitions of pev where its consumer holds entries.
    stuck = next(x for x in rules() if x.get("alert") == "StuckConsumer")["expr"]
    fast = re.sub(r">\s*300\b", "> 2", stuck)
    assert fast != stuck
    wait_until(lambda: {(s["metric"]["group"], s["metric"].get("logical_stream", ""))
                        for s in prom.query(fast)} == {("stuck", ""), ("pg", "pev")}, 30,
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


def _partitioned_stream(state: Path, r: redis.Redis, prom: Prom) -> list[str]:
    """Logical stream "pev": 4 partitions over the 2 shards, key field "user" with one user
    taking most entries (a skew), group "pg" that read 12 entries and acknowledged 4. Its
    partition keys. Writes and reads come after Prometheus has the series, so that the rates
    over them are not 0."""
    made = xshard("stream", "create", "pev", "--partitions", "4", "--key-field", "user",
                  cwd=state.parent)
    assert made.returncode == 0, made.stdout + made.stderr
    url = (state / "etcd.url").read_text().strip()
    keys = read_view(url, "promtest").pstreams["pev"].value.keys
    wait_until(lambda: r.type("pev") == b"stream", 20, what="the router resolves pev")
    r.xgroup_create("pev", "pg", id="0")
    r.xadd("pev", {"user": "u0", "i": 0})
    assert len(r.xreadgroup("pg", "c", {"pev": ">"}, count=1)[0][1]) == 1
    wait_until(lambda: len(prom.query('xshard_stream_entries_added_total{logical_stream="pev"}'))
               == 8 and prom.query('xshard_delivery_latency_seconds_count{logical_stream="pev"}'),
               30, what="Prometheus has pev's partitions, on primaries and replicas")
    for i in range(30):
        r.xadd("pev", {"user": "hot", "i": i})
    for u in range(9):
        for i in range(2 if u else 1):
            r.xadd("pev", {"user": f"u{u}", "i": i})
    got = [e[0] for _, es in r.xreadgroup("pg", "c", {"pev": ">"}, count=11) for e in es]
    assert len(got) == 11
    assert r.xack("pev", "pg", *got[:4]) == 4
    return keys


def _check_partitioned(prom: Prom, r: redis.Redis, keys: list[str]) -> None:
    """The logical stream's totals in Prometheus equal what the router answers for the logical
    name, each partition counted once though its replica exports it too."""
    lens = [r.xlen(k) for k in keys]  # a partition key is a plain key to the router
    assert sum(lens) == r.xlen("pev") == 48 and max(lens) >= 30
    group = next(g for g in r.xinfo_groups("pev") if g["name"] == b"pg")
    assert (group["lag"], group["pending"]) == (36, 8)

    def one(expr: str) -> float | None:
        res = prom.query(expr)
        return float(res[0]["value"][1]) if len(res) == 1 else None

    sel = '{cluster="promtest", logical_stream="pev"}'
    gsel = '{cluster="promtest", logical_stream="pev", group="pg"}'
    want = {
        f"cluster_logical_stream:xshard_stream_partitions:count{sel}": 4,
        f"cluster_logical_stream:xshard_stream_length:sum{sel}": 48,
        f"cluster_logical_stream_group:xshard_stream_group_lag:sum{gsel}": 36,
        f"cluster_logical_stream_group:xshard_stream_group_pending:sum{gsel}": 8,
        f"cluster_logical_stream:xshard_stream_length:skew{sel}": round(max(lens) / 12, 6),
    }
    wait_until(lambda: all(round(one(e) or -1, 6) == v for e, v in want.items()), 30,
               what="the logical stream's totals: " + "; ".join(
                   f"{e} = {one(e)}, not {v}" for e, v in want.items()
                   if round(one(e) or -1, 6) != v))
    # The raw series of one partition come from its primary and its replica: twice.
    assert len(prom.query(f'xshard_stream_length{{stream="{keys[0]}", '
                          'logical_stream="pev", partition="0"}')) == 2
    for e in ("cluster_logical_stream:xshard_stream_entries_added:rate5m",
              "cluster_logical_stream:xshard_stream_entries_added:skew5m"):
        assert (one(e + sel) or 0) > (1 if "skew" in e else 0), e
    assert one("cluster_logical_stream_group:xshard_delivery_latency_seconds:p99_5m"
               + gsel) is not None
    assert one('sum(xshard_metrics_untracked_partitions{cluster="promtest"})') == 0


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
