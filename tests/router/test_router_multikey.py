"""Multi-key commands through the router, against redis-server: keys in different slots of one
shard and on different shards, and the order in which a multi-shard XREADGROUP reports errors.

Every case runs the same commands on `oracle72` (one server with Redis 7.2+ stream semantics
holds every key) and on the router, and compares the raw replies in RESP2 and RESP3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.cluster import Cluster
from tests.support.rawresp import RawClient, show


@pytest.fixture
def keys(cluster: Cluster) -> dict[str, str]:
    """a, b, c: one shard, three slots; d: another shard."""
    a, d = cluster.keys_on_each_shard("mk")[:2]
    b, c = cluster.keys_in_other_slots(a, 2, "mo")
    return {"a": a, "b": b, "c": c, "d": d}


@pytest.fixture
def pair(cluster: Cluster, oracle72, protocol: int) -> Iterator[tuple[RawClient, RawClient]]:  # noqa: ANN001
    o = RawClient(oracle72.host, oracle72.port)
    n = RawClient("127.0.0.1", cluster.router.port)
    for c in (o, n):
        if protocol == 3:
            assert c.hello(3)[0] == "%"
        assert c.call("FLUSHALL") == ("+", b"OK")
    yield o, n
    for c in (o, n):
        c.call("FLUSHALL")
        c.close()


def _same(pair: tuple[RawClient, RawClient], *cmd: str) -> tuple:
    o, n = pair
    want, got = o.call(*cmd), n.call(*cmd)
    assert got == want, f"{' '.join(cmd)}\noracle72:\n{show(want)}\nrouter:\n{show(got)}"
    return got


def _both(pair: tuple[RawClient, RawClient], *cmd: str) -> None:
    for c in pair:
        c.call(*cmd)


@pytest.mark.etcd
def test_keys_of_one_shard_in_different_slots(xcluster: Callable[..., Cluster],
                                              oracle72) -> None:  # noqa: ANN001
    """EXISTS, TOUCH, DEL, UNLINK, XREAD and XREADGROUP split a request by slot, not by shard:
    a cluster node refuses keys of two slots with -CROSSSLOT even when it owns both."""
    c = xcluster(shards=2, replicas=0, controller=False, routers=1)
    a, d = c.keys_on_each_shard("mk")
    b, cc = c.keys_in_other_slots(a, 2, "mo")
    for protocol in (2, 3):
        o, n = RawClient(oracle72.host, oracle72.port), RawClient("127.0.0.1", c.router.port)
        pair = (o, n)
        for x in pair:
            if protocol == 3:
                x.hello(3)
            x.call("FLUSHALL")
        for i, k in enumerate((a, b, cc, d)):
            _both(pair, "XADD", k, f"{i + 1}-0", "f", str(i))
            _both(pair, "XGROUP", "CREATE", k, "g", "0")
        _same(pair, "EXISTS", a, b, "nosuch", cc, d, a)
        _same(pair, "TOUCH", a, b, cc)
        _same(pair, "XREAD", "COUNT", "5", "STREAMS", cc, a, d, b, "0", "0", "0", "0")
        _same(pair, "XREAD", "STREAMS", a, b, "2-0", "0")
        _same(pair, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "5", "STREAMS", b, a, cc,
              ">", ">", ">")
        _same(pair, "XREADGROUP", "GROUP", "g", "alice", "STREAMS", a, b, d, "0", "0", ">")
        _same(pair, "DEL", a, b)
        _same(pair, "UNLINK", cc, d, a)
        _same(pair, "EXISTS", a, b, cc, d)
        for x in pair:
            x.call("FLUSHALL")
            x.close()


def test_xreadgroup_without_group_across_slots(pair: tuple[RawClient, RawClient],
                                               keys: dict[str, str]) -> None:
    """Redis's argument error, and the connection stays usable."""
    a, b = keys["a"], keys["b"]
    _same(pair, "XREADGROUP", "COUNT", "3", "STREAMS", b, a, "0", "0")
    _same(pair, "XREADGROUP", "COUNT", "3", "BLOCK", "10", "STREAMS", a, keys["d"], ">", ">")
    _same(pair, "PING")


@pytest.mark.parametrize("args", [
    ["GROUP", "g", "c", "BLOCK", "abc", "STREAMS", "{a}", "{b}", "{d}", ">", ">", ">"],
    ["GROUP", "g", "c", "BLOCK", "-1", "STREAMS", "{a}", "{b}", "{d}", ">", ">", ">"],
    ["GROUP", "g", "c", "COUNT", "x", "STREAMS", "{a}", "{b}", "{d}", ">", ">", ">"],
    ["GROUP", "g", "c", "FOO", "STREAMS", "{a}", "{b}", "{d}", ">", ">", ">"],
    ["GROUP", "g", "c", "NOACK", "STREAMS", "{a}", "{b}", "{d}", ">", ">"],
    ["GROUP", "g", "c", "STREAMS", "{a}", "{b}", "{d}", ">", ">", ">"],
    ["GROUP", "g", "c", "BLOCK", "10", "STREAMS", "{d}", "{b}", "{a}", ">", ">", ">"],
    ["GROUP", "g", "c", "STREAMS", "{a}", "{d}", "$", ">"],
    ["GROUP", "g", "c", "STREAMS", "{a}", "{d}", ">", "abc"],
    ["GROUP", "g", "c", "STREAMS", "{d}", "{a}", "0-x", "$"],
    ["GROUP", "g", "c", "STREAMS", "{a}", "{c}", ">", ">"],
    ["GROUP", "nosuch", "c", "BLOCK", "x", "STREAMS", "{a}", "{d}", ">", ">"],
], ids=["block-nan", "block-negative", "count-nan", "syntax", "unbalanced", "nogroup",
        "nogroup-block", "dollar", "bad-id", "bad-id-first", "wrongtype", "nogroup-vs-block"])
def test_multi_shard_xreadgroup_errors_in_redis_order(pair: tuple[RawClient, RawClient],
                                                      keys: dict[str, str],
                                                      args: list[str]) -> None:
    """Argument errors first, then per key in order: the key's type, its group, its ID. Group
    g exists on a and d only; b is a stream without it, c is a string."""
    a, b, c, d = keys["a"], keys["b"], keys["c"], keys["d"]
    for k in (a, b, d):
        _both(pair, "XADD", k, "1-0", "f", "v")
    for k in (a, d):
        _both(pair, "XGROUP", "CREATE", k, "g", "0")
    _both(pair, "SET", c, "string")
    argv = [x.format(a=a, b=b, c=c, d=d) for x in args]
    _same(pair, "XREADGROUP", *argv)
    # Nothing was delivered by the refused read.
    _same(pair, "XPENDING", a, "g")
    _same(pair, "XPENDING", d, "g")
