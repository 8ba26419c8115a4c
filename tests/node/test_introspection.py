"""Redis's own introspection on a node, against the redis-server oracle where the reply shape
is comparable: INFO latencystats (and the per-command histograms behind it)."""

from __future__ import annotations

from node.cmdstats import BOUNDS, MAX_EXP, CommandStats
from tests.support.rawresp import RawClient


def _info(c: RawClient, section: str) -> dict[str, str]:
    text = c.call("INFO", section)[1].decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


# -- the histograms, without a server ---------------------------------------------------------

def test_histogram_buckets_are_cumulative_and_fixed() -> None:
    st = CommandStats()
    for usec in (0, 1, 3, 3, 700, 5_000_000, 10**9):
        st.timed([b"XADD"], usec)
    st.entry(b"get")[2] += 1  # rejected only: never timed, no histogram
    hists = list(st.iter_histograms())
    assert [h[0] for h in hists] == ["xadd"]
    name, bounds, cum, total = hists[0]
    assert bounds == BOUNDS and len(bounds) == MAX_EXP + 2 and bounds[-1] == float("inf")
    assert bounds[0] == 1e-6 and bounds[10] == 1024e-6
    assert len(cum) == len(bounds) and cum == sorted(cum)
    assert cum[0] == 1  # 0 us < 1 us
    assert cum[1] == 2  # 1 us < 2 us
    assert cum[2] == 4  # 3 us < 4 us
    assert cum[9] == 4 and cum[10] == 5  # 700 us < 1024 us
    assert cum[MAX_EXP] == 6  # 5 s < 33.5 s; 1000 s only in +Inf
    assert cum[-1] == 7 == st.calls[b"xadd"][0]
    assert total == (0 + 1 + 3 + 3 + 700 + 5_000_000 + 10**9) / 1e6


def test_percentiles_interpolate_inside_a_bucket() -> None:
    st = CommandStats()
    for _ in range(100):
        st.timed([b"XADD"], 100)  # bucket [64, 128) us
    p50, p99 = st.percentiles(b"xadd", (50.0, 99.0))
    assert 64 <= p50 <= p99 <= 128
    st.timed([b"XADD"], 10_000)  # one slow call is the p99.9 but not the p50
    p50, p999 = st.percentiles(b"xadd", (50.0, 99.9))
    assert p50 < 128 and 8192 <= p999 <= 16384
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


def _run_script(handle) -> tuple[dict[str, str], dict[str, str]]:
    """INFO commandstats and latencystats after SCRIPT on a reset, flushed server."""
    c = RawClient(handle.host, handle.port)
    try:
        c.call("FLUSHALL")
        c.call("CONFIG", "RESETSTAT")
        for cmd in SCRIPT:
            c.call(*cmd)
        cmdstats = _info(c, "commandstats")
        latency = _info(c, "latencystats")
        text = c.call("INFO", "latencystats")[1].decode()
        assert text.startswith("# Latencystats\r\n")
    finally:
        c.call("FLUSHALL")
        c.close()
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
