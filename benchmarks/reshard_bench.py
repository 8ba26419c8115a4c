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


class Cluster:
    """One etcd, two shards of 1 + `replicas` nodes each and a controller, as processes of
    this checkout; `stop` ends them all and removes their files."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="reshard-bench-"))
        self.etcd = EtcdProcess(self.tmp / "etcd")
        self.url = ""
        self.name = "bench"
        self.procs: list[subprocess.Popen] = []
        self.ports: dict[str, int] = {}

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """`xshard ARGS --etcd URL --cluster NAME`, waited for."""
        return subprocess.run([*_CLI, *args, "--etcd", self.url, "--cluster", self.name],
                              cwd=REPO, capture_output=True, text=True)

    def _spawn(self, log: Path, *args: str) -> None:
        self.procs.append(subprocess.Popen(
            [*_CLI, *args, "--etcd", self.url, "--cluster", self.name], cwd=REPO,
            stdout=open(log, "ab"), stderr=subprocess.STDOUT))

    def _node(self, nid: str, shard: str) -> None:
        d = self.tmp / nid
        d.mkdir()
        self.ports[nid] = free_port()
        self._spawn(d / "node.log", "node", "--port", str(self.ports[nid]), "--dir", str(d),
                    "--shard", shard, "--node-id", nid)

    def start(self, replicas: int) -> None:
        self.url = self.etcd.start()
        assert self.cli("create", "--shards", "2").returncode == 0
        for i in range(1 + replicas):
            for s in ("0", "1"):
                self._node(f"s{s}n{i}", s)
            while True:  # this round's nodes are up (a new primary first, then replicas)
                v = read_view(self.url, self.name)
                if all(v.live(e.value.primary) for e in v.shards.values()) and \
                        len(v.nodes) == 2 * (i + 1):
                    break
                time.sleep(0.1)
        self._spawn(self.tmp / "controller.log", "controller")

    def primary_port(self, shard: str) -> int:
        return self.ports[read_view(self.url, self.name).shards[shard].value.primary]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.etcd.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


_CLI = [sys.executable, "-m", "control.cli"]


class Writer(threading.Thread):
    """XADDs to keys of slots that stay put, one after the other; latencies (ms) per phase."""

    def __init__(self, port: int, keys: list[str], phase: list[str]) -> None:
        super().__init__(daemon=True)
        self.r = redis.Redis(port=port)
        self.keys = keys
        self.phase = phase
        self.lat: dict[str, list[float]] = {"before": [], "during": []}
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.r.xadd(self.keys[n % len(self.keys)], {"n": str(n)})
            self.lat[self.phase[0]].append((time.perf_counter() - t0) * 1000)
            n += 1


def _args() -> argparse.Namespace:
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
    return a


def main() -> int:
    a = _args()
    cl = Cluster()
    try:
        cl.start(a.replicas)
        return measure(cl, a)
    finally:
        cl.stop()


def measure(cl: Cluster, a: argparse.Namespace) -> int:
    """Fill the slots to move, then move them with writers and probes running; report."""
    owner = owners(read_view(cl.url, cl.name).slots.value)
    mine = [s for s in range(16384) if owner[s] == "0"]
    moving, big_slot, still = mine[-a.slots:], mine[-a.slots - 1], mine[:a.slots]
    src_port, dst_port = cl.primary_port("0"), cl.primary_port("1")
    src = redis.Redis(port=src_port)
    mkeys = keys_in_slots(moving, 2, prefix="b")
    per = max(1, a.entries // len(mkeys))
    for k in mkeys:
        fill(src, k, per)
    fill(src, keys_in_slots([big_slot], 1, prefix="big")[0], a.big)
    phase = ["before"]
    writer = Writer(src_port, keys_in_slots(still, 1, prefix="s"), phase)
    probes = [Probe(src_port, phase), Probe(dst_port, phase)]
    for t in [writer, *probes]:
        t.start()
    time.sleep(2.0)
    phase[0] = "during"
    t0 = time.monotonic()
    r = cl.cli("move-slots", "--to", "1", "--slots",
               ",".join(map(str, sorted([*moving, big_slot]))), "--wait")
    el = time.monotonic() - t0
    for t in [writer, *probes]:
        t.stop.set()
    for t in [writer, *probes]:
        t.join()
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        return 1
    report(a, src.info("cluster"), per * len(mkeys) + a.big, len(mkeys) + 1, el, writer,
           probes)
    return 0


def report(a: argparse.Namespace, info: dict, entries: int, streams: int, el: float,
           writer: Writer, probes: list[Probe]) -> None:
    moved = int(info["slot_move_bytes_sent"])
    load = os.getloadavg()
    print(f"load: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15-minute averages, "
          f"{os.cpu_count()} CPUs)")
    print(f"moved {a.slots + 1} slots, {entries} entries in {streams} streams (the "
          f"longest {a.big}; groups, PELs included), {moved / 1e6:.1f} MB in {el:.1f}s: "
          f"{entries / el:.0f} entries/s, {moved / 1e6 / el:.2f} MB/s")
    print(f"longest write pause on a moving slot: {info['slot_move_longest_pause_ms']} ms "
          f"(target: 50 ms)")
    for ph in ("before", "during"):
        xs = writer.lat[ph]
        print(f"XADD on slots not moving, {ph} the moves: p50 {pct(xs, .5):.2f} ms, "
              f"p99 {pct(xs, .99):.2f} ms ({len(xs)} writes)")
    for name, p in (("source", probes[0]), ("target", probes[1])):
        print(f"PING round trip to the {name} primary (its longest loop stall): before "
              f"max {max(p.rtt['before'] or [0]):.1f} ms, during max "
              f"{max(p.rtt['during'] or [0]):.1f} ms, p99 {pct(p.rtt['during'], .99):.2f} "
              "ms")


if __name__ == "__main__":
    sys.exit(main())
