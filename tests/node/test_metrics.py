"""The node's /metrics, /healthz and /readyz (node/metrics.py, node/metricsserver.py), read over
HTTP from a real node process and compared with what the node answers over RESP."""

from __future__ import annotations

import shutil

import pytest
import redis
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from node.streammetrics import logical_of
from tests.support.procs import free_port, wait_until
from tests.support.scrape import fetch, get, promtool_check, samples, value

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian package prometheus) is not installed")


def _metrics_node(xnode, *args: str):
    port = free_port()
    return xnode("--metrics-port", str(port), *args), port


def _stream_with_pending(r, entries: int) -> list:
    """Stream "s" with `entries` entries, group "g" from the start, 2 of them read by "c"."""
    ids = [r.xadd("s", {"i": i}) for i in range(entries)]
    r.xgroup_create("s", "g", id="0")
    r.xreadgroup("g", "c", {"s": ">"}, count=2)
    return ids


def _xinfo_groups(r, key: str) -> dict[str, dict]:
    return {g["name"].decode(): g for g in r.xinfo_groups(key)}


def test_metrics_off_by_default(xnode) -> None:
    n = xnode()
    r = n.client()
    assert r.config_get("metrics-port") == {"metrics-port": "0"}


def test_endpoints_and_formats(xnode) -> None:
    n, port = _metrics_node(xnode)
    status, _, body = get(port, "/healthz")
    assert status == 200 and body.strip() == "ok"
    status, _, body = get(port, "/readyz")
    assert status == 200 and body.strip() == "ready"
    status, ctype, text = get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert value(text, "process_resident_memory_bytes")
    r = n.client()
    odd = 'we"ird\\name\nx'  # label values are escaped
    for i in range(250):  # more than one chunk of streams
        r.xadd(f"s{i}", {"a": 1})
    r.xadd(odd, {"a": 1})
    r.xgroup_create(odd, "g", id="0")
    r.xreadgroup("g", "c", {odd: ">"})
    status, ctype, om = get(port, "/metrics", accept="application/openmetrics-text; "
                            "version=1.0.0; charset=utf-8")
    assert ctype.startswith("application/openmetrics-text") and om.rstrip().endswith("# EOF")
    fams = {f.name: f for f in openmetrics_families(om)}  # the strict OpenMetrics parser
    assert len(fams["xshard_stream_length"].samples) == 251
    assert {s.labels["stream"] for s in fams["xshard_stream_group_lag"].samples} == {odd}
    assert value(fetch(port), "xshard_delivery_latency_seconds_count", stream=odd,
                 group="g") == 1
    assert get(port, "/nothing")[0] == 404


def test_stream_families_match_the_node(xnode) -> None:
    n, port = _metrics_node(xnode)
    r = n.client()
    for i in range(10):
        r.xadd("orders", {"i": i})
    r.xgroup_create("orders", "billing", id="0")
    r.xgroup_create("orders", "audit", id="0")
    got = r.xreadgroup("billing", "c1", {"orders": ">"}, count=4)
    assert len(got[0][1]) == 4
    r.xack("orders", "billing", got[0][1][0][0])
    r.xreadgroup("billing", "c2", {"orders": ">"}, count=2)
    r.xreadgroup("audit", "c1", {"orders": ">"}, noack=True)  # NOACK deliveries count too
    r.xadd("manual", {"a": 1}, id="1-1")  # an ID that is no time: length yes, latency no
    r.xgroup_create("manual", "g", id="0")
    r.xreadgroup("g", "c", {"manual": ">"})
    with pytest.raises(redis.ResponseError):
        r.xadd("orders", {"x": 1}, id="1-1")  # an error counted for XADD
    text = fetch(port)
    groups = _xinfo_groups(r, "orders")
    for g in ("billing", "audit"):
        assert value(text, "xshard_stream_group_lag", stream="orders", group=g) == groups[g]["lag"]
        assert (value(text, "xshard_stream_group_pending", stream="orders", group=g)
                == groups[g]["pending"])
    assert value(text, "xshard_stream_length", stream="orders") == r.xlen("orders") == 10
    assert value(text, "xshard_stream_group_nacked_total", stream="orders", group="billing") == 0
    r.xnack("orders", "billing", "FAIL", *[e[0] for e in got[0][1][1:]])  # 3 released
    assert value(fetch(port), "xshard_stream_group_nacked_total", stream="orders",
                 group="billing") == 3
    assert value(text, "xshard_stream_entries_added_total", stream="orders") == 10
    # Every delivery of a new entry is observed once, per group.
    assert value(text, "xshard_delivery_latency_seconds_count", stream="orders",
                 group="billing") == 6
    assert value(text, "xshard_delivery_latency_seconds_count", stream="orders",
                 group="audit") == 10
    assert value(text, "xshard_delivery_latency_seconds_count", stream="manual",
                 group="g") == 0
    assert value(text, "xshard_stream_length", stream="manual") == 1
    # Re-reading the consumer's own history is no first delivery.
    r.xreadgroup("billing", "c1", {"orders": "0"})
    text = fetch(port)
    assert value(text, "xshard_delivery_latency_seconds_count", stream="orders",
                 group="billing") == 6
    # Commands and errors come from the node's commandstats.
    stats = r.info("commandstats")
    assert value(text, "xshard_commands_total", command="xadd") == stats["cmdstat_xadd"]["calls"]
    assert value(text, "xshard_command_errors_total", command="xadd") == 1
    calls = stats["cmdstat_xadd"]["calls"]  # 10 + 1 on "manual" + the refused one
    assert value(text, "xshard_command_duration_seconds_count", command="xadd") == calls == 12
    assert value(text, "xshard_command_duration_seconds_bucket", command="xadd",
                 le="+Inf") == 12
    assert value(text, "xshard_role", role="primary") == 1
    assert value(text, "xshard_node_fenced") == 0
    assert value(text, "xshard_replication_offset") > 0
    # Per-consumer series are off unless asked.
    assert not samples(text, "xshard_stream_group_consumer_idle_seconds")


def test_oldest_pending_age_and_consumers(xnode) -> None:
    n, port = _metrics_node(xnode, "--metrics-consumers", "yes")
    r = n.client()
    r.xadd("jobs", {"a": 1})
    r.xgroup_create("jobs", "workers", id="0")
    r.xreadgroup("workers", "stuck", {"jobs": ">"})
    # The age grows while nothing is acknowledged (waited on, never slept a fixed time).
    wait_until(lambda: value(fetch(port), "xshard_stream_group_oldest_pending_age_seconds",
                             stream="jobs", group="workers") >= 0.3, 10, what="age grows")
    text = fetch(port)
    idle = value(text, "xshard_stream_group_consumer_idle_seconds", stream="jobs",
                 group="workers", consumer="stuck")
    assert idle is not None and idle >= 0.3
    r.xack("jobs", "workers", r.xrange("jobs")[0][0])
    text = fetch(port)
    assert value(text, "xshard_stream_group_oldest_pending_age_seconds", stream="jobs",
                 group="workers") == 0
    # An XNACK'ed entry (delivery time 0, nobody's) is not a held one: the age is that of
    # the lowest entry a consumer owns, not 56 years.
    r.xadd("jobs", {"a": 2})
    r.xadd("jobs", {"a": 3})
    first, second = (e[0] for e in r.xreadgroup("workers", "w", {"jobs": ">"})[0][1])
    r.xnack("jobs", "workers", "FAIL", first)
    age = value(fetch(port), "xshard_stream_group_oldest_pending_age_seconds", stream="jobs",
                group="workers")
    assert 0 <= age < 3600
    r.xack("jobs", "workers", second)
    assert value(fetch(port), "xshard_stream_group_oldest_pending_age_seconds", stream="jobs",
                 group="workers") == 0


def test_null_lag_is_estimated(xnode) -> None:
    n, port = _metrics_node(xnode)
    r = n.client()
    ids = _stream_with_pending(r, 6)
    r.xdel("s", ids[4])  # a tombstone after the group's last ID: Redis says lag NULL
    assert _xinfo_groups(r, "s")["g"]["lag"] is None
    lag = value(fetch(port), "xshard_stream_group_lag", stream="s", group="g")
    assert lag is not None and 0 <= lag <= 4


def test_stream_pattern_and_cap(xnode) -> None:
    n, port = _metrics_node(xnode, "--metrics-streams", "keep:*", "--metrics-max-streams", "3")
    r = n.client()
    for i in range(5):
        r.xadd(f"keep:{i}", {"a": 1})
    r.xadd("skip:0", {"a": 1})
    text = fetch(port)
    tracked = {dict(k)["stream"] for k in samples(text, "xshard_stream_length")}
    assert len(tracked) == 3 and all(s.startswith("keep:") for s in tracked)
    assert value(text, "xshard_metrics_tracked_streams") == 3
    gone = sorted(tracked)[0]
    r.delete(gone)  # a deleted stream makes room for another
    text = fetch(port)
    now = {dict(k)["stream"] for k in samples(text, "xshard_stream_length")}
    assert gone not in now and len(now) == 3
    r.config_set("metrics-max-streams", 1)
    assert len(samples(fetch(port), "xshard_stream_length")) == 1


def test_replica_exports_the_primarys_values(xnode) -> None:
    p, pport = _metrics_node(xnode)
    rp = p.client()
    _stream_with_pending(rp, 5)
    rep, rport = _metrics_node(xnode, "--replicaof", "127.0.0.1", str(p.port))
    rr = rep.client()
    wait_until(lambda: rr.info("replication")["master_link_status"] == "up"
               and rr.info("replication")["master_repl_offset"]
               == rp.info("replication")["master_repl_offset"], 20, what="replica caught up")
    primary, replica = fetch(pport), fetch(rport)
    for name in ("xshard_stream_length", "xshard_stream_group_lag",
                 "xshard_stream_group_pending", "xshard_stream_entries_added_total"):
        assert samples(replica, name) == samples(primary, name), name
    assert value(replica, "xshard_role", role="replica") == 1
    # The primary sees its replica's lag, in bytes and in seconds (caught up: 0).
    wait_until(lambda: value(fetch(pport), "xshard_replica_lag_bytes") == 0, 10,
               what="replica acked")
    assert value(fetch(pport), "xshard_replica_lag_seconds") == 0
    # With the link down the replica exports no per-stream figures rather than stale ones.
    p.stop()
    wait_until(lambda: rr.info("replication")["master_link_status"] == "down", 20,
               what="link down")
    assert not samples(fetch(rport), "xshard_stream_length")


@needs_promtool
def test_promtool_check_metrics(xnode) -> None:
    n, port = _metrics_node(xnode, "--metrics-consumers", "yes", "--appendonly", "yes")
    r = n.client()
    r.xadd("s", {"a": 1})
    r.xgroup_create("s", "g", id="0")
    r.xreadgroup("g", "c", {"s": ">"})

    assert promtool_check(fetch(port)) == ""


def test_partition_keys_carry_their_logical_stream(xnode) -> None:
    n, port = _metrics_node(xnode, "--metrics-consumers", "yes")
    r = n.client()
    parts = [f"{{t{p}}}ev#{p}/8" for p in range(3)]
    for p, k in enumerate(parts):
        for i in range(p + 1):
            r.xadd(k, {"i": i})
        r.xgroup_create(k, "g", id="0")
        r.xreadgroup("g", "c", {k: ">"}, count=1)
    r.xadd("plain", {"a": 1})
    r.xadd("{t9}lookalike#08/8", {"a": 1})  # a leading zero: a plain key
    text = fetch(port)
    for name in ("xshard_stream_length", "xshard_stream_entries_added_total"):
        got = {dict(k)["stream"]: dict(k) for k in samples(text, name)}
        for p, k in enumerate(parts):
            assert got[k] == {"stream": k, "logical_stream": "ev", "partition": str(p)}, name
        assert got["plain"] == {"stream": "plain"}
        assert got["{t9}lookalike#08/8"] == {"stream": "{t9}lookalike#08/8"}
    for p, k in enumerate(parts):
        labels = dict(stream=k, logical_stream="ev", partition=str(p), group="g")
        assert value(text, "xshard_stream_length", stream=k) == p + 1
        assert value(text, "xshard_stream_group_lag", **labels) == p
        assert value(text, "xshard_stream_group_pending", **labels) == 1
        assert value(text, "xshard_stream_group_oldest_pending_age_seconds", **labels) >= 0
        assert value(text, "xshard_stream_group_consumer_idle_seconds", consumer="c",
                     **labels) >= 0
        assert value(text, "xshard_delivery_latency_seconds_count", **labels) == 1
    assert value(text, "xshard_metrics_untracked_partitions") == 0
    if shutil.which("promtool"):
        assert promtool_check(text) == ""


def test_partitions_come_first_within_the_cap(xnode) -> None:
    """A glob matches a partition key by its logical name; partitions push plain streams out
    of a full cap, and those that find no room at all are counted, not silently dropped."""
    n, port = _metrics_node(xnode, "--metrics-max-streams", "4")
    r = n.client()
    for i in range(6):
        r.xadd(f"plain{i}", {"a": 1})
    assert len(samples(fetch(port), "xshard_stream_length")) == 4  # full of plain streams
    parts = [f"{{p{p}}}ev#{p}/64" for p in range(3)]
    for k in parts:
        r.xadd(k, {"a": 1})

    def streams() -> set[str]:
        return {dict(k)["stream"] for k in samples(fetch(port), "xshard_stream_length")}

    wait_until(lambda: set(parts) <= streams(), 10, what="the partitions tracked")
    assert len(streams()) == 4 and value(fetch(port), "xshard_metrics_tracked_streams") == 4
    # More matching partitions than the cap: 4 tracked, the others counted as untracked.
    more = [f"{{q{p}}}ev#{p}/64" for p in range(3, 6)]
    for k in more:
        r.xadd(k, {"a": 1})
    wait_until(lambda: value(fetch(port), "xshard_metrics_untracked_partitions") == 2, 10,
               what="the partitions without room counted")
    assert all(logical_of(s.encode()) for s in streams())
    # The glob is matched against the logical name: "ev" takes every partition or none.
    r.config_set("metrics-streams", "e?")
    wait_until(lambda: len(streams()) == 4 and all(s not in streams() for s in
                                                   ("plain0", "plain1")), 10, what="e? kept")
    r.config_set("metrics-streams", "plain*")
    wait_until(lambda: streams() and all(s.startswith("plain") for s in streams()), 10,
               what="partitions of ev left, plain streams back")
    assert value(fetch(port), "xshard_metrics_untracked_partitions") == 0
