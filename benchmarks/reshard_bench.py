"""Online slot moves: how fast slots move, how long their writes pause, what the other slots'
writers see meanwhile, and how long the nodes' loops stall.

One etcd, two shards (a primary each, plus a replica with --replicas 1), one controller. The
slots to move are filled first: `--entries` entries over two streams per slot (with a
consumer group and a PEL), plus one slot holding a single long stream of `--big` entries.
Then a writer XADDs to keys of slots that stay put, and a PING per millisecond goes to the
source and to the target primary, while `xshard move-slots --wait` moves the filled slots
from shard 0 to shard 1.

Reported: entries/s and MB/s moved (image bytes the source sent, over the wall time of the
move command), the longest write pause of a moving slot (measured by the source, from the
pause to its end; INFO cluster slot_move_longest_pause_ms), p50/p99 XADD latency on the
slots that stay put before and during the moves, and the longest PING round trip to each
primary before and during them: the longest stall of its event loop, serializing (source)
or loading (target) the long stream included.

    python benchmarks/reshard_bench.py [--slots 64 --entries 200000 --big 300000
                                        --replicas 1] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from base.records import owners  # noqa: E402
from base.store import read_view  # noqa: E402
from control.etcd import EtcdProcess  # noqa: E402
from control.ports import free_port  # noqa: E402
from node.slots import keys_in_slots  # noqa: E402

FIELDS = {"sensor": "t-17", "value": "21.5", "unit": "C", "site": "north-3"}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0.0


def fill(r: redis.Redis, key: str, n: int) -> None:
    """n entries, a group that read half of them and acknowledged none (a PEL)."""
    for i in range(0, n, 10_000):
        p = r.pipeline(transaction=False)
        for _ in range(min(10_000, n - i)):
            p.xadd(key, FIELDS)
        p.execute()
    r.xgroup_create(key, "g", "0")
    r.xreadgroup("g", "c", {key: ">"}, count=max(1, n // 2))


class Probe(threading.Thread):
    """PING a node once a millisecond; round trips (ms) per phase."""

    def __init__(self, port: int, phase: list[str]) -> None:
        super().__init__(daemon=True)
        self.r = redis.Redis(port=port)
        self.phase = phase
        self.rtt: dict[str, list[float]] = {"before": [], "during": []}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.r.ping()
            self.rtt[self.phase[0]].append((time.perf_counter() - t0) * 1000)
            time.sleep(0.001)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=64, help="slots to move")
    ap.add_argument("--entries", type=int, default=200_000,
                    help="entries in the moved slots, two streams a slot")
    ap.add_argument("--big", type=int, default=300_000,
                    help="entries of the one long stream (in a slot of its own)")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    a = ap.parse_args()
    if a.quick:
        a.slots, a.entries, a.big, a.replicas = 8, 4000, 20_000, 0
    tmp = Path(tempfile.mkdtemp(prefix="reshard-bench-"))
    etcd = EtcdProcess(tmp / "etcd")
    url = etcd.start()
    cluster = "bench"
    py = [sys.executable, "-m", "control.cli"]
    procs: list[subprocess.Popen] = []
    ports: dict[str, int] = {}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(py + list(args), cwd=REPO, capture_output=True, text=True)

    def node(nid: str, shard: str) -> None:
        d = tmp / nid
        d.mkdir()
        ports[nid] = free_port()
        procs.append(subprocess.Popen(
            py + ["node", "--port", str(ports[nid]), "--dir", str(d), "--etcd", url,
                  "--cluster", cluster, "--shard", shard, "--node-id", nid],
            cwd=REPO, stdout=open(d / "node.log", "ab"), stderr=subprocess.STDOUT))

    try:
        assert run("create", "--etcd", url, "--cluster", cluster, "--shards", "2").returncode == 0
        for i in range(1 + a.replicas):
            for s in ("0", "1"):
                node(f"s{s}n{i}", s)
            while True:
                v = read_view(url, cluster)
                if all(v.live(e.value.primary) for e in v.shards.values()) and \
                        len(v.nodes) == 2 * (i + 1):
                    break
                time.sleep(0.1)
        procs.append(subprocess.Popen(py + ["controller", "--etcd", url, "--cluster", cluster],
                                      cwd=REPO, stdout=open(tmp / "controller.log", "ab"),
                                      stderr=subprocess.STDOUT))
        v = read_view(url, cluster)
        owner = owners(v.slots.value)
        mine = [s for s in range(16384) if owner[s] == "0"]
        moving = mine[-a.slots:]
        big_slot = mine[-a.slots - 1]
        still = mine[:a.slots]
        src_port = ports[v.shards["0"].value.primary]
        dst_port = ports[v.shards["1"].value.primary]
        src = redis.Redis(port=src_port)
        mkeys = keys_in_slots(moving, 2, prefix="b")
        per = max(1, a.entries // len(mkeys))
        for k in mkeys:
            fill(src, k, per)
        big = keys_in_slots([big_slot], 1, prefix="big")[0]
        fill(src, big, a.big)
        skeys = keys_in_slots(still, 1, prefix="s")
        phase = ["before"]
        lat: dict[str, list[float]] = {"before": [], "during": []}
        stop = threading.Event()

        def writer() -> None:
            c = redis.Redis(port=src_port)
            n = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                c.xadd(skeys[n % len(skeys)], {"n": str(n)})
                lat[phase[0]].append((time.perf_counter() - t0) * 1000)
                n += 1

        threads = [threading.Thread(target=writer, daemon=True)]
        probes = [Probe(src_port, phase), Probe(dst_port, phase)]
        for t in [*threads, *probes]:
            t.start()
        time.sleep(2.0)
        phase[0] = "during"
        t0 = time.monotonic()
        r = run("move-slots", "--etcd", url, "--cluster", cluster, "--to", "1", "--slots",
                ",".join(map(str, sorted([*moving, big_slot]))), "--wait")
        el = time.monotonic() - t0
        stop.set()
        for p in probes:
            p.stop.set()
        for t in [*threads, *probes]:
            t.join()
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return 1
        info = src.info("cluster")
        moved = int(info["slot_move_bytes_sent"])
        entries = per * len(mkeys) + a.big
        load = os.getloadavg()
        print(f"load: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15-minute averages, "
              f"{os.cpu_count()} CPUs)")
        print(f"moved {a.slots + 1} slots, {entries} entries in {len(mkeys) + 1} streams (the "
              f"longest {a.big}; groups, PELs included), {moved / 1e6:.1f} MB in {el:.1f}s: "
              f"{entries / el:.0f} entries/s, {moved / 1e6 / el:.2f} MB/s")
        print(f"longest write pause on a moving slot: {info['slot_move_longest_pause_ms']} ms "
              f"(target: 50 ms)")
        for ph in ("before", "during"):
            xs = lat[ph]
            print(f"XADD on slots not moving, {ph} the moves: p50 {pct(xs, .5):.2f} ms, "
                  f"p99 {pct(xs, .99):.2f} ms ({len(xs)} writes)")
        for name, p in (("source", probes[0]), ("target", probes[1])):
            print(f"PING round trip to the {name} primary (its longest loop stall): before "
                  f"max {max(p.rtt['before'] or [0]):.1f} ms, during max "
                  f"{max(p.rtt['during'] or [0]):.1f} ms, p99 {pct(p.rtt['during'], .99):.2f} "
                  "ms")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        etcd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
