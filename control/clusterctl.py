"""The cluster subcommands of `xshard`: create, status, failover, controller, up.

Bad input and unreachable services end in one line on stderr and a non-zero exit (1 for a
failure, 2 for usage), never a traceback: these are the commands people type first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_CLUSTER = "xshard"
STATE_DIR = ".xshard"  # `up` keeps data, logs and the etcd URL here


class CliError(Exception):
    """One line for the user; exit code 1."""


def default_etcd() -> str:
    """XSHARD_ETCD_URL, else the etcd that `xshard up` started here, else localhost:2379."""
    env = os.environ.get("XSHARD_ETCD_URL")
    if env:
        return env
    with contextlib.suppress(OSError):
        return Path(STATE_DIR, "etcd.url").read_text().strip()
    return "http://127.0.0.1:2379"


def default_cluster() -> str:
    """The cluster that `xshard up` runs here, else "xshard"."""
    with contextlib.suppress(OSError):
        return Path(STATE_DIR, "cluster").read_text().strip() or DEFAULT_CLUSTER
    return DEFAULT_CLUSTER


def _parser(prog: str, desc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"xshard {prog}", description=desc)
    p.add_argument("--etcd", default=None, metavar="URL",
                   help="etcd endpoint (default: $XSHARD_ETCD_URL, the one `xshard up` started "
                        "here, or http://127.0.0.1:2379)")
    p.add_argument("--cluster", default=default_cluster(), metavar="NAME",
                   help="cluster name, the etcd key prefix /xshard/NAME/ (default: the one "
                        f"`xshard up` runs here, else {DEFAULT_CLUSTER})")
    return p


async def _open(url: str, cluster: str):  # -> Store
    from control.store import Store, Unreachable

    store = Store(url, cluster)
    try:
        await store.connect()
    except Unreachable as e:
        await store.close()
        raise CliError(str(e)) from None
    return store


# --- create --------------------------------------------------------------------------------------

async def create(url: str, cluster: str, shards: int, replicas: int) -> str:
    """Write the shards and an even slot map once; returns a one-line summary."""
    from control.store import even_slots

    if shards < 1 or shards > 16384:
        raise CliError("--shards must be between 1 and 16384")
    if replicas < 0:
        raise CliError("--replicas must be 0 or more")
    ids = [str(i) for i in range(shards)]
    store = await _open(url, cluster)
    try:
        if not await store.create_cluster(ids):
            v = await store.view()
            raise CliError(f"cluster '{cluster}' already exists ({len(v.shards)} shards, slot "
                           f"map revision {v.slots.mod if v.slots else 0})")
    finally:
        await store.close()
    ranges = ", ".join(f"{sid}: {a}-{b}" for a, b, sid in even_slots(ids))
    return (f"created cluster '{cluster}': {shards} shards ({ranges}); start "
            f"{shards * (1 + replicas)} nodes with --etcd {url} --cluster {cluster} --shard ID")


def cmd_create(argv: list[str]) -> int:
    p = _parser("create", "Create a cluster in etcd: shard records and an even slot split, once.")
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--replicas", type=int, default=1,
                   help="replicas per shard you intend to start (nodes join on their own)")
    a = p.parse_args(argv)
    print(asyncio.run(create(a.etcd or default_etcd(), a.cluster, a.shards, a.replicas)))
    return 0


# --- status --------------------------------------------------------------------------------------

async def status_rows(url: str, cluster: str) -> tuple[list[str], list[list[str]]]:
    """(header lines, table rows) describing every shard and node."""
    from control import nodeclient

    store = await _open(url, cluster)
    try:
        v = await store.view()
    finally:
        await store.close()
    if not v.shards:
        raise CliError(f"cluster '{cluster}' does not exist in etcd at {url} (run xshard create)")
    offsets: dict[str, int | None] = {}

    async def probe(nid: str) -> None:
        n = v.nodes[nid].value
        try:
            offsets[nid] = nodeclient.repl_offset(
                await nodeclient.info(n.host, n.port, "replication", timeout=0.5))
        except Exception:  # noqa: BLE001 - shown as "?"
            offsets[nid] = None

    await asyncio.gather(*(probe(n) for n in v.nodes))
    ranges: dict[str, list[str]] = {}
    for a, b, sid in (v.slots.value if v.slots else []):
        ranges.setdefault(str(sid), []).append(f"{a}-{b}" if a != b else str(a))
    head = [f"cluster {cluster} at {url}: {len(v.shards)} shards, slot map revision "
            f"{v.slots.mod if v.slots else 0}, controller leader: "
            f"{v.leader.value if v.leader else 'none'}"]
    rows = [["SHARD", "EPOCH", "SLOTS", "NODE", "ROLE", "ADDRESS", "LIVE", "OFFSET", "LAG"]]
    for sid in v.shard_ids():
        rec = v.shards[sid].value
        p_off = offsets.get(rec.primary) if rec.primary else None
        members = rec.members() + sorted(n for n, e in v.nodes.items()
                                         if e.value.shard == sid and n not in rec.members())
        if not members:
            rows.append([sid, str(rec.epoch), ",".join(ranges.get(sid, [])) or "-", "-",
                         "-", "-", "-", "-", "-"])
        for i, nid in enumerate(members):
            e = v.nodes.get(nid)
            role = ("primary" if nid == rec.primary else "replica" if nid in rec.replicas
                    else "joining")
            off = offsets.get(nid)
            lag = "-"
            if role == "replica" and off is not None and p_off is not None:
                lag = str(max(0, p_off - off))
            rows.append([sid if i == 0 else "", str(rec.epoch) if i == 0 else "",
                         (",".join(ranges.get(sid, [])) or "-") if i == 0 else "", nid, role,
                         f"{e.value.host}:{e.value.port}" if e else "-",
                         "yes" if e else "no", "?" if off is None and e else
                         (str(off) if off is not None else "-"), lag])
    return head, rows


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows)


def cmd_status(argv: list[str]) -> int:
    p = _parser("status", "Shards, roles, offsets, lag, slot ranges and epochs.")
    a = p.parse_args(argv)
    head, rows = asyncio.run(status_rows(a.etcd or default_etcd(), a.cluster))
    print("\n".join(head))
    print(format_table(rows))
    return 0


# --- failover ------------------------------------------------------------------------------------

async def manual_failover(url: str, cluster: str, shard: str, force: bool) -> str:
    from control.controller import FailoverError, failover

    store = await _open(url, cluster)
    try:
        v = await store.view()
        try:
            new = await failover(store, v, shard, force=force, reason="manual failover")
        except FailoverError as e:
            raise CliError(str(e)) from None
    finally:
        await store.close()
    return f"shard {shard}: {new} is the new primary"


def cmd_failover(argv: list[str]) -> int:
    p = _parser("failover", "Promote the most up-to-date replica of a shard.")
    p.add_argument("shard")
    p.add_argument("--force", action="store_true",
                   help="replace a primary that is still alive (unreplicated writes are lost)")
    a = p.parse_args(argv)
    print(asyncio.run(manual_failover(a.etcd or default_etcd(), a.cluster, a.shard, a.force)))
    return 0


# --- controller ----------------------------------------------------------------------------------

def cmd_controller(argv: list[str]) -> int:
    p = _parser("controller", "Run a controller (one leader is elected in etcd).")
    p.add_argument("--id", default=None, help="controller id (default host:pid)")
    p.add_argument("--logfile", default=None)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, filename=a.logfile,
                        format=f"{os.getpid()}:C %(asctime)s %(levelname).1s %(message)s")
    from control.controller import run

    return run(a.etcd or default_etcd(), a.cluster, a.id)


# --- up ------------------------------------------------------------------------------------------

class Child:
    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()


def start_routers(url: str, cluster: str, base: Path, port: int, count: int) -> list[Child]:
    """`count` routers on consecutive ports from `port`: what plain clients connect to."""
    py = [sys.executable, "-m", "control.cli", "router"]
    return [Child(f"router{i}", py + ["--port", str(port + i), "--etcd", url, "--cluster",
                                      cluster, "--router-id", f"router{i}"],
                  base / f"router{i}.log") for i in range(count)]


def _answers_ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


async def _healthy(url: str, cluster: str, nodes: int) -> bool:
    from control.store import Store

    store = Store(url, cluster)
    try:
        v = await store.view()
    except Exception:  # noqa: BLE001
        return False
    finally:
        await store.close()
    if len(v.nodes) < nodes:
        return False
    return all(v.live(e.value.primary) for e in v.shards.values())


def cmd_up(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="xshard up", description="Run a whole local cluster: "
                                "embedded etcd, nodes, a controller; Ctrl-C stops it.")
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--port", type=int, default=7000, help="first node port (default 7000)")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER)
    p.add_argument("--dir", default=STATE_DIR, help=f"data directory (default ./{STATE_DIR})")
    p.add_argument("--etcd-port", type=int, default=0, help="etcd client port (default: free)")
    p.add_argument("--routers", type=int, default=1, help="routers to start (default 1)")
    p.add_argument("--router-port", type=int, default=7100,
                   help="first router port (default 7100)")
    a = p.parse_args(argv)
    from control.etcd import EtcdError, EtcdProcess, port_in_use

    if a.shards < 1 or a.replicas < 0:
        raise CliError("--shards must be >= 1 and --replicas >= 0")
    per = 1 + a.replicas
    ports = [a.port + i for i in range(a.shards * per)]
    if ports[-1] > 65535 or a.port < 1:
        raise CliError(f"--port {a.port}: the node ports would run past 65535")
    router_ports = [a.router_port + i for i in range(a.routers)]
    for port in ports + router_ports:
        if port_in_use(port):
            raise CliError(f"port {port} is already in use (choose another base with --port)")
    base = Path(a.dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    try:
        etcd = EtcdProcess(base / "etcd", a.etcd_port)
        url = etcd.start()
    except EtcdError as e:
        raise CliError(str(e)) from None
    children: list[Child] = []
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        (base / "etcd.url").write_text(url + "\n")
        (base / "cluster").write_text(a.cluster + "\n")
        try:
            print(asyncio.run(create(url, a.cluster, a.shards, a.replicas)))
        except CliError as e:
            if "already exists" not in str(e):
                raise
            print(f"using the existing {e}".replace("using the existing cluster", "using cluster"))
        py = [sys.executable, "-m", "control.cli"]
        k = 0
        for i in range(per):  # every shard's first node first, so that it becomes primary
            for s in range(a.shards):
                nid = f"s{s}n{i}"
                d = base / nid
                d.mkdir(exist_ok=True)
                port = a.port + s * per + i
                children.append(Child(nid, py + [
                    "node", "--port", str(port), "--dir", str(d), "--appendonly", "yes",
                    "--etcd", url, "--cluster", a.cluster, "--shard", str(s), "--node-id", nid,
                ], d / "node.log"))
                k += 1
            if i == 0:
                deadline = time.monotonic() + 20
                while not asyncio.run(_healthy(url, a.cluster, a.shards)):
                    if stopping or time.monotonic() > deadline:
                        raise CliError("the primaries did not come up; see " + str(base / "*" / "node.log"))
                    _check_children(children)
                    time.sleep(0.2)
        children.append(Child("controller", py + ["controller", "--etcd", url, "--cluster",
                                                   a.cluster], base / "controller.log"))
        children += start_routers(url, a.cluster, base, a.router_port, a.routers)
        deadline = time.monotonic() + 30
        while not asyncio.run(_healthy(url, a.cluster, len(ports))):
            if stopping or time.monotonic() > deadline:
                raise CliError("the cluster did not come up; see the logs under " + str(base))
            _check_children(children)
            time.sleep(0.2)
        while not all(_answers_ping(rp) for rp in router_ports):
            if stopping or time.monotonic() > deadline:
                raise CliError("the routers did not come up; see the logs under " + str(base))
            _check_children(children)
            time.sleep(0.2)
        head, rows = asyncio.run(status_rows(url, a.cluster))
        print("\n".join(head))
        print(format_table(rows))
        if router_ports:
            print(f"\nconnect: redis-cli -p {router_ports[0]}   (a router: any Redis client "
                  "sees one big Redis)")
        print(f"nodes:   redis-cli -c -p {a.port}   (any node; cluster clients follow MOVED)")
        print(f"status:  xshard status --etcd {url} --cluster {a.cluster}")
        print("Ctrl-C stops the cluster.", flush=True)
        while not stopping:
            for c in children:
                if c.proc.poll() is not None and not getattr(c, "reported", False):
                    c.reported = True
                    print(f"xshard up: {c.name} exited with code {c.proc.returncode}; see "
                          f"{c.log_path}", file=sys.stderr, flush=True)
            time.sleep(0.2)
        print("stopping...", flush=True)
        return 0
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        # Routers and the controller first (a controller still running would fail over the
        # primaries as they stop and revoke their leases), then the nodes, etcd last.
        for group in ([c for c in children if not c.name.startswith("s")],
                      [c for c in children if c.name.startswith("s")]):
            for c in group:
                c.stop()
            for c in group:
                c.wait(10)
        etcd.stop()
        for s, h in old.items():
            signal.signal(s, h)


def _check_children(children: list[Child]) -> None:
    for c in children:
        if c.proc.poll() is not None:
            tail = c.log_path.read_bytes()[-400:].decode(errors="replace").strip().splitlines()
            raise CliError(f"{c.name} exited with code {c.proc.returncode}: "
                           f"{tail[-1] if tail else '(no output)'}")


COMMANDS = {
    "create": cmd_create, "status": cmd_status, "failover": cmd_failover,
    "controller": cmd_controller, "up": cmd_up,
}


def run(cmd: str, argv: list[str]) -> int:
    """Run a cluster subcommand; CliError becomes one line on stderr and exit code 1."""
    try:
        return COMMANDS[cmd](argv)
    except CliError as e:
        print(f"xshard {cmd}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
