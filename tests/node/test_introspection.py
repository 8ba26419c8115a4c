"""Redis's own introspection on a node, against the redis-server oracle where the reply shape
is comparable: INFO sections (latencystats and the per-command histograms behind it,
commandstats, clients, stats, memory ...), SLOWLOG, LATENCY and MEMORY STATS."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from node.cmdstats import BOUNDS, MAX_EXP, CommandStats, bound_usec
from tests.support.rawresp import RawClient


def _info(c: RawClient, section: str) -> dict[str, str]:
    text = c.call("INFO", section)[1].decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


# -- the histograms, without a server ---------------------------------------------------------

def test_histogram_buckets_are_cumulative_and_fixed() -> None:
    st = CommandStats()
    for usec in (0, 1, 3, 3, 700, 5_000_000, 10**9):
        st.timed([b"XADD"], usec)
    st.entry(b"get").rejected += 1  # rejected only: never timed, no histogram
    hists = list(st.iter_histograms())
    assert [h[0] for h in hists] == ["xadd"]
    name, bounds, cum, total = hists[0]
    assert bounds == BOUNDS and len(bounds) == MAX_EXP + 2 and bounds[-1] == float("inf")
    assert bounds[0] == 1.024e-6 and bounds[10] == 1024 * 1024e-9  # Redis's 1024 ns doubling
    assert len(cum) == len(bounds) and cum == sorted(cum)
    assert cum[0] == 2  # 0 and 1 us < 1.024 us
    assert cum[1] == 2  # nothing in [1.024, 2.048) us
    assert cum[2] == 4  # 3 us < 4.096 us
    assert cum[9] == 4 and cum[10] == 5  # 700 us < 1048.576 us
    assert cum[MAX_EXP] == 6  # 5 s < 34.4 s; 1000 s only in +Inf
    assert cum[-1] == 7 == st.calls[b"xadd"].calls
    assert total == (0 + 1 + 3 + 3 + 700 + 5_000_000 + 10**9) / 1e6
    assert [bound_usec(i) for i in range(9)] == [1, 2, 4, 8, 16, 32, 65, 131, 262]


def test_percentiles_interpolate_inside_a_bucket() -> None:
    st = CommandStats()
    for _ in range(100):
        st.timed([b"XADD"], 100)  # bucket [65.5, 131) us
    p50, p99 = st.percentiles(b"xadd", (50.0, 99.0))
    assert 65.536 <= p50 <= p99 <= 131.072
    st.timed([b"XADD"], 10_000)  # one slow call is the p99.9 but not the p50
    p50, p999 = st.percentiles(b"xadd", (50.0, 99.9))
    assert p50 < 131.072 and 8388.608 <= p999 <= 16777.216
    assert st.percentiles(b"nosuch", (50.0,)) == []


# -- INFO latencystats against the oracle -----------------------------------------------------

SCRIPT = [
    ["SET", "k", "v"], ["GET", "k"], ["XADD", "s", "*", "f", "v"], ["XADD", "s", "*", "f", "v"],
    ["XLEN", "s"], ["XRANGE", "s", "-", "+"], ["PING"],
    ["XADD", "k", "*", "f", "v"],  # WRONGTYPE: a failed call, still timed
    ["XTRIM", "s"],  # wrong arity: rejected, never timed
    ["NOSUCHCOMMAND"], ["CONFIG", "GET", "maxmemory"], ["CONFIG", "NOSUCH"],
    ["XGROUP", "CREATE", "s", "g", "0"], ["XGROUP", "CREATE", "s", "g", "0"],  # BUSYGROUP
    ["XINFO", "STREAM", "s"], ["XINFO", "STREAM"], ["DEL", "k", "s"],
]


@contextmanager
def _client(handle, *resets: tuple[str, ...]) -> Iterator[RawClient]:
    """A RESP client to `handle`'s server; once done (after a failure too) the `resets` run
    (settings a test changed), the server is flushed and the client closed."""
    c = RawClient(handle.host, handle.port)
    try:
        yield c
    finally:
        for cmd in resets:
            c.call(*cmd)
        c.call("FLUSHALL")
        c.close()


def _run_script(handle) -> tuple[dict[str, str], dict[str, str]]:
    """INFO commandstats and latencystats after SCRIPT on a reset, flushed server."""
    with _client(handle) as c:
        c.call("FLUSHALL")
        c.call("CONFIG", "RESETSTAT")
        for cmd in SCRIPT:
            c.call(*cmd)
        cmdstats = _info(c, "commandstats")
        latency = _info(c, "latencystats")
        text = c.call("INFO", "latencystats")[1].decode()
        assert text.startswith("# Latencystats\r\n")
    return cmdstats, latency


def _latencystats(handle) -> dict[str, list[str]]:
    stats = _run_script(handle)[1]
    out = {}
    for k, v in stats.items():
        fields = dict(f.split("=") for f in v.split(","))
        values = [float(fields[p]) for p in ("p50", "p99", "p99.9")]
        assert values == sorted(values) and values[0] >= 0, (k, v)
        out[k] = list(fields)
    return out


def test_latencystats_lists_what_redis_lists(node, oracle) -> None:
    mine = _latencystats(node)
    assert mine == _latencystats(oracle)
    assert "latency_percentiles_usec_xadd" in mine
    assert "latency_percentiles_usec_xtrim" not in mine


def _counts(handle) -> dict[str, str]:
    """commandstats without the times: calls, rejected_calls, failed_calls per command."""
    stats = _run_script(handle)[0]
    return {k: ",".join(f for f in v.split(",") if "usec" not in f) for k, v in stats.items()}


def test_commandstats_count_subcommands_apart_as_redis_does(node, oracle) -> None:
    mine = _counts(node)
    assert mine == _counts(oracle)
    assert "cmdstat_config|get" in mine and "cmdstat_config" not in mine
    assert mine["cmdstat_xgroup|create"] == "calls=2,rejected_calls=0,failed_calls=1"
    assert mine["cmdstat_xtrim"] == "calls=0,rejected_calls=1,failed_calls=0"


# -- SLOWLOG ----------------------------------------------------------------------------------

def _strip_entry(e: tuple) -> tuple:
    """A SLOWLOG entry without what differs between servers (id, time, duration, port)."""
    _, items = e
    (_, _id), (_, ts), (_, us), args, (_, addr), name = items
    assert ts > 1_700_000_000 and us >= 0
    host, port = addr.rsplit(b":", 1)
    assert host == b"127.0.0.1" and int(port) > 0
    return args, name


def _slowlog_session(handle) -> list:
    out: list = []
    with _client(handle,
                 ("CONFIG", "SET", "slowlog-log-slower-than", "10000"),
                 ("CONFIG", "SET", "slowlog-max-len", "128"),
                 ("SLOWLOG", "RESET")) as c:
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        c.call("CONFIG", "SET", "slowlog-max-len", "6")
        out.append(c.call("SLOWLOG", "RESET"))
        c.call("CLIENT", "SETNAME", "tester")
        c.call("XADD", "s", "1-1", *(f"f{i}" for i in range(40)))  # 43 args: cut at 32
        c.call("SET", "k", "x" * 300)  # cut at 128 bytes
        c.call("AUTH", "nopass")  # an error, still logged, redacted
        c.call("CONFIG", "SET", "masterauth", "secret")
        c.call("CONFIG", "SET", "masterauth", "")
        out.append(c.call("SLOWLOG", "LEN"))  # 6: the oldest fell out
        entries = c.call("SLOWLOG", "GET", "-1")
        out.append([_strip_entry(e) for e in entries[1]])
        out.append(len(c.call("SLOWLOG", "GET")[1]))  # default count 10, max-len 6
        out.append(len(c.call("SLOWLOG", "GET", "2")[1]))
        out.append(c.call("SLOWLOG", "GET", "-2"))
        out.append(c.call("SLOWLOG", "GET", "x"))
        out.append(c.call("SLOWLOG", "NOSUCH"))
        out.append(c.call("SLOWLOG", "LEN", "x"))
        out.append(c.call("SLOWLOG", "HELP"))
        got = c.call("CONFIG", "GET", "slowlog-*")[1]  # Redis's order is its dict's
        out.append(sorted(zip(got[::2], got[1::2], strict=True)))
        out.append(c.call("CONFIG", "SET", "slowlog-max-len", "-1"))
    return out


def test_slowlog_matches_redis(node, oracle) -> None:
    mine = _slowlog_session(node)
    assert mine == _slowlog_session(oracle)
    entries = mine[2]
    assert len(entries) == 6
    xadd = next(args for args, _ in entries if args[1][0][1].lower() == b"xadd")
    assert len(xadd[1]) == 32 and xadd[1][-1] == ("$", b"... (12 more arguments)")


def test_slowlog_threshold_keeps_fast_commands_out(node) -> None:
    c = RawClient(node.host, node.port)
    try:
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "1000000")
        c.call("SLOWLOG", "RESET")
        for _ in range(20):
            c.call("PING")
        assert c.call("SLOWLOG", "LEN") == (":", 0)
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "-1")
        c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
        c.call("PING")
        assert c.call("SLOWLOG", "LEN") == (":", 0)
    finally:
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        c.close()


# -- LATENCY ----------------------------------------------------------------------------------

def _latency_session(handle) -> list:
    out: list = []
    with _client(handle) as c:
        c.call("CONFIG", "RESETSTAT")
        out.append(c.call("LATENCY", "RESET"))
        out.append(c.call("LATENCY", "LATEST"))
        out.append(c.call("LATENCY", "HISTORY", "command"))
        out.append(c.call("LATENCY", "HISTORY"))
        out.append(c.call("LATENCY", "NOSUCH"))
        out.append(c.call("CONFIG", "GET", "latency-monitor-threshold"))
        for _ in range(3):
            c.call("SET", "k", "v")
        c.call("XADD", "s", "*", "f", "v")
        for proto in (2, 3):
            c.hello(proto)
            h = c.call("LATENCY", "HISTOGRAM", "set", "xadd", "nosuch", "config")
            # keep names, calls and that the bucket keys are powers of two with growing counts
            pairs = h[1] if h[0] == "%" else list(zip(h[1][::2], h[1][1::2], strict=True))
            shape = []
            for name, body in pairs:
                fields = body[1] if body[0] == "%" else list(zip(body[1][::2], body[1][1::2],
                                                                  strict=True))
                d = dict(fields)
                buckets = d[("$", b"histogram_usec")]
                bl = buckets[1] if buckets[0] == "%" else list(
                    zip(buckets[1][::2], buckets[1][1::2], strict=True))
                keys = [k[1] for k, _ in bl]
                counts = [v[1] for _, v in bl]
                # 1024 ns doubling (Redis's HdrHistogram rounds its bounds up a little: 132)
                assert all(any(abs(k - bound_usec(i)) <= bound_usec(i) // 50 + 1
                               for i in range(40)) for k in keys), keys
                assert keys == sorted(keys) and counts == sorted(counts)
                assert counts[-1] == d[("$", b"calls")][1]
                shape.append((h[0], body[0], buckets[0], name, d[("$", b"calls")]))
            out.append(sorted(shape))
        c.hello(2)
    return out


def test_latency_replies_match_redis(node, oracle) -> None:
    mine = _latency_session(node)
    assert mine == _latency_session(oracle)
    assert [s[3] for s in mine[-1]] == [("$", b"config|get"), ("$", b"config|resetstat"),
                                        ("$", b"set"), ("$", b"xadd")]


def test_latency_monitor_samples_slow_commands(xnode) -> None:
    """Redis's events: DEBUG SLEEP is a `command`, PING a `fast-command`; a sample per second
    keeps the slowest, the max is kept across them, RESET forgets the event."""
    n = xnode("--enable-debug-command", "yes", "--latency-monitor-threshold", "5")
    c = RawClient(n.host, n.port)
    try:
        c.call("DEBUG", "SLEEP", "0.02")
        c.call("DEBUG", "SLEEP", "0.01")
        c.call("PING")  # fast, well under 5 ms
        latest = c.call("LATENCY", "LATEST")[1]
        assert len(latest) == 1
        name, ts, last, mx = (x[1] for x in latest[0][1])
        assert name == b"command" and ts > 1_700_000_000 and mx >= 20 and last >= 10
        hist = c.call("LATENCY", "HISTORY", "command")[1]
        assert 1 <= len(hist) <= 2 and all(s[1][1][1] >= 10 for s in hist)
        assert c.call("LATENCY", "RESET", "command", "nosuch") == (":", 1)
        assert c.call("LATENCY", "LATEST") == ("*", [])
        c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
        c.call("DEBUG", "SLEEP", "0.01")
        assert c.call("LATENCY", "LATEST") == ("*", [])
        # SLOWLOG's default threshold (10 ms) caught the sleeps
        assert c.call("SLOWLOG", "LEN")[1] >= 2
    finally:
        c.close()


# -- MEMORY STATS -----------------------------------------------------------------------------

def _memory_stats_shape(handle) -> list:
    out = []
    with _client(handle) as c:
        c.call("FLUSHALL")
        c.call("XADD", "s", "*", "f", "v")
        for proto in (2, 3):
            c.hello(proto)
            r = c.call("MEMORY", "STATS")
            pairs = r[1] if r[0] == "%" else list(zip(r[1][::2], r[1][1::2], strict=True))
            out.append((r[0], [(k[1], v[0] if k[1] != b"db.0" else
                                [x[0][1] for x in (v[1] if v[0] == "%" else
                                                   zip(v[1][::2], v[1][1::2], strict=True))])
                               for k, v in pairs]))
        c.hello(2)
        out.append(c.call("MEMORY", "STATS", "x"))
    return out


def test_memory_stats_has_redis_fields_and_types(node, oracle) -> None:
    assert _memory_stats_shape(node) == _memory_stats_shape(oracle)


# -- INFO sections: Redis's field names -------------------------------------------------------

def _fields(handle, section: str) -> list[str]:
    with _client(handle) as c:
        c.call("CONFIG", "RESETSTAT")  # errorstats: only this test's error
        c.call("SET", "k", "v")
        c.call("NOSUCH")
        return list(_info(c, section))


@pytest.mark.parametrize("section", ["clients", "stats", "memory", "keyspace", "errorstats",
                                     "cpu", "replication", "persistence"])
def test_info_section_has_every_field_redis_has(node, oracle, oracle72, section: str) -> None:
    """Every field name redis-server 7.0 and the 7.2+ reference print is printed here too
    (exporters look them up by name); xshard may add fields of Redis 7.4."""
    mine = set(_fields(node, section))
    for ref in (oracle, oracle72):
        theirs = set(_fields(ref, section)) - REFERENCE_ONLY.get(section, set())
        assert theirs <= mine, sorted(theirs - mine)


# Fields of a reference that Redis 7.4 does not print (valkey's own), or that describe a
# process xshard is not: a fork-based saver's progress and its copy-on-write sizes.
REFERENCE_ONLY = {
    "clients": {"paused_reason", "paused_actions", "paused_timeout_milliseconds"},
    "stats": {"io_threaded_freed_objects", "io_threaded_accept_processed",
              "io_threaded_poll_processed", "io_threaded_total_prefetch_batches",
              "io_threaded_total_prefetch_entries"},
    "memory": {"allocator_muzzy", "mem_overhead_db_hashtable_rehashing"},
    "replication": {"replicas_waiting_psync"},
    "cpu": {"used_cpu_sys_children", "used_cpu_user_children", "used_cpu_sys_main_thread",
            "used_cpu_user_main_thread"},
    "persistence": {"current_cow_peak", "current_cow_size", "current_cow_size_age",
                    "current_fork_perc", "current_save_keys_processed", "current_save_keys_total",
                    "rdb_last_bgsave_time_sec", "rdb_saves", "rdb_last_load_keys_expired",
                    "rdb_last_load_keys_loaded", "aof_rewrites_consecutive_failures",
                    "rdb_last_cow_size", "aof_last_cow_size", "module_fork_in_progress",
                    "module_fork_last_cow_size", "aof_current_rewrite_time_sec",
                    "aof_rewrite_buffer_length", "aof_pending_bio_fsync", "aof_delayed_fsync",
                    "rdb_current_bgsave_time_sec"},
}


def _blocking_keys(handle) -> tuple[dict[str, str], list]:
    """INFO clients while one XREAD waits on `a` and two XREADGROUPs on `b`, and after."""
    from tests.support.groupdiff import Deferred, wait_blocked

    c = RawClient(handle.host, handle.port)
    c.call("FLUSHALL")
    c.call("XGROUP", "CREATE", "b", "g", "$", "MKSTREAM")
    readers = [Deferred(handle) for _ in range(3)]
    try:
        readers[0].send("XREAD", "BLOCK", "0", "STREAMS", "a", "$")
        readers[1].send("XREADGROUP", "GROUP", "g", "x", "BLOCK", "0", "STREAMS", "b", ">")
        readers[2].send("XREADGROUP", "GROUP", "g", "y", "BLOCK", "0", "STREAMS", "b", ">")
        wait_blocked(handle, 3)
        during = {k: v for k, v in _info(c, "clients").items()
                  if k.startswith("total_blocking") or k == "blocked_clients"}
        c.call("DEL", "b")  # the XREADGROUPs end with an error
        after = [readers[1].read()[0], readers[2].read()[0]]
        after.append({k: v for k, v in _info(c, "clients").items()
                      if k.startswith("total_blocking")})
        return during, after
    finally:
        for r in readers:
            r.close()
        c.call("FLUSHALL")
        c.close()


def test_blocking_keys_counted_as_redis_does(node, oracle72) -> None:
    mine = _blocking_keys(node)
    assert mine == _blocking_keys(oracle72)
    assert mine[0] == {"blocked_clients": "3", "total_blocking_keys": "2",
                       "total_blocking_keys_on_nokey": "1"}


def test_instantaneous_ops_follow_the_load(node) -> None:
    c = RawClient(node.host, node.port)
    try:
        deadline = time.monotonic() + 20
        while True:
            c.pipeline([["PING"]] * 200)
            stats = _info(c, "stats")
            if int(stats["instantaneous_ops_per_sec"]) > 0:
                break
            assert time.monotonic() < deadline, stats
        assert float(stats["instantaneous_input_kbps"]) > 0
    finally:
        c.close()


# -- MONITOR ----------------------------------------------------------------------------------

MONITORED = [
    ["SET", "k", 'a "b"\n\x01'], ["XADD", "s", "1-1", "f", "v"], ["PING"],
    ["CONFIG", "GET", "maxmemory"],  # admin: not shown
    ["AUTH", "nopass"],  # an error, shown redacted
    ["MULTI"], ["SET", "k2", "v"], ["EXEC"],
    ["XREAD", "COUNT", "1", "STREAMS", "s", "0"],
    ["XREAD", "BLOCK", "10", "STREAMS", "s", "$"],  # shown once, when it times out
    ["DEL", "k", "k2", "s"],
    ["ECHO", "done"],
]


def _monitor_lines(handle) -> list[tuple[str, str]]:
    """What a MONITOR client sees while another client runs MONITORED: (client kind, args)."""
    import re

    mon = RawClient(handle.host, handle.port)
    c = RawClient(handle.host, handle.port)
    try:
        assert mon.call("MONITOR") == ("+", b"OK")
        for cmd in MONITORED:
            c.call(*cmd)
        lines = []
        while True:
            kind, text = mon.read_reply()
            assert kind == "+"
            m = re.fullmatch(rb"(\d+)\.(\d{6}) \[0 127\.0\.0\.1:(\d+)\] (.*)", text)
            assert m, text
            lines.append(m.group(4).decode())
            if m.group(4) == b'"ECHO" "done"':
                break
        mon.send_raw(b"*1\r\n$5\r\nRESET\r\n")  # RESET leaves MONITOR
        assert mon.read_reply() == ("+", b"RESET")
        c.call("PING")
        assert mon.call("PING") == ("+", b"PONG")  # no line for the other client's PING
        return lines
    finally:
        mon.close()
        c.close()


def test_monitor_matches_redis(node, oracle) -> None:
    mine = _monitor_lines(node)
    assert mine == _monitor_lines(oracle)
    assert mine[0] == r'"SET" "k" "a \"b\"\n\x01"' and '"AUTH" "(redacted)"' in mine
    assert not any("CONFIG" in line for line in mine)


def test_monitor_twice_and_in_exec(node, oracle) -> None:
    for h in (node, oracle):
        c = RawClient(h.host, h.port)
        try:
            c.call("MULTI")
            c.call("MONITOR")
            assert c.call("EXEC") == ("*", [("-", b"ERR MONITOR isn't allowed for DENY "
                                                  b"BLOCKING client")])
            assert c.call("MONITOR") == ("+", b"OK")
            c.send_raw(b"*1\r\n$7\r\nMONITOR\r\n*1\r\n$4\r\nPING\r\n")  # MONITOR again: no reply
            assert c.read_reply() == ("+", b"PONG")
        finally:
            c.close()
