"""INFO: Redis's sections and field names, filled from the node's own counters."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from node import REDIS_VERSION
from node import __version__ as xshard_version

if TYPE_CHECKING:
    from node.server import Server

DEFAULT_SECTIONS = ("server", "clients", "memory", "persistence", "stats", "replication", "cpu",
                    "modules", "errorstats", "cluster", "keyspace")
ALL_SECTIONS = DEFAULT_SECTIONS + ("commandstats", "latencystats")
LATENCY_PERCENTILES = (50.0, 99.0, 99.9)  # Redis's latency-tracking-info-percentiles default


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _human(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.2f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1024
    return f"{n:.2f}G"


def _server(s: Server) -> list[tuple[str, object]]:
    up = int(time.time() - s.start_time)
    return [
        ("redis_version", REDIS_VERSION), ("xshard_version", xshard_version),
        ("redis_mode", "standalone"), ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64), ("multiplexing_api", "epoll"), ("python_version", platform.python_version()),
        ("process_id", os.getpid()), ("run_id", s.run_id), ("tcp_port", s.config.port),
        ("server_time_usec", int(time.time() * 1e6)), ("uptime_in_seconds", up),
        ("uptime_in_days", up // 86400), ("hz", s.config.hz), ("executable", sys.argv[0]),
        ("config_file", s.config_file),
    ]


def _clients(s: Server) -> list[tuple[str, object]]:
    return [
        ("connected_clients", len(s.clients)), ("maxclients", s.config.maxclients),
        ("blocked_clients", s.blocking.blocked_clients), ("tracking_clients", 0),
        ("watching_clients", sum(1 for c in s.clients.values() if c.watched)),
        ("total_watched_keys", len(s.db.watchers)),
    ]


def _memory(s: Server) -> list[tuple[str, object]]:
    rss = rss_bytes()
    s.peak_memory = max(s.peak_memory, rss)
    return [
        ("used_memory", rss), ("used_memory_human", _human(rss)), ("used_memory_rss", rss),
        ("used_memory_rss_human", _human(rss)), ("used_memory_peak", s.peak_memory),
        ("used_memory_peak_human", _human(s.peak_memory)),
        ("maxmemory", s.config.maxmemory), ("maxmemory_human", _human(s.config.maxmemory)),
        ("maxmemory_policy", "noeviction"), ("mem_allocator", "pymalloc"),
    ]


def _persistence(s: Server) -> list[tuple[str, object]]:
    p = s.persistence
    if p is not None:
        return p.info_fields()
    return [
        ("loading", 0), ("async_loading", 0), ("rdb_changes_since_last_save", s.dirty),
        ("rdb_bgsave_in_progress", 0), ("rdb_last_save_time", int(s.start_time)),
        ("rdb_last_bgsave_status", "ok"), ("aof_enabled", int(s.config.appendonly)),
        ("aof_rewrite_in_progress", 0), ("aof_rewrite_scheduled", 0),
        ("aof_last_rewrite_time_sec", -1), ("aof_last_bgrewrite_status", "ok"),
        ("aof_last_write_status", "ok"),
    ]


def _stats(s: Server) -> list[tuple[str, object]]:
    st = s.stats
    return [
        ("total_connections_received", st.total_connections),
        ("total_commands_processed", st.total_commands),
        ("instantaneous_ops_per_sec", 0),
        ("total_net_input_bytes", st.net_input_bytes), ("total_net_output_bytes", st.net_output_bytes),
        ("rejected_connections", st.rejected_connections),
        ("expired_keys", s.db.expired_keys), ("evicted_keys", 0),
        ("total_error_replies", st.total_error_replies),
        ("total_blocking_keys", len(s.blocking.waiting)),
    ] + (s.replication.stats_fields() if s.replication is not None else [])


def _replication(s: Server) -> list[tuple[str, object]]:
    r = s.replication
    if r is not None:
        return r.info_fields()
    return [
        ("role", s.role), ("connected_slaves", 0), ("master_failover_state", "no-failover"),
        ("master_replid", s.run_id[:40]), ("master_replid2", "0" * 40),
        ("master_repl_offset", s.effects.offset), ("second_repl_offset", -1),
        ("repl_backlog_active", 0), ("repl_backlog_size", 1048576),
        ("repl_backlog_first_byte_offset", 0), ("repl_backlog_histlen", 0),
    ]


def _cpu(s: Server) -> list[tuple[str, object]]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return [("used_cpu_sys", f"{ru.ru_stime:.6f}"), ("used_cpu_user", f"{ru.ru_utime:.6f}")]


def _errorstats(s: Server) -> list[tuple[str, object]]:
    return [(f"errorstat_{code.decode(errors='replace')}", f"count={n}")
            for code, n in sorted(s.stats.errors.items())]


def _commandstats(s: Server) -> list[tuple[str, object]]:
    out = []
    for name, st in sorted(s.stats.calls.items()):
        calls, usec, rejected, failed = st[:4]
        per = usec / calls if calls else 0
        out.append((f"cmdstat_{name.decode(errors='replace')}",
                     f"calls={calls},usec={usec},usec_per_call={per:.2f},"
                     f"rejected_calls={rejected},failed_calls={failed}"))
    return out


def _pct_label(p: float) -> str:
    """Redis prints a percentile with %f and trailing zeros trimmed: p50, p99, p99.9."""
    return f"{p:f}".rstrip("0").rstrip(".")


def _latencystats(s: Server) -> list[tuple[str, object]]:
    ps = LATENCY_PERCENTILES
    out = []
    for name in sorted(s.stats.calls):
        values = s.stats.percentiles(name, ps)
        if values:
            out.append((f"latency_percentiles_usec_{name.decode(errors='replace')}",
                        ",".join(f"p{_pct_label(p)}={v:.3f}" for p, v in zip(ps, values, strict=True))))
    return out


def _keyspace(s: Server) -> list[tuple[str, object]]:
    n = len(s.db.data)
    if not n:
        return []
    return [("db0", f"keys={n},expires={len(s.db.expires)},avg_ttl=0,subexpiry=0")]


SECTIONS: dict[str, Callable[[Server], list[tuple[str, object]]]] = {
    "server": _server, "clients": _clients, "memory": _memory, "persistence": _persistence,
    "stats": _stats, "replication": _replication, "cpu": _cpu, "modules": lambda s: [],
    "errorstats": _errorstats,
    "cluster": lambda s: [("cluster_enabled", int(s.cluster is not None))] + (
        s.move_stats.fields(s.pauses.longest_ms) if s.cluster is not None else []),
    "keyspace": _keyspace, "commandstats": _commandstats, "latencystats": _latencystats,
}


def render(server: Server, names: list[str]) -> bytes:
    """The INFO text for the requested sections ('default', 'all', 'everything' or names)."""
    wanted: list[str] = []
    if not names:
        names = ["default"]
    for name in names:
        n = name.lower()
        if n == "default":
            wanted += DEFAULT_SECTIONS
        elif n in ("all", "everything"):
            wanted += ALL_SECTIONS
        elif n in SECTIONS:
            wanted.append(n)
    seen: set[str] = set()
    parts = []
    for n in wanted:
        if n in seen:
            continue
        seen.add(n)
        lines = [f"# {'CPU' if n == 'cpu' else n.capitalize()}"]
        lines += [f"{k}:{v}" for k, v in SECTIONS[n](server)]
        parts.append("\r\n".join(lines))
    text = "\r\n\r\n".join(parts)
    return (text + "\r\n").encode()
