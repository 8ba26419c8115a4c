"""A group's `entries-read` and `lag` after ENTRIESREAD, compared with both oracles.

Rules (node/groups.py `advance`, `lag`, `estimate_distance`), with their source:

- **Redis 7.4.2+ / 8.x, valkey 8.1 (sure: Redis PRs #13338, #13473, #13958; valkey's
  t_stream.c).** A read increments the group's counter only while it is valid, the group's
  last-delivered ID is not before the stream's first entry, and no tombstone lies after that
  ID; otherwise the counter is re-estimated for the delivered ID. So `XGROUP CREATE s g 0-3
  ENTRIESREAD 3` on four entries with current-time IDs, a read of all four and two more XADDs
  give `entries-read 4, lag 2`.
- **Redis 7.0 to 7.4.1 (the quirk these servers had).** The same read increments the stale
  counter (3 + 4 = 7) and XINFO GROUPS shows `entries-read 7, lag -1`: the lag counts entries
  the group can never read, below zero. xshard does not reproduce it (docs/compatibility.md);
  Redis itself fixed it. Against redis-server 7.0 these two fields are therefore masked, and
  everything else in the replies is compared exactly.

- **Redis 8.10 (sure: redis/redis#14257, "Negative lag when ENTRIESREAD specified
  externally", fixed; apache/kvrocks#3581 quotes t_stream.c and shows Redis 8.10's replies).**
  XGROUP CREATE/SETID store an ENTRIESREAD above the stream's entries-added as entries-added
  (the next read re-estimates it as above when the cursor is before the first entry), and
  XINFO reports `lag` = the stream's length for a group whose last-delivered ID is before
  the first entry, and 0 for an emptied stream. Valkey 8.1 does neither, so the comparison
  with it sends valkey the clamped ENTRIESREAD and rewrites the lag of such groups in its
  replies: exactly those two rules, and nothing else, are adjusted.

Each case is a matrix cell: ENTRIESREAD below, at and above the stream's entries-added, with
cursors before, at, inside and after the entries, after nothing, an XDEL of the first, a
middle or the last entry, or an XTRIM of the first entry; set by XGROUP CREATE or SETID; then
a partial read, a full read and two more XADDs, with XINFO GROUPS after each step.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.diff import SideState, normalize
from tests.support.groupdiff import drop_72_fields
from tests.support.rawresp import RawClient, Reply, show

ENTRIESREAD = [0, 1, 3, 4, 5, 9]  # entries-added is 4 (below: 0-3, at: 4, above: 5, 9)
CURSORS = [b"0", b"0-3", b"$", b"2-0", b"3-0", b"9-0"]
BEFORE = [[], [b"XDEL", b"s", b"1-0"], [b"XDEL", b"s", b"2-0"], [b"XDEL", b"s", b"4-0"],
          [b"XTRIM", b"s", b"MAXLEN", b"3"]]


def _case(er: int, cursor: bytes, before: list[bytes], setid: bool) -> list[list[bytes]]:
    cmds = [[b"XADD", b"s", b"%d-0" % i, b"a", b"%d" % i] for i in range(1, 5)]
    if before:
        cmds.append(before)
    if setid:
        cmds += [[b"XGROUP", b"CREATE", b"s", b"g", b"0"],
                 [b"XGROUP", b"SETID", b"s", b"g", cursor, b"ENTRIESREAD", b"%d" % er]]
    else:
        cmds.append([b"XGROUP", b"CREATE", b"s", b"g", cursor, b"ENTRIESREAD", b"%d" % er])
    info = [b"XINFO", b"GROUPS", b"s"]
    # The consumer exists before the reads: 7.0 creates it only when a read delivers.
    cmds += [[b"XGROUP", b"CREATECONSUMER", b"s", b"g", b"c"], info, [b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"1", b"STREAMS", b"s", b">"],
             info, [b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"s", b">"], info,
             [b"XADD", b"s", b"6-0", b"a", b"6"], [b"XADD", b"s", b"7-0", b"a", b"7"], info,
             [b"XINFO", b"STREAM", b"s", b"FULL"]]
    return cmds


CASES = [_case(er, cur, before, setid) for er, cur, before, setid
         in itertools.product(ENTRIESREAD, CURSORS, BEFORE, (False, True))]

_MASK = (":", "<7.0 lag rules>")


def _mask_counters(reply: Reply) -> Reply:
    """Blank every `entries-read` / `lag` value of a reply tree (RESP2 flat maps)."""
    if not isinstance(reply, tuple) or reply[0] != "*" or reply[1] is None:
        return reply
    items = [_mask_counters(x) for x in reply[1]]
    for i in range(0, len(items) - 1):
        if items[i] in (("$", b"entries-read"), ("$", b"lag")) and items[i + 1][0] in (":", "_", "$"):
            items[i + 1] = _MASK
    return ("*", items)


ADDED = 4  # entries-added when the group is made: no case's BEFORE step changes it


def _as_redis_810(script: list[list[bytes]]) -> list[list[bytes]]:
    """The script valkey 8.1 must run to store what Redis 8.10 stores: ENTRIESREAD clamped."""
    out = []
    for cmd in script:
        if cmd[0] == b"XGROUP" and b"ENTRIESREAD" in cmd and int(cmd[-1]) > ADDED:
            cmd = [*cmd[:-1], b"%d" % ADDED]
        out.append(cmd)
    return out


def _stream_shape(script: list[list[bytes]], step: int) -> tuple[int, int]:
    """(first entry's ms, length) of the case's stream after command `step`: 1-0 to 4-0,
    less the entry the BEFORE step removes, plus 6-0 and 7-0 once added."""
    cmds = script[:step + 1]
    before = cmds[4] if len(cmds) > 4 and cmds[4][0] in (b"XDEL", b"XTRIM") else None
    first = 2 if before in ([b"XDEL", b"s", b"1-0"], [b"XTRIM", b"s", b"MAXLEN", b"3"]) else 1
    length = 4 - (before is not None) + sum(c[:3] in ([b"XADD", b"s", b"6-0"],
                                                       [b"XADD", b"s", b"7-0"]) for c in cmds)
    return first, length


def _lag_810(reply: Reply, first: int, length: int) -> Reply:
    """Valkey's reply with Redis 8.10's lag for every group behind the first entry."""
    if not isinstance(reply, tuple) or reply[0] != "*" or reply[1] is None:
        return reply
    items = [_lag_810(x, first, length) for x in reply[1]]
    keys = items[0::2]
    if ("$", b"last-delivered-id") in keys and ("$", b"lag") in keys:
        last = items[keys.index(("$", b"last-delivered-id")) * 2 + 1][1]
        ms, seq = (int(x) for x in last.split(b"-"))
        if (ms, seq) < (first, 0):
            items[keys.index(("$", b"lag")) * 2 + 1] = (":", length)
    return ("*", items)


def _replies(handle, script: list[list[bytes]]) -> list[Reply]:
    c = RawClient(handle.host, handle.port)
    try:
        c.call("FLUSHALL")
        side = SideState(handle.name)
        return [normalize(cmd, r, side) for cmd, r in zip(script, c.pipeline(script), strict=True)]
    finally:
        c.call("FLUSHALL")
        c.close()


def _compare(node, ref, masked: bool, as_810: bool = False, drop72: bool | None = None) -> int:
    """Run every case on both; fail on the first difference; return how many cases the
    counters (unmasked) also agreed on. With `as_810`, the reference's run and replies are
    adjusted to Redis 8.10's two rules (above) first."""
    exact = 0
    for script in CASES:
        ours = _replies(node, script)
        if as_810:
            theirs = [_lag_810(r, *_stream_shape(script, i))
                      for i, r in enumerate(_replies(ref, _as_redis_810(script)))]
        else:
            theirs = _replies(ref, script)
        if masked if drop72 is None else drop72:  # 7.0 has no `active-time` / `inactive`
            ours = [drop_72_fields(tuple(x.decode() for x in c), r)
                    for c, r in zip(script, ours, strict=True)]
        if ours == theirs:
            exact += 1
            continue
        if masked:
            ours = [_mask_counters(r) for r in ours]
            theirs = [_mask_counters(r) for r in theirs]
        for cmd, a, b in zip(script, ours, theirs, strict=True):
            assert a == b, (f"{b' '.join(cmd).decode()}\nxshard:\n{show(a)}\n{ref.name}:\n"
                            f"{show(b)}\nscript: {[b' '.join(x).decode() for x in script]}")
    return exact


def test_entriesread_matrix_matches_72_reference_with_810_rules(node, oracle72) -> None:
    """Valkey 8.1 has the corrected rules of Redis 7.4.2+/8.x; with Redis 8.10's clamp and
    lag rules applied to its run, every reply and every field agree."""
    assert _compare(node, oracle72, masked=False, as_810=True) == len(CASES)


def test_the_810_rules_change_some_cells_only(node, oracle72) -> None:
    """Unadjusted, valkey 8.1 disagrees only in the counters, and only in part of the cases:
    the adjustment above is needed, and only there."""
    exact = _compare(node, oracle72, masked=True, drop72=False)
    assert 0 < exact < len(CASES)


def test_entriesread_matrix_matches_redis70_outside_the_counters(node, oracle) -> None:
    """Redis 7.0 has the old rules: only `entries-read` and `lag` may differ (and do, in a
    part of the cases; the rest agree exactly)."""
    if oracle.version >= (7, 2):
        pytest.skip("the oracle is 7.2+: the exact comparison above covers it")
    exact = _compare(node, oracle, masked=True)
    assert 0 < exact < len(CASES)


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_issue_case_with_current_time_ids(node, oracle72, protocol: int) -> None:
    """4 entries with `*` IDs, `XGROUP CREATE s g2 0-3 ENTRIESREAD 3` (the cursor before the
    first entry), a read of all 4, two more XADDs: the corrected rule re-estimates the counter
    at the first delivered entry, so XINFO GROUPS shows entries-read 4 and lag 2 (Redis 7.0 to
    7.4.1 showed 7 and -1). Compared with the 7.2+ reference in both protocols."""
    script = ([[b"XADD", b"s", b"*", b"a", b"%d" % i] for i in range(4)]
              + [[b"XGROUP", b"CREATE", b"s", b"g2", b"0-3", b"ENTRIESREAD", b"3"],
                 [b"XREADGROUP", b"GROUP", b"g2", b"c1", b"STREAMS", b"s", b">"],
                 [b"XADD", b"s", b"*", b"a", b"4"], [b"XADD", b"s", b"*", b"a", b"5"],
                 [b"XINFO", b"GROUPS", b"s"]])
    out = {}
    for h in (node, oracle72):
        c = RawClient(h.host, h.port)
        try:
            if protocol == 3:
                c.hello(3)
            c.call("FLUSHALL")
            side = SideState(h.name)
            out[h.name] = [normalize(cmd, c.call(*cmd), side) for cmd in script]
            c.call("FLUSHALL")
        finally:
            c.close()
    ours, theirs = out[node.name], out[oracle72.name]
    assert ours == theirs
    group = ours[-1][1][0]
    pairs = group[1] if protocol == 3 else list(zip(group[1][::2], group[1][1::2], strict=True))
    fields = {k[1]: v for k, v in pairs}
    assert fields[b"entries-read"] == (":", 4) and fields[b"lag"] == (":", 2)


def _groups(h, script: list[list[bytes]]) -> list[dict[bytes, Reply]]:
    """Run `script` on a fresh key space; each XINFO GROUPS's first group as a dict."""
    c = RawClient(h.host, h.port)
    try:
        c.call("FLUSHALL")
        out = []
        for cmd in script:
            r = c.call(*cmd)
            if cmd[:2] == [b"XINFO", b"GROUPS"]:
                flat = r[1][0][1]
                out.append({k[1]: v for k, v in zip(flat[::2], flat[1::2], strict=True)})
        c.call("FLUSHALL")
        return out
    finally:
        c.close()


def _counters(groups: list[dict[bytes, Reply]]) -> list[tuple[Reply, Reply]]:
    return [(g[b"entries-read"], g[b"lag"]) for g in groups]


INFO = [b"XINFO", b"GROUPS", b"x"]


def test_kvrocks_3581_redis_810_example_verbatim(node, oracle72) -> None:
    """apache/kvrocks#3581, Redis 8.10's replies: XADD 1-0, 2-0, 3-0; `XGROUP CREATE x grp 0
    ENTRIESREAD 1000000` gives entries-read 3 (clamped to entries-added) and lag 3 (the group
    is before the first entry: the stream's length); `XREADGROUP GROUP grp c1 COUNT 2 STREAMS
    x >` re-estimates the counter at 1-0 and gives entries-read 2, lag 1. Valkey 8.1 keeps
    1000000 (lag -999997) before the read."""
    script = [[b"XADD", b"x", b"%d-0" % i, b"f", b"v"] for i in (1, 2, 3)] + [
        [b"XGROUP", b"CREATE", b"x", b"grp", b"0", b"ENTRIESREAD", b"1000000"], INFO,
        [b"XREADGROUP", b"GROUP", b"grp", b"c1", b"COUNT", b"2", b"STREAMS", b"x", b">"], INFO]
    assert _counters(_groups(node, script)) == [((":", 3), (":", 3)), ((":", 2), (":", 1))]
    assert _counters(_groups(oracle72, script))[0] == ((":", 1000000), (":", -999997))


@pytest.mark.parametrize("sub", [b"CREATE", b"SETID"])
def test_redis_14257_entriesread_above_entries_added_is_clamped(node, sub: bytes) -> None:
    """redis/redis#14257: one XADD, then ENTRIESREAD 100 at `$` showed entries-read 100, lag
    -99; fixed, Redis stores entries-added (1) and reports lag 0. The clamp is in the option
    parsing CREATE and SETID share (kvrocks#3581: "XGROUP CREATE/SETID")."""
    made = [] if sub == b"CREATE" else [[b"XGROUP", b"CREATE", b"x", b"g", b"0"]]
    script = [[b"XADD", b"x", b"*", b"f", b"v"], *made,
              [b"XGROUP", sub, b"x", b"g", b"$", b"ENTRIESREAD", b"100"], INFO,
              [b"XADD", b"x", b"*", b"f", b"v"], INFO]
    assert _counters(_groups(node, script)) == [((":", 1), (":", 0)), ((":", 1), (":", 1))]


def test_lag_behind_the_first_entry_is_the_length(node, oracle72) -> None:
    """kvrocks#3581 on streamReplyWithCGLag: a group whose last-delivered ID is before the
    first entry has the whole stream ahead of it, whatever its counter: 3 entries, a group at
    0 with ENTRIESREAD 0, the first entry trimmed: lag 2 (valkey 8.1: 3 - 0 = 3)."""
    script = [[b"XADD", b"x", b"%d-0" % i, b"f", b"v"] for i in (1, 2, 3)] + [
        [b"XGROUP", b"CREATE", b"x", b"g", b"0", b"ENTRIESREAD", b"0"],
        [b"XTRIM", b"x", b"MAXLEN", b"2"], INFO]
    assert _counters(_groups(node, script)) == [((":", 0), (":", 2))]
    assert _counters(_groups(oracle72, script)) == [((":", 0), (":", 3))]


def test_lag_of_an_emptied_stream_is_zero(node, oracle72) -> None:
    """kvrocks#3581: "0 for an emptied stream": the same group after every entry is trimmed
    has nothing left to read (valkey 8.1: 3 - 0 = 3)."""
    script = [[b"XADD", b"x", b"%d-0" % i, b"f", b"v"] for i in (1, 2, 3)] + [
        [b"XGROUP", b"CREATE", b"x", b"g", b"0", b"ENTRIESREAD", b"0"],
        [b"XTRIM", b"x", b"MAXLEN", b"0"], INFO]
    assert _counters(_groups(node, script)) == [((":", 0), (":", 0))]
    assert _counters(_groups(oracle72, script)) == [((":", 0), (":", 3))]
