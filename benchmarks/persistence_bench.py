"""Persistence: node vs redis-server with the same settings, side by side (issue 3 §6).

    python benchmarks/persistence_bench.py [--quick] [--only xadd,always,startup]
                                           [--entries 1000000,5000000]
                                           [--against node|redis] [--output PATH]

Measurements (each on freshly started servers, redis-server first, then the server under test):

- xadd: XADD from 50 clients (redis-benchmark, no pipelining) with `appendonly no` and with
  `appendonly yes, appendfsync everysec`. Besides the side-by-side ratio, each server's own
  everysec/none ratio is reported (issue target for the node: >= 0.9).
- always: XADD from 50 clients with `appendfsync always` (a write is acknowledged after its
  fsync; concurrent clients should share one fsync per loop iteration).
- startup: N entries (5 fields x 10 B) loaded with pipelined XADD, then (a) SAVE, SIGKILL and
  a restart from the snapshot, (b) with `appendonly yes` and no snapshot, SIGTERM and a restart
  from the AOF alone. Timed from exec until PING answers and DBSIZE/XLEN are right (issue
  target for the node: >= 1M entries/s from a snapshot).
- stall: N entries (1M), then XADD load from 10 clients while BGREWRITEAOF and then BGSAVE run;
  a separate connection PINGs every 1 ms and the longest PING is the longest event-loop pause
  (issue target for the node: no pause over 50 ms).

Both servers run with `--auto-aof-rewrite-percentage 0` so no rewrite happens mid-measurement.
The table goes to stdout and to benchmarks/PERSISTENCE_RESULTS.md (or --output). `--quick` is
a smoke run (100k entries, small request counts); `--against redis` compares redis-server with
a second redis-server to show this machine's noise.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hiredis  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.node_bench import KEY, XADD_ARGS, PingProbe, load_entries  # noqa: E402

MEASUREMENTS = ["xadd", "always", "startup", "stall"]
NO_REWRITE = ["--auto-aof-rewrite-percentage", "0"]
MODES = {
    "none": ["--appendonly", "no"],
    "everysec": ["--appendonly", "yes", "--appendfsync", "everysec", *NO_REWRITE],
    "always": ["--appendonly", "yes", "--appendfsync", "always", *NO_REWRITE],
}


@dataclass
class Sizes:
    xadd: int = 200_000
    always: int = 100_000
    startup: tuple[int, ...] = (1_000_000, 5_000_000)
    stall: int = 1_000_000


@dataclass
class Ctx:
    server_cpu: int | None
    load_cpu: int | None
    sizes: Sizes
    idle_wait: float
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Servers with persistence options (harness.start_server always turns persistence off)


def _argv(kind: str, port: int, workdir: Path, args: list[str]) -> tuple[list[str], dict | None]:
    if kind == "redis":
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        return [exe, "--port", str(port), "--bind", harness.HOST, "--daemonize", "no", "--dir",
                str(workdir), "--logfile", "", "--save", "", "--appendonly", "no", *args], None
    env = dict(os.environ)
    env["PYTHONPATH"] = str(harness.REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return [sys.executable, "-m", "control.cli", "node", "--port", str(port), "--dir",
            str(workdir), *args], env


def spawn(kind: str, label: str, workdir: Path, args: list[str], cpu: int | None,
          port: int | None = None) -> harness.ServerProc:
    """Start a server on `workdir` (kept: restarts reuse it) without waiting for it."""
    port = port or harness.free_port()
    argv, env = _argv(kind, port, workdir, args)
    log_path = workdir / f"server-{port}.log"
    with open(log_path, "ab") as log:
        preexec = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=harness.REPO_ROOT, env=env,
                                preexec_fn=preexec)
    sp = harness.ServerProc(label, kind, port, proc, workdir, log_path, owns_workdir=False)
    harness._started.append(sp)  # killed at exit like every harness server
    return sp


def wait_ready(sp: harness.ServerProc, timeout: float, n_entries: int | None = None) -> float:
    """Seconds until PING answers (and, if given, DBSIZE is 1 and XLEN is n_entries)."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sp.proc.poll() is not None:
            raise RuntimeError(f"{sp.label} exited ({sp.proc.returncode}):\n{sp.log_tail(15)}")
        try:
            with harness.Conn(sp.port, timeout=timeout) as c:
                while time.monotonic() < deadline:
                    r = c.pipeline([("PING",), ("DBSIZE",), ("XLEN", KEY)])
                    if r[0] == b"PONG" and (n_entries is None or (r[1] == 1 and r[2] == n_entries)):
                        return time.perf_counter() - t0
                    if r[0] == b"PONG" and not isinstance(r[1], hiredis.ReplyError):
                        raise RuntimeError(f"{sp.label} answers with DBSIZE {r[1]}, XLEN {r[2]} "
                                           f"(expected 1, {n_entries})")
                    time.sleep(0.005)  # -LOADING
        except (OSError, ConnectionError):
            time.sleep(0.005)
    raise RuntimeError(f"{sp.label} not ready within {timeout:.0f} s:\n{sp.log_tail(15)}")


def terminate(sp: harness.ServerProc, sig: int = signal.SIGTERM, timeout: float = 300) -> None:
    if sp.proc.poll() is None:
        sp.proc.send_signal(sig)
        try:
            sp.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            sp.proc.kill()
            sp.proc.wait(10)
    if sp in harness._started:
        harness._started.remove(sp)


def _cpu_pct_of(pids: list[int], c0: float, t0: float) -> float:
    """CPU % (of one core) that the processes `pids` used together since (c0, t0)."""
    try:
        used = sum(harness.cpu_seconds(p) for p in pids) - c0
    except OSError:
        return 0.0
    return 100.0 * used / max(time.perf_counter() - t0, 1e-9)


def _cpu_pct(pid: int, c0: float, t0: float) -> float:
    try:
        return 100.0 * (harness.cpu_seconds(pid) - c0) / max(time.perf_counter() - t0, 1e-9)
    except OSError:
        return math.nan


# --------------------------------------------------------------------------------------------
# Measurements: each runs on one server role and returns {metric: (value, cpu %, others %)}


def m_xadd(kind: str, label: str, mode: str, n: int, ctx: Ctx) -> tuple[float, float, float]:
    wd = Path(tempfile.mkdtemp(prefix=f"pbench-{kind}-"))
    try:
        sp = spawn(kind, label, wd, MODES[mode], ctx.server_cpu)
        wait_ready(sp, 60)
        if ctx.idle_wait > 0:
            harness.wait_for_idle(ctx.idle_wait)
        with harness.OthersMeter(sp.pid) as others:
            c0, t0 = harness.cpu_seconds(sp.pid), time.perf_counter()
            ops = harness.redis_benchmark(sp.port, ["-c", "50", "-n", str(n), *XADD_ARGS],
                                  timeout=max(120, n / 200), cpu=ctx.load_cpu)
            cpu = _cpu_pct(sp.pid, c0, t0)
        with harness.Conn(sp.port) as c:
            got = c.call("XLEN", KEY)
        if got != n:
            raise RuntimeError(f"XADD ({mode}) on {label}: XLEN {got}, expected {n}")
        if mode != "none":
            with harness.Conn(sp.port) as c:
                st = harness.info_fields(c, "persistence")
            if st.get("aof_enabled") != "1" or st.get("aof_last_write_status", "ok") != "ok":
                raise RuntimeError(f"{label}: AOF not healthy after XADD ({mode}): {st}")
        terminate(sp)
        return ops, cpu, others.pct
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def m_startup(kind: str, label: str, source: str, n: int,
              ctx: Ctx) -> tuple[float, float, float]:
    """Seconds from exec to a server that answers with all n entries, loading from `source`."""
    wd = Path(tempfile.mkdtemp(prefix=f"pbench-{kind}-"))
    args = MODES["none"] if source == "snapshot" else MODES["everysec"]
    try:
        sp = spawn(kind, label, wd, args, ctx.server_cpu)
        wait_ready(sp, 60)
        t0 = time.perf_counter()
        load_entries(sp.port, n, batch=200)
        load_s = time.perf_counter() - t0
        if source == "snapshot":
            t0 = time.perf_counter()
            with harness.Conn(sp.port, timeout=1800) as c:
                c.call("SAVE")
            save_s = time.perf_counter() - t0
            terminate(sp, signal.SIGKILL)
            files = [p for p in wd.iterdir() if p.is_file() and not p.name.endswith(".log")]
            what = f"SAVE {save_s:.2f} s, snapshot " + ", ".join(
                f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in files)
        else:
            terminate(sp)  # SIGTERM: the AOF is flushed and fsynced
            aof = wd / "appendonlydir"
            what = "AOF " + ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB"
                                      for p in sorted(aof.iterdir()))
            if any(p.suffix in (".rdb", ".xsnap") and p.stat().st_size > 1 << 20
                   for p in aof.iterdir()):
                raise RuntimeError(f"{label}: the AOF has a large base file ({what}); the "
                                   "measurement is meant to replay effects alone")
        if ctx.idle_wait > 0:
            harness.wait_for_idle(ctx.idle_wait)
        sp = spawn(kind, label, wd, args, ctx.server_cpu, port=sp.port)
        with harness.OthersMeter(sp.pid) as others:
            c0, t0 = harness.cpu_seconds(sp.pid), time.perf_counter()
            secs = wait_ready(sp, 1800, n)
            cpu = _cpu_pct(sp.pid, c0, t0)
        terminate(sp, signal.SIGKILL)
        ctx.notes.append(f"startup from {source} on {label}: {n:,} entries loaded in "
                         f"{load_s:.1f} s ({n / load_s:,.0f} XADD/s pipelined); {what}; "
                         f"ready after {secs:.3f} s ({n / secs:,.0f} entries/s)")
        return secs, cpu, others.pct
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def _wait_info(port: int, fields: tuple[str, ...], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    with harness.Conn(port) as c:
        while True:
            st = harness.info_fields(c, "persistence")
            if all(st.get(f) == "0" for f in fields):
                return st
            if time.monotonic() > deadline:
                raise RuntimeError(f"still busy after {timeout:.0f} s: {st}")
            time.sleep(0.01)


def _probed(sp: harness.ServerProc, ctx: Ctx, bench_pid: int, command: str,
            busy: tuple[str, ...]) -> tuple[float, float, float, float, float, int]:
    """Run `command` (BGREWRITEAOF/BGSAVE) while a separate process PINGs every 1 ms.

    Returns (longest PING s, p99.9 s, seconds until done, server CPU %, others' CPU %, samples).
    The longest PING is the longest event-loop pause during the operation.
    """
    with PingProbe(sp.port, ctx.load_cpu) as probe:
        time.sleep(0.3)
        gens = [bench_pid, probe.pid]  # our load generators: running, so not yet "ours"
        g0 = sum(harness.cpu_seconds(p) for p in gens)
        with harness.OthersMeter(sp.pid) as others:
            c0, t0 = harness.cpu_seconds(sp.pid), time.perf_counter()
            with harness.Conn(sp.port) as c:
                c.call(command)
            st = _wait_info(sp.port, busy, 600)
            secs = time.perf_counter() - t0
            time.sleep(0.2)  # the switch-over after the child finished is part of it
            cpu = _cpu_pct(sp.pid, c0, t0)
            gen_pct = _cpu_pct_of(gens, g0, t0)
        samples, mx, p999, _p99, _p50, err = probe.results()
    if err:
        raise RuntimeError(f"probe: {err}")
    status = "aof_last_bgrewrite_status" if command == "BGREWRITEAOF" else "rdb_last_bgsave_status"
    if st.get(status) != "ok":
        raise RuntimeError(f"{command} failed: {st}")
    return mx, p999, secs, cpu, max(0.0, others.pct - gen_pct), samples


def m_stall(kind: str, label: str, n: int, ctx: Ctx) -> dict[str, tuple[float, float, float]]:
    """Longest PING while a rewrite, then a background save, of n entries run under load."""
    wd = Path(tempfile.mkdtemp(prefix=f"pbench-{kind}-"))
    bench = None
    try:
        sp = spawn(kind, label, wd, MODES["everysec"], ctx.server_cpu)
        wait_ready(sp, 60)
        load_entries(sp.port, n, batch=200)
        if ctx.idle_wait > 0:
            harness.wait_for_idle(ctx.idle_wait)
        exe = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
        pin = (lambda: os.sched_setaffinity(0, {ctx.load_cpu})) if ctx.load_cpu is not None \
            else None
        bench = subprocess.Popen([exe, "-h", harness.HOST, "-p", str(sp.port), "-c", "10", "-n",
                                  "100000000", *XADD_ARGS], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                 preexec_fn=pin)
        time.sleep(0.5)
        res: dict[str, tuple[float, float, float]] = {}
        for command, busy, what in (
                ("BGREWRITEAOF", ("aof_rewrite_in_progress", "aof_rewrite_scheduled"), "rewrite"),
                ("BGSAVE", ("rdb_bgsave_in_progress",), "bgsave")):
            mx, p999, secs, cpu, oth, samples = _probed(sp, ctx, bench.pid, command, busy)
            res[f"PING max during {what} (ms)"] = (mx * 1e3, cpu, oth)
            res[f"{what} seconds"] = (secs, cpu, oth)
            ctx.notes.append(f"stall on {label}: {command} of {n:,} entries under 10-client "
                             f"XADD load took {secs:.2f} s; {samples} PINGs, p99.9 "
                             f"{p999 * 1e3:.2f} ms, max {mx * 1e3:.2f} ms")
        if bench.poll() is not None:
            raise RuntimeError("the XADD load stopped early (redis-benchmark exited)")
        terminate(sp, signal.SIGKILL)
        return res
    finally:
        if bench is not None:
            bench.kill()
            bench.wait(10)
        shutil.rmtree(wd, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Driver


def run(args: argparse.Namespace) -> tuple[list[harness.ResultRow], Ctx, list[str]]:
    cpus = sorted(os.sched_getaffinity(0))
    pin = len(cpus) >= 2 and not args.no_pin
    sizes = Sizes(xadd=20_000, always=5_000, startup=(100_000,), stall=100_000) \
        if args.quick else Sizes()
    if args.entries:
        sizes.startup = tuple(int(x) for x in args.entries.split(","))
    ctx = Ctx(cpus[0] if pin else None, cpus[1] if pin else None, sizes, args.idle_wait)
    labels = ["redis-server", "xshard node" if args.against == "node" else "redis-server #2"]
    roles = list(zip(["redis", args.against], labels, strict=True))
    rows: list[harness.ResultRow] = []

    def measure(row: harness.ResultRow, fn, *fargs) -> None:
        for kind, label in roles:
            print(f"   {row.measurement} [{row.metric}] on {label} ...", file=sys.stderr,
                  flush=True)
            try:
                v, cpu, oth = fn(kind, label, *fargs, ctx)
            except Exception as e:  # noqa: BLE001 - one failure must not hide the rest
                ctx.failures.append(f"{row.measurement} on {label}: {type(e).__name__}: {e}")
                print(f"   FAILED: {e}", file=sys.stderr, flush=True)
                continue
            row.values[label], row.cpu[label], row.others[label] = v, cpu, oth
            print(f"   -> {v:,.3f} (server CPU {cpu:.0f}%, others {oth:.0f}%)",
                  file=sys.stderr, flush=True)
        rows.append(row)

    if "xadd" in args.only:
        none = harness.ResultRow("xadd, appendonly no", "ops/s", "higher")
        measure(none, m_xadd, "none", sizes.xadd)
        every = harness.ResultRow("xadd, appendfsync everysec", "ops/s", "higher")
        measure(every, m_xadd, "everysec", sizes.xadd)
        own = harness.ResultRow("xadd everysec / own no-persistence", "ratio (target >= 0.9)", "higher")
        for label in labels:
            if label in none.values and label in every.values:
                own.values[label] = every.values[label] / none.values[label]
        rows.append(own)
    if "always" in args.only:
        measure(harness.ResultRow("xadd, appendfsync always", "ops/s", "higher"), m_xadd, "always",
                sizes.always)
    if "startup" in args.only:
        for n in sizes.startup:
            for source in ("snapshot", "aof"):
                row = harness.ResultRow(f"startup from {source}, {n:,} entries", "seconds", "lower")
                measure(row, m_startup, source, n)
                rate = harness.ResultRow(f"startup from {source}, {n:,} entries", "entries/s", "higher")
                for label, secs in row.values.items():
                    rate.values[label] = n / secs
                rows.append(rate)
    if "stall" in args.only:
        what = f"rewrite+bgsave under load, {sizes.stall:,} entries"
        stall_rows = {m: harness.ResultRow(what, m, "lower") for m in (
            "PING max during rewrite (ms)", "rewrite seconds",
            "PING max during bgsave (ms)", "bgsave seconds")}
        for kind, label in roles:
            print(f"   {what} on {label} ...", file=sys.stderr, flush=True)
            try:
                res = m_stall(kind, label, sizes.stall, ctx)
            except Exception as e:  # noqa: BLE001
                ctx.failures.append(f"{what} on {label}: {type(e).__name__}: {e}")
                print(f"   FAILED: {e}", file=sys.stderr, flush=True)
                continue
            for m, (v, cpu, oth) in res.items():
                r = stall_rows[m]
                r.values[label], r.cpu[label], r.others[label] = v, cpu, oth
            print("   -> " + ", ".join(f"{m} {v:.2f}" for m, (v, _c, _o) in res.items()),
                  file=sys.stderr, flush=True)
        rows.extend(stall_rows.values())
    return rows, ctx, labels


def render(rows: list[harness.ResultRow], ctx: Ctx, labels: list[str], argv: list[str],
           load_before: float) -> str:
    a, b = labels
    lines = [
        *harness.results_head("Persistence benchmarks", "persistence_bench.py", argv),
        f"- Compared: **{b}** against **{a}** ({harness.redis_version()}), the same "
        "persistence options on both, freshly started for every measurement, on 127.0.0.1",
        harness.machine_line(load_before, ctx.server_cpu, ctx.load_cpu),
        "",
        "## How to read this",
        "",
        f"`ratio` is {b} divided by {a}. Throughput and entries/s: higher is better; seconds: "
        "lower is better. The `everysec / own no-persistence` row divides each server's "
        "everysec throughput by its own throughput without persistence (the node's target is "
        ">= 0.9). `srv CPU` is the share of its core the server used; `others' CPU` is CPU "
        "used by unrelated processes during the measurement (above ~15% the row is noise).",
        "",
        *harness.ratio_table(rows, a, b, small=".4g"),  # start-up times can be a few ms
    ]
    targets = []
    for r in rows:
        if r.measurement.startswith("xadd everysec") and b in r.values:
            ok = r.values[b] >= 0.9
            targets.append(f"- everysec >= 0.9x own no-persistence throughput: "
                           f"{r.values[b]:.2f} {'met' if ok else 'NOT met'}")
        if r.measurement.startswith("startup from snapshot") and r.metric == "entries/s" \
                and b in r.values:
            ok = r.values[b] >= 1_000_000
            targets.append(f"- {r.measurement}: {r.values[b]:,.0f} entries/s, target >= 1M/s "
                           f"{'met' if ok else 'NOT met'}")
        if r.measurement.startswith("rewrite+bgsave") and r.metric.startswith("PING max") \
                and b in r.values:
            ok = r.values[b] <= 50
            targets.append(f"- {r.measurement}, {r.metric.replace(' (ms)', '')}: longest pause "
                           f"{r.values[b]:.1f} ms, target <= 50 ms {'met' if ok else 'NOT met'}")
    if targets:
        lines += ["", f"## Issue targets ({b})", "", *targets]
    lines += harness.list_section("Details", ctx.notes)
    lines += harness.list_section("Failures", ctx.failures)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 100k entries, 20k/5k XADD requests")
    ap.add_argument("--only", default=",".join(MEASUREMENTS),
                    help=f"comma-separated subset of {','.join(MEASUREMENTS)}")
    ap.add_argument("--entries", default="",
                    help="comma-separated start-up sizes (default 1000000,5000000)")
    ap.add_argument("--against", choices=["node", "redis"], default="node",
                    help="server compared with redis-server (redis: a redis-vs-redis baseline)")
    ap.add_argument("--idle-wait", type=float, default=30.0,
                    help="before each timed part wait up to this many seconds for an idle "
                         "machine (0: do not wait)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin servers/load to CPUs")
    ap.add_argument("--output",
                    default=str(Path(__file__).resolve().parent / "PERSISTENCE_RESULTS.md"),
                    help="Markdown file to write (default benchmarks/PERSISTENCE_RESULTS.md)")
    args = ap.parse_args(argv)
    args.only = harness.measurement_list(ap, args.only, MEASUREMENTS)
    load_before = os.getloadavg()[0]
    rows, ctx, labels = run(args)
    md = render(rows, ctx, labels, argv, load_before)
    Path(args.output).write_text(md)
    print(md)
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
