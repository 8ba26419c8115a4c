"""Online slot moves: how fast slots move, how long their writes pause, and what the other
slots' writers see meanwhile.

One etcd, two shards (a primary each, plus a replica with --replicas 1), one controller. The
slots to move are filled with streams first; then a writer XADDs to keys of slots that stay
put while `xshard move-slots --wait` moves the filled slots from shard 0 to shard 1.
Reported: entries/s and MB/s moved (payload bytes the source sent, over the wall time of
the move command), the longest write pause of a moving slot (measured by the source: from
the pause to the end of the switch; INFO cluster slot_move_longest_pause_ms), and the p50/p99
XADD latency on slots that are not moving, during the moves and before them.

    python benchmarks/reshard_bench.py [--slots 64 --entries 200000 --replicas 1] [--quick]
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

from control.etcd import EtcdProcess  # noqa: E402
from control.ports import free_port  # noqa: E402
from control.records import owners  # noqa: E402
from control.store import read_view  # noqa: E402
from node.slots import key_slot  # noqa: E402


def keys_in(slots: set[int], per_slot: int) -> list[str]:
    got: dict[int, list[str]] = {s: [] for s in slots}
    i = 0
    while any(len(v) < per_slot for v in got.values()):
        k = f"b{i}"
        s = key_slot(k.encode())
        if s in got and len(got[s]) < per_slot:
            got[s].append(k)
        i += 1
    return [k for v in got.values() for k in v]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=64, help="slots to move")
    ap.add_argument("--entries", type=int, default=200_000, help="entries in the moved slots")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    a = ap.parse_args()
    if a.quick:
        a.slots, a.entries, a.replicas = 8, 4000, 0
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
        moving = set(mine[-a.slots:])
        still = set(mine[:a.slots])
        src = redis.Redis(port=ports[v.shards["0"].value.primary])
        mkeys = keys_in(moving, 2)
        per = max(1, a.entries // len(mkeys))
        fields = {"sensor": "t-17", "value": "21.5", "unit": "C", "site": "north-3"}
        for k in mkeys:
            p = src.pipeline(transaction=False)
            for _ in range(per):
                p.xadd(k, fields)
            p.execute()
            src.xgroup_create(k, "g", "0")
            src.xreadgroup("g", "c", {k: ">"}, count=per // 2)
        skeys = keys_in(still, 1)
        lat: dict[str, list[float]] = {"before": [], "during": []}
        phase = ["before"]
        stop = threading.Event()

        def writer() -> None:
            c = redis.Redis(port=ports[v.shards["0"].value.primary])
            n = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                c.xadd(skeys[n % len(skeys)], {"n": str(n)})
                lat[phase[0]].append((time.perf_counter() - t0) * 1000)
                n += 1

        w = threading.Thread(target=writer)
        w.start()
        time.sleep(1.0)
        phase[0] = "during"
        t0 = time.monotonic()
        r = run("move-slots", "--etcd", url, "--cluster", cluster, "--to", "1", "--slots",
                ",".join(map(str, sorted(moving))), "--wait")
        el = time.monotonic() - t0
        stop.set()
        w.join()
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return 1
        info = src.info("cluster")
        moved = int(info["slot_move_bytes_sent"])
        print(f"load: {os.getloadavg()[0]:.2f} (1-minute average, {os.cpu_count()} CPUs)")
        print(f"moved {a.slots} slots, {per * len(mkeys)} entries in {len(mkeys)} streams "
              f"(groups, PELs included), {moved / 1e6:.1f} MB in {el:.1f}s: "
              f"{per * len(mkeys) / el:.0f} entries/s, {moved / 1e6 / el:.2f} MB/s")
        print(f"longest write pause on a moving slot: {info['slot_move_longest_pause_ms']} ms "
              f"(target: 50 ms)")
        for ph in ("before", "during"):
            xs = lat[ph]
            print(f"XADD on slots not moving, {ph} the moves: p50 {pct(xs, .5):.2f} ms, "
                  f"p99 {pct(xs, .99):.2f} ms ({len(xs)} writes)")
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
