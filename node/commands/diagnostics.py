"""What the node says about itself: SLOWLOG, LATENCY, MEMORY STATS and MONITOR.

    MONITOR
    SLOWLOG GET [count] | LEN | RESET | HELP
    LATENCY LATEST | HISTORY event | RESET [event ...] | HISTOGRAM [command ...] | HELP
    MEMORY STATS (the rest of MEMORY is in node/commands/keys.py)

The logs live in node/slowlog.py and node/latency.py; LATENCY HISTOGRAM reads the per-command
histograms of node/cmdstats.py, whose buckets are Redis's (1024 ns doubling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from node import command_table, errors
from node.client import Client
from node.cmdstats import CallStats, bound_usec, buckets
from node.commands import command, help_or_unknown_subcommand
from node.info import memory_figures
from node.resp import OK, Map, ReplyError, encode, integer

if TYPE_CHECKING:
    from node.server import Server

SLOWLOG_HELP = [
    b"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET [<count>]",
    b"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    b"    Entries are made of:",
    b"    id, timestamp, time in microseconds, arguments array, client IP and port,",
    b"    client name",
    b"LEN", b"    Return the length of the slowlog.",
    b"RESET", b"    Reset the slowlog.",
    b"HELP", b"    Prints this help.",
]

LATENCY_HELP = [
    b"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"HISTORY <event>", b"    Return time-latency samples for the <event> class.",
    b"LATEST", b"    Return the latest latency samples for all events.",
    b"RESET [<event> ...]", b"    Reset latency data of one or more <event> classes.",
    b"    (default: reset all data for all event classes)",
    b"HISTOGRAM [COMMAND ...]",
    b"    Return a cumulative distribution of latencies in the format of a histogram for the "
    b"specified command names.",
    b"    If no commands are specified then all histograms are replied.",
    b"HELP", b"    Prints this help.",
]


@command(b"monitor")
def monitor(c: Client, argv: list[bytes]) -> bytes:
    """From now on the client gets every command the node runs (node/monitor.py). As in
    Redis, a second MONITOR (or one from a replication link) answers nothing, and inside
    EXEC it is refused."""
    if c.in_exec:
        raise ReplyError(errors.MONITOR_DENY_BLOCKING)
    if c.id in c.server.monitors or c.is_master:
        return b""
    c.server.monitors[c.id] = c
    return OK


@command(b"slowlog")
def slowlog(c: Client, argv: list[bytes]) -> bytes:
    log = c.server.slowlog  # type: ignore[attr-defined]
    sub = argv[1].lower()
    if sub == b"get":
        count = 10
        if len(argv) == 3:
            try:
                count = int(argv[2])
            except ValueError:
                raise ReplyError(errors.SLOWLOG_COUNT) from None
            if count < -1:
                raise ReplyError(errors.SLOWLOG_COUNT)
        return log.get_reply(count, c.proto)
    if sub == b"len":
        return log.len_reply()
    if sub == b"reset":
        log.reset()
        return OK
    return help_or_unknown_subcommand(c, argv, b"SLOWLOG", SLOWLOG_HELP)


@command(b"latency")
def latency(c: Client, argv: list[bytes]) -> bytes:
    mon = c.server.latency  # type: ignore[attr-defined]
    sub = argv[1].lower()
    if sub == b"latest":
        return mon.latest_reply(c.proto)
    if sub == b"history":
        return mon.history_reply(argv[2], c.proto)
    if sub == b"reset":
        return integer(mon.reset(argv[2:]))
    if sub == b"histogram":
        return encode(histograms(c.server.stats.calls, argv[2:]), c.proto)
    return help_or_unknown_subcommand(c, argv, b"LATENCY", LATENCY_HELP)


def histograms(calls: dict[bytes, CallStats], names: list[bytes]) -> Map:
    """LATENCY HISTOGRAM: per command that ran, its timed calls and the cumulative count at
    bucket bound (in whole us: 1, 2, 4 ... 32, 65, 131 ...) where the count grew (Redis's
    fillCommandCDF).
    Named commands that are unknown or never ran are left out; a container names its
    subcommands."""
    if not names:
        wanted = sorted(calls)
    else:
        wanted = []
        for raw in names:
            name = raw.lower()
            spec = command_table.lookup(name)
            if spec is None:
                continue
            if spec.subcommands:
                wanted += sorted(s.name for s in spec.subcommands.values())
            else:
                wanted.append(name)
    out = Map()
    for name in dict.fromkeys(wanted):
        st = calls.get(name)
        h = buckets(st) if st is not None else []
        if not any(h):
            continue
        cdf = Map()
        acc = prev = 0
        for i, n in enumerate(h):
            acc += n
            if acc > prev:
                cdf.append((bound_usec(i), acc))
            prev = acc
        out.append((name, Map([(b"calls", acc), (b"histogram_usec", cdf)])))
    return out


def memory_stats(server: Server) -> Map:
    """MEMORY STATS with Redis's field names in Redis's order, from the figures INFO memory
    shows (node/info.py memory_figures): the allocator and fragmentation fields say 1.0 / 0,
    as Python has no jemalloc figures."""
    m = memory_figures(server)
    rss, peak, keys = m["rss"], m["peak"], m["keys"]
    net = max(rss - m["startup"], 1)
    out = Map([
        (b"peak.allocated", peak), (b"total.allocated", rss),
        (b"startup.allocated", m["startup"]), (b"replication.backlog", m["backlog"]),
        (b"clients.slaves", 0), (b"clients.normal", m["clients_normal"]), (b"cluster.links", 0),
        (b"aof.buffer", m["aof"]), (b"lua.caches", 0), (b"functions.caches", 0),
    ])
    if keys:
        out.append((b"db.0", Map([(b"overhead.hashtable.main", m["main"]),
                                  (b"overhead.hashtable.expires", m["expires"]),
                                  (b"overhead.hashtable.slot-to-keys", m["slots"])])))
    out += [
        (b"overhead.total", m["overhead"]), (b"keys.count", keys),
        (b"keys.bytes-per-key", net // keys if keys else 0), (b"dataset.bytes", m["dataset"]),
        (b"dataset.percentage", m["dataset"] * 100.0 / net),
        (b"peak.percentage", rss * 100.0 / peak),
        (b"allocator.allocated", rss), (b"allocator.active", rss), (b"allocator.resident", rss),
        (b"allocator-fragmentation.ratio", 1.0), (b"allocator-fragmentation.bytes", 0),
        (b"allocator-rss.ratio", 1.0), (b"allocator-rss.bytes", 0),
        (b"rss-overhead.ratio", 1.0), (b"rss-overhead.bytes", 0),
        (b"fragmentation", 1.0), (b"fragmentation.bytes", 0),
    ]
    return out
