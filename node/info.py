"""INFO: Redis's sections and field names, filled from the node's own counters."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from node import REDIS_VERSION, native
from node import __version__ as xshard_version

if TYPE_CHECKING:
    from node.cmdstats import CommandStats
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
        ("xshard_compiled", int(native.compiled())),
        ("redis_mode", "standalone"), ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64), ("multiplexing_api", "epoll"), ("python_version", platform.python_version()),
        ("process_id", os.getpid()), ("run_id", s.run_id),
        ("tcp_port", s.config.port or s.config.tls_port),
        ("server_time_usec", int(time.time() * 1e6)), ("uptime_in_seconds", up),
        ("uptime_in_days", up // 86400), ("hz", s.config.hz), ("executable", sys.argv[0]),
        ("config_file", s.config_file),
    ]


def _clients(s: Server) -> list[tuple[str, object]]:
    clients = s.clients.values()
    bl = s.blocking
    return [
        ("connected_clients", len(s.clients)), ("cluster_connections", 0),
        ("maxclients", s.config.maxclients),
        ("client_recent_max_input_buffer", 0), ("client_recent_max_output_buffer", max(
            (c.conn.transport.get_write_buffer_size() for c in clients
             if c.conn is not None and c.conn.transport is not None), default=0)),
        ("blocked_clients", bl.blocked_clients), ("tracking_clients", 0), ("pubsub_clients", 0),
        ("watching_clients", sum(1 for c in clients if c.watched)),
        ("clients_in_timeout_table", sum(1 for c in clients if c.blocked is not None
                                         and getattr(c.blocked, "timer", None) is not None)),
        ("total_watched_keys", len(s.db.watchers)),
        ("total_blocking_keys", bl.blocking_keys(False)),
        ("total_blocking_keys_on_nokey", bl.blocking_keys(True)),
    ]


_STARTUP_RSS = rss_bytes()  # the process's size once the command modules are loaded


def memory_figures(s: Server) -> dict[str, int]:
    """What INFO memory and MEMORY STATS report, from what this process knows cheaply
    (nothing walks the key space). Python has no jemalloc figures: the totals are the
    resident set size; the overheads are the key space's hash tables (at most 16384 slot
    sets), the replication backlog, the AOF buffer and the clients' unsent output."""
    rss = rss_bytes()
    s.peak_memory = max(s.peak_memory, rss)
    r, p, db = s.replication, s.persistence, s.db
    backlog = r.backlog.histlen if r is not None and r.backlog is not None else 0
    normal = sum(c.conn.transport.get_write_buffer_size() for c in s.clients.values()
                 if c.conn is not None and c.conn.transport is not None)
    main, expires = sys.getsizeof(db.data), sys.getsizeof(db.expires)
    slots = sys.getsizeof(db.slots) + sum(map(sys.getsizeof, db.slots.values()))
    aof = p.effbuf.size if p is not None else 0
    overhead = _STARTUP_RSS + backlog + normal + aof + main + expires + slots
    return {"rss": rss, "peak": s.peak_memory, "startup": _STARTUP_RSS, "backlog": backlog,
            "clients_normal": normal, "aof": aof, "main": main, "expires": expires,
            "slots": slots, "overhead": overhead, "dataset": max(rss - overhead, 0),
            "keys": len(db.data)}


def _memory(s: Server) -> list[tuple[str, object]]:
    m = memory_figures(s)
    rss, peak = m["rss"], m["peak"]
    net = max(rss - m["startup"], 1)
    total = _total_system_memory()
    return [
        ("used_memory", rss), ("used_memory_human", _human(rss)), ("used_memory_rss", rss),
        ("used_memory_rss_human", _human(rss)), ("used_memory_peak", peak),
        ("used_memory_peak_human", _human(peak)),
        ("used_memory_peak_perc", f"{rss * 100 / peak:.2f}%"),
        ("used_memory_overhead", m["overhead"]), ("used_memory_startup", m["startup"]),
        ("used_memory_dataset", m["dataset"]),
        ("used_memory_dataset_perc", f"{m['dataset'] * 100 / net:.2f}%"),
        ("allocator_allocated", rss), ("allocator_active", rss), ("allocator_resident", rss),
        ("total_system_memory", total), ("total_system_memory_human", _human(total)),
        ("used_memory_lua", 0), ("used_memory_vm_eval", 0), ("used_memory_lua_human", "0B"),
        ("used_memory_scripts_eval", 0), ("number_of_cached_scripts", 0),
        ("number_of_functions", 0), ("number_of_libraries", 0), ("used_memory_vm_functions", 0),
        ("used_memory_vm_total", 0), ("used_memory_vm_total_human", "0B"),
        ("used_memory_functions", 0), ("used_memory_scripts", 0),
        ("used_memory_scripts_human", "0B"),
        ("maxmemory", s.config.maxmemory), ("maxmemory_human", _human(s.config.maxmemory)),
        ("maxmemory_policy", "noeviction"),
        ("allocator_frag_ratio", "1.00"), ("allocator_frag_bytes", 0),
        ("allocator_rss_ratio", "1.00"), ("allocator_rss_bytes", 0),
        ("rss_overhead_ratio", "1.00"), ("rss_overhead_bytes", 0),
        ("mem_fragmentation_ratio", "1.00"), ("mem_fragmentation_bytes", 0),
        ("mem_not_counted_for_evict", 0), ("mem_replication_backlog", m["backlog"]),
        ("mem_total_replication_buffers", m["backlog"]), ("mem_clients_slaves", 0),
        ("mem_clients_normal", m["clients_normal"]), ("mem_cluster_links", 0),
        ("mem_aof_buffer", m["aof"]), ("mem_allocator", "pymalloc"),
        ("active_defrag_running", 0), ("lazyfree_pending_objects", 0), ("lazyfreed_objects", 0),
    ]


def _total_system_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


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
    ops, kin, kout, krin, krout = st.rates()
    zero = ("expired_stale_perc", "expired_time_cap_reached_count", "expire_cycle_cpu_milliseconds",
            "evicted_keys", "evicted_clients", "evicted_scripts", "total_eviction_exceeded_time",
            "current_eviction_exceeded_time", "keyspace_hits", "keyspace_misses",
            "pubsub_channels", "pubsub_patterns", "pubsubshard_channels")
    defrag = ("migrate_cached_sockets", "slave_expires_tracked_keys", "active_defrag_hits",
              "active_defrag_misses", "active_defrag_key_hits", "active_defrag_key_misses",
              "total_active_defrag_time", "current_active_defrag_time", "tracking_total_keys",
              "tracking_total_items", "tracking_total_prefixes", "unexpected_error_replies")
    saver = s.child_saver
    return [
        ("total_connections_received", st.total_connections),
        ("total_commands_processed", st.total_commands),
        ("instantaneous_ops_per_sec", round(ops)),
        ("total_net_input_bytes", st.net_input_bytes), ("total_net_output_bytes", st.net_output_bytes),
        ("total_net_repl_input_bytes", st.net_repl_input_bytes),
        ("total_net_repl_output_bytes", st.net_repl_output_bytes),
        ("instantaneous_input_kbps", f"{kin:.2f}"), ("instantaneous_output_kbps", f"{kout:.2f}"),
        ("instantaneous_input_repl_kbps", f"{krin:.2f}"),
        ("instantaneous_output_repl_kbps", f"{krout:.2f}"),
        ("rejected_connections", st.rejected_connections),
    ] + (s.replication.stats_fields() if s.replication is not None else [
        ("sync_full", 0), ("sync_partial_ok", 0), ("sync_partial_err", 0),
    ]) + [
        ("expired_keys", s.db.expired_keys), ("expired_subkeys", 0),
    ] + [(k, "0.00" if k == "expired_stale_perc" else 0) for k in zero] + [
        ("latest_fork_usec", int(saver.last_fork_ms * 1000) if saver is not None else 0),
        ("total_forks", saver.total_forks if saver is not None else 0),
    ] + [(k, 0) for k in defrag] + [
        ("total_error_replies", st.total_error_replies), ("dump_payload_sanitizations", 0),
        ("total_reads_processed", 0), ("total_writes_processed", 0),
        ("io_threaded_reads_processed", 0), ("io_threaded_writes_processed", 0),
        ("client_query_buffer_limit_disconnections", st.qbuf_disconnections),
        ("client_output_buffer_limit_disconnections", st.obuf_disconnections),
        ("reply_buffer_shrinks", 0), ("reply_buffer_expands", 0),
        ("eventloop_cycles", 0), ("eventloop_duration_sum", 0),
        ("eventloop_duration_cmd_sum", 0), ("instantaneous_eventloop_cycles_per_sec", 0),
        ("instantaneous_eventloop_duration_usec", 0),
        ("acl_access_denied_auth", s.acl.denied_auth), ("acl_access_denied_cmd", s.acl.denied_cmd),
        ("acl_access_denied_key", s.acl.denied_key), ("acl_access_denied_channel", 0),
    ]


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


def cpu_fields() -> list[tuple[str, object]]:
    """INFO cpu of this process (a node's or a router's)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return [("used_cpu_sys", f"{ru.ru_stime:.6f}"), ("used_cpu_user", f"{ru.ru_utime:.6f}")]


def errorstats_fields(stats: CommandStats) -> list[tuple[str, object]]:
    """INFO errorstats from a node's or a router's counters."""
    return [(f"errorstat_{code.decode(errors='replace')}", f"count={n}")
            for code, n in sorted(stats.errors.items())]


def _commandstats(s: Server) -> list[tuple[str, object]]:
    out = []
    for name, st in sorted(s.stats.calls.items()):
        calls, usec, rejected, failed = st.calls, st.usec, st.rejected, st.failed
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
    "stats": _stats, "replication": _replication, "cpu": lambda s: cpu_fields(),
    "modules": lambda s: [], "errorstats": lambda s: errorstats_fields(s.stats),
    "cluster": lambda s: [("cluster_enabled", int(s.cluster is not None))] + (
        s.move_stats.fields(s.pauses.longest_ms) if s.cluster is not None else []),
    "keyspace": _keyspace, "commandstats": _commandstats, "latencystats": _latencystats,
}


def wanted_sections(names: list[str], default: tuple[str, ...], every: tuple[str, ...],
                    known: Collection[str]) -> list[str]:
    """The sections INFO's arguments ask for, in order, once each: 'default', 'all' and
    'everything' expand, unknown names are dropped (Redis prints nothing for them)."""
    wanted: list[str] = []
    for name in names or ["default"]:
        n = name.lower()
        if n == "default":
            wanted += default
        elif n in ("all", "everything"):
            wanted += every
        elif n in known:
            wanted.append(n)
    return list(dict.fromkeys(wanted))


def format_sections(sections: list[tuple[str, list[tuple[str, object]]]]) -> bytes:
    """INFO text: '# Title' then 'field:value' lines per section, a blank line between."""
    parts = []
    for name, fields in sections:
        lines = [f"# {'CPU' if name == 'cpu' else name.capitalize()}"]
        lines += [f"{k}:{v}" for k, v in fields]
        parts.append("\r\n".join(lines))
    return ("\r\n\r\n".join(parts) + "\r\n").encode()


def render(server: Server, names: list[str]) -> bytes:
    """The INFO text for the requested sections ('default', 'all', 'everything' or names)."""
    wanted = wanted_sections(names, DEFAULT_SECTIONS, ALL_SECTIONS, SECTIONS)
    return format_sections([(n, SECTIONS[n](server)) for n in wanted])
