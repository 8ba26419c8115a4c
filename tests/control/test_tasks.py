"""base/tasks.py: a task whose cancellation asyncio.wait_for swallowed (Python 3.11) still
stops, where cancelling once and awaiting it would wait for ever."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from base.tasks import cancel_and_wait


async def _swallowed_cancel(stop_with_helper: bool) -> tuple[bool, int]:
    """A keep-alive-like loop of wait_for calls, cancelled in the loop turn in which its
    current call completes; returns (stopped, rounds run after the cancel)."""
    loop = asyncio.get_running_loop()
    first = loop.create_future()
    rounds = 0

    async def worker() -> None:
        nonlocal rounds
        await asyncio.wait_for(first, 5)
        while True:  # the next keep-alives: each a wait_for that completes
            rounds += 1
            await asyncio.wait_for(asyncio.sleep(0.01), 5)

    task = asyncio.ensure_future(worker())
    await asyncio.sleep(0.01)
    first.set_result(1)  # the call completes ...
    task.cancel()  # ... in the same loop turn as the cancel
    if stop_with_helper:
        await asyncio.wait_for(cancel_and_wait(task), 5)
    else:
        await asyncio.wait({task}, timeout=0.5)
    stopped = task.done()
    if not stopped:
        await cancel_and_wait(task)
    return stopped, rounds


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_swallowed_cancellation_still_stops_the_task(run) -> None:  # noqa: ANN001
    stopped, rounds = run(_swallowed_cancel(stop_with_helper=False))
    if not stopped:  # this Python drops the cancel: the task ran on (the bug this is for)
        assert rounds > 1
    stopped, _ = run(_swallowed_cancel(stop_with_helper=True))
    assert stopped


def test_cancel_and_wait_takes_none_and_finished_tasks() -> None:
    async def go() -> None:
        async def boom() -> None:
            raise RuntimeError("its own error")

        done = asyncio.ensure_future(boom())
        await asyncio.sleep(0)
        await cancel_and_wait(None, done)
        await cancel_and_wait()

    asyncio.run(go())
