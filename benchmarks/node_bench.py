"""Stream node vs redis-server, side by side, one command (issue 2 §9).

    python benchmarks/node_bench.py [--quick] [--only xadd,xrange,...] [--entries N]
                                    [--against node|redis] [--output PATH]

For every measurement a fresh redis-server 7.0 (`--save '' --appendonly no`) and a fresh
server under test (our node, or a second redis-server with `--against redis` for a
redis-vs-redis baseline that shows the noise of this machine) are started on 127.0.0.1. The
measurement runs against redis-server first and then against the other server, both are
killed, and the next measurement starts. The result is printed as a ratio table and written
to benchmarks/RESULTS.md (or --output) with the command line and the date.

CPU placement: on a machine with >= 2 cores the servers are pinned to CPU 0 and every load
generator (redis-benchmark, the Python consumers, the PING probe) to CPU 1, so a server
never competes with its own load. The table reports how much of its core the server used
during each measurement: a server near 100% was the bottleneck; a server well below it was
waiting on the load generator, and the throughput figure is then a lower bound.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hiredis  # noqa: E402

from benchmarks import harness  # noqa: E402

KEY = "s"
# 5 fields x 10-byte values, the entry shape of every measurement.
FIELDS = [tok for i in range(1, 6) for tok in (f"f{i}", f"value{i:05d}")]
assert all(len(FIELDS[i]) == 10 for i in range(1, 10, 2))
XADD_ARGS = ["XADD", KEY, "*", *FIELDS]

MEASUREMENTS = ["xadd", "xadd-p16", "xrange", "xreadgroup", "memory", "stall"]


@dataclass
class Sizes:
    """Request counts per measurement; --quick divides all of them by 20."""

    xadd: int = 200_000
    xadd_p16: int = 1_000_000
    xrange_prefill: int = 10_000
    xrange: int = 50_000
    xreadgroup_prefill: int = 500_000
    xreadgroup_seconds: float = 30.0
    memory: int = 1_000_000
    stall: int = 5_000_000

    def scaled(self, div: int) -> Sizes:
        return Sizes(*(max(100, v // div) if isinstance(v, int) else max(3.0, v / div)
                       for v in (self.xadd, self.xadd_p16, self.xrange_prefill, self.xrange,
                                 self.xreadgroup_prefill, self.xreadgroup_seconds,
                                 self.memory, self.stall)))


@dataclass
class Ctx:
    server_cpu: int | None
    load_cpu: int | None
    sizes: Sizes
    procs: int
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Load helpers


def distinct_xadds(first: int, k: int) -> bytes:
    """k pipelined XADDs whose 10-byte values are all different ("v" + 9 digits).

    Used where memory is measured: identical values would reward a server that dedups or
    compresses them, which real data does not allow. The "v" keeps redis-server from storing
    a value as an integer.
    """
    names = [f"f{j}".encode() for j in range(1, 6)]
    out = []
    for i in range(first, first + k):
        argv = [b"XADD", b"s", b"*"]
        for j, name in enumerate(names):
            argv += (name, b"v%09d" % (i * 5 + j))
        out.append(hiredis.pack_command(tuple(argv)))
    return b"".join(out)


def load_entries(port: int, n: int, batch: int = 100, distinct: bool = False) -> None:
    """Append exactly n entries with pipelined XADD on one connection (checks every reply)."""
    cmd = hiredis.pack_command(tuple(XADD_ARGS))
    with harness.Conn(port, timeout=120) as c:
        left = n
        while left:
            k = min(batch, left)
            c.send(distinct_xadds(n - left, k) if distinct else cmd * k)
            for r in c.read_replies(k):
                if isinstance(r, hiredis.ReplyError):
                    raise RuntimeError(f"XADD failed: {r}")
            left -= k


def xlen(port: int) -> int:
    with harness.Conn(port) as c:
        return int(c.call("XLEN", KEY))


def expect_xlen(srv: harness.ServerProc, n: int, what: str) -> None:
    """redis-benchmark counts error replies as requests, so check that the writes happened."""
    got = xlen(srv.port)
    if got != n:
        raise RuntimeError(f"{what} on {srv.label}: XLEN is {got}, expected {n} "
                           f"(error replies?)")


class CpuMeter:
    """Fraction of one core a server used between start() and stop()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> CpuMeter:
        self.c0, self.t0 = harness.cpu_seconds(self.pid), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.pct = 100.0 * (harness.cpu_seconds(self.pid) - self.c0) / max(self.wall, 1e-9)


# --------------------------------------------------------------------------------------------
# Measurements. Each takes one server and returns {metric name: (value, server CPU % or nan)}.


def m_xadd(srv: harness.ServerProc, ctx: Ctx) -> dict[str, tuple[float, float]]:
    n = ctx.sizes.xadd
    with CpuMeter(srv.pid) as cpu:
        ops = harness.redis_benchmark(srv.port, ["-c", "50", "-n", str(n), *XADD_ARGS],
                              timeout=max(60, n / 500), cpu=ctx.load_cpu)
    expect_xlen(srv, n, "XADD")
    return {"ops/s": (ops, cpu.pct)}


def m_xadd_p16(srv: harness.ServerProc, ctx: Ctx) -> dict[str, tuple[float, float]]:
    n = ctx.sizes.xadd_p16
    with CpuMeter(srv.pid) as cpu:
        ops = harness.redis_benchmark(srv.port, ["-c", "50", "-P", "16", "-n", str(n), *XADD_ARGS],
                              timeout=max(60, n / 1000), cpu=ctx.load_cpu)
    got = xlen(srv.port)
    # With -P, redis-benchmark may issue a few more requests than -n; never fewer.
    if got < n:
        raise RuntimeError(f"XADD -P 16 on {srv.label}: XLEN {got} < {n}")
    return {"ops/s": (ops, cpu.pct)}


def m_xrange(srv: harness.ServerProc, ctx: Ctx) -> dict[str, tuple[float, float]]:
    load_entries(srv.port, ctx.sizes.xrange_prefill)
    with harness.Conn(srv.port) as c:
        got = c.call("XRANGE", KEY, "-", "+", "COUNT", "100")
        if len(got) != 100 or len(got[0][1]) != 10:
            raise RuntimeError(f"XRANGE on {srv.label} returned an unexpected reply")
    n = ctx.sizes.xrange
    with CpuMeter(srv.pid) as cpu:
        ops = harness.redis_benchmark(srv.port, ["-c", "50", "-n", str(n),
                                         "XRANGE", KEY, "-", "+", "COUNT", "100"],
                              timeout=max(60, n / 200), cpu=ctx.load_cpu)
    return {"ops/s": (ops, cpu.pct)}


def _consumer(port: int, idx: int, load_cpu: int | None, depth: int, deadline_s: float,
              ready: mp.Barrier, out: mp.Queue) -> None:
    """One consumer process: XREADGROUP COUNT 10 and XACK what it got, until the stream is
    drained or the deadline passes.

    Each round sends, in one write, the XACKs for everything the previous round delivered
    plus `depth` XREADGROUPs, so a consumer is one syscall pair per round instead of per
    command: the point is to load the server, not the generator.
    """
    if load_cpu is not None:
        os.sched_setaffinity(0, {load_cpu})
    read_cmd = hiredis.pack_command(("XREADGROUP", "GROUP", "g", f"c{idx}", "COUNT", "10",
                                     "STREAMS", KEY, ">")) * depth
    ack_head = b"$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n"
    acked = 0
    delivered = 0
    error = ""
    c = harness.Conn(port, timeout=60)
    ready.wait()
    t0 = time.perf_counter()
    cpu0 = sum(os.times()[:2])
    deadline = t0 + deadline_s
    acks = b""
    n_acks = 0
    try:
        while True:
            c.send(acks + read_cmd)
            for r in c.read_replies(n_acks):
                if isinstance(r, hiredis.ReplyError):
                    raise RuntimeError(str(r))
                acked += r
            acks_parts = []
            n_acks = 0
            for r in c.read_replies(depth):
                if r is None:
                    continue
                if isinstance(r, hiredis.ReplyError):
                    raise RuntimeError(str(r))
                entries = r[0][1]
                if not entries:
                    continue
                delivered += len(entries)
                ids = [e[0] for e in entries]
                parts = [b"*%d\r\n" % (3 + len(ids)), ack_head]
                for i in ids:
                    parts.append(b"$%d\r\n%s\r\n" % (len(i), i))
                acks_parts.append(b"".join(parts))
                n_acks += 1
            acks = b"".join(acks_parts)
            if n_acks == 0 or time.perf_counter() > deadline:
                if n_acks:
                    c.send(acks)
                    acked += sum(c.read_replies(n_acks))
                break
    except Exception as e:  # noqa: BLE001 - reported to the parent
        error = f"{type(e).__name__}: {e}"
    t1 = time.perf_counter()
    out.put((idx, acked, delivered, t0, t1, sum(os.times()[:2]) - cpu0, error))
    c.close()


def m_xreadgroup(srv: harness.ServerProc, ctx: Ctx) -> dict[str, tuple[float, float]]:
    n = ctx.sizes.xreadgroup_prefill
    load_entries(srv.port, n)
    with harness.Conn(srv.port) as c:
        c.call("XGROUP", "CREATE", KEY, "g", "0")
    mpc = mp.get_context("fork")
    ready = mpc.Barrier(ctx.procs + 1)
    out = mpc.Queue()
    procs = [mpc.Process(target=_consumer,
                         args=(srv.port, i, ctx.load_cpu, 4, ctx.sizes.xreadgroup_seconds,
                               ready, out), daemon=True)
             for i in range(ctx.procs)]
    for p in procs:
        p.start()
    try:
        ready.wait(timeout=30)
        c0, t0 = harness.cpu_seconds(srv.pid), time.perf_counter()
        results = [out.get(timeout=ctx.sizes.xreadgroup_seconds + 120) for _ in procs]
        wall = time.perf_counter() - t0
        srv_cpu = 100.0 * (harness.cpu_seconds(srv.pid) - c0) / wall
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    errors = [r[6] for r in results if r[6]]
    if errors:
        raise RuntimeError(f"consumer error on {srv.label}: {errors[0]}")
    acked = sum(r[1] for r in results)
    delivered = sum(r[2] for r in results)
    span = max(r[4] for r in results) - min(r[3] for r in results)
    gen_cpu = 100.0 * sum(r[5] for r in results) / span
    with harness.Conn(srv.port) as c:
        pending = c.call("XPENDING", KEY, "g")[0]
    if acked != delivered or int(pending) != n - acked:
        raise RuntimeError(f"XREADGROUP on {srv.label}: delivered {delivered}, acked {acked}, "
                           f"pending {pending} of {n}")
    ctx.notes.append(f"xreadgroup on {srv.label}: {acked} entries consumed+acked in "
                     f"{span:.2f} s by {ctx.procs} consumer processes; server CPU "
                     f"{srv_cpu:.0f}% of one core, consumers {gen_cpu:.0f}% of one core"
                     + (" (drained the stream)" if acked == n else " (stopped at time cap)"))
    return {"entries/s": (acked / span, srv_cpu)}


def m_memory(srv: harness.ServerProc, ctx: Ctx) -> dict[str, tuple[float, float]]:
    n = ctx.sizes.memory
    rss0 = srv.rss_kib()
    with harness.Conn(srv.port) as c:
        um0 = harness.info_fields(c).get("used_memory")
    load_entries(srv.port, n, distinct=True)
    expect_xlen(srv, n, "memory load")
    time.sleep(0.5)  # let any deferred work (lazy frees, block sealing) settle
    rss = srv.rss_kib()
    with harness.Conn(srv.port) as c:
        info = harness.info_fields(c)
    um = info.get("used_memory")
    if um is not None and um == info.get("used_memory_rss"):
        # A server that reports its RSS as used_memory has no allocator-level figure to
        # compare with redis-server's; the RSS rows already cover it.
        um = None
    nan = math.nan
    res = {
        "VmRSS after load (MiB)": (rss / 1024, nan),
        "VmRSS growth (MiB)": ((rss - rss0) / 1024, nan),
        "used_memory (MiB)": (int(um) / 2**20 if um else nan, nan),
    }
    ctx.notes.append(f"memory on {srv.label}: VmRSS {rss0 / 1024:.1f} MiB empty -> "
                     f"{rss / 1024:.1f} MiB after {n} entries "
                     f"({(rss - rss0) * 1024 / n:.1f} B/entry); INFO used_memory "
                     f"{um0 or 'n/a'} -> {um or 'n/a'}")
    return res


def _probe(port: int, load_cpu: int | None, interval: float, start: mp.Event,
           stop: mp.Event, out: mp.Queue) -> None:
    """PING every `interval` seconds on a private connection and report latency percentiles.

    A PING that took longer than the interval is followed by the next one immediately, so a
    stall of the server's event loop shows up as one long sample (its length is the stall).
    """
    if load_cpu is not None:
        os.sched_setaffinity(0, {load_cpu})
    # The probe shares the load core with redis-benchmark; real-time priority makes it run as
    # soon as its PONG arrives, so the latency measured is the server's, not the scheduler's.
    # It sleeps or blocks on recv almost all the time, so it cannot starve the loader.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (OSError, AttributeError):
        try:
            os.nice(-10)
        except OSError:
            pass
    ping = hiredis.pack_command(("PING",))
    lat: list[float] = []
    err = ""
    try:
        with harness.Conn(port, timeout=120) as c:
            start.set()
            nxt = time.perf_counter()
            while not stop.is_set():
                t = time.perf_counter()
                c.send(ping)
                if c.read_reply() != b"PONG":
                    raise RuntimeError("bad PING reply")
                lat.append(time.perf_counter() - t)
                nxt += interval
                now = time.perf_counter()
                if nxt > now:
                    time.sleep(nxt - now)
                else:
                    nxt = now
    except Exception as e:  # noqa: BLE001 - reported to the parent
        err = f"{type(e).__name__}: {e}"
        start.set()
    lat.sort()
    if lat:
        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(math.ceil(p * len(lat))) - 1)]

        out.put((len(lat), lat[-1], pct(0.999), pct(0.99), pct(0.5), err))
    else:
        out.put((0, math.nan, math.nan, math.nan, math.nan, err or "no samples"))


class PingProbe:
    """A forked process running _probe against `port` (PING every `interval` s on the load
    CPU). `with PingProbe(...) as probe:` returns once it pings and stops it on the way out."""

    def __init__(self, port: int, load_cpu: int | None, interval: float = 0.001) -> None:
        mpc = mp.get_context("fork")
        self._start, self._stop, self._out = mpc.Event(), mpc.Event(), mpc.Queue()
        self._proc = mpc.Process(target=_probe, daemon=True, args=(
            port, load_cpu, interval, self._start, self._stop, self._out))

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def __enter__(self) -> PingProbe:
        self._proc.start()
        if not self._start.wait(timeout=30):
            self.__exit__()
            raise RuntimeError("probe did not start")
        return self

    def results(self, timeout: float = 60) -> tuple[int, float, float, float, float, str]:
        """Stop pinging; (samples, max, p99.9, p99, p50 in seconds, error text or "")."""
        self._stop.set()
        return self._out.get(timeout=timeout)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()


def m_stall(srv: harness.ServerProc, ctx: Ctx) -> dict[str, tuple[float, float]]:
    n = ctx.sizes.stall
    with PingProbe(srv.port, ctx.load_cpu) as probe:
        time.sleep(0.2)
        with CpuMeter(srv.pid) as cpu:
            ops = harness.redis_benchmark(srv.port, ["-c", "4", "-P", "100", "-n", str(n), *XADD_ARGS],
                                  timeout=max(120, n / 1000), cpu=ctx.load_cpu)
        samples, mx, p999, p99, p50, err = probe.results()
    if err:
        raise RuntimeError(f"probe on {srv.label}: {err}")
    length = xlen(srv.port)
    if length < n:
        raise RuntimeError(f"stall load on {srv.label}: XLEN {length} < {n}")
    ctx.notes.append(f"stall on {srv.label}: {length} entries loaded at {ops:,.0f} XADD/s "
                     f"(4 conns x pipeline 100), {samples} PINGs, p50 {p50 * 1e3:.3f} ms, "
                     f"p99 {p99 * 1e3:.3f} ms, p99.9 {p999 * 1e3:.3f} ms, max {mx * 1e3:.3f} ms")
    return {"PING max (ms)": (mx * 1e3, cpu.pct), "PING p99.9 (ms)": (p999 * 1e3, cpu.pct),
            "load XADD/s": (ops, cpu.pct)}


SPEC: dict[str, tuple[Callable[[harness.ServerProc, Ctx], dict], str, dict[str, str]]] = {
    # name -> (function, description, {metric: better})
    "xadd": (m_xadd, "XADD, 50 clients, no pipelining", {"ops/s": "higher"}),
    "xadd-p16": (m_xadd_p16, "XADD, 50 clients, pipeline 16", {"ops/s": "higher"}),
    "xrange": (m_xrange, "XRANGE s - + COUNT 100, 50 clients", {"ops/s": "higher"}),
    "xreadgroup": (m_xreadgroup, "XREADGROUP COUNT 10 + XACK", {"entries/s": "higher"}),
    "memory": (m_memory, "memory after N XADDs", {"VmRSS after load (MiB)": "lower",
                                                  "VmRSS growth (MiB)": "lower",
                                                  "used_memory (MiB)": "lower"}),
    "stall": (m_stall, "event-loop stall while loading", {"PING max (ms)": "lower",
                                                          "PING p99.9 (ms)": "lower",
                                                          "load XADD/s": "higher"}),
}


def describe(name: str, s: Sizes, procs: int) -> str:
    return {
        "xadd": f"XADD 5×10 B fields, 50 clients, no pipeline, {s.xadd:,} requests",
        "xadd-p16": f"XADD 5×10 B fields, 50 clients, pipeline 16, {s.xadd_p16:,} requests",
        "xrange": f"XRANGE s - + COUNT 100 on {s.xrange_prefill:,} entries, 50 clients, "
                  f"{s.xrange:,} requests",
        "xreadgroup": f"XREADGROUP COUNT 10 + XACK, {procs} consumer processes, "
                      f"{s.xreadgroup_prefill:,} entries (cap {s.xreadgroup_seconds:g} s)",
        "memory": f"after {s.memory:,} XADDs of 5×10 B fields (all values distinct); "
                  "used_memory only where the server reports an allocator figure, not its RSS",
        "stall": f"PING every 1 ms while 4 conns × pipeline 100 XADD {s.stall:,} entries",
    }[name]


# --------------------------------------------------------------------------------------------
# Driver and report


OTHERS_LIMIT = 15.0  # % of a core used by unrelated processes above which a figure is suspect


def _attempt(fn: Callable[[harness.ServerProc, Ctx], dict], srv: harness.ServerProc, ctx: Ctx,
             idle_wait: float) -> tuple[float, dict, list[str]] | str:
    """Run one measurement on one server: (others' CPU %, result, notes) or an error text."""
    if idle_wait > 0:
        level = harness.wait_for_idle(idle_wait)
        if level >= 0.3:
            print(f"   machine still busy ({level:.2f} cores) after {idle_wait:g} s, "
                  "measuring anyway", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    saved = ctx.notes
    ctx.notes = []
    try:
        with harness.OthersMeter(srv.pid) as others:
            res = fn(srv, ctx)
    except Exception as e:  # noqa: BLE001 - one failure must not hide the rest
        msg = f"{srv.label}: {type(e).__name__}: {e}"
        if srv.proc.poll() is not None:
            msg += f"\n  server exited ({srv.proc.returncode}):\n{srv.log_tail(10)}"
        return msg
    finally:
        notes, ctx.notes = ctx.notes, saved
    print(f"   {srv.label:16s} " + ", ".join(f"{m} {v:,.2f}" for m, (v, _) in res.items())
          + f"  [{time.perf_counter() - t0:.1f} s, others {others.pct:.0f}%]",
          file=sys.stderr, flush=True)
    return others.pct, res, notes


def run(args: argparse.Namespace) -> tuple[list[harness.ResultRow], Ctx, list[str]]:
    ncpu = len(os.sched_getaffinity(0))
    pin = ncpu >= 2 and not args.no_pin
    cpus = sorted(os.sched_getaffinity(0))
    sizes = Sizes().scaled(20) if args.quick else Sizes()
    if args.entries:
        sizes.stall = args.entries
    ctx = Ctx(cpus[0] if pin else None, cpus[1] if pin else None, sizes, args.procs)
    roles = [("redis", "redis-server"),
             (args.against, "xshard node" if args.against == "node" else "redis-server #2")]
    metrics: list[harness.ResultRow] = []
    failures: list[str] = []
    for name in args.only:
        fn, _desc, betters = SPEC[name]
        rows = {m: harness.ResultRow(name, m, b) for m, b in betters.items()}
        print(f"== {name}: {describe(name, sizes, args.procs)}", file=sys.stderr, flush=True)
        servers: list[harness.ServerProc] = []
        try:
            for kind, label in roles:
                servers.append(harness.start_server(kind, label=label, cpu=ctx.server_cpu))
            for i, (kind, label) in enumerate(roles):
                best = None  # (others %, result, notes) of the least disturbed attempt
                for attempt in range(1 + args.retries):
                    if attempt:
                        # A retry needs the same fresh state as the first try.
                        servers[i].stop()
                        servers[i] = harness.start_server(kind, label=label, cpu=ctx.server_cpu)
                        print(f"   retry {attempt} on {label}: the machine was shared",
                              file=sys.stderr, flush=True)
                    outcome = _attempt(fn, servers[i], ctx, args.idle_wait)
                    if isinstance(outcome, str):
                        failures.append(f"{name} on {outcome}")
                        print("   FAILED " + outcome, file=sys.stderr, flush=True)
                        best = None
                        break
                    if best is None or outcome[0] < best[0]:
                        best = outcome
                    if best[0] <= OTHERS_LIMIT:
                        break
                if best is None:
                    continue
                others_pct, res, notes = best
                ctx.notes.extend(notes)
                for m, (v, cpu) in res.items():
                    rows[m].values[label] = v
                    rows[m].cpu[label] = cpu
                    rows[m].others[label] = others_pct
                if others_pct > OTHERS_LIMIT:
                    ctx.notes.append(f"WARNING: other processes used {others_pct:.0f}% of a "
                                     f"core during {name} on {label} (best of "
                                     f"{1 + args.retries} tries); rerun on an idle machine "
                                     "before trusting that figure")
        except Exception as e:  # noqa: BLE001 - e.g. a server that does not start
            failures.append(f"{name}: {type(e).__name__}: {e}")
            print(f"   FAILED {name}: {e}", file=sys.stderr, flush=True)
        finally:
            for srv in servers:
                srv.stop()
        metrics.extend(rows.values())
    return metrics, ctx, [label for _, label in roles] + failures


def render(metrics: list[harness.ResultRow], ctx: Ctx, labels: list[str], failures: list[str],
           argv: list[str], only: list[str], load_before: float) -> str:
    a, b = labels
    lines = [
        *harness.results_head("Stream node benchmarks", "node_bench.py", argv),
        f"- Compared: **{b}** against **{a}** ({harness.redis_version()}, "
        "`--save '' --appendonly no`), each freshly started for every measurement, "
        "on 127.0.0.1",
        harness.machine_line(load_before, ctx.server_cpu, ctx.load_cpu,
                     " (other work on the machine skews every figure)"),
        "",
        "## How to read this",
        "",
        f"`ratio` is {b} divided by {a} for the same figure in the same run. For throughput "
        "(ops/s, entries/s) higher is better, so a ratio of 0.25 means we do a quarter of "
        "redis-server's work per second. For memory and latency lower is better, so 1.4 means "
        "40% more memory or a 40% longer pause. `srv CPU` is how much of its one core the "
        "server used during the measurement: near 100% means the server was the bottleneck; "
        "well below it means the load generator (or other work on the machine) was, and the "
        "throughput is a lower bound for that server. `others' CPU` is the CPU that neither "
        "the server nor our load generators used during that measurement (in % of one "
        "core, for each server): anything above ~15% means the machine was shared and the "
        "row is noise. Run with `--against redis` to see the redis-vs-redis ratios, i.e. "
        "how much this machine's noise alone moves a ratio away from 1.",
        "",
        *harness.ratio_table(metrics, a, b),
    ]
    lines += ["", "## What was measured", ""]
    for name in only:
        lines.append(f"- **{name}**: {describe(name, ctx.sizes, ctx.procs)}")
    lines += harness.list_section("Details", ctx.notes)
    lines += harness.list_section("Failures", failures)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: every size divided by 20")
    ap.add_argument("--only", default=",".join(MEASUREMENTS),
                    help=f"comma-separated subset of {','.join(MEASUREMENTS)}")
    ap.add_argument("--entries", type=int, default=0,
                    help="entries to insert in the stall measurement (default 5,000,000)")
    ap.add_argument("--against", choices=["node", "redis"], default="node",
                    help="server compared with redis-server (redis: a redis-vs-redis baseline)")
    ap.add_argument("--procs", type=int, default=2,
                    help="consumer processes for the xreadgroup measurement")
    ap.add_argument("--idle-wait", type=float, default=60.0,
                    help="before each measurement wait up to this many seconds for the machine "
                         "to be idle (0: do not wait)")
    ap.add_argument("--retries", type=int, default=1,
                    help="re-run a measurement (on a fresh server) up to this many times when "
                         "other processes used more than 15%% of a core during it; the least "
                         "disturbed try is reported")
    ap.add_argument("--no-pin", action="store_true", help="do not pin servers/load to CPUs")
    ap.add_argument("--output", default=str(Path(__file__).resolve().parent / "RESULTS.md"),
                    help="Markdown file to write (default benchmarks/RESULTS.md)")
    args = ap.parse_args(argv)
    args.only = harness.measurement_list(ap, args.only, SPEC)
    load_before = os.getloadavg()[0]
    metrics, ctx, info = run(args)
    labels, failures = info[:2], info[2:]
    md = render(metrics, ctx, labels, failures, argv, args.only, load_before)
    Path(args.output).write_text(md)
    print(md)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
