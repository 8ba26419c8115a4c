"""Run `xshard node` with its garbage collections recorded (benchmarks/bulkload_bench.py).

    python -m benchmarks.gcprobe OUT.json [node arguments ...]

Every collection's generation, monotonic end time and pause go to OUT.json when the node
exits (SIGTERM). `XSHARD_GCPROBE_THRESHOLDS=700,10,10` replaces the node's thresholds
(node/gctuning.py) to compare them with CPython's defaults; the freeze after loading stays.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time

THRESHOLDS_ENV = "XSHARD_GCPROBE_THRESHOLDS"


def main() -> int:
    out = sys.argv[1]
    events: list[tuple[int, float, float]] = []  # (generation, end time, pause seconds)
    started = [0.0]

    def observe(phase: str, info: dict) -> None:
        now = time.monotonic()
        if phase == "start":
            started[0] = now
        else:
            events.append((info["generation"], now, now - started[0]))

    gc.callbacks.append(observe)
    override = os.environ.get(THRESHOLDS_ENV)
    if override:
        from node import gctuning

        gctuning.THRESHOLDS = tuple(int(x) for x in override.split(","))  # type: ignore[assignment]

    def dump() -> None:
        with open(out, "w") as f:
            json.dump({"events": events, "thresholds": gc.get_threshold()}, f)

    atexit.register(dump)
    from node.main import run

    return run(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
