"""Stopping asyncio tasks for sure.

On Python 3.11 `asyncio.wait_for` drops a cancellation that arrives in the loop turn in which
the awaited call completes: it returns the call's result and the task runs on, cancelled in
name only (`cancelling()` stays > 0). A shutdown that cancels a task once and then awaits it
(a lease's keep-alive loop, a watch) can therefore hang until the process is killed, which
under Kubernetes means the whole termination grace period. `cancel_and_wait` cancels again
until the tasks have ended.
"""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(*tasks: asyncio.Future | None, poll: float = 0.1) -> None:
    """Cancel `tasks` (None entries are skipped) and return once every one has ended; their
    results and exceptions are discarded."""
    pending = {t for t in tasks if t is not None}
    while pending:
        for t in pending:
            t.cancel()
        done, pending = await asyncio.wait(pending, timeout=poll)
        for t in done:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                t.result()
