"""What TLS costs on XADD: redis-server and the node, each over plain TCP and over TLS.

    python benchmarks/tls_bench.py [--quick] [--rounds N] [--requests N] [--output PATH]

Each round starts a fresh redis-server 7.0 and a fresh node, both listening on a plain port
and on a tls-port (mutual TLS: tls-auth-clients yes, a client certificate from a CA made here
by control/certs.py). redis-benchmark (50 clients, `--tls --cacert --cert --key` for the TLS
port) runs XADD at pipeline 1 and 16 against each port; the order of plain and TLS alternates
from round to round. Servers are pinned to CPU 0 and redis-benchmark to CPU 1. The medians go
to benchmarks/TLS_RESULTS.md: for each server, TLS / plain; for each transport, node / redis.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402
from control.certs import make_tls  # noqa: E402
from control.ports import free_port  # noqa: E402

FIELDS = [tok for i in range(1, 6) for tok in (f"f{i}", f"value{i:05d}")]
SERVERS = {"redis": "redis-server", "node": "xshard node"}
SERVER_CPU, LOAD_CPU = (0, 1) if (os.cpu_count() or 1) >= 2 else (None, None)


def _tls_version(port: int, certs) -> str:  # noqa: ANN001
    """The TLS version a client negotiates with the server (what the figures are for)."""
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw) as s:
        return f"{s.version()} {s.cipher()[0]}"


def _run(kind: str, certs, rounds: int, requests: int,  # noqa: ANN001
         versions: dict[str, str]) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """{(transport, pipeline): [(requests/s, server CPU us per request) per round]} for one
    kind of server."""
    out: dict[tuple[str, int], list[tuple[float, float]]] = {}
    tls_args = ("--tls-cert-file", str(certs.server_cert), "--tls-key-file",
                str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
                "--tls-auth-clients", "yes")
    client_tls = ["--tls", "--cacert", str(certs.ca), "--cert", str(certs.client_cert),
                  "--key", str(certs.client_key)]
    for rnd in range(rounds):
        tport = free_port()
        srv = harness.start_server(kind, cpu=SERVER_CPU, extra=("--tls-port", str(tport), *tls_args))
        try:
            versions[kind] = _tls_version(tport, certs)
            order = ("plain", "tls") if rnd % 2 == 0 else ("tls", "plain")
            for pipeline in (1, 16):
                for transport in order:
                    port = srv.port if transport == "plain" else tport
                    extra = client_tls if transport == "tls" else []
                    cpu0 = harness.cpu_seconds(srv.pid)
                    rps = harness.redis_benchmark(port, [*extra, "-c", "50", "-n", str(requests), "-P",
                                                 str(pipeline), "XADD", f"s-{transport}", "*",
                                                 *FIELDS], timeout=600, cpu=LOAD_CPU)
                    us = (harness.cpu_seconds(srv.pid) - cpu0) / requests * 1e6
                    out.setdefault((transport, pipeline), []).append((rps, us))
                    print(f"round {rnd + 1} {SERVERS[kind]:12} {transport:5} P{pipeline:<2} "
                          f"{rps:10,.0f} req/s, server CPU {us:.1f} us/request", flush=True)
        finally:
            srv.stop()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round of 20k requests (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--output", default=str(Path(__file__).with_name("TLS_RESULTS.md")))
    a = ap.parse_args(argv)
    rounds, requests = (1, 20_000) if a.quick else (a.rounds, a.requests)
    load0 = os.getloadavg()[0]
    uptime0 = Path("/proc/loadavg").read_text().split()[:3]
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as d:
        certs = make_tls(Path(d))
        res = {kind: _run(kind, certs, rounds, requests, versions) for kind in SERVERS}
    med = {k: {m: statistics.median(x[0] for x in v) for m, v in r.items()}
           for k, r in res.items()}
    cpu = {k: {m: statistics.median(x[1] for x in v) for m, v in r.items()}
           for k, r in res.items()}
    lines = harness.results_head("TLS cost on XADD: redis-server and the node, plain vs TLS",
                         "tls_bench.py", argv)
    lines += [harness.machine_line(load0, SERVER_CPU, LOAD_CPU,
                           f" (loadavg {' '.join(uptime0)})"),
              f"- {harness.redis_version()}; redis-benchmark -c 50 -n {requests:,}, XADD of 5 fields, "
              f"median of {rounds} round(s); mutual TLS (client certificates), ECDSA P-256 "
              f"certificates; negotiated: "
              + "; ".join(f"{SERVERS[k]} {v}" for k, v in versions.items()), "",
              "Server CPU per request is the server process's CPU time over the run divided by "
              "the requests: it is less sensitive than req/s to a loaded load generator.", "",
              "| server | pipeline | plain req/s | TLS req/s | TLS / plain | CPU us/req plain "
              "| CPU us/req TLS | TLS extra us/req |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, label in SERVERS.items():
        for p in (1, 16):
            plain, tls = med[kind][("plain", p)], med[kind][("tls", p)]
            cp, ct = cpu[kind][("plain", p)], cpu[kind][("tls", p)]
            lines.append(f"| {label} | {p} | {plain:,.0f} | {tls:,.0f} | {tls / plain:.2f} | "
                         f"{cp:.1f} | {ct:.1f} | {ct - cp:.1f} |")
    lines += ["", "| transport | pipeline | node / redis-server |", "|---|---:|---:|"]
    for t in ("plain", "tls"):
        for p in (1, 16):
            lines.append(f"| {t} | {p} | {med['node'][(t, p)] / med['redis'][(t, p)]:.2f} |")
    lines += ["", "Every round's figures (req/s):", ""]
    for kind, r in res.items():
        for (t, p), v in sorted(r.items()):
            lines.append(f"- {SERVERS[kind]} {t} P{p}: "
                         + ", ".join(f"{x:,.0f} ({us:.1f} us)" for x, us in v))
    lines += ["", f"Run took until {time.strftime('%H:%M UTC', time.gmtime())}."]
    harness.finish_results(lines, Path(a.output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
