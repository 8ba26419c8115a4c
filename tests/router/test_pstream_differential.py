"""The differential check for partitioned streams: one seeded workload runs on a logical stream
of 6 partitions over 3 shards and on one plain stream, through the same router, and the two
must agree on everything a plain stream's user can rely on.

- the same multiset of entries (XRANGE, XLEN);
- the same order within each partition: a partition holds its entries in the order they were
  written, which is the plain stream's order restricted to them;
- with a key field, one value's entries all in one partition;
- the same group bookkeeping: which entries are pending (by their payload, since the IDs
  differ), how often each was delivered, the pending and entries-read totals and lag of
  XINFO GROUPS, the consumers and their pending counts where the workload decides them, and
  XPENDING's summary count.

Which consumer gets which entry is the one thing allowed to differ (docs/partitioned-streams.md:
"which consumer gets which entry differs from one stream's"), so the workload makes every
other figure independent of it: reads take exactly COUNT while enough entries are left, and
acknowledgements, claims and deletions choose entries by payload.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from tests.router.test_pstreams import make, pc, r
from tests.support.cluster import Cluster

__all__ = ["pc", "r"]

USERS = [f"u{i}" for i in range(9)]


def payloads(r: redis.Redis, key: str) -> list[int]:
    """The entries' `i` fields in the stream's (merged) ID order."""
    return [int(f[b"i"]) for _id, f in r.xrange(key)]


def id_map(r: redis.Redis, key: str) -> dict[int, bytes]:
    return {int(f[b"i"]): eid for eid, f in r.xrange(key)}


def pending_by_payload(r: redis.Redis, key: str, group: str, ids: dict[bytes, int]
                       ) -> dict[int, int]:
    """payload -> times delivered, for every pending entry of the group."""
    rows = r.xpending_range(key, group, "-", "+", 10_000)
    return {ids[row["message_id"]]: row["times_delivered"] for row in rows}


def group_figures(r: redis.Redis, key: str) -> dict[str, tuple]:
    """name -> (pending, entries-read, lag, consumers) from XINFO GROUPS."""
    return {g["name"].decode(): (g["pending"], g["entries-read"], g["lag"], g["consumers"])
            for g in r.xinfo_groups(key)}


class Side:
    """One stream of the pair and what the workload did to it."""

    def __init__(self, r: redis.Redis, key: str) -> None:
        self.r, self.key = r, key
        self.delivered: Counter[str] = Counter()  # consumer -> entries it was given by `>`

    def read(self, group: str, consumer: str, count: int) -> int:
        got = self.r.xreadgroup(group, consumer, {self.key: ">"}, count=count)
        n = len(got[0][1]) if got else 0
        self.delivered[consumer] += n
        return n


@pytest.fixture
def pair(pc: Cluster, r: redis.Redis) -> Iterator[tuple[Side, Side, list[str]]]:
    name, keys = make(pc, r, 6, key_field="user")
    yield Side(r, name), Side(r, "plain"), keys


def test_one_workload_on_a_partitioned_and_a_plain_stream(pair: tuple[Side, Side, list[str]]
                                                          ) -> None:
    ps, plain, keys = pair
    r = ps.r
    rng = random.Random(20261202)
    total = 400
    for side in (ps, plain):
        r.xgroup_create(side.key, "g", "0", mkstream=True)
        r.xgroup_create(side.key, "late", "$", mkstream=True)
    users = [rng.choice(USERS) for _ in range(total)]

    # Writes, interleaved with reads of group g by four consumers, COUNT 1..9.
    schedule = [(rng.choice("abcd"), rng.randint(1, 9)) for _ in range(200)]
    step = iter(schedule)
    for i in range(total):
        for side in (ps, plain):
            side.r.xadd(side.key, {"user": users[i], "i": i})
        if i % 5 == 4:
            c, n = next(step)
            got = ps.read("g", c, n), plain.read("g", c, n)
            assert got[0] == got[1], f"read {c} COUNT {n} after {i + 1} writes: {got}"
    assert r.xlen(ps.key) == r.xlen(plain.key) == total
    for c, n in step:  # drain what is left with the rest of the schedule
        assert ps.read("g", c, n) == plain.read("g", c, n)
    assert ps.delivered == plain.delivered

    # The same multiset, and the same order within each partition and for each user.
    assert sorted(payloads(r, ps.key)) == sorted(payloads(r, plain.key)) == list(range(total))
    order = payloads(r, plain.key)
    where: dict[str, int] = {}
    for p, k in enumerate(keys):
        part = payloads(r, k)
        assert part == [i for i in order if i in set(part)], f"partition {p} out of order"
        for i in part:
            assert where.setdefault(users[i], p) == p, f"user {users[i]} in two partitions"

    # Acks, claims and deletions chosen by payload, the same on both sides.
    maps = {s.key: id_map(r, s.key) for s in (ps, plain)}
    delivered_so_far = sum(ps.delivered.values())
    for side in (ps, plain):
        m = maps[side.key]
        acked = [m[i] for i in range(delivered_so_far) if i % 3 == 0]
        if acked:
            r.xack(side.key, "g", *acked)
        claimed = [m[i] for i in range(delivered_so_far) if i % 5 == 1 and i % 3]
        r.xclaim(side.key, "g", "e", 0, claimed)
        r.xclaim(side.key, "g", "e", 0, claimed[::2])  # delivered once more
        r.xdel(side.key, *[m[i] for i in range(0, total, 7)])
        side.read("late", "z", 17)

    # The bookkeeping.
    inv = {k: {v: i for i, v in m.items()} for k, m in maps.items()}
    assert pending_by_payload(r, ps.key, "g", inv[ps.key]) == \
        pending_by_payload(r, plain.key, "g", inv[plain.key])
    assert r.xpending(ps.key, "g")["pending"] == r.xpending(plain.key, "g")["pending"]
    assert group_figures(r, ps.key) == group_figures(r, plain.key)
    consumers = {s.key: {c["name"]: c["pending"] for c in r.xinfo_consumers(s.key, "g")}
                 for s in (ps, plain)}
    assert consumers[ps.key].keys() == consumers[plain.key].keys()
    assert consumers[ps.key][b"e"] == consumers[plain.key][b"e"]  # decided by the claims
    assert sum(consumers[ps.key].values()) == sum(consumers[plain.key].values())
    assert r.xlen(ps.key) == r.xlen(plain.key) == total - len(range(0, total, 7))
    assert sorted(payloads(r, ps.key)) == payloads(r, plain.key)


def test_xreadgroup_claim_as_one_stream(pair: tuple[Side, Side, list[str]]) -> None:
    """XREADGROUP ... CLAIM (Redis 8.4): one stream's idle pending entries first, then new
    ones, COUNT over both (router/pstreamclaim.py ranks the partitions' idle entries before
    any claims). The same workload on both sides: what `dead` had is claimed first, each with
    its delivery count, then the new entries; the group's bookkeeping matches."""
    ps, plain, _keys = pair
    r = ps.r
    dead = {}
    for side in (ps, plain):
        r.xgroup_create(side.key, "g", "0", mkstream=True)
        for i in range(6):
            r.xadd(side.key, {"i": i})
        dead[side.key] = [e[0] for e in r.xreadgroup("g", "dead", {side.key: ">"}, count=4)[0][1]]
    for side in (ps, plain):
        got = r.xreadgroup("g", "alive", {side.key: ">"}, count=10, claim_min_idle_time=0)
        es = got[0][1]
        assert [int(e[3]) > 0 for e in es] == [True] * 4 + [False] * 2  # 4 claimed, 2 new
        assert sorted(e[0] for e in es[:4]) == sorted(dead[side.key])
        assert r.xpending(side.key, "g")["consumers"] == [{"name": b"alive", "pending": 6}]
        assert r.xinfo_groups(side.key)[0]["pending"] == 6
