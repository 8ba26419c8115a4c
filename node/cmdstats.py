"""Per-command counters and latency histograms: INFO commandstats, latencystats, errorstats.

Each command seen gets one `CallStats`, made once and updated in place by the dispatch path
(node/server.py Server.call): `calls`, `usec`, `rejected`, `failed` (C fields compiled, so
counting a call makes no object for them) and `hist`, a list of 64 counts:

`hist[j]` counts the calls whose run time in nanoseconds has bit length j: the hot path does one
`st.hist[ns.bit_length()] += 1` (no shift). Read, they form Redis's buckets:
bucket 0 is b0..b10 (under 1024 ns), bucket i > 0 is b(10+i) (under 1024 * 2**i ns), so the
bounds are 1.024, 2.048, 4.096 ... us: what Redis's LATENCY HISTOGRAM reports (its HdrHistogram
iterated from 1024 ns in powers of two: 1, 2, 4, 8, 16, 32, 65, 131 ... us). Redis keeps a
finer HdrHistogram per command; a factor of two is enough for p50/p99/p99.9 (interpolated
inside a bucket) and for a Prometheus histogram whose buckets never change.

Read API (for INFO and the metrics endpoint; nothing else reads the lists):
- `CommandStats.iter_histograms()` yields `(command, bounds, cumulative, sum_seconds)`: the
  upper bounds in seconds (`BOUNDS`, 1.024 us doubling to ~34 s, then +Inf), the cumulative count
  of calls at or below each bound (the last one is every timed call), and the summed run time.
- `CommandStats.percentiles(command, (50.0, 99.0, 99.9))` gives microseconds, as
  latencystats prints them.
- `CommandStats.calls` maps a command name to its `CallStats`; a subcommand has its own
  ('config|get'), as in Redis, and a container's bare name has none.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence

from node import command_table

NBUCKETS = 64
# The exported buckets: 1.024 us ... 1024 * 2**25 ns (about 34.4 s), then +Inf. Slower calls
# only land in +Inf; the bounds stay fixed so that a Prometheus series never changes buckets.
MAX_EXP = 25
RATE_SAMPLES = 16  # STATS_METRIC_SAMPLES
BOUNDS: tuple[float, ...] = tuple((1024 << i) / 1e9 for i in range(MAX_EXP + 1)) + (float("inf"),)


def slot(usec: int) -> int:
    """The histogram slot of a time known in whole microseconds (the hot path has ns)."""
    return (usec * 1000).bit_length()


def buckets(st: CallStats) -> list[int]:
    """A command's calls per Redis bucket (0: under 1024 ns, i: under 1024 * 2**i ns)."""
    h = st.hist
    return [sum(h[:11]), *h[11:]]


def bound_usec(i: int) -> int:
    """Bucket i's upper bound in whole microseconds, as LATENCY HISTOGRAM names it."""
    return (1024 << i) // 1000


class CallStats:
    """One command's counters: INFO commandstats' calls, usec, rejected_calls and
    failed_calls, and its run-time histogram (`hist`, see the module docstring)."""

    __slots__ = ("calls", "usec", "rejected", "failed", "hist")

    def __init__(self) -> None:
        self.calls = 0
        self.usec = 0
        self.rejected = 0
        self.failed = 0
        self.hist: list[int] = [0] * NBUCKETS


class CommandStats:
    """INFO commandstats / latencystats / errorstats counters and the stats totals."""

    __slots__ = ("calls", "errors", "total_commands", "total_error_replies", "total_connections",
                 "rejected_connections", "net_input_bytes", "net_output_bytes",
                 "net_repl_input_bytes", "net_repl_output_bytes", "qbuf_disconnections",
                 "obuf_disconnections", "_samples")

    def __init__(self) -> None:
        self.calls: dict[bytes, CallStats] = {}  # command name -> its counters
        self.errors: dict[bytes, int] = {}  # error code (ERR, WRONGTYPE ...) -> replies
        self.total_commands = 0
        self.total_error_replies = 0
        self.total_connections = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.net_repl_input_bytes = 0  # replication links, apart from clients' bytes as in Redis
        self.net_repl_output_bytes = 0
        self.qbuf_disconnections = 0  # clients closed over client-query-buffer-limit
        self.obuf_disconnections = 0  # clients closed over client-output-buffer-limit
        # (monotonic time, commands, in, out, repl in, repl out), one per cron tick
        self._samples: deque[tuple[float, int, int, int, int, int]] = deque(maxlen=RATE_SAMPLES)

    def error(self, message: bytes) -> None:
        """Count one error reply under its code (the first word), as errorstats does."""
        self.total_error_replies += 1
        code = message.split(b" ", 1)[0]
        self.errors[code] = self.errors.get(code, 0) + 1

    def entry(self, name: bytes) -> CallStats:
        """The counters of command `name` (lower case, `container|sub` not split), made once."""
        e = self.calls.get(name)
        if e is None:
            e = self.calls[name] = CallStats()
        return e

    def entry_argv(self, name: bytes, argv: list[bytes]) -> CallStats | None:
        """The counters `argv` counts under: a subcommand's own ('config|get'), as Redis keeps
        them. The dispatch path calls this only when `calls.get(name)` missed, which is always
        the case for a container, so plain commands pay nothing for it. None for an unknown
        subcommand."""
        key = command_table.stat_name(argv, name)
        return None if key is None else self.entry(key)

    def timed(self, argv: list[bytes], usec: int) -> CallStats | None:
        """Count one call of `argv` that ran for `usec` (paths off the hot one use this)."""
        st = self.entry_argv(argv[0].lower(), argv)
        if st is None:
            return None
        st.calls += 1
        st.usec += usec
        st.hist[slot(usec)] += 1
        self.total_commands += 1
        return st

    def timed_ns(self, name: bytes, ns: int) -> None:
        """Count one call of the plain command (or `container|sub`) `name` that ran for `ns`,
        into the same histogram slot Server.call gives it (a replica's directly applied
        effects, node/effects.py)."""
        st = self.entry(name)
        st.calls += 1
        st.usec += ns // 1000
        st.hist[ns.bit_length()] += 1
        self.total_commands += 1

    def timed_many(self, name: bytes, n: int, usec: int) -> None:
        """Count n calls of the plain command `name` that ran together in `usec` (a batch of
        applied effects, node/effects.py): each at their mean time."""
        if n <= 0:
            return
        st = self.entry(name)
        st.calls += n
        st.usec += usec
        st.hist[slot(usec // n)] += n
        self.total_commands += n

    def reset(self) -> None:
        """CONFIG RESETSTAT."""
        self.calls.clear()
        self.errors.clear()
        self.total_commands = self.total_error_replies = self.total_connections = 0
        self.rejected_connections = self.net_input_bytes = self.net_output_bytes = 0
        self.net_repl_input_bytes = self.net_repl_output_bytes = 0
        self.qbuf_disconnections = self.obuf_disconnections = 0
        self._samples.clear()

    def sample(self) -> None:
        """One sample of the totals, from the server's cron (Redis trackInstantaneousMetric)."""
        self._samples.append((time.monotonic(), self.total_commands, self.net_input_bytes,
                              self.net_output_bytes, self.net_repl_input_bytes,
                              self.net_repl_output_bytes))

    def rates(self) -> tuple[float, ...]:
        """Per second over the last samples (about 1.6 s at hz 10): commands, then KB in,
        out, replication in and out, as INFO's instantaneous_* fields."""
        if len(self._samples) < 2:
            return (0.0,) * 5
        first, last = self._samples[0], self._samples[-1]
        dt = last[0] - first[0] or 1.0
        ops = (last[1] - first[1]) / dt
        return (ops, *((last[i] - first[i]) / dt / 1024 for i in range(2, 6)))

    # --- the read API -------------------------------------------------------------------------
    def iter_histograms(self) -> Iterator[tuple[str, tuple[float, ...], list[int], float]]:
        """(command, upper bounds in seconds, cumulative counts, sum of run times in seconds)
        for every command that ran at least once; see the module docstring."""
        for name, st in sorted(self.calls.items()):
            h = buckets(st)
            if not any(h):
                continue
            cum, acc = [], 0
            for i in range(MAX_EXP + 1):
                acc += h[i]
                cum.append(acc)
            cum.append(acc + sum(h[MAX_EXP + 1:]))
            yield name.decode(errors="replace"), BOUNDS, cum, st.usec / 1e6

    def percentiles(self, name: bytes, ps: Sequence[float]) -> list[float]:
        """The `ps` percentiles of `name`'s run time in microseconds, interpolated linearly
        inside a bucket ([1.024 * 2**(i-1), 1.024 * 2**i) us); empty when it never ran."""
        st = self.calls.get(name)
        if st is None:
            return []
        h = buckets(st)
        total = sum(h)
        if not total:
            return []
        out = []
        for p in ps:
            rank = max(1.0, total * p / 100.0)  # the rank-th smallest duration
            acc = 0
            for i, n in enumerate(h):
                if n and acc + n >= rank:
                    lo = 0.0 if i == 0 else 1.024 * (1 << (i - 1))
                    hi = 1.024 * (1 << i)
                    out.append(lo + (hi - lo) * (rank - acc) / n)
                    break
                acc += n
        return out
