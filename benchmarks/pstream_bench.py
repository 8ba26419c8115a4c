"""Partitioned-stream throughput (issue 27): one logical stream of 12 partitions over 3 shards
against one plain stream, through the same router, in the same run.

    python benchmarks/pstream_bench.py [--rounds 3] [--seconds 3] [--partitions 12]
                                       [--shards 3] [--replicas 0] [--producers 2]
                                       [--pipeline 100] [--consumers 4] [--quick]
                                       [--output benchmarks/PSTREAM_RESULTS.md]

One cluster: an etcd, `xshard create`, the nodes (primaries, and replicas with --replicas),
a controller and one router with its metrics port; `xshard stream create events
--partitions 12` makes the logical stream, and `plain` is an ordinary key on one shard.
Each round measures both keys, in alternating order (plain first in even rounds), each in
two phases:

- XADD: `--producers` processes, each with a raw hiredis socket (no client library on the
  path), sending pipelines of `--pipeline` XADD `*` for `--seconds`;
- XREADGROUP + XACK: then `--consumers` processes in one group (created at 0 after the
  writes), each looping `XREADGROUP GROUP g cN COUNT 100 BLOCK 100 STREAMS key >` and one
  XACK of what it got, until a read times out empty; the rate is the entries delivered over
  the time to the last delivery, and every entry written must be delivered once with nothing
  left pending (checked, and shown in the table).

For each phase, the CPU time (user + system, /proc/PID/stat) of every server process (nodes,
replicas, router, controller, etcd) per entry, split into router / nodes / the rest; the
nodes' commands per entry (INFO commandstats on every primary: what the router sent them);
the router's upstream round trips per entry (the count of its `xshard_router_upstream_
duration_seconds` histogram: every forwarded request it timed, which leaves out single-key
blocking reads, so it undercounts the plain stream's XREADGROUP BLOCK); and the CPU the rest of the
machine used meanwhile (others' work skews the figures on a shared machine). The table gives
every round's figure and the ratio of the medians, partitioned / plain; the issue's target
is >= 0.8 for both throughputs. Results are appended to benchmarks/PSTREAM_RESULTS.md (or
--output) with the date, the commit and /proc/loadavg.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hiredis  # noqa: E402

from benchmarks.e2e_bench import PAYLOAD, _Sock  # noqa: E402
from benchmarks.etcdcluster import BenchCluster  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    HOST,
    Conn,
    cpu_seconds,
    machine_busy_seconds,
    own_cpu_seconds,
    wait_for_ping,
)
from benchmarks.router_bench import append_result  # noqa: E402
from control.ports import free_port  # noqa: E402

READ_COUNT = 100
TARGET = 0.8
UPSTREAM_COUNT = b"xshard_router_upstream_duration_seconds_count{"


# --------------------------------------------------------------------------------------------
# Load generators: processes of their own (fork), raw sockets, results through a queue


def producer(port: int, key: bytes, pipeline: int, seconds: float, start_at: float,
             out: mp.Queue) -> None:
    """Pipelines of `pipeline` XADD `*` on `key` for `seconds`: (entries, elapsed, errors)."""
    c = _Sock(port)
    batch = b"".join([hiredis.pack_command((b"XADD", key, b"*", *PAYLOAD))] * pipeline)
    sent = errors = 0
    while time.monotonic() < start_at:
        time.sleep(0.001)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        c.s.sendall(batch)
        errors += sum(1 for r in c.read(pipeline) if isinstance(r, hiredis.ReplyError))
        sent += pipeline
    out.put((sent, time.monotonic() - t0, errors))


def consumer(port: int, key: bytes, name: bytes, start_at: float, out: mp.Queue) -> None:
    """XREADGROUP COUNT 100 BLOCK 100 then XACK until a read times out empty:
    (delivered, seconds from start_at to the last delivery, errors)."""
    c = _Sock(port)
    read = hiredis.pack_command((b"XREADGROUP", b"GROUP", b"g", name, b"COUNT",
                                 b"%d" % READ_COUNT, b"BLOCK", b"100", b"STREAMS", key, b">"))
    got = errors = 0
    last = start_at
    while time.monotonic() < start_at:
        time.sleep(0.001)
    while True:
        c.s.sendall(read)
        r = c.read()[0]
        if isinstance(r, hiredis.ReplyError):
            errors += 1
            break
        if not r:
            break
        ids = [e[0] for e in r[0][1]]
        c.send((b"XACK", key, b"g", *ids))
        if isinstance(c.read()[0], hiredis.ReplyError):
            errors += 1
        got += len(ids)
        last = time.monotonic()
    out.put((got, last - start_at, errors))


def run_workers(target: Callable, arglists: list[tuple]) -> list[tuple]:
    """Start one forked process per argument tuple (each gets the queue last) and collect
    what each put on it."""
    ctx = mp.get_context("fork")
    q: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, q)) for a in arglists]
    for p in procs:
        p.start()
    res = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    return res


# --------------------------------------------------------------------------------------------
# What the server processes spent


@dataclass
class Meter:
    """CPU seconds of every server process (by role), the router's upstream requests and the
    machine's other work, between `start()` and `stop()`."""

    roles: dict[int, str]  # pid -> "router" / "nodes" / "rest"
    metrics_port: int
    node_ports: list[int]
    cpu: dict[str, float] = field(default_factory=dict)
    upstream: int = 0
    node_calls: int = 0
    others_pct: float = 0.0

    def _snap(self) -> tuple[dict[str, float], int, int, float, float, float]:
        by: dict[str, float] = {}
        for pid, role in self.roles.items():
            by[role] = by.get(role, 0.0) + cpu_seconds(pid)
        return (by, upstream_requests(self.metrics_port), node_calls(self.node_ports),
                machine_busy_seconds(), own_cpu_seconds(), time.perf_counter())

    def start(self) -> Meter:
        self._s0 = self._snap()
        return self

    def stop(self) -> Meter:
        by1, up1, n1, m1, o1, t1 = self._snap()
        by0, up0, n0, m0, o0, t0 = self._s0
        self.cpu = {k: by1[k] - by0[k] for k in by1}
        self.upstream = up1 - up0
        self.node_calls = n1 - n0 - len(self.node_ports)  # less the INFO of the first snapshot
        ours = sum(self.cpu.values()) + (o1 - o0)
        self.others_pct = max(0.0, 100 * ((m1 - m0) - ours) / max(t1 - t0, 1e-9))
        return self


def upstream_requests(metrics_port: int) -> int:
    """Requests the router has forwarded to nodes so far (its upstream histogram's counts)."""
    with urllib.request.urlopen(f"http://{HOST}:{metrics_port}/metrics", timeout=10) as r:
        body = r.read()
    return sum(int(float(line.rsplit(b" ", 1)[1])) for line in body.splitlines()
               if line.startswith(UPSTREAM_COUNT))


def node_calls(ports: list[int]) -> int:
    """Commands the nodes have run so far (INFO commandstats' calls, summed over commands and
    nodes): what the router sent them, blocking reads and CLIENT UNBLOCK included."""
    total = 0
    for port in ports:
        with Conn(port) as c:
            for line in c.call(b"INFO", b"commandstats").splitlines():
                if line.startswith(b"cmdstat_"):
                    total += int(line.split(b"calls=", 1)[1].split(b",", 1)[0])
    return total


# --------------------------------------------------------------------------------------------
# The cluster


@dataclass
class Setup:
    bc: BenchCluster
    router_port: int
    metrics_port: int
    roles: dict[int, str]
    node_ports: list[int]  # the primaries', for their INFO commandstats

    def admin(self) -> _Sock:
        return _Sock(self.router_port)


def call(c: _Sock, *cmd: bytes | str) -> object:
    c.send(tuple(x.encode() if isinstance(x, str) else x for x in cmd))
    r = c.read()[0]
    if isinstance(r, hiredis.ReplyError):
        raise RuntimeError(f"{cmd[0]!r}: {r}")
    return r


def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def start_cluster(shards: int, replicas: int, pstreams: dict[str, int],
                  node_cpus: list[int] | None = None, routers: int = 1,
                  router_cpus: list[int] | None = None,
                  prefix: str = "pstream-bench-") -> tuple[BenchCluster, list[int], list[int]]:
    """etcd, `xshard create`, the nodes (shard s's primary pinned to node_cpus[s] when given),
    a controller, `routers` routers with metrics ports (pinned likewise), and the partitioned
    streams `pstreams` (name -> partitions) known to every router. Returns the cluster, the
    routers' ports and their metrics ports."""
    bc = BenchCluster(prefix, shards=shards)
    try:
        for s in range(shards):
            cpu = node_cpus[s % len(node_cpus)] if node_cpus else None
            bc.spawn_node(f"s{s}n0", free_port(), str(s), cpu=cpu)
        wait_until(lambda: all(bc.view().live(e.value.primary)
                               for e in bc.view().shards.values())
                   and len(bc.view().shards) == shards, 60, "a primary in every shard")
        for i in range(1, 1 + replicas):
            for s in range(shards):
                cpu = node_cpus[s % len(node_cpus)] if node_cpus else None
                bc.spawn_node(f"s{s}n{i}", free_port(), str(s), cpu=cpu)
        if replicas:
            wait_until(lambda: len(bc.view().nodes) == shards * (1 + replicas), 60,
                       "every replica registered")
        bc.spawn("controller", "controller")
        ports, mports = [], []
        for i in range(routers):
            port, mport = free_port(), free_port()
            cpu = router_cpus[i % len(router_cpus)] if router_cpus else None
            p = bc.spawn(f"router{i}", "router", "--port", str(port), "--metrics-port",
                         str(mport), "--router-id", f"r{i}", cpu=cpu)
            wait_for_ping(port, 30, p)
            ports.append(port)
            mports.append(mport)
        for name, n in pstreams.items():
            bc.xshard("stream", "create", name, "--partitions", str(n))
        for port in ports:
            c = _Sock(port)
            for name in pstreams:
                wait_until(lambda c=c, name=name: call(c, "TYPE", name) == b"stream", 30,
                           f"router on {port} to know {name}")
            c.s.close()
        return bc, ports, mports
    except BaseException:
        bc.stop()
        raise


def role_of(name: str) -> str:
    return "router" if name.startswith("router") else "nodes" if name[0] == "s" else "rest"


def primary_ports(bc: BenchCluster) -> list[int]:
    v = bc.view()
    return [v.nodes[e.value.primary].value.port for e in v.shards.values()
            if e.value.primary in v.nodes]


def server_roles(bc: BenchCluster) -> dict[int, str]:
    roles = {p.pid: role_of(n) for n, p in bc.procs.items()}
    assert bc.etcd.proc is not None
    roles[bc.etcd.proc.pid] = "rest"
    return roles


# --------------------------------------------------------------------------------------------
# One target's round


@dataclass
class Phase:
    entries: int
    seconds: float
    meter: Meter
    errors: int
    check: str = ""

    @property
    def rate(self) -> float:
        return self.entries / max(self.seconds, 1e-9)

    def us(self, role: str | None = None) -> float:
        cpu = self.meter.cpu.values() if role is None else [self.meter.cpu.get(role, 0.0)]
        return sum(cpu) / max(self.entries, 1) * 1e6

    def per_entry(self, n: int) -> float:
        return n / max(self.entries, 1)


def measure(st: Setup, key: bytes, a: argparse.Namespace) -> tuple[Phase, Phase]:
    """The XADD phase, then the XREADGROUP + XACK phase, on `key` (emptied first)."""
    admin = st.admin()
    call(admin, b"DEL", key)
    start_at = time.monotonic() + 0.5
    m = Meter(st.roles, st.metrics_port, st.node_ports).start()
    res = run_workers(producer, [(st.router_port, key, a.pipeline, a.seconds, start_at)
                                 for _ in range(a.producers)])
    m.stop()
    written = int(call(admin, b"XLEN", key))  # type: ignore[call-overload]
    sent = sum(r[0] for r in res)
    xadd = Phase(sent, max(r[1] for r in res), m, sum(r[2] for r in res),
                 "" if written == sent else f"XLEN {written} of {sent} sent")
    call(admin, b"XGROUP", b"CREATE", key, b"g", b"0")
    start_at = time.monotonic() + 0.5
    m = Meter(st.roles, st.metrics_port, st.node_ports).start()
    res = run_workers(consumer, [(st.router_port, key, b"c%d" % i, start_at)
                                 for i in range(a.consumers)])
    m.stop()
    got = sum(r[0] for r in res)
    pending = call(admin, b"XPENDING", key, b"g")[0]  # type: ignore[index]
    check = "" if got == written and pending == 0 else \
        f"delivered {got} of {written}, {pending} pending"
    read = Phase(got, max(r[1] for r in res), m, sum(r[2] for r in res), check)
    admin.s.close()
    return xadd, read


# --------------------------------------------------------------------------------------------
# The table


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _cell(xs: list[float], f: str) -> str:
    return ", ".join(format(x, f) for x in xs)


ROWS: list[tuple[str, Callable[[Phase], float], str, bool]] = [
    ("entries/s", lambda p: p.rate, ",.0f", True),
    ("CPU us per entry, all server processes", lambda p: p.us(), ".1f", False),
    ("  of which router", lambda p: p.us("router"), ".1f", False),
    ("  of which nodes", lambda p: p.us("nodes"), ".1f", False),
    ("  of which controller + etcd", lambda p: p.us("rest"), ".2f", False),
    ("node commands per entry (all nodes)", lambda p: p.per_entry(p.meter.node_calls), ".3f",
     False),
    ("router upstream round trips per entry", lambda p: p.per_entry(p.meter.upstream), ".3f",
     False),
    ("others' CPU %", lambda p: p.meter.others_pct, ".0f", False),
]


def table(results: dict[str, list[tuple[Phase, Phase]]], plain: str, ps: str) -> list[str]:
    lines = ["| phase | measurement | plain (each round) | partitioned (each round) "
             "| ratio of the medians | target |", "|---|---|---:|---:|---:|---|"]
    for i, phase in enumerate(("XADD", "XREADGROUP + XACK")):
        for label, f, spec, is_target in ROWS:
            a = [f(r[i]) for r in results[plain]]
            b = [f(r[i]) for r in results[ps]]
            ratio = med(b) / med(a) if med(a) else float("nan")
            target = (f">= {TARGET} ({'met' if ratio >= TARGET else 'NOT met'})"
                      if is_target else "")
            lines.append(f"| {phase} | {label} | {_cell(a, spec)} | {_cell(b, spec)} | "
                         f"{ratio:.2f} | {target} |")
    return lines


def commit() -> str:
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="XADD time per phase")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=0, help="replicas per shard")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--pipeline", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="1 round of 0.5 s (smoke test)")
    ap.add_argument("--output", default="", help="append the result here (markdown)")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.seconds = 1, 0.5
    plain, ps = b"plain", b"events"
    load_before = loadavg()
    bc, ports, mports = start_cluster(a.shards, a.replicas, {ps.decode(): a.partitions})
    results: dict[str, list[tuple[Phase, Phase]]] = {plain: [], ps: []}
    round_loads = []
    try:
        st = Setup(bc, ports[0], mports[0], server_roles(bc), primary_ports(bc))
        for r in range(a.rounds):
            for key in (plain, ps) if r % 2 == 0 else (ps, plain):
                results[key].append(measure(st, key, a))
            round_loads.append(loadavg())
            print(f"round {r}: load {round_loads[-1]}", flush=True)
    finally:
        bc.stop()
    problems = [f"{k.decode()} round {i} {ph}: {p.check or f'{p.errors} error replies'}"
                for k, rs in results.items() for i, pair in enumerate(rs)
                for ph, p in zip(("XADD", "XREADGROUP"), pair, strict=True)
                if p.check or p.errors]
    head = (f"One logical stream of {a.partitions} partitions over {a.shards} shards "
            f"({a.replicas} replicas each) against one plain stream, through the same router; "
            f"{a.producers} producer processes (pipelines of {a.pipeline} XADD, {a.seconds:g} s), "
            f"{a.consumers} consumer processes in one group (XREADGROUP COUNT {READ_COUNT} "
            f"BLOCK 100, then XACK); {a.rounds} alternating rounds. Commit {commit()}, "
            f"{os.cpu_count()} CPUs, nothing pinned; /proc/loadavg {load_before} before, "
            f"{' / '.join(round_loads)} after each round.")
    text = "\n".join([head, "", *table(results, plain, ps), "",
                      "Every entry written was delivered once, nothing left pending."
                      if not problems else "Problems:\n" + "\n".join(f"- {p}" for p in problems)])
    print(text)
    if a.output:
        append_result(a.output, text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
