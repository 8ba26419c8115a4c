"""Clients of a router do not notice slot moves: blocked reads follow the slot (router/
forward.py BlockedRead), and -ASK is followed with ASKING (CLUSTER SETSLOT by hand, as
redis-cli --cluster reshard drives it).

The router is stopped (SIGSTOP) while the slot moves and an entry is added at the new owner,
so the router re-issues the blocked reads only after that entry exists there: an XREAD whose
`$` were evaluated again at the new owner would miss it.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
import redis

from base.records import owners
from node.slots import key_slot
from tests.support.cluster import keys_in_slots, run_cli
from tests.support.procs import wait_until

pytestmark = pytest.mark.etcd


class Reader(threading.Thread):
    """One blocking command (through a router, to a node or a RedisCluster); its reply (or
    exception) in `.got`."""

    def __init__(self, client: redis.Redis | redis.RedisCluster, *cmd: object) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.cmd = cmd
        self.got: object = None

    def run(self) -> None:
        try:
            self.got = self.client.execute_command(*self.cmd)
        except redis.RedisError as e:
            self.got = e


def blocked(node_client: redis.Redis) -> int:
    return int(node_client.info("clients")["blocked_clients"])


def half_moved(c) -> tuple[int, list[str], redis.Redis, redis.Redis]:  # noqa: ANN001
    """A slot of shard 0 half-way through a hand-driven move to shard 1 (SETSLOT IMPORTING on
    s1n0, MIGRATING on s0n0), three keys of it (the first, `1-0`, at the source), and clients
    of source and target. The target's importing state lives as long as the connection that
    set it (an importer's link): keep the target's client open for the whole test."""
    owner = owners(c.view().slots.value)
    slot = next(s for s in range(16384) if owner[s] == "0")
    keys = keys_in_slots([slot], per_slot=3, prefix="ask")
    src, dst = c.nodes["s0n0"].client(), c.nodes["s1n0"].client()
    src.xadd(keys[0], {"a": "1"}, id="1-0")
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", "s0n0")
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", "s1n0")
    return slot, keys, src, dst


def test_blocked_reads_follow_a_moving_slot(xcluster) -> None:  # noqa: ANN001
    c = xcluster(shards=2, replicas=0, routers=1)
    owner = owners(c.view().slots.value)
    slot = next(s for s in range(16384) if owner[s] == "0")
    k = keys_in_slots([slot], prefix="moving")[0]
    k2 = next(f"still{i}" for i in range(10_000) if owner[key_slot(f"still{i}".encode())] == "1")
    src, dst = c.nodes["s0n0"].client(), c.nodes["s1n0"].client()
    src.xadd(k, {"n": "0"}, id="1-0")
    src.xgroup_create(k, "g", "$")
    readers = [
        Reader(c.client(), "XREADGROUP", "GROUP", "g", "alice", "BLOCK", 0, "STREAMS", k, ">"),
        Reader(c.client(), "XREAD", "BLOCK", 0, "STREAMS", k, "$"),
        Reader(c.client(), "XREAD", "BLOCK", 0, "STREAMS", k2, k, "$", "$"),  # two shards
    ]
    for r in readers:
        r.start()
    wait_until(lambda: blocked(src) == 3 and blocked(dst) == 1, 10, what="reads blocked")
    router = c.router.pid
    assert router is not None
    os.kill(router, signal.SIGSTOP)
    try:
        r = run_cli("move-slots", "--etcd", c.url, "--cluster", c.name, "--to", "1",
                    "--slots", str(slot), "--wait", "--timeout", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        wait_until(lambda: dst.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 1, 10,
                   what="the key at its new owner")
        new = dst.xadd(k, {"n": "1"})  # before the router re-issues anything there
    finally:
        os.kill(router, signal.SIGCONT)
    for r in readers:
        r.join(20)
    assert not any(r.is_alive() for r in readers), [r.cmd for r in readers if r.is_alive()]
    want = [[k.encode(), [(new, {b"n": b"1"})]]]
    assert readers[0].got == want
    assert readers[1].got == want
    assert readers[2].got == want
    assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0


def test_router_follows_ask_with_asking(xcluster) -> None:  # noqa: ANN001
    """A slot half-way through a hand-driven move: keys the source lacks are asked of the
    target, which serves them only after ASKING, for plain and for blocked commands."""
    c = xcluster(shards=2, replicas=0, routers=1, controller=False)
    slot, (kept, new, waited), src, dst = half_moved(c)
    with pytest.raises(redis.exceptions.AskError):
        src.xadd(new, {"b": "1"})
    rc = c.client()
    reader = Reader(c.client(), "XREAD", "BLOCK", 0, "STREAMS", waited, "$")
    reader.start()
    wait_until(lambda: blocked(dst) == 1, 10, what="the read blocked at the target")
    sid = rc.xadd(new, {"b": "1"})  # -ASK, then ASKING + XADD at the target
    assert rc.xrange(new) == [(sid, {b"b": b"1"})]
    assert rc.xrange(kept) == [(b"1-0", {b"a": b"1"})]  # still served by the source
    got = rc.xadd(waited, {"c": "1"})
    reader.join(10)
    assert reader.got == [[waited.encode(), [(got, {b"c": b"1"})]]]
    assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 1  # only `kept`
    other = c.nodes["s1n0"].client()  # not the importer's connection
    ask = other.pipeline(transaction=False)
    ask.execute_command("ASKING")
    ask.xlen(new)
    assert ask.execute() == [True, 1]
    with pytest.raises(redis.exceptions.MovedError):
        other.xlen(new)  # without ASKING the target still sends clients to the source
