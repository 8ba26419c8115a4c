"""A load on one partitioned stream through a router, and the exactly-once rules checked on
what it saw (tests/control/test_pstream_ha.py: failover, partition moves, alter).

- Writers XADD to the logical name (with a key field: a value of their own, `user`), then
  WAIT 1. A write is *acknowledged* when both answered and WAIT said 1: a router's WAIT counts
  0 for a node that died since the write, so a write re-sent elsewhere is never acknowledged.
- Consumers (10, one group) XREADGROUP COUNT 10 BLOCK 300 `>`, then XACK what they got.
- `drain` then reads what is left with `>` and XCLAIMs whatever stayed pending (entries
  delivered to a consumer that never saw them, or whose XACK failed), as XAUTOCLAIM would:
  each claim is a delivery too.
- `Watcher` polls etcd for one shard: when its primary stopped being live (`gone`) and when
  another one was named (`promoted`), each the receive time of the first read that saw it.

`Load.check` returns the violations (see its docstring for the exact rules).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from base.store import read_view
from tests.support.streamload import LoadThreads

__all__ = ["Load", "Watcher", "Write", "Delivery", "serves", "sid_key"]

GROUP = "g"
Entry = tuple[bytes, bytes, bytes]  # (id, writer, n): one entry, even if its ID is reused


def serves(client: redis.Redis, name: str) -> bool:
    """Whether the router behind `client` knows `name` as a partitioned stream (OBJECT
    ENCODING is refused on one, by that name)."""
    try:
        client.execute_command("OBJECT", "ENCODING", name)
    except redis.ResponseError as e:
        return "partitioned stream" in str(e)
    return False


def sid_key(sid: bytes) -> tuple[int, int]:
    ms, _, seq = sid.partition(b"-")
    return int(ms), int(seq)


@dataclass
class Write:
    w: int
    n: int
    sent: float
    got: float = 0.0
    id: bytes | None = None  # None: XADD failed
    acked: bool = False
    error: str = ""


@dataclass
class Delivery:
    entry: Entry
    consumer: str
    got: float  # when the reply reached the consumer
    claim: bool = False  # by XCLAIM in the drain, not `>`
    ack_ok: bool = False  # the consumer's XACK of it answered


@dataclass
class Verdict:
    lost: list = field(default_factory=list)
    phantom: list = field(default_factory=list)
    undelivered: list = field(default_factory=list)
    doubled_writes: list = field(default_factory=list)
    double: list = field(default_factory=list)
    out_of_order: list = field(default_factory=list)

    def problems(self) -> dict[str, list]:
        return {k: v[:5] for k, v in vars(self).items() if v}


class Load(LoadThreads):
    """`connect()` gives a client of the router (one per thread)."""

    def __init__(self, connect: Callable[[], redis.Redis], name: str, writers: int = 4,
                 consumers: int = 10, key_field: str | None = None) -> None:
        self.connect, self.name, self.key_field = connect, name, key_field
        self.writers, self.consumers = writers, consumers
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.writes: list[Write] = []
        self.deliveries: list[Delivery] = []
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def setup(self) -> None:
        c = self.connect()
        try:
            c.xgroup_create(self.name, GROUP, "$", mkstream=True)
        finally:
            c.close()

    def acked(self) -> list[Write]:
        return [w for w in self.writes if w.acked]

    def _writer(self, w: int) -> None:
        c = self.connect()
        n = 0
        try:
            while not self.stop_flag.is_set():
                fields = {"w": str(w), "n": str(n)}
                if self.key_field:
                    fields[self.key_field] = f"u{w}-{n % 3}"
                rec = Write(w, n, time.monotonic())
                with self.lock:
                    self.writes.append(rec)
                try:
                    rec.id = c.xadd(self.name, fields)
                    rec.got = time.monotonic()
                    rec.acked = c.wait(1, 1000) >= 1
                except redis.RedisError as e:
                    rec.error = repr(e)
                    self._error(f"writer {w}", e)
                n += 1
        finally:
            c.close()

    def _consumer(self, i: int) -> None:
        name = f"c{i}"
        c = self.connect()
        try:
            while not self.stop_flag.is_set():
                try:
                    got = c.xreadgroup(GROUP, name, {self.name: ">"}, count=10, block=300)
                except redis.RedisError as e:
                    self._error(f"consumer {i}", e)
                    continue
                self._delivered(c, name, got, claim=False)
        finally:
            c.close()

    def _delivered(self, c: redis.Redis, name: str, got: list, claim: bool) -> None:
        entries = [e for _k, es in got or [] for e in es] if not claim else got
        if not entries:
            return
        now = time.monotonic()
        ds = [Delivery((sid, f[b"w"], f[b"n"]), name, now, claim) for sid, f in entries]
        with self.lock:
            self.deliveries += ds
        try:
            c.xack(self.name, GROUP, *[d.entry[0] for d in ds])
        except redis.RedisError as e:
            self._error(f"{name} XACK", e)
        else:
            for d in ds:
                d.ack_ok = True

    def drain(self) -> None:
        """Read what is left, then claim what stayed pending (XAUTOCLAIM's job)."""
        c = self.connect()
        try:
            while got := c.xreadgroup(GROUP, "drain", {self.name: ">"}, count=500):
                self._delivered(c, "drain", got, claim=False)
            pending = [p["message_id"] for p in
                       c.xpending_range(self.name, GROUP, "-", "+", 100_000)]
            for i in range(0, len(pending), 200):
                claimed = c.xclaim(self.name, GROUP, "drain", 0, pending[i:i + 200])
                self._delivered(c, "drain", claimed, claim=True)
            assert c.xpending(self.name, GROUP)["pending"] == 0
        finally:
            c.close()

    def final(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        c = self.connect()
        try:
            return c.xrange(self.name)
        finally:
            c.close()

    def check(self, partition_of: Callable[[bytes], int], faulty: set[int] = frozenset(),
              promoted: float = 0.0) -> Verdict:
        """The violations. `faulty`: the partitions whose shard failed over, `promoted`: when
        the new primary was seen (after it, the old one can deliver nothing more).

        - lost: an acknowledged write that the final stream lacks;
        - phantom: an entry in the final stream that no writer sent;
        - undelivered: an entry of the final stream that the group never delivered;
        - doubled_writes: one write (writer, n) twice in the stream, unless it was not
          acknowledged and a copy is in a faulty partition (a write in flight when the
          connection died is re-sent: at-least-once, as for any Redis client);
        - double: an entry delivered again, unless the earlier delivery was (a) in a faulty
          partition and received before `promoted` (the old primary's delivery or XACK had
          not reached the replica: the new primary delivers it again with `>` or it stays
          pending and is claimed), or (b) one whose XACK failed, claimed in the drain;
          and a delivered entry that is not in the stream must be one the failed primary
          lost (an unacknowledged write in a faulty partition);
        - out_of_order: a consumer got entries of one partition outside their ID order
          (healthy partitions), or, with a key field, one value's entries are in more than
          one partition or not in their write order.
        """
        v = Verdict()
        final = self.final()
        have: dict[Entry, dict[bytes, bytes]] = {
            (sid, f[b"w"], f[b"n"]): f for sid, f in final}
        sent = {(str(w.w).encode(), str(w.n).encode()) for w in self.writes}
        v.phantom = [e for e in have if (e[1], e[2]) not in sent]
        for w in self.acked():
            if (w.id, str(w.w).encode(), str(w.n).encode()) not in have:
                v.lost.append(w)
        acked = {(str(w.w).encode(), str(w.n).encode()) for w in self.acked()}
        copies: dict[tuple[bytes, bytes], list[Entry]] = {}
        for e in have:
            copies.setdefault((e[1], e[2]), []).append(e)
        for wn, es in copies.items():
            if len(es) > 1 and (wn in acked or
                                not any(partition_of(e[0]) in faulty for e in es)):
                v.doubled_writes.append(es)
        by_entry: dict[Entry, list[Delivery]] = {}
        for d in sorted(self.deliveries, key=lambda d: d.got):
            by_entry.setdefault(d.entry, []).append(d)
        v.undelivered = [e for e in have if e not in by_entry]
        for e, ds in by_entry.items():
            p = partition_of(e[0])
            if e not in have and not (p in faulty and (e[1], e[2]) not in acked):
                v.double.append(("delivered, not in the stream", e, ds))
            for a, b in zip(ds, ds[1:], strict=False):
                if not ((p in faulty and a.got < promoted) or (not a.ack_ok and b.claim)):
                    v.double.append((e, a, b))
        self._order(v, partition_of, faulty, final)
        return v

    def _order(self, v: Verdict, partition_of: Callable[[bytes], int], faulty: set[int],
               final: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        last: dict[tuple[str, int], tuple[int, int]] = {}
        for d in self.deliveries:  # appended in the order each consumer got them
            p = partition_of(d.entry[0])
            if d.claim or p in faulty:
                continue
            k, sk = (d.consumer, p), sid_key(d.entry[0])
            if k in last and sk <= last[k]:
                v.out_of_order.append((d.consumer, p, d.entry[0]))
            last[k] = sk
        if not self.key_field:
            return
        kf = self.key_field.encode()
        where: dict[bytes, set[int]] = {}
        ns: dict[bytes, list[int]] = {}
        for sid, f in final:  # merged in ID order, so each partition's order
            where.setdefault(f[kf], set()).add(partition_of(sid))
            ns.setdefault(f[kf], []).append(int(f[b"n"]))
        v.out_of_order += [(u, ps) for u, ps in where.items() if len(ps) > 1]
        v.out_of_order += [(u, n) for u, n in ns.items() if n != sorted(n)]


class Watcher(threading.Thread):
    """Polls etcd every 20 ms for shard `shard`, whose primary is `old`."""

    def __init__(self, url: str, cluster: str, shard: str, old: str) -> None:
        super().__init__(daemon=True, name="watcher")
        self.url, self.cluster, self.shard, self.old = url, cluster, shard, old
        self.gone: float | None = None  # `old` no longer live, or no primary named
        self.promoted: float | None = None
        self.new: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set() and self.promoted is None:
            try:
                v = read_view(self.url, self.cluster)
            except Exception:  # noqa: BLE001 - etcd busy: read again
                time.sleep(0.02)
                continue
            now = time.monotonic()
            e = v.shards.get(self.shard)
            primary = e.value.primary if e else None
            if self.gone is None and (primary != self.old or not v.live(self.old)):
                self.gone = now
            if primary not in (None, self.old) and v.live(primary):
                self.promoted, self.new = now, primary
            time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
