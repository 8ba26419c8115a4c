"""`xshard stream create|list|describe|alter|delete` against a real etcd and real nodes.

One cluster of 3 shards (no replicas, no controller: nothing here fails over) serves the whole
module; every test uses its own stream names. What is checked is what the nodes and etcd hold
afterwards, read directly: the record, the partition streams on their owners, their groups.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
import redis

from base.records import SLOTS
from control.streamctl import gap_tags, partition_key, spread_tags
from node.slots import key_slot
from node.stream import partition_of_key
from tests.support.cluster import Cluster, run_cli, start_cluster
from tests.support.procs import wait_until


@pytest.fixture(scope="module")
def cl(etcd_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("streamctl"), shards=3, replicas=0,
                      etcd_url=etcd_url)
    yield c
    c.stop()


def xs(c: Cluster, *args: str):  # noqa: ANN201 - CompletedProcess
    return run_cli(*args, "--etcd", c.url or "", "--cluster", c.name)


def ok(c: Cluster, *args: str) -> str:
    r = xs(c, *args)
    assert r.returncode == 0 and r.stderr == "", r
    return r.stdout


def refused(c: Cluster, *args: str, want: str) -> str:
    """A refusal: exit 1 and one line on stderr naming the problem."""
    r = xs(c, *args)
    assert r.returncode == 1, r
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("xshard stream: ") and want in r.stderr, r.stderr
    return r.stderr


def owner(c: Cluster, key: str) -> redis.Redis:
    """A client to the primary that owns `key`'s slot."""
    return c.primary(c.shard_of(key)).client()


def record(c: Cluster, name: str):  # noqa: ANN201 - PStreamRecord | None
    e = c.view().pstreams.get(name)
    return e.value if e else None


def status_row(cl: Cluster, name: str) -> list[str]:
    """The row of `name` in `xshard status`'s table of partitioned streams."""
    st = run_cli("status", "--etcd", cl.url or "", "--cluster", cl.name)
    assert st.returncode == 0 and st.stderr == "", st
    lines = st.stdout.splitlines()
    at = lines.index("partitioned streams:")
    assert lines[at + 1].split() == ["NAME", "PARTITIONS", "SHARDS", "LENGTH", "KEY", "FIELD"]
    return next(line.split() for line in lines[at + 2:] if line.split()[:1] == [name])


def _slot(tag: str) -> int:
    return key_slot(b"{" + tag.encode() + b"}")


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 64, 1024])
def test_spread_tags_put_partition_p_in_the_pth_range(n: int) -> None:
    tags = spread_tags(n)
    assert len(tags) == n and len(set(tags)) == n
    for p, t in enumerate(tags):
        assert 1 <= len(t) <= 4 and t.isalnum() and t == t.lower()
        assert p * SLOTS // n <= _slot(t) < (p + 1) * SLOTS // n, (n, p, t)
        assert partition_of_key(partition_key(t, "ev", p, max(n, 2)).encode()) == (p, max(n, 2))


def test_gap_tags_fill_the_largest_gaps() -> None:
    near = lambda a, b: min((a - b) % SLOTS, (b - a) % SLOTS) < 32  # noqa: E731
    assert near(_slot(gap_tags([100], 1)[0]), 100 + SLOTS // 2)
    a, b = gap_tags([0, 4096], 2)  # the gap 4097..16383 first, then one of its halves
    assert near(_slot(a), 4096 + 6144)
    assert near(_slot(b), 4096 + 3072) or near(_slot(b), 10240 + 3072)
    taken = [_slot(t) for t in spread_tags(4)]
    new = [_slot(t) for t in gap_tags(taken, 4)]
    assert len(set(taken + new)) == 8
    everything = sorted(taken + new)  # 8 slots, no gap above a quarter of the ring
    gaps = [(everything[(i + 1) % 8] - s) % SLOTS for i, s in enumerate(everything)]
    assert max(gaps) < SLOTS // 4, gaps


def test_create_spreads_empty_partitions(cl: Cluster) -> None:
    out = ok(cl, "stream", "create", "events", "--partitions", "12")
    assert "12 partitions, stride 64" in out
    rec = record(cl, "events")
    assert (rec.partitions, rec.stride, rec.key_field, len(rec.keys)) == (12, 64, None, 12)
    shards = set()
    for p, k in enumerate(rec.keys):
        assert k.endswith(f"}}events#{p}/64") and k.startswith("{"), k
        slot = key_slot(k.encode())
        assert p * SLOTS // 12 <= slot < (p + 1) * SLOTS // 12, (p, k, slot)
        shards.add(cl.shard_of(k))
        o = owner(cl, k)
        assert o.type(k) == b"stream" and o.xlen(k) == 0 and o.xinfo_groups(k) == []
        info = o.xinfo_stream(k)
        assert info["last-generated-id"] == b"0-0" and info["entries-added"] == 0
    assert shards == {0, 1, 2}
    # the nodes give the partitions partition IDs
    k5 = rec.keys[5]
    assert int(owner(cl, k5).xadd(k5, {"f": "v"}).split(b"-")[1]) % 64 == 5
    # list, describe and status show it
    assert any(line.split()[:4] == ["events", "12", "64", "-"]
               for line in ok(cl, "stream", "list").splitlines())
    desc = ok(cl, "stream", "describe", "events")
    assert desc.splitlines()[0] == "events: 12 partitions, stride 64"
    row5 = next(line.split() for line in desc.splitlines() if line.split()[:2] == ["5", k5])
    assert row5[2:5] == [str(key_slot(k5.encode())), str(cl.shard_of(k5)), "1"]
    assert status_row(cl, "events") == ["events", "12", "3", "1", "-"]


def test_create_options_and_refusals(cl: Cluster) -> None:
    ok(cl, "stream", "create", "orders", "--partitions", "3", "--key-field", "user",
       "--max-partitions", "8")
    rec = record(cl, "orders")
    assert (rec.partitions, rec.stride, rec.key_field) == (3, 8, "user")
    assert all(k.endswith(f"#{p}/8") for p, k in enumerate(rec.keys))
    refused(cl, "stream", "create", "orders", "--partitions", "3", want="exists already")
    refused(cl, "stream", "create", "p0", "--partitions", "0", want="--partitions must be")
    refused(cl, "stream", "create", "p65", "--partitions", "65", want="--partitions must be")
    refused(cl, "stream", "create", "p9", "--partitions", "9", "--max-partitions", "8",
            want="--partitions must be between 1 and --max-partitions (8)")
    refused(cl, "stream", "create", "s1", "--partitions", "1", "--max-partitions", "1",
            want="--max-partitions must be between 2 and 1024")
    refused(cl, "stream", "create", "s2k", "--partitions", "1", "--max-partitions", "2000",
            want="--max-partitions must be between 2 and 1024")
    refused(cl, "stream", "create", "kf", "--partitions", "2", "--key-field", "",
            want="bad key field")
    refused(cl, "stream", "create", "kf", "--partitions", "2", "--key-field", "a\tb",
            want="bad key field")
    refused(cl, "stream", "create", "{ab}x#1/4", "--partitions", "2",
            want="itself a partition key")
    # a plain key of that name: asked of its owner
    owner(cl, "taken").xadd("taken", {"f": "v"})
    refused(cl, "stream", "create", "taken", "--partitions", "2",
            want=f"a stream key named 'taken' exists on shard {cl.shard_of('taken')}")
    owner(cl, "str").set("str", "x")
    refused(cl, "stream", "create", "str", "--partitions", "2", want="a string key")
    for name in ("p0", "p65", "p9", "s1", "s2k", "kf", "taken", "str"):
        assert record(cl, name) is None
    for action in ("describe", "delete"):
        refused(cl, "stream", action, "nosuch", want="no partitioned stream named 'nosuch'")
    refused(cl, "stream", "alter", "nosuch", "--partitions", "3", want="no partitioned stream")
    r = xs(cl, "stream", "create", "x")  # usage error: argparse, exit 2
    assert r.returncode == 2 and "--partitions" in r.stderr
    r = xs(cl, "stream", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: xshard stream")


def test_alter_adds_partitions_with_every_group_at_their_start(cl: Cluster) -> None:
    ok(cl, "stream", "create", "jobs", "--partitions", "2", "--max-partitions", "16")
    old = record(cl, "jobs").keys
    for k in old:  # what a router's XGROUP CREATE jobs g $ / h 0 does: every partition
        o = owner(cl, k)
        o.xadd(k, {"f": "v"})
        o.xgroup_create(k, "g", id="$")
        o.xgroup_create(k, "h", id="0")
    refused(cl, "stream", "alter", "jobs", "--partitions", "1", want="only added")
    refused(cl, "stream", "alter", "jobs", "--partitions", "17", want="at most 16")
    out = ok(cl, "stream", "alter", "jobs", "--partitions", "5")
    assert "2 -> 5 partitions" in out and "2 groups" in out
    rec = record(cl, "jobs")
    assert rec.partitions == 5 and rec.keys[:2] == old and rec.stride == 16
    slots = [key_slot(k.encode()) for k in rec.keys]
    assert len(set(slots)) == 5
    # the first new one goes in the middle of the largest gap
    a, b = sorted(slots[:2])
    inner, outer = b - a - 1, SLOTS - (b - a) - 1
    mid = (a + 1 + inner // 2) if inner >= outer else (b + 1 + outer // 2) % SLOTS
    assert min((slots[2] - mid) % SLOTS, (mid - slots[2]) % SLOTS) < 64, (slots, mid)
    for p, k in enumerate(rec.keys[2:], 2):
        assert k.endswith(f"}}jobs#{p}/16")
        o = owner(cl, k)
        groups = {g["name"]: g for g in o.xinfo_groups(k)}
        assert set(groups) == {b"g", b"h"}
        for g in groups.values():
            assert g["last-delivered-id"] == b"0-0" and g["entries-read"] == 0
        # nothing written to a new partition is missed by a group made with `$` before
        sid = o.xadd(k, {"n": str(p)})
        assert int(sid.split(b"-")[1]) % 16 == p
        got = o.xreadgroup("g", "c", {k: ">"})
        assert [e[0] for e in got[0][1]] == [sid]
    # the old partitions were left alone
    for k in old:
        assert owner(cl, k).xlen(k) == 1
    assert "nothing to do" in ok(cl, "stream", "alter", "jobs", "--partitions", "5")


def test_delete_removes_the_record_and_the_keys(cl: Cluster) -> None:
    ok(cl, "stream", "create", "tmp", "--partitions", "4")
    keys = record(cl, "tmp").keys
    owner(cl, keys[0]).xadd(keys[0], {"f": "v"})
    assert "4 partition keys" in ok(cl, "stream", "delete", "tmp")
    assert record(cl, "tmp") is None
    assert all(owner(cl, k).exists(k) == 0 for k in keys)
    assert "tmp" not in ok(cl, "stream", "list")
    # and the name can be created again (the same keys come back, empty)
    ok(cl, "stream", "create", "tmp", "--partitions", "4")
    assert record(cl, "tmp").keys == keys
    assert all(owner(cl, k).xlen(k) == 0 for k in keys)


def test_status_table_sums_the_partitions_and_shows_a_silent_node(cl: Cluster) -> None:
    """Last in the module: it freezes a primary for a moment."""
    ok(cl, "stream", "create", "tally", "--partitions", "5", "--key-field", "user",
       "--max-partitions", "8")
    ok(cl, "stream", "create", "solo", "--partitions", "1")
    keys = record(cl, "tally").keys
    for p, k in enumerate(keys):
        for i in range(p + 2):
            owner(cl, k).xadd(k, {"user": "u", "i": i})
    solo = record(cl, "solo").keys[0]
    owner(cl, solo).xadd(solo, {"a": 1})
    shards = {cl.shard_of(k) for k in keys}
    assert status_row(cl, "tally") == ["tally", "5", str(len(shards)), "20", "user"]
    assert status_row(cl, "solo") == ["solo", "1", "1", "1", "-"]
    # A primary that does not answer: the streams with a partition there show `?`, the others
    # their length, and status does not fail.
    frozen = cl.shard_of(solo)
    node = cl.primary(frozen)
    node.proc.signal(signal.SIGSTOP)
    try:
        assert status_row(cl, "solo")[3] == "?"
        want = "?" if frozen in shards else "20"
        assert status_row(cl, "tally")[3] == want
    finally:
        node.proc.signal(signal.SIGCONT)
    wait_until(lambda: status_row(cl, "solo")[3] == "1", 20, what="the node answers again")
