"""Protocol fuzzing at scale: a million inputs against the node in process, and tens of
thousands over sockets to a real node and a real router in front of two shards.

The inputs and checks are tests/support/fuzz.py's (tests/node/test_fuzz.py runs a few hundred
of them in CI). What this reports:
- inputs run, inputs per second, and every problem found (a malformed or missing reply, a
  handler failure, a stuck connection, a connection that closed without a reason, something
  of a closed connection left on the server), grouped by kind with one example input each;
- memory: in process, Python's allocated blocks after a warm-up and at the end (data
  flushed); over sockets, each process's RSS after a warm-up, half way and at the end, and
  its client count back at the baseline.

    python benchmarks/fuzz_bench.py                 # 1M in process + 20k per socket target
    python benchmarks/fuzz_bench.py --quick         # 20k + 1k, for a smoke run
    python benchmarks/fuzz_bench.py --inputs N --socket-inputs M --seed S

Results go to benchmarks/FUZZ_RESULTS.md (and stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from benchmarks.harness import finish_results, rss_kib, run_stamp  # noqa: E402
from tests.support.fuzz import FuzzInput, InprocNode, gen_input, run_socket  # noqa: E402

RESULTS = REPO / "benchmarks" / "FUZZ_RESULTS.md"


class Tally:
    """Problems by kind, with the first input that showed each."""

    def __init__(self) -> None:
        self.count: collections.Counter[str] = collections.Counter()
        self.example: dict[str, str] = {}
        self.inputs = 0
        self.closed = 0
        self.protocol_errors = 0

    def add(self, inp: FuzzInput, problems: list[str], closed: bool, perr: bool) -> None:
        self.inputs += 1
        self.closed += closed
        self.protocol_errors += perr
        for p in problems:
            kind = p.strip().splitlines()[-1][:160] if "Traceback" in p else p[:160]
            self.count[kind] += 1
            self.example.setdefault(kind, repr(inp.commands or inp.chunks)[:400])

    def lines(self) -> list[str]:
        out = [f"- inputs: {self.inputs}; closed by the server: {self.closed} "
               f"(protocol errors: {self.protocol_errors})",
               f"- problems: {sum(self.count.values())}"]
        for kind, n in self.count.most_common():
            out.append(f"  - {n} x `{kind}`, e.g. `{self.example[kind]}`")
        return out


def run_inproc(n: int, seed: int) -> list[str]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    node = InprocNode(loop)
    rng = random.Random(seed)
    tally = Tally()
    warm = min(20_000, n // 10)
    blocks0 = 0
    t0 = time.perf_counter()
    for i in range(n):
        inp = gen_input(rng)
        out = node.run(inp)
        tally.add(inp, out.problems, out.closed, out.protocol_error)
        if i + 1 == warm:
            node.server.db.flush()
            gc.collect()
            blocks0 = sys.getallocatedblocks()
        if (i + 1) % 100_000 == 0:
            print(f"  in process: {i + 1} inputs, {sum(tally.count.values())} problems, "
                  f"{(i + 1) / (time.perf_counter() - t0):.0f}/s", flush=True)
    secs = time.perf_counter() - t0
    alive = node.probe()
    node.server.db.flush()
    gc.collect()
    blocks1 = sys.getallocatedblocks()
    clients = len(node.server.clients)
    node.close()
    loop.close()
    return [f"### In process (node.server.Server + Connection, seed {seed})",
            f"- {n} inputs in {secs:.0f} s ({n / secs:.0f}/s)", *tally.lines(),
            f"- a fresh connection still gets PONG: {alive}; clients left registered: {clients}",
            f"- Python allocated blocks after {warm} warm-up inputs: {blocks0}; at the end: "
            f"{blocks1} ({blocks1 - blocks0:+d}), data flushed both times"]


def _socket_phase(label: str, host: str, port: int, pids: dict[str, int], n: int,
                  seed: int) -> list[str]:
    c = redis.Redis(host=host, port=port, socket_timeout=30)
    base_clients = int(c.info("clients")["connected_clients"])
    rng = random.Random(seed)
    tally = Tally()
    rss: dict[str, dict[str, int]] = {k: {} for k in pids}  # process -> {sample: KiB}
    warm = max(n // 10, 1)
    t0 = time.perf_counter()
    stuck = 0
    for i in range(n):
        inp = gen_input(rng, socket_safe=True)
        out = run_socket(host, port, inp)
        tally.add(inp, out.problems, out.closed, out.protocol_error)
        stuck += any(p.startswith("stuck") for p in out.problems)
        if stuck >= 3:  # each costs the whole deadline: report instead of waiting on more
            n = i + 1
            tally.count["(phase stopped after 3 stuck connections)"] += 1
            tally.example.setdefault("(phase stopped after 3 stuck connections)", f"input {i}")
            break
        sample = {warm: "warm-up", warm + (n - warm) // 2: "half way"}.get(i + 1)
        if sample is not None and i + 1 < n:
            for k, pid in pids.items():
                rss[k][sample] = rss_kib(pid)
    secs = time.perf_counter() - t0
    for k, pid in pids.items():  # the end, also of a phase that stopped early
        rss[k]["end"] = rss_kib(pid)
    deadline = time.monotonic() + 10
    clients = int(c.info("clients")["connected_clients"])
    while clients != base_clients and time.monotonic() < deadline:
        time.sleep(0.05)
        clients = int(c.info("clients")["connected_clients"])
    lines = [f"### Over sockets: {label} (seed {seed})",
             f"- {n} inputs in {secs:.0f} s ({n / secs:.0f}/s)", *tally.lines(),
             f"- clients: {base_clients} before, {clients} after",
             f"- still answers PING: {c.ping()}"]
    for k, v in rss.items():
        shown = " / ".join(str(v.get(s, "-")) for s in ("warm-up", "half way", "end"))
        lines.append(f"- RSS of {k} (KiB) after warm-up / half way / end: {shown}")
    c.close()
    return lines


def run_sockets(n: int, seed: int) -> list[str]:
    from tests.support.cluster import start_cluster

    base = Path(tempfile.mkdtemp(prefix="fuzzbench-"))
    cl = start_cluster(base, shards=2, replicas=0, routers=1)
    try:
        nodes = list(cl.nodes.values())
        router = cl.routers[0]
        out = _socket_phase("a node", nodes[0].host, nodes[0].port,
                            {"the node": nodes[0].pid}, n, seed)
        out += [""] + _socket_phase("a router in front of two shards", router.host, router.port,
                                    {"the router": router.pid, "node 1": nodes[0].pid,
                                     "node 2": nodes[1].pid}, n, seed + 1)
        dead = [name for name, h in cl.nodes.items() if not h.alive]
        out.append(f"- processes that died: {dead or 'none'}")
        return out
    finally:
        cl.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--socket-inputs", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="20k in process, 1k per socket target")
    ap.add_argument("--no-write", action="store_true", help="do not write FUZZ_RESULTS.md")
    args = ap.parse_args()
    if args.quick:
        args.inputs, args.socket_inputs = 20_000, 1_000
    command = (f"python benchmarks/fuzz_bench.py --inputs {args.inputs} "
               f"--socket-inputs {args.socket_inputs} --seed {args.seed}")
    lines = ["# Protocol fuzzing results", "", run_stamp(command, os.getloadavg()[0]), ""]
    lines += run_inproc(args.inputs, args.seed)
    lines.append("")
    if args.socket_inputs:
        lines += run_sockets(args.socket_inputs, args.seed + 100)
    finish_results(lines, RESULTS, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
