"""Instructions per command, counted by callgrind: the cost budget of benchmarks/PROFILE.md.

    python benchmarks/cost_bench.py [--only xadd-p1,...] [--n 2000] [--pure]

Wall-clock ratios on this shared 2-core machine move with everybody else's load; the number
of instructions a server executes for a command does not. Each measurement starts the server
under test (an `xshard node`, or an `xshard router` in front of a plain node; for
`router-pxadd`, `s` is a partitioned stream of 4 partitions there) under
`valgrind --tool=callgrind`, warms it up, zeroes the counters (`callgrind_control -z`), sends
N commands from outside, dumps the counters (`callgrind_control -d`) and divides. Only the work
inside uvloop's socket-read callback is counted (READ_CALLBACK): idle timers would otherwise
add in proportion to the run's wall time, which the machine's load decides. For the router,
uvloop's ready-callback runner is counted too (IDLE_CALLBACK): it writes what a loop
iteration relayed at its end (router/outbox.py). System calls are counted only in their user
part, so a change that saves writes shows less here than in CPU time (router_bench.py
--relay reports both servers' CPU per XADD).

AOF replay is measured in CPU time (not under callgrind: too slow to start), as the
difference between two starts of a node whose appendonly file holds N and 2N XADD effects
(start-up and imports cancel out).

Every node starts with `--slowlog-log-slower-than -1` (the slowlog off, as redis-server
accepts it): under callgrind on a loaded machine a few commands take over the default 10 ms,
and logging them added 0.3-0.7k instructions per XADD that the command itself does not cost.

`--pure` sets XSHARD_PURE_PYTHON=1 in the server, so the interpreted path is measured even
where the compiled modules are built; `--repo` runs the servers from another checkout (the
"before" column).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hiredis

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402

repo = harness.REPO_ROOT  # the checkout whose code the servers run (--repo)

FIELDS = [tok for i in range(1, 6) for tok in (f"f{i}", f"value{i:05d}")]
XADD = ["XADD", "s", "*", *FIELDS]
SCALE = {"xrange": 0.1, "xrevrange": 0.1, "xrange-xdel": 0.1, "xrevrange-xdel": 0.1,
         "xreadgroup-xack": 0.1, "aof-replay": 30, "router-deliver": 0.1,
         "deliver": 0.1}
SCENARIOS = ["xadd-p1", "xadd-p4", "xadd-p16", "xreadgroup-xack", "xrange", "xrevrange",
             "xrange-xdel", "xrevrange-xdel", "router-xadd", "router-xadd-p16", "router-pxadd",
             "router-pxadd-p16", "router-deliver", "deliver", "aof-replay"]
RANGES = ("xrange", "xrevrange", "xrange-xdel", "xrevrange-xdel")
DELIVERIES = {  # what one op of the delivery scenarios is
    "router-deliver": "delivery through the router (XADD, the parked XREADGROUP BLOCK's reply, "
                      "XACK, the next XREADGROUP BLOCK; one at a time)",
    "deliver": "delivery on a node with its AOF (XREADGROUP BLOCK, parked 50 ms before the XADD "
               "that wakes it, XACK; one at a time)"}


# Only what runs inside uvloop's socket-read callback is counted: the request path of both
# servers (parse, dispatch, handler, reply, and a router's relay in both directions), but not
# the idle timers, whose share grows with the wall time a run takes on a loaded machine.
READ_CALLBACK = "__pyx_f_6uvloop_4loop___uv_stream_on_read"
# The router writes what a loop iteration relayed at its end, in a call_soon callback (one write
# per connection instead of one per request): for the router, uvloop's ready-callback runner is
# counted too.
IDLE_CALLBACK = "__pyx_f_6uvloop_4loop_4Loop__on_idle"


class Callgrind:
    """One server process under callgrind; counts are read from its dump files."""

    def __init__(self, argv: list[str], port: int, workdir: Path, env: dict[str, str],
                 toggles: tuple[str, ...] = (READ_CALLBACK,)) -> None:
        self.out = workdir / "callgrind.out"
        self.log = open(workdir / f"vg-{port}.log", "wb")
        opts = [f"--toggle-collect={t}" for t in toggles]
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}.%p",
               "--dump-instr=no", "--compress-strings=no", *opts, *argv]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=repo, env=env, stdin=subprocess.DEVNULL)
        self.port = port
        harness.wait_for_ping(port, 600, self.proc)

    def control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], check=True,
                       capture_output=True, timeout=600)

    def zero(self) -> None:
        self.control("-z")

    def dump_total(self) -> int:
        """Dump the counters since the last zero and return the instructions in that part."""
        before = set(self.out.parent.glob(f"{self.out.name}.{self.proc.pid}*"))
        self.control("-d")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            new = set(self.out.parent.glob(f"{self.out.name}.{self.proc.pid}*")) - before
            for f in new:
                total = _totals(f)
                if total is not None:
                    return total
            time.sleep(0.2)
        raise RuntimeError("callgrind dump did not appear")

    def stop(self) -> int:
        """Stop the process and return the instructions of its last (final) part."""
        self.proc.terminate()
        try:
            self.proc.wait(600)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        final = self.out.parent / f"{self.out.name}.{self.proc.pid}"
        total = _totals(final) if final.exists() else None
        return total or 0


def _totals(path: Path) -> int | None:
    text = path.read_text(errors="replace")
    m = re.search(r"^(?:totals|summary):\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def _node_argv(port: int, d: Path, *extra: str) -> list[str]:
    """A node's command line, the slowlog off (see the docstring at the top)."""
    return [sys.executable, "-m", "control.cli", "node", "--port", str(port), "--dir", str(d),
            "--slowlog-log-slower-than", "-1", *extra]


def _bench(port: int, n: int, pipeline: int, cmd: list[str], clients: int = 50) -> None:
    exe = shutil.which("redis-benchmark") or "redis-benchmark"
    subprocess.run([exe, "-p", str(port), "-c", str(clients), "-n", str(n), "-P", str(pipeline),
                    "-q", *cmd], check=True, capture_output=True, timeout=3600)


def _fill(port: int, n: int) -> None:
    with harness.Conn(port, timeout=600) as c:
        for i in range(0, n, 500):
            c.pipeline([tuple(XADD)] * min(500, n - i))


def _sprinkle_deletes(port: int, every: int = 10) -> None:
    """XDEL one entry in `every` (offset by half of it): each node keeps a few tombstones."""
    with harness.Conn(port, timeout=600) as c:
        ids = [e[0] for e in c.call("XRANGE", "s", "-", "+")]
        c.call("XDEL", "s", *ids[every // 2::every])


def _readgroup_ack(port: int, rounds: int) -> None:
    """`rounds` x (XREADGROUP COUNT 10 + XACK of the 10 IDs), one client, no pipelining."""
    with harness.Conn(port, timeout=600) as c:
        for _ in range(rounds):
            r = c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "s", ">")
            ids = [e[0] for e in r[0][1]]
            c.call("XACK", "s", "g", *ids)


def _deliver(port: int, node_port: int, rounds: int, settle: float = 0.0) -> None:
    """`rounds` deliveries one at a time, e2e_bench.py's shape at low load: a consumer parks an
    XREADGROUP BLOCK, an XADD wakes it, it XACKs the entry. Each XADD waits until the read is
    parked on the node (its INFO, asked directly), so every round takes the blocked path; with
    `settle`, it waits that long instead, and asks INFO every 50th round only (the node itself
    is counted, and its INFO would be: a round's work takes a few ms under callgrind)."""
    with harness.Conn(port, timeout=600) as cons, harness.Conn(port, timeout=600) as prod, \
            harness.Conn(node_port, timeout=600) as node:
        read = hiredis.pack_command(("XREADGROUP", "GROUP", "g", "c", "COUNT", "100", "BLOCK",
                                     "100000", "STREAMS", "s", ">"))
        add = hiredis.pack_command(tuple(XADD))
        for i in range(rounds):
            cons.send(read)
            if settle:
                time.sleep(settle)
                # every 50th round checks that the margin held (the read was parked)
                if i % 50 == 0 and b"blocked_clients:1" not in node.call("INFO", "clients"):
                    raise RuntimeError(f"the XREADGROUP was not parked within {settle} s")
            while not settle and b"blocked_clients:1" not in node.call("INFO", "clients"):
                time.sleep(0.001)
            prod.send(add)
            r = cons.read_reply()
            prod.read_reply()
            cons.call("XACK", "s", "g", r[0][1][0][0])


def measure(name: str, n: int, env: dict[str, str], work: Path) -> tuple[float, str]:
    """(instructions per op, what an op is)."""
    d = work / name
    d.mkdir()
    port = harness.free_port()
    if name == "aof-replay":
        return _aof_replay(n, env, d)
    helper = None
    if name.startswith("router-"):
        nport = harness.free_port()
        helper = subprocess.Popen(_node_argv(nport, d), cwd=repo, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        harness.wait_for_ping(nport, 60, helper)
        topo = d / "topology.json"
        topo.write_text(json.dumps({
            "nodes": {"p": {"id": "p", "host": "127.0.0.1", "port": nport, "shard": "0",
                            "role": "primary"}},
            "shards": {"0": {"primary": "p", "replicas": [], "epoch": 1}},
            "slots": [[0, 16383, "0"]],
            # router-pxadd: `s` is a partitioned stream of 4 partitions (on the one node)
            "pstreams": {"s": _pstream_record(4)} if name.startswith("router-pxadd") else {}}))
        argv = [sys.executable, "-m", "control.cli", "router", "--port", str(port),
                "--topology", str(topo)]
    elif name == "deliver":  # the AOF on, so that the delivery's effects are built
        argv = _node_argv(port, d, "--appendonly", "yes", "--appendfsync", "everysec")
    else:
        argv = _node_argv(port, d)
    vg = Callgrind(argv, port, d, env, (READ_CALLBACK, IDLE_CALLBACK) if helper is not None
                   else (READ_CALLBACK,))
    try:
        if name in DELIVERIES:
            with harness.Conn(port) as c:
                c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
            # the node's INFO: the router's helper node, or (deliver) the counted node itself,
            # which is asked only now and then, after a settle time
            info_port, settle = (nport, 0.0) if name == "router-deliver" else (port, 0.05)
            _deliver(port, info_port, 20, settle)
        if name == "xreadgroup-xack" or name in RANGES:
            _fill(port, 10 * n + 1000 if name == "xreadgroup-xack" else 1000)
            if name.endswith("-xdel"):
                _sprinkle_deletes(port)
            if name == "xreadgroup-xack":
                with harness.Conn(port) as c:
                    c.call("XGROUP", "CREATE", "s", "g", "0")
                _readgroup_ack(port, 20)
        warm = {"xadd-p1": (XADD, 1), "xadd-p4": (XADD, 4), "xadd-p16": (XADD, 16), "router-xadd": (XADD, 1),
                "router-xadd-p16": (XADD, 16), "router-pxadd": (XADD, 1),
                "router-pxadd-p16": (XADD, 16),
                "xrange": (["XRANGE", "s", "-", "+", "COUNT", "100"], 1),
                "xrevrange": (["XREVRANGE", "s", "+", "-", "COUNT", "100"], 1),
                "xrange-xdel": (["XRANGE", "s", "-", "+", "COUNT", "100"], 1),
                "xrevrange-xdel": (["XREVRANGE", "s", "+", "-", "COUNT", "100"], 1)}
        if name in warm:
            cmd, p = warm[name]
            _bench(port, min(2000, n), p, cmd)
            vg.zero()
            _bench(port, n, p, cmd)
            what = f"{cmd[0]} (50 clients, pipeline {p})"
        elif name in DELIVERIES:
            vg.zero()
            _deliver(port, info_port, n, settle)
            what = DELIVERIES[name]
        else:
            vg.zero()
            _readgroup_ack(port, n)
            what = "XREADGROUP COUNT 10 + XACK of the 10 IDs (1 client)"
        total = vg.dump_total()
    finally:
        vg.stop()
        if helper is not None:
            helper.terminate()
            helper.wait(60)
    return total / n, what


def _pstream_record(n: int) -> dict:
    """A partitioned stream's record (base/records.py) as `xshard stream create` makes it."""
    from control.streamctl import DEFAULT_STRIDE, partition_key, spread_tags
    return {"partitions": n, "stride": DEFAULT_STRIDE, "key_field": None,
            "keys": [partition_key(t, "s", p, DEFAULT_STRIDE)
                     for p, t in enumerate(spread_tags(n))]}


def _aof_replay(n: int, env: dict[str, str], d: Path) -> tuple[float, str]:
    """CPU time per effect: the difference between starting with 2N and with N effects in the
    AOF. Not under callgrind: a start-up under valgrind on a loaded machine takes too long;
    CPU time (utime + stime) of the process does not count the time others take."""
    costs = []
    for k in (1, 2):
        sub = d / f"aof{k}"
        sub.mkdir()
        port = harness.free_port()
        p = subprocess.Popen(_node_argv(port, sub, "--appendonly", "yes"), cwd=repo,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            harness.wait_for_ping(port, 60, p)
            _fill(port, k * n)
        finally:
            p.terminate()
            p.wait(60)
        port = harness.free_port()
        p = subprocess.Popen(_node_argv(port, sub, "--appendonly", "yes"), cwd=repo,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            harness.wait_for_ping(port, 600, p)
            costs.append(harness.cpu_seconds(p.pid))
            with harness.Conn(port) as c:
                assert c.call("XLEN", "s") == k * n
        finally:
            p.terminate()
            p.wait(60)
    per = (costs[1] - costs[0]) / n
    return per * 1e6, (f"us of CPU per XADD effect replayed from the AOF at start-up "
                       f"({1 / per:,.0f} effects per CPU second)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--n", type=int, default=2000,
                    help="XADDs counted per scenario (x0.1 for the ranges and XREADGROUP, x30 "
                         "for AOF replay)")
    ap.add_argument("--pure", action="store_true", help="XSHARD_PURE_PYTHON=1 in the servers")
    ap.add_argument("--keep", default="",
                    help="copy the callgrind dumps here (for callgrind_annotate)")
    ap.add_argument("--repo", default=str(harness.REPO_ROOT),
                    help="run the servers from this checkout (e.g. main, for a before column)")
    args = ap.parse_args()
    global repo
    repo = Path(args.repo).resolve()
    env = dict(os.environ)
    env.pop("XSHARD_PURE_PYTHON", None)
    if args.pure:
        env["XSHARD_PURE_PYTHON"] = "1"
    with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
        for name in args.only.split(","):
            # Ranges and reads cost 10-20x an XADD: fewer of them give as many instructions.
            n = max(1, int(args.n * SCALE.get(name, 1)))
            per_op, what = measure(name, n, env, Path(tmp))
            if args.keep:
                keep = Path(args.keep)
                keep.mkdir(parents=True, exist_ok=True)
                for f in (Path(tmp) / name).glob("callgrind.out.*"):
                    shutil.copy(f, keep / f"{name}.{f.name}")
            if name == "aof-replay":
                print(f"{name:18} {per_op:8.2f} {what}", flush=True)
            else:
                print(f"{name:18} {per_op / 1000:8.1f}k instructions  per {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
