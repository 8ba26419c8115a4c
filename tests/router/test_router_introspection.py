"""Redis's introspection through a router (3 real nodes behind one router): MONITOR shows
what the router receives, SLOWLOG fans out to the nodes, what describes one node is refused,
and INFO describes the router with totals over the shards."""

from __future__ import annotations

import re

from tests.support.cluster import Cluster
from tests.support.rawresp import RawClient


def test_monitor_on_a_router_shows_its_requests(cluster: Cluster) -> None:
    h = cluster.router
    mon, c = RawClient(h.host, h.port), RawClient(h.host, h.port)
    try:
        assert mon.call("MONITOR") == ("+", b"OK")
        keys = cluster.keys_on_each_shard("m")
        for k in keys:
            c.call("XADD", k, "*", "f", "v 1")
        c.call("CONFIG", "GET", "maxmemory")  # admin: not shown
        c.call("DEL", *keys)
        c.call("ECHO", "done")
        lines = []
        while not lines or lines[-1] != '"ECHO" "done"':
            kind, text = mon.read_reply()
            m = re.fullmatch(rb"\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] (.*)", text)
            assert kind == "+" and m, text
            lines.append(m.group(1).decode())
        assert lines == [f'"XADD" "{k}" "*" "f" "v 1"' for k in keys] + [
            '"DEL" ' + " ".join(f'"{k}"' for k in keys), '"ECHO" "done"']
    finally:
        mon.close()
        c.close()
    # the monitor's connection is gone: requests run as before
    assert cluster.client().ping()


def test_slowlog_fans_out_and_per_node_reports_are_refused(cluster: Cluster) -> None:
    c = RawClient(cluster.router.host, cluster.router.port)
    nodes = [RawClient(p.host, p.port) for p in cluster.primaries()]
    try:
        for n in nodes:
            n.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        assert c.call("SLOWLOG", "RESET") == ("+", b"OK")
        for k in cluster.keys_on_each_shard("sl"):
            c.call("SET", k, "v")
        lens = [n.call("SLOWLOG", "LEN")[1] for n in nodes]
        assert all(x >= 1 for x in lens)
        # LEN sums the nodes (its policy is agg_sum); GET concatenates their entries
        total = c.call("SLOWLOG", "LEN")[1]
        assert total >= sum(lens)
        entries = c.call("SLOWLOG", "GET", "-1")[1]
        assert sum(1 for e in entries if e[1][3][1][0][1] == b"SET") == 3
        for cmd in (["LATENCY", "LATEST"], ["LATENCY", "HISTOGRAM"], ["MEMORY", "STATS"]):
            kind, msg = c.call(*cmd)
            assert kind == "-" and b"send it to a node" in msg, msg
    finally:
        for n in nodes:
            n.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
            n.close()
        c.close()
