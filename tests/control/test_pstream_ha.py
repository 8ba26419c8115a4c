"""Exactly-once per group on a partitioned stream while the cluster changes under the load
(tests/support/pstreamload.py has the load and the rules): 4 writers XADD to the logical name
and WAIT 1, 10 consumers of one group XREADGROUP BLOCK and XACK, all through one router, over
3 shards of a primary and a replica each, while

- a shard's primary is SIGKILLed and the controller fails the shard over (without a key field,
  and with one: each value's entries stay in one partition, in write order); the controller
  is held (SIGSTOP) until writes without a key field were seen to go on without that shard;
- the slots of a shard's partitions move to another shard (`xshard move-slots`);
- `xshard stream alter` takes the stream from 6 to 12 partitions.

Then nothing acknowledged is lost, every entry is delivered to the group, and an entry is
delivered twice only where the rules of `Load.check` allow it (none but the failover's).
"""

from __future__ import annotations

import signal
import time

import pytest
import redis

from base.records import owners
from node.slots import key_slot
from tests.support.cluster import Cluster, run_cli
from tests.support.procs import wait_until
from tests.support.pstreamload import Load, Watcher, Write, serves

pytestmark = [pytest.mark.etcd, pytest.mark.slow, pytest.mark.failover]

STRIDE = 64


def cli(c: Cluster, *args: str) -> str:
    r = run_cli(*args, "--etcd", c.url or "", "--cluster", c.name, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def pstream(c: Cluster, name: str, n: int, *extra: str) -> list[str]:
    """`xshard stream create`, once the router serves the name; the partition keys."""
    cli(c, "stream", "create", name, "--partitions", str(n), *extra)
    r = c.client()
    wait_until(lambda: serves(r, name), 20, what="the router knows the stream")
    r.close()
    return c.view().pstreams[name].value.keys


def partition_of(sid: bytes) -> int:
    return int(sid.split(b"-")[1]) % STRIDE


def on_shard(c: Cluster, keys: list[str], shard: str) -> set[int]:
    owner = owners(c.view().slots.value)
    return {p for p, k in enumerate(keys) if owner[key_slot(k.encode())] == shard}


def cluster(xcluster) -> Cluster:  # noqa: ANN001
    return xcluster(shards=3, replicas=1, routers=1,
                    router_args=("--cluster-down-timeout-ms", "10000"))


def connect(c: Cluster) -> redis.Redis:
    return c.client(socket_timeout=30)


def flowing(load: Load, at_least: int) -> None:
    """Wait until `at_least` more writes are acknowledged and the consumers keep up."""
    want = len(load.acked()) + at_least
    wait_until(lambda: len(load.acked()) >= want, 60, what=f"{at_least} more acknowledged")
    seen = len(load.deliveries) + at_least // 2
    wait_until(lambda: len(load.deliveries) >= seen, 60, what="deliveries")


def answered_since(load: Load, t: float) -> list[Write]:
    """Writes sent after `t` that the router answered with an ID."""
    return [w for w in list(load.writes) if w.sent > t and w.id is not None]


def finish(load: Load, faulty: set[int] = frozenset(), promoted: float = 0.0) -> None:
    load.stop()
    load.drain()
    v = load.check(partition_of, faulty, promoted)
    doubles = sum(1 for _ in v.double)
    print(f"{len(load.writes)} writes, {len(load.acked())} acknowledged, "
          f"{len(load.deliveries)} deliveries ({sum(d.claim for d in load.deliveries)} by "
          f"claim), client errors {len(load.errors)} {load.errors[:3]}")
    assert not v.problems(), (doubles, v.problems())


@pytest.mark.parametrize("key_field", [None, "user"])
def test_exactly_once_while_a_shard_fails_over(xcluster, key_field: str | None) -> None:  # noqa: ANN001
    c = cluster(xcluster)
    keys = pstream(c, "events", 12, *(("--key-field", key_field) if key_field else ()))
    load = Load(lambda: connect(c), "events", key_field=key_field)
    load.setup()
    load.start()
    try:
        flowing(load, 200)
        victim = c.primary_id("1")
        assert victim is not None
        faulty = on_shard(c, keys, "1")
        assert len(faulty) == 4
        watch = Watcher(c.url or "", c.name, "1", victim)
        watch.start()
        # The controller waits while the load runs on without shard 1's primary, so that
        # window is long enough to see, however busy the machine.
        ctl = c.controllers[0]
        ctl.signal(signal.SIGSTOP)
        try:
            c.nodes[victim].kill()
            killed = time.monotonic()  # (kill reaps: the old primary answers nothing more)
            if key_field is None:
                wait_until(lambda: len(answered_since(load, killed)) >= 100, 30,
                           what="writes without a key field while the shard is down")
                held = answered_since(load, killed)
        finally:
            ctl.signal(signal.SIGCONT)
        wait_until(lambda: watch.promoted is not None, 30, what="a new primary for shard 1")
        watch.stop()
        c.nodes[victim].start()  # back as a replica: WAIT 1 on shard 1 can succeed again
        flowing(load, 200)
    finally:
        load.stop()
    assert watch.promoted is not None
    during = [w for w in answered_since(load, killed) if w.got < watch.promoted]
    print(f"failover: {watch.promoted - killed:.2f} s after the kill; {len(during)} writes "
          f"sent and answered meanwhile")
    if key_field is None:  # they went on to the other shards' partitions meanwhile
        assert not [w for w in held if partition_of(w.id) in faulty]  # type: ignore[arg-type]
        # and none waited for the failover: a write in flight to the dead primary went on
        # to another partition too.
        assert not [e for e in load.errors if e.startswith("writer")], load.errors[:3]
    finish(load, faulty, watch.promoted)


def test_exactly_once_while_partitions_move(xcluster) -> None:  # noqa: ANN001
    c = cluster(xcluster)
    keys = pstream(c, "events", 12)
    moving = sorted(on_shard(c, keys, "0"))[:2]
    load = Load(lambda: connect(c), "events")
    load.setup()
    load.start()
    try:
        flowing(load, 200)
        for p in moving:
            cli(c, "move-slots", "--to", "2", "--slots", str(key_slot(keys[p].encode())),
                "--wait", "--timeout", "60")
        assert on_shard(c, keys, "2") >= set(moving)
        flowing(load, 200)
    finally:
        load.stop()
    moved = [d for d in load.deliveries if partition_of(d.entry[0]) in moving]
    assert moved, "nothing was delivered from the moved partitions"
    assert load.errors == []  # the router hides the moves from its clients
    finish(load)


def test_alter_adds_partitions_under_load(xcluster) -> None:  # noqa: ANN001
    c = cluster(xcluster)
    pstream(c, "events", 6)
    load = Load(lambda: connect(c), "events")
    load.setup()
    load.start()
    try:
        flowing(load, 200)
        out = cli(c, "stream", "alter", "events", "--partitions", "12")
        assert "6 -> 12 partitions" in out and "1 groups created" in out, out
        keys = c.view().pstreams["events"].value.keys
        r = c.client()
        wait_until(lambda: all(r.xlen(k) for k in keys[6:]), 30,
                   what="writes in every new partition")
        r.close()
        flowing(load, 200)
    finally:
        load.stop()
    assert load.errors == []
    new = {p for p in range(6, 12)}
    got = {partition_of(d.entry[0]) for d in load.deliveries if not d.claim}
    assert new <= got, f"the group never delivered from partitions {sorted(new - got)}"
    finish(load)
    # The group read each new partition from its start: its first entry was delivered.
    r = c.client()
    delivered = {d.entry[0] for d in load.deliveries}
    for k in keys[6:]:
        first = r.xrange(k, count=1)[0][0]
        assert first in delivered, k
    r.close()
