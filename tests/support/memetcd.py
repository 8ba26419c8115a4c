"""Running control-plane unit tests on the in-memory etcd (base/memstore.py): `run` an
async test body with a time limit, wait `until` a condition (never a fixed sleep), and
`in_memory`, which hands a test body a fresh MemoryEtcd and a store on it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from base.memstore import MemoryEtcd, MemoryStore

__all__ = ["in_memory", "run", "until"]


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 30))


async def until(pred: Callable[[], bool | Awaitable[bool]], what: str,
                timeout: float = 10) -> None:
    """Wait until `pred()` (a plain or an async predicate) is true, polling every 10 ms."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        ok = pred()
        if inspect.isawaitable(ok):
            ok = await ok
        if ok:
            return
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def in_memory(body: Callable[[MemoryEtcd, MemoryStore], Awaitable[None]]) -> Callable[[], None]:
    """A test from `async def test_x(etcd, store)`: a fresh in-memory etcd and a store on it
    (cluster "c") for each run."""
    def test() -> None:
        async def go() -> None:
            etcd = MemoryEtcd()
            await body(etcd, MemoryStore(etcd, "c"))
        run(go)

    # Not functools.wraps: pytest would follow __wrapped__ and look for fixtures etcd/store.
    test.__name__, test.__qualname__, test.__doc__ = body.__name__, body.__name__, body.__doc__
    test.__module__ = body.__module__
    return test
