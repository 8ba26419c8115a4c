"""Comparing the node's consumer-group replies with an oracle's: reply normalising, the
7.0-vs-7.2 masks, a client that reads its reply later (blocking reads), and a random group
workload. Shared by tests/node/test_groups*.py, test_counters.py and test_introspection.py."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from tests.support import diff
from tests.support.diff import SideState, drop_map_keys, normalize
from tests.support.rawresp import RawClient, encode_command
from tests.support.redis810 import Redis810View


def norm(argv: tuple, reply: tuple) -> tuple:
    args = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
    return normalize(args, reply, SideState("x"))


def drop_72_fields(argv: tuple, reply: tuple) -> tuple:
    """Drop `inactive` / `active-time` (7.2+) from our reply when comparing with 7.0."""
    name = str(argv[0]).upper()
    if name != "XINFO" or reply[0] not in ("*", "%") or reply[1] is None:
        return reply
    sub = str(argv[1]).upper()
    if sub == "CONSUMERS":
        return ("*", [drop_map_keys(c, [b"inactive"]) for c in reply[1]])
    if sub == "STREAM":
        return _map_rewrite(reply, b"groups", lambda gs: ("*", [
            _map_rewrite(g, b"consumers", lambda cs: ("*", [
                drop_map_keys(c, [b"active-time"]) for c in cs[1]])) for g in gs[1]]))
    return reply


def _map_rewrite(reply: tuple, key: bytes, fn) -> tuple:
    if reply[0] == "%":
        return ("%", [(k, fn(v) if k[1] == key and v[0] == "*" else v) for k, v in reply[1]])
    items = list(reply[1])
    for i in range(0, len(items) - 1, 2):
        if items[i][1] == key and items[i + 1][0] == "*":
            items[i + 1] = fn(items[i + 1])
    return ("*", items)


class Pair(diff.Pair):
    """diff.Pair against a 7.0 or a 7.2+ server: what 7.2 added or reworded is masked on 7.0."""

    def __init__(self, ours: RawClient, ref: RawClient, ref_version: tuple[int, ...]) -> None:
        super().__init__(ours, ref)
        self.ref72 = ref_version >= (7, 2)
        self.view = Redis810View(ref.call)  # 7.0 does not clamp either

    def ref_call(self, *cmd: bytes | str | int) -> tuple:
        argv = [x if isinstance(x, bytes) else str(x).encode() for x in cmd]
        return self.view.reply(argv, self.ref.call(*self.view.argv(argv)))

    def adjust(self, cmd: tuple, a: tuple, b: tuple) -> tuple[tuple, tuple]:
        a, b = norm(cmd, a), norm(cmd, b)
        if not self.ref72:
            a = drop_72_fields(cmd, a)
            if b == ("+", b"    Prints this help."):  # 7.2 reworded the last HELP line
                b = ("+", b"    Print this help.")
            elif b[0] == "*" and isinstance(b[1], list) and ("+", b"    Prints this help.") in b[1]:
                b = ("*", [("+", b"    Print this help.") if x == ("+", b"    Prints this help.")
                           else x for x in b[1]])
        return a, b


def connect(handle, protocol: int) -> RawClient:
    c = RawClient(handle.host, handle.port)
    if protocol == 3:
        c.hello(3)
    return c


class Deferred:
    """A client that sends a command now and reads its reply later (redis_deferring_client)."""

    def __init__(self, handle, protocol: int = 2) -> None:
        self.c = connect(handle, protocol)

    def send(self, *args: str | int) -> None:
        self.c.send_raw(encode_command(args))

    def read(self, timeout: float = 10.0) -> tuple:
        self.c.sock.settimeout(timeout)
        return self.c.read_reply()

    def pending(self, wait: float = 0.1) -> bool:
        """True if no reply arrives within `wait` seconds (the client is still blocked)."""
        self.c.sock.settimeout(wait)
        try:
            self.c.read_reply()
        except TimeoutError:
            return True
        return False

    def close(self) -> None:
        self.c.close()


def wait_blocked(handle, n: int, timeout: float = 5.0) -> None:
    c = RawClient(handle.host, handle.port)
    deadline = time.monotonic() + timeout
    try:
        while True:
            info = c.call("INFO", "clients")[1]
            if isinstance(info, bytes) and b"blocked_clients:%d\r" % n in info:
                return
            assert time.monotonic() < deadline, f"{n} blocked clients expected:\n{info!r}"
            time.sleep(0.01)
    finally:
        c.close()


Maker = Callable[["Workload", bytes, bytes], list[bytes]]


class Workload:
    """Random commands over one stream `s` and its groups. Each step draws a number, a group
    and a consumer; the first maker of the mix whose bound is above the number makes the
    command from them."""

    def __init__(self, seed: int, groups: list[bytes], consumers: list[bytes],
                 recent: int = 0) -> None:
        self.rng = random.Random(seed)
        self.ms = 1  # the time of the newest XADD's ID
        self.groups = groups
        self.consumers = consumers
        self.recent = recent  # some_id picks within this many ms of `ms` (0: from 1)

    def some_id(self) -> bytes:
        """An ID at or before the newest XADD's, often one that does not exist."""
        low = max(1, self.ms - self.recent) if self.recent else 1
        return b"%d-%d" % (self.rng.randint(low, self.ms), self.rng.randint(0, 2))

    def next_ms(self) -> int:
        """The time of the next XADD's ID: the same as the last one's, or one more."""
        self.ms += self.rng.randint(0, 1)
        return self.ms

    def commands(self, n: int, mix: list[tuple[float, Maker]]) -> list[list[bytes]]:
        rng = self.rng
        out: list[list[bytes]] = []
        for _ in range(n):
            x = rng.random()
            g = rng.choice(self.groups)
            c = rng.choice(self.consumers)
            out.append(next(make for bound, make in mix if x < bound)(self, g, c))
        return out


def group_workload(seed: int, n: int = 400) -> list[list[bytes]]:
    """Random group commands (and the writes they meet) over stream `s`."""
    w = Workload(seed, [b"g1", b"g2"], [b"alice", b"bob", b"carol"])
    return w.commands(n, _GROUP_MIX)


def _xadd(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    ms = w.next_ms()
    return [b"XADD", b"s", b"%d-*" % ms, b"f", b"%d" % w.rng.randint(0, 99)]


def _xgroup_setid(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    argv = [b"XGROUP", b"SETID", b"s", g, w.rng.choice([b"0", b"$", w.some_id()])]
    if w.rng.random() < 0.5:
        argv += [b"ENTRIESREAD", b"%d" % w.rng.randint(-1, 10)]
    return argv


def _xreadgroup(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    argv = [b"XREADGROUP", b"GROUP", g, c, b"COUNT", b"%d" % rng.randint(0, 4)]
    if rng.random() < 0.2:
        argv.append(b"NOACK")
    return argv + [b"STREAMS", b"s", b">" if rng.random() < 0.8 else b"0"]


_XCLAIM_OPTIONS: dict[bytes, Callable[[Workload], list[bytes]]] = {
    b"IDLE": lambda w: [b"%d" % w.rng.randint(0, 50)],
    b"TIME": lambda w: [b"%d" % (1_700_000_000_000 + w.rng.randint(-100, 100))],
    b"RETRYCOUNT": lambda w: [b"%d" % w.rng.randint(0, 9)],
    b"FORCE": lambda w: [],
    b"JUSTID": lambda w: [],
    b"LASTID": lambda w: [w.some_id()],
}


def _xclaim(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    argv = [b"XCLAIM", b"s", g, c, rng.choice([b"0", b"5", b"100000"])]
    argv += [w.some_id() for _ in range(rng.randint(1, 3))]
    for opt, value in _XCLAIM_OPTIONS.items():
        if rng.random() < 0.25:
            argv += [opt, *value(w)]
    return argv


def _xautoclaim(w: Workload, g: bytes, c: bytes) -> list[bytes]:
    rng = w.rng
    argv = [b"XAUTOCLAIM", b"s", g, c, rng.choice([b"0", b"3"]),
            rng.choice([b"0", w.some_id()]), b"COUNT", b"%d" % rng.randint(1, 4)]
    if rng.random() < 0.3:
        argv.append(b"JUSTID")
    return argv


_GROUP_MIX: list[tuple[float, Maker]] = [
    (0.25, _xadd),
    (0.3, lambda w, g, c: [b"XDEL", b"s", w.some_id()]),
    (0.32, lambda w, g, c: [b"XTRIM", b"s", b"MAXLEN", b"%d" % w.rng.randint(3, 20)]),
    (0.36, lambda w, g, c: [b"XGROUP", b"CREATE", b"s", g,
                            w.rng.choice([b"0", b"$", w.some_id()]), b"MKSTREAM"]),
    (0.39, _xgroup_setid),
    (0.41, lambda w, g, c: [b"XGROUP", w.rng.choice([b"CREATECONSUMER", b"DELCONSUMER"]),
                            b"s", g, c]),
    (0.42, lambda w, g, c: [b"XGROUP", b"DESTROY", b"s", g]),
    (0.62, _xreadgroup),
    (0.72, lambda w, g, c: [b"XACK", b"s", g]
     + [w.some_id() for _ in range(w.rng.randint(1, 3))]),
    (0.85, _xclaim),
    (1.0, _xautoclaim),
]
