"""Introspection through a router: INFO describes the router, MONITOR shows the commands it
receives (in the node's format, node/monitor.py); what describes one node is refused with a
pointer to the nodes; the rest of SLOWLOG and LATENCY fans out by the command table's policies.

INFO [section ...] takes Redis's section names. `# Cluster` and `# Keyspace` add up the shard
primaries' own INFO (asked when one of them is wanted): keys, clients, memory, commands, so
that one INFO through any router answers "how big and how busy is the cluster". `# Cluster`
also lists the primaries (`xshard_primaries`), which clients that read the shards directly use
(pipeline/cluster.py), and says how many shards did not answer.

LATENCY LATEST/HISTORY/HISTOGRAM and MEMORY STATS carry Redis's `special` response policy:
a cluster client merges them per node itself, which a single reply through a router cannot
say, so they are answered only by a node.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import TYPE_CHECKING

from node import REDIS_VERSION, errors, native
from node import __version__ as xshard_version
from node.cluster import redis_id
from node.info import cpu_fields, errorstats_fields, format_sections, rss_bytes, wanted_sections
from node.resp import OK, Verbatim, encode, encode_command, error
from router.commands import router_command
from router.forward import Gather

if TYPE_CHECKING:
    from router.client import Cell, ClientConn, RouterClient
    from router.proxy import Router


@router_command(b"latency|latest", b"latency|history", b"latency|histogram", b"memory|stats")
def per_node(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    conn.fill(cell, error(errors.NOT_THROUGH_ROUTER % b" ".join(argv[:2]).upper()))


@router_command(b"monitor")
def monitor(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    """Every request this router receives from now on, as a node's MONITOR shows them (a
    second MONITOR answers nothing, as in Redis)."""
    conn: ClientConn = c.conn  # type: ignore[assignment]
    new = c.id not in router.monitors
    router.monitors[c.id] = c
    conn.fill(cell, OK if new else b"")


DEFAULT_SECTIONS = ("server", "clients", "memory", "stats", "replication", "cpu", "errorstats",
                    "cluster", "keyspace")
ALL_SECTIONS = DEFAULT_SECTIONS
# Summed over the shard primaries for `# Cluster`, named as on a node: (section, field).
TOTALS = (("clients", "connected_clients"), ("clients", "blocked_clients"),
          ("memory", "used_memory"), ("stats", "total_commands_processed"),
          ("stats", "instantaneous_ops_per_sec"), ("stats", "total_net_input_bytes"),
          ("stats", "total_net_output_bytes"), ("stats", "total_error_replies"),
          ("stats", "expired_keys"))


@router_command(b"info")
def info(router: Router, c: RouterClient, argv: list[bytes], cell: Cell) -> None:
    conn: ClientConn = c.conn  # type: ignore[assignment]
    names = [a.decode(errors="replace") for a in argv[1:]]
    wanted = wanted_sections(names, DEFAULT_SECTIONS, ALL_SECTIONS, SECTIONS)

    def reply(shards: list[dict[str, str] | None]) -> bytes:
        text = format_sections([(n, SECTIONS[n](router, shards)) for n in wanted])
        return encode(Verbatim(text), c.proto)

    addrs = router.primaries() if {"cluster", "keyspace"} & set(wanted) else []
    data = encode_command([b"INFO", b"clients", b"memory", b"stats", b"keyspace"])
    Gather.send(router, c, [(a, None, data) for a in addrs], False,
                lambda replies: reply([_parse(r) for r in replies]), partial(conn.fill, cell))


def _parse(r: bytes) -> dict[str, str] | None:
    """A node's INFO reply as fields, None when it is an error (the shard did not answer)."""
    if r[:1] not in (b"$", b"="):
        return None
    e = r.find(b"\r\n")
    text = r[e + 2:e + 2 + int(r[1:e])]
    if r[:1] == b"=":
        text = text[4:]  # "txt:"
    return dict(line.split(":", 1) for line in text.decode(errors="replace").splitlines()
                if ":" in line and not line.startswith("#"))


Fields = list[tuple[str, object]]
Shards = list[dict[str, str] | None]


def _server(router: Router, shards: Shards) -> Fields:
    up = int(time.time() - router.start_time)
    return [("redis_version", REDIS_VERSION), ("xshard_version", xshard_version),
            ("xshard_compiled", int(native.compiled())),
            ("redis_mode", "standalone"), ("xshard_role", "router"),
            ("process_id", os.getpid()), ("run_id", redis_id(router.router_id)),
            ("tcp_port", router.config.port or router.config.tls_port), ("server_time_usec", int(time.time() * 1e6)),
            ("uptime_in_seconds", up), ("uptime_in_days", up // 86400)]


def _clients(router: Router, shards: Shards) -> Fields:
    return [("connected_clients", len(router.clients)), ("maxclients", router.config.maxclients),
            ("blocked_clients", sum(1 for x in router.clients.values() if x.blocked)),
            ("monitor_clients", len(router.monitors))]


def _memory(router: Router, shards: Shards) -> Fields:
    rss = rss_bytes()
    return [("used_memory", rss), ("used_memory_rss", rss)]


def _stats(router: Router, shards: Shards) -> Fields:
    st = router.stats
    return [("total_connections_received", st.total_connections),
            ("total_commands_processed", st.total_commands),
            ("total_net_input_bytes", st.net_input_bytes),
            ("total_net_output_bytes", st.net_output_bytes),
            ("rejected_connections", st.rejected_connections),
            ("total_error_replies", st.total_error_replies),
            ("redirects_moved", router.redirects["moved"]),
            ("redirects_ask", router.redirects["ask"]),
            ("clusterdown_waits", router.upstream.clusterdown_waits)]


def _errorstats(router: Router, shards: Shards) -> Fields:
    return errorstats_fields(router.stats)


def _cluster(router: Router, shards: Shards) -> Fields:
    up = [s for s in shards if s is not None]
    out: Fields = [
        ("cluster_enabled", 0), ("slotmap_version", router.map.version),
        # Where the shards are, for clients that read them directly (pipeline/cluster.py asks
        # one of these nodes for CLUSTER SHARDS).
        ("xshard_primaries", ",".join(f"{h}:{p}" for h, p in router.primaries())),
        ("cluster_shards", len(shards)), ("cluster_shards_unreachable", len(shards) - len(up)),
        ("cluster_keys", sum(_db0(s).get("keys", 0) for s in up)),
        ("cluster_expires", sum(_db0(s).get("expires", 0) for s in up)),
    ]
    for _, field in TOTALS:
        out.append((f"cluster_{field}", sum(_int(s.get(field)) for s in up)))
    return out


def _keyspace(router: Router, shards: Shards) -> Fields:
    """Keys over every shard, as one database: what DBSIZE through the router says."""
    up = [_db0(s) for s in shards if s is not None]
    keys = sum(d.get("keys", 0) for d in up)
    if not keys:
        return []
    return [("db0", f"keys={keys},expires={sum(d.get('expires', 0) for d in up)},avg_ttl=0,"
                    "subexpiry=0")]


def _db0(fields: dict[str, str]) -> dict[str, int]:
    return {k: _int(v) for k, v in (kv.split("=", 1) for kv in fields.get("db0", "").split(",")
                                    if "=" in kv)}


def _int(v: str | None) -> int:
    try:
        return int(v or 0)
    except ValueError:
        return 0


SECTIONS = {"server": _server, "clients": _clients, "memory": _memory, "stats": _stats,
            "replication": lambda r, s: [("role", "master"), ("connected_slaves", 0)],
            "cpu": lambda r, s: cpu_fields(), "errorstats": _errorstats, "cluster": _cluster,
            "keyspace": _keyspace}
