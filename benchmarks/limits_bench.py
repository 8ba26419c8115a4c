"""What idle connections and clients that never read cost, redis-server and a node side by side.

1. Idle connections: N connections (default 10,000) that each sent one PING and then stay
   silent. Reported: the server's RSS before, with them open and after they closed, the
   memory per connection, and a PING round trip on another connection while they are open.
2. Slow consumers: a client pipelines XRANGE requests whose replies add up to far more than
   any buffer (default 400 x ~1 MB) and never reads. Both servers run with their default
   `client-output-buffer-limit normal 0 0 0` (no limit). Reported: RSS before and while the
   client sits there, how many requests the server ran, and a PING round trip on another
   connection; then the same with a consumer that sends XREADGROUP ... > and never reads.

    python benchmarks/limits_bench.py [--conns N] [--requests N] [--quick]

Results go to benchmarks/LIMITS_RESULTS.md (and stdout).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import (  # noqa: E402
    HOST,
    Conn,
    finish_results,
    info_fields,
    run_stamp,
    start_server,
)
from node.resp import encode_command  # noqa: E402

RESULTS = REPO / "benchmarks" / "LIMITS_RESULTS.md"


def _ping_ms(port: int) -> float:
    with Conn(port) as c:
        t = time.perf_counter()
        c.call("PING")
        return (time.perf_counter() - t) * 1000


def _settle(srv, seconds: float = 1.0) -> int:
    time.sleep(seconds)
    return srv.rss_kib()


def idle_connections(srv, n: int) -> list[str]:
    with Conn(srv.port) as admin:
        admin.call("CONFIG", "SET", "maxclients", str(n + 100))
        clients0 = int(info_fields(admin, "clients")["connected_clients"])
    rss0 = _settle(srv)
    socks = []
    ping = b"*1\r\n$4\r\nPING\r\n"
    for _ in range(n):
        s = socket.create_connection((HOST, srv.port))
        s.sendall(ping)
        socks.append(s)
    for s in socks:
        assert s.recv(16) == b"+PONG\r\n"
    rss1 = _settle(srv)
    with Conn(srv.port) as admin:
        clients1 = int(info_fields(admin, "clients")["connected_clients"])
    ms = _ping_ms(srv.port)
    for s in socks:
        s.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with Conn(srv.port) as admin:
            if int(info_fields(admin, "clients")["connected_clients"]) <= clients0:
                break
        time.sleep(0.2)
    rss2 = _settle(srv)
    per = (rss1 - rss0) * 1024 / n
    return [f"| {srv.label} | {clients1 - 1} | {rss0 // 1024} | {rss1 // 1024} | {rss2 // 1024} "
            f"| {per:.0f} | {ms:.1f} |"]


def _fill(srv, entries: int) -> None:
    with Conn(srv.port) as c:
        c.call("DEL", "lim:s")
        value = b"v" * 1000
        for i in range(0, entries, 1000):
            c.pipeline([("XADD", "lim:s", "*", "f", value) for _ in range(min(1000, entries - i))])
        c.call("XGROUP", "CREATE", "lim:s", "g", "0")


def slow_consumer(srv, requests: int, kind: str) -> list[str]:
    if kind == "XRANGE":
        req = encode_command([b"XRANGE", b"lim:s", b"-", b"+", b"COUNT", b"1000"])
    else:
        req = encode_command([b"XREADGROUP", b"GROUP", b"g", b"c1", b"COUNT", b"1000",
                              b"STREAMS", b"lim:s", b">"])
        with Conn(srv.port) as c:
            c.call("XGROUP", "SETID", "lim:s", "g", "0")
    rss0 = _settle(srv)
    with Conn(srv.port) as c:
        calls0 = _calls(c, kind)
    s = socket.create_connection((HOST, srv.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.settimeout(30)
    s.sendall(req * requests)
    peak = rss0
    for _ in range(10):
        time.sleep(0.5)
        peak = max(peak, srv.rss_kib())
    ms = _ping_ms(srv.port)
    with Conn(srv.port) as c:
        ran = _calls(c, kind) - calls0
    s.close()
    rss2 = _settle(srv, 2.0)
    return [f"| {srv.label} | {kind} | {requests} | {ran} | {rss0 // 1024} | {peak // 1024} | "
            f"{rss2 // 1024} | {ms:.1f} |"]


def _calls(c: Conn, kind: str) -> int:
    f = info_fields(c, "commandstats").get(f"cmdstat_{kind.lower()}", "")
    for part in f.split(","):
        if part.startswith("calls="):
            return int(part[6:])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conns", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.conns, args.requests, args.entries = 500, 40, 2000
    command = (f"python benchmarks/limits_bench.py --conns {args.conns} "
               f"--requests {args.requests} --entries {args.entries}")
    out = ["# Idle connections and slow consumers", "", run_stamp(command, os.getloadavg()[0]), "",
           "## Idle connections", "",
           "| server | connections | RSS before (MB) | RSS with them (MB) | RSS after close (MB) "
           "| bytes per connection | PING meanwhile (ms) |", "|---|---|---|---|---|---|---|"]
    servers = [start_server("redis", label="redis-server"), start_server("node", label="xshard node")]
    try:
        for srv in servers:
            out += idle_connections(srv, args.conns)
        out += ["", "## Clients that never read (client-output-buffer-limit normal 0 0 0)", "",
                f"Each request's reply is ~1 MB (1000 entries of 1 KB, stream of {args.entries}).",
                "", "| server | command | pipelined | ran | RSS before (MB) | RSS peak (MB) | "
                "RSS after close (MB) | PING meanwhile (ms) |", "|---|---|---|---|---|---|---|---|"]
        for srv in servers:
            _fill(srv, args.entries)
            for kind in ("XRANGE", "XREADGROUP"):
                out += slow_consumer(srv, args.requests, kind)
    finally:
        for srv in servers:
            srv.stop()
    finish_results(out, RESULTS, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
