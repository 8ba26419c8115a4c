"""The latency monitor (LATENCY LATEST/HISTORY/RESET), as Redis's latency.c keeps it.

An event (`command`, `fast-command`, `aof-fsync-always`) gets a sample when something took
`latency-monitor-threshold` milliseconds or longer (0 turns the monitor off). Each event keeps
its last 160 samples, one per second (a second's slowest), and its all-time maximum.
LATENCY HISTOGRAM is not here: it reads the per-command histograms (node/cmdstats.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from node.resp import encode

if TYPE_CHECKING:
    from node.config import Config

TS_LEN = 160  # LATENCY_TS_LEN


class Series:
    """One event's samples: (unix time, ms) oldest first, and the largest ever seen."""

    __slots__ = ("samples", "max")

    def __init__(self) -> None:
        self.samples: list[list[int]] = []
        self.max = 0


class LatencyMonitor:
    __slots__ = ("config", "events")

    def __init__(self, config: Config) -> None:
        self.config = config
        self.events: dict[bytes, Series] = {}

    def add_if_needed(self, event: bytes, ms: int) -> None:
        """latencyAddSampleIfNeeded: a sample when the monitor is on and `ms` reaches it."""
        t = self.config.latency_monitor_threshold
        if t and ms >= t:
            self.add(event, ms)

    def add(self, event: bytes, ms: int) -> None:
        """latencyAddSample: within the same second only the largest sample stays."""
        s = self.events.get(event)
        if s is None:
            s = self.events[event] = Series()
        s.max = max(s.max, ms)
        now = int(time.time())
        if s.samples and s.samples[-1][0] == now:
            s.samples[-1][1] = max(s.samples[-1][1], ms)
            return
        s.samples.append([now, ms])
        if len(s.samples) > TS_LEN:
            del s.samples[0]

    def latest_reply(self, proto: int) -> bytes:
        """LATENCY LATEST: [event, time of the last sample, its ms, max ms] per event."""
        return encode([[name, s.samples[-1][0], s.samples[-1][1], s.max]
                       for name, s in self.events.items()], proto)

    def history_reply(self, event: bytes, proto: int) -> bytes:
        """LATENCY HISTORY event: [time, ms] per sample, oldest first (empty if unknown)."""
        s = self.events.get(event)
        return encode([] if s is None else [list(x) for x in s.samples], proto)

    def reset(self, names: list[bytes]) -> int:
        """LATENCY RESET [event ...]: forget the named events (all without names); how many
        there were."""
        if not names:
            n = len(self.events)
            self.events.clear()
            return n
        return sum(self.events.pop(name, None) is not None for name in names)
