"""The command table (node/command_table.py) and COMMAND, checked against a real redis-server.

Three layers:
- pure unit tests: key positions (the XREAD/XREADGROUP STREAMS rule), arity texts, the glob;
- the table's reply builders and arity check against the oracle, byte for byte, for every
  command both serve (no xshard process needed);
- a running node: COMMAND through redis-py, COMMAND GETKEYS, and redis-py's own cluster key
  extraction (CommandsParser, what RedisCluster uses) compared with the oracle.

Redis orders commands and subcommands by a dict with a per-process random hash seed, so every
comparison sorts subcommands by name. Subcommands xshard does not serve are dropped from the
oracle's side; entries patched for 7.4 or hand-written (origin != "redis-server 7.0") are
compared only where the patch does not reach (see tools/gen_command_table.py).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import redis
from redis._parsers.commands import CommandsParser

from node import command_table as table
from node.resp import ReplyError
from tests.support.rawresp import RawClient

ORACLE_ORIGIN = "redis-server 7.0"


# --- helpers ---------------------------------------------------------------------------------
def parse(data: bytes) -> tuple:
    """Our builder's bytes -> the same tagged tree RawClient gives for the oracle's bytes."""
    rc = RawClient.__new__(RawClient)
    rc._buf = bytearray(data)
    rc._pos = 0
    tree = rc.read_reply()
    assert rc._pos == len(data), "trailing bytes after one reply"
    return tree


def ours(argv: list[bytes], proto: int) -> tuple:
    """Run the COMMAND handler in-process, with the dispatcher's arity check in front."""
    from node.commands.introspection import command_

    err = table.check_arity(argv)
    if err is not None:
        return ("-", err)

    class Stub:
        pass

    c = Stub()
    c.proto = proto
    try:
        return parse(command_(c, argv))  # type: ignore[arg-type]
    except ReplyError as e:
        return ("-", e.message)


def served_subs(name: bytes) -> set[bytes]:
    spec = table.lookup(name)
    return {s.name for s in spec.subcommands.values()} if spec else set()


def comparable_subs(name: bytes, docs: bool) -> set[bytes]:
    """Subcommands whose entry comes from the oracle unchanged (docs may be patched)."""
    spec = table.lookup(name)
    out = set()
    for s in spec.subcommands.values():
        if s.origin.startswith("hand-written"):
            continue
        if docs and s.origin != ORACLE_ORIGIN:
            continue
        out.add(s.name)
    return out


def pairs(tree: tuple) -> list[tuple[Any, Any]]:
    """A map as pairs, whether it came as RESP3 % or as a RESP2 flat array."""
    if tree[0] == "%":
        return list(tree[1])
    items = tree[1]
    return list(zip(items[::2], items[1::2], strict=True))


def norm_info(entry: tuple, keep: set[bytes]) -> tuple:
    """One COMMAND INFO entry with its subcommands filtered to `keep` and sorted by name."""
    assert entry[0] == "*" and len(entry[1]) == 10, entry
    fields = list(entry[1])
    t, subs = fields[9]
    if subs:
        subs = sorted((s for s in subs if s[1][0][1] in keep), key=lambda s: s[1][0][1])
        fields[9] = (t, [norm_info(s, set()) for s in subs])
    return ("*", fields)


def norm_docs(docs: tuple, keep: set[bytes]) -> tuple:
    """One COMMAND DOCS value with its subcommands map filtered to `keep`, sorted by name."""
    out = []
    for k, v in pairs(docs):
        if k[1] == b"subcommands":
            sub = sorted(((n, d) for n, d in pairs(v) if n[1] in keep), key=lambda p: p[0][1])
            v = ("%", sub)  # canonical form for the comparison
        out.append((k, v))
    return ("%", out)


# --- key positions ----------------------------------------------------------------------------
def keys_of(*args: str) -> list[int]:
    return table.get_keys([a.encode() for a in args])


@pytest.mark.parametrize("argv, expected", [
    (["XADD", "s", "*", "f", "v"], [1]),
    (["xadd", "s", "MAXLEN", "~", "10", "*", "f", "v"], [1]),
    (["XGROUP", "CREATE", "s", "g", "$"], [2]),
    (["XINFO", "STREAM", "s", "FULL"], [2]),
    (["XINFO", "HELP"], []),
    (["DEL", "a", "b", "c"], [1, 2, 3]),
    (["RENAME", "a", "b"], [1, 2]),
    (["WATCH", "a", "b"], [1, 2]),
    (["OBJECT", "ENCODING", "k"], [2]),
    (["MEMORY", "USAGE", "k", "SAMPLES", "5"], [2]),
    (["PING"], []),
    (["NOSUCH", "a"], []),
    (["SET", "k", "v", "GET"], [1]),
    # XREAD: STREAMS is found by skipping options, and may itself be a key name.
    (["XREAD", "STREAMS", "a", "0"], [2]),
    (["XREAD", "COUNT", "10", "BLOCK", "0", "STREAMS", "a", "b", "0", "0"], [6, 7]),
    (["XREAD", "STREAMS", "STREAMS", "0"], [2]),
    (["XREAD", "streams", "STREAMS", "streams", "0", "$"], [2, 3]),
    (["XREAD", "STREAMS", "a", "STREAMS", "0", "0"], [2, 3]),
    (["XREAD", "STREAMS", "a"], []),
    (["XREAD", "STREAMS"], []),
    (["XREAD", "COUNT", "1"], []),
    # Unbalanced and unparsable ones get Redis's answer (the key spec's), though they fail.
    (["XREAD", "STREAMS", "a", "b", "0"], [2]),
    (["XREAD", "BOGUS", "STREAMS", "a", "0"], [3]),
    # XREADGROUP: group and consumer may be called STREAMS, in any option order.
    (["XREADGROUP", "GROUP", "streams", "streams", "STREAMS", "streams", ">"], [5]),
    (["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "NOACK", "STREAMS", "k", ">"], [8]),
    (["XREADGROUP", "COUNT", "1", "GROUP", "g", "STREAMS", "STREAMS", "k", "0"], [7]),
    (["XREADGROUP", "NOACK", "GROUP", "STREAMS", "STREAMS", "STREAMS", "a", "b", ">", ">"],
     [6, 7]),
    (["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k"], []),
    # Redis 8.10's MAXCOUNT / MAXSIZE take a value, which may be spelled STREAMS.
    (["XREAD", "MAXCOUNT", "3", "MAXSIZE", "STREAMS", "STREAMS", "a", "0"], [6]),
    (["XREADGROUP", "GROUP", "g", "c", "MAXSIZE", "9", "STREAMS", "k", ">"], [7]),
])
def test_get_keys(argv: list[str], expected: list[int]) -> None:
    assert keys_of(*argv) == expected


def test_get_keys_and_flags() -> None:
    kf = table.get_keys_and_flags
    assert kf([b"SET", b"k", b"v"]) == [(1, ("OW", "update"))]
    assert kf([b"SET", b"k", b"v", b"get"]) == [(1, ("RW", "access", "update"))]
    assert kf([b"RENAME", b"a", b"b"]) == [(1, ("RW", "access", "delete")), (2, ("OW", "update"))]
    assert kf([b"XREAD", b"STREAMS", b"a", b"0"]) == [(2, ("RO", "access"))]


# --- arity --------------------------------------------------------------------------------------
def test_check_arity_texts() -> None:
    ca = table.check_arity
    assert ca([b"XADD", b"k", b"*", b"f", b"v"]) is None
    assert ca([b"XADD", b"k"]) == b"ERR wrong number of arguments for 'xadd' command"
    assert ca([b"XLEN"]) == b"ERR wrong number of arguments for 'xlen' command"
    assert ca([b"XLEN", b"a", b"b"]) == b"ERR wrong number of arguments for 'xlen' command"
    assert ca([b"XGROUP"]) == b"ERR wrong number of arguments for 'xgroup' command"
    assert ca([b"COMMAND"]) is None and ca([b"command", b"count"]) is None
    assert ca([b"xgroup", b"CREATE", b"k"]) == \
        b"ERR wrong number of arguments for 'xgroup|create' command"
    assert ca([b"xgroup", b"nope"]) == b"ERR unknown subcommand 'nope'. Try XGROUP HELP."
    assert ca([b"XGROUP", b"CREATE", b"k", b"g", b"$"]) is None
    assert ca([b"WAITAOF", b"1", b"0"]) == b"ERR wrong number of arguments for 'waitaof' command"
    assert ca([b"WAITAOF", b"1", b"0", b"0"]) is None
    assert ca([b"nosuch", b"x"]) == b"ERR unknown command 'nosuch', with args beginning with: 'x' "
    assert ca([b"xlen", b"k"], name=b"xlen") is None


def test_is_write_and_lookup() -> None:
    assert table.is_write(b"xadd") and table.is_write(b"xgroup|create")
    assert table.is_write(b"xreadgroup") and table.is_write(b"del")
    assert not table.is_write(b"xread") and not table.is_write(b"xgroup")
    assert not table.is_write(b"xinfo|stream")
    spec = table.lookup(b"xgroup")
    assert spec is not None and set(spec.subcommands) == {
        b"create", b"setid", b"destroy", b"createconsumer", b"delconsumer", b"help"}
    assert table.lookup(b"xgroup|create") is spec.subcommands[b"create"]
    assert table.lookup(b"subscribe") is None
    xadd = table.lookup(b"xadd")
    assert (xadd.arity, xadd.first_key, xadd.last_key, xadd.step) == (-5, 1, 1, 1)
    assert "write" in xadd.flags and "@stream" in xadd.acl_categories


def test_every_handler_has_a_table_entry() -> None:
    """Each registered handler is served: load_all found an entry for every one."""
    from node.commands import load_all

    handlers = load_all()
    assert handlers and all(table.lookup(name) is not None for name in handlers)


def test_handler_without_table_entry_fails_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler whose command node/commands.json lacks would never be dispatched: loading
    the handlers (what a node and a router do at start-up) refuses it, naming it."""
    from node.commands import COMMANDS, MissingCommandEntry, load_all
    from node.config import Config
    from node.server import Server

    monkeypatch.setitem(COMMANDS, b"nosuchcommand", lambda c, argv: b"+OK\r\n")
    with pytest.raises(MissingCommandEntry, match="nosuchcommand"):
        load_all()
    loop = asyncio.new_event_loop()  # a Server takes the current loop
    asyncio.set_event_loop(loop)
    try:
        with pytest.raises(MissingCommandEntry, match="nosuchcommand"):
            Server(Config())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def test_subcommand_without_table_entry_fails_at_start_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a container's subcommand handler (CLIENT, CONFIG, ACL tables)."""
    from node.commands import MissingCommandEntry, load_all
    from node.commands.connection import CLIENT

    load_all()
    monkeypatch.setitem(CLIENT.handlers, b"nosuchsub", lambda c, argv: b"+OK\r\n")
    with pytest.raises(MissingCommandEntry, match=r"client\|nosuchsub"):
        load_all()


@pytest.mark.parametrize("pattern, name, match", [
    (b"x*", b"xadd", True), (b"X*", b"xadd", True), (b"xinfo|*", b"xinfo|stream", True),
    (b"x?dd", b"xadd", True), (b"x[a-c]dd", b"xadd", True), (b"x[^a]dd", b"xadd", False),
    (b"x\\*", b"x*", True), (b"x\\*", b"xa", False), (b"*info", b"xinfo", True),
    (b"", b"", True), (b"*", b"", True), (b"a", b"", False), (b"[abc", b"a", True),
])
def test_stringmatch(pattern: bytes, name: bytes, match: bool) -> None:
    assert table.stringmatch(pattern, name, nocase=True) is match


# --- builders vs the oracle (no xshard process) -------------------------------------------------
@pytest.fixture(scope="module")
def oracle_raw(oracle) -> dict[int, RawClient]:
    clients = {2: RawClient(oracle.host, oracle.port), 3: RawClient(oracle.host, oracle.port)}
    clients[3].hello(3)
    yield clients
    for c in clients.values():
        c.close()


def _from_oracle(spec: table.CommandSpec) -> bool:
    return not spec.origin.startswith("hand-written")


@pytest.mark.parametrize("proto", [2, 3])
def test_command_info_matches_oracle(oracle_raw: dict[int, RawClient], proto: int) -> None:
    names = [n for n, s in table.TABLE.items() if _from_oracle(s)]
    theirs = oracle_raw[proto].call("COMMAND", "INFO", *names)
    mine = ours([b"COMMAND", b"INFO", *names], proto)
    assert theirs[0] == mine[0] == "*"
    for name, t, m in zip(names, theirs[1], mine[1], strict=True):
        keep = comparable_subs(name, docs=False)
        assert norm_info(m, keep) == norm_info(t, keep), name
    # Subcommands looked up by their full name, and unknown names.
    subs = [s.name for c in table.TABLE.values() for s in c.subcommands.values()
            if _from_oracle(s)]
    args = [*subs, b"nosuch", b"XGROUP|CREATE", b"xadd|nope"]
    theirs = oracle_raw[proto].call("COMMAND", "INFO", *args)
    mine = ours([b"COMMAND", b"INFO", *args], proto)
    assert mine == theirs


@pytest.mark.parametrize("proto", [2, 3])
def test_command_docs_matches_oracle(oracle_raw: dict[int, RawClient], proto: int) -> None:
    names = [n for n, s in table.TABLE.items() if s.origin == ORACLE_ORIGIN]
    theirs = pairs(oracle_raw[proto].call("COMMAND", "DOCS", *names, "nosuch"))
    mine = ours([b"COMMAND", b"DOCS", *names, b"nosuch"], proto)
    assert mine[0] == ("%" if proto == 3 else "*")
    mine_pairs = pairs(mine)
    assert [k for k, _ in mine_pairs] == [k for k, _ in theirs] == [("$", n) for n in names]
    for (k, m), (_, t) in zip(mine_pairs, theirs, strict=True):
        keep = comparable_subs(k[1], docs=True)
        assert norm_docs(m, keep) == norm_docs(t, keep), k
    subs = [s.name for c in table.TABLE.values() for s in c.subcommands.values()
            if s.origin == ORACLE_ORIGIN]
    assert ours([b"COMMAND", b"DOCS", *subs], proto) == \
        oracle_raw[proto].call("COMMAND", "DOCS", *subs)


def test_patched_docs_differ_only_where_patched(oracle_raw: dict[int, RawClient]) -> None:
    """Entries patched for 7.4 keep every 7.0 field they did not patch."""
    for spec in [s for c in table.TABLE.values() for s in (c, *c.subcommands.values())]:
        if spec.origin.startswith("redis-server 7.0 + 7.4"):
            theirs = dict(pairs(pairs(oracle_raw[3].call("COMMAND", "DOCS", spec.name))[0][1]))
            mine = dict(pairs(pairs(ours([b"COMMAND", b"DOCS", spec.name], 3))[0][1]))
            for k in (b"summary", b"since", b"group", b"complexity"):
                assert mine[("$", k)] == theirs[("$", k)], (spec.name, k)
            if ("$", b"history") in theirs:
                n = len(theirs[("$", b"history")][1])
                assert mine[("$", b"history")][1][:n] == theirs[("$", b"history")][1]


@pytest.mark.parametrize("proto", [2, 3])
def test_command_help_and_errors_match_oracle(oracle_raw: dict[int, RawClient],
                                              proto: int) -> None:
    cases = [
        ["COMMAND", "HELP"], ["command", "help"], ["COMMAND", "HELP", "x"],
        ["COMMAND", "nope"], ["COMMAND", "COUNT", "x"],
        ["COMMAND", "GETKEYS"], ["COMMAND", "GETKEYS", "xadd"],
        ["COMMAND", "GETKEYS", "nosuch", "a"], ["COMMAND", "GETKEYS", "ping", "x"],
        ["COMMAND", "GETKEYS", "xgroup", "nope"], ["COMMAND", "GETKEYS", "xgroup", "help"],
        ["COMMAND", "GETKEYS", "xlen", "a", "b"], ["COMMAND", "GETKEYS", "xgroup", "create", "k"],
        ["COMMAND", "GETKEYS", "xread", "STREAMS", "a"],
        ["COMMAND", "GETKEYSANDFLAGS", "xread", "COUNT", "1", "a"],
        ["COMMAND", "LIST", "FILTERBY"], ["COMMAND", "LIST", "FILTERBY", "nope", "x"],
        ["COMMAND", "LIST", "FILTERBY", "MODULE", "x"], ["COMMAND", "LIST", "x"],
        ["COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuchcat"],
        ["COMMAND", "INFO", "nosuch"], ["COMMAND", "DOCS", "nosuch"],
    ]
    for argv in cases:
        assert ours([a.encode() for a in argv], proto) == _help_as_7_2(
            oracle_raw[proto].call(*argv)), argv


def _help_as_7_2(reply):
    """Redis 7.2 reworded the last HELP line ("Prints" -> "Print"); we follow 7.2+/7.4."""
    if isinstance(reply, tuple):
        return tuple(_help_as_7_2(x) for x in reply)
    if isinstance(reply, list):
        return [_help_as_7_2(x) for x in reply]
    return b"    Print this help." if reply == b"    Prints this help." else reply


@pytest.mark.parametrize("proto", [2, 3])
def test_command_list_matches_oracle(oracle_raw: dict[int, RawClient], proto: int) -> None:
    known = {s.name for c in table.TABLE.values() for s in (c, *c.subcommands.values())
             if _from_oracle(s)}
    hand_written = {s.name for c in table.TABLE.values() for s in (c, *c.subcommands.values())
                    if not _from_oracle(s)}
    assert hand_written == {b"waitaof", b"client|setinfo", b"xcfgset", b"xshard.restore",
                            b"xshard.idlepending", b"xdelex", b"xackdel", b"xnack"}
    for filt in ([], ["FILTERBY", "ACLCAT", "stream"], ["FILTERBY", "aclcat", "WRITE"],
                 ["FILTERBY", "ACLCAT", "connection"], ["FILTERBY", "PATTERN", "x*"],
                 ["FILTERBY", "PATTERN", "*|help"], ["FILTERBY", "pattern", "X[A-G]*"],
                 ["FILTERBY", "PATTERN", "client|?e*"]):
        theirs = oracle_raw[proto].call("COMMAND", "LIST", *filt)
        mine = ours([b"COMMAND", b"LIST", *(f.encode() for f in filt)], proto)
        assert mine[0] == theirs[0] == "*"
        want = sorted(n[1] for n in theirs[1] if n[1] in known)
        got = sorted(n[1] for n in mine[1] if n[1] in known)
        # The rest: WAITAOF, CLIENT SETINFO (7.2+), XCFGSET (8.6): not in 7.0; and
        # XSHARD.RESTORE (in no Redis)
        assert {n[1] for n in mine[1]} - set(got) <= hand_written, filt
        assert got == want, filt


def test_check_arity_matches_oracle(oracle_raw: dict[int, RawClient]) -> None:
    """Every wrong argument count (and unknown subcommand) gets the oracle's exact error.

    Only argvs that the table rejects are sent to the oracle (those never execute there), and
    for the accepted ones the oracle's own COMMAND INFO arity must admit the count.
    """
    raw = oracle_raw[2]
    live_arity: dict[bytes, int] = {}
    for spec in [s for c in table.TABLE.values() for s in (c, *c.subcommands.values())]:
        if not _from_oracle(spec):
            continue
        info = raw.call("COMMAND", "INFO", spec.name)[1][0]
        live_arity[spec.name] = info[1][1][1]
    checked = 0
    for name, spec in table.TABLE.items():
        if not _from_oracle(spec):
            continue
        heads = [[name.upper()]]
        if spec.subcommands:
            heads = [[name.upper(), sub.upper()] for sub, s in spec.subcommands.items()
                     if _from_oracle(s)] + [[name, b"NoSuchSub"]]
            if spec.arity != -1:  # the container alone (COMMAND alone is a valid command)
                assert raw.call(name) == ("-", table.check_arity([name])), name
            else:
                assert table.check_arity([name]) is None
        for head in heads:
            full = name if len(head) == 1 else name + b"|" + head[1].lower()
            for n in range(len(head), abs(spec.arity if len(head) == 1 else
                                          live_arity.get(full, 2)) + 3):
                argv = head + [b"x"] * (n - len(head))
                err = table.check_arity(argv)
                if err is None:
                    a = live_arity[full] if full in live_arity else live_arity[name]
                    assert (a > 0 and a == n) or (a < 0 and n >= -a), (argv, a)
                else:
                    assert raw.call(*argv) == ("-", err), argv
                    checked += 1
    assert checked > 100


# --- COMMAND GETKEYS: a corpus and random XREAD/XREADGROUP argvs --------------------------------
FIXED_GETKEYS = [
    "XADD s * f v", "XADD s NOMKSTREAM MAXLEN ~ 5 * f v", "XTRIM s MAXLEN 0", "XDEL s 1-1",
    "XLEN s", "XRANGE s - +", "XREVRANGE s + -", "XACK s g 1-1 2-2", "XPENDING s g",
    "XCLAIM s g c 0 1-1", "XAUTOCLAIM s g c 0 0", "XSETID s 5-5", "XGROUP CREATE s g $",
    "XGROUP SETID s g 0", "XGROUP DESTROY s g", "XGROUP CREATECONSUMER s g c",
    "XGROUP DELCONSUMER s g c", "XINFO STREAM s", "XINFO GROUPS s", "XINFO CONSUMERS s g",
    "DEL a b c", "UNLINK a", "EXISTS a a", "TYPE a", "EXPIRE a 10", "PEXPIREAT a 1 NX",
    "TTL a", "PTTL a", "PERSIST a", "EXPIRETIME a", "PEXPIRETIME a", "RENAME a b",
    "RENAMENX a b", "TOUCH a b", "WATCH a b", "OBJECT ENCODING a", "MEMORY USAGE a",
    "SET a b", "SET a b GET", "SET a b EX 10 get", "GET a", "LPUSH l a b", "RPUSH l a",
    "LRANGE l 0 -1", "SADD s a", "SMEMBERS s",
    "XREAD STREAMS a 0", "XREAD COUNT 5 BLOCK 10 STREAMS a b 0 0", "XREAD STREAMS STREAMS 0",
    "XREAD STREAMS STREAMS STREAMS 0 0", "XREADGROUP GROUP g c STREAMS a >",
    "XREADGROUP GROUP streams streams STREAMS streams >",
    "XREADGROUP GROUP g c COUNT 1 BLOCK 0 NOACK STREAMS a b > >",
    "XREADGROUP GROUP STREAMS c STREAMS STREAMS 0",
]


def _spec_streams_pos(argv: list[bytes]) -> int:
    """Where Redis's keyword key spec finds STREAMS (the first one from its startfrom)."""
    start = 1 if argv[0].lower() == b"xread" else 4
    for i in range(start, len(argv)):
        if argv[i].lower() == b"streams":
            return i
    return -1


def _proc_streams_pos(argv: list[bytes]) -> int:
    """Where the command's own parser (xreadGetKeys) finds STREAMS."""
    i = 1
    while i < len(argv):
        a = argv[i].lower()
        if a in (b"count", b"block"):
            i += 2
        elif a == b"group":
            i += 3
        elif a == b"noack":
            i += 1
        else:
            return i if a == b"streams" else -1
    return -1


def _random_xreads(n: int, seed: int) -> list[list[bytes]]:
    rnd = random.Random(seed)
    tokens = [b"STREAMS", b"streams", b"COUNT", b"BLOCK", b"GROUP", b"NOACK", b"a", b"b",
              b"0", b"1", b"$", b">"]
    out = []
    for _ in range(n):
        head = rnd.choice([b"XREAD", b"xreadgroup"])
        body = [rnd.choice(tokens) for _ in range(rnd.randint(1, 9))]
        if head == b"xreadgroup" and rnd.random() < 0.7:
            body = [b"GROUP", rnd.choice(tokens), rnd.choice(tokens)] + body
        out.append([head, *body])
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_getkeys_matches_oracle(oracle_raw: dict[int, RawClient], proto: int) -> None:
    argvs = [line.encode().split() for line in FIXED_GETKEYS] + _random_xreads(400, 7)
    diverged = 0
    for argv in argvs:
        for sub in (b"GETKEYS", b"GETKEYSANDFLAGS"):
            mine = ours([b"COMMAND", sub, *argv], proto)
            theirs = oracle_raw[proto].call("COMMAND", sub, *argv)
            if mine == theirs:
                continue
            # The one deliberate difference: Redis's key spec stops at the first STREAMS at or
            # after its startfrom even when that word is a group/consumer name or an option's
            # value; we follow the command's own parser (xreadGetKeys). Every difference must
            # be such a case, and then our keys are exactly what the command will touch.
            assert argv[0].lower() in (b"xread", b"xreadgroup"), (argv, mine, theirs)
            sp, pp = _spec_streams_pos(argv), _proc_streams_pos(argv)
            assert sp != pp and pp >= 0, (argv, mine, theirs)
            num = (len(argv) - pp - 1) // 2
            if num == 0:
                assert mine == ("-", b"ERR Invalid arguments specified for command"), argv
            else:
                want = argv[pp + 1:pp + 1 + num]
                got = [x[1] if x[0] == "$" else x[1][0][1] for x in mine[1]]
                assert got == want, (argv, mine)
            diverged += 1
    # Most random argvs agree; the divergent ones are the exception we document.
    assert diverged < len(argvs) // 4


def test_get_keys_agrees_with_command_getkeys() -> None:
    """The router's get_keys and COMMAND GETKEYS are one function: same keys, same order."""
    argvs = [line.encode().split() for line in FIXED_GETKEYS] + _random_xreads(300, 11)
    for argv in argvs:
        reply = ours([b"COMMAND", b"GETKEYS", *argv], 2)
        if reply[0] == "-":
            if reply[1] == b"ERR Invalid number of arguments specified for command":
                continue  # get_keys does not check arity; the dispatcher does
            assert table.get_keys(argv) == [], argv
        else:
            assert [argv[i] for i in table.get_keys(argv)] == [x[1] for x in reply[1]], argv


@pytest.mark.parametrize("proto", [2, 3])
def test_hand_written_waitaof_is_shaped_like_wait(oracle_raw: dict[int, RawClient],
                                                  proto: int) -> None:
    """WAITAOF (7.2+, absent from the 7.0 oracle) has WAIT's flags, categories and tips."""
    wait = oracle_raw[proto].call("COMMAND", "INFO", "wait")[1][0]
    mine = ours([b"COMMAND", b"INFO", b"waitaof"], proto)[1][0]
    assert mine[1][0] == ("$", b"waitaof") and mine[1][1] == (":", 4)
    assert mine[1][2:] == wait[1][2:]


def test_commands_json_is_what_the_generator_makes(oracle) -> None:
    """node/commands.json is generated, not hand-edited: regenerating changes nothing."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, str(repo / "tools" / "gen_command_table.py"),
                          "--port", str(oracle.port), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


# --- through a running node ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def node_oracle(node, oracle):
    return node, oracle


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_command_info_and_docs(node_oracle, protocol: int) -> None:
    """redis-py's view: `COMMAND INFO` through its parse_command callback, DOCS raw."""
    node, oracle = node_oracle
    r = node.client(protocol=protocol)
    o = oracle.client(protocol=protocol)
    for name in ("xadd", "xtrim", "xread", "xreadgroup", "xautoclaim", "xsetid", "del", "rename",
                 "set", "ping", "hello"):
        assert r.execute_command("COMMAND", "INFO", name) == \
            o.execute_command("COMMAND", "INFO", name), name
        if table.lookup(name.encode()).origin != ORACLE_ORIGIN:
            continue  # XADD's docs carry Redis 8.6's IDMP arguments
        # "COMMAND DOCS" as one word has no redis-py callback: the decoded reply as sent.
        assert r.execute_command("COMMAND DOCS", name) == \
            o.execute_command("COMMAND DOCS", name), name
    # Containers: compare the subcommands both serve, by name.
    for name in ("xgroup", "xinfo", "object", "memory"):
        mine = r.execute_command("COMMAND", "INFO", name)[name]
        theirs = o.execute_command("COMMAND", "INFO", name)[name]
        served = {s.name for s in table.lookup(name.encode()).subcommands.values()}
        my_subs = mine.pop("subcommands")
        if node.kind == "xshard":
            assert {s[0] for s in my_subs} == served
        assert sorted(s for s in my_subs if s[0] in served) == \
            sorted(s for s in theirs.pop("subcommands") if s[0] in served), name
        assert mine == theirs, name
    assert r.command_count() == len(r.command())
    assert set(r.command_list()) >= {
        b"xadd", b"xgroup|create", b"xinfo|stream", b"command|getkeys"}
    stream_cmds = r.command_list(category="stream")
    assert b"xadd" in stream_cmds and b"xinfo|stream" in stream_cmds
    if node.kind == "xshard":
        assert stream_cmds == [n for n in r.command_list()
                               if "@stream" in table.lookup(n).acl_categories]


def test_node_getkeys_matches_oracle(node_oracle) -> None:
    node, oracle = node_oracle
    r, o = node.client(), oracle.client()
    for line in FIXED_GETKEYS:
        argv = line.split()
        assert r.command_getkeys(*argv) == o.command_getkeys(*argv), line
        assert r.command_getkeysandflags(*argv) == o.command_getkeysandflags(*argv), line
    for argv in (["xread", "STREAMS", "a"], ["nosuch", "x"], ["ping", "x"], ["xlen", "a", "b"]):
        with pytest.raises(redis.ResponseError) as mine:
            r.command_getkeys(*argv)
        with pytest.raises(redis.ResponseError) as theirs:
            o.command_getkeys(*argv)
        assert str(mine.value) == str(theirs.value)


def test_node_arity_errors_match_oracle(node_oracle) -> None:
    """The dispatcher's single arity check, subcommands included, as the oracle words it."""
    node, oracle = node_oracle
    r, o = RawClient(node.host, node.port), RawClient(oracle.host, oracle.port)
    try:
        bad = []
        for argv in (["XADD", "k"], ["xlen"], ["XGROUP"], ["XGROUP", "CREATE", "k"],
                     ["xgroup", "nope"], ["XINFO", "STREAM"], ["xinfo", "bogus", "x"],
                     ["XREADGROUP", "GROUP", "g"], ["xsetid", "k"], ["xautoclaim", "k", "g"],
                     ["COMMAND", "COUNT", "x"], ["COMMAND", "nope"], ["CLIENT", "SETNAME"],
                     ["OBJECT", "ENCODING"], ["config", "get"], ["PING", "a", "b"],
                     ["EXEC", "x"], ["GET"], ["del"]):
            mine, theirs = r.call(*argv), o.call(*argv)
            if mine != theirs:
                bad.append((argv, mine, theirs))
        assert not bad, "\n".join(f"{a}: ours {m!r}, redis {t!r}" for a, m, t in bad)
    finally:
        r.close()
        o.close()


def test_redis_py_cluster_key_extraction(node_oracle) -> None:
    """redis-py's CommandsParser (what RedisCluster routes with) gets the same keys from us."""
    node, oracle = node_oracle
    rc, oc = node.client(), oracle.client()
    mine, theirs = CommandsParser(rc), CommandsParser(oc)
    for line in FIXED_GETKEYS + ["PING", "XINFO HELP", "CLIENT ID"]:
        argv = line.split()
        if len(argv) < 2:
            continue
        assert mine.get_keys(rc, *argv) == theirs.get_keys(oc, *argv), line


def test_command_all_is_every_table_entry(node_oracle) -> None:
    node, _ = node_oracle
    r = node.client()
    names = {n.encode() for n in r.command()}
    if node.kind == "xshard":
        assert names == set(table.TABLE)
    else:  # --node-impl redis: a full Redis serves more; 7.0 lacks WAITAOF, and none has
        # xshard's own commands (XSHARD.RESTORE)
        assert names >= {n for n in table.TABLE if n != b"waitaof" and not n.startswith(b"xshard.")}
