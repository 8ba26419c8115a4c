"""The etcd store's lease keep-alives (base/store.py) against a real etcd: one LeaseKeepAlive
stream per lease, each reply read for the request just sent, and a stream that failed or was
cancelled mid-call dropped rather than read again. The fence dates a primary's freshness from
the keep-alive it sent (base/lease.py), so a late reply to an earlier request must never pass
for a newer one."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from base.store import Store

pytestmark = pytest.mark.etcd


def _run(url: str, test) -> None:  # noqa: ANN001 - an async function of the store
    async def go() -> None:
        s = Store(url, f"ka-{uuid.uuid4().hex[:8]}")
        await s.connect()
        try:
            await test(s)
        finally:
            await s.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_keepalives_share_one_stream_per_lease(etcd_url: str) -> None:
    async def test(s: Store) -> None:
        lease = await s.grant(5)
        assert 0 < await s.keepalive(lease) <= 5
        stream = s._keepalives[lease][1]
        for _ in range(5):
            assert 0 < await s.keepalive(lease) <= 5
        assert s._keepalives[lease][1] is stream  # no stream opened per keep-alive
        other = await s.grant(5)
        assert await s.keepalive(other) > 0
        assert s._keepalives[other][1] is not stream  # a lease's replies stay its own

    _run(etcd_url, test)


def test_a_revoked_lease_answers_zero(etcd_url: str) -> None:
    async def test(s: Store) -> None:
        lease = await s.grant(5)
        assert await s.keepalive(lease) > 0
        await s.revoke(lease)
        assert lease not in s._keepalives
        assert await s.keepalive(lease) == 0  # LeaseSession reads 0 as "expired"

    _run(etcd_url, test)


def test_a_call_cancelled_mid_way_drops_its_stream(etcd_url: str) -> None:
    async def test(s: Store) -> None:
        lease = await s.grant(5)
        assert await s.keepalive(lease) > 0
        stream = s._keepalives[lease][1]
        task = asyncio.ensure_future(s.keepalive(lease))
        await asyncio.sleep(0)  # the request may be written; its reply is never read
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lease not in s._keepalives and stream.cancelled()
        # The next keep-alive opens a new stream and reads its own reply, then goes on.
        assert await s.keepalive(lease) > 0
        assert s._keepalives[lease][1] is not stream
        assert await s.keepalive(lease) > 0

    _run(etcd_url, test)
