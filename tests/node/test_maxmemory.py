"""maxmemory under noeviction (node/memlimit.py), compared byte for byte with redis-server.

Both servers get a limit below what they already use, so every check below runs over the
limit: commands flagged denyoom get Redis's OOM error, reads and XACK (and everything that
frees memory) keep working, MULTI queues nothing, and lifting the limit lets writes through.
"""

from __future__ import annotations

import pytest
import redis

from tests.support.procs import wait_until
from tests.support.rawresp import RawClient, brief

# (command, ...) run in order on a server over its limit; replies must match Redis's.
OVER_LIMIT = [
    ("XADD", "mm:s", "*", "f", "v"),
    ("XADD", "mm:new", "*", "f", "v"),
    ("XGROUP", "CREATE", "mm:s", "g2", "$"),
    ("XGROUP", "CREATECONSUMER", "mm:s", "g", "c9"),
    ("XSETID", "mm:s", "5-0"),
    ("SET", "mm:k", "v"),
    ("RPUSH", "mm:l", "v"),
    ("XLEN", "mm:s"),
    ("XRANGE", "mm:s", "-", "+"),
    ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "mm:s", ">"),
    ("XACK", "mm:s", "g", "1-0"),
    ("XPENDING", "mm:s", "g"),
    ("XCLAIM", "mm:s", "g", "c2", "0", "2-0"),
    ("XGROUP", "DELCONSUMER", "mm:s", "g", "c2"),
    ("XDEL", "mm:s", "3-0"),
    ("XTRIM", "mm:s", "MAXLEN", "1"),
    ("EXPIRE", "mm:s", "100"),
    ("GET", "mm:k"),
    ("PING",),
    ("MULTI",),
    ("XLEN", "mm:s"),
    ("XADD", "mm:s", "*", "f", "v"),
    ("EXEC",),
    ("MULTI",),
    ("PING",),
    ("DISCARD",),
    ("DEL", "mm:s"),
]


def _prepare(c: RawClient) -> None:
    c.call("DEL", "mm:s", "mm:new", "mm:k", "mm:l")
    for i in range(1, 5):
        c.call("XADD", "mm:s", f"{i}-0", "f", "v")
    c.call("XGROUP", "CREATE", "mm:s", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "mm:s", ">")


def _run_over_limit(h) -> list:
    c = RawClient(h.host, h.port)
    try:
        _prepare(c)
        assert c.call("CONFIG", "SET", "maxmemory", "1") == ("+", b"OK")
        try:
            if h.kind != "redis":
                wait_until(lambda: c.call("XADD", "mm:probe", "*", "f", "v")[0] == "-",
                           timeout=10, what="the node over its limit")
            replies = [c.call(*cmd) for cmd in OVER_LIMIT]
        finally:
            assert c.call("CONFIG", "SET", "maxmemory", "0") == ("+", b"OK")
        replies.append(c.call("XADD", "mm:s", "9-0", "f", "v"))  # under no limit again
        c.call("DEL", "mm:s", "mm:new", "mm:k", "mm:l", "mm:probe")
        return replies
    finally:
        c.close()


def test_oom_like_redis(node, oracle) -> None:
    ours, theirs = _run_over_limit(node), _run_over_limit(oracle)
    for cmd, o, t in zip(OVER_LIMIT + [("XADD", "mm:s", "9-0", "f", "v")], ours, theirs,
                         strict=True):
        assert o == t, f"{' '.join(cmd)}\n  redis: {brief(t)}\n  node:  {brief(o)}"
    assert theirs[0] == ("-", b"OOM command not allowed when used memory > 'maxmemory'.")


def test_maxmemory_from_the_command_line(xnode) -> None:
    """--maxmemory below the node's own size: the first sample (within a cron tick) refuses
    XADD; CONFIG GET shows the setting and the only policy; INFO shows the limit."""
    h = xnode("--maxmemory", "1mb")
    c = h.client()
    assert c.config_get("maxmemory") == {"maxmemory": str(1024 * 1024)}
    assert c.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    def refused() -> bool:
        try:
            c.xadd("s", {"f": "v"})
        except redis.exceptions.OutOfMemoryError:  # redis-py's class for -OOM
            return True
        return False

    wait_until(refused, timeout=10, what="XADD refused")
    assert c.xlen("s") >= 0 and c.info("memory")["maxmemory"] == 1024 * 1024
    with pytest.raises(redis.exceptions.ResponseError, match="must be one of"):
        c.config_set("maxmemory-policy", "allkeys-lru")
    c.config_set("maxmemory", "0")
    assert c.xadd("s", {"f": "v"})


def test_replica_ignores_maxmemory(rset) -> None:
    """A replica over its limit still applies what its primary sends (those commands pass no
    check), and its clients' writes get READONLY, not OOM: as with Redis's default
    replica-ignore-maxmemory, a replica's data is its primary's business."""
    rs = rset(1, replica_args=("--maxmemory", "1mb"))
    p, r = rs.primary.c, rs.replicas[0].c
    for i in range(50):
        p.xadd("s", {"i": i})
    rs.synced()
    assert r.xlen("s") == 50
    with pytest.raises(redis.exceptions.ReadOnlyError):
        r.xadd("s", {"f": "v"})
