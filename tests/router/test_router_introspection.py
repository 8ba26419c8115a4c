"""Redis's introspection through a router (3 real nodes behind one router): MONITOR shows
what the router receives, SLOWLOG fans out to the nodes, what describes one node is refused,
and INFO describes the router with totals over the shards."""

from __future__ import annotations

import re

from node import native
from tests.support.cluster import Cluster
from tests.support.rawresp import RawClient
from tests.test_native import _built_and_fresh


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


def _info(c: RawClient, *sections: str) -> tuple[list[str], dict[str, str]]:
    text = c.call("INFO", *sections)[1].decode()
    titles = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    return titles, dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def test_info_through_a_router_honours_sections_and_adds_the_shards(cluster: Cluster) -> None:
    c = RawClient(cluster.router.host, cluster.router.port)
    try:
        c.call("FLUSHALL")
        keys = cluster.keys_on_each_shard("i") + cluster.keys_on_each_shard("j")
        for k in keys:
            c.call("XADD", k, "*", "f", "v")
        c.call("SET", keys[0] + "x", "v", "EX", "100")
        titles, f = _info(c)
        assert titles == ["Server", "Clients", "Memory", "Stats", "Replication", "CPU",
                          "Errorstats", "Cluster", "Keyspace"]
        assert f["xshard_role"] == "router" and f["role"] == "master"
        # the router's relay is compiled with the node's hot path (node/native.py)
        assert f["xshard_compiled"] == str(int(_built_and_fresh() and not native.pure_forced()))
        assert f["cluster_shards"] == "3" and f["cluster_shards_unreachable"] == "0"
        assert f["cluster_keys"] == str(len(keys) + 1) == str(c.call("DBSIZE")[1])
        assert f["cluster_expires"] == "1"
        assert f["db0"].startswith(f"keys={len(keys) + 1},expires=1,")
        direct = 0
        for p in cluster.primaries():
            with RawClient(p.host, p.port) as n:
                direct += int(_info(n, "stats")[1]["total_commands_processed"])
        # each node's count only grows: the sum asked after theirs is at least theirs
        assert direct <= int(_info(c, "cluster")[1]["cluster_total_commands_processed"])
        assert f["xshard_primaries"].count(",") == 2
        # one section, in any case; several; unknown ones print nothing
        assert _info(c, "SERVER")[0] == ["Server"]
        assert _info(c, "clients", "keyspace")[0] == ["Clients", "Keyspace"]
        assert _info(c, "cluster")[1]["xshard_primaries"] == f["xshard_primaries"]
        assert _info(c, "nosuch") == ([], {})
        c.hello(3)
        kind, _ = c.call("INFO", "cluster")
        assert kind == "="
        assert _info(c, "cluster")[1]["cluster_keys"] == str(len(keys) + 1)
    finally:
        c.call("FLUSHALL")
        c.close()


def test_pipeline_finds_the_shards_from_the_routers_info(cluster: Cluster) -> None:
    """pipeline/cluster.py reads `xshard_role` and `xshard_primaries` from INFO server and
    INFO cluster of a router to find the nodes it asks for CLUSTER SHARDS (without Spark)."""
    from pipeline.cluster import Topology

    seeds, is_router = Topology(f"redis://{cluster.router.host}:{cluster.router.port}")._seeds()
    assert is_router and sorted(seeds) == sorted((p.host, p.port) for p in cluster.primaries())


_CMD_SCRIPT = [["NOSUCH", "x"], ["PING"], ["XADD", "cmd:s"], ["CLIENT", "NOSUCH"], ["XGROUP"],
               ["CLIENT", "GETNAME"], ["XADD", "cmd:s", "*", "f", "v"], ["MULTI"],
               ["XLEN", "cmd:s"], ["NOSUCH"], ["EXEC"], ["MULTI"],
               ["XADD", "cmd:s", "*", "f", "v"], ["EXEC"], ["XINFO", "STREAM", "cmd:s"]]


def _last_commands(host: str, port: int) -> list[tuple[list[str], str]]:
    """cmd= in CLIENT LIST (seen from another connection) after each command of the script."""
    admin, c = RawClient(host, port), RawClient(host, port)
    out = []
    try:
        host, lport = c.sock.getsockname()[:2]
        addr = f"addr={host}:{lport}"
        for cmd in _CMD_SCRIPT:
            c.call(*cmd)
            line = next(ln for ln in admin.call("CLIENT", "LIST")[1].decode().splitlines()
                        if addr in ln.split())
            out.append((cmd, next(f for f in line.split() if f.startswith("cmd="))))
        admin.call("DEL", "cmd:s")
    finally:
        admin.close()
        c.close()
    return out


def test_client_list_cmd_through_a_router_matches_redis(cluster: Cluster, oracle) -> None:
    """A router's clients show their last command as Redis's do (c->lastcmd): set before the
    checks, so a command refused for its arity or queued in MULTI shows; an unknown command or
    subcommand shows NULL, a subcommand its fullname. The router used to show cmd=NULL always."""
    h = cluster.router
    mine, theirs = _last_commands(h.host, h.port), _last_commands("127.0.0.1", oracle.port)
    for a, b in zip(mine, theirs, strict=True):
        assert a == b, f"router {a} redis {b}"


def test_client_idle_through_a_router_counts_from_the_last_command(cluster: Cluster) -> None:
    """idle= is the time since the client's last command, not since it connected."""
    from tests.support.procs import wait_until

    h = cluster.router
    raw = RawClient(h.host, h.port)
    fields: dict[str, str] = {}

    def aged() -> bool:
        info = raw.call("CLIENT", "INFO")[1].decode()
        fields.update(f.split("=", 1) for f in info.split() if "=" in f)
        return int(fields["age"]) >= 2

    try:
        wait_until(aged, 10, interval=0.2, what="a connection two seconds old")
    finally:
        raw.close()
    assert int(fields["idle"]) == 0, fields
