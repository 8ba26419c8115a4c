"""Router benchmark (issue 6): XADD through a router against direct to the node, and the
end-to-end delivery latency of a consumer group, side by side with redis-server.

1. Throughput and latency at 50 clients (redis-benchmark, no pipelining): direct to a node,
   through a router in front of that node, and direct to redis-server. Targets: router >= 0.6x
   direct, added p50 <= 0.2 ms.
2. Delivery latency: a producer at a fixed rate (10k msg/s by default) and 10 consumers in one
   group (XREADGROUP BLOCK + XACK), through the router to a primary with 1 replica and
   `appendfsync everysec`; the same harness directly against redis-server with 1 replica and
   the same setting. Latency is the time from the producer's XADD call to the consumer seeing
   the entry (the send time travels in the entry), bucketed 0-1, 1-2, 2-3, 3-4, 4-5, >5 ms as
   in the Redis streams guide.
3. `--relay` (issue 10): XADD on 1000 keys (`s:__rand_int__`, 5 field/value pairs) through a
   router in front of 3 nodes against one node direct, all `appendonly no`, 50 clients, at
   pipeline 1 and 16, with the CPU each process used per XADD. Targets: >= 0.8x at P1 and
   >= 0.6x at P16.

    python benchmarks/router_bench.py [--quick] [--rate 10000] [--seconds 10]
    python benchmarks/router_bench.py --relay [--floor] [--output benchmarks/ROUTER_RESULTS.md]

`--floor` puts proxies written in C in the same places, on the same machine and in the same run:
twemproxy (nutcracker, which parses RESP and pipelines every client onto one connection per
server, like the router; it has no stream commands, so SET) in front of 3 redis-servers against
one, and haproxy in TCP mode in front of one redis-server and of one node. They are the floor a
proxy hop sets on this machine: `apt-get install haproxy nutcracker` (benchmarks only).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime as _dt
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402

BUCKETS = ["0-1", "1-2", "2-3", "3-4", "4-5", ">5"]


# The relay measurement's XADD (issue 10): 1000 keys, so a router spreads it over every shard.
RELAY_XADD = ["-r", "1000", "XADD", "s:__rand_int__", "*",
              *[tok for i in range(1, 6) for tok in (f"f{i}", f"value{i:05d}")]]


def bench(port: int, clients: int, n: int, pipeline: int = 1,
          cmd: tuple[str, ...] | list[str] = ("XADD", "bench", "*", "f", "v")
          ) -> tuple[float, float, float]:
    """(ops/s, p50 ms, p99 ms) of an XADD from redis-benchmark."""
    exe = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
    res = subprocess.run([exe, "-h", harness.HOST, "-p", str(port), "--csv", "-c", str(clients), "-n",
                          str(n), "-P", str(pipeline), *cmd], capture_output=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    rows = [r for r in csv.reader(io.StringIO(res.stdout.decode())) if r and r[0] != "test"]
    if not rows:
        raise RuntimeError(res.stdout.decode()[-300:] + res.stderr.decode()[-300:])
    row = rows[-1]
    return float(row[1]), float(row[4]), float(row[6])


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.by_port: dict[int, subprocess.Popen] = {}
        self.dir = Path(tempfile.mkdtemp(prefix="router-bench-"))

    def start(self, name: str, argv: list[str], port: int) -> int:
        log = open(self.dir / f"{name}.log", "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=harness.REPO_ROOT,
                             stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append(p)
        self.by_port[port] = p
        harness.wait_for_ping(port, 30, p)
        return port

    def node(self, name: str, *extra: str) -> int:
        port = harness.free_port()
        d = self.dir / name
        d.mkdir()
        return self.start(name, [sys.executable, "-m", "control.cli", "node", "--port", str(port),
                                 "--dir", str(d), *extra], port)

    def redis(self, name: str, *extra: str) -> int:
        port = harness.free_port()
        d = self.dir / name
        d.mkdir()
        return self.start(name, [shutil.which("redis-server") or "redis-server", "--port",
                                 str(port), "--bind", harness.HOST, "--save", "", "--dir", str(d),
                                 "--daemonize", "no", *extra], port)

    def router(self, node_port: int, replica_port: int | None = None) -> int:
        return self.router_for([(node_port, replica_port)])

    def router_for(self, shards: list[tuple[int, int | None]]) -> int:
        """A router (static topology, no etcd) in front of shards of (primary port, replica
        port or None), the slots split evenly in shard order."""
        nodes: dict[str, dict] = {}
        topo_shards: dict[str, dict] = {}
        slots = []
        per = 16384 // len(shards)
        for i, (prim, rep) in enumerate(shards):
            sid = str(i)
            nodes[f"p{i}"] = {"id": f"p{i}", "host": harness.HOST, "port": prim, "shard": sid,
                              "role": "primary"}
            topo_shards[sid] = {"primary": f"p{i}", "replicas": [], "epoch": 1}
            if rep:
                nodes[f"r{i}"] = {"id": f"r{i}", "host": harness.HOST, "port": rep, "shard": sid,
                                  "role": "replica"}
                topo_shards[sid]["replicas"] = [f"r{i}"]
            slots.append([i * per, 16383 if i == len(shards) - 1 else (i + 1) * per - 1, sid])
        path = self.dir / f"topology-{shards[0][0]}.json"
        path.write_text(json.dumps({"nodes": nodes, "shards": topo_shards, "slots": slots}))
        port = harness.free_port()
        return self.start(f"router-{port}", [sys.executable, "-m", "control.cli", "router",
                                             "--port", str(port), "--topology", str(path)],
                          port)

    def haproxy(self, backend: int) -> int:
        """HAProxy 2.6 in TCP mode, one thread, in front of one server: a proxy hop written in
        C with no RESP logic (each client gets its own backend connection), the floor of what
        one more process on the path costs."""
        port = harness.free_port()
        cfg = self.dir / f"haproxy-{port}.cfg"
        cfg.write_text(f"global\n  nbthread 1\n  maxconn 4000\n"
                       f"defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n"
                       f"  timeout server 1h\n"
                       f"listen relay\n  bind {harness.HOST}:{port}\n  server b {harness.HOST}:{backend}\n")
        exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
        return self.start(f"haproxy-{port}", [exe, "-db", "-f", str(cfg)], port)

    def twemproxy(self, backends: list[int]) -> int:
        """twemproxy (nutcracker 0.5) in front of redis-servers: a RESP-parsing proxy in C that,
        like the router, pipelines every client's requests to a server over one connection.
        It has no stream commands, so it is measured on SET."""
        port = harness.free_port()
        cfg = self.dir / f"nutcracker-{port}.yml"
        cfg.write_text(f"pool:\n  listen: {harness.HOST}:{port}\n  hash: crc16\n"
                       f"  distribution: modula\n  redis: true\n  preconnect: true\n"
                       f"  servers:\n" + "".join(f"   - {harness.HOST}:{b}:1\n" for b in backends))
        exe = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
        return self.start(f"nutcracker-{port}", [exe, "-c", str(cfg), "-v", "2", "-s",
                                                 str(harness.free_port())], port)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


async def delivery(port: int, rate: int, seconds: float, consumers: int = 10) -> dict[str, float]:
    """Produce at `rate`/s for `seconds`; return the share of deliveries per latency bucket."""
    import redis.asyncio as aredis

    key = f"lat-{time.time_ns()}"
    admin = aredis.Redis(host=harness.HOST, port=port, protocol=2)
    await admin.xgroup_create(key, "g", "$", mkstream=True)
    lat: list[float] = []
    stop = asyncio.Event()

    async def consumer(i: int) -> None:
        r = aredis.Redis(host=harness.HOST, port=port, protocol=2)
        while not stop.is_set():
            got = await r.xreadgroup("g", f"c{i}", {key: ">"}, count=50, block=100)
            now = time.perf_counter_ns()
            for _, entries in got or []:
                ids = []
                for eid, fields in entries:
                    lat.append((now - int(fields[b"t"])) / 1e6)
                    ids.append(eid)
                if ids:
                    await r.xack(key, "g", *ids)
        await r.aclose()

    produced = [0]

    async def producer() -> None:
        r = aredis.Redis(host=harness.HOST, port=port, protocol=2)
        batch = max(1, rate // 1000)  # one small burst every millisecond
        start = time.perf_counter()
        sent = 0
        while time.perf_counter() - start < seconds:
            target = int((time.perf_counter() - start) * rate)
            while sent < target:
                p = r.pipeline(transaction=False)
                for _ in range(min(batch, target - sent)):
                    p.xadd(key, {"t": time.perf_counter_ns()})
                    sent += 1
                await p.execute()
            await asyncio.sleep(0.0005)
        produced[0] = sent
        await r.aclose()

    tasks = [asyncio.create_task(consumer(i)) for i in range(consumers)]
    await producer()
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.gather(*tasks)
    await admin.aclose()
    n = len(lat) or 1
    edges = [1, 2, 3, 4, 5]
    counts = [0] * 6
    for x in lat:
        i = 0
        while i < 5 and x >= edges[i]:
            i += 1
        counts[i] += 1
    out = {b: c / n for b, c in zip(BUCKETS, counts, strict=True)}
    lat.sort()
    out["p50"] = lat[len(lat) // 2] if lat else 0.0
    out["p99"] = lat[int(len(lat) * 0.99)] if lat else 0.0
    out["n"] = len(lat)
    out["produced"] = produced[0]
    return out


RELAY_SET = ["-r", "1000", "SET", "k:__rand_int__", "value00001"]


def _pairs(procs: Procs, floor: bool) -> list[tuple[str, list[str], int, int]]:
    """(label, command, direct port, proxied port) for each pair to measure.

    The first pair is issue 10's target. With `floor`, the same shape with proxies written in
    C: they show what one more process on the path costs on this machine whatever its
    language, so a ratio the router misses can be read against what a C proxy reaches."""
    node = procs.node("single")
    shards = [procs.node(f"shard{i}") for i in range(3)]
    pairs = [("XADD: one node / router + 3 nodes", RELAY_XADD, node,
              procs.router_for([(p, None) for p in shards]))]
    if floor:
        redis = procs.redis("rsingle")
        backends = [procs.redis(f"rshard{i}") for i in range(3)]
        pairs += [("SET: one redis-server / twemproxy + 3 redis-servers", RELAY_SET, redis,
                   procs.twemproxy(backends)),
                  ("XADD: one redis-server / haproxy (tcp) + that redis-server", RELAY_XADD,
                   redis, procs.haproxy(redis)),
                  ("XADD: one node / haproxy (tcp) + that node", RELAY_XADD, node,
                   procs.haproxy(node))]
    return pairs


def relay(n: int, repeat: int = 3, floor: bool = False) -> str:
    """Issue 10's router target: XADD on 1000 keys through a router in front of 3 nodes
    against one node direct (all appendonly no), 50 clients, at pipeline 1 and 16, in one run;
    with the CPU each server process used per request (the router's is its relay cost).
    `floor` adds C proxies in the same places (see `_pairs`).

    Each pair (direct, then through the proxy) is measured `repeat` times, alternating: on
    2 CPUs a run's throughput depends on where the scheduler puts redis-benchmark (beside the
    node or on the other CPU), and back-to-back runs of the same setup differ by up to 2x. Every
    run is reported; the ratio of the medians is the figure."""
    procs = Procs()
    rows = []
    try:
        pairs = _pairs(procs, floor)
        for label, cmd, direct_port, proxy_port in pairs:
            for pipeline in (1, 16):
                bench(direct_port, 50, min(n, 20000), pipeline, cmd)  # warm up both
                bench(proxy_port, 50, min(n, 20000), pipeline, cmd)
                runs = []
                for _ in range(repeat):
                    cpu0 = harness.cpu_seconds(procs.by_port[direct_port].pid)
                    direct = bench(direct_port, 50, n, pipeline, cmd)
                    direct_us = (harness.cpu_seconds(procs.by_port[direct_port].pid) - cpu0) / n * 1e6
                    cpu0 = harness.cpu_seconds(procs.by_port[proxy_port].pid)
                    routed = bench(proxy_port, 50, n, pipeline, cmd)
                    proxy_us = (harness.cpu_seconds(procs.by_port[proxy_port].pid) - cpu0) / n * 1e6
                    runs.append((direct, routed, direct_us, proxy_us))
                rows.append((label, pipeline, runs))
    finally:
        procs.stop()
    load = os.getloadavg()
    lines = ["| 50 clients, 1000 keys: direct / proxied | pipeline | direct ops/s (each run) "
             "| proxied ops/s (each run) | ratio of the medians | target | p50 ms direct / "
             "proxied (medians) | CPU us per request: direct server / proxy process (medians) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, pipeline, runs in rows:
        target = 0.8 if pipeline == 1 else 0.6
        direct_ops = [r[0][0] for r in runs]
        routed_ops = [r[1][0] for r in runs]
        ratio = statistics.median(routed_ops) / statistics.median(direct_ops)
        verdict = (f"{target} ({'met' if ratio >= target else 'NOT met'})"
                   if label.startswith("XADD: one node / router") else "(floor)")
        lines.append(
            f"| {label} | {pipeline} | {', '.join(f'{x:,.0f}' for x in direct_ops)} | "
            f"{', '.join(f'{x:,.0f}' for x in routed_ops)} | {ratio:.2f} | {verdict} | "
            f"{statistics.median(r[0][1] for r in runs):.2f} / "
            f"{statistics.median(r[1][1] for r in runs):.2f} | "
            f"{statistics.median(r[2] for r in runs):.1f} / "
            f"{statistics.median(r[3] for r in runs):.1f} |")
    lines.append(f"\n{n} requests per run, {repeat} alternating runs per row; load average "
                 f"{load[0]:.1f} after, {os.cpu_count()} CPUs, nothing pinned.")
    return "\n".join(lines)


def append_result(path: str, text: str) -> None:
    """A run's markdown, under a heading with the time and the command line that made it."""
    with open(path, "a") as f:
        f.write(f"\n## {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC: "
                f"`{' '.join(sys.argv)}`\n\n{text}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small runs (smoke test)")
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--relay", action="store_true",
                    help="only issue 10's relay target: router + 3 nodes vs one node")
    ap.add_argument("--floor", action="store_true",
                    help="--relay: also C proxies (twemproxy, haproxy) in the same places")
    ap.add_argument("--output", default="", help="append the relay table here (markdown)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="--relay: alternating runs per pipeline depth (the median counts)")
    a = ap.parse_args(argv)
    n = 5000 if a.quick else 100000
    if a.relay:
        text = relay(n, 1 if a.quick else a.repeat, a.floor)
        print(text)
        if a.output:
            append_result(a.output, text)
        return 0
    rate = 1000 if a.quick else a.rate
    seconds = 1.0 if a.quick else a.seconds
    procs = Procs()
    try:
        node = procs.node("node")
        router = procs.router(node)
        redis_port = procs.redis("redis")
        direct = bench(node, 50, n)
        routed = bench(router, 50, n)
        ref = bench(redis_port, 50, n)
        print("XADD, 50 clients        ops/s      p50 ms   p99 ms")
        for label, (ops, p50, p99) in (("redis-server direct", ref), ("node direct", direct),
                                       ("node via router", routed)):
            print(f"  {label:22s} {ops:9.0f}  {p50:7.3f}  {p99:7.3f}")
        ratio = routed[0] / direct[0]
        added = routed[1] - direct[1]
        print(f"router / direct throughput {ratio:.2f} (target >= 0.6: "
              f"{'met' if ratio >= 0.6 else 'NOT met'}); added p50 {added:.3f} ms "
              f"(target <= 0.2: {'met' if added <= 0.2 else 'NOT met'})")
        # Delivery latency: primary + 1 replica, everysec, through the router.
        prim = procs.node("primary", "--appendonly", "yes", "--appendfsync", "everysec")
        rep = procs.node("replica", "--replicaof", f"{harness.HOST} {prim}")
        r2 = procs.router(prim, rep)
        rprim = procs.redis("rprimary", "--appendonly", "yes", "--appendfsync", "everysec")
        procs.redis("rreplica", "--replicaof", harness.HOST, str(rprim))
        ours = asyncio.run(delivery(r2, rate, seconds))
        theirs = asyncio.run(delivery(rprim, rate, seconds))
        print(f"\ndelivery latency, {rate} msg/s, 10 consumers, 1 replica, everysec")
        print("  bucket ms   redis-server direct   xshard via router")
        for b in BUCKETS:
            print(f"  {b:8s}   {theirs[b] * 100:18.1f}%   {ours[b] * 100:16.1f}%")
        print(f"  p50 ms     {theirs['p50']:18.2f}    {ours['p50']:16.2f}")
        print(f"  p99 ms     {theirs['p99']:18.2f}    {ours['p99']:16.2f}")
        print(f"  produced   {theirs['produced']:18.0f}    {ours['produced']:16.0f}")
        print(f"  delivered  {theirs['n']:18.0f}    {ours['n']:16.0f}")
    finally:
        procs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
