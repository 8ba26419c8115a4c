#!/usr/bin/env python3
"""Replication benchmark: XADD throughput with 2 replicas against none, and replica lag.

    python benchmarks/replication_bench.py [--quick] [--output FILE]

For redis-server (a primary plus two redis-server replicas) and for xshard nodes (the same),
side by side:
- `xadd, no replicas` and `xadd, 2 replicas`: redis-benchmark -c 50 XADD (the node_bench entry
  shape) against the primary; the ratio is the issue's "throughput with 2 replicas >= 0.85x".
- `replica lag at 80% load`: a paced writer process sends XADDs at 80% of the primary's
  measured no-replica rate, each entry carrying its send time; a reader process blocked in
  XREAD on a replica records, for every entry, the time from send to arrival on the replica
  (primary apply + stream + replica apply + the XREAD wake-up). p50 and p99 in ms.

All processes share this 2-core machine, so the replicas compete with the primary for CPU
(the same holds for redis-server). The table goes to stdout and to
benchmarks/REPLICATION_RESULTS.md (or --output).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import HOST, Conn, redis_benchmark  # noqa: E402
from benchmarks.node_bench import XADD_ARGS  # noqa: E402
from benchmarks.persistence_bench import spawn, terminate, wait_ready  # noqa: E402

LAG_KEY = "lag"
KINDS = (("redis", "redis-server"), ("node", "xshard node"))


def _kind(kind: str) -> str:
    return "redis" if kind == "redis" else "xshard"


def start_set(kind: str, replicas: int, root: Path) -> list[harness.ServerProc]:
    """A primary and `replicas` replicas (attached and synced) of one implementation."""
    pdir = root / "primary"
    pdir.mkdir(parents=True, exist_ok=True)
    primary = spawn(_kind(kind), f"{kind} primary", pdir, ["--repl-diskless-sync", "no"], None)
    wait_ready(primary, 60)
    out = [primary]
    for i in range(replicas):
        d = root / f"replica{i}"
        d.mkdir(parents=True, exist_ok=True)
        r = spawn(_kind(kind), f"{kind} replica{i}", d,
                  ["--replicaof", f"{HOST} {primary.port}"], None)
        wait_ready(r, 60)
        out.append(r)
    deadline = time.monotonic() + 60
    while replicas:
        with Conn(primary.port) as c:
            f = harness.info_fields(c, "replication")
        online = sum(1 for k, v in f.items() if k.startswith("slave") and "state=online" in v)
        if online == replicas:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind}: replicas did not come online: {f}")
        time.sleep(0.05)
    return out


def wait_caught_up(procs: list[harness.ServerProc], timeout: float = 120) -> float:
    """Seconds until every replica's offset reached the primary's (a throughput run leaves
    the replicas some way behind; lag must be measured from a quiet start)."""
    t0 = time.monotonic()
    while True:
        with Conn(procs[0].port) as c:
            target = int(harness.info_fields(c, "replication")["master_repl_offset"])
        offs = []
        for r in procs[1:]:
            with Conn(r.port) as c:
                offs.append(int(harness.info_fields(c, "replication").get("slave_repl_offset", -1)))
        if all(o >= target for o in offs):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"replicas at {offs}, primary at {target}")
        time.sleep(0.05)


def stop_set(procs: list[harness.ServerProc]) -> None:
    for p in reversed(procs):
        terminate(p)


def xadd_rate(primary: harness.ServerProc, n: int) -> tuple[float, float]:
    """(XADD/s, the primary's CPU microseconds per XADD): the second shows what streaming
    to replicas costs the primary itself, apart from the CPU the replicas take from it on a
    shared machine."""
    c0 = harness.cpu_seconds(primary.pid)
    ops = redis_benchmark(primary.port, ["-c", "50", "-n", str(n), *XADD_ARGS],
                          timeout=max(120, n / 500))
    return ops, (harness.cpu_seconds(primary.pid) - c0) * 1e6 / n


# -- lag ------------------------------------------------------------------------------------------
def _writer(port: int, key: str, rate: float, seconds: float, q: mp.Queue) -> None:
    """Send XADD lag * t <send ns> at `rate` per second, in small pipelined ticks."""
    s = socket.create_connection((HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nt\r\n" % (len(key), key.encode())
    sent = replies = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    pending = b""
    s.setblocking(False)
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = int((now - t0) * rate) - sent
        if due > 0:
            stamp = b"%d" % time.time_ns()
            cmd = head + b"$%d\r\n%s\r\n" % (len(stamp), stamp)
            pending += cmd * due
            sent += due
        if pending:
            try:
                n = s.send(pending)
                pending = pending[n:]
            except BlockingIOError:
                pass
        try:
            while True:
                data = s.recv(1 << 20)
                if not data:
                    break
                replies += data.count(b"\r\n") // 2
        except BlockingIOError:
            pass
        time.sleep(0.001)
    s.setblocking(True)
    if pending:
        s.sendall(pending)
    while replies < sent:
        data = s.recv(1 << 20)
        if not data:
            break
        replies += data.count(b"\r\n") // 2
    s.close()
    q.put(("writer", sent, time.perf_counter() - t0))


def _reader(port: int, key: str, expect_seconds: float, q: mp.Queue) -> None:
    """XREAD BLOCK on a replica; per entry, arrival time minus the entry's send time."""
    import hiredis

    c = Conn(port, timeout=expect_seconds + 30)
    last = b"0-0"
    lags: list[float] = []
    deadline = time.monotonic() + expect_seconds + 10
    q.put(("reader-ready", 0, 0))
    idle = 0
    while time.monotonic() < deadline:
        r = c.call("XREAD", "COUNT", "10000", "BLOCK", "500", "STREAMS", key, last)
        now = time.time_ns()
        if r is None or isinstance(r, hiredis.ReplyError):
            idle += 1
            if lags and idle >= 2:
                break
            continue
        idle = 0
        for _key, entries in r:
            for eid, fields in entries:
                lags.append((now - int(fields[1])) / 1e6)
                last = eid
    c.close()
    q.put(("reader", lags, 0))


def measure_lag(primary: int, replica: int, rate: float, seconds: float) -> tuple[float, float, int, float]:
    """(p50 ms, p99 ms, entries seen, achieved rate)."""
    ctx = mp.get_context("fork")
    q: mp.Queue = ctx.Queue()
    key = f"{LAG_KEY}-{time.time_ns()}"  # a fresh stream per run: only this run's entries
    rd = ctx.Process(target=_reader, args=(replica, key, seconds, q))
    rd.start()
    msg = q.get(timeout=30)
    assert msg[0] == "reader-ready"
    time.sleep(0.2)
    wr = ctx.Process(target=_writer, args=(primary, key, rate, seconds, q))
    wr.start()
    got: dict[str, tuple] = {}
    while len(got) < 2:
        m = q.get(timeout=seconds + 60)
        got[m[0]] = m
    wr.join()
    rd.join()
    lags = sorted(got["reader"][1])
    sent, wall = got["writer"][1], got["writer"][2]
    if not lags:
        raise RuntimeError("the replica saw no entries")
    p50 = lags[len(lags) // 2]
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    return p50, p99, len(lags), sent / wall


# -- driver ---------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> list[tuple[str, str, dict[str, float]]]:
    n = 20000 if args.quick else 200000
    lag_s = 2.0 if args.quick else 10.0
    rows: dict[tuple[str, str], dict[str, float]] = {}

    def put(name: str, metric: str, label: str, v: float) -> None:
        rows.setdefault((name, metric), {})[label] = v

    def idle() -> None:
        if args.idle_wait > 0:
            busy = harness.wait_for_idle(args.idle_wait)
            put("machine busy before a measurement (max)", "cores", label,
                max(busy, rows.get(("machine busy before a measurement (max)", "cores"),
                                   {}).get(label, 0.001)))

    for kind, label in KINDS:
        root = Path(tempfile.mkdtemp(prefix=f"rbench-{kind}-"))
        try:
            procs = start_set(kind, 0, root / "solo")
            try:
                idle()
                solo, solo_us = xadd_rate(procs[0], n)
            finally:
                stop_set(procs)
            put("xadd, no replicas", "ops/s", label, solo)
            put("xadd, no replicas", "primary CPU us/op", label, solo_us)
            procs = start_set(kind, 2, root / "set")
            try:
                idle()
                with2, with2_us = xadd_rate(procs[0], n)
                put("xadd, 2 replicas", "ops/s", label, with2)
                put("xadd, 2 replicas", "primary CPU us/op", label, with2_us)
                put("xadd 2 replicas / none", "ratio (target >= 0.85)", label, with2 / solo)
                put("replicas catch up after the xadd run", "seconds", label,
                    max(wait_caught_up(procs), 0.001))
                target = 0.8 * solo
                idle()
                p50, p99, seen, achieved = measure_lag(procs[0].port, procs[1].port, target, lag_s)
                put("replica lag at 80% load", "p50 ms", label, p50)
                put("replica lag at 80% load", "p99 ms (target < 100)", label, p99)
                put("replica lag at 80% load", "offered XADD/s", label, achieved)
                put("replica lag at 80% load", "entries measured", label, seen)
            finally:
                stop_set(procs)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return [(name, metric, vals) for (name, metric), vals in rows.items()]


def fmt(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


def render(rows: list[tuple[str, str, dict[str, float]]], argv: list[str]) -> str:
    a, b = KINDS[0][1], KINDS[1][1]
    lines = ["# Replication benchmark", "",
             f"- Command: `python benchmarks/replication_bench.py {' '.join(argv)}`".rstrip(),
             f"- Date: {time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"- Machine: {os.cpu_count()} CPUs, shared by primary, 2 replicas and load generators",
             "", f"| measurement | metric | {a} | {b} | ratio |", "|---|---|---|---|---|"]
    for name, metric, vals in rows:
        x, y = vals.get(a, 0.0), vals.get(b, 0.0)
        ratio = y / x if x else 0.0
        lines.append(f"| {name} | {metric} | {fmt(x)} | {fmt(y)} | {fmt(ratio)} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small runs (a smoke test)")
    ap.add_argument("--idle-wait", type=float, default=None,
                    help="seconds to wait for an idle machine before each measurement "
                         "(default 20, 0 with --quick)")
    ap.add_argument("--output", default=str(Path(__file__).with_name("REPLICATION_RESULTS.md")))
    args = ap.parse_args(argv)
    if args.idle_wait is None:
        args.idle_wait = 0.0 if args.quick else 20.0
    md = render(run(args), argv)
    print(md)
    Path(args.output).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
