"""Planned switchover under load: the longest XADD a router client sees while `xshard failover
SHARD` hands the shard to its replica (issue 15 target: <= 100 ms), and what it sees without a
switchover over windows of the same length (the machine's own noise).

One etcd, one shard of a primary and a replica, a controller and a router. Writers do XADD then
WAIT 1 through the router in a loop. Each run waits --gap seconds, then runs `xshard failover
0` and records the longest XADD that overlapped the command, the command's time and the pause
it reports; the baseline is the longest XADD in the quiet --gap window before each run. Every
acknowledged write is checked on the final primary at the end.

    python benchmarks/switchover_bench.py [--runs 10] [--writers 4] [--gap 1.5]
    python benchmarks/switchover_bench.py --output benchmarks/FAILOVER_RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.etcdcluster import BenchCluster  # noqa: E402
from control.ports import free_port  # noqa: E402


class Writers:
    """XADD + WAIT 1 through the router; every XADD's (start, end) and every acked entry.
    Also the load of tests/control/test_switchover.py (`with Writers(port, n) as w:`)."""

    def __init__(self, port: int, n: int) -> None:
        self.port = port
        self.spans: list[tuple[float, float]] = []
        self.acked: list[tuple[str, bytes]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(w,), daemon=True)
                        for w in range(n)]

    def run(self, w: int) -> None:
        r = redis.Redis(port=self.port, socket_timeout=30)
        i = 0
        while not self.stop.is_set():
            key = f"w{w}-{i % 16}"
            t0 = time.monotonic()
            try:
                eid = r.xadd(key, {"w": w, "i": i})
                t1 = time.monotonic()
                acks = r.execute_command("WAIT", 1, 2000)
            except redis.RedisError as e:
                with self.lock:
                    self.errors.append(f"{type(e).__name__}: {e}")
                continue
            finally:
                i += 1
            with self.lock:
                self.spans.append((t0, t1))
                if acks >= 1:
                    self.acked.append((key, eid))

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def longest_ms(self, a: float = 0.0, b: float = float("inf")) -> tuple[float, int]:
        """The longest XADD that overlapped [a, b], and how many did."""
        with self.lock:
            xs = [(t1 - t0) * 1000 for t0, t1 in self.spans if t1 >= a and t0 <= b]
        return (max(xs) if xs else 0.0), len(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--gap", type=float, default=1.5, help="seconds of plain load before each "
                    "switchover (also the baseline window)")
    ap.add_argument("--output", default="", help="write the results as Markdown here")
    args = ap.parse_args()
    bc = BenchCluster("switchover-bench-")
    rows: list[tuple[int, str, float, float, float, float, int]] = []
    w: Writers | None = None
    try:
        for i in range(2):
            bc.spawn_node(f"n{i}", free_port())
            while len(bc.view().shards["0"].value.members()) < i + 1:
                time.sleep(0.1)
        bc.spawn("controller", "controller")
        rport = free_port()
        bc.spawn("router", "router", "--port", str(rport))
        while True:
            try:
                redis.Redis(port=rport).xadd("warmup", {"a": 1})
                break
            except redis.RedisError:
                time.sleep(0.1)
        w = Writers(rport, args.writers).__enter__()
        for run in range(args.runs):
            a = time.monotonic()
            time.sleep(args.gap)
            t0 = time.monotonic()
            base, _ = w.longest_ms(a, t0 - 0.05)
            try:
                res = bc.xshard("failover", "0")
            except subprocess.CalledProcessError as e:
                print(f"run {run}: failover failed: {e.stderr.strip()}", flush=True)
                continue
            t1 = time.monotonic()
            time.sleep(0.3)  # let the XADDs in flight at the end finish
            worst, n = w.longest_ms(t0, t1)
            m = re.search(r"(\S+) is the new primary .*waited (\d+) ms", res.stdout)
            new, paused = (m.group(1), float(m.group(2))) if m else ("?", float("nan"))
            rows.append((run, new, worst, base, (t1 - t0) * 1000, paused, n))
            print(f"run {run}: -> {new}: longest XADD {worst:.1f} ms (quiet window before: "
                  f"{base:.1f} ms), command {(t1 - t0) * 1000:.0f} ms, writes paused "
                  f"{paused:.0f} ms, {n} XADDs overlapped", flush=True)
        w.__exit__()
        r = redis.Redis(port=rport)
        lost = sum(1 for key, eid in w.acked if not r.xrange(key, eid, eid))
    finally:
        if w is not None:
            w.stop.set()
        bc.stop()
    worst = sorted(x[2] for x in rows)
    base = sorted(x[3] for x in rows)
    load = os.getloadavg()
    lines = [
        "| run | new primary | longest XADD during switchover (ms) | longest XADD, quiet "
        "window before (ms) | `xshard failover` (ms) | writes paused (ms) | XADDs overlapping |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r_[0]} | {r_[1]} | {r_[2]:.1f} | {r_[3]:.1f} | {r_[4]:.0f} | {r_[5]:.0f} | "
          f"{r_[6]} |" for r_ in rows),
        "",
        f"Switchovers: {len(rows)} of {args.runs}; longest XADD during one: median "
        f"{worst[len(worst) // 2]:.1f} ms, max {worst[-1]:.1f} ms (target 100 ms); quiet "
        f"windows: median {base[len(base) // 2]:.1f} ms, max {base[-1]:.1f} ms."
        if rows else "No switchover succeeded.",
        f"Client errors: {len(w.errors) if w else '?'}; acknowledged writes: "
        f"{len(w.acked) if w else 0}, lost: {lost}.",
        f"Load: {args.writers} writers (XADD + WAIT 1) through one router, one shard of two "
        f"nodes; machine load average after the run {load[0]:.2f} / {load[1]:.2f} / "
        f"{load[2]:.2f} on {os.cpu_count()} CPUs.",
    ]
    print("\n".join(lines))
    if w is not None and w.errors:
        print("errors:", w.errors[:5])
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0 if rows and not lost and not (w and w.errors) else 1


if __name__ == "__main__":
    sys.exit(main())
