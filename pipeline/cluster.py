"""Where the streams live: shards found from a router or node URL, connections, and retries.

Everything here is plain Python (redis-py), used by the Spark driver and executors alike. A
`Topology` is small and picklable; connections are opened lazily in the process that uses them.

Finding the shards from `url`:
- a node of a cluster answers CLUSTER SHARDS: every shard's slots, primary and replicas;
- a router says `xshard_role:router` in INFO and lists the shard primaries it routes to
  (`xshard_primaries:`), and one of them is asked for CLUSTER SHARDS;
- a standalone node (or a router that lists no primaries) is one shard that owns every slot;
  reads and writes then simply go through it.

Failover, MOVED, CLUSTERDOWN and lost connections are retried with a fresh topology
(`Topology.call`) until `retry_timeout` runs out, so a partition survives a primary failover.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis

from node.slots import SLOTS, key_slot
from node.streamid import MAX_ID, SEQ_MAX
from node.streamid import format_id as _node_format_id
from node.streamid import parse_id as _node_parse_id

__all__ = ["MAX_ID", "SEQ_MAX", "Addr", "Shard", "Topology", "XShardError", "format_id",
           "parse_id", "parse_url", "retryable"]

Addr = tuple[str, int]
T = TypeVar("T")

# Errors after which the same request may succeed once the topology is re-read. redis-py
# turns most of them into classes of their own and strips the code from the message ("MOVED 5
# h:p" becomes MovedError("5 h:p")), so they are matched by class; the others by prefix.
_RETRY_CLASSES = (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError,
                  redis.exceptions.AskError,  # and MovedError, its subclass
                  redis.exceptions.ClusterDownError,  # and MasterDownError
                  redis.exceptions.TryAgainError, redis.exceptions.ReadOnlyError)
_RETRY_PREFIXES = ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "LOADING",
                   "MASTERDOWN", "NOREPLICAS")


class XShardError(Exception):
    """A pipeline error meant for the user (bad option, bad row, unreachable cluster)."""


def parse_url(url: str) -> tuple[Addr, str | None]:
    """`redis://[[user]:password@]host:port` -> ((host, port), password)."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise XShardError(f"option url: {url!r} is not redis://[:password@]host:port ({e})") \
            from None
    if u.scheme != "redis" or not u.hostname or port is None or u.path not in ("", "/") \
            or u.query:
        raise XShardError(f"option url: {url!r} is not redis://[:password@]host:port")
    return (u.hostname, port), unquote(u.password) if u.password else None


def retryable(e: BaseException) -> bool:
    """A failover, a slot move or a lost connection: worth a retry on a fresh topology."""
    if isinstance(e, _RETRY_CLASSES):
        return True
    return isinstance(e, redis.ResponseError) and str(e).startswith(_RETRY_PREFIXES)


@dataclass
class Shard:
    slots: list[tuple[int, int]]
    primary: Addr | None
    replicas: list[Addr] = field(default_factory=list)


@dataclass
class Topology:
    """The shards and how to reach them, found from `url` (see the module docstring)."""

    url: str
    retry_timeout: float = 60.0
    shards: list[Shard] = field(default_factory=list)
    _owner: list[int] | None = field(default=None, repr=False, compare=False)
    _conns: dict[Addr, redis.Redis] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.addr, self.password = parse_url(self.url)

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "retry_timeout": self.retry_timeout, "shards": self.shards}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__init__(**st)  # type: ignore[misc]

    # -- discovery ---------------------------------------------------------------------------
    @classmethod
    def discover(cls, url: str, retry_timeout: float = 60.0) -> Topology:
        topo = cls(url, retry_timeout)
        deadline = time.monotonic() + min(retry_timeout, 10.0)
        try:
            # A router that has just started may not have read the topology yet.
            while topo._seeds() == ([], True) and time.monotonic() < deadline:
                time.sleep(0.1)
            topo.refresh()
        except redis.AuthenticationError as e:
            raise XShardError(f"option url: {url}: {e}") from None
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise XShardError(f"option url: cannot use {url}: {e}") from None
        return topo

    def _seeds(self) -> tuple[list[Addr], bool]:
        """Nodes to ask for CLUSTER SHARDS, and whether `url` is a router (whose own CLUSTER
        SHARDS describes routers, not shards)."""
        c = self.conn(self.addr)
        if info_fields(c, "server").get("xshard_role") != "router":
            return [self.addr], False
        prim = info_fields(c, "cluster").get("xshard_primaries")
        return ([_addr(x) for x in prim.split(",")] if prim else []), True

    def refresh(self) -> None:
        """Re-read the shards from the URL's view, or from any node known so far."""
        known = [a for s in self.shards for a in ([s.primary] if s.primary else []) + s.replicas]
        last: BaseException | None = None
        try:
            seeds, router = self._seeds()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if not known:
                raise
            seeds, router, last = [], False, e
        for addr in list(dict.fromkeys(seeds + known)):
            try:
                reply = self.conn(addr).execute_command("CLUSTER", "SHARDS")
            except redis.ResponseError as e:
                if "cluster support disabled" in str(e) or "unknown" in str(e).lower():
                    # Standalone: the URL's server (a node, or a router in front of
                    # standalone nodes) serves every slot.
                    self._set([Shard([(0, SLOTS - 1)], self.addr)])
                    return
                last = e
                continue
            except (redis.ConnectionError, redis.TimeoutError) as e:
                self.drop(addr)
                last = e
                continue
            shards = _parse_shards(reply)
            if shards and all(s.primary for s in shards):
                self._set(shards)
                return
            last = redis.ResponseError("CLUSTERDOWN a shard has no primary")
        if router and not seeds:
            self._set([Shard([(0, SLOTS - 1)], self.addr)])  # read through the router
            return
        raise redis.ConnectionError(f"no node answered CLUSTER SHARDS: {last}")

    def _set(self, shards: list[Shard]) -> None:
        self.shards = shards
        owner = [-1] * SLOTS
        for i, s in enumerate(shards):
            for a, b in s.slots:
                owner[a:b + 1] = [i] * (b - a + 1)
        self._owner = owner

    # -- routing -----------------------------------------------------------------------------
    def shard_of(self, key: bytes) -> int:
        if self._owner is None:
            self._set(self.shards)
        i = self._owner[key_slot(key)]  # type: ignore[index]
        if i < 0:
            raise redis.ResponseError("CLUSTERDOWN Hash slot not served")
        return i

    def node(self, shard: int, replica: bool = False, pick: int = 0) -> Addr:
        s = self.shards[shard]
        if replica and s.replicas:
            return s.replicas[pick % len(s.replicas)]
        if s.primary is None:
            raise redis.ResponseError("CLUSTERDOWN The shard has no primary")
        return s.primary

    def conn(self, addr: Addr) -> redis.Redis:
        c = self._conns.get(addr)
        if c is None:
            c = self._conns[addr] = redis.Redis(
                host=addr[0], port=addr[1], password=self.password, protocol=2,
                socket_timeout=30, socket_connect_timeout=5)
        return c

    def drop(self, addr: Addr) -> None:
        c = self._conns.pop(addr, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for addr in list(self._conns):
            self.drop(addr)

    def call(self, fn: Callable[[], T], what: str) -> T:
        """fn() until it succeeds; after a failover-like error, refresh and try again."""
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.05
        while True:
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - classified by retryable()
                if not retryable(e) or time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
                for addr in list(self._conns):
                    self.drop(addr)
                try:
                    self.refresh()
                except redis.ConnectionError:
                    pass

    # -- helpers used by the reader, the sink and the jobs --------------------------------------
    def scan(self, pattern: bytes, replicas: bool = False) -> list[bytes]:
        """Stream keys matching a glob, from every shard (SCAN MATCH ... TYPE stream)."""
        found: set[bytes] = set()
        for i in range(len(self.shards)):
            def scan_one(i: int = i) -> set[bytes]:
                c = self.conn(self.node(i, replicas, 0))
                return set(c.scan_iter(match=pattern, count=1000, _type="stream"))
            found |= self.call(scan_one, "SCAN")
        return sorted(found)

    def last_ids(self, streams: Iterable[bytes]) -> dict[bytes, int]:
        """Each stream's last entry ID (0 when empty or missing), one pipeline per shard."""
        by_shard: dict[int, list[bytes]] = {}
        for s in streams:
            by_shard.setdefault(self.shard_of(s), []).append(s)
        out: dict[bytes, int] = {}
        for shard, keys in by_shard.items():
            def one(shard: int = shard, keys: list[bytes] = keys) -> list[Any]:
                p = self.conn(self.node(shard)).pipeline(transaction=False)
                for k in keys:
                    p.execute_command("XREVRANGE", k, "+", "-", "COUNT", 1)
                return p.execute(raise_on_error=True)
            for k, r in zip(keys, self.call(one, "XREVRANGE"), strict=True):
                out[k] = parse_id(r[0][0]) if r else 0
        return out


def info_fields(c: redis.Redis, section: str) -> dict[str, str]:
    """INFO <section> as the server wrote its fields (redis-py's INFO parser reshapes lists)."""
    conn = c.connection_pool.get_connection()
    try:
        conn.send_command("INFO", section)
        raw = conn.read_response()
    finally:
        c.connection_pool.release(conn)
    out = {}
    for line in (raw.decode() if isinstance(raw, bytes) else str(raw)).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def _addr(hostport: str) -> Addr:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def _parse_shards(reply: list[Any]) -> list[Shard]:
    shards = []
    for sh in reply:
        d = _pairs(sh)
        slots = d[b"slots"]
        ranges = [(int(slots[i]), int(slots[i + 1])) for i in range(0, len(slots), 2)]
        primary = None
        replicas = []
        for n in d[b"nodes"]:
            nd = _pairs(n)
            host = nd.get(b"endpoint") or nd.get(b"ip")
            a = (host.decode(), int(nd[b"port"]))
            if nd.get(b"health", b"online") != b"online":
                continue
            if nd[b"role"] == b"master":
                primary = a
            else:
                replicas.append(a)
        if ranges:
            shards.append(Shard(ranges, primary, replicas))
    return shards


def _pairs(x: Any) -> dict[bytes, Any]:
    if isinstance(x, dict):
        return x
    return {x[i]: x[i + 1] for i in range(0, len(x), 2)}


# -- stream IDs (node/errors.py parses and formats them for the node too) -----------------------
def parse_id(b: bytes | str) -> int:
    """'ms-seq' (or 'ms') -> one int (ms << 64 | seq), the order of stream IDs."""
    v = _node_parse_id(b.encode() if isinstance(b, str) else b, 0, strict=True)
    if v is None:
        raise ValueError(f"not a stream ID: {b!r}")
    return v


def format_id(v: int) -> str:
    return _node_format_id(v).decode()
