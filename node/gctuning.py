"""The cyclic garbage collector, set for a server that holds many objects and few cycles.

Almost nothing a node keeps forms a reference cycle: sealed stream nodes are bytes, an open
node holds lists of bytes, a PEL holds ints and small objects. The collector is still needed
for the rare cycle (a closed connection's callbacks, an exception's traceback), but each
collection scans every tracked object of its generations, and those are mostly live data:
- a bulk load (the AOF or snapshot at start-up, a replica's full sync) creates objects that
  all survive, so it runs with the collector off (its collections would find nothing to free);
- after a bulk load, `settle` collects once and freezes what is left (`gc.freeze`): later full
  collections no longer rescan the data set;
- a young generation of YOUNG allocations instead of CPython's 700 makes collections rare on
  the request path. benchmarks/bulkload_bench.py measures the collections per 1M XADDs and
  their pauses for these settings against CPython's defaults.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 20000  # allocations minus deallocations of tracked objects between collections
THRESHOLDS = (YOUNG, 50, 100)

__all__ = ["THRESHOLDS", "configure", "paused", "settle"]


def configure() -> None:
    gc.set_threshold(*THRESHOLDS)


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection while a bulk load runs (re-entrant; `settle` afterwards)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def settle() -> None:
    """After a bulk load: free the cycles it left and take the rest out of later scans."""
    gc.collect()
    gc.freeze()
