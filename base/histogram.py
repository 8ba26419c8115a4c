"""A histogram cheap enough for the command path: fixed bounds, a list of counts, one bisect.

prometheus_client's Histogram takes a lock and walks its buckets in Python on every
observation; these are observed from the (single-threaded) event loop and read only at scrape
time, where `family` turns them into a HistogramMetricFamily (cumulative buckets, as the
exposition format wants).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client.core import HistogramMetricFamily

# Seconds, for things a client waits on (commands, fsyncs, upstream round trips).
LATENCY_BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                  0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds, for an entry's time from XADD to its consumer: milliseconds to an hour.
DELIVERY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0, 300.0, 900.0, 3600.0)


class Histogram:
    """Counts per bucket (value <= bound, the last one +Inf) and the sum, in seconds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BOUNDS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.sum += v

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        out = []
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


class MsHistogram(Histogram):
    """The same, observed in integer milliseconds (entry IDs and the command clock are ms):
    the bisect compares ints, and many observations of one batch go in one call."""

    __slots__ = ("bounds_ms",)

    def __init__(self, bounds: tuple[float, ...] = DELIVERY_BOUNDS) -> None:
        super().__init__(bounds)
        self.bounds_ms = [round(b * 1000) for b in bounds]

    def observe_ms_many(self, values_ms: Iterable[int]) -> None:
        counts, bounds, total = self.counts, self.bounds_ms, 0
        for v in values_ms:
            counts[bisect_left(bounds, v)] += 1
            total += v
        self.sum += total / 1000


def family(name: str, doc: str, labels: list[str],
           items: Iterable[tuple[list[str], Histogram]]) -> HistogramMetricFamily:
    """One histogram family from (label values, histogram) pairs."""
    f = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in items:
        f.add_metric(values, h.cumulative(), h.sum)
    return f
