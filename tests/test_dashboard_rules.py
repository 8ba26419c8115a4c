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
          "RouterUpstreamErrors"}
VARIABLES = {"datasource", "cluster", "shard", "instance", "stream", "group"}
# Grafana's own interval variables, allowed inside range selectors.
BUILTINS = {"__rate_interval", "__interval", "__range"}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian package prometheus) is not installed")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


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


def test_rules_have_the_nine_alerts_each_unit_tested() -> None:
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
                 "blocked clients"):
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
