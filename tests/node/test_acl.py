"""ACL users on a node, compared with a Redis 7.2+ server (valkey) where Redis has an answer.

Each test gets a fresh node; on the shared oracle the users it made are deleted afterwards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import redis

from node import command_table
from tests.conftest import NodeHandle
from tests.support.procs import ProcessError
from tests.support.rawresp import RawClient

USERS = [b"t_app", b"t_ro", b"t_w", b"t_off"]


@pytest.fixture
def oracle_acl(oracle72: NodeHandle) -> Iterator[NodeHandle]:
    yield oracle72
    r = oracle72.client()
    r.execute_command("ACL", "DELUSER", *USERS)
    r.execute_command("ACL", "LOG", "RESET")
    r.flushall()


def _run(r: redis.Redis, *args: object) -> object:
    try:
        return r.execute_command(*args)
    except redis.ResponseError as e:
        return f"ERR: {e}"


def _log(r: redis.Redis) -> list[dict]:
    """ACL LOG as dicts (RESP2 gives each entry as a flat list)."""
    return [e if isinstance(e, dict) else dict(zip(e[::2], e[1::2], strict=True))
            for e in r.execute_command("ACL", "LOG")]


def _both(node: NodeHandle, oracle: NodeHandle) -> list[tuple[redis.Redis, NodeHandle]]:
    return [(node.client(), node), (oracle.client(), oracle)]


# Rule lists whose SETUSER reply and resulting description must match Redis's.
SETUSER_CASES = [
    ["on", ">p", "~foo*", "%R~bar", "+@stream", "-xdel", "+config|get"],
    ["+get", "-set", "+xadd", "-xdel", "+@read", "-get"],
    ["+@all", "-@dangerous", "+xadd", "-xadd", "-get", "+client", "-client|kill"],
    ["~x", "allkeys", "~y"],
    ["%W~w*", "%R~r*", "%RW~rw*", "~both"],
    ["+@nope"],
    ["bogus"],
    ["#abc"],
    ["<not-there"],
    [">a", ">b", "<a"],
    ["#" + hashlib.sha256(b"x").hexdigest(), "nopass"],
    ["on", "nopass", "resetpass", ">z"],
    ["&chan", "allchannels"],
    ["allchannels", "&x"],
    ["+nosuchcommand"],
    ["+xgroup|nosuch"],
    ["%X~k"],
    ["reset", "on", "~*", "+@all", "-@write"],
    ["allcommands", "nocommands", "+ping"],
    ["skip-sanitize-payload", "+@all"],
    ["skip-sanitize-payload", "reset", "on"],
]


@pytest.mark.parametrize("rules", SETUSER_CASES, ids=[" ".join(c) for c in SETUSER_CASES])
def test_setuser_and_description_match_redis(xnode, oracle_acl, rules):
    n = xnode()
    got = []
    for r, _h in _both(n, oracle_acl):
        r.execute_command("ACL", "DELUSER", "t_app")
        reply = _run(r, "ACL", "SETUSER", "t_app", *rules)
        desc = r.execute_command("ACL", "GETUSER", "t_app")
        line = [x for x in r.execute_command("ACL", "LIST") if x.startswith(b"user t_app ")]
        got.append((reply, desc, line))
    assert got[0] == got[1]


def test_default_user_matches_redis(xnode, oracle_acl):
    n = xnode()
    ours, theirs = (r.execute_command("ACL", "GETUSER", "default") for r, _ in _both(n, oracle_acl))
    assert ours == theirs
    assert n.client().execute_command("ACL", "LIST") == [
        b"user default on nopass sanitize-payload ~* &* +@all"]
    assert n.client().execute_command("ACL", "WHOAMI") == b"default"


SCRIPT = [
    ("XADD", "b", "*", "f", "v"),      # no pattern for b: key denied
    ("XADD", "r1", "*", "f", "v"),     # %R~r*: read only, XADD writes
    ("XLEN", "r1"),                    # reading r1 is allowed
    ("XADD", "a1", "1-1", "f", "v"),   # ~a*: allowed
    ("SET", "a1", "x"),                # no +set
    ("CONFIG", "SET", "maxclients", "1"),  # only +config|get
    ("CONFIG", "GET", "maxclients"),
    ("XREAD", "STREAMS", "a1", "r1", "0", "0"),
    ("XREAD", "STREAMS", "a1", "zz", "0", "0"),
    ("DEL", "a1"),
    ("CLIENT", "INFO"),
    ("ACL", "WHOAMI"),
    ("PING",),
    ("XGROUP", "CREATE", "a1", "g", "0"),
    ("XGROUP", "DESTROY", "a1", "g"),
    ("XRANGE", "a1", "-", "+", "COUNT", "0"),
    ("MULTI",),
]


def test_noperm_replies_match_redis(xnode, oracle_acl):
    n = xnode()
    results = []
    # The shared reference may have counted denials of earlier tests (valkey's RESETSTAT keeps
    # them): compare what this script adds.
    fields = ("acl_access_denied_cmd", "acl_access_denied_key")
    before = [[h.client().info("stats")[f] for f in fields] for _r, h in _both(n, oracle_acl)]
    for admin, h in _both(n, oracle_acl):
        admin.execute_command("ACL", "SETUSER", "t_app", "on", ">pw", "~a*", "%R~r*", "+@stream",
                              "+config|get", "+ping", "-xgroup|destroy", "+acl|whoami")
        admin.execute_command("ACL", "LOG", "RESET")
        admin.execute_command("XADD", "r1", "1-1", "f", "v")
        app = h.client(username="t_app", password="pw")
        out = [_run(app, *cmd) for cmd in SCRIPT]
        # The log: newest first, one entry per (reason, object), repeats counted.
        entries = [
            {k: e[k] for k in (b"count", b"reason", b"context", b"object", b"username")}
            for e in _log(admin)]
        results.append((out, entries))
    assert results[0][0] == results[1][0]
    assert results[0][1] == results[1][1]
    added = [[h.client().info("stats")[f] - b for f, b in zip(fields, was, strict=True)]
             for (_r, h), was in zip(_both(n, oracle_acl), before, strict=True)]
    assert added[0] == added[1] and min(added[0]) > 0, added
    assert any(isinstance(x, str) and x.startswith("ERR: No permissions") for x in results[0][0])


def test_transactions_and_denials_in_multi_match_redis(xnode, oracle_acl):
    n = xnode()
    results = []
    for admin, h in _both(n, oracle_acl):
        admin.execute_command("ACL", "SETUSER", "t_w", "on", ">pw", "~a*", "+@all", "-set")
        app = h.client(username="t_w", password="pw")
        p = app.pipeline(transaction=True)
        p.execute_command("XADD", "a1", "*", "f", "v")
        p.execute_command("SET", "a2", "x")
        p.execute_command("XADD", "zz", "*", "f", "v")
        try:
            out: object = p.execute()
        except redis.exceptions.ExecAbortError as e:
            out = f"ABORT: {e}"
        except redis.ResponseError as e:
            out = f"ERR: {e}"
        results.append((out, admin.exists("a1")))
    assert results[0] == results[1]


AUTH_SCRIPT = [
    ("AUTH", "t_app", "pw"), ("ACL", "WHOAMI"),
    ("AUTH", "t_app", "bad"), ("ACL", "WHOAMI"),  # a failed AUTH keeps the user
    ("AUTH", "t_off", "pw"), ("AUTH", "nouser", "pw"), ("AUTH", "pw"), ("AUTH", "a", "b", "c"),
    ("HELLO", "3", "AUTH", "t_app", "nope"), ("HELLO", "2", "AUTH", "t_off", "pw"),
    ("ACL", "WHOAMI"),
]


def test_auth_and_hello_auth_match_redis(xnode, oracle_acl):
    n = xnode()
    results = []
    for admin, h in _both(n, oracle_acl):
        admin.execute_command("ACL", "SETUSER", "t_app", "on", ">pw", "~*", "+@all")
        admin.execute_command("ACL", "SETUSER", "t_off", "off", ">pw", "~*", "+@all")
        admin.execute_command("ACL", "LOG", "RESET")
        with RawClient(h.host, h.port) as c:
            out = [c.call(*cmd) for cmd in AUTH_SCRIPT]
            hello = c.call("HELLO", "3", "AUTH", "t_app", "pw")
            assert dict(hello[1])[("$", b"proto")] == (":", 3)
            assert c.call("ACL", "WHOAMI") == ("$", b"t_app")
        log = [(e[b"count"], e[b"reason"], e[b"object"], e[b"username"]) for e in _log(admin)]
        results.append((out, log))
    assert results[0] == results[1]
    assert results[0][1][0] == (1, b"auth", b"HELLO", b"t_off")
    # CLIENT LIST shows the user, and CLIENT KILL USER finds its clients.
    admin = n.client()
    c = n.client(username="t_app", password="pw")
    c.ping()
    assert b"user=t_app" in admin.execute_command("CLIENT", "LIST")
    assert admin.execute_command("CLIENT", "KILL", "USER", "t_app") >= 1
    assert _run(admin, "CLIENT", "KILL", "USER", "nouser") == "ERR: No such user 'nouser'"


def test_requirepass_is_the_default_users_password(xnode):
    n = xnode("--requirepass", "s3cret")
    r = n.client(password="s3cret")
    d = r.acl_getuser("default")
    assert d["passwords"] == [hashlib.sha256(b"s3cret").hexdigest()]
    assert "nopass" not in d["flags"]
    assert n.client(username="default", password="s3cret").ping()
    r.execute_command("CONFIG", "SET", "requirepass", "other")
    assert n.client(password="other").ping()
    with pytest.raises(redis.AuthenticationError):
        n.client(password="s3cret").ping()
    # ACL SETUSER on default works too, and a fresh connection must then authenticate.
    r.execute_command("CONFIG", "SET", "requirepass", "")
    assert n.client().ping()
    r.execute_command("ACL", "SETUSER", "default", ">viaacl")
    with pytest.raises(redis.AuthenticationError):
        n.client().ping()
    assert n.client(password="viaacl").ping()


def test_rule_changes_reach_logged_in_clients(xnode):
    n = xnode()
    admin = n.client()
    admin.execute_command("ACL", "SETUSER", "t_app", "on", ">pw", "~*", "+@all")
    app = n.client(username="t_app", password="pw")
    assert app.xadd("s", {"f": "v"})
    admin.execute_command("ACL", "SETUSER", "t_app", "-xadd")
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.xadd("s", {"f": "v"})
    admin.execute_command("ACL", "SETUSER", "t_app", "+xadd", "resetkeys", "~other")
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.xadd("s", {"f": "v"})
    # The default user restricted: its live clients (admin included) follow at once.
    admin.execute_command("ACL", "SETUSER", "t_admin", "on", ">pw", "~*", "+@all")
    boss = n.client(username="t_admin", password="pw")
    admin.execute_command("ACL", "SETUSER", "default", "-xlen")
    with pytest.raises(redis.exceptions.NoPermissionError):
        admin.xlen("s")
    boss.execute_command("ACL", "SETUSER", "default", "+xlen")
    assert admin.xlen("s") == 1
    # DELUSER disconnects the user's clients.
    assert boss.execute_command("ACL", "DELUSER", "t_app", "nosuch") == 1
    with pytest.raises(redis.ConnectionError):
        app.xlen("s")
    assert _run(boss, "ACL", "DELUSER", "default") == "ERR: The 'default' user cannot be removed"


def test_acl_cat_matches_redis_for_served_commands(xnode, oracle_acl):
    n = xnode()
    ours, theirs = n.client(), oracle_acl.client()
    assert ours.execute_command("ACL", "CAT") == theirs.execute_command("ACL", "CAT")
    # The commands both serve (xshard has a few of its own and of Redis 8's, valkey more).
    with RawClient(oracle_acl.host, oracle_acl.port) as raw:
        listed = raw.call("COMMAND", "LIST")[1]
    both = set(command_table.TABLE) & {x[1] for x in listed}
    for cat in ("stream", "write", "dangerous", "keyspace", "connection"):
        mine = ours.execute_command("ACL", "CAT", cat)
        ref = theirs.execute_command("ACL", "CAT", cat)
        assert {x for x in mine if x.split(b"|")[0] in both} == {
            x for x in ref if x.split(b"|")[0] in both and
            (b"|" not in x or command_table.lookup(x) is not None)}
    assert _run(ours, "ACL", "CAT", "nope") == _run(theirs, "ACL", "CAT", "nope")


def test_aclfile_loaded_at_start_and_written_by_save(xnode, tmp_path):
    path = tmp_path / "users.acl"
    h = hashlib.sha256(b"pw").hexdigest()
    path.write_text(f"user t_app on #{h} ~a* +@stream\nuser default on nopass ~* &* +@all\n")
    n = xnode("--aclfile", str(path))
    app = n.client(username="t_app", password="pw")
    assert app.xadd("a1", {"f": "v"})
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.set("a1", "x")
    admin = n.client()
    admin.execute_command("ACL", "SETUSER", "t_ro", "on", ">ro", "%R~*", "+@read")
    assert admin.execute_command("ACL", "SAVE") == b"OK"
    saved = path.read_text().splitlines()
    assert saved == [x.decode() for x in admin.execute_command("ACL", "LIST")]
    n.restart()
    ro = n.client(username="t_ro", password="ro")
    assert ro.xlen("a1") == 0  # allowed (no persistence here: the stream is gone)
    with pytest.raises(redis.exceptions.NoPermissionError):
        ro.xadd("a1", {"f": "v"})
    # ACL LOAD rereads the file; a bad file changes nothing.
    admin = n.client()
    admin.execute_command("ACL", "SETUSER", "t_w", "on", ">w")
    assert admin.execute_command("ACL", "LOAD") == b"OK"
    assert b"t_w" not in admin.execute_command("ACL", "USERS")
    path.write_text("user t_app on bogus\n")
    assert _run(admin, "ACL", "LOAD").startswith("ERR: ")
    assert b"t_ro" in admin.execute_command("ACL", "USERS")


def test_bad_aclfile_stops_the_node(xnode, tmp_path):
    path = tmp_path / "bad.acl"
    path.write_text("user t_app on +@nope\n")
    with pytest.raises(ProcessError, match="Unknown command or category name in ACL"):
        xnode("--aclfile", str(path), ready_timeout=10)


def test_acl_save_without_aclfile_matches_redis(xnode, oracle):
    """Against redis-server: valkey says "This instance" where Redis says "This Redis instance"."""
    if oracle.version is None or oracle.kind != "redis" or "valkey" in oracle.name:
        pytest.skip("needs redis-server as the oracle")
    n = xnode()
    assert _run(n.client(), "ACL", "SAVE") == _run(oracle.client(), "ACL", "SAVE")
    assert _run(n.client(), "ACL", "LOAD") == _run(oracle.client(), "ACL", "LOAD")


DRYRUN_CASES = [
    ["t_app", "xadd", "a1", "*", "f", "v"], ["t_app", "xadd", "b1", "*", "f", "v"],
    ["t_app", "XLEN", "r1"], ["t_app", "xadd", "r1", "*", "f", "v"], ["t_app", "del", "a1"],
    ["t_app", "config", "get", "x"], ["t_app", "config", "set", "x", "y"],
    ["t_app", "config", "nosub"], ["t_app", "config"], ["t_app", "xgroup", "destroy", "a", "g"],
    ["t_app", "auth", "x"], ["t_app", "nocmd", "k"], ["nobody", "xlen", "a"],
    ["no\r\nbody", "xlen", "a"], ["t_app", "xlen"], ["t_app", "xlen", "a", "b"],
    ["t_app", "ping"], ["t_app", "XREAD", "STREAMS", "a1", "r1", "0", "0"],
    ["t_app", "xread", "streams", "a1", "b1", "0", "0"], ["t_off", "xlen", "a1"],
    ["default", "del", "x"], ["t_app"],
]


def test_acl_dryrun_matches_redis(xnode, oracle_acl):
    """ACL DRYRUN: +OK or the denial as a bulk string, errors for an unknown user or command
    and a wrong arity, nothing run and nothing logged; byte for byte against valkey."""
    n = xnode()
    results = []
    for admin, h in _both(n, oracle_acl):
        admin.execute_command("ACL", "SETUSER", "t_app", "on", ">pw", "~a*", "%R~r*", "+@stream",
                              "+config|get", "-xgroup|destroy")
        admin.execute_command("ACL", "SETUSER", "t_off", "off", "~*", "+@all")
        admin.execute_command("ACL", "LOG", "RESET")
        with RawClient(h.host, h.port) as raw:
            out = [raw.call("ACL", "DRYRUN", *case) for case in DRYRUN_CASES]
        results.append((out, _log(admin), admin.execute_command("EXISTS", "a1", "b1", "r1")))
    for case, mine, theirs in zip(DRYRUN_CASES, results[0][0], results[1][0], strict=True):
        assert mine == theirs, case
    assert results[0][1:] == results[1][1:] == ([], 0)
    assert results[0][0][0] == ("+", b"OK")
    assert results[0][0][1] == ("$", b"User t_app has no permissions to access the 'b1' key")
