"""Bulk loading: 1M pipelined XADDs and an AOF replay, node vs redis-server side by side.

    python benchmarks/bulkload_bench.py [--entries 1000000] [--only bulk,gc,replay]
                                        [--output PATH]

- bulk: `redis-benchmark -c 10 -P 100 -n N` XADD to one key (5 field/value pairs, `*` IDs),
  redis-server without persistence against one `xshard node` at its defaults (appendonly
  no): seconds to load, and their ratio as throughput (issue 10's target >= 0.5x). The node
  runs under benchmarks/gcprobe.py, which records its garbage collections during the load.
- gc: the same load on the node with CPython's default thresholds (700, 10, 10) instead of
  node/gctuning.py's, for the collections per 1M XADDs and the pauses they cost.
- replay: N entries loaded into a server with `appendonly yes`, SIGTERM, restart: seconds
  from exec until it answers with every entry (persistence_bench.py's start-up measurement),
  as effects/s (issue 10's target for the node >= 200k effects/s).

The table goes to stdout and to benchmarks/BULKLOAD_RESULTS.md (or --output), with the
machine's load average: on a shared machine, read the CPU columns before the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402
from benchmarks.gcprobe import THRESHOLDS_ENV  # noqa: E402
from benchmarks.node_bench import KEY, XADD_ARGS  # noqa: E402
from benchmarks.persistence_bench import Ctx, Sizes, _cpu_pct, m_startup, terminate  # noqa: E402

MEASUREMENTS = ["bulk", "gc", "replay"]
REDIS, NODE = "redis-server", "xshard node"


def _spawn_probed(label: str, wd: Path, cpu: int | None, thresholds: str | None,
                  gc_out: Path) -> harness.ServerProc:
    """The node under benchmarks/gcprobe.py (its collections recorded to `gc_out`)."""
    port = harness.free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(harness.REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(THRESHOLDS_ENV, None)
    if thresholds:
        env[THRESHOLDS_ENV] = thresholds
    argv = [sys.executable, "-m", "benchmarks.gcprobe", str(gc_out), "--port", str(port),
            "--dir", str(wd)]
    log = open(wd / "server.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=harness.REPO_ROOT, env=env,
                            preexec_fn=harness._pin(cpu))
    log.close()
    sp = harness.ServerProc(label, "node", port, proc, wd, wd / "server.log", False)
    harness._started.append(sp)
    harness.wait_for_ping(port, 60, proc)
    return sp


def m_bulk(kind: str, label: str, n: int, ctx: Ctx, thresholds: str | None = None
           ) -> tuple[float, float, float, dict | None]:
    """(seconds to load n XADDs at P100 from 10 clients, server CPU %, others' CPU %, GC)."""
    wd = Path(tempfile.mkdtemp(prefix=f"bulk-{kind}-"))
    gc_out = wd / "gc.json"
    try:
        if kind == "redis":
            sp = harness.start_server("redis", label=label, workdir=wd, cpu=ctx.server_cpu)
        else:
            sp = _spawn_probed(label, wd, ctx.server_cpu, thresholds, gc_out)
        if ctx.idle_wait > 0:
            harness.wait_for_idle(ctx.idle_wait)
        with harness.OthersMeter(sp.pid) as others:
            c0, t0 = harness.cpu_seconds(sp.pid), time.perf_counter()
            m0 = time.monotonic()
            ops = harness.redis_benchmark(sp.port, ["-c", "10", "-P", "100", "-n", str(n), *XADD_ARGS],
                                  timeout=max(300, n / 1000), cpu=ctx.load_cpu)
            m1 = time.monotonic()
            cpu = _cpu_pct(sp.pid, c0, t0)
        with harness.Conn(sp.port) as c:
            got = c.call("XLEN", KEY)
        if got != n:
            raise RuntimeError(f"bulk load on {label}: XLEN {got}, expected {n}")
        gcs = None
        terminate(sp)
        if kind == "node":
            data = json.loads(gc_out.read_text())
            ev = [e for e in data["events"] if m0 <= e[1] <= m1]
            gcs = {"thresholds": data["thresholds"],
                   "per_gen": [sum(1 for e in ev if e[0] == g) for g in range(3)],
                   "max_ms": max((e[2] for e in ev), default=0.0) * 1000,
                   "total_ms": sum(e[2] for e in ev) * 1000,
                   "max_by_gen_ms": [max((e[2] for e in ev if e[0] == g), default=0.0) * 1000
                                     for g in range(3)]}
        return n / ops, cpu, others.pct, gcs
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def _gc_note(label: str, n: int, g: dict) -> str:
    per_m = [x * 1_000_000 / n for x in g["per_gen"]]
    return (f"{label}, thresholds {tuple(g['thresholds'])}: collections during the load "
            f"gen0/1/2 {g['per_gen'][0]}/{g['per_gen'][1]}/{g['per_gen'][2]} "
            f"({per_m[0]:,.0f}/{per_m[1]:,.0f}/{per_m[2]:,.0f} per 1M XADDs), "
            f"longest pause {g['max_ms']:.2f} ms (by generation "
            + "/".join(f"{x:.2f}" for x in g["max_by_gen_ms"])
            + f" ms), {g['total_ms']:.0f} ms in all")


def run(args: argparse.Namespace) -> tuple[list[harness.ResultRow], Ctx]:
    cpus = sorted(os.sched_getaffinity(0))
    pin = len(cpus) >= 2 and not args.no_pin
    ctx = Ctx(cpus[0] if pin else None, cpus[1] if pin else None, Sizes(), args.idle_wait)
    n = args.entries
    rows: list[harness.ResultRow] = []
    if "bulk" in args.only:
        secs = harness.ResultRow(f"{n:,} XADDs, -c 10 -P 100", "seconds", "lower")
        rate = harness.ResultRow(f"{n:,} XADDs, -c 10 -P 100", "XADD/s (target >= 0.5x)", "higher")
        # On a busy machine the wall clock measures the queue for the CPU; the server's own
        # CPU time does not.
        cpu_row = harness.ResultRow(f"{n:,} XADDs, -c 10 -P 100", "server CPU seconds", "lower")
        for kind, label in (("redis", REDIS), ("node", NODE)):
            print(f"   bulk on {label} ...", file=sys.stderr, flush=True)
            s, cpu, oth, gcs = m_bulk(kind, label, n, ctx)
            secs.values[label], secs.cpu[label], secs.others[label] = s, cpu, oth
            rate.values[label], rate.cpu[label], rate.others[label] = n / s, cpu, oth
            cpu_row.values[label] = s * cpu / 100
            if gcs is not None:
                ctx.notes.append(_gc_note(f"{label} (node/gctuning.py)", n, gcs))
            print(f"   -> {s:.2f} s (CPU {cpu:.0f}%, others {oth:.0f}%)", file=sys.stderr)
        rows += [secs, rate, cpu_row]
    if "gc" in args.only:
        print("   bulk on the node with CPython's default GC thresholds ...", file=sys.stderr)
        s, cpu, oth, gcs = m_bulk("node", NODE, n, ctx, thresholds="700,10,10")
        assert gcs is not None
        ctx.notes.append(_gc_note(f"{NODE} with CPython's defaults", n, gcs)
                         + f"; load {s:.2f} s at {cpu:.0f}% CPU")
    if "replay" in args.only:
        secs = harness.ResultRow(f"start-up from an AOF of {n:,} XADDs", "seconds", "lower")
        rate = harness.ResultRow(f"start-up from an AOF of {n:,} XADDs", "effects/s", "higher")
        cpu_row = harness.ResultRow(f"start-up from an AOF of {n:,} XADDs", "server CPU seconds",
                            "lower")
        for kind, label in (("redis", REDIS), ("node", NODE)):
            print(f"   replay on {label} ...", file=sys.stderr, flush=True)
            s, cpu, oth = m_startup(kind, label, "aof", n, ctx)
            secs.values[label], secs.cpu[label], secs.others[label] = s, cpu, oth
            rate.values[label], rate.cpu[label], rate.others[label] = n / s, cpu, oth
            cpu_row.values[label] = s * cpu / 100
            print(f"   -> {s:.2f} s (CPU {cpu:.0f}%, others {oth:.0f}%)", file=sys.stderr)
        rows += [secs, rate, cpu_row]
    return rows, ctx


def render(rows: list[harness.ResultRow], ctx: Ctx, argv: list[str], load_before: float) -> str:
    lines = [
        *harness.results_head("Bulk loading: pipelined XADDs, AOF replay, GC", "bulkload_bench.py",
                      argv),
        f"- Compared: **{NODE}** against **{REDIS}** ({harness.redis_version()}), freshly started "
        "for every measurement, on 127.0.0.1",
        harness.machine_line(load_before, ctx.server_cpu, ctx.load_cpu),
        f"- Load average at the end: {os.getloadavg()[0]:.2f}",
        "",
        "`ratio` is the node divided by redis-server. `srv CPU` is the share of its core the "
        "server used; `others' CPU` is what unrelated processes used meanwhile (above ~15% "
        "the row is noise). Start-up times include the process start (Python imports, about "
        "0.3-0.5 s for the node).",
        "",
        *harness.ratio_table(rows, REDIS, NODE, small=".4g"),
    ]
    lines += harness.list_section("Details", ctx.notes)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--only", default=",".join(MEASUREMENTS),
                    help=f"comma-separated subset of {','.join(MEASUREMENTS)}")
    ap.add_argument("--idle-wait", type=float, default=30.0,
                    help="before each timed part wait up to this many seconds for an idle "
                         "machine (0: do not wait)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin servers/load to CPUs")
    ap.add_argument("--output",
                    default=str(Path(__file__).resolve().parent / "BULKLOAD_RESULTS.md"))
    args = ap.parse_args(argv)
    args.only = harness.measurement_list(ap, args.only, MEASUREMENTS)
    load_before = os.getloadavg()[0]
    rows, ctx = run(args)
    md = render(rows, ctx, argv, load_before)
    print(md)
    Path(args.output).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
