"""Scaling with shards (issue 27): aggregate XADD throughput of N = 1, 2, 4, 8 shards, each
node pinned to a core of its own, beside a Redis Cluster of N primaries on the same cores.

    python benchmarks/scale_bench.py [--shards 1,2,4,8] [--seconds 4] [--pipeline 100]
                                     [--keys 1000] [--partitions-per-shard 4]
                                     [--output benchmarks/SCALE_RESULTS.md]

For each N the cores are dealt out as: the nodes on CPUs 0..N-1 (`taskset`), the routers
(one per shard, for the routed workload only) on the next N, and the load generators, one
process per remaining CPU, pinned there (etcd and the controller share the load CPUs). An N
that leaves no CPU for the load runs with the load generators sharing the nodes' (or
routers') CPUs and is marked *shared* (its figures say what the machine does, not how the
nodes scale); an N with fewer CPUs than nodes is skipped, and the table says why.

Workloads, each `--seconds`, every load process sending a pipeline of `--pipeline` XADD `*`
to each target in turn and then reading all the replies (raw hiredis sockets; two such
processes per load CPU):
- `keys`: `--keys` keys (s:0 ...), each written straight to the node that owns its slot,
  like a cluster-aware client;
- `pstream`: one partitioned stream of partitions-per-shard x N partitions (`xshard stream
  create`), written straight to its partition keys on their owners (a cluster-aware client
  writing partition keys gets valid partition IDs from the nodes);
- `pstream via routers`: the same logical stream written by name through the routers (each
  load process to one router), what an unmodified client does.

Redis Cluster (`redis-server --cluster-enabled yes`, slots split as xshard splits them) runs
`keys` and the partitioned stream's keys as plain streams. The table gives entries/s, the
ratio to the same workload at N = 1 (the 16-core goal for `pstream`: >= 0.8 x N), xshard /
Redis Cluster, and the nodes' average CPU use (a node well under 100% was not the limit).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hiredis  # noqa: E402

from base.records import even_slots, owners  # noqa: E402
from benchmarks.e2e_bench import PAYLOAD, _Sock  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    ServerProc,
    cpu_seconds,
    start_server,
)
from benchmarks.pstream_bench import commit, loadavg, run_workers, start_cluster  # noqa: E402
from benchmarks.router_bench import append_result  # noqa: E402
from node.slots import key_slot  # noqa: E402

PS = "scale"


def loader(cpu: int | None, targets: list[tuple[int, list[bytes]]], pipeline: int,
           seconds: float, start_at: float, out: mp.Queue) -> None:
    """Pipelines of XADD `*` over each target's keys, to every target in turn, then every
    reply read: (entries, elapsed, error replies, the first error's text)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    socks, batches = [], []
    for port, keys in targets:
        if not keys:
            continue
        n = -(-max(len(keys), pipeline) // pipeline) * pipeline
        cmds = [hiredis.pack_command((b"XADD", keys[i % len(keys)], b"*", *PAYLOAD))
                for i in range(n)]
        socks.append(_Sock(port))
        batches.append([b"".join(cmds[j:j + pipeline]) for j in range(0, n, pipeline)])
    sent = errors = k = 0
    first = ""
    while time.monotonic() < start_at:
        time.sleep(0.001)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for s, b in zip(socks, batches, strict=True):
            s.s.sendall(b[k % len(b)])
        for s in socks:
            bad = [r for r in s.read(pipeline) if isinstance(r, hiredis.ReplyError)]
            if bad and not first:
                first = str(bad[0])
            errors += len(bad)
        sent += pipeline * len(socks)
        k += 1
    out.put((sent, time.monotonic() - t0, errors, first))


@dataclass
class Plan:
    """Where one N's processes run."""

    n: int
    nodes: list[int]
    routers: list[int]  # empty: the routed workload does not run
    load: list[int]
    note: str = ""

    def shared(self, workload: str) -> bool:
        """Whether the load generators share CPUs with the servers of `workload`."""
        servers = self.routers if workload.endswith("routers") else self.nodes
        return bool(set(self.load) & set(servers))


def plan(n: int, ncpu: int) -> tuple[Plan | None, str]:
    """The CPUs for N shards, or None and why not."""
    if n > ncpu:
        return None, f"N={n}: skipped, needs {n + 1} CPUs ({n} nodes + 1 for the load), {ncpu} here"
    nodes = list(range(n))
    rest = list(range(n, ncpu))
    if 2 * n < ncpu:
        return Plan(n, nodes, rest[:n], rest[n:]), ""
    why = ""
    routers: list[int] = []
    if 2 * n == ncpu:
        routers = rest
        why = "the load shares the routers' CPUs in the routed workload"
    else:
        why = f"routed workload skipped: needs {2 * n} CPUs for {n} nodes + {n} routers"
    if rest:
        return Plan(n, nodes, routers, rest, why), ""
    return Plan(n, nodes, routers, nodes, "no CPU left for the load: it shares the nodes' "
                "CPUs; " + why), ""


def by_owner(keys: list[bytes], slot_ports: list[int]) -> list[tuple[int, list[bytes]]]:
    out: dict[int, list[bytes]] = {}
    for k in keys:
        out.setdefault(slot_ports[key_slot(k)], []).append(k)
    return sorted(out.items())


LOADERS_PER_CPU = 2  # two pipelines in flight per load CPU: a node never waits for a reply read


def measure(targets_for: list[list[tuple[int, list[bytes]]]], load_cpus: list[int],
            pipeline: int, seconds: float, node_pids: list[int]
            ) -> tuple[float, float, int, str]:
    """Run LOADERS_PER_CPU loaders per load CPU (loader i gets targets_for[i % len]);
    (entries added per second, node CPU %, error replies, the first error's text)."""
    load_cpus = [c for c in load_cpus for _ in range(LOADERS_PER_CPU)]
    c0 = [cpu_seconds(p) for p in node_pids]
    t0 = time.perf_counter()
    start_at = time.monotonic() + 0.5
    res = run_workers(loader, [(cpu, targets_for[i % len(targets_for)], pipeline, seconds,
                                start_at) for i, cpu in enumerate(load_cpus)])
    wall = time.perf_counter() - t0 - 0.5
    used = sum(cpu_seconds(p) - c for p, c in zip(node_pids, c0, strict=True))
    errors = sum(r[2] for r in res)
    return ((sum(r[0] for r in res) - errors) / max(r[1] for r in res),
            100 * used / wall / len(node_pids), errors, next((r[3] for r in res if r[3]), ""))


def run_xshard(p: Plan, a: argparse.Namespace, keys: list[bytes]
               ) -> tuple[dict[str, tuple[float, float, int, str]], list[bytes]]:
    parts = a.partitions_per_shard * p.n
    bc, rports, _ = start_cluster(p.n, 0, {PS: parts}, node_cpus=p.nodes,
                                  routers=max(1, len(p.routers)), router_cpus=p.routers or None,
                                  prefix="scale-bench-")
    try:
        assert bc.etcd.proc is not None
        for pid in (bc.etcd.proc.pid, bc.procs["controller"].pid):
            os.sched_setaffinity(pid, set(p.load))
        v = bc.view()
        assert v.slots is not None
        shard_port = {sid: v.nodes[e.value.primary].value.port for sid, e in v.shards.items()
                      if e.value.primary}
        slot_ports = [shard_port[s] for s in owners(v.slots.value)]  # type: ignore[index]
        pkeys = [k.encode() for k in v.pstreams[PS].value.keys]
        node_pids = [bc.procs[f"s{s}n0"].pid for s in range(p.n)]
        out = {"keys": measure([by_owner(keys, slot_ports)], p.load, a.pipeline, a.seconds,
                               node_pids),
               "pstream": measure([by_owner(pkeys, slot_ports)], p.load, a.pipeline, a.seconds,
                                  node_pids)}
        if p.routers:
            out["pstream via routers"] = measure([[(r, [PS.encode()])] for r in rports],
                                                 p.load, a.pipeline, a.seconds, node_pids)
        return out, pkeys
    finally:
        bc.stop()


def redis_cluster(p: Plan) -> tuple[list[ServerProc], list[int]]:
    """N redis-servers in cluster mode on the nodes' CPUs, slots split as xshard splits them;
    returns them and the slot -> port table once every one says cluster_state:ok."""
    servers: list[ServerProc] = []
    try:
        for i, cpu in enumerate(p.nodes):
            servers.append(start_server("redis", label=f"redis{i}", cpu=cpu, extra=(
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")))
        ranges = even_slots([str(i) for i in range(p.n)])
        for s, (lo, hi, _sid) in zip(servers, ranges, strict=True):
            with s.connect() as c:
                c.call(b"CLUSTER", b"ADDSLOTSRANGE", lo, hi)
                if s is not servers[0]:
                    c.call(b"CLUSTER", b"MEET", "127.0.0.1", servers[0].port)
        deadline = time.monotonic() + 30
        for s in servers:
            with s.connect() as c:
                while b"cluster_state:ok" not in c.call(b"CLUSTER", b"INFO") or \
                        f"cluster_known_nodes:{p.n}".encode() not in c.call(b"CLUSTER", b"INFO"):
                    if time.monotonic() > deadline:
                        raise RuntimeError("Redis Cluster did not become ok")
                    time.sleep(0.1)
        ports = [servers[int(sid)].port for sid in owners(ranges)]  # type: ignore[arg-type]
        return servers, ports
    except BaseException:
        for s in servers:
            s.stop()
        raise


def run_redis(p: Plan, a: argparse.Namespace, keys: list[bytes], pkeys: list[bytes]
              ) -> dict[str, tuple[float, float, int, str]]:
    servers, slot_ports = redis_cluster(p)
    try:
        pids = [s.pid for s in servers]
        return {"keys": measure([by_owner(keys, slot_ports)], p.load, a.pipeline, a.seconds,
                                pids),
                "pstream": measure([by_owner(pkeys, slot_ports)], p.load, a.pipeline, a.seconds,
                                   pids)}
    finally:
        for s in servers:
            s.stop()


WORKLOADS = ["keys", "pstream", "pstream via routers"]


def table(plans: list[Plan], ours: dict[int, dict], theirs: dict[int, dict]) -> list[str]:
    lines = ["| N | CPUs: nodes / routers / load | workload | xshard entries/s | vs N=1 "
             "| goal 0.8·N | Redis Cluster entries/s | vs N=1 | xshard / Redis | node CPU % "
             "xshard / Redis |", "|---:|---|---|---:|---:|---|---:|---:|---:|---|"]
    first = plans[0].n if plans else 1

    def span(cs: list[int]) -> str:
        return "-" if not cs else f"{cs[0]}" if len(cs) == 1 else f"{cs[0]}-{cs[-1]}"

    for p in plans:
        for w in WORKLOADS:
            o, t = ours[p.n].get(w), theirs[p.n].get(w)
            if o is None:
                continue
            o1, t1 = ours[first].get(w), theirs[first].get(w)
            vs = o[0] / o1[0] if o1 else float("nan")
            tvs = f"{t[0] / t1[0]:.2f}" if t and t1 else "n/a"
            shared = p.shared(w)
            goal = ("(shared CPUs)" if shared else
                    f"{0.8 * p.n / first:.1f} ({'met' if vs >= 0.8 * p.n / first else 'NOT met'})"
                    if w == "pstream" and first == 1 and p.n > 1 else "")
            lines.append(
                f"| {p.n} | {span(p.nodes)} / {span(p.routers)} / {span(p.load)}"
                f"{' (shared)' if shared else ''} | {w} | {o[0]:,.0f} | {vs:.2f} | {goal} | "
                f"{f'{t[0]:,.0f}' if t else 'n/a'} | {tvs} | "
                f"{f'{o[0] / t[0]:.2f}' if t else 'n/a'} | "
                f"{o[1]:.0f} / {f'{t[1]:.0f}' if t else '-'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", default="1,2,4,8", help="the Ns, comma-separated")
    ap.add_argument("--seconds", type=float, default=4.0, help="per workload")
    ap.add_argument("--pipeline", type=int, default=100)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions-per-shard", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="N=1 only, 0.5 s each (smoke test)")
    ap.add_argument("--output", default="", help="append the result here (markdown)")
    a = ap.parse_args(argv)
    if a.quick:
        a.shards, a.seconds = "1", 0.5
    ncpu = len(os.sched_getaffinity(0))
    keys = [b"s:%d" % i for i in range(a.keys)]
    load_before = loadavg()
    plans, notes = [], []
    ours: dict[int, dict] = {}
    theirs: dict[int, dict] = {}
    errors = 0
    for n in (int(x) for x in a.shards.split(",")):
        p, why = plan(n, ncpu)
        if p is None:
            notes.append(why)
            print(why, flush=True)
            continue
        if p.note:
            notes.append(f"N={n}: {p.note}")
        ours[n], pkeys = run_xshard(p, a, keys)
        theirs[n] = run_redis(p, a, keys, pkeys)
        for who, d in (("xshard", ours[n]), ("Redis Cluster", theirs[n])):
            for w, r in d.items():
                if r[2]:
                    errors += r[2]
                    notes.append(f"N={n} {who} {w}: {r[2]} error replies, the first: {r[3]}")
        plans.append(p)
        print(f"N={n} done, load {loadavg()}", flush=True)
    head = (f"XADD `*`, pipelines of {a.pipeline}, {a.seconds:g} s per workload; `keys`: "
            f"{a.keys} keys; `pstream`: one partitioned stream of {a.partitions_per_shard}·N "
            f"partitions. Commit {commit()}, {ncpu} CPUs, /proc/loadavg {load_before} before, "
            f"{loadavg()} after.")
    text = "\n".join([head, "", *table(plans, ours, theirs), "",
                      *[f"- {x}" for x in notes]])
    print(text)
    if a.output:
        append_result(a.output, text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
