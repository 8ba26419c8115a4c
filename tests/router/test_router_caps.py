"""XREAD / XREADGROUP with MAXCOUNT and MAXSIZE (Redis 8.10) through the router.

Rules (tests/node/test_xread_caps.py states the node's): a read of one slot passes the
options on; a read over several shards answers what one node holding every key answers: the
caps apply to the merged reply, in the client's key order, and a multi-shard XREADGROUP
delivers (adds to a PEL, moves a group's cursor) only what it returns. The reference here is
a standalone xshard node with the same keys: every reply, and then every group's PEL and
cursor, must be the same byte for byte, in RESP2 and RESP3.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cluster import Cluster
from tests.support.diff import SideState, normalize
from tests.support.rawresp import RawClient, show

CAPS = [["MAXCOUNT", "1"], ["MAXCOUNT", "4"], ["COUNT", "2", "MAXCOUNT", "5"],
        ["MAXSIZE", "1"], ["MAXSIZE", "100"], ["MAXSIZE", "230"],
        ["COUNT", "2", "MAXCOUNT", "6", "MAXSIZE", "200"]]


def _keys(cluster: Cluster) -> list[str]:
    """Five keys in the order they are read: two of one shard in different slots, split by
    keys of the other shards, so that one shard's keys are not consecutive."""
    a, d, e = cluster.keys_on_each_shard("cap")[:3]
    b, c = cluster.keys_in_other_slots(a, 2, "capo")
    return [a, d, b, e, c]


def _fill(clients: list[RawClient], keys: list[str]) -> None:
    for cl in clients:
        assert cl.call("FLUSHALL") == ("+", b"OK")
        for n, k in enumerate(keys):
            for i in range(1, 2 + n % 3):  # 2, 3, 4, 2, 3 entries
                cl.call("XADD", k, f"{i}-0", "field", "v" * (i * 7))
            cl.call("XGROUP", "CREATE", k, "g", "0")


def _same(pair: tuple[RawClient, RawClient], *cmd: str) -> tuple:
    argv = [a.encode() for a in cmd]  # idle times masked (tests/support/diff.py)
    want = normalize(argv, pair[0].call(*cmd), SideState("node"))
    got = normalize(argv, pair[1].call(*cmd), SideState("router"))
    assert got == want, f"{' '.join(cmd)}\nnode:\n{show(want)}\nrouter:\n{show(got)}"
    return got


@pytest.mark.parametrize("protocol", [2, 3])
def test_caps_across_shards_match_one_node(cluster: Cluster, node, protocol: int) -> None:
    keys = _keys(cluster)
    ref, rt = RawClient(node.host, node.port), RawClient("127.0.0.1", cluster.router.port)
    pair = (ref, rt)
    try:
        for cl in pair:
            if protocol == 3:
                assert cl.hello(3)[0] == "%"
        for caps in CAPS:
            _fill(list(pair), keys)
            streams = ["STREAMS", *keys]
            _same(pair, "XREAD", *caps, *streams, *["0"] * len(keys))
            _same(pair, "XREAD", *caps, *streams, "1-0", "0", "2-0", "0", "5-0")
            # Two `>` reads until the groups are through, then a history read.
            for consumer in ("alice", "bob"):
                _same(pair, "XREADGROUP", "GROUP", "g", consumer, *caps, *streams,
                      *[">"] * len(keys))
            _same(pair, "XREADGROUP", "GROUP", "g", "alice", *caps, *streams,
                  *["0"] * len(keys))
            for k in keys:  # nothing delivered was dropped: same PELs and cursors
                _same(pair, "XPENDING", k, "g", "-", "+", "100")
                _same(pair, "XINFO", "GROUPS", k)
    finally:
        for cl in pair:
            cl.call("FLUSHALL")
            cl.close()


def test_single_slot_read_passes_the_options_on(cluster: Cluster, node) -> None:
    """One slot: the node itself applies the caps (and reports their errors)."""
    k = cluster.keys_on_each_shard("one")[0]
    ref, rt = RawClient(node.host, node.port), RawClient("127.0.0.1", cluster.router.port)
    pair = (ref, rt)
    try:
        _fill(list(pair), [k])
        for caps in itertools.chain(CAPS, [["MAXCOUNT", "0"], ["COUNT", "3", "MAXCOUNT", "2"]]):
            _same(pair, "XREAD", *caps, "STREAMS", k, "0")
            _same(pair, "XREADGROUP", "GROUP", "g", "c", *caps, "STREAMS", k, ">")
        # A multi-shard read reports the option errors before any shard sees it.
        other = cluster.keys_on_each_shard("one")[1]
        _same(pair, "XREAD", "MAXSIZE", "0", "STREAMS", k, other, "0", "0")
    finally:
        for cl in pair:
            cl.call("FLUSHALL")
            cl.close()
