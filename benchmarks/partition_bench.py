"""Network partitions, 20 rounds per case: what is lost, what a fenced primary accepted, what
was delivered twice, and how long fencing and promotion took.

Each case runs on a cluster of its own whose every process (etcd, nodes, controllers, router)
is in a network namespace of its own (tests/support/netns.py, root needed), under an XADD +
WAIT 1 load and an XREADGROUP consumer (tests/support/partload.py); one round is one
function of tests/support/partcases.py, the same as tests/control/test_partitions.py runs
once. Rounds of a case share its cluster: each round heals and settles before the next.

    sudo python benchmarks/partition_bench.py [--rounds 20] [--cases etcd,refused,...]
                                              [--output benchmarks/PARTITION_RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import netns, partcases  # noqa: E402
from tests.support.netcluster import NetCluster, start_net_cluster  # noqa: E402

# name -> (cluster shape, one round)
CASES: dict[str, tuple[dict, Callable[[NetCluster], partcases.Round]]] = {
    "etcd": ({}, partcases.etcd_cut),
    "refused": ({}, lambda c: partcases.etcd_cut(c, refuse_controllers=True)),
    "replica": ({}, lambda c: partcases.replica_cut(c, hold=3.5)),
    "router": ({"shards": 2, "routers": 1,
                "router_args": ("--cluster-down-timeout-ms", "2000")}, partcases.router_cut),
    "controller": ({"replicas": 2, "controllers": 2}, partcases.controller_cut),
    "flapping": ({}, partcases.flapping_link),
}
TITLES = {
    "etcd": "primary cut from etcd (not from clients)",
    "refused": "primary cut from etcd, its port refused to the controller",
    "replica": "primary cut from its replica",
    "router": "router cut from one shard",
    "controller": "leading controller cut from etcd, then the primary killed",
    "flapping": "replication link: 5% loss, +200 ms RTT, 3 outages of 1 s",
}


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return " / ".join(f.read().split()[:3])


def fmt(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f} / {max(xs):.2f}"


def run_case(name: str, rounds: int, base: Path) -> tuple[list[partcases.Round], list[str]]:
    shape, one = CASES[name]
    net = netns.Net()
    out: list[partcases.Round] = []
    failures: list[str] = []
    try:
        c = start_net_cluster(base / name, net, **{"shards": 1, "replicas": 1, **shape})
        try:
            for i in range(rounds):
                try:
                    r = one(c)
                except Exception as e:  # noqa: BLE001 - a round that could not finish is a finding
                    failures.append(f"round {i}: {type(e).__name__}: {str(e)[:200]}")
                    print(f"{name} round {i}: FAILED {e!r:.200}", flush=True)
                    break
                out.append(r)
                v = r.verdict
                print(f"{name} round {i}: acked {v.acked} lost {len(v.lost)} fenced-accepted "
                      f"{len(v.fenced_accepted)} double {len(v.double)} fence {r.fence_s} "
                      f"promote {r.promote_s} {r.notes}", flush=True)
        finally:
            c.stop()
    finally:
        net.close()
    return out, failures


def note(name: str, rs: list[partcases.Round]) -> str:
    """The case-specific column: what else each round measured (median / max)."""
    def col(key: str) -> list[float]:
        return [r.notes[key] for r in rs if isinstance(r.notes.get(key), (int, float))]

    def all_true(key: str) -> str:
        return f"{sum(1 for r in rs if r.notes.get(key))}/{len(rs)}"

    if name in ("etcd", "refused"):
        return f"fenced before promotion {all_true('fenced_before_promotion')}"
    if name == "replica":
        return (f"WAIT 1 answered 0 {sum(col('wait0_during')):.0f}x, acked during the cut "
                f"{sum(col('acked_during')):.0f}, primary kept {all_true('primary_unchanged')}, "
                f"catch-up s {fmt(col('catch_up_s'))}")
    if name == "router":
        return (f"first -CLUSTERDOWN for the cut shard s {fmt(col('shard1_first_error_s'))}, "
                f"longest s {fmt(col('shard1_longest_error_s'))}; other shard errors "
                f"{sum(col('shard0_err_during')):.0f}")
    if name == "controller":
        return (f"takeover s {fmt(col('takeover_s'))}, one failover per kill "
                f"{sum(1 for r in rs if r.notes.get('failovers') == 1)}/{len(rs)}, "
                f"one master {sum(1 for r in rs if len(r.notes.get('masters', [])) == 1)}/{len(rs)}")
    if name == "flapping":
        return (f"catch-up s {fmt(col('catch_up_s'))}, nothing promoted "
                f"{all_true('epoch_unchanged')}")
    return ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--output", default=str(REPO / "benchmarks" / "PARTITION_RESULTS.md"))
    args = ap.parse_args()
    why = netns.available()
    if why is not None:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    load_before = uptime()
    t0 = time.monotonic()
    rows, problems = [], []
    with tempfile.TemporaryDirectory(prefix="partition-bench-") as tmp:
        for name in names:
            rs, failures = run_case(name, args.rounds, Path(tmp))
            problems += [f"{name}: {f}" for f in failures]
            agree = sum(1 for r in rs if r.notes.get("agree", True))
            rows.append(
                f"| {TITLES[name]} | {len(rs)}/{args.rounds} | "
                f"{sum(r.verdict.acked for r in rs)} | {sum(len(r.verdict.lost) for r in rs)} | "
                f"{sum(len(r.verdict.fenced_accepted) for r in rs)} | "
                f"{sum(len(r.verdict.double) for r in rs)} | {agree}/{len(rs)} | "
                f"{fmt([r.fence_s for r in rs if r.fence_s is not None])} | "
                f"{fmt([r.promote_s for r in rs if r.promote_s is not None])} | "
                f"{note(name, rs)} |")
    md = "\n".join([
        "# Network partition results",
        "",
        f"`python benchmarks/partition_bench.py --rounds {args.rounds}` on main: every process "
        "in a network namespace of its own, faults as nftables rules (tests/support/netns.py), "
        "an XADD + WAIT 1 writer and an XREADGROUP consumer (WAIT 1 after each read) per round "
        "(tests/support/partload.py). Times are from the cut (for the controller case, "
        "promotion from the kill of the primary). docs/operations.md says what each case "
        "means for users.",
        "",
        "| case | rounds | writes acked (WAIT 1) | lost | accepted by a replaced primary | "
        "committed deliveries repeated | streams equal at the end | time to fence, s "
        "(median / max) | time to promote, s (median / max) | also |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Machine: {os.cpu_count()} CPUs, load average {load_before} before, {uptime()} after "
        f"({time.monotonic() - t0:.0f} s; other sessions were running).",
        *(["", "Rounds that could not finish:", *[f"- {p}" for p in problems]] if problems
          else []),
    ])
    print(md)
    if args.output != "-":
        Path(args.output).write_text(md + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
