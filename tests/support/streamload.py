"""A stream workload that records what it was told, for tests that move data under it.

Writers XADD and then WAIT for a replica; an entry counts as acknowledged only when both
answered (and WAIT said 1). Consumers read with XREADGROUP BLOCK, key by key, and XACK what
they got. Every entry carries its writer and sequence number, so an entry that is in a stream
but was never acknowledged (its reply was lost) is still known to be one the writers sent.

`check` then holds the cluster to it: every acknowledged entry is there, nothing else is, an
entry was delivered to the group at most once (exactly once after `drain`), and each stream
equals its replay on one real server (`replay`): the same entries, XADDed in order, delivered
in order to the consumers that got them, acknowledged where they were — XINFO STREAM FULL
compared with only the times masked (node layout and radix-tree-nodes included).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis

from tests.support.diff import SideState, normalize
from tests.support.rawresp import RawClient

__all__ = ["LoadThreads", "StreamLoad"]

GROUP = "g"


class LoadThreads:
    """`writers` threads of `_writer(w)` and `consumers` of `_consumer(i)`, which run until
    `stop_flag` is set."""

    writers: int
    consumers: int
    stop_flag: threading.Event
    threads: list[threading.Thread]
    lock: threading.Lock
    errors: list[str]

    def _error(self, who: str, e: Exception) -> None:
        with self.lock:
            self.errors.append(f"{who}: {e!r}"[:300])

    def _writer(self, w: int) -> None:
        raise NotImplementedError

    def _consumer(self, i: int) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._writer, args=(w,), daemon=True)
                        for w in range(self.writers)]
        self.threads += [threading.Thread(target=self._consumer, args=(i,), daemon=True)
                         for i in range(self.consumers)]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(30)
        assert not any(t.is_alive() for t in self.threads), "a load thread did not stop"


class StreamLoad(LoadThreads):
    """`connect()` makes a client (redis.Redis to a router, or RedisCluster); one per thread."""

    def __init__(self, connect: Callable[[], Any], keys: list[str], writers: int = 4,
                 consumers: int = 10, block_ms: int = 100) -> None:
        self.connect = connect
        self.keys = keys
        self.writers = writers
        self.consumers = consumers
        self.block_ms = block_ms
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.acked: set[tuple[str, bytes]] = set()
        self.fields: dict[tuple[str, bytes], tuple[bytes, bytes]] = {}
        self.sent: dict[int, int] = {}  # writer -> XADDs it attempted
        self.delivered: list[tuple[str, bytes, str]] = []  # (key, id, consumer)
        self.xacked: set[tuple[str, bytes]] = set()
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def consumers_of(self, key: str) -> list[str]:
        """The consumers that read `key`: one per key when there are more keys than
        consumers, else every consumer whose number matches the key's modulo the keys."""
        i, n = self.keys.index(key), len(self.keys)
        if n >= self.consumers:
            return [f"c{i % self.consumers}"]
        return [f"c{j}" for j in range(self.consumers) if j % n == i]

    def setup(self) -> None:
        """The group of every key (made at `$` on an empty stream) and its consumers."""
        c = self.connect()
        try:
            for k in self.keys:
                c.xgroup_create(k, GROUP, "$", mkstream=True)
                for name in self.consumers_of(k):
                    c.xgroup_createconsumer(k, GROUP, name)
        finally:
            c.close()

    # --- the load ----------------------------------------------------------------------------
    def _writer(self, w: int) -> None:
        c = self.connect()
        n = 0
        try:
            while not self.stop_flag.is_set():
                k = self.keys[(n * 7 + w * 3) % len(self.keys)]
                self.sent[w] = n + 1
                try:
                    sid = c.xadd(k, {"w": str(w), "n": str(n)})
                    got = self._wait(c, k)
                except redis.RedisError as e:  # not acknowledged: allowed, but counted
                    self._error(f"writer {w}", e)
                else:
                    if got >= 1:
                        with self.lock:
                            self.acked.add((k, sid))
                            self.fields[(k, sid)] = (str(w).encode(), str(n).encode())
                    else:
                        self._error(f"writer {w}", RuntimeError(f"WAIT 1 answered {got}"))
                n += 1
        finally:
            c.close()

    @staticmethod
    def _wait(c: Any, key: str) -> int:
        """WAIT 1 on the connection the XADD went over (RedisCluster: the key's node)."""
        if isinstance(c, redis.RedisCluster):
            return c.get_redis_connection(c.get_node_from_key(key)).wait(1, 2000)
        return c.wait(1, 2000)

    def _consumer(self, i: int) -> None:
        name = f"c{i}"
        mine = [k for k in self.keys if name in self.consumers_of(k)]
        c = self.connect()
        try:
            while not self.stop_flag.is_set():
                for k in mine:
                    try:
                        got = c.xreadgroup(GROUP, name, {k: ">"}, count=50, block=self.block_ms)
                    except redis.RedisError as e:
                        self._error(f"consumer {i}", e)
                        continue
                    ids = [sid for _k, entries in got or [] for sid, _f in entries]
                    with self.lock:
                        self.delivered += [(k, sid, name) for sid in ids]
                    if ids:
                        try:
                            c.xack(k, GROUP, *ids)
                        except redis.RedisError as e:
                            self._error(f"consumer {i} XACK", e)
                        else:
                            with self.lock:
                                self.xacked.update((k, sid) for sid in ids)
        finally:
            c.close()

    def drain(self) -> None:
        """Deliver (and acknowledge) whatever the consumers had not read yet, and claim what
        was delivered without the consumer hearing of it (its reply lost), as a consumer
        does with XAUTOCLAIM: that is a second delivery."""
        c = self.connect()
        try:
            for k in self.keys:
                name = self.consumers_of(k)[0]
                while got := c.xreadgroup(GROUP, name, {k: ">"}, count=1000):
                    ids = [sid for _k, entries in got for sid, _f in entries]
                    self.delivered += [(k, sid, name) for sid in ids]
                    c.xack(k, GROUP, *ids)
                    self.xacked.update((k, sid) for sid in ids)
                pending = [p["message_id"] for p in c.xpending_range(k, GROUP, "-", "+", 10_000)]
                if pending:
                    claimed = c.xclaim(k, GROUP, name, 0, pending, justid=True)
                    self.delivered += [(k, sid, name) for sid in claimed]
                    c.xack(k, GROUP, *claimed)
                    self.xacked.update((k, sid) for sid in claimed)
        finally:
            c.close()

    # --- the checks ----------------------------------------------------------------------------
    def entries(self, c: Any) -> dict[str, list[tuple[bytes, dict[bytes, bytes]]]]:
        return {k: c.xrange(k) for k in self.keys}

    def check(self, c: Any, exactly_once: bool = True) -> dict[str, list]:
        """What the streams hold against what was acknowledged and delivered; returns the
        streams. `exactly_once`: no entry delivered twice and every entry delivered (after
        `drain`); without it (a primary was killed), redelivery is allowed."""
        have = self.entries(c)
        for k, entries in have.items():
            ids = [sid for sid, _f in entries]
            assert len(ids) == len(set(ids)), f"{k}: an ID twice"
            for sid, f in entries:
                w, n = int(f[b"w"]), int(f[b"n"])
                assert n < self.sent.get(w, 0), f"{k} {sid}: an entry no writer sent"
                if (k, sid) in self.fields:
                    assert (f[b"w"], f[b"n"]) == self.fields[(k, sid)], f"{k} {sid}: fields"
        present = {(k, sid) for k, entries in have.items() for sid, _f in entries}
        lost = self.acked - present
        assert not lost, f"{len(lost)} acknowledged entries lost, e.g. {sorted(lost)[:3]}"
        got = [(k, sid) for k, sid, _c in self.delivered]
        assert present <= set(got), "entries never delivered to the group"
        if exactly_once:
            assert len(got) == len(set(got)), "an entry was delivered twice"
            assert set(got) == present, "an entry was delivered that is not there"
        return have

    def replay(self, oracle: RawClient, c: Any, prefix: bytes = b"replay:") -> None:
        """Replay each stream on `oracle` (under `prefix`) and compare XINFO STREAM FULL."""
        have = self.entries(c)
        by_entry = {(k, sid): name for k, sid, name in self.delivered}
        for k in self.keys:
            ok = prefix + k.encode()
            oracle.call("DEL", ok)
            oracle.call("XGROUP", "CREATE", ok, GROUP, "$", "MKSTREAM")
            for name in self.consumers_of(k):
                oracle.call("XGROUP", "CREATECONSUMER", ok, GROUP, name)
            for sid, f in have[k]:
                args = [x for pair in f.items() for x in pair]
                assert oracle.call("XADD", ok, sid, *args) == ("$", sid)
            for sid, _f in have[k]:
                name = by_entry[(k, sid)]
                r = oracle.call("XREADGROUP", "GROUP", GROUP, name, "COUNT", 1, "STREAMS", ok,
                                ">")
                assert r[1][0][1][1][1][0][1][0][1] == sid, r  # [[key, [[id, fields]]]]
                if (k, sid) in self.xacked:
                    oracle.call("XACK", ok, GROUP, sid)
            with RawClient(*_addr(c, k)) as r:
                mine = _full(r, k.encode())
            theirs = _full(oracle, ok)
            assert mine == theirs, f"{k}: XINFO STREAM FULL differs from the replay"
            oracle.call("DEL", ok)


def _addr(c: Any, key: str) -> tuple[str, int]:
    """Where to ask about `key`: the router, or the key's node in a RedisCluster."""
    if isinstance(c, redis.RedisCluster):
        n = c.get_node_from_key(key)
        return n.host, n.port
    kw = c.connection_pool.connection_kwargs
    return kw["host"], kw["port"]


def _full(r: RawClient, key: bytes) -> Any:
    """XINFO STREAM key FULL COUNT 0, times masked (IDs are the same on both sides, so the
    radix-tree-nodes count is compared too)."""
    argv = [b"XINFO", b"STREAM", key, b"FULL", b"COUNT", b"0"]
    raw = r.call(*argv)
    rax = _field(raw, b"radix-tree-nodes")
    return normalize(argv, raw, SideState("x")), rax


def _field(reply: Any, name: bytes) -> Any:
    items = reply[1]
    for i in range(0, len(items), 2):
        if items[i][1] == name:
            return items[i + 1]
    raise KeyError(name)
