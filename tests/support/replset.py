"""A primary and replicas behind TcpProxies, for the replication tests (tests/node/).

Every replica reaches its primary through `tests/support/tcpproxy.py`, so a test can cut a
link and restore it. The `rset(n)` factory fixture (tests/node/conftest.py) makes them;
`info`, `sync_counts` and `states_equal` read what the tests assert on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from pipeline.cluster import info_fields
from tests.conftest import NodeHandle
from tests.support.persist import diff_states, dump_state
from tests.support.procs import wait_until
from tests.support.rawresp import RawClient
from tests.support.tcpproxy import TcpProxy

__all__ = ["SYNC_TIMEOUT", "Member", "ReplicaSet", "info", "states_equal", "sync_counts"]

SYNC_TIMEOUT = 20.0


def info(c: redis.Redis, section: str = "replication") -> dict[str, str]:
    """INFO as text fields (redis-py's INFO parser would reshape slaveN lines)."""
    return info_fields(c, section)


def sync_counts(c: redis.Redis) -> tuple[int, int]:
    st = info(c, "stats")
    return int(st["sync_full"]), int(st["sync_partial_ok"])


def _readonly_on_connect(conn: redis.connection.AbstractConnection) -> None:
    conn.on_connect()
    conn.send_command("READONLY")
    conn.read_response()


@dataclass
class Member:
    node: NodeHandle
    proxy: TcpProxy | None = None  # the replica's way to its primary
    _client: redis.Redis | None = field(default=None, repr=False)
    readonly: bool = False  # a cluster node: every connection sends READONLY (reads on replicas)

    @property
    def c(self) -> redis.Redis:
        if self._client is None:
            self._client = self.node.client(
                redis_connect_func=_readonly_on_connect if self.readonly else None)
        return self._client

    def offset(self) -> int:
        f = info(self.c)
        return int(f.get("slave_repl_offset") or f["master_repl_offset"])

    def link_up(self) -> bool:
        return info(self.c).get("master_link_status") == "up"


class ReplicaSet:
    """A primary and replicas through proxies; `synced()` waits until offsets agree."""

    def __init__(self, factory: Callable[..., NodeHandle], n: int, primary_args: tuple = (),
                 replica_args: tuple = ()) -> None:
        self.factory = factory
        self.primary = Member(factory("--repl-diskless-sync", "no", *primary_args,
                                      name="primary"))
        self.replicas: list[Member] = []
        self.proxies: list[TcpProxy] = []
        for i in range(n):
            self.add_replica(*replica_args, name=f"replica{i + 1}")

    def add_replica(self, *args: str, name: str = "replica") -> Member:
        proxy = TcpProxy(self.primary.node.port).start()
        self.proxies.append(proxy)
        node = self.factory("--replicaof", f"127.0.0.1 {proxy.port}", *args, name=name)
        m = Member(node, proxy)
        self.replicas.append(m)
        return m

    def synced(self, members: list[Member] | None = None, timeout: float = SYNC_TIMEOUT,
               primary: Member | None = None) -> None:
        p = primary or self.primary
        members = members if members is not None else self.replicas

        def ok() -> bool:
            target = int(info(p.c)["master_repl_offset"])
            return all(m.link_up() and m.offset() >= target for m in members)

        wait_until(ok, timeout, what="replicas caught up with the primary")

    def close(self) -> None:
        for p in self.proxies:
            p.stop()


def _state(m: Member) -> tuple[dict, dict]:
    """(dump_state of the stream keys: XINFO STREAM FULL with clocks masked, groups, PELs...;
    the other keys' types and values)."""
    rc = RawClient("127.0.0.1", m.node.port)
    try:
        if m.readonly:
            rc.call("READONLY")
        keys = sorted(k for k in m.c.keys("*"))
        streams = [k for k in keys if m.c.type(k) == b"stream"]
        others = {}
        for k in keys:
            t = m.c.type(k)
            if t == b"string":
                others[k] = m.c.get(k)
            elif t == b"list":
                others[k] = m.c.lrange(k, 0, -1)
            elif t == b"set":
                others[k] = sorted(m.c.smembers(k))
        return dump_state(rc, streams), others
    finally:
        rc.close()


def states_equal(members: list[Member]) -> None:
    dumps = [_state(m) for m in members]
    for i, (d, others) in enumerate(dumps[1:], 1):
        diffs = diff_states(dumps[0][0], d, ttl_slack_ms=5000)
        assert not diffs, f"member {i} differs from the primary:\n" + "\n".join(diffs[:10])
        assert others == dumps[0][1], f"member {i}: non-stream keys differ"


