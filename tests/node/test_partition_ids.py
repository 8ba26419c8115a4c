"""Partition IDs: a stream key named `{TAG}NAME#p/S` gets sequence numbers seq = p (mod S).

The rule (node/stream.py, docs/partitioned-streams.md): `*` in a new millisecond gives seq = p,
in the last ID's millisecond the next seq above the last one with that residue, or, when none
is left below 2**64, the next millisecond; `ms-*` the same within ms (none left: the usual
"equal or smaller" error); an explicit ID must have the residue, or XADD fails with xshard's
own error text. Every other key, however similar, behaves as in Redis (compared with
redis-server). The name is the whole state, so replicas, AOF replay, DUMP/RESTORE and RENAME
follow the name that holds the stream.

Each test that talks to a node runs on the interpreted and the compiled path (the compiled one
only where the extensions are built, as after `python setup.py build_ext --inplace`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from node import native
from node.stream import MAX_STRIDE, Stream, partition_of_key, seq_above
from node.streamid import SEQ_MAX
from tests.conftest import NodeHandle, flushed, spawn_node
from tests.support.diff import Pair
from tests.support.rawresp import RawClient
from tests.test_native import _env  # the node's environment on one path or the other

FUTURE = 99_999_999_999_999  # a millisecond no clock reaches: `*` stays in it
P3 = "{x7}events#3/64"  # partition 3 of stride 64
P61 = "{x7}events#61/64"
P0 = "{ab}o#0/2"


@pytest.fixture(scope="module", params=["interpreted", "compiled"])
def pure(request: pytest.FixtureRequest) -> bool:
    if request.param == "compiled" and not native.compiled():
        pytest.skip("the extensions are not built (python setup.py build_ext --inplace)")
    return request.param == "interpreted"


@pytest.fixture(scope="module")
def pnode(tmp_path_factory: pytest.TempPathFactory, pure: bool) -> Iterator[NodeHandle]:
    """One node per path for the module's tests (each test flushes it, `pr`)."""
    h = spawn_node(tmp_path_factory.mktemp("pnode"), env=_env(pure),
                   name=f"xshard node ({'interpreted' if pure else 'compiled'})")
    yield h
    h.close()


@pytest.fixture
def pr(pnode: NodeHandle) -> Iterator[redis.Redis]:
    yield from flushed(pnode.client())


def _xsetid(c: redis.Redis, key: str, sid: str) -> None:
    c.execute_command("XSETID", key, sid)


def _seq(sid: bytes) -> int:
    return int(sid.split(b"-")[1])


def _ms(sid: bytes) -> int:
    return int(sid.split(b"-")[0])


# --- the key name and the arithmetic (in process) -------------------------------------------
@pytest.mark.parametrize("key,want", [
    (b"{x7}events#3/64", (3, 64)),
    (b"{abcd}e#0/2", (0, 2)),
    (b"{a}e#1023/1024", (1023, 1024)),
    (b"{a}a#1/2#3/4", (3, 4)),  # the last `#` starts the suffix
    (b"{a}}x#1/2", (1, 2)),  # NAME is any bytes
    (b"{a}e\n#1/2", (1, 2)),
])
def test_partition_keys(key: bytes, want: tuple[int, int]) -> None:
    assert partition_of_key(key) == want


@pytest.mark.parametrize("key", [
    b"{X7}e#3/64", b"{x-}e#1/2", b"{}e#1/2", b"{abcde}e#1/2", b"x{a}e#1/2", b"{a}#1/2",
    b"{a}e#03/64", b"{a}e#3/064", b"{a}e#64/64", b"{a}e#0/1", b"{a}e#0/1025", b"{a}e#1/2/3",
    b"{a}e#+1/2", b"{a}e#1/2\n", b"{a}e#1/ 2", b"{a}e#1", b"{a}e1/2", b"{a}e#/2", b"events",
    b"{a}e#-1/2", b"{a}e#\xd9\xa1/2",
])
def test_look_alike_names_are_plain(key: bytes) -> None:
    assert partition_of_key(key) is None


def test_seq_above() -> None:
    assert seq_above(0, 64, 3) == 3
    assert seq_above(3, 64, 3) == 67
    assert seq_above(2, 64, 3) == 3
    assert seq_above(SEQ_MAX - 10, 64, 61) == SEQ_MAX - 2
    assert seq_above(SEQ_MAX - 5, 64, 3) == 0  # none left below 2**64
    assert seq_above(SEQ_MAX - 1, 2, 1) == SEQ_MAX
    assert seq_above(SEQ_MAX, MAX_STRIDE, MAX_STRIDE - 1) == 0


def test_bind_key_and_next_ids() -> None:
    s = Stream()
    assert s.stride == -1  # not derived yet: XADD binds the name it finds the stream under
    assert s.bind_key(b"{q}n#5/8") == 8 and s.residue == 5
    assert s.next_auto_id(7) == 7 << 64 | 5
    s.last_id = 7 << 64 | 5
    assert s.next_auto_id(7) == 7 << 64 | 13
    assert s.next_auto_id(3) == 7 << 64 | 13  # a clock behind the last ID
    assert s.next_seq_id(7) == 7 << 64 | 13
    assert s.next_seq_id(9) == 9 << 64 | 5
    assert s.bind_key(b"plain") == 0 and s.residue == 0
    assert s.next_auto_id(7) == 7 << 64 | 6


# --- XADD on a node ---------------------------------------------------------------------------
def test_star_ids_have_the_residue(pr: redis.Redis) -> None:
    before = int(time.time() * 1000)
    first = pr.xadd(P3, {"f": "v"})
    assert _seq(first) == 3 and _ms(first) >= before
    # a same-millisecond run: pinned to a future millisecond, every `*` steps by the stride
    _xsetid(pr, P3, f"{FUTURE}-3")
    pipe = pr.pipeline(transaction=False)
    for i in range(200):
        pipe.xadd(P3, {"i": str(i)})
    ids = pipe.execute()
    assert ids == [f"{FUTURE}-{3 + 64 * k}".encode() for k in range(1, 201)]
    assert pr.xlen(P3) == 201
    # another partition of the same logical stream, and a partition 0
    assert _seq(pr.xadd(P61, {"f": "v"})) == 61
    pr.xadd(P0, {"f": "v"}, id="1-0")
    _xsetid(pr, P0, f"{FUTURE}-0")
    assert pr.xadd(P0, {"f": "v"}) == f"{FUTURE}-2".encode()
    assert pr.xadd(P0, {"f": "v"}) == f"{FUTURE}-4".encode()


def test_star_with_options_takes_the_general_path(pr: redis.Redis) -> None:
    pr.xadd(P3, {"f": "v"}, id="5-3")
    _xsetid(pr, P3, f"{FUTURE}-3")
    assert pr.xadd(P3, {"f": "v"}, maxlen=1, approximate=False) == f"{FUTURE}-67".encode()
    assert pr.xadd(P3, {"f": "v"}, nomkstream=True) == f"{FUTURE}-131".encode()
    assert pr.execute_command("XADD", P3, "IDMPAUTO", "p1", "*", "f", "v") == \
        f"{FUTURE}-195".encode()
    assert pr.execute_command("XADD", P3, "MINID", "0", "*", "f", "v") == \
        f"{FUTURE}-259".encode()
    # a new key through the general path
    assert _seq(pr.xadd("{x7}events#7/64", {"f": "v"}, maxlen=10)) == 7


def test_a_full_millisecond_rolls_over(pr: redis.Redis) -> None:
    pr.xadd(P3, {"f": "v"}, id="1-3")
    pr.xadd(P61, {"f": "v"}, id="1-61")
    # SEQ_MAX = 63 (mod 64): above SEQ_MAX-10 (53), residue 61 still fits, residue 3 does not
    _xsetid(pr, P3, f"{FUTURE}-{SEQ_MAX - 10}")
    _xsetid(pr, P61, f"{FUTURE}-{SEQ_MAX - 10}")
    assert pr.xadd(P3, {"f": "v"}) == f"{FUTURE + 1}-3".encode()
    assert pr.xadd(P61, {"f": "v"}) == f"{FUTURE}-{SEQ_MAX - 2}".encode()
    assert pr.xadd(P61, {"f": "v"}) == f"{FUTURE + 1}-61".encode()
    # the very last millisecond: nothing left for `*`
    _xsetid(pr, P3, f"{SEQ_MAX}-{SEQ_MAX - 10}")
    with pytest.raises(redis.ResponseError, match="exhausted the last possible ID"):
        pr.xadd(P3, {"f": "v"})
    with pytest.raises(redis.ResponseError, match="exhausted the last possible ID"):
        pr.xadd(P3, {"f": "v"}, maxlen=5)


def test_ms_star(pr: redis.Redis) -> None:
    assert pr.xadd(P3, {"f": "v"}, id="5-*") == b"5-3"
    assert pr.xadd(P3, {"f": "v"}, id="5-*") == b"5-67"
    assert pr.xadd(P3, {"f": "v"}, id="9-*") == b"9-3"
    with pytest.raises(redis.ResponseError, match="equal or smaller than the target stream top"):
        pr.xadd(P3, {"f": "v"}, id="5-*")
    assert _seq(pr.xadd("{x7}new#9/10", {"f": "v"}, id="1-*")) == 9  # a new key
    _xsetid(pr, P3, f"20-{SEQ_MAX - 10}")
    with pytest.raises(redis.ResponseError, match="equal or smaller than the target stream top"):
        pr.xadd(P3, {"f": "v"}, id="20-*")
    assert pr.xadd(P3, {"f": "v"}, id="21-*") == b"21-3"


def test_explicit_ids_accepted_and_refused(pr: redis.Redis) -> None:
    want = "The ID specified in XADD must have a sequence number equal to 3 modulo 64"
    assert pr.xadd(P3, {"f": "v"}, id="5-3") == b"5-3"
    assert pr.xadd(P3, {"f": "v"}, id="5-131") == b"5-131"  # skipping residues is fine
    for bad in ("6-4", "6-0", "6", "6-2"):
        with pytest.raises(redis.ResponseError) as e:
            pr.xadd(P3, {"f": "v"}, id=bad)
        assert str(e.value) == want + " in this partition key"
    with pytest.raises(redis.ResponseError, match="modulo 64"):  # the general path too
        pr.xadd(P3, {"f": "v"}, id="6-4", maxlen=3, approximate=True)
    with pytest.raises(redis.ResponseError, match="modulo 64"):  # and a new key
        pr.xadd("{x7}events#9/64", {"f": "v"}, id="1-1")
    assert not pr.exists("{x7}events#9/64")
    # the residue first, then the usual order check
    with pytest.raises(redis.ResponseError, match="modulo 64"):
        pr.xadd(P3, {"f": "v"}, id="1-4")
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        pr.xadd(P3, {"f": "v"}, id="1-3")
    assert pr.xadd(P0, {"f": "v"}, id="6") == b"6-0"  # `ms` alone is ms-0: fine in partition 0
    assert pr.xlen(P3) == 2


def test_rename_and_restore_follow_the_name(pr: redis.Redis) -> None:
    pr.xadd(P3, {"f": "v"}, id=f"{FUTURE}-3")
    dump = pr.dump(P3)
    # RENAME to a plain name: Redis's rule from the last ID
    pr.rename(P3, "plain")
    assert pr.xadd("plain", {"f": "v"}) == f"{FUTURE}-4".encode()
    assert pr.xadd("plain", {"f": "v"}, id=f"{FUTURE}-7") == f"{FUTURE}-7".encode()
    # and on to another partition's name: that partition's rule
    pr.rename("plain", "{x7}events#10/64")
    assert pr.xadd("{x7}events#10/64", {"f": "v"}) == f"{FUTURE}-10".encode()
    with pytest.raises(redis.ResponseError, match="equal to 10 modulo 64"):
        pr.xadd("{x7}events#10/64", {"f": "v"}, id=f"{FUTURE}-200")
    # RESTORE under the partition's own name keeps the rule, under another name follows that
    pr.restore(P3, 0, dump)
    assert pr.xadd(P3, {"f": "v"}) == f"{FUTURE}-67".encode()
    pr.restore("copy", 0, dump)
    assert pr.xadd("copy", {"f": "v"}) == f"{FUTURE}-4".encode()
    pr.restore("{zz}other#1/4", 0, dump)
    assert pr.xadd("{zz}other#1/4", {"f": "v"}) == f"{FUTURE}-5".encode()
    # DEL and a new stream of the same name; XGROUP CREATE MKSTREAM makes one too
    pr.delete(P3)
    assert _seq(pr.xadd(P3, {"f": "v"})) == 3
    pr.xgroup_create(P61, "g", id="0", mkstream=True)
    _xsetid(pr, P61, f"{FUTURE}-0")
    assert pr.xadd(P61, {"f": "v"}) == f"{FUTURE}-61".encode()


# --- the name is the state: replicas and the AOF ------------------------------------------------
def test_replica_and_aof_replay_give_the_same_ids(xnode: Callable[..., NodeHandle],
                                                  pure: bool) -> None:
    env = _env(pure)
    primary = xnode("--appendonly", "yes", "--appendfsync", "always", env=env, name="primary")
    replica = xnode("--replicaof", f"127.0.0.1 {primary.port}", env=env, name="replica")
    p = primary.client()
    p.xadd(P3, {"f": "v"})
    _xsetid(p, P3, f"{FUTURE}-3")
    pipe = p.pipeline(transaction=False)
    for i in range(50):
        pipe.xadd(P3, {"i": str(i)})
        pipe.xadd(P61, {"i": str(i)}, maxlen=20, approximate=True)
    pipe.xadd(P3, {"f": "v"}, id=f"{FUTURE + 1}-*")
    pipe.execute()
    want = {k: p.xrange(k) for k in (P3, P61)}
    assert all(_seq(sid) % 64 == 3 for sid, _ in want[P3])
    assert all(_seq(sid) % 64 == 61 for sid, _ in want[P61])
    assert p.wait(1, 10000) == 1
    rc = replica.client()
    assert {k: rc.xrange(k) for k in (P3, P61)} == want
    primary.kill()
    primary.start()
    p = primary.client()
    assert {k: p.xrange(k) for k in (P3, P61)} == want
    # the reloaded stream still follows its name
    assert p.xadd(P3, {"f": "v"}) == f"{FUTURE + 1}-67".encode()
    with pytest.raises(redis.ResponseError, match="modulo 64"):
        p.xadd(P61, {"f": "v"}, id=f"{FUTURE + 5}-1")


# --- look-alike keys behave exactly like Redis --------------------------------------------------
LOOK_ALIKES = ["{X7}e#3/64", "{x7}e#03/64", "{x7}e#3/1025", "{x7}e#64/64", "{abcde}e#1/2",
               "x{a}e#1/2", "{a}#1/2", "{a}e#1/2/3", "{a}e#1/1", "events"]


@pytest.mark.parametrize("key", LOOK_ALIKES)
def test_look_alike_keys_match_redis(pnode: NodeHandle, oracle: NodeHandle, key: str) -> None:
    ours = RawClient(pnode.host, pnode.port)
    ref = RawClient(oracle.host, oracle.port)
    try:
        for c in (ours, ref):
            c.call("DEL", key)
        Pair(ours, ref).run([
            ("XADD", key, "5-4", "f", "v"),
            ("XADD", key, "5-*", "f", "v"),
            ("XADD", key, "5-9", "f", "v"),
            ("XADD", key, "6", "f", "v"),
            ("XADD", key, "5-*", "f", "v"),
            ("XSETID", key, f"{FUTURE}-5"),
            ("XADD", key, "*", "f", "v"),
            ("XADD", key, "MAXLEN", "~", "3", "*", "f", "v"),
            ("XADD", key, "MAXLEN", "3", "*", "f", "v"),
            ("XADD", key, f"{FUTURE}-*", "f", "v"),
            ("XSETID", key, f"{FUTURE}-{SEQ_MAX}"),
            ("XADD", key, "*", "f", "v"),
            ("XADD", key, f"{FUTURE + 1}-*", "f", "v"),
            ("XRANGE", key, "-", "+"),
            ("XLEN", key),
            ("DEL", key),
        ])
    finally:
        ours.close()
        ref.close()
