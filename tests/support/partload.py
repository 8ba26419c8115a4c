"""The load a partition round runs, and the invariants checked on what it saw.

- `Writer`: XADD then WAIT 1 on one connection, in a loop, to a fixed node (a client that
  keeps talking to the node it knows, as one still connected to a cut-off primary does) or to
  whatever `target()` names. Every reply is kept with its send and receive times.
- `Consumer`: XREADGROUP ... > then WAIT 1 (a delivery WAIT acknowledged is *committed*: the
  replica knows it), then XACK; after an error it first re-reads its own pending entries (ID 0)
  and asks XPENDING how often each was delivered.
- `Watcher`: reads the shard's record from etcd every 20 ms, so the test knows when the
  promotion happened: after the send time of the last read that still named the old primary
  (`promoted_after`), before the receive time of the first that named another
  (`promoted_by`).

`check(...)` returns the violations:
- lost: a write WAIT acknowledged that the final stream lacks;
- fenced_accepted: a write the old primary acknowledged with a reply received after
  `promoted_after` (it may have been accepted after the new primary took over); the
  etcd-cut case (partcases.py) adds any it acknowledged after it first refused one;
- double: an entry delivered twice through `>` when the first delivery was committed, or
  re-read from the PEL with a delivery count below 2.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from base.store import read_view

__all__ = ["Consumer", "Watcher", "Write", "Writer", "check"]

Target = Callable[[], tuple[str, int]]


@dataclass
class Write:
    seq: int
    sent: float
    got: float
    addr: tuple[str, int]
    id: bytes | None = None  # the ID the node answered, None on an error
    error: str = ""
    acks: int = -1  # WAIT's answer (-1: not asked, or it failed)


class _Loop(threading.Thread):
    def __init__(self, target: Target, stream: str, name: str, timeout: float = 3.0) -> None:
        super().__init__(daemon=True, name=name)
        self.target = target
        self.stream = stream
        self.timeout = timeout
        self.stopping = threading.Event()
        self.client: redis.Redis | None = None
        self.addr: tuple[str, int] = ("", 0)

    def connect(self) -> redis.Redis:
        if self.client is None:
            self.addr = self.target()
            self.client = redis.Redis(*self.addr, socket_timeout=self.timeout,
                                      socket_connect_timeout=1)
        return self.client

    def drop(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = None

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.drop()


class Writer(_Loop):
    def __init__(self, target: Target, stream: str, wait_ms: int = 300,
                 pause: float = 0.01, timeout: float = 3.0) -> None:
        super().__init__(target, stream, f"writer-{stream}", timeout)
        self.wait_ms = wait_ms
        self.pause = pause
        self.writes: list[Write] = []

    def run(self) -> None:
        seq = 0
        while not self.stopping.is_set():
            seq += 1
            sent = time.monotonic()
            try:
                c = self.connect()
                w = Write(seq, sent, 0.0, self.addr)
                w.id = c.xadd(self.stream, {"seq": seq})
                w.got = time.monotonic()
                self.writes.append(w)
                w.acks = int(c.wait(1, self.wait_ms))
            except redis.RedisError as e:
                if not self.writes or self.writes[-1].seq != seq:
                    self.writes.append(Write(seq, sent, time.monotonic(), self.addr,
                                             error=str(e)[:80]))
                self.drop()  # the next write asks target() again (a new primary)
                time.sleep(0.05)
            time.sleep(self.pause)

    def acked(self) -> list[Write]:
        return [w for w in self.writes if w.id is not None and w.acks >= 1]

    def accepted(self) -> list[Write]:
        return [w for w in self.writes if w.id is not None]


@dataclass
class Delivery:
    id: bytes
    t: float
    new: bool  # through ">" (else re-read from the PEL)
    committed: bool = False
    count: int = 0  # XPENDING's delivery count, for PEL re-reads


class Consumer(_Loop):
    def __init__(self, target: Target, stream: str, group: str = "g",
                 name: str = "c1") -> None:
        super().__init__(target, stream, f"consumer-{stream}-{name}")
        self.group = group
        self.cname = name
        self.deliveries: list[Delivery] = []
        self.errors = 0
        self.recheck = False

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                c = self.connect()
                if self.recheck:
                    self._reread(c)
                    self.recheck = False
                got = c.xreadgroup(self.group, self.cname, {self.stream: ">"}, count=20,
                                   block=100)
                ids = [eid for _s, entries in got for eid, _f in entries]
                if not ids:
                    continue
                now = time.monotonic()
                ds = [Delivery(i, now, True) for i in ids]
                self.deliveries += ds
                if int(c.wait(1, 300)) >= 1:
                    for d in ds:
                        d.committed = True
                c.xack(self.stream, self.group, *ids)
            except redis.RedisError:
                self.errors += 1
                self.drop()
                self.recheck = True
                time.sleep(0.05)

    def _reread(self, c: redis.Redis) -> None:
        got = c.xreadgroup(self.group, self.cname, {self.stream: "0"}, count=1000)
        ids = [eid for _s, entries in got for eid, _f in entries]
        if not ids:
            return
        counts = {p["message_id"]: p["times_delivered"]
                  for p in c.xpending_range(self.stream, self.group, "-", "+", 1000,
                                            self.cname)}
        now = time.monotonic()
        self.deliveries += [Delivery(i, now, False, count=counts.get(i, 0)) for i in ids]
        c.xack(self.stream, self.group, *ids)


class Watcher(threading.Thread):
    """Polls etcd for the shard's primary (see the module docstring)."""

    def __init__(self, url: str, cluster: str, shard: str, old: str) -> None:
        super().__init__(daemon=True, name="watcher")
        self.url, self.cluster, self.shard, self.old = url, cluster, shard, old
        self.promoted_after = 0.0
        self.promoted_by: float | None = None
        self.new: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set() and self.promoted_by is None:
            sent = time.monotonic()
            try:
                v = read_view(self.url, self.cluster)
            except Exception:  # noqa: BLE001 - etcd busy: read again
                time.sleep(0.02)
                continue
            e = v.shards.get(self.shard)
            primary = e.value.primary if e else None
            if primary == self.old:
                self.promoted_after = sent
            elif primary is not None:
                self.promoted_by = time.monotonic()
                self.new = primary
            time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


@dataclass
class Verdict:
    writes: int = 0
    acked: int = 0
    lost: list[bytes] = field(default_factory=list)
    fenced_accepted: list[bytes] = field(default_factory=list)
    double: list[bytes] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.fenced_accepted or self.double)


def check(final: set[bytes], writers: list[Writer], consumers: list[Consumer],
          old_addr: tuple[str, int] | None = None,
          promoted_after: float | None = None) -> Verdict:
    """The violations in what the load saw; `final` is the stream's IDs at the end."""
    v = Verdict()
    for w in writers:
        v.writes += len(w.accepted())
        acked = w.acked()
        v.acked += len(acked)
        v.lost += [x.id for x in acked if x.id not in final]  # type: ignore[misc]
        if old_addr is not None and promoted_after is not None:
            v.fenced_accepted += [x.id for x in w.accepted()  # type: ignore[misc]
                                  if x.addr == old_addr and x.got >= promoted_after]
    for c in consumers:
        committed: set[bytes] = set()
        for d in c.deliveries:
            if d.new:
                if d.id in committed:
                    v.double.append(d.id)
                if d.committed:
                    committed.add(d.id)
            elif d.count < 2:
                v.double.append(d.id)
    return v
