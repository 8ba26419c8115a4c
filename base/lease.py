"""One lease session, like etcd's concurrency.Session: what a node, the controller and a router
hold their keys on.

A session grants a lease, keeps it alive in the background and resolves `done` once the lease
is lost, with the reason. Lost means: etcd answered a keep-alive with TTL 0 (the lease expired
or was revoked by someone else), or no keep-alive has been accepted for a whole TTL, after
which etcd has (or is about to have) dropped it. The holder then stops acting on it and opens a
new session; nothing tries to revive a lost lease.

`age()` is the time since the last keep-alive that etcd accepted was *sent*: etcd keeps the
lease at least TTL after that moment, which is what the node's write fence relies on
(node/membership/agent.py).

One timeout policy for every holder (the control-plane contract): TTL 3 s, a keep-alive every
second, each keep-alive given a second to answer. A holder that dies is forgotten by etcd in
at most 3 s; one network hiccup of under 2 s costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from prometheus_client.core import Metric

from base import histogram
from base.histogram import Histogram
from base.store import BaseStore
from base.tasks import cancel_and_wait

log = logging.getLogger("xshard.lease")
# Round trips of accepted keep-alives, every session of the process: its etcd latency as seen
# by the one call each lease holder makes every second (xshard_etcd_rtt_seconds).
KEEPALIVE_RTT = Histogram()


@dataclass(frozen=True)
class LeasePolicy:
    ttl: int = 3  # seconds etcd keeps a lease without a keep-alive
    interval: float = 1.0  # seconds between keep-alives
    rpc_timeout: float = 1.0  # a keep-alive (or grant, revoke) slower than this has failed

    @property
    def fence_after(self) -> float:
        """A primary refuses writes once its last accepted keep-alive was sent this long ago
        (node/membership/agent.py): half the TTL, so well before etcd can let its lease expire."""
        return self.ttl / 2

    @property
    def retry(self) -> float:
        """Pause after a failed keep-alive before the next try."""
        return self.interval / 10


POLICY = LeasePolicy()


class LeaseLost(Exception):
    """Raised by `check()` once the session's lease is gone."""


class LeaseSession:
    """A granted lease and its keep-alive task. Open with `await LeaseSession.open(store)`."""

    def __init__(self, store: BaseStore, policy: LeasePolicy = POLICY, name: str = "") -> None:
        self.store = store
        self.policy = policy
        self.name = name or "lease"
        self.id = 0
        self.ok_at = -1e9  # monotonic send time of the grant or last accepted keep-alive
        self.done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task | None = None

    @classmethod
    async def open(cls, store: BaseStore, policy: LeasePolicy = POLICY,
                   name: str = "") -> LeaseSession:
        """Grant a lease and start keeping it alive; raises what the grant raised."""
        s = cls(store, policy, name)
        sent = time.monotonic()
        s.id = await asyncio.wait_for(store.grant(policy.ttl), policy.rpc_timeout * 2)
        s.ok_at = sent
        s._task = asyncio.ensure_future(s._keepalive())
        log.info("%s: lease %x granted (TTL %ds)", s.name, s.id, policy.ttl)
        return s

    def age(self) -> float:
        """Seconds since the last accepted keep-alive was sent (infinite once lost)."""
        return float("inf") if self.done.done() else time.monotonic() - self.ok_at

    @property
    def alive(self) -> bool:
        return not self.done.done()

    def check(self) -> None:
        """Raise LeaseLost (with the reason) if the lease is gone."""
        if self.done.done():
            raise LeaseLost(f"{self.name}: lease {self.id:x} lost ({self.done.result()})")

    async def wait(self) -> str:
        """Wait until the lease is lost; returns why. Cancelling the waiter leaves the
        session running."""
        return await asyncio.shield(self.done)

    def _lose(self, why: str) -> None:
        if not self.done.done():
            self.done.set_result(why)

    async def _keepalive(self) -> None:
        p = self.policy
        failures = 0
        while True:
            await asyncio.sleep(max(0.0, p.interval - (time.monotonic() - self.ok_at)))
            sent = time.monotonic()
            try:
                try:
                    ttl = await asyncio.wait_for(self.store.keepalive(self.id), p.rpc_timeout)
                except asyncio.CancelledError:
                    if asyncio.current_task().cancelling():
                        raise  # we are being stopped
                    raise ConnectionAbortedError("keep-alive call cancelled") from None
            except Exception as e:  # noqa: BLE001 - etcd away or slow: retry until the TTL
                failures += 1
                if time.monotonic() - self.ok_at >= p.ttl:
                    log.warning("%s: no keep-alive of lease %x accepted for %ds (%s): lost",
                                self.name, self.id, p.ttl, type(e).__name__)
                    self._lose(f"no keep-alive accepted for {p.ttl}s: {type(e).__name__}")
                    return
                if failures == 1:
                    log.warning("%s: keep-alive of lease %x failed (%s); retrying", self.name,
                                self.id, type(e).__name__)
                await asyncio.sleep(p.retry)
                continue
            if ttl <= 0:
                log.warning("%s: lease %x expired", self.name, self.id)
                self._lose("expired")
                return
            if failures:
                log.info("%s: keep-alive of lease %x accepted again", self.name, self.id)
                failures = 0
            self.ok_at = sent
            KEEPALIVE_RTT.observe(time.monotonic() - sent)

    async def close(self, revoke: bool = True) -> None:
        """Stop keeping the lease alive and (by default) revoke it, so that what it holds
        goes now rather than after the TTL."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        was_alive = self.alive
        self._lose("closed")
        if revoke and was_alive and self.id:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.store.revoke(self.id), self.policy.rpc_timeout)


def etcd_rtt() -> Metric:
    return histogram.family(
        "xshard_etcd_rtt_seconds", "Round trip of each accepted etcd lease keep-alive (one a "
        "second per lease holder): this process's etcd latency.", [], [([], KEEPALIVE_RTT)])
