"""`xshard up`: a whole local cluster in one command, kept running until Ctrl-C or `xshard down`.

It starts an embedded etcd (control/etcd.py), N shards x (1 + R) nodes, a controller and the
routers, with data and logs under `./.xshard/` (base/statedir.py), and supervises them
(control/supervisor.py): whatever dies is restarted with backoff.

Starting again in the same directory resumes the same cluster: the same etcd ports and data,
the same shape (values not given on the command line default to what the last `up` here
used), and every node is started at once, taking the role etcd gives it, so that a failover
that happened before the restart stands. The controller starts only once the primaries etcd
names are back: started earlier, it would fail over to whichever replica came up first.
With a larger --shards it grows the cluster: it adds the shard records, starts the new
shards' nodes (each shard's first node first, so that it becomes the primary) and, once
everything is up, queues a rebalance onto them (control/reshard.py) that the nodes carry out
while `up` supervises.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from base.statedir import DEFAULT as STATE_DIR
from base.statedir import AlreadyRunning, StateDir
from control import promconfig
from control.clusterctl import CliError, ClusterExists, create, format_table, status_rows
from control.ports import free_port
from control.supervisor import Child, exit_text, say, xshard_argv

READY = "Ctrl-C stops the cluster."
DETACHED_READY = "running in the background (pid"
PRIMARY_WAIT = 30.0  # seconds to wait for the primaries etcd names before the controller starts
TLS_OFFSET = 10000  # with --tls, every node and router also serves TLS on its port + this


def _free_port_but(taken: set[int]) -> int:
    """A free port outside `taken`, which it joins (so no two processes get the same one)."""
    while True:
        port = free_port()
        if port not in taken:
            taken.add(port)
            return port


@dataclass
class Shape:
    shards: int = 3
    replicas: int = 1
    port: int = 7000
    routers: int = 1
    router_port: int = 7100
    cluster: str = "xshard"
    etcd_port: int = 0
    etcd_peer_port: int = 0
    tls: bool = False

    def node_ids(self) -> list[tuple[str, int, int]]:
        """(node id, shard, port) for every node: sSnI on port + S * (1 + R) + I."""
        per = 1 + self.replicas
        return [(f"s{s}n{i}", s, self.port + s * per + i)
                for i in range(per) for s in range(self.shards)]


def build_parser() -> argparse.ArgumentParser:
    d = Shape()
    p = argparse.ArgumentParser(prog="xshard up", description=(
        "Run a whole local cluster: embedded etcd, nodes, a controller and routers, restarted "
        "when they die; Ctrl-C (or xshard down, with --detach) stops it. Started again in the "
        "same directory it resumes the same cluster: options not given default to what the "
        "last up there used."))
    p.add_argument("--shards", type=int, help=f"number of shards; more than an existing "
                   f"cluster here has adds shards and rebalances onto them (default: "
                   f"{d.shards})")
    p.add_argument("--replicas", type=int,
                   help=f"replicas per shard (default: {d.replicas})")
    p.add_argument("--port", type=int, help=f"first node port; the nodes take consecutive "
                   f"ports (default: {d.port})")
    p.add_argument("--routers", type=int, help=f"routers to start (default: {d.routers})")
    p.add_argument("--router-port", type=int, help=f"first router port (default: "
                   f"{d.router_port})")
    p.add_argument("--cluster", help=f"cluster name in etcd (default: {d.cluster})")
    p.add_argument("--etcd-port", type=int, help="etcd client port (default: the one this "
                   "directory used before, else a free one)")
    p.add_argument("--dir", default=STATE_DIR, help="directory for data, logs and state "
                   f"(default: {STATE_DIR})")
    p.add_argument("--prometheus", action="store_true", help="also run a `prometheus` "
                   "binary from PATH on the generated <dir>/prometheus/prometheus.yml and "
                   "print its address (default: off)")
    p.add_argument("--scrape-interval", type=float, default=5.0, metavar="SECONDS",
                   help="scrape and rule evaluation interval written to prometheus.yml "
                   "(default: 5)")
    p.add_argument("--tls", action="store_true", default=None, help="also serve TLS on "
                   f"every node's and router's port + {TLS_OFFSET}, with a local CA and "
                   "certificates made in <dir>/tls/; replicas, routers and the controller "
                   "reach the nodes over TLS (default: off)")
    p.add_argument("--detach", action="store_true", help="run in the background; xshard logs "
                   "shows the logs, xshard down stops it (default: off)")
    p.add_argument("--detached-child", action="store_true", help=argparse.SUPPRESS)
    return p


def resolve(a: argparse.Namespace, saved: dict) -> Shape:
    """Command line, else what the last `up` here used, else the defaults."""
    shape = Shape()
    for k in asdict(shape):
        v = getattr(a, k, None)
        if v is None:
            v = saved.get(k)
        if v is not None:
            setattr(shape, k, type(getattr(shape, k))(v))
    if a.etcd_port is not None:  # a new client port: let etcd pick the peer port again
        shape.etcd_peer_port = saved.get("etcd_peer_port", 0) if \
            a.etcd_port == saved.get("etcd_port") else 0
    if shape.shards < 1 or shape.replicas < 0 or shape.routers < 0:
        raise CliError("--shards must be >= 1, --replicas and --routers >= 0")
    last = shape.node_ids()[-1][2] if shape.shards else shape.port
    top = TLS_OFFSET if shape.tls else 0
    if shape.port < 1 or last + top > 65535 or shape.router_port + shape.routers - 1 + top > 65535:
        raise CliError(f"--port {shape.port}: the node ports would run past 65535")
    return shape


def run(argv: list[str]) -> int:
    try:
        return cmd_up(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    except CliError as e:
        print(f"xshard up: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


def cmd_up(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    sd = StateDir(a.dir)
    shape = resolve(a, sd.saved())
    if a.detach:
        return detach([x for x in argv if x != "--detach"], sd)
    try:
        sd.lock()
    except AlreadyRunning as e:
        raise CliError(f"already running (pid {e.args[0]}); xshard down stops it") from None
    prometheus = None
    if a.prometheus:
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise CliError("--prometheus: no prometheus binary on PATH (Debian: apt-get "
                           "install prometheus)")
    if a.scrape_interval <= 0:
        raise CliError("--scrape-interval must be > 0")
    try:
        return LocalCluster(shape, sd, detached=a.detached_child, prometheus=prometheus,
                            scrape_interval=a.scrape_interval).run()
    finally:
        sd.unlock()


# --- --detach ------------------------------------------------------------------------------------

def detach(argv: list[str], sd: StateDir) -> int:
    """Start `up` in the background (its own session, output to up.log) and relay its console
    until it is ready (exit 0) or gives up (exit 1)."""
    pid = sd.running_pid()
    if pid is not None:
        raise CliError(f"already running (pid {pid}); xshard down stops it")
    sd.path.mkdir(parents=True, exist_ok=True)
    log_path = sd.file("up.log")
    with open(log_path, "ab") as log:
        offset = log.tell()
        child = subprocess.Popen(xshard_argv("up", *argv, "--detached-child"), stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    last = ""
    with open(log_path, "rb") as f:
        f.seek(offset)
        buf = b""
        while True:
            chunk = f.read()
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                last = raw.decode(errors="replace")
                print(last, flush=True)
                if DETACHED_READY in last:
                    return 0
            if not chunk:
                if child.poll() is not None and not f.read(1):
                    print(f"xshard up: the cluster did not start ({exit_text(child.returncode)}"
                          f"): {last or 'no output'}; see {log_path}", file=sys.stderr)
                    return 1
                f.seek(f.tell())  # clear EOF
                time.sleep(0.1)


# --- the cluster ---------------------------------------------------------------------------------

class LocalCluster:
    def __init__(self, shape: Shape, sd: StateDir, detached: bool = False,
                 prometheus: str | None = None, scrape_interval: float = 5.0) -> None:
        self.shape = shape
        self.prometheus = prometheus  # the binary, with --prometheus
        self.scrape_interval = scrape_interval
        self.prometheus_port = 0
        self.prom_config = sd.path / "prometheus" / "prometheus.yml"
        self.sd = sd
        self.base = sd.path
        self.detached = detached
        self.nodes: list[Child] = []
        self.others: list[Child] = []  # controller, routers
        self.stopping = False
        self.etcd = None
        self.etcd_restart_at: float | None = None

    # --- helpers ---------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    @property
    def children(self) -> list[Child]:
        return self.nodes + self.others

    def supervise(self) -> None:
        now = time.monotonic()
        for c in self.children:
            c.supervise(now)
        e = self.etcd
        if e is None or e.proc is None:
            return
        if self.etcd_restart_at is None and e.proc.poll() is not None:
            say(f"etcd exited ({exit_text(e.proc.returncode)}); restarting; see {e.log_path}")
            self.etcd_restart_at = now + 0.5
        elif self.etcd_restart_at is not None and now >= self.etcd_restart_at:
            from control.etcd import EtcdError

            e.proc = None
            try:
                e.start()
                say(f"etcd restarted (pid {e.proc.pid})")
                self.etcd_restart_at = None
            except EtcdError as err:
                say(f"etcd did not restart ({err}); trying again")
                self.etcd_restart_at = time.monotonic() + 2

    def wait(self, pred, timeout: float, what: str) -> bool:  # noqa: ANN001
        """Supervise until pred() holds (True), the deadline (False) or a stop request."""
        deadline = time.monotonic() + timeout
        while not pred():
            if self.stopping:
                raise CliError(f"stopped while waiting for {what}")
            if time.monotonic() > deadline:
                return False
            for c in self.children:  # a crash loop at start-up: say why now, not later
                if c.restarts >= 2 and not c.running():
                    raise CliError(f"{c.name} keeps exiting ({exit_text(c.proc.returncode)}): "
                                   f"{c.last_line()}")
            self.supervise()
            time.sleep(0.2)
        return True

    def view(self):  # noqa: ANN201 - a View, or None while etcd does not answer
        from base.store import Store

        async def go():  # noqa: ANN202
            s = Store(self.url, self.shape.cluster)
            try:
                return await asyncio.wait_for(s.view(), 3)
            finally:
                await s.close()

        try:
            return asyncio.run(go())
        except Exception:  # noqa: BLE001
            return None

    def primaries_live(self, all_nodes: bool = False) -> bool:
        v = self.view()
        if v is None or not v.shards:
            return False
        if not all(v.live(e.value.primary) for e in v.shards.values()):
            return False
        return not all_nodes or all(n.name in v.nodes for n in self.nodes)

    # --- run -------------------------------------------------------------------------------------
    def run(self) -> int:
        from control.etcd import EtcdError, EtcdProcess, port_in_use

        s = self.shape
        ports = [p for _n, _s, p in s.node_ids()] + [s.router_port + i for i in range(s.routers)]
        for port in ports:
            if port_in_use(port):
                raise CliError(f"port {port} is already in use (choose another base with "
                               "--port / --router-port)")
        self.base.mkdir(parents=True, exist_ok=True)
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                self.etcd = EtcdProcess(self.base / "etcd", s.etcd_port, peer_port=s.etcd_peer_port)
                self.url = self.etcd.start()
            except EtcdError as e:
                raise CliError(str(e)) from None
            s.etcd_port, s.etcd_peer_port = self.etcd.client_port, self.etcd.peer_port
            self.sd.save(asdict(s))
            self.sd.write("etcd.url", self.url)
            self.sd.write("cluster", s.cluster)
            return self._run()
        finally:
            for sig in old:
                signal.signal(sig, signal.SIG_IGN)
            self._shutdown()
            for sig, h in old.items():
                signal.signal(sig, h)

    def _run(self) -> int:
        s = self.shape
        try:
            print(asyncio.run(create(self.url, s.cluster, s.shards)), flush=True)
            fresh = True
            grow: list[str] = []
        except ClusterExists as e:
            if e.shards > s.shards:
                raise CliError(f"cluster '{s.cluster}' in {self.base} has {e.shards} shards; "
                               f"start it with --shards {e.shards} (xshard remove-shard "
                               "makes it smaller)") from None
            print(f"using the existing {e.describe()}", flush=True)
            fresh = False
            grow = self._grow(e.shards)
        # Every process gets a free metrics port; Prometheus finds them in targets.json.
        targets: list[promconfig.Target] = []
        tls = self._tls_args()
        taken = self._own_ports()
        for nid, shard, port in s.node_ids():
            d = self.base / nid
            d.mkdir(exist_ok=True)
            mport = _free_port_but(taken)
            targets.append(promconfig.Target("node", nid, mport, str(shard)))
            self.nodes.append(Child(nid, xshard_argv(
                "node", "--port", str(port), "--dir", str(d), "--appendonly", "yes",
                "--etcd", self.url, "--cluster", s.cluster, "--shard", str(shard),
                "--node-id", nid, "--metrics-port", str(mport), *tls.get("node", ()),
                *self._tls_port(port)),
                d / "node.log"))
        # A new cluster (or new shards): every shard's first node first, so that it becomes
        # the primary. A cluster that exists: all at once, and etcd names the primaries.
        later = [c for c in self.nodes[s.shards:]
                 if fresh or int(c.name[1:c.name.index("n")]) >= s.shards - len(grow)]
        for c in self.nodes:
            if c not in later:
                c.start()
        if later:
            if not self.wait(self.primaries_live, PRIMARY_WAIT, "the primaries"):
                raise CliError(f"the primaries did not come up; see {self.base}/s*n0/node.log")
            for c in later:
                c.start()
        if not fresh and not self.wait(lambda: self.primaries_live(all_nodes=True),
                                       PRIMARY_WAIT, "the nodes"):
            say("not every node is back yet; starting the controller (it fails over a shard "
                "whose primary stays away)")
        mport = _free_port_but(taken)
        targets.append(promconfig.Target("controller", "controller", mport))
        self.others.append(Child("controller", xshard_argv(
            "controller", "--etcd", self.url, "--cluster", s.cluster, "--metrics-port",
            str(mport), *tls.get("controller", ())), self.base / "controller.log"))
        for i in range(s.routers):
            mport = _free_port_but(taken)
            targets.append(promconfig.Target("router", f"router{i}", mport))
            self.others.append(Child(f"router{i}", xshard_argv(
                "router", "--port", str(s.router_port + i), "--etcd", self.url, "--cluster",
                s.cluster, "--router-id", f"router{i}", "--metrics-port", str(mport),
                *tls.get("router", ()), *self._tls_port(s.router_port + i)),
                self.base / f"router{i}.log"))
        self.prom_config, rules = promconfig.write(self.base / "prometheus", s.cluster, targets,
                                                   self.scrape_interval)
        if rules is None:
            say(f"{self.prom_config} loads no alert rules: {promconfig.RULES} is missing")
        if self.prometheus is not None:
            self.prometheus_port = _free_port_but(taken)
            pdir = self.base / "prometheus"
            self.others.append(Child("prometheus", [
                self.prometheus, f"--config.file={self.prom_config}",
                f"--storage.tsdb.path={pdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}"],
                pdir / "prometheus.log"))
        for c in self.others:
            c.start()
        router_ports = [s.router_port + i for i in range(s.routers)]
        if not self.wait(lambda: self.primaries_live(all_nodes=True), 30, "the cluster"):
            raise CliError(f"the cluster did not come up; see the logs under {self.base}")
        if not self.wait(lambda: all(_answers_ping(p) for p in router_ports), 30, "routers"):
            raise CliError(f"the routers did not come up; see {self.base}/router*.log")
        self._print_ready(router_ports)
        if grow:
            self._rebalance(grow)
        while not self.stopping:
            self.supervise()
            time.sleep(0.2)
        print("stopping...", flush=True)
        return 0

    def _grow(self, have: int) -> list[str]:
        """Shard records for the shards that --shards adds to an existing cluster."""
        from base.store import Store
        from control.reshard import ReshardError, add_shards

        ids = [str(i) for i in range(have, self.shape.shards)]
        if not ids:
            return []

        async def go() -> list[str]:
            store = Store(self.url, self.shape.cluster)
            try:
                return await add_shards(store, ids)
            finally:
                await store.close()

        try:
            asyncio.run(go())
        except ReshardError as e:
            raise CliError(str(e)) from None
        print(f"adding shards {', '.join(ids)}; their slots come from a rebalance once they "
              "are up", flush=True)
        return ids

    def _rebalance(self, new: list[str]) -> None:
        """Queue the moves that even the slots out over the old and the new shards; the nodes
        carry them out while `up` supervises (xshard status shows them)."""
        from base.store import Store
        from control.reshard import ReshardError, queue_rebalance

        async def go() -> int:
            store = Store(self.url, self.shape.cluster)
            try:
                return len(await queue_rebalance(store))
            finally:
                await store.close()

        try:
            n = asyncio.run(go())
        except ReshardError as e:
            say(f"the rebalance onto shards {', '.join(new)} was not queued ({e}); run xshard "
                "rebalance")
            return
        say(f"rebalancing: {n} slot moves queued onto shards {', '.join(new)}; they go on in "
            "the background (xshard status counts them)")

    def _tls_args(self) -> dict[str, tuple[str, ...]]:
        """With --tls: the options of nodes, routers and the controller, over certificates
        made once in <dir>/tls/ (kept across restarts; a year's validity)."""
        if not self.shape.tls:
            return {}
        from control.certs import Tls, make_tls

        d = self.base / "tls"
        t = Tls(d / "ca.pem", d / "server.pem", d / "server-key.pem", d / "client.pem",
                d / "client-key.pem")
        if not all(p.exists() for p in (t.ca, t.server_cert, t.server_key, t.client_cert,
                                         t.client_key)):
            try:
                t = make_tls(d, days=365)
            except ImportError:
                raise CliError("--tls makes its certificates with the `cryptography` package: "
                               "pip install 'xshard[tls]' (or cryptography)") from None
        files = ("--tls-cert-file", str(t.server_cert), "--tls-key-file", str(t.server_key),
                 "--tls-ca-cert-file", str(t.ca))
        return {"node": (*files, "--tls-replication", "yes", "--tls-cluster", "yes"),
                "router": (*files, "--tls-cluster", "yes"),
                "controller": (*files, "--tls-cluster", "yes")}

    def _own_ports(self) -> set[int]:
        """The node and router ports (and their TLS ports) this cluster is about to bind: a
        metrics port must not be one of them, although they all look free until then."""
        s = self.shape
        ports = {port for _nid, _shard, port in s.node_ids()}
        ports.update(range(s.router_port, s.router_port + s.routers))
        if s.tls:
            ports.update({p + TLS_OFFSET for p in ports})
        return ports

    def _tls_port(self, port: int) -> tuple[str, ...]:
        return ("--tls-port", str(port + TLS_OFFSET)) if self.shape.tls else ()

    def _print_ready(self, router_ports: list[int]) -> None:
        s = self.shape
        head, rows, tail = asyncio.run(status_rows(self.url, s.cluster))
        print("\n".join(head))
        print(format_table(rows))
        if tail:
            print("\n".join(tail))
        procs = [f"etcd (pid {self.etcd.proc.pid})"] + [f"{c.name} (pid {c.pid})"
                                                         for c in self.children]
        print("processes: " + ", ".join(procs))
        here = self.sd.path == Path(STATE_DIR).resolve()
        opts = "" if here else f" --dir {self.sd.path}"
        if router_ports:
            print(f"\nconnect: redis-cli -p {router_ports[0]}   (a router: any Redis client "
                  "sees one big Redis)")
            if s.tls:
                t = self.base / "tls"
                print(f"TLS:     redis-cli -p {router_ports[0] + TLS_OFFSET} --tls --cacert "
                      f"{t / 'ca.pem'} --cert {t / 'client.pem'} --key {t / 'client-key.pem'}")
        print(f"nodes:   redis-cli -c -p {s.port}   (any node; cluster clients follow MOVED)")
        print("status:  xshard status" + ("" if here else
                                          f" --etcd {self.url} --cluster {s.cluster}"))
        print(f"logs:    xshard logs{opts} [NAME] [-f]   (data and logs in {self.base})")
        print(f"metrics: {self.prom_config.parent}/targets.json (file_sd), "
              f"{self.prom_config.name} there is a ready Prometheus config")
        if self.prometheus_port:
            print(f"prometheus: http://127.0.0.1:{self.prometheus_port}/")
        if self.detached:
            print(f"{DETACHED_READY} {os.getpid()}); xshard down{opts} stops it.", flush=True)
        else:
            print(READY, flush=True)

    def _shutdown(self) -> None:
        """Routers and the controller first (a controller still running would fail over the
        primaries as they stop and revoke their leases), then the nodes, etcd last."""
        for group in (self.others, self.nodes):
            for c in group:
                c.stop()
            for c in group:
                c.wait(10)
        if self.etcd is not None:
            with contextlib.suppress(Exception):
                self.etcd.stop()


def _answers_ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False
