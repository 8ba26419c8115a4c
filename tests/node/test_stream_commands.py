"""XADD, XTRIM, XDEL, XLEN, XRANGE, XREVRANGE and XSETID against redis-server.

Most tests run the same command script on the shared xshard node and on the oracle over raw
RESP (type bytes included) in RESP2 and RESP3, and require identical replies. Scripts use
explicit IDs so that replies do not depend on the clock; `*` is checked on its own.

The effects (what goes to the AOF and replicas) are checked in-process: the handlers run
against a key space whose `propagate` records, the recorded commands are replayed on a fresh
key space and must rebuild the same stream, node for node; and they are also replayed on
redis-server, which must accept them and end with the same entries.

Known 7.0 -> 7.4 difference: `XADD k <ms>-*` when <ms> already has the maximal sequence. 7.0
replies "Elements are too large to be stored" (errno left unset), 7.2+ the EDOM text.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator

import pytest

from node.streamid import SEQ_MAX
from tests.support.diff import Pair
from tests.support.inproc import InprocServer, run
from tests.support.rawresp import RawClient

MAXS = "18446744073709551615"


@pytest.fixture
def pair(node, oracle, protocol: int) -> Iterator[Pair]:
    ours = RawClient(node.host, node.port)
    ref = RawClient(oracle.host, oracle.port)
    saved = {}
    for name in ("stream-node-max-entries", "stream-node-max-bytes"):
        saved[name] = ref.call("CONFIG", "GET", name)
    for c in (ours, ref):
        if protocol == 3:
            c.hello(3)
        c.call("FLUSHALL")
    p = Pair(ours, ref)
    yield p
    for c in (ours, ref):
        c.call("FLUSHALL")
        c.call("CONFIG", "SET", "stream-node-max-entries", "100")
        c.call("CONFIG", "SET", "stream-node-max-bytes", "4096")
        c.close()


# --- XADD ---------------------------------------------------------------------------------------
def test_xadd_ids_and_errors(pair: Pair) -> None:
    pair.run([
        ("XADD", "s", "1-1", "f", "v"),
        ("XADD", "s", "1-1", "f", "v"),
        ("XADD", "s", "1-0", "f", "v"),
        ("XADD", "s", "0-5", "f", "v"),
        ("XADD", "s", "1-*", "f", "v"),
        ("XADD", "s", "1-*", "g", "v", "h", "w"),
        ("XADD", "s", "7-*", "f", "v"),
        ("XADD", "s", "3-*", "f", "v"),
        ("XADD", "s", "8", "f", "v"),
        ("XADD", "s", "8", "f", "v"),
        ("XADD", "s", "9-18446744073709551615", "f", "v"),
        ("XADD", "s", "10-0", "f", "v"),
        ("XADD", "z", "0-0", "f", "v"),
        ("EXISTS", "z"),
        ("XADD", "z", "0", "f", "v"),
        ("XADD", "z", "0-*", "f", "v"),
        ("XADD", "z", "0-*", "f", "v"),
        ("XADD", "s", "-", "f", "v"),
        ("XADD", "s", "+", "f", "v"),
        ("XADD", "s", "-*", "f", "v"),
        ("XADD", "s", "1-**", "f", "v"),
        ("XADD", "s", "*-1", "f", "v"),
        ("XADD", "s", "abc", "f", "v"),
        ("XADD", "s", "1-2-3", "f", "v"),
        ("XADD", "s", "1-", "f", "v"),
        ("XADD", "s", "-1", "f", "v"),
        ("XADD", "s", " 20-1", "f", "v"),
        ("XADD", "s", "+21-1", "f", "v"),
        ("XADD", "s", "1" * 128, "f", "v"),
        ("XADD", "s", "99999999999999999999-1", "f", "v"),
        ("XADD", "s", "50-99999999999999999999", "f", "v"),
        ("XADD", "s", f"{MAXS}-{MAXS}", "f", "v"),
        ("XADD", "s", "*", "f", "v"),
        ("XADD", "s", "1-1", "f", "v"),
        ("XADD", "s", f"{MAXS}-*", "f", "v"),
        ("XLEN", "s"),
        ("XRANGE", "s", "-", "+"),
        ("XRANGE", "z", "-", "+"),
    ])


def test_xadd_options_and_arity(pair: Pair) -> None:
    pair.run([
        ("XADD", "s", "NOMKSTREAM", "1-1", "f", "v"),
        ("EXISTS", "s"),
        ("XADD", "s", "nomkstream", "maxlen", "5", "1-1", "f", "v"),
        ("XADD", "s", "1-1", "f", "v"),
        ("XADD", "s", "NOMKSTREAM", "2-1", "f", "v"),
        ("XADD", "s", "1-2", "f"),
        ("XADD", "s", "3-1", "f", "v", "g"),
        ("XADD", "s", "MAXLEN", "5", "*"),
        ("XADD", "s", "MAXLEN", "5", "4-1"),
        ("XADD", "s", "MAXLEN"),
        ("XADD", "s", "MAXLEN", "f", "v"),
        ("XADD", "s", "MAXLEN", "x", "4-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "-1", "4-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "~", "-1", "4-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "~", "4-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "=", "10", "4-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "1", "MINID", "1", "5-1", "f", "v"),
        ("XADD", "s", "MINID", "1", "MAXLEN", "1", "5-1", "f", "v"),
        ("XADD", "s", "MINID", "-", "5-1", "f", "v"),
        ("XADD", "s", "MINID", "+", "5-1", "f", "v"),
        ("XADD", "s", "MINID", "5-*", "5-1", "f", "v"),
        ("XADD", "s", "LIMIT", "10", "5-1", "f", "v"),
        ("XADD", "s", "LIMIT", "0", "5-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "5", "LIMIT", "10", "6-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "=", "5", "LIMIT", "10", "6-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "~", "5", "LIMIT", "-1", "6-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "~", "5", "LIMIT", "x", "6-1", "f", "v"),
        ("XADD", "s", "MAXLEN", "~", "5", "LIMIT", "0", "7-1", "f", "v"),
        ("XADD", "s", "maxlen", "~", "5", "limit", "2", "8-1", "f", "v"),
        ("XADD", "s", "MaxLen", "5", "NoMkStream", "9-1", "f", "v"),
        ("XADD", "s", "bogus", "f", "v"),
        ("XADD", "s", "MAXLEN", "1", "MAXLEN", "2", "10-1", "f", "v"),
        ("XLEN", "s"),
        ("XRANGE", "s", "-", "+"),
        ("SET", "str", "x"),
        ("XADD", "str", "1-1", "f", "v"),
        ("XADD", "str", "NOMKSTREAM", "1-1", "f", "v"),
        ("XADD", "str", "MAXLEN", "x", "1-1", "f", "v"),
        ("XADD", "str", "0-0", "f", "v"),
    ])


def test_xadd_trims(pair: Pair) -> None:
    pair.config("stream-node-max-entries", 4)
    for i in range(1, 40):
        pair("XADD", "s", "MAXLEN", "~", 10, f"{i}-1", "f", i)
    pair("XLEN", "s")
    for i in range(40, 60):
        pair("XADD", "s", "MAXLEN", 7, f"{i}-1", "f", i)
    pair("XRANGE", "s", "-", "+")
    for i in range(60, 80):
        pair("XADD", "s", "MINID", "~", f"{i - 9}", f"{i}-1", "f", i)
    pair("XRANGE", "s", "-", "+")
    for i in range(80, 90):
        pair("XADD", "s", "MINID", f"{i - 5}-1", f"{i}-1", "f", i)
    pair("XRANGE", "s", "-", "+")
    pair("XADD", "s", "MAXLEN", "~", 0, "LIMIT", 4, "90-1", "f", "x")
    pair("XLEN", "s")
    pair("XADD", "s", "MAXLEN", 0, "91-1", "f", "x")
    pair("XLEN", "s")
    pair("XRANGE", "s", "-", "+")


def test_xadd_ms_star_exhausted_sequence_is_the_74_error(r) -> None:
    r.xadd("s", {"f": "v"}, id=f"5-{MAXS}")
    with pytest.raises(Exception, match="equal or smaller than the target stream top item"):
        r.xadd("s", {"f": "v"}, id="5-*")
    assert r.xadd("s", {"f": "v"}, id="6-*") == b"6-0"


def test_xadd_auto_ids(r) -> None:
    before = int(time.time() * 1000)
    ids = [r.xadd("s", {"f": str(i)}) for i in range(50)]
    after = int(time.time() * 1000)
    parsed = [tuple(map(int, x.split(b"-"))) for x in ids]
    assert parsed == sorted(set(parsed))
    assert before - 5 <= parsed[0][0] and parsed[-1][0] <= after + 5
    # an explicit ID in the future: `*` keeps incrementing its sequence
    r.xadd("t", {"f": "v"}, id=f"{after + 10 ** 9}-7")
    assert r.xadd("t", {"f": "v"}) == f"{after + 10 ** 9}-8".encode()
    # the last possible ID: `*` carries into the next millisecond, then the stream is full
    r.xadd("u", {"f": "v"}, id=f"{after + 10 ** 9}-{MAXS}")
    assert r.xadd("u", {"f": "v"}) == f"{after + 10 ** 9 + 1}-0".encode()
    r.xadd("w", {"f": "v"}, id=f"{MAXS}-{MAXS}")
    with pytest.raises(Exception, match="exhausted the last possible ID"):
        r.xadd("w", {"f": "v"})


# --- XRANGE / XREVRANGE -------------------------------------------------------------------------
def test_xrange_bounds_and_count(pair: Pair) -> None:
    for ms in (1, 2, 3, 5, 8):
        for seq in (0, 1, 7):
            pair("XADD", "s", f"{ms}-{seq}", "f", f"{ms}.{seq}", "g", seq)
    pair("XADD", "s", f"9-{MAXS}", "f", "last")
    pair("XDEL", "s", "3-1", "5-0")
    bounds = ["-", "+", "0", "1", "2-1", "3", "3-1", "4", "9", f"9-{MAXS}", "(1", "(2-1", "(3-1",
              "(5", "(9", "(0", "(0-0", f"({MAXS}-{MAXS}", f"({MAXS}", "(-", "(+", "(", "((1",
              "x", "1-x", "", f"{MAXS}-{MAXS}", "18446744073709551616", "(-1", "-1", "1-1-1"]
    rng = random.Random(5)
    for start in bounds:
        pair("XRANGE", "s", start, "+")
        pair("XREVRANGE", "s", "+", start)
    for _ in range(120):
        a, b = rng.choice(bounds), rng.choice(bounds)
        pair("XRANGE", "s", a, b)
        pair("XREVRANGE", "s", a, b, "COUNT", rng.choice([1, 2, 5]))
    for count in ("0", "1", "3", "100", "-1", "-100", "x", "1.5", " 1"):
        pair("XRANGE", "s", "-", "+", "COUNT", count)
        pair("XREVRANGE", "s", "+", "-", "COUNT", count)
    pair.run([
        ("XRANGE", "s", "-", "+", "COUNT"),
        ("XRANGE", "s", "-", "+", "COUNT", "1", "COUNT", "2"),
        ("XRANGE", "s", "-", "+", "count", "2"),
        ("XRANGE", "s", "-", "+", "LIMIT", "2"),
        ("XRANGE", "s", "-", "+", "COUNT", "2", "x"),
        ("XRANGE", "s", "5", "1"),
        ("XREVRANGE", "s", "1", "5"),
        ("XRANGE", "nokey", "-", "+"),
        ("XRANGE", "nokey", "-", "+", "COUNT", "0"),
        ("XRANGE", "nokey", "x", "+"),
        ("XREVRANGE", "nokey", "+", "-", "COUNT", "x"),
        ("SET", "str", "x"),
        ("XRANGE", "str", "-", "+"),
        ("XRANGE", "str", "x", "+"),
        ("XRANGE", "str", "-", "+", "COUNT", "0"),
        ("XRANGE", "s"),
        ("XREVRANGE", "s", "+"),
    ])


def test_xrange_across_many_nodes(pair: Pair) -> None:
    pair.config("stream-node-max-entries", 5)
    rng = random.Random(9)
    ids = []
    ms = 1000
    for i in range(300):
        ms += rng.choice([0, 0, 1, 70000, 1 << 33]) if i else 0
        seq = i if rng.random() < 0.8 else i + (1 << 40)
        ids.append(f"{ms}-{seq}")
        if rng.random() < 0.85:
            fields = ["a", rng.randbytes(rng.randint(0, 9)), "b", str(rng.randint(-99, 99))]
        else:
            fields = ["c", "other"]
        pair("XADD", "s", ids[-1], *fields)
    pair("XDEL", "s", *rng.sample(ids, 60))
    pair("XRANGE", "s", "-", "+")
    for _ in range(60):
        a, b = sorted(rng.sample(ids, 2), key=lambda x: tuple(map(int, x.split("-"))))
        pair("XRANGE", "s", a, b, "COUNT", rng.randint(1, 40))
        pair("XREVRANGE", "s", b, a, "COUNT", rng.randint(1, 40))
        pair("XRANGE", "s", "(" + a, "(" + b)


@pytest.mark.parametrize("shape", ["uniform", "varied", "long", "mixed"])
def test_ranges_over_nodes_with_tombstones(pair: Pair, shape: str) -> None:
    """Ranges that start, end or run through nodes with deleted entries, forward and backward,
    with COUNT and exclusive bounds on deleted and live IDs, a node whose entries are all
    deleted (an exact MINID trim leaves it), the open last node with tombstones; and the same
    nodes read by XREAD and XREADGROUP. Each value shape is one way a sealed node stores its
    strings (one length for all, a byte per length, wider lengths, entries with their own
    field names)."""
    pair.config("stream-node-max-entries", 7)  # node k holds ids[7k:7k+7]
    pair.config("stream-node-max-bytes", 0)
    rng = random.Random(len(shape))
    ids = [f"{ms}-{seq}" for ms in range(1, 40) for seq in range(rng.choice([1, 1, 2, 3]))]
    del ids[len(ids) // 7 * 7 - 2:]  # the open node holds 5 entries

    def fields(i: int) -> list[str | bytes]:
        if shape == "uniform":
            return ["a", f"{i:04d}", "b", f"{i % 97:04d}"]
        if shape == "varied":
            return ["a", "v" * rng.randint(0, 9), "b", str(i)]
        if shape == "long":
            return ["a", "w" * rng.choice([0, 3, 255, 256, 700]), "b", str(i)]
        return ["a", str(i), "b", "x"] if rng.random() < 0.7 else ["c", str(i)]

    for i, x in enumerate(ids):
        pair("XADD", "s", x, *fields(i))
    dead = set(rng.sample(ids[21:-5], len(ids) // 4))
    dead |= {*ids[7:13], *ids[17:21], *ids[-4:-2]}  # node 1 keeps one entry, node 2 three
    dead = sorted(dead, key=ids.index)
    pair("XDEL", "s", *dead)
    bounds = [*rng.sample(ids, 12), *rng.sample(dead, 8), "-", "+", "0", "15", "50"]
    bounds += ["(" + x for x in rng.sample(ids, 6) + rng.sample(dead, 6)]

    def ranges(n: int) -> None:
        for _ in range(n):
            a, b = rng.choice(bounds), rng.choice(bounds)
            count = rng.choice([[], ["COUNT", 1], ["COUNT", 2], ["COUNT", 5], ["COUNT", 12]])
            pair("XRANGE", "s", a, b, *count)
            pair("XREVRANGE", "s", b, a, *count)
        pair("XRANGE", "s", "-", "+")
        pair("XREVRANGE", "s", "+", "-")
        for c in (1, 3, 4):
            pair("XRANGE", "s", "-", "+", "COUNT", c)
            pair("XREVRANGE", "s", "+", "-", "COUNT", c)

    ranges(60)
    pair("XTRIM", "s", "MINID", ids[17])  # node 2's live entries flagged: none left in it
    ranges(30)
    for x in [*rng.sample(ids, 8), *rng.sample(dead, 8), "0"]:
        pair("XREAD", "COUNT", rng.choice([1, 3, 8, 100]), "STREAMS", "s", x)
    pair("XGROUP", "CREATE", "s", "g", "0")
    for _ in range(12):
        pair("XREADGROUP", "GROUP", "g", "c", "COUNT", rng.choice([1, 4, 9]), "STREAMS", "s",
             ">")


def test_xrange_large_values_and_wide_entries(pair: Pair) -> None:
    wide = [x for i in range(300) for x in (f"f{i}", str(i))]
    for i in range(1, 9):
        pair("XADD", "s", f"{i}-1", "a", "v" * (4090 + i), "b", "")
    pair("XADD", "s", "10-1", *wide)
    pair("XADD", "s", "11-1", *wide)
    pair("XADD", "s", "12-1", "a", "x" * 70000)
    pair("XRANGE", "s", "-", "+")
    pair("XREVRANGE", "s", "+", "-", "COUNT", 5)
    pair("XRANGE", "s", "10", "11")


# --- XDEL / XLEN / XTRIM ------------------------------------------------------------------------
def test_xdel_xlen(pair: Pair) -> None:
    pair.run([
        ("XDEL", "nokey", "1-1"),
        ("XDEL", "nokey", "bogus"),
        ("XLEN", "nokey"),
        ("XADD", "s", "1-1", "f", "v"),
        ("XADD", "s", "2-1", "f", "v"),
        ("XADD", "s", "3-1", "f", "v"),
        ("XDEL", "s", "bogus"),
        ("XDEL", "s", "1-1", "bogus"),
        ("XLEN", "s"),
        ("XDEL", "s", "-"),
        ("XDEL", "s", "+"),
        ("XDEL", "s", "2"),
        ("XDEL", "s", "2-1", "2-1", "9-9"),
        ("XDEL", "s", "2-1"),
        ("XLEN", "s"),
        ("XDEL", "s", "1-1", "3-1"),
        ("XLEN", "s"),
        ("EXISTS", "s"),
        ("XRANGE", "s", "-", "+"),
        ("XADD", "s", "2-5", "f", "v"),
        ("XADD", "s", "3-2", "f", "v"),
        ("XRANGE", "s", "-", "+"),
        ("SET", "str", "x"),
        ("XDEL", "str", "1-1"),
        ("XDEL", "str", "bogus"),
        ("XLEN", "str"),
    ])


def test_xtrim(pair: Pair) -> None:
    pair.config("stream-node-max-entries", 10)
    for i in range(1, 101):
        pair("XADD", "s", f"{i}-0", "f", i)
    pair.run([
        ("XTRIM", "nokey", "MAXLEN", "1"),
        ("XTRIM", "nokey", "MAXLEN", "x"),
        ("XTRIM", "s"),
        ("XTRIM", "s", "MAXLEN"),
        ("XTRIM", "s", "FOO", "1"),
        ("XTRIM", "s", "MAXLEN", "x"),
        ("XTRIM", "s", "MAXLEN", "-1"),
        ("XTRIM", "s", "MAXLEN", "1", "MINID", "1"),
        ("XTRIM", "s", "LIMIT", "1"),
        ("XTRIM", "s", "LIMIT", "0", "MAXLEN", "5"),
        ("XTRIM", "s", "MAXLEN", "5", "LIMIT", "1"),
        ("XTRIM", "s", "MAXLEN", "~", "5", "LIMIT", "-5"),
        ("XTRIM", "s", "MAXLEN", "~", "5", "*"),
        ("XTRIM", "s", "MAXLEN", "~", "95"),
        ("XTRIM", "s", "MAXLEN", "~", "89"),
        ("XTRIM", "s", "MAXLEN", "~", "50", "LIMIT", "15"),
        ("XTRIM", "s", "MAXLEN", "~", "50", "LIMIT", "25"),
        ("XTRIM", "s", "MAXLEN", "~", "50", "LIMIT", "0"),
        ("XTRIM", "s", "MAXLEN", "=", "45"),
        ("XTRIM", "s", "MAXLEN", "43"),
        ("XRANGE", "s", "-", "+", "COUNT", "3"),
        ("XTRIM", "s", "MINID", "~", "60"),
        ("XTRIM", "s", "MINID", "~", "70-1"),
        ("XTRIM", "s", "MINID", "72"),
        ("XTRIM", "s", "MINID", "=", "73-0"),
        ("XTRIM", "s", "MINID", "-"),
        ("XTRIM", "s", "MINID", "x"),
        ("XTRIM", "s", "MINID", "1-*"),
        ("XDEL", "s", "80-0", "81-0"),
        ("XTRIM", "s", "MINID", "82"),
        ("XTRIM", "s", "maxlen", "~", "0"),
        ("XLEN", "s"),
        ("XTRIM", "s", "MAXLEN", "0"),
        ("XLEN", "s"),
        ("EXISTS", "s"),
        ("XTRIM", "s", "MAXLEN", "0"),
        ("SET", "str", "x"),
        ("XTRIM", "str", "MAXLEN", "1"),
        ("XTRIM", "str", "MAXLEN", "x"),
    ])


@pytest.mark.parametrize(("entries", "nbytes"), [(100, 4096), (3, 0), (0, 200)])
def test_random_workload_node_layout(pair: Pair, entries: int, nbytes: int) -> None:
    """Seeded writes, deletes and trims; ~ trims only agree if the node layout agrees."""
    pair.config("stream-node-max-entries", entries)
    pair.config("stream-node-max-bytes", nbytes)
    rng = random.Random(entries * 31 + nbytes)
    ms = 1
    ids = []
    for _ in range(400):
        c = rng.random()
        if c < 0.7:
            ms += rng.choice([0, 1, 3])
            vals = [rng.choice([str(rng.randint(-40000, 40000)), "x" * rng.randint(0, 70), "07"])
                    for _ in range(3)]
            names = ["a", "b", "c"] if rng.random() < 0.9 else ["a", "z", "c"]
            r = pair("XADD", "s", f"{ms}-*", *[x for nv in zip(names, vals, strict=True)
                                               for x in nv])
            ids.append(r[1])
        elif c < 0.85 and ids:
            pair("XDEL", "s", *rng.sample(ids, min(len(ids), 3)))
        elif c < 0.95:
            pair("XTRIM", "s", "MAXLEN", "~", rng.randint(0, 300))
        else:
            pair("XTRIM", "s", "MINID", "~", f"{max(1, ms - rng.randint(0, 50))}")
        if rng.random() < 0.1:
            pair("XLEN", "s")
    pair("XRANGE", "s", "-", "+")


# --- XSETID ------------------------------------------------------------------------------------
def test_xsetid(pair: Pair) -> None:
    pair.run([
        ("XSETID", "nokey", "1-1"),
        ("XSETID", "nokey", "x"),
        ("XSETID", "nokey", "1-1", "ENTRIESADDED", "-1"),
        ("XADD", "s", "5-5", "f", "v"),
        ("XADD", "s", "6-0", "f", "v"),
        ("XSETID", "s", "x"),
        ("XSETID", "s", "-"),
        ("XSETID", "s", "+"),
        ("XSETID", "s", "5-5"),
        ("XSETID", "s", "6"),
        ("XSETID", "s", "5-9"),
        ("XSETID", "s", "10-0", "ENTRIESADDED"),
        ("XSETID", "s", "10-0", "ENTRIESADDED", "x"),
        ("XSETID", "s", "10-0", "ENTRIESADDED", "-1"),
        ("XSETID", "s", "10-0", "ENTRIESADDED", "1"),
        ("XSETID", "s", "10-0", "ENTRIESADDED", "2"),
        ("XSETID", "s", "10-0", "MAXDELETEDID", "x"),
        ("XSETID", "s", "10-0", "MAXDELETEDID", "11-0"),
        ("XSETID", "s", "10-0", "MAXDELETEDID", "+"),
        ("XSETID", "s", "10-0", "MAXDELETEDID", "9-0", "ENTRIESADDED", "5"),
        ("XSETID", "s", "10-0", "FOO", "1"),
        ("XSETID", "s", "10-0", "ENTRIESADDED", "5", "bar"),
        ("XADD", "s", "10-0", "f", "v"),
        ("XADD", "s", "10-*", "f", "v"),
        ("SET", "str", "x"),
        ("XSETID", "str", "1-1"),
        ("XSETID", "str", "x"),
    ])


def test_xsetid_after_deletes_as_7_2(node, oracle72, protocol: int) -> None:
    """7.2+ refuses an XSETID below max-deleted-entry-id (7.0 accepted it); compared with a
    7.2+ reference server, since the 7.0 oracle predates the rule."""
    from tests.support.rawresp import RawClient

    script = [
        ("XADD", "s", "5-5", "f", "v"), ("XADD", "s", "6-0", "f", "v"),
        ("XADD", "s", "10-0", "f", "v"), ("XADD", "s", "10-*", "f", "v"),
        ("XDEL", "s", "6-0"), ("XSETID", "s", "5-5"), ("XSETID", "s", "5-4"),
        ("XDEL", "s", "5-5", "10-1"), ("XSETID", "s", "1-0"),
        ("XSETID", "s", "0-0", "ENTRIESADDED", "0"), ("XSETID", "s", "7-0", "MAXDELETEDID", "3-0"),
        ("XLEN", "s"), ("XADD", "s", "0-1", "f", "v"), ("XLEN", "s"),
        ("XSETID", "s", f"{MAXS}-{MAXS}"), ("XADD", "s", "*", "f", "v"),
        ("XADD", "s", "1-1", "f", "v"),
    ]
    replies = []
    for h in (node, oracle72):
        c = RawClient(h.host, h.port)
        try:
            if protocol == 3:
                c.call("HELLO", "3")
            c.call("DEL", "s")
            replies.append([c.call(*cmd) for cmd in script])
            c.call("DEL", "s")
        finally:
            c.close()
    for cmd, ours, ref in zip(script, *replies, strict=True):
        assert ours == ref, (cmd, ours, ref)


# --- redis-py, as applications use it ----------------------------------------------------------
def test_redis_py_api(r, oracle_client, protocol: int) -> None:
    del protocol  # `r` speaks it
    for c in (r, oracle_client):
        for i in range(1, 8):
            c.xadd("s", {"temp": i, "name": f"n{i}"}, id=f"{i}-1")
        c.xadd("s", {"temp": 8}, id="8-*", maxlen=5, approximate=False)
    for call in (
        lambda c: c.xrange("s"),
        lambda c: c.xrange("s", min="(4-1", count=2),
        lambda c: c.xrevrange("s", max="+", min="-", count=3),
        lambda c: c.xlen("s"),
        lambda c: c.xdel("s", "4-1", "5-1"),
        lambda c: c.xtrim("s", maxlen=2),
        lambda c: c.xtrim("s", minid="8-0"),
        lambda c: c.xrange("s"),
        lambda c: c.xadd("s", {"x": "y"}, id="9-1", nomkstream=True),
        lambda c: c.xadd("nokey", {"x": "y"}, nomkstream=True),
        lambda c: c.execute_command("XSETID", "s", "100-0", "ENTRIESADDED", 50),
    ):
        assert call(r) == call(oracle_client)


# --- effects -------------------------------------------------------------------------------------
_Server = InprocServer
_run = run


def _workload(seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    cmds: list[list[bytes]] = []
    for _ in range(500):
        c = rng.random()
        f = [b"a", b"%d" % rng.randint(-9, 999), b"b", rng.randbytes(rng.randint(0, 8))]
        if c < 0.5:
            cmds.append([b"XADD", b"s", b"*", *f])
        elif c < 0.6:
            cmds.append([b"XADD", b"s", b"MAXLEN", b"~", b"%d" % rng.randint(0, 200), b"*", *f])
        elif c < 0.62:
            cmds.append([b"XADD", b"s", b"MAXLEN", b"~", b"%d" % rng.randint(0, 200), b"LIMIT",
                         b"%d" % rng.randint(0, 30), b"*", *f])
        elif c < 0.65:
            cmds.append([b"XADD", b"s", b"MAXLEN", b"%d" % rng.randint(100, 300), b"*", *f])
        elif c < 0.7:
            cmds.append([b"XADD", b"s", b"MINID", b"~", b"%d" % (1_700_000_000_000 + len(cmds)
                                                                 - rng.randint(0, 300)),
                         b"NOMKSTREAM", b"%d-*" % (1_700_000_000_000 + len(cmds)), *f])
        elif c < 0.8:
            cmds.append([b"XTRIM", b"s", b"MAXLEN", b"~", b"%d" % rng.randint(0, 200)])
        elif c < 0.85:
            cmds.append([b"XTRIM", b"s", b"MINID", b"~",
                         b"%d" % (1_700_000_000_000 + len(cmds) - rng.randint(0, 300)),
                         b"LIMIT", b"%d" % rng.randint(0, 50)])
        elif c < 0.9:
            cmds.append([b"XTRIM", b"s", b"MAXLEN", b"%d" % rng.randint(50, 250)])
        elif c < 0.97:
            cmds.append([b"XDEL", b"s", b"%d-%d" % (1_700_000_000_000 + rng.randint(0, 500),
                                                    rng.randint(0, 3))])
        else:
            cmds.append([b"XSETID", b"s", b"%d-0" % (1_700_000_000_000 + len(cmds) + 5)])
    return cmds


@pytest.mark.parametrize("seed", [1, 2])
def test_effects_replay_to_the_same_stream(seed: int) -> None:
    primary = _Server()
    primary.config.stream_node_max_entries = 7
    for i, cmd in enumerate(_workload(seed)):
        primary.clock = 1_700_000_000_000 + i  # the node's command clock moves on
        _run(primary, cmd)
    effects = primary.recorded
    assert effects
    for e in effects:
        options = e[:-5] if e[0].upper() == b"XADD" else e  # entries have 2 fields
        assert b"~" not in options and b"LIMIT" not in options, e
        if e[0].upper() == b"XADD":
            assert re.fullmatch(rb"\d+-\d+", e[-5]), e
    replica = _Server()
    replica.config.stream_node_max_entries = 7
    replica.clock = 0  # a replica never generates IDs of its own
    for e in effects:
        assert not _run(replica, e).startswith(b"-"), e
    a = primary.db.get_stream(b"s")
    b = replica.db.get_stream(b"s")
    assert a is not None and b is not None
    assert a.dump_state() == b.dump_state()
    assert len(replica.recorded) == len(effects)  # and it would propagate the same again


def test_effects_are_valid_redis_commands(oracle_client) -> None:
    """Replaying our effects on redis-server gives the same entries and counters."""
    primary = _Server()
    for i, cmd in enumerate(_workload(7)):
        primary.clock = 1_700_000_000_000 + i
        _run(primary, cmd)
    pipe = oracle_client.pipeline(transaction=False)
    for e in primary.recorded:
        pipe.execute_command(*e)
    for reply in pipe.execute(raise_on_error=False):
        assert not isinstance(reply, Exception), reply
    s = primary.db.get_stream(b"s")
    assert s is not None
    got = [(b"%d-%d" % (i >> 64, i & SEQ_MAX), dict(zip(f[0::2], f[1::2], strict=True)))
           for i, f in s.range(0, (SEQ_MAX << 64) | SEQ_MAX)]
    assert oracle_client.xrange("s") == got
    info = oracle_client.xinfo_stream("s")
    assert info["length"] == s.length
    assert info["entries-added"] == s.entries_added
    assert info["last-generated-id"] == b"%d-%d" % (s.last_id >> 64, s.last_id & SEQ_MAX)
