"""Seeded random workloads over the stream commands, for differential tests.

`StreamWorkload(seed).commands(n)` yields `n` commands (lists of bytes). The same seed always
gives the same commands: the generator never looks at replies, it only keeps its own rough
model (last explicit ID per key, groups and consumers it created) so that most commands are
valid and hit existing entries. A share of the commands is deliberately malformed (wrong
arity, bad IDs, bad numbers, unknown options, wrong types, negative counts) so that the error
paths are compared too.

Determinism rules, so that a real redis-server and xshard can be compared reply by reply:
- IDs are mostly explicit with small millisecond parts. `*` is rare; the comparer masks the
  IDs it generates (see tests/support/diff.py).
- Time only shows in idle times, which the comparer masks. Every time *threshold* (XCLAIM and
  XAUTOCLAIM min-idle-time, XPENDING IDLE) is either 0 or huge, and every delivery time that
  a command sets (XCLAIM IDLE/TIME) is either recent or far in the past, so no result depends
  on how fast the two servers run.
- BLOCK is used only with timeouts of a few milliseconds (it only matters when the result is
  empty), never 0, and malformed variants never touch a BLOCK timeout.
- No XREAD with `+` (Redis 7.4 only; the oracle is 7.0).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

__all__ = ["StreamWorkload", "DEFAULT_KEYS", "fmt_command"]

# Two plain names, two sharing a hash tag, one that often holds a non-stream value.
DEFAULT_KEYS = (b"s1", b"s2", b"{t}s3", b"{t}s4", b"other")

MAX_ID = b"18446744073709551615-18446744073709551615"
BAD_IDS = (
    b"abc", b"1-", b"-1", b"1-x", b"x-1", b"18446744073709551616", b"1-18446744073709551616",
    b"((1", b"", b"1.5", b" 1", b"0x10", b"1--1", b"-", b"+", b"$", b">",
)
BAD_NUMBERS = (
    b"abc", b"-1", b"1.5", b"", b"9223372036854775808", b"-9223372036854775809", b"0x10",
    b" 3", b"-5", b"1e3",
)
UNKNOWN_WORDS = (b"FOO", b"NOMKSTREAMS", b"LIMITS", b"JUSTIDS", b"IDLEX", b"STREAM", b"GROUPS")
FIELDS = (b"f1", b"f2", b"f3", b"name", b"n")
GROUPS = (b"g1", b"g2", b"g3")
CONSUMERS = (b"c1", b"c2", b"c3", b"c4")
BIG_IDLE = b"100000000"        # a min-idle-time / IDLE filter no fresh delivery passes
OLD_IDLE = b"1000000000"       # an IDLE that puts a delivery far in the past (passes BIG_IDLE)


def fmt_command(argv: list[bytes], max_arg: int | None = None) -> str:
    """Render argv as a redis-cli line (quoted where needed) for failure messages.

    With `max_arg`, longer arguments are shortened to `"BBBB..."(1200 bytes)`.
    """
    out = []
    for a in argv:
        if max_arg is not None and len(a) > max_arg:
            out.append(f'"{repr(a[:max_arg // 2])[2:-1]}..."({len(a)} bytes)')
            continue
        s = a.decode(errors="backslashreplace")
        if not s or any(ch in s for ch in ' "\'\\') or not s.isprintable():
            s = '"' + repr(a)[2:-1].replace('"', '\\"') + '"'
        out.append(s)
    return " ".join(out)


class StreamWorkload:
    """A weighted random mix of stream commands (plus a few generic ones) over a few keys."""

    def __init__(self, seed: int, keys: tuple[bytes, ...] = DEFAULT_KEYS, *,
                 bad_ratio: float = 0.12, star_ratio: float = 0.04,
                 block_ratio: float = 0.08, only: Iterable[str] | None = None,
                 weights: dict[str, int] | None = None) -> None:
        """`only` restricts the mix to some generators by name (xadd, xrange, xgroup, ...,
        generic), e.g. while a server implements only part of the commands; `weights`
        overrides the weight of some generators."""
        self.rng = random.Random(seed)
        self.keys = keys
        self.bad_ratio = bad_ratio
        self.star_ratio = star_ratio
        self.block_ratio = block_ratio
        # The generator's own (approximate) model: last explicit ms/seq and some IDs per key.
        self.last_ms = {k: 0 for k in keys}
        self.last_seq = {k: 0 for k in keys}
        self.ids: dict[bytes, list[tuple[int, int]]] = {k: [] for k in keys}
        self.groups: dict[bytes, set[bytes]] = {k: set() for k in keys}
        # Keys whose top ID came from `*` (the server's clock): explicit IDs would all fail
        # there, so XADD keeps using `*` on them until the key is deleted.
        self.starred: set[bytes] = set()
        self._table = [
            (self.xadd, 26), (self.xtrim, 4), (self.xdel, 5), (self.xlen, 3),
            (self.xrange, 8), (self.xrevrange, 5), (self.xread, 6),
            (self.xgroup, 9), (self.xreadgroup, 11), (self.xack, 5),
            (self.xpending, 5), (self.xclaim, 5), (self.xautoclaim, 4),
            (self.xinfo, 6), (self.xsetid, 2), (self.generic, 5),
        ]
        if weights:
            self._table = [(f, weights.get(f.__name__, w)) for f, w in self._table]
        if only is not None:
            wanted = {o.strip().lower() for o in only}
            unknown = wanted - {f.__name__ for f, _ in self._table}
            if unknown:
                raise ValueError(f"unknown generators {sorted(unknown)}; known: "
                                 f"{[f.__name__ for f, _ in self._table]}")
            self._table = [(f, w) for f, w in self._table if f.__name__ in wanted]
        self._fns = [f for f, _ in self._table]
        self._weights = [w for _, w in self._table]

    # -- driver ------------------------------------------------------------------------------

    def commands(self, n: int) -> Iterator[list[bytes]]:
        for _ in range(n):
            yield self.next()

    def next(self) -> list[bytes]:
        fn = self.rng.choices(self._fns, self._weights)[0]
        argv = fn()
        if self.rng.random() < self.bad_ratio:
            argv = self.mutate(argv)
        return argv

    # -- value pools -------------------------------------------------------------------------

    def key(self) -> bytes:
        # "other" is picked less often so that most commands hit streams.
        return self.rng.choices(self.keys, [4] * (len(self.keys) - 1) + [1])[0]

    def stream_key(self) -> bytes:
        return self.rng.choice(self.keys[:-1]) if self.rng.random() < 0.97 else self.keys[-1]

    def group_key(self) -> bytes:
        """A key that (the generator believes) has consumer groups, most of the time."""
        with_groups = [k for k in self.keys if self.groups[k]]
        if with_groups and self.rng.random() < 0.85:
            return self.rng.choice(with_groups)
        return self.stream_key()

    def group(self, key: bytes) -> bytes:
        known = sorted(self.groups[key])
        if known and self.rng.random() < 0.92:
            return self.rng.choice(known)
        return self.rng.choice(GROUPS)

    def consumer(self) -> bytes:
        return self.rng.choice(CONSUMERS)

    def num(self, lo: int = 0, hi: int = 10) -> bytes:
        return str(self.rng.randint(lo, hi)).encode()

    def count_arg(self) -> bytes:
        r = self.rng.random()
        if r < 0.08:
            return b"0"
        if r < 0.12:
            return b"-1"
        if r < 0.15:
            return self.rng.choice(BAD_NUMBERS)
        return self.num(1, 12)

    def known_id(self, key: bytes) -> bytes:
        ids = self.ids[key]
        if not ids:
            return b"0-1"
        ms, seq = self.rng.choice(ids[-30:]) if self.rng.random() < 0.8 else self.rng.choice(ids)
        return b"%d-%d" % (ms, seq)

    def some_id(self, key: bytes) -> bytes:
        """A complete ID: usually an existing one, sometimes a near miss or an edge."""
        r = self.rng.random()
        if r < 0.65:
            return self.known_id(key)
        if r < 0.85:
            ms = self.rng.randint(0, self.last_ms[key] + 3)
            return b"%d-%d" % (ms, self.rng.randint(0, 3))
        if r < 0.9:
            return b"0-0"
        if r < 0.94:
            return MAX_ID
        if r < 0.97:
            return str(self.rng.randint(0, self.last_ms[key] + 2)).encode()  # ms only
        return self.rng.choice(BAD_IDS)

    def range_id(self, key: bytes, low: bool) -> bytes:
        """A start or end for XRANGE: - + complete, incomplete (ms only) or exclusive."""
        r = self.rng.random()
        if r < 0.25:
            return b"-" if low else b"+"
        if r < 0.3:
            return b"+" if low else b"-"
        if r < 0.6:
            i = self.known_id(key)
        elif r < 0.78:
            i = str(self.rng.randint(0, self.last_ms[key] + 2)).encode()
        elif r < 0.9:
            i = b"%d-%d" % (self.rng.randint(0, self.last_ms[key] + 2), self.rng.randint(0, 4))
        elif r < 0.95:
            return self.rng.choice((b"(-", b"(+", MAX_ID, b"(" + MAX_ID, b"0-0", b"(0-0"))
        else:
            return self.rng.choice(BAD_IDS)
        return b"(" + i if self.rng.random() < 0.25 else i

    def next_id(self, key: bytes) -> bytes:
        """The next explicit ID, as a well-behaved producer would pick it."""
        step = self.rng.choice((0, 0, 1, 1, 1, 2, 3))
        if step == 0:
            self.last_seq[key] += 1
        else:
            self.last_ms[key] += step
            self.last_seq[key] = self.rng.choice((0, 0, 0, 1, 5))
        self.ids[key].append((self.last_ms[key], self.last_seq[key]))
        return b"%d-%d" % (self.last_ms[key], self.last_seq[key])

    def value(self) -> bytes:
        r = self.rng.random()
        if r < 0.35:
            return self.rng.choice((b"v", b"hello", b"x y", b"", b"\x00\xff"))
        if r < 0.65:
            # Integers are encoded specially in listpacks; they matter for node byte sizes.
            return str(self.rng.choice((0, 1, -1, 42, 127, 128, -4096, 65536, 2**31,
                                        -2**40, 2**63 - 1))).encode()
        if r < 0.97:
            return b"v" * self.rng.randint(1, 60)
        return b"B" * self.rng.randint(200, 1500)

    def fields(self) -> list[bytes]:
        n = self.rng.choice((1, 1, 1, 2, 2, 3))
        names = self.rng.sample(FIELDS, n) if self.rng.random() < 0.3 else list(FIELDS[:n])
        out: list[bytes] = []
        for f in names:
            out += [f, self.value()]
        return out

    def trim_args(self, key: bytes, xtrim: bool) -> list[bytes]:
        strategy = self.rng.choice((b"MAXLEN", b"MAXLEN", b"MINID"))
        if self.rng.random() < 0.05:
            strategy = strategy.lower()
        op = self.rng.choice(([], [b"="], [b"~"], [b"~"]))
        if strategy.upper() == b"MAXLEN":
            thr = self.num(0, 25) if self.rng.random() < 0.93 else self.rng.choice(BAD_NUMBERS)
        else:
            thr = self.some_id(key) if self.rng.random() < 0.85 else str(
                self.rng.randint(0, self.last_ms[key] + 1)).encode()
        out = [strategy, *op, thr]
        r = self.rng.random()
        if (op == [b"~"] and r < 0.5) or r < 0.04:
            out += [b"LIMIT", self.rng.choice((b"0", b"1", b"2", b"5", b"100", b"-1", b"x"))]
        return out

    # -- stream commands ---------------------------------------------------------------------

    def xadd(self) -> list[bytes]:
        key = self.stream_key()
        opts: list[list[bytes]] = []
        if self.rng.random() < 0.1:
            opts.append([b"NOMKSTREAM"])
        if self.rng.random() < 0.25:
            opts.append(self.trim_args(key, xtrim=False))
        self.rng.shuffle(opts)
        r = self.rng.random()
        if r < self.star_ratio or (key in self.starred and r < 0.8):
            sid = b"*"
            self.starred.add(key)
        elif r < 0.75:
            sid = self.next_id(key)
        elif r < 0.85:
            ms = self.last_ms[key] + self.rng.choice((0, 1))
            sid = b"%d-*" % ms
            self.last_seq[key] = self.last_seq[key] + 1 if ms == self.last_ms[key] else 0
            self.last_ms[key] = ms
            self.ids[key].append((ms, self.last_seq[key]))
        elif r < 0.9:
            sid = self.known_id(key)  # equal or smaller than the top item: an error
        elif r < 0.94:
            sid = self.rng.choice((b"0-0", b"0-*", b"0", b"0-1", b"5", MAX_ID,
                                   b"18446744073709551615-*", b"18446744073709551615"))
        else:
            sid = self.rng.choice(BAD_IDS[:12])
        argv = [b"XADD", key]
        for o in opts:
            argv += o
        argv.append(sid)
        argv += self.fields()
        if self.rng.random() < 0.02:
            argv.pop()  # odd number of field/value arguments
        return argv

    def xtrim(self) -> list[bytes]:
        key = self.stream_key()
        return [b"XTRIM", key, *self.trim_args(key, xtrim=True)]

    def xdel(self) -> list[bytes]:
        key = self.stream_key()
        return [b"XDEL", key, *[self.some_id(key) for _ in range(self.rng.choice((1, 1, 2, 3)))]]

    def xlen(self) -> list[bytes]:
        return [b"XLEN", self.key()]

    def xrange(self, rev: bool = False) -> list[bytes]:
        key = self.stream_key()
        argv = [b"XREVRANGE" if rev else b"XRANGE", key, self.range_id(key, not rev),
                self.range_id(key, rev)]
        if self.rng.random() < 0.4:
            argv += [b"COUNT", self.count_arg()]
        return argv

    def xrevrange(self) -> list[bytes]:
        return self.xrange(rev=True)

    def read_ids(self, key: bytes, group: bool) -> bytes:
        r = self.rng.random()
        if group:
            if r < 0.7:
                return b">"
            if r < 0.85:
                return b"0"
            if r < 0.97:
                return self.known_id(key)
            return b"$"  # meaningless for XREADGROUP: an error
        if r < 0.2:
            return b"$"
        if r < 0.45:
            return b"0"
        if r < 0.85:
            return self.known_id(key)
        if r < 0.95:
            return str(self.rng.randint(0, self.last_ms[key] + 1)).encode()
        return self.rng.choice((b"0-0", MAX_ID, b">"))

    def _read_opts(self, allow_noack: bool) -> list[bytes]:
        opts: list[list[bytes]] = []
        if self.rng.random() < 0.5:
            opts.append([b"COUNT", self.count_arg()])
        if self.rng.random() < self.block_ratio:
            opts.append([b"BLOCK", self.rng.choice((b"1", b"2", b"5"))])
        if allow_noack and self.rng.random() < 0.2:
            opts.append([b"NOACK"])
        self.rng.shuffle(opts)
        return [a for o in opts for a in o]

    def _streams(self, group: bool, first: bytes | None = None) -> list[bytes]:
        n = self.rng.choice((1, 1, 1, 1, 2, 3))
        keys = [self.stream_key() for _ in range(n)]
        if first is not None:
            keys[0] = first
        return [b"STREAMS", *keys, *[self.read_ids(k, group) for k in keys]]

    def xread(self) -> list[bytes]:
        return [b"XREAD", *self._read_opts(False), *self._streams(False)]

    def xreadgroup(self) -> list[bytes]:
        key = self.group_key()
        head = [b"XREADGROUP", b"GROUP", self.group(key), self.consumer()]
        return [*head, *self._read_opts(True), *self._streams(True, first=key)]

    def xgroup(self) -> list[bytes]:
        key = self.stream_key()
        g = self.rng.choice(GROUPS)
        sub = self.rng.choices(
            (b"CREATE", b"SETID", b"DESTROY", b"CREATECONSUMER", b"DELCONSUMER"),
            (10, 4, 2, 3, 2))[0]
        if self.rng.random() < 0.1:
            sub = sub.lower()
        if sub.upper() == b"CREATE":
            start = self.rng.choice((b"$", b"0", b"0-0", self.known_id(key), self.known_id(key)))
            argv = [b"XGROUP", sub, key, g, start]
            if self.rng.random() < 0.6:
                argv.append(b"MKSTREAM")
            if self.rng.random() < 0.25:
                argv += [b"ENTRIESREAD", self.rng.choice((b"0", b"1", b"3", b"-1", b"-2",
                                                          b"1000", b"x"))]
            self.groups[key].add(g)
            return argv
        key = self.group_key()
        g = self.group(key)
        if sub.upper() == b"SETID":
            argv = [b"XGROUP", sub, key, g, self.rng.choice((b"$", b"0", self.known_id(key)))]
            if self.rng.random() < 0.35:
                argv += [b"ENTRIESREAD", self.rng.choice((b"0", b"2", b"-1", b"-3", b"y"))]
            return argv
        if sub.upper() == b"DESTROY":
            self.groups[key].discard(g)
            return [b"XGROUP", sub, key, g]
        return [b"XGROUP", sub, key, g, self.consumer()]

    def xack(self) -> list[bytes]:
        key = self.group_key()
        n = self.rng.choice((1, 1, 2, 3))
        return [b"XACK", key, self.group(key), *[self.some_id(key) for _ in range(n)]]

    def xpending(self) -> list[bytes]:
        key = self.group_key()
        argv = [b"XPENDING", key, self.group(key)]
        if self.rng.random() < 0.6:
            if self.rng.random() < 0.3:
                argv += [b"IDLE", self.rng.choice((b"0", BIG_IDLE, b"-1", b"x"))]
            argv += [self.range_id(key, True), self.range_id(key, False), self.count_arg()]
            if self.rng.random() < 0.4:
                argv.append(self.consumer())
        return argv

    def xclaim(self) -> list[bytes]:
        key = self.group_key()
        argv = [b"XCLAIM", key, self.group(key), self.consumer(),
                self.rng.choice((b"0", b"0", b"0", BIG_IDLE, b"-1"))]
        argv += [self.some_id(key) for _ in range(self.rng.choice((1, 1, 2, 3)))]
        opts = []
        if self.rng.random() < 0.25:
            opts.append([b"IDLE", self.rng.choice((b"0", OLD_IDLE, b"-5"))])
        if self.rng.random() < 0.15:
            opts.append([b"TIME", self.rng.choice((b"1", b"1000", b"-1"))])
        if self.rng.random() < 0.25:
            opts.append([b"RETRYCOUNT", self.rng.choice((b"0", b"3", b"7", b"-2"))])
        if self.rng.random() < 0.3:
            opts.append([b"FORCE"])
        if self.rng.random() < 0.3:
            opts.append([b"JUSTID"])
        if self.rng.random() < 0.2:
            opts.append([b"LASTID", self.some_id(key)])
        self.rng.shuffle(opts)
        for o in opts:
            argv += o
        return argv

    def xautoclaim(self) -> list[bytes]:
        key = self.group_key()
        argv = [b"XAUTOCLAIM", key, self.group(key), self.consumer(),
                self.rng.choice((b"0", b"0", BIG_IDLE, b"-1")), self.range_id(key, True)]
        if self.rng.random() < 0.5:
            argv += [b"COUNT", self.rng.choice((b"1", b"2", b"5", b"100", b"0", b"-1", b"x"))]
        if self.rng.random() < 0.3:
            argv.append(b"JUSTID")
        return argv

    def xinfo(self) -> list[bytes]:
        key = self.stream_key()
        r = self.rng.random()
        if r < 0.3:
            return [b"XINFO", b"STREAM", key]
        if r < 0.55:
            argv = [b"XINFO", b"STREAM", key, b"FULL"]
            if self.rng.random() < 0.5:
                argv += [b"COUNT", self.rng.choice((b"0", b"1", b"3", b"-1", b"x"))]
            return argv
        if r < 0.75:
            return [b"XINFO", b"GROUPS", key]
        key = self.group_key()
        return [b"XINFO", b"CONSUMERS", key, self.group(key)]

    def xsetid(self) -> list[bytes]:
        key = self.stream_key()
        ms = self.last_ms[key] + self.rng.choice((0, 1, 5))
        sid = self.rng.choice((b"%d-%d" % (ms, self.rng.randint(0, 9)), self.known_id(key),
                               b"0-0", b"0-1", str(ms).encode()))
        argv = [b"XSETID", key, sid]
        if self.rng.random() < 0.4:
            argv += [b"ENTRIESADDED", self.rng.choice((b"0", b"5", b"1000", b"-1", b"z"))]
        if self.rng.random() < 0.3:
            argv += [b"MAXDELETEDID", self.rng.choice((self.known_id(key), b"0-0", MAX_ID,
                                                       b"0-1"))]
        if argv[2].count(b"-") == 1:
            m, s = argv[2].split(b"-")
            self.last_ms[key] = max(self.last_ms[key], int(m))
            self.last_seq[key] = int(s)
        return argv

    def generic(self) -> list[bytes]:
        r = self.rng.random()
        if r < 0.3:
            keys = self.rng.sample(self.keys, self.rng.choice((1, 1, 2)))
            if self.starred and self.rng.random() < 0.5:
                keys = [self.rng.choice(sorted(self.starred))]
            for k in keys:
                self.groups[k].clear()
                self.starred.discard(k)
            return [b"DEL", *keys]
        if r < 0.5:
            return [b"EXISTS", *[self.key() for _ in range(self.rng.choice((1, 2)))]]
        if r < 0.7:
            return [b"TYPE", self.key()]
        # Non-stream values, mostly on "other", for WRONGTYPE paths.
        key = self.keys[-1] if self.rng.random() < 0.95 else self.key()
        self.groups[key].clear()
        return self.rng.choice(([b"SET", key, b"x"], [b"LPUSH", key, b"a"],
                                [b"SADD", key, b"m"]))

    # -- malformed variants --------------------------------------------------------------------

    def mutate(self, argv: list[bytes]) -> list[bytes]:
        """Turn a valid command into a malformed one, never touching a BLOCK timeout."""
        protected = {i + 1 for i, a in enumerate(argv) if a.upper() == b"BLOCK"}
        candidates = [i for i in range(1, len(argv)) if i not in protected]
        r = self.rng.random()
        if r < 0.15 or not candidates:
            return argv[:1]                                         # no arguments at all
        if r < 0.3:
            return argv[:-1]                                        # one argument short
        if r < 0.45:
            i = self.rng.randint(2, len(argv))
            return [*argv[:i], self.rng.choice(UNKNOWN_WORDS), *argv[i:]]  # unknown option
        i = self.rng.choice(candidates)
        pool = (BAD_IDS, BAD_NUMBERS, UNKNOWN_WORDS)[self.rng.randint(0, 2)]
        bad = self.rng.choice(pool)
        if bad == b"+" and argv[0] == b"XREAD":
            bad = b"++"  # XREAD's "+" is valid in 7.4 and an error in 7.0: not comparable
        return [*argv[:i], bad, *argv[i + 1:]]                     # bad value
