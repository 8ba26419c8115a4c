"""Comparing the node's consumer-group replies with an oracle's: reply normalising, the
7.0-vs-7.2 masks, a client that reads its reply later (blocking reads), and a random group
workload. Shared by tests/node/test_groups*.py, test_counters.py and test_introspection.py."""

from __future__ import annotations

import random
import time

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


def group_workload(seed: int, n: int = 400) -> list[list[bytes]]:
    rng = random.Random(seed)
    cmds: list[list[bytes]] = []
    ms = 1
    cons = [b"alice", b"bob", b"carol"]
    groups = [b"g1", b"g2"]

    def some_id() -> bytes:
        return b"%d-%d" % (rng.randint(1, ms), rng.randint(0, 2))

    for _ in range(n):
        x = rng.random()
        g = rng.choice(groups)
        c = rng.choice(cons)
        if x < 0.25:
            ms += rng.randint(0, 1)
            cmds.append([b"XADD", b"s", b"%d-*" % ms, b"f", b"%d" % rng.randint(0, 99)])
        elif x < 0.3:
            cmds.append([b"XDEL", b"s", some_id()])
        elif x < 0.32:
            cmds.append([b"XTRIM", b"s", b"MAXLEN", b"%d" % rng.randint(3, 20)])
        elif x < 0.36:
            cmds.append([b"XGROUP", b"CREATE", b"s", g, rng.choice([b"0", b"$", some_id()]),
                         b"MKSTREAM"])
        elif x < 0.39:
            argv = [b"XGROUP", b"SETID", b"s", g, rng.choice([b"0", b"$", some_id()])]
            if rng.random() < 0.5:
                argv += [b"ENTRIESREAD", b"%d" % rng.randint(-1, 10)]
            cmds.append(argv)
        elif x < 0.41:
            cmds.append([b"XGROUP", rng.choice([b"CREATECONSUMER", b"DELCONSUMER"]), b"s", g, c])
        elif x < 0.42:
            cmds.append([b"XGROUP", b"DESTROY", b"s", g])
        elif x < 0.62:
            argv = [b"XREADGROUP", b"GROUP", g, c, b"COUNT", b"%d" % rng.randint(0, 4)]
            if rng.random() < 0.2:
                argv.append(b"NOACK")
            argv += [b"STREAMS", b"s", b">" if rng.random() < 0.8 else b"0"]
            cmds.append(argv)
        elif x < 0.72:
            cmds.append([b"XACK", b"s", g] + [some_id() for _ in range(rng.randint(1, 3))])
        elif x < 0.85:
            argv = [b"XCLAIM", b"s", g, c, rng.choice([b"0", b"5", b"100000"])]
            argv += [some_id() for _ in range(rng.randint(1, 3))]
            for opt in (b"IDLE", b"TIME", b"RETRYCOUNT", b"FORCE", b"JUSTID", b"LASTID"):
                if rng.random() < 0.25:
                    if opt == b"IDLE":
                        argv += [opt, b"%d" % rng.randint(0, 50)]
                    elif opt == b"TIME":
                        argv += [opt, b"%d" % (1_700_000_000_000 + rng.randint(-100, 100))]
                    elif opt == b"RETRYCOUNT":
                        argv += [opt, b"%d" % rng.randint(0, 9)]
                    elif opt == b"LASTID":
                        argv += [opt, some_id()]
                    else:
                        argv.append(opt)
            cmds.append(argv)
        else:
            argv = [b"XAUTOCLAIM", b"s", g, c, rng.choice([b"0", b"3"]),
                    rng.choice([b"0", some_id()]), b"COUNT", b"%d" % rng.randint(1, 4)]
            if rng.random() < 0.3:
                argv.append(b"JUSTID")
            cmds.append(argv)
    return cmds
