"""The chart's dashboard and alert rules, checked without a cluster: promtool's rule checks and
unit tests (tests/rules/), and the dashboard's shape. tests/control/test_prometheus.py runs
every expression of both against a real Prometheus scraping a real cluster."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "helm/xshard/files/dashboards/xshard.json"
RULES = REPO / "helm/xshard/files/rules/xshard-rules.yml"
RULE_TESTS = REPO / "tests/rules/xshard-rules.test.yml"

ALERTS = {"NodeDown", "ShardWithoutPrimary", "ReplicaLagHigh", "ConsumerGroupLagGrowing",
          "StuckConsumer", "PersistenceErrors", "PrimaryFenced", "FailoverStorm",
          "RouterUpstreamErrors", "PartitionsUntracked"}
VARIABLES = {"datasource", "cluster", "shard", "instance", "stream", "logical_stream", "group"}
# Grafana's own interval variables, allowed inside range selectors, and what Grafana would put
# in for them with a 1 s scrape interval.
BUILTINS = {"__rate_interval", "__interval", "__range"}
INTERVALS = {"__rate_interval": "15s", "__interval": "5s", "__range": "5m"}
PSTREAM_ROW = "Partitioned streams"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian package prometheus) is not installed")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def grafana(expr: str) -> str:
    """The query Grafana sends with every variable at All (.*)."""
    for name, v in INTERVALS.items():
        expr = expr.replace("$" + name, v)
    out = re.sub(r"\$\{?(\w+)\}?", ".*", expr)
    assert "$" not in out
    return out


def row_panels(title: str) -> list[dict]:
    """The panels under the row named `title`, up to the next row."""
    ps = dashboard()["panels"]
    start = next(i for i, p in enumerate(ps) if p["type"] == "row" and p["title"] == title)
    end = next((i for i in range(start + 1, len(ps)) if ps[i]["type"] == "row"), len(ps))
    return ps[start + 1:end]


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def check_variables(expr: str) -> list[str]:
    """What is wrong with the variables in `expr`: only the dashboard's variables, each as
    label=~"$var", plus Grafana's interval variables inside [...]."""
    problems = []
    for m in re.finditer(r"\$\{?(\w+)\}?", expr):
        name = m.group(1)
        if name in BUILTINS:
            if not re.search(r"\[\$" + name + r"\]", expr):
                problems.append(f"${name} outside a range selector")
            continue
        if name not in VARIABLES:
            problems.append(f"unknown variable ${name}")
        elif not re.search(r"\b" + name + r'=~"\$' + name + '"', expr):
            problems.append(f'${name} not used as {name}=~"${name}"')
    for m in re.finditer(r'(\w+)=~"\$(\w+)"', expr):
        if m.group(1) != m.group(2):
            problems.append(f"label {m.group(1)} matched with ${m.group(2)}")
    return problems


def test_rules_have_the_ten_alerts_each_unit_tested() -> None:
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert alerts == ALERTS
    tested = {t.get("alertname") for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    assert tested >= ALERTS
    for r in rules():
        if "alert" in r:
            assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


@needs_promtool
def test_promtool_check_and_test_rules() -> None:
    p = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], capture_output=True,
                       text=True, timeout=120, cwd=RULE_TESTS.parent)
    assert p.returncode == 0, p.stdout + p.stderr


def test_dashboard_variables_and_panels() -> None:
    d = dashboard()
    assert d["schemaVersion"] >= 38  # Grafana 10+
    assert {v["name"] for v in d["templating"]["list"]} == VARIABLES
    ps = panels()
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    for p in ps:
        assert p["description"].strip(), p["title"]
        assert p["fieldConfig"]["defaults"]["unit"], p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert check_variables(t["expr"]) == [], (p["title"], t["expr"])
    titles = " | ".join(p["title"].lower() for p in ps)
    for want in ("throughput per command", "command latency p50 and p99",
                 "delivery latency p50, p99 and p99.9", "group lag", "lag growth",
                 "pending entries", "oldest pending age", "replica lag", "failovers",
                 "fenced", "aof fsync", "router upstream latency", "redirects", "memory",
                 "blocked clients", "logical stream length", "logical stream write rate",
                 "logical stream group lag", "logical stream pending", "partition skew"):
        assert want in titles, want
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            assert check_variables(v["query"]["query"]) == [], v["name"]


def test_variable_check_can_fail() -> None:
    assert check_variables('rate(x{cluster="$cluster"}[5m])')
    assert check_variables('rate(x{node=~"$node"}[5m])')
    assert check_variables('rate(x{shard=~"$cluster"}[$__rate_interval])')
    assert check_variables('x{cluster=~"$cluster"} offset $__range')
    assert check_variables('rate(x{cluster=~"$cluster"}[$__rate_interval])') == []


def _records_named(expr: str) -> set[str]:
    return set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+\b", expr))


def test_partitioned_streams_row_reads_the_partitioned_stream_rules() -> None:
    """The row's panels read the recording rules that count each partition once (never the
    raw per-partition series, which every replica exports too), every rule they name exists,
    each filters by the logical_stream variable, and every such rule is on some panel."""
    ps = row_panels(PSTREAM_ROW)
    assert len(ps) >= 5
    records = {r["record"] for r in rules() if "record" in r}
    shown: set[str] = set()
    for p in ps:
        for t in p["targets"]:
            names = _records_named(t["expr"])
            assert names and names <= records, (p["title"], t["expr"], names - records)
            assert 'logical_stream=~"$logical_stream"' in t["expr"], p["title"]
            assert not re.search(r"\bxshard_\w+\s*[{\[(]", t["expr"]), p["title"]
            shown |= names
    assert {r for r in records if "logical_stream" in r.split(":")[0]} == shown
    var = next(v for v in dashboard()["templating"]["list"] if v["name"] == "logical_stream")
    assert 'logical_stream!=""' in var["query"]["query"] and var["allValue"] == ".+"


def test_partitioned_stream_rules_count_each_partition_once() -> None:
    """Every partitioned-stream rule over raw series first takes one value per partition
    (max by ... partition), selects only partition keys, and keeps cluster."""
    for r in rules():
        name = r.get("record", "")
        if "logical_stream" not in name.split(":")[0]:
            continue
        assert "cluster" in r["expr"], name
        raw = re.findall(r"\bxshard_\w+\b(?=\s*[{\[])", r["expr"])
        if raw:
            assert all(f"{m}{{logical_stream!=\"\"}}" in r["expr"] for m in raw), name
            assert "xshard_delivery_latency" in r["expr"] or re.search(
                r"max by \(cluster, logical_stream, partition", r["expr"]), name
        else:
            assert _records_named(r["expr"]), name


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each query as Grafana sends it parses as PromQL (promtool checks a rules file of them)."""
    exprs = [grafana(e) for e in dashboard_exprs()]
    exprs += [grafana(v["query"]["query"].removeprefix("label_values(").rsplit(",", 1)[0])
              for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    f = tmp_path / "dashboard-queries.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query:{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    p = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    f.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [
        {"record": "dashboard:query:bad", "expr": "sum by (x (y)"}]}]}))
    assert subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True,
                          timeout=60).returncode != 0
