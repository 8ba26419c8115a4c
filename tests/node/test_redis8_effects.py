"""Effects of the Redis 8.2-8.8 stream additions: a primary's effects, applied blindly to a
second key space (what a replica and an AOF replay do, node/effects.py), give the same
stream, groups, PELs and NACKs, after random workloads that mix them with every group command.

Rules relied on: the effect log (node/effects.py: "every write is reduced to deterministic effects that a
replica or a restart can apply blindly"); XADD/XTRIM with a policy go out as the exact trim of
what was removed (ACKED as a plain trim, DELREF with DELREF); XDELEX and XACKDEL go out
verbatim (their result is a function of the stream and its groups, which the replica holds);
XNACK goes out as `XNACK ... FAIL ... RETRYCOUNT n FORCE` per resulting count; an entry that
XREADGROUP ... CLAIM takes goes out as the XCLAIM of any delivery.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from tests.support.groupdiff import Maker, Workload
from tests.support.inproc import InprocServer, group_state, run
from tests.support.persist import diff_states, dump_state
from tests.support.rawresp import RawClient
from tests.support.replset import Member, ReplicaSet, states_equal

POLICIES = [b"KEEPREF", b"DELREF", b"ACKED"]


def workload(seed: int, n: int = 500) -> list[list[bytes]]:
    """Random stream and group commands over one stream `s`, new ones included."""
    w = Workload(seed, [b"g1", b"g2", b"g3"], [b"alice", b"bob", b"carol"], recent=30)
    return w.commands(n, _MIX)


def _some_ids(w: Workload) -> list[bytes]:
    k = w.rng.randint(1, 4)
    return [b"IDS", b"%d" % k] + [w.some_id() for _ in range(k)]


def _policy(w: Workload) -> list[bytes]:
    return [w.rng.choice(POLICIES)] if w.rng.random() < 0.8 else []


def _xadd(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    ms = w.next_ms()
    argv = [b"XADD", b"s"]
    if rng.random() < 0.4:
        argv += _policy(w) + [b"MAXLEN", rng.choice([b"~", b"="]), b"%d" % rng.randint(2, 25)]
    return argv + [b"%d-*" % ms, b"f", b"%d" % rng.randint(0, 99)]


def _xtrim(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    strategy = rng.choice([[b"MAXLEN", b"%d" % rng.randint(0, 20)], [b"MINID", w.some_id()]])
    argv = [b"XTRIM", b"s", strategy[0]] + ([rng.choice([b"~", b"="])]
                                            if rng.random() < 0.5 else []) + strategy[1:]
    return argv + _policy(w)


def _xreadgroup(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    argv = [b"XREADGROUP", b"GROUP", g, c, b"COUNT", b"%d" % rng.randint(0, 4)]
    if rng.random() < 0.15:
        argv.append(b"NOACK")
    if rng.random() < 0.4:
        argv += [b"CLAIM", rng.choice([b"0", b"30", b"100000"])]
    return argv + [b"STREAMS", b"s", b">" if rng.random() < 0.85 else b"0"]


def _xnack(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    argv = [b"XNACK", b"s", g, rng.choice([b"SILENT", b"FAIL", b"FATAL"])] + _some_ids(w)
    if rng.random() < 0.3:
        argv += [b"RETRYCOUNT", b"%d" % rng.randint(0, 5)]
    if rng.random() < 0.5:
        argv.append(b"FORCE")
    return argv


_MIX: list[tuple[float, Maker]] = [
    (0.22, _xadd),
    (0.27, _xtrim),
    (0.31, lambda w, g, c: [b"XDELEX", b"s"] + _policy(w) + _some_ids(w)),
    (0.35, lambda w, g, c: [b"XACKDEL", b"s", g] + _policy(w) + _some_ids(w)),
    (0.37, lambda w, g, c: [b"XDEL", b"s", w.some_id()]),
    (0.41, lambda w, g, c: [b"XGROUP", b"CREATE", b"s", g,
                            w.rng.choice([b"0", b"$", w.some_id()]), b"MKSTREAM"]),
    (0.43, lambda w, g, c: [b"XGROUP", b"SETID", b"s", g,
                            w.rng.choice([b"0", b"$", w.some_id()])]),
    (0.44, lambda w, g, c: [b"XGROUP", b"DELCONSUMER", b"s", g, c]),
    (0.64, _xreadgroup),
    (0.70, lambda w, g, c: [b"XACK", b"s", g]
     + [w.some_id() for _ in range(w.rng.randint(1, 3))]),
    (0.76, _xnack),
    (0.82, lambda w, g, c: [b"XCLAIM", b"s", g, c, w.rng.choice([b"0", b"20"]), w.some_id(),
                            w.some_id()] + ([b"FORCE"] if w.rng.random() < 0.3 else [])),
    (1.0, lambda w, g, c: [b"XAUTOCLAIM", b"s", g, c, w.rng.choice([b"0", b"20"]), b"0",
                           b"COUNT", b"%d" % w.rng.randint(1, 4)]),
]


def replay(seed: int, cmds: list[list[bytes]]) -> tuple[InprocServer, InprocServer]:
    primary = InprocServer()
    primary.config.stream_node_max_entries = 4
    for i, cmd in enumerate(cmds):
        primary.clock = 1_700_000_000_000 + 7 * i
        run(primary, cmd)
    replica = InprocServer()
    replica.config.stream_node_max_entries = 4
    replica.clock = primary.clock + 1_000_000
    replica.effects.replaying += 1  # as node/effects.py's EffectApplier runs them
    for e in primary.recorded:
        reply = run(replica, e)
        assert not reply.startswith(b"-"), (e, reply)
    replica.effects.replaying -= 1
    return primary, replica


@pytest.mark.parametrize("seed", range(12))
def test_effects_replay_to_the_same_state(seed: int) -> None:
    primary, replica = replay(seed, workload(seed))
    kinds = {e[0] for e in primary.recorded}
    assert {b"XADD", b"XCLAIM", b"XDELEX", b"XACKDEL"} <= kinds
    for e in primary.recorded:
        assert e[0] != b"XADD" or b"~" not in e, e  # approximate trims go out exact
        if e[0] in (b"XADD", b"XTRIM"):
            assert b"ACKED" not in e, e  # ACKED goes out as the plain trim of what it removed
    assert group_state(replica) == group_state(primary)


def test_the_workloads_cover_every_new_effect() -> None:
    """Across the seeds above, every new command and CLAIM read changes something."""
    effects = set()
    for seed in range(12):
        effects |= {e[0] for e in replay(seed, workload(seed))[0].recorded}
    assert {b"XNACK", b"XDELEX", b"XACKDEL", b"XCLAIM"} <= effects
    assert sum(b"CLAIM" in cmd for cmd in workload(0)) > 20


@pytest.mark.slow
@pytest.mark.parametrize("seed", [5, 6])
def test_replicas_and_aof_replay_match_the_primary(rset: Callable[..., ReplicaSet],
                                                   seed: int) -> None:
    """The same with real processes: a primary with the AOF on and two replicas (one attached
    from the start, one by a full sync half-way) after a random workload of the new commands;
    then the primary restarted from its AOF. XINFO STREAM FULL (with nacked-count),
    XPENDING, XRANGE and the groups must match (tests/support/replset.py states_equal)."""
    rs = rset(2, primary_args=("--appendonly", "yes", "--stream-node-max-entries", "4"),
              replica_args=("--stream-node-max-entries", "4"))
    cmds = workload(seed, 700)
    rs.replicas[1].proxy.cut()
    rc = RawClient("127.0.0.1", rs.primary.node.port)
    try:
        for i, argv in enumerate(cmds):
            if i == len(cmds) // 2:
                rs.replicas[1].proxy.restore()
            rc.call(*argv)
    finally:
        rc.close()
    rs.synced()
    states_equal([rs.primary, *rs.replicas])
    before = _state_of(rs.primary)
    rs.primary.node.kill()
    rs.primary.node.start()
    rs.primary._client = None
    diffs = diff_states(before, _state_of(rs.primary))
    assert not diffs, "\n".join(diffs[:10])


def _state_of(m: Member) -> dict:
    rc = RawClient("127.0.0.1", m.node.port)
    try:
        return dump_state(rc, [b"s"])
    finally:
        rc.close()


def entriesread_workload(seed: int, n: int = 300) -> list[list[bytes]]:
    """XGROUP CREATE/SETID with ENTRIESREAD below, at and far above entries-added, XSETID
    ENTRIESADDED lowering the counter under a group's, reads, deletions and trims."""
    rng = random.Random(seed)
    cmds: list[list[bytes]] = []
    ms = 1
    for _ in range(n):
        x = rng.random()
        g = rng.choice([b"g1", b"g2"])
        er = b"%d" % rng.choice([-1, 0, 1, rng.randint(0, 40), 1_000_000])
        cur = rng.choice([b"0", b"$", b"%d-0" % rng.randint(1, ms)])
        if x < 0.3:
            ms += 1
            cmds.append([b"XADD", b"s", b"%d-0" % ms, b"f", b"v"])
        elif x < 0.4:
            cmds.append([b"XGROUP", b"CREATE", b"s", g, cur, b"MKSTREAM", b"ENTRIESREAD", er])
        elif x < 0.55:
            cmds.append([b"XGROUP", b"SETID", b"s", g, cur, b"ENTRIESREAD", er])
        elif x < 0.6:
            ms += 1
            cmds.append([b"XSETID", b"s", b"%d-0" % ms, b"ENTRIESADDED", b"%d" % rng.randint(0, 30)])
        elif x < 0.65:
            cmds.append([b"XDEL", b"s", b"%d-0" % rng.randint(1, ms)])
        elif x < 0.7:
            cmds.append([b"XTRIM", b"s", b"MAXLEN", b"%d" % rng.randint(0, 6)])
        else:
            cmds.append([b"XREADGROUP", b"GROUP", g, b"c", b"COUNT", b"%d" % rng.randint(1, 3),
                         b"STREAMS", b"s", b">"])
    return cmds


@pytest.mark.parametrize("seed", range(8))
def test_clamped_entriesread_replays_to_the_same_state(seed: int) -> None:
    """Redis 8.10 clamps ENTRIESREAD to entries-added on write (redis/redis#14257; apache/
    kvrocks#3581 quotes t_stream.c). The primary propagates the value it stored, so a replica
    stores the same; and an XGROUP SETID effect whose counter exceeds entries-added (after
    XSETID ENTRIESADDED lowered it) is applied as given, not cut."""
    primary, replica = replay(seed, entriesread_workload(seed))
    assert group_state(replica) == group_state(primary)
    sent = [e for e in primary.recorded if e[0] == b"XGROUP" and b"ENTRIESREAD" in e]
    assert sent and all(e[-1] != b"1000000" for e in sent)  # clamped before it goes out
