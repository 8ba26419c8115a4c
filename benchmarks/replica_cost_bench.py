"""Instructions a replica spends per delivered entry, counted by callgrind on the whole process.

    python benchmarks/replica_cost_bench.py [--rate 100] [--seconds 10] [--repo DIR] [--keep F]

A primary and its replica (`xshard node`, both `appendonly yes`, `appendfsync everysec`, as in
e2e_bench.py's `node-repl`), the replica under `valgrind --tool=callgrind`. e2e_bench.py's
load runs against the primary (one producer process, 10 consumer processes in one group:
XADD, XREADGROUP ... BLOCK, XACK), so the replica applies the primary's real stream: per
entry an XADD, the XCLAIM and XGROUP SETID of its delivery and the XACK. The counters are
zeroed after a warm-up and dumped once the replica's offset has caught up with the
primary's, so everything the replica did for those entries is in the count, whatever the
machine's load (callgrind counts instructions, not time; kernel time is not counted). The
rate is low because the replica runs ~50x slower under valgrind: its idle timers (10 Hz)
weigh more per entry here than at thousands of entries/s.

Prints the instructions per entry of the whole process and of the parts named below;
`--keep` copies the dump for `callgrind_annotate --inclusive=yes`. `--repo` runs another
checkout (built in place) for a before/after.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path.insert(0, str(BENCH.parent))
    sys.path.insert(0, str(BENCH))

import cost_bench  # noqa: E402
import e2e_bench  # noqa: E402
import redis  # noqa: E402
import router_bench  # noqa: E402
from router_bench import Procs  # noqa: E402

from control.ports import free_port  # noqa: E402

AOF = ("--appendonly", "yes", "--appendfsync", "everysec")
# callgrind function names (regular expressions: Cython numbers a class's methods, so the
# numbers move when one is added) -> what the report calls them
PARTS = {
    "__pyx_f_6uvloop_4loop___uv_stream_on_read": "socket reads (the stream from the primary)",
    r"EffectApplier_\d+feed": "- EffectApplier.feed (parse, apply, republish)",
    r"EffectApplier_\d+_direct": "- - the direct apply (XCLAIM, XACK, XGROUP SETID)",
    r"groups_apply_xclaim_effect$": "- - - XCLAIM",
    r"groups_apply_setid_effect$": "- - - XGROUP SETID",
    r"groups_xclaim$": "- - XCLAIM (dispatched)",
    r"groups_\d+xgroup$": "- - XGROUP SETID (dispatched)",
    r"groups_xack$": "- - XACK",
    r"EffectApplier_\d+flush_run": "- - XADD (the batched run)",
    "Reader_gets": "- - hiredis parsing",
    "uv__run_idle": "loop callbacks (AOF write, ...)",
    "__uvtimer_callback": "timers (crons)",
}


def _inclusive(path: Path) -> dict[str, int]:
    """Inclusive instructions of the PARTS functions, read from callgrind_annotate."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
                         capture_output=True, text=True, check=True).stdout
    found: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
        if not m:
            continue
        count = int(m.group(1).replace(",", ""))
        for key in PARTS:
            if re.search(key, m.group(2)) and "=>" not in line:
                found[key] = max(found.get(key, 0), count)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repo", default=str(BENCH.parent), help="the checkout the nodes run")
    ap.add_argument("--keep", default="", help="copy the callgrind dump here")
    a = ap.parse_args(argv)
    repo = Path(a.repo).resolve()
    cost_bench.repo = repo
    router_bench.REPO_ROOT = repo  # Procs starts the primary from there
    load = os.getloadavg()
    procs = Procs()
    work = Path(tempfile.mkdtemp(prefix="replica-cost-"))
    cg = None
    try:
        pport = procs.node("primary", *AOF)
        rport = free_port()
        d = work / "replica"
        d.mkdir()
        cg = cost_bench.Callgrind(
            cost_bench._node_argv(rport, d, "--replicaof", f"{e2e_bench.HOST} {pport}", *AOF),
            rport, work, dict(os.environ), toggles=())
        rep, prim = redis.Redis(port=rport), redis.Redis(port=pport)
        while rep.info("replication").get("master_link_status") != "up":
            time.sleep(0.2)
        e2e_bench.run_load(pport, a.rate, 2, 10, 1)  # warm-up
        time.sleep(1)
        cg.zero()
        res = e2e_bench.run_load(pport, a.rate, a.seconds, 10, 1)
        while rep.info("replication")["master_repl_offset"] < \
                prim.info("replication")["master_repl_offset"]:
            time.sleep(0.2)
        time.sleep(0.5)
        total = cg.dump_total()
        dump = max(work.glob("callgrind.out.*.*"), key=lambda f: f.stat().st_mtime)
        parts = _inclusive(dump)
        if a.keep:
            shutil.copy(dump, a.keep)
    finally:
        if cg is not None:
            cg.stop()
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)
    n = int(res["sent"])
    print(f"{repo}: {n} entries at {a.rate}/s; load average {load[0]:.1f}; replica instructions "
          f"per delivered entry:")
    print(f"whole process: {total / n:,.0f}")
    for key, name in PARTS.items():
        if key in parts:
            print(f"{name}: {parts[key] / n:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
