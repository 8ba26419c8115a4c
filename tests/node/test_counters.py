"""INFO counters against a 7.2+ reference: the change counter and commandstats.

- `rdb_changes_since_last_save` (Redis's `server.dirty`) moves as in Redis: one per XADD, one
  per deleted entry or key, one per acknowledged or claimed entry, one per stream an
  XREADGROUP served, one per consumer created; not one per effect the node emits. Replicas and
  the AOF still get every effect (`master_repl_offset` moves where the count does not).
- A command that blocks is one call in commandstats and total_commands_processed, counted when
  it is released (served, timed out, or CLIENT UNBLOCK), as Redis's updateStatsOnUnblock does.
"""

from __future__ import annotations

import pytest

from tests.support.groupdiff import Deferred, group_workload, wait_blocked
from tests.support.rawresp import RawClient


def _info(c: RawClient, section: str) -> dict[str, str]:
    text = c.call("INFO", section)[1].decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _dirty(c: RawClient) -> int:
    return int(_info(c, "persistence")["rdb_changes_since_last_save"])


def _deltas(handle, script: list[list[bytes]]) -> list[int]:
    """The change counter's step for each command of `script`, on a flushed server."""
    c = RawClient(handle.host, handle.port)
    c.call("FLUSHALL")
    out = []
    try:
        for cmd in script:
            before = _dirty(c)
            c.call(*cmd)
            out.append(_dirty(c) - before)
    finally:
        c.call("FLUSHALL")
        c.close()
    return out


GENERIC = [
    ["SET", "k", "v"], ["SET", "k", "v", "NX"], ["SET", "k", "v", "XX", "EX", "100"],
    ["EXPIRE", "k", "100"], ["EXPIRE", "k", "100", "NX"], ["PERSIST", "k"], ["PERSIST", "k"],
    ["EXPIRE", "k", "-1"], ["GET", "k"], ["SET", "k", "v"], ["RENAME", "k", "k2"],
    ["RENAME", "k2", "k2"], ["RENAMENX", "k2", "k3"], ["RPUSH", "l", "a", "b", "c"],
    ["LPUSH", "l", "d"], ["SADD", "st", "a", "b"], ["SADD", "st", "a", "b", "c"],
    ["DEL", "l", "st", "nokey"], ["XADD", "s", "1-1", "f", "v"], ["XADD", "s", "2-1", "f", "v"],
    ["XADD", "s", "MAXLEN", "1", "3-1", "f", "v"], ["XADD", "s", "NOMKSTREAM", "*", "f", "v"],
    ["XADD", "t", "NOMKSTREAM", "*", "f", "v"], ["XDEL", "s", "3-1", "9-9"], ["XSETID", "s", "5-0"],
    ["XADD", "s", "6-1", "f", "v"], ["XADD", "s", "7-1", "f", "v"], ["XTRIM", "s", "MAXLEN", "0"],
    ["XTRIM", "s", "MAXLEN", "0"], ["SET", "a", "1"], ["FLUSHALL"], ["FLUSHALL"],
]


def test_change_counter_of_generic_and_stream_commands_matches_redis(node, oracle72) -> None:
    script = [[str(a).encode() for a in cmd] for cmd in GENERIC]
    assert _deltas(node, script) == _deltas(oracle72, script)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_change_counter_of_group_commands_matches_redis(node, oracle72, seed: int) -> None:
    # Reads of a consumer's own history are left out: Redis 7.4 counts them as no change
    # (the test below), 7.2 counts one. Idle times are 0 so that timing cannot differ.
    script = []
    for cmd in group_workload(seed, 250):
        if cmd[0] == b"XREADGROUP" and cmd[-1] != b">":
            cmd = cmd[:-1] + [b">"]
        elif cmd[0] in (b"XCLAIM", b"XAUTOCLAIM"):
            cmd = cmd[:4] + [b"0"] + cmd[5:]
            if b"IDLE" in cmd:
                i = cmd.index(b"IDLE")
                cmd = cmd[:i] + cmd[i + 2:]
        script.append(cmd)
    mine, theirs = _deltas(node, script), _deltas(oracle72, script)
    for cmd, a, b in zip(script, mine, theirs, strict=True):
        assert a == b, f"{cmd}: xshard {a}, reference {b}"


def test_xreadgroup_counts_one_change_per_stream_and_history_reads_none(node) -> None:
    """Redis 7.4: delivering new entries is one change per stream served, however many
    entries; re-reading one's own pending entries changes nothing in the count. The effects
    (XCLAIM per delivery, also for the re-read's new delivery count) still go out."""
    c = RawClient(node.host, node.port)
    c.call("FLUSHALL")
    try:
        for i in range(1, 4):
            c.call("XADD", "s", f"{i}-1", "f", "v")
        c.call("XGROUP", "CREATE", "s", "g", "0")
        c.call("XGROUP", "CREATECONSUMER", "s", "g", "alice")
        steps = []
        for cmd in (["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"],
                    ["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"]):
            d0 = _dirty(c)
            off0 = int(_info(c, "replication")["master_repl_offset"])
            reply = c.call(*cmd)
            assert len(reply[1][0][1][1][1]) == 3, reply
            steps.append((_dirty(c) - d0,
                          int(_info(c, "replication")["master_repl_offset"]) > off0))
    finally:
        c.call("FLUSHALL")
        c.close()
    assert steps == [(1, True), (0, True)]


def _cmdstats(c: RawClient) -> dict[str, str]:
    return {k: v for k, v in _info(c, "commandstats").items() if k == "cmdstat_xread"}


def _blocking_counts(handle) -> list:
    """commandstats, errorstats and total_commands_processed around blocked XREADs."""
    ctl = RawClient(handle.host, handle.port)
    ctl.call("FLUSHALL")
    ctl.call("CONFIG", "RESETSTAT")
    out = []

    def snap() -> None:
        st = _cmdstats(ctl)
        total = int(_info(ctl, "stats")["total_commands_processed"])
        err = {k: v for k, v in _info(ctl, "errorstats").items() if "UNBLOCKED" in k}
        # usec varies; keep calls, rejected and failed
        out.append(({k: ",".join(f for f in v.split(",") if "usec" not in f)
                     for k, v in st.items()}, total, err))

    d = Deferred(handle)
    d.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    wait_blocked(handle, 1)
    snap()  # blocked: not counted yet
    ctl.call("XADD", "s", "1-1", "f", "v")
    d.read()
    snap()  # served: one call
    d.send("XREAD", "BLOCK", "20", "STREAMS", "s", "$")
    d.read()
    snap()  # timed out: one more
    d.send("CLIENT", "ID")
    cid = d.read()[1]
    d.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    wait_blocked(handle, 1)
    ctl.call("CLIENT", "UNBLOCK", cid, "ERROR")
    out.append(d.read())
    snap()  # unblocked with an error
    d.close()
    ctl.call("FLUSHALL")
    ctl.close()
    return out


def test_a_blocked_command_is_counted_once(node, oracle72) -> None:
    mine, theirs = _blocking_counts(node), _blocking_counts(oracle72)
    assert mine == theirs
    assert mine[1][0]["cmdstat_xread"].startswith("calls=1,")
