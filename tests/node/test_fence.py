"""The write fence's deadline (node/membership/agent.py `Agent.fresh_until`, read by
Server.check_fence): a write passes without asking `Agent.fence` only until the moment at which
`fence` itself would stop passing, and not at all once the role or the lease is gone.

The fence's behaviour on a real cluster (cut off from etcd, frozen by SIGSTOP, a transaction
queued before it) is in tests/control/test_control.py and test_partitions.py; this checks the
deadline's bookkeeping, with a lease stand-in whose keep-alive time the test sets."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from node.membership.agent import FENCE_AFTER, Agent


class _Lease:
    """What the fence reads of base/lease.py's LeaseSession."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ok_at: float) -> None:
        self.ok_at = ok_at
        self.done: asyncio.Future[str] = loop.create_future()

    def age(self) -> float:
        return float("inf") if self.done.done() else time.monotonic() - self.ok_at


def _agent(lease: _Lease) -> Agent:
    a = Agent.__new__(Agent)  # no etcd: only the fence's fields
    a.server = SimpleNamespace(role="master")
    a.fresh_until = 0.0
    a.named_primary = True
    a.session = lease  # type: ignore[assignment]
    lease.done.add_done_callback(a._lease_gone)
    return a


def test_a_passing_fence_sets_the_deadline_it_would_stop_passing_at() -> None:
    async def run() -> None:
        lease = _Lease(asyncio.get_running_loop(), time.monotonic())
        a = _agent(lease)
        assert a.fence() is None
        assert a.fresh_until == lease.ok_at + FENCE_AFTER
        # A keep-alive accepted since then moves the true deadline only later.
        lease.ok_at += 0.5
        assert a.fresh_until < lease.ok_at + FENCE_AFTER
    asyncio.run(run())


def test_a_stale_lease_refuses_and_sets_no_deadline() -> None:
    async def run() -> None:
        lease = _Lease(asyncio.get_running_loop(), time.monotonic() - FENCE_AFTER - 0.1)
        a = _agent(lease)
        assert a.fence() is not None and a.fence().startswith(b"CLUSTERDOWN")
        assert a.fresh_until == 0.0
    asyncio.run(run())


def test_losing_the_primary_role_clears_the_deadline_at_once() -> None:
    async def run() -> None:
        a = _agent(_Lease(asyncio.get_running_loop(), time.monotonic()))
        assert a.fence() is None and a.fresh_until > time.monotonic()
        a.named_primary = False
        assert a.fresh_until == 0.0
        a.server.role = "master"  # still a primary by its own role: the fence refuses
        assert a.fence() is not None
    asyncio.run(run())


def test_a_lost_lease_clears_the_deadline() -> None:
    async def run() -> None:
        lease = _Lease(asyncio.get_running_loop(), time.monotonic())
        a = _agent(lease)
        assert a.fence() is None and a.fresh_until > time.monotonic()
        lease.done.set_result("revoked")
        await asyncio.sleep(0)  # the future's callbacks run on the next loop turn
        assert a.fresh_until == 0.0
        assert a.fence() is not None
    asyncio.run(run())
