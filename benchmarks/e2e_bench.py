"""Delivery latency of a consumer group, with the load offered from separate processes.

    python benchmarks/e2e_bench.py [--rate 10000] [--seconds 10] [--consumers 10]
                                   [--producers 2] [--targets redis,node,router,router3]
                                   [--quick] [--output PATH]

router_bench.py runs its producer and consumers in one asyncio process, which offers at most
3-5k entries/s on this machine. Here every producer and every consumer is a process of its
own with a raw hiredis socket (no client library on the path):

- producers: together `rate` entries/s, each sending a small pipelined burst every
  millisecond, paced on the clock (a late producer catches up rather than lowering the rate);
  an entry carries its send time (CLOCK_MONOTONIC, the same clock in every process);
- consumers: one group, `XREADGROUP GROUP g cN COUNT 100 BLOCK 100 STREAMS key >`, then XACK
  of what was read; the latency of an entry is the consumer's clock minus the send time.

Targets, each started fresh and measured in the same run:
- `redis`: redis-server 7.0 direct (no persistence);
- `node`: one `xshard node` direct (appendonly no);
- `router`: an `xshard router` in front of a primary with one replica, both nodes with
  `appendonly yes` and `appendfsync everysec` (the replica follows the primary);
- `router3`: issue 10's shape, a router in front of 3 shards, each a primary with one replica
  with those settings (the slots split evenly; the stream lives on one of them);
- `redis-repl`: redis-server primary + replica with the same AOF settings, direct.

The cluster shapes (`--targets clusters` runs all five; benchmarks/e2e_clusters.py starts
them), each 3 shards x (primary + replica) with that AOF:
- `redis-cluster`: a real Redis Cluster made with `redis-cli --cluster create
  --cluster-replicas 1`, the client on the primary that owns the stream's slot;
- `xshard-direct`: an xshard cluster (etcd, `xshard create`, 6 nodes, a controller, no
  router), the client on the owning primary: a cluster-aware client's path;
- `redis-cluster-haproxy`: that Redis Cluster behind HAProxy in TCP mode in front of the
  owning primary (a proxy written in C: what a router is compared with);
- `router3-etcd`: the xshard cluster with a router, the client on the router (router3 with
  etcd and a controller);
- `pstream`: the same with the stream made partitioned (`xshard stream create e2e
  --partitions 12`), producers and consumers on the logical name through the router.

To see where router3's latency comes from, one part at a time (not in the default run):
`node-aof` (the node with that AOF), `node-rep` (with a replica, no AOF), `node-repl` (both),
`router-bare` (a router in front of one node, no AOF, no replica) and `router3-bare` (a router
in front of 3 such nodes).

What one more process on the path costs here whatever its language (not in the default run;
`apt-get install haproxy`): `redis-haproxy` is redis-server behind HAProxy 2.6 in TCP mode (one
thread, written in C, no RESP logic), and `node-haproxy` is one node behind it. Its p50 and p99
against `redis` are the floor that any proxy crossing sets on this machine.

The result is the histogram (p50, p99, p99.9, the share under 1/2/5 ms) side by side, and the
offered and achieved rates: a target that could not keep up shows it there, not as a lower
latency, and an error reply is counted, not fatal. The table's "server CPU us / delivered" is
the CPU time (user + system) of all the target's server processes (nodes, replicas, routers,
controller, etcd; every redis-server of a Redis Cluster) per delivered entry, read from /proc
before and after: it moves much less with the machine's load than latency does. Below the
table, each process's CPU and read/write system calls per entry sent (/proc/PID/stat and io):
what each part costs, which on 2 shared CPUs decides how long the others queue behind it.
Results go to benchmarks/E2E_RESULTS.md (or --output) with the machine's load.

`--path N` measures instead the length of the delivery path without any queueing: one
consumer blocked, one XADD at a time (a few ms apart), N times, and prints the delivery's
p10/p50/p90 (send to the consumer's read) and the XADD reply's p50.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collections.abc import Callable  # noqa: E402

import hiredis  # noqa: E402

from benchmarks import e2e_clusters  # noqa: E402
from benchmarks.harness import HOST  # noqa: E402
from benchmarks.router_bench import Procs, append_result  # noqa: E402

TARGETS = ["redis", "node", "router", "router3", "redis-repl"]
PARTS = ["node-aof", "node-rep", "node-repl", "router-bare", "router3-bare"]
FLOORS = ["redis-haproxy", "node-haproxy"]
CLUSTERS = ["redis-cluster", "xshard-direct", "router3-etcd", "redis-cluster-haproxy", "pstream"]
PARTITIONS = 12
KEY = b"e2e"
PAYLOAD = [b"f1", b"value00001", b"f2", b"value00002", b"f3", b"value00003"]


class _Sock:
    def __init__(self, port: int) -> None:
        self.s = socket.create_connection((HOST, port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.r = hiredis.Reader()

    def send(self, *cmds: tuple) -> None:
        self.s.sendall(b"".join(hiredis.pack_command(c) for c in cmds))

    def read(self, n: int = 1) -> list:
        out = []
        while len(out) < n:
            x = self.r.gets()
            if x is False:
                data = self.s.recv(1 << 20)
                if not data:
                    raise ConnectionError("closed")
                self.r.feed(data)
                continue
            out.append(x)
        return out


def _producer(port: int, rate: float, seconds: float, start_at: float, out: mp.Queue) -> None:
    """Send `rate` entries/s for `seconds`, in bursts of whatever is due every millisecond."""
    c = _Sock(port)
    sent = 0
    errors: list[str] = []
    while time.monotonic() < start_at:
        time.sleep(0.001)
    t0 = time.monotonic()
    while True:
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        due = int((now - t0) * rate) - sent
        if due > 0:
            ts = b"%d" % time.monotonic_ns()
            c.send(*[(b"XADD", KEY, b"*", b"t", ts, *PAYLOAD)] * due)
            errs = [r for r in c.read(due) if isinstance(r, hiredis.ReplyError)]
            sent += due - len(errs)
            errors += [str(e) for e in errs]
        time.sleep(0.0005)
    out.put(("sent", sent, errors))


def _consumer(port: int, name: bytes, stop_at: float, out: mp.Queue) -> None:
    c = _Sock(port)
    lats: list[int] = []
    errors: list[str] = []
    while time.monotonic() < stop_at:
        c.send((b"XREADGROUP", b"GROUP", b"g", name, b"COUNT", b"100", b"BLOCK", b"100",
                b"STREAMS", KEY, b">"))
        r = c.read()[0]
        now = time.monotonic_ns()
        if isinstance(r, hiredis.ReplyError):
            errors.append(str(r))  # counted and shown, not a crash that loses the run
            time.sleep(0.01)
            continue
        if not r:
            continue
        entries = r[0][1]
        ids = []
        for eid, fields in entries:
            lats.append(now - int(fields[1]))
            ids.append(eid)
        c.send((b"XACK", KEY, b"g", *ids))
        c.read()
    out.put(("lat", lats, errors))


def path_length(port: int, n: int) -> dict[str, float]:
    """One delivery at a time: the path's length with nothing queued in front of it."""
    admin = _Sock(port)
    admin.send((b"DEL", KEY), (b"XGROUP", b"CREATE", KEY, b"g", b"$", b"MKSTREAM"))
    admin.read(2)
    cons, prod = _Sock(port), _Sock(port)
    lat: list[int] = []
    ack: list[int] = []
    for _ in range(n):
        cons.send((b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"100", b"BLOCK", b"1000",
                   b"STREAMS", KEY, b">"))
        time.sleep(0.003)  # the read is parked on the server before the entry comes
        t0 = time.monotonic_ns()
        prod.send((b"XADD", KEY, b"*", b"t", b"%d" % t0, *PAYLOAD))
        r = cons.read()[0]
        lat.append(time.monotonic_ns() - t0)
        prod.read()
        ack.append(time.monotonic_ns() - t0)
        cons.send((b"XACK", KEY, b"g", r[0][1][0][0]))
        cons.read()
    lat.sort()
    ack.sort()
    return {"p10": lat[n // 10] / 1e3, "p50": lat[n // 2] / 1e3, "p90": lat[n * 9 // 10] / 1e3,
            "xadd_p50": ack[n // 2] / 1e3}


def _proc_cost(pid: int) -> tuple[float, float, int, int]:
    """(user s, system s, read calls, write calls) of a process so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    with open(f"/proc/{pid}/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck, int(io["syscr"]), int(io["syscw"])


def _proc_name(args: list[str]) -> str:
    """A server process's name in the cost lines: a node's directory, else what it runs."""
    if "--dir" in args:
        return Path(args[args.index("--dir") + 1]).name
    if "control.cli" in args:
        return args[args.index("control.cli") + 1]  # router, controller
    return Path(args[0]).name  # redis-server, haproxy, etcd


def process_costs(procs: Procs, before: dict[int, tuple], entries: int
                  ) -> tuple[list[str], float]:
    """Per server process: CPU us and read/write calls per entry since `before`; and the CPU
    seconds of all of them together."""
    lines = []
    total = 0.0
    for p in procs.procs:
        u0, s0, r0, w0 = before[p.pid]
        u1, s1, r1, w1 = _proc_cost(p.pid)
        total += (u1 - u0) + (s1 - s0)
        n = max(entries, 1)
        lines.append(f"{_proc_name([str(x) for x in p.args])}: user {(u1 - u0) / n * 1e6:.1f} "
                     f"+ sys {(s1 - s0) / n * 1e6:.1f} us, {(r1 - r0) / n:.2f} reads + "
                     f"{(w1 - w0) / n:.2f} writes per entry")
    return lines, total


def run_load(port: int, rate: int, seconds: float, consumers: int, producers: int
             ) -> dict[str, float]:
    admin = _Sock(port)
    admin.send((b"DEL", KEY), (b"XGROUP", b"CREATE", KEY, b"g", b"$", b"MKSTREAM"))
    admin.read(2)
    ctx = mp.get_context("fork")
    q: mp.Queue = ctx.Queue()
    start_at = time.monotonic() + 1.0
    stop_at = start_at + seconds + 1.0
    procs = [ctx.Process(target=_consumer, args=(port, b"c%d" % i, stop_at, q))
             for i in range(consumers)]
    procs += [ctx.Process(target=_producer, args=(port, rate / producers, seconds, start_at, q))
              for _ in range(producers)]
    for p in procs:
        p.start()
    sent = 0
    lats: list[int] = []
    errors: list[str] = []
    for _ in procs:
        kind, got, errs = q.get(timeout=seconds + 120)
        errors += errs
        if kind == "sent":
            sent += got
        else:
            lats += got
    if errors:
        print(f"{len(errors)} error replies, the first: {errors[0]}", file=sys.stderr)
    for p in procs:
        p.join(30)
    lats.sort()
    n = len(lats)

    def pct(p: float) -> float:
        return lats[min(n - 1, int(n * p))] / 1e6 if n else float("nan")

    def under(ms: float) -> float:
        return sum(1 for x in lats if x < ms * 1e6) / n if n else float("nan")

    return {"offered": rate, "sent_per_s": sent / seconds, "delivered": n, "sent": sent,
            "errors": len(errors),
            "p50": pct(0.5), "p99": pct(0.99), "p999": pct(0.999), "max": pct(1.0),
            "lt1": under(1), "lt2": under(2), "lt5": under(5)}


def _node_pair(procs: Procs, i: int | str = "", *extra: str) -> tuple[int, int]:
    """A primary and its replica, both with `extra` (the AOF settings or none)."""
    p = procs.node(f"primary{i}", *extra)
    return p, procs.node(f"replica{i}", "--replicaof", f"{HOST} {p}", *extra)


AOF = ("--appendonly", "yes", "--appendfsync", "everysec")
STARTERS: dict[str, Callable[[Procs], int]] = {
    "redis": lambda ps: ps.redis("redis", "--appendonly", "no"),
    "redis-repl": lambda ps: _redis_repl(ps),
    "node": lambda ps: ps.node("node"),
    "router": lambda ps: ps.router(*_node_pair(ps, "", *AOF)),
    "router3": lambda ps: ps.router_for([_node_pair(ps, i, *AOF) for i in range(3)]),
    "node-repl": lambda ps: _node_pair(ps, "", *AOF)[0],
    "node-aof": lambda ps: ps.node("primary", *AOF),
    "node-rep": lambda ps: _node_pair(ps)[0],
    "router-bare": lambda ps: ps.router(ps.node("primary")),
    "router3-bare": lambda ps: ps.router_for([(ps.node(f"primary{i}"), None) for i in range(3)]),
    "redis-haproxy": lambda ps: ps.haproxy(ps.redis("redis", "--appendonly", "no")),
    "node-haproxy": lambda ps: ps.haproxy(ps.node("node")),
    "redis-cluster": lambda ps: e2e_clusters.redis_cluster(ps, KEY),
    "redis-cluster-haproxy": lambda ps: ps.haproxy(e2e_clusters.redis_cluster(ps, KEY)),
    "xshard-direct": lambda ps: e2e_clusters.XshardCluster(ps, router=False).owner(KEY),
    "router3-etcd": lambda ps: e2e_clusters.XshardCluster(ps).router,
    "pstream": lambda ps: e2e_clusters.XshardCluster(ps).pstream(KEY, PARTITIONS),
}


def _redis_repl(procs: Procs) -> int:
    p = procs.redis("rprimary", *AOF)
    procs.redis("rreplica", "--replicaof", HOST, str(p), *AOF)
    return p


def start_target(procs: Procs, kind: str) -> int:
    """Start one target's processes (router_bench's process set); return the port to load."""
    if kind not in STARTERS:
        raise ValueError(kind)
    return STARTERS[kind](procs)


ROWS = [("offered /s", "offered", "{:.0f}"), ("sent /s", "sent_per_s", "{:.0f}"),
        ("sent", "sent", "{:.0f}"), ("delivered", "delivered", "{:.0f}"), ("error replies", "errors", "{:.0f}"),
        ("p50 ms", "p50", "{:.2f}"),
        ("p99 ms", "p99", "{:.2f}"), ("p99.9 ms", "p999", "{:.2f}"), ("max ms", "max", "{:.1f}"),
        ("< 1 ms", "lt1", "{:.1%}"), ("< 2 ms", "lt2", "{:.1%}"), ("< 5 ms", "lt5", "{:.1%}"),
        ("server CPU us / delivered", "cpu_us", "{:.1f}"), ("load (1 min) after", "load", "{:.2f}")]


def table(results: dict[str, dict[str, float]]) -> str:
    names = list(results)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, k, fmt in ROWS:
        lines.append(f"| {label} | " + " | ".join(fmt.format(results[n][k]) for n in names)
                     + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help=f"comma-separated, of {','.join(STARTERS)}; or 'clusters' for "
                    f"{','.join(CLUSTERS)}")
    ap.add_argument("--quick", action="store_true", help="1 s at 1000/s, 2 consumers")
    ap.add_argument("--output", default="", help="append the result here (markdown)")
    ap.add_argument("--path", type=int, default=0,
                    help="instead: N deliveries one at a time (the path without queueing)")
    a = ap.parse_args(argv)
    if a.quick:
        a.rate, a.seconds, a.consumers, a.producers = 1000, 1.0, 2, 1
    load_before = os.getloadavg()
    results: dict[str, dict[str, float]] = {}
    costs: list[str] = []
    targets = a.targets.replace("clusters", ",".join(CLUSTERS))
    for kind in targets.split(","):
        procs = Procs()
        try:
            port = start_target(procs, kind)
            if a.path:
                results[kind] = path_length(port, a.path)
                continue
            before = {p.pid: _proc_cost(p.pid) for p in procs.procs}
            results[kind] = run_load(port, a.rate, a.seconds, a.consumers, a.producers)
            lines, cpu = process_costs(procs, before, int(results[kind]["sent"]))
            costs += [f"- {kind} {x}" for x in lines]
            results[kind]["cpu_us"] = cpu / max(results[kind]["delivered"], 1) * 1e6
            results[kind]["load"] = os.getloadavg()[0]
        finally:
            procs.stop()
    load_after = os.getloadavg()
    load = (f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, "
            f"{os.cpu_count()} CPUs")
    if a.path:
        head = f"{a.path} deliveries one at a time (1 consumer, 1 producer), us; {load}"
        text = "\n".join(f"- {k}: p10 {r['p10']:.0f}, p50 {r['p50']:.0f}, p90 {r['p90']:.0f}; "
                         f"XADD reply p50 {r['xadd_p50']:.0f}" for k, r in results.items())
    else:
        head = (f"{a.rate} entries/s offered by {a.producers} producer processes, "
                f"{a.consumers} consumer processes in one group, {a.seconds:.0f} s per "
                f"target; {load}")
        text = table(results) + "\n\nServer processes, per entry sent:\n" + "\n".join(costs)
    print(head)
    print(text)
    if a.output:
        append_result(a.output, f"{head}\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
