"""Generic commands (keys, expiry, transactions, connection, CONFIG, INFO) against the oracle.

Each script runs on a fresh connection to both servers; replies are compared as raw RESP trees.
"""

from __future__ import annotations

import socket
import time

import pytest
import redis

from tests.support.rawresp import RawClient

SCRIPTS = {
    "wrongtype": [
        ["SET", "s", "v"], ["XADD", "s", "1-1", "f", "v"], ["XLEN", "s"], ["XRANGE", "s", "-", "+"],
        ["LPUSH", "l", "a"], ["XADD", "l", "1-1", "f", "v"], ["SADD", "z", "a"], ["XLEN", "z"],
        ["XADD", "x", "1-1", "f", "v"], ["GET", "x"], ["LPUSH", "x", "a"], ["SADD", "x", "a"],
        ["TYPE", "x"], ["TYPE", "s"], ["TYPE", "l"], ["TYPE", "z"], ["TYPE", "nope"],
    ],
    "keys": [
        ["XADD", "a1", "1-1", "f", "v"], ["XADD", "a2", "1-1", "f", "v"], ["XADD", "b1", "1-1", "f", "v"],
        ["EXISTS", "a1", "a2", "zz", "a1"], ["DBSIZE"], ["DEL", "a2", "zz"], ["UNLINK", "b1"],
        ["EXISTS", "a1", "a2", "b1"], ["DBSIZE"], ["KEYS", "a*"], ["KEYS", "[ab]1"], ["KEYS", "nomatch*"],
        ["DEL"], ["FLUSHALL", "bogus"], ["FLUSHALL"], ["DBSIZE"],
    ],
    "rename": [
        ["XADD", "src", "1-1", "f", "v"], ["RENAME", "src", "dst"], ["XLEN", "dst"], ["EXISTS", "src"],
        ["RENAME", "nokey", "x"], ["RENAME", "dst", "dst"], ["XADD", "other", "1-1", "a", "b"],
        ["RENAMENX", "dst", "other"], ["RENAMENX", "dst", "fresh"], ["XRANGE", "fresh", "-", "+"],
        ["RENAMENX", "missing", "x"],
    ],
    "expire": [
        ["XADD", "k", "1-1", "f", "v"], ["TTL", "k"], ["PTTL", "k"], ["TTL", "missing"],
        ["EXPIRE", "k", "abc"], ["EXPIRE", "k", "100", "XX"], ["EXPIRE", "k", "100", "NX"],
        ["EXPIRE", "k", "200", "NX"], ["EXPIRE", "k", "50", "GT"], ["EXPIRE", "k", "300", "GT"],
        ["EXPIRE", "k", "1000", "LT"], ["EXPIRE", "k", "10", "LT"], ["TTL", "k"],
        ["EXPIRE", "k", "10", "NX", "XX"], ["EXPIRE", "k", "10", "GT", "LT"], ["EXPIRE", "k", "10", "FOO"],
        ["PERSIST", "k"], ["PERSIST", "k"], ["TTL", "k"], ["EXPIRE", "missing", "10"],
        ["EXPIRE", "k", "-1"], ["EXISTS", "k"], ["EXPIRE", "k", "99999999999999999"],
        ["PEXPIRE", "k", "99999999999999999999"],
    ],
    "multi": [
        ["MULTI"], ["XADD", "m", "1-1", "f", "v"], ["XLEN", "m"], ["XADD", "m", "0-1", "f", "v"],
        ["EXEC"], ["EXEC"], ["DISCARD"], ["MULTI"], ["MULTI"], ["XLEN", "m"], ["DISCARD"],
        ["MULTI"], ["NOSUCHCOMMAND"], ["XLEN", "m"], ["EXEC"], ["MULTI"], ["XLEN"], ["EXEC"],
        ["MULTI"], ["WATCH", "m"], ["EXEC"],
        ["MULTI"], ["XREAD", "BLOCK", "1000", "STREAMS", "nothing", "$"], ["EXEC"],
    ],
    "connection": [
        ["PING"], ["PING", "hello"], ["PING", "a", "b"], ["ECHO", "x"], ["ECHO"], ["SELECT", "0"],
        ["SELECT", "x"], ["CLIENT", "SETNAME", "bad name"], ["CLIENT", "SETNAME", "good"],
        ["CLIENT", "GETNAME"], ["CLIENT", "SETNAME", ""], ["CLIENT", "GETNAME"],
        ["CLIENT", "UNBLOCK", "99999"], ["CLIENT", "UNBLOCK", "1", "BAD"], ["CLIENT", "NOPE"],
        ["CLIENT", "KILL", "1.2.3.4:5"], ["CLIENT", "KILL", "ID", "999999"], ["HELLO", "4"],
        ["HELLO", "x"], ["HELLO", "2", "FOO"], ["AUTH", "pw"], ["AUTH", "a", "b", "c"],
        ["NOSUCH", "a", "b"], ["xadd"], ["CONFIG", "GET", "stream-node-max-e*"],
        ["CONFIG", "SET", "stream-node-max-entries", "abc"], ["CONFIG", "SET", "no-such-option", "1"],
        ["CONFIG", "SET", "stream-node-max-entries", "50", "stream-node-max-bytes", "2048"],
        ["CONFIG", "GET", "stream-node-max-entries"], ["CONFIG", "GET", "stream-node-max-bytes"],
        ["CONFIG", "SET", "stream-node-max-entries", "100", "stream-node-max-bytes", "4096"],
        ["CONFIG", "NOPE"], ["CONFIG", "GET"],
    ],
    "memory": [  # the sizes are our own estimate; what is compared is around them
        ["MEMORY", "USAGE", "nokey"], ["MEMORY", "USAGE", "nokey", "SAMPLES"],
        ["MEMORY", "USAGE", "nokey", "SAMPLES", "-1"], ["MEMORY", "USAGE", "nokey", "SAMPLES", "x"],
        ["MEMORY", "USAGE", "nokey", "SAMPLES", "0", "BOGUS"], ["MEMORY", "USAGE"],
        ["MEMORY", "FOO"], ["MEMORY", "USAGE", "nokey", "SAMPLES", "0"],
    ],
    "scan": [
        *[["XADD", f"k{i}", "1-1", "f", "v"] for i in range(30)],
        ["SCAN", "0", "COUNT", "0"], ["SCAN", "x"], ["SCAN", "0", "MATCH"], ["SCAN", "0", "BOGUS", "1"],
    ],
}


def _run(port: int, script: list[list[str]], proto: int) -> list:
    c = RawClient("127.0.0.1", port)
    try:
        if proto == 3:
            c.call("HELLO", "3")
        return [c.call(*cmd) for cmd in script]
    finally:
        c.close()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_generic_scripts_match_redis(name, node, oracle, protocol):
    script = SCRIPTS[name]
    try:
        mine = _run(node.port, script, protocol)
        theirs = _run(oracle.port, script, protocol)
    finally:
        for h in (node, oracle):
            c = RawClient("127.0.0.1", h.port)
            c.call("FLUSHALL")
            c.close()
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if name == "expire" and script[i][0] in ("TTL", "PTTL") and a[0] == ":" and b[0] == ":":
            assert abs(a[1] - b[1]) <= 1000 and (a[1] >= 0) == (b[1] >= 0)
            continue
        assert a == b, f"{name} step {i}: {script[i]}\n node:   {a}\n redis:  {b}"


def test_scan_returns_every_key_once_under_churn(r):
    for i in range(200):
        r.xadd(f"key:{i}", {"f": "v"}, id="1-1")
    seen: list[bytes] = []
    cursor = 0
    extra = 0
    while True:
        cursor, keys = r.scan(cursor, count=17)
        seen += keys
        r.xadd(f"new:{extra}", {"f": "v"}, id="1-1")  # keys that come and go must not hide others
        r.delete(f"new:{extra}")
        extra += 1
        if cursor == 0:
            break
    stable = [k for k in seen if k.startswith(b"key:")]
    assert sorted(stable) == sorted(f"key:{i}".encode() for i in range(200))
    assert r.scan(0, match="key:1?", count=1000)[1] and all(
        k.startswith(b"key:1") and len(k) == 6 for k in r.scan(0, match="key:1?", count=1000)[1])
    assert r.scan(0, _type="string", count=1000)[1] == []


def test_watch_detects_a_concurrent_write(node, r):
    r.xadd("w", {"f": "v"}, id="1-1")
    other = node.client()
    with r.pipeline() as p:
        p.watch("w")
        other.xadd("w", {"f": "v"}, id="2-1")
        p.multi()
        p.xlen("w")
        with pytest.raises(redis.WatchError):
            p.execute()
    with r.pipeline() as p:
        p.watch("w")
        p.multi()
        p.xlen("w")
        assert p.execute() == [2]


def test_expired_stream_disappears(r):
    r.xadd("e", {"f": "v"}, id="1-1")
    r.pexpire("e", 50)
    time.sleep(0.15)
    assert r.exists("e") == 0
    assert r.xlen("e") == 0


def test_hello_3_switches_to_resp3_maps(node):
    c = node.client(protocol=3)
    info = c.execute_command("HELLO", "3")
    assert info[b"proto"] == 3 and info[b"server"] == b"redis"
    c.xadd("h", {"f": "v"}, id="1-1")
    got = c.config_get("stream-node-max-entries")
    assert {_s(k): _s(v) for k, v in got.items()} == {"stream-node-max-entries": "100"}
    c.delete("h")


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def test_requirepass(xnode):
    n = xnode("--requirepass", "s3cret")
    raw = RawClient("127.0.0.1", n.port)
    assert raw.call("XLEN", "x") == ("-", b"NOAUTH Authentication required.")
    assert raw.call("AUTH", "wrong") == (
        "-", b"WRONGPASS invalid username-password pair or user is disabled.")
    assert raw.call("AUTH", "s3cret") == ("+", b"OK")
    assert raw.call("XLEN", "x") == (":", 0)
    raw.close()
    c = n.client(password="s3cret")
    assert c.ping() is True


def test_info_sections(node, r):
    r.xadd("i", {"f": "v"}, id="1-1")
    with pytest.raises(redis.ResponseError):
        r.execute_command("XADD", "i", "0-1", "f", "v")
    info = r.info("everything")
    for field in ("redis_version", "connected_clients", "blocked_clients", "used_memory",
                  "total_error_replies", "role", "db0", "cmdstat_xadd", "errorstat_ERR"):
        assert field in info, field
    assert info["cmdstat_xadd"]["failed_calls"] >= 1
    assert info["db0"]["keys"] >= 1


def test_debug_needs_enabling(node, xnode):
    c = node.client()
    with pytest.raises(redis.ResponseError, match="DEBUG command not allowed"):
        c.execute_command("DEBUG", "SLEEP", "0")
    n = xnode("--enable-debug-command", "yes")
    assert n.client().execute_command("DEBUG", "SLEEP", "0") == b"OK"


def test_unknown_startup_option_is_refused(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "control.cli", "node", "--no-such-option", "1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "unknown option 'no-such-option'" in p.stderr
    conf = tmp_path / "x.conf"
    conf.write_text("# comment\nport 0\nstream-node-max-entries 7\nbogus yes\n")
    p = subprocess.run([sys.executable, "-m", "control.cli", "node", "--config", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "unknown option 'bogus'" in p.stderr


def test_config_file_is_read(xnode, tmp_path):
    conf = tmp_path / "n.conf"
    conf.write_text('stream-node-max-entries 7\nrequirepass "pw"\n')
    n = xnode("--config", str(conf))
    c = n.client(password="pw")
    assert c.config_get("stream-node-max-entries")["stream-node-max-entries"] == "7"


def test_inline_commands(node):
    s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    s.sendall(b"PING\r\nECHO \"a b\"\r\n\r\nXLEN nokey\n")
    data = b""
    while data.count(b"\r\n") < 3:
        data += s.recv(1000)
    assert data == b"+PONG\r\n$3\r\na b\r\n:0\r\n"
    s.close()


def test_inline_command_with_a_nul_byte_is_an_unfinished_line(node, oracle):
    """Redis finds an inline command's newline with strchr, which stops at a NUL: the line
    never ends, and past 64 KiB the client gets a protocol error. (Our parser looped forever
    on a NUL, stalling the whole node.) Other clients are served meanwhile."""
    def run(port: int) -> tuple[bytes, bytes]:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"ECHO a\0b\r\nPING\r\n")
        other = socket.create_connection(("127.0.0.1", port), timeout=10)
        other.sendall(b"PING\r\n")
        served = other.recv(100)
        other.close()
        s.sendall(b"x" * 70000 + b"\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = s.recv(1000)
            if not chunk:
                break
            data += chunk
        s.close()
        return served, data

    assert run(node.port) == run(oracle.port) == (
        b"+PONG\r\n", b"-ERR Protocol error: too big inline request\r\n")


def test_deep_pipeline_keeps_order_and_other_clients_are_served(node, r):
    """A pipeline far deeper than one turn's share runs in order while others get served."""
    other = node.client()
    with r.pipeline(transaction=False) as p:
        for i in range(1, 3001):
            p.xadd("deep", {"i": str(i)}, id=f"{i}-1")
        p.xlen("deep")
        replies = p.execute()
    assert replies[:3000] == [f"{i}-1".encode() for i in range(1, 3001)]
    assert replies[3000] == 3000
    assert other.ping() is True


def test_active_expiry_removes_keys_nobody_reads(r):
    with r.pipeline(transaction=False) as p:
        for i in range(1500):
            p.xadd(f"ttl:{i}", {"f": "v"}, id="1-1")
            p.pexpire(f"ttl:{i}", 100)
        p.execute()
    r.xadd("keep", {"f": "v"}, id="1-1")
    deadline = time.time() + 20
    while r.dbsize() > 1 and time.time() < deadline:
        time.sleep(0.2)
    assert r.dbsize() == 1  # DBSIZE does not expire lazily: the cron did it
    assert r.info("stats")["expired_keys"] >= 1500


def test_unauthenticated_transaction_commands_match_redis(xnode, oracle):
    """rejectCommand: a refused EXEC aborts and quotes why, even for NOAUTH."""
    script = [["EXEC"], ["EXEC", "extra"], ["MULTI"], ["DISCARD"], ["XLEN", "x"],
              ["AUTH", "pw"], ["MULTI"], ["XLEN", "x"], ["EXEC", "extra"], ["EXEC"]]
    n = xnode("--requirepass", "pw")
    admin = RawClient("127.0.0.1", oracle.port)
    assert admin.call("CONFIG", "SET", "requirepass", "pw") == ("+", b"OK")
    try:
        replies = []
        for port in (n.port, oracle.port):
            raw = RawClient("127.0.0.1", port)
            replies.append([raw.call(*cmd) for cmd in script])
            raw.close()
    finally:
        assert admin.call("CONFIG", "SET", "requirepass", "") == ("+", b"OK")
        admin.close()
    mine, theirs = replies
    for cmd, a, b in zip(script, mine, theirs, strict=True):
        assert a == b, f"{cmd}: node {a} redis {b}"


def _client_flags(port: int, setup: list[list[str]]) -> list[str]:
    raw = RawClient("127.0.0.1", port)
    out = []
    for cmd in setup:
        reply = raw.call(*cmd)
        if cmd == ["EXEC"]:
            reply = reply[1][0]
        elif cmd != ["CLIENT", "INFO"] or reply == ("+", b"QUEUED"):
            continue
        out.append(next(f for f in reply[1].decode().split() if f.startswith("flags=")))
    raw.close()
    return out


def test_client_info_flags_match_redis(node, oracle):
    """NO-EVICT is kept and shown ('e'), after MULTI's 'x', as Redis does."""
    setup = [["CLIENT", "INFO"], ["CLIENT", "NO-EVICT", "on"], ["CLIENT", "INFO"],
             ["MULTI"], ["CLIENT", "INFO"],
             ["EXEC"], ["CLIENT", "NO-EVICT", "off"], ["CLIENT", "INFO"], ["RESET"],
             ["CLIENT", "INFO"]]
    assert _client_flags(node.port, setup) == _client_flags(oracle.port, setup)


# Client "a" runs commands, "b" is a fresh connection (unauthenticated once requirepass is
# set), "admin" changes settings; after each a/b step, CLIENT LIST shows that client's cmd=.
_CMD_SCRIPT = [
    ("a", ["NOSUCH", "x"]), ("a", ["PING"]), ("a", ["XADD", "s"]), ("a", ["CLIENT", "NOSUCH"]),
    ("a", ["CONFIG", "GET"]), ("a", ["XGROUP"]), ("a", ["CLIENT", "GETNAME"]),
    ("a", ["SET", "k", "v"]), ("a", ["XADD", "k", "*", "f", "v"]),
    ("a", ["MULTI"]), ("a", ["XLEN", "k"]), ("a", ["NOSUCH"]), ("a", ["EXEC"]),
    ("a", ["MULTI"]), ("a", ["XADD", "s", "*", "f", "v"]), ("a", ["EXEC"]),
    ("admin", ["CONFIG", "SET", "maxmemory", "1"]), ("a", ["XADD", "s", "*", "f", "v"]),
    ("admin", ["CONFIG", "SET", "maxmemory", "0"]),
    ("admin", ["ACL", "SETUSER", "cmd-test", "on", ">pw", "~*", "+@all", "-xadd"]),
    ("a", ["AUTH", "cmd-test", "pw"]), ("a", ["XADD", "s", "*", "f", "v"]),
    ("a", ["MULTI"]), ("a", ["XLEN", "s"]),
    ("admin", ["ACL", "SETUSER", "cmd-test", "-xlen"]), ("a", ["EXEC"]),
    ("admin", ["CONFIG", "SET", "requirepass", "pw"]), ("b", ["XLEN", "s"]),
    ("b", ["NOSUCH"]), ("b", ["CLIENT", "LIST"]),
]


def _last_commands(port: int) -> list[tuple[list[str], str]]:
    admin = RawClient("127.0.0.1", port)
    conns = {"admin": admin}
    out = []
    try:
        for who, cmd in _CMD_SCRIPT:
            if who not in conns:
                conns[who] = RawClient("127.0.0.1", port)
            c = conns[who]
            reply = c.call(*cmd)
            if who == "admin":
                assert reply == ("+", b"OK"), (cmd, reply)
                continue
            host, lport = c.sock.getsockname()[:2]
            addr = f"addr={host}:{lport}"
            line = next(ln for ln in admin.call("CLIENT", "LIST")[1].decode().splitlines()
                        if addr in ln.split())
            out.append((cmd, next(f for f in line.split() if f.startswith("cmd="))))
    finally:
        for cmd in (["CONFIG", "SET", "requirepass", ""], ["CONFIG", "SET", "maxmemory", "0"],
                    ["ACL", "DELUSER", "cmd-test"], ["ACL", "LOG", "RESET"], ["DEL", "s", "k"]):
            admin.call(*cmd)
        for c in conns.values():
            c.close()
    return out


@pytest.mark.parametrize("reference", ["oracle", "oracle72"])
def test_client_list_cmd_matches_redis_for_rejected_commands(node, reference, request):
    """cmd= is set before processCommand's checks: a command refused for its arity, NOPERM,
    NOAUTH or OOM shows, so does one queued in MULTI (and EXEC after it, not the queued ones);
    an unknown command or subcommand shows NULL; a subcommand shows its fullname."""
    ref = request.getfixturevalue(reference)
    mine, theirs = _last_commands(node.port), _last_commands(ref.port)
    for a, b in zip(mine, theirs, strict=True):
        assert a == b, f"node {a} redis {b}"


def test_client_idle_counts_from_the_last_command(node):
    """idle= is the time since the client's last command, not since it connected."""
    from tests.support.procs import wait_until

    raw = RawClient("127.0.0.1", node.port)
    fields: dict[str, str] = {}

    def aged() -> bool:
        info = raw.call("CLIENT", "INFO")[1].decode()
        fields.update(f.split("=", 1) for f in info.split() if "=" in f)
        return int(fields["age"]) >= 2

    wait_until(aged, 10, interval=0.2, what="a connection two seconds old")
    raw.close()
    assert int(fields["idle"]) == 0, fields


def test_memory_usage_grows_with_the_value(r):
    assert r.memory_usage("nokey") is None
    r.xadd("s", {"f": "v"})
    small = r.memory_usage("s")
    for i in range(2000):
        r.xadd("s", {"f": "v" * 50, "i": str(i)})
    r.xgroup_create("s", "g", "0")
    r.xreadgroup("g", "c", {"s": ">"}, count=500)
    big = r.memory_usage("s", samples=0)
    assert 0 < small < big and big > 2000 * 50
    r.set("str", "x" * 1000)
    assert r.memory_usage("str") > 1000
