"""The Redis 8.2-8.8 stream commands through a router: each goes to its key's shard (the key
is argv[1] in the command table's key specs), and XREADGROUP ... CLAIM works on one shard
and across shards (the router reads CLAIM's argument with the node's option parser and finds
the keys after STREAMS, skipping it)."""

from __future__ import annotations

import redis

from node.command_table import get_keys
from tests.support.cluster import Cluster


def test_key_positions_of_the_new_commands() -> None:
    for argv, want in [
        ([b"XDELEX", b"k", b"ACKED", b"IDS", b"1", b"1-1"], [b"k"]),
        ([b"XACKDEL", b"k", b"g", b"IDS", b"1", b"1-1"], [b"k"]),
        ([b"XNACK", b"k", b"g", b"FAIL", b"IDS", b"1", b"1-1", b"FORCE"], [b"k"]),
        ([b"XREADGROUP", b"GROUP", b"g", b"c", b"CLAIM", b"10", b"STREAMS", b"a", b"b",
          b">", b">"], [b"a", b"b"]),
        # CLAIM's value is skipped: a min-idle-time that reads "STREAMS" is not the keyword.
        ([b"XREADGROUP", b"GROUP", b"g", b"c", b"CLAIM", b"STREAMS", b"STREAMS", b"a", b">"],
         [b"a"]),
    ]:
        assert [argv[i] for i in get_keys(argv)] == want, argv


def test_new_commands_on_every_shard(cluster: Cluster, r: redis.Redis) -> None:
    for shard, key in enumerate(cluster.keys_on_each_shard("r8-")):
        node = cluster.primary(shard).client()
        for i in range(1, 7):
            r.xadd(key, {"n": i}, id=f"{i}-1")
        r.xgroup_create(key, "g", "0")
        r.xgroup_create(key, "h", "0")
        r.xreadgroup("g", "c", {key: ">"}, count=4)
        r.xreadgroup("h", "c", {key: ">"})
        r.xack(key, "h", "1-1", "2-1", "3-1")
        assert r.execute_command("XACKDEL", key, "g", "ACKED", "IDS", "2", "1-1", "5-1") == [1, 2]
        assert r.execute_command("XDELEX", key, "DELREF", "IDS", "2", "2-1", "9-1") == [1, -1]
        assert r.xtrim(key, maxlen=0, approximate=False, ref_policy="ACKED") == 0  # g has 3-1
        assert r.xnack(key, "g", "FAIL", "3-1", "4-1") == 2
        got = r.xreadgroup("g", "d", {key: ">"}, claim_min_idle_time=3_600_000)[0][1]
        assert [(e[0], e[3]) for e in got] == [(b"3-1", 1), (b"4-1", 1), (b"5-1", 0),
                                               (b"6-1", 0)]
        assert r.xadd(key, {"n": 7}, id="7-1", maxlen=2, approximate=False,
                      ref_policy="DELREF") == b"7-1"
        # It all happened on the key's own shard.
        assert node.xlen(key) == 2 == r.xlen(key)
        assert node.xpending(key, "g")["pending"] == r.xpending(key, "g")["pending"] == 1


def test_claim_read_across_shards(cluster: Cluster, r: redis.Redis) -> None:
    """A multi-shard XREADGROUP ... CLAIM: each shard claims its own idle entries, and the
    merged reply keeps the 4-element entries in the client's key order."""
    keys = cluster.keys_on_each_shard("r8x-")[:2]
    for key in keys:
        r.xadd(key, {"a": 1}, id="1-1")
        r.xgroup_create(key, "g", "0")
        r.xreadgroup("g", "dead", {key: ">"})
        r.xnack(key, "g", "SILENT", "1-1")
        r.xadd(key, {"a": 2}, id="2-1")
    got = r.xreadgroup("g", "alive", {keys[1]: ">", keys[0]: ">"},
                       claim_min_idle_time=60_000)
    assert [k for k, _ in got] == [keys[1].encode(), keys[0].encode()]
    for _key, entries in got:
        assert [(e[0], e[3]) for e in entries] == [(b"1-1", 0), (b"2-1", 0)]
        assert entries[0][2] > 10**12 and entries[1][2] == 0  # NACKed: delivery time 0
