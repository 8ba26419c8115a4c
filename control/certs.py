"""A local CA and certificates: for `xshard up --tls`, the TLS benchmark and the tests.

`make_tls(dir)` writes a CA, a server certificate for 127.0.0.1/localhost (also usable as a
client certificate, as Redis nodes present theirs on the links they open) and a client
certificate, all PEM, valid for `days`. Good for trying TLS on one machine; a real deployment
brings certificates from its own CA. Needs the `cryptography` package.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Tls:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls(d: Path, days: int = 1) -> Tls:
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
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage: list[x509.ObjectIdentifier], san: bool) -> tuple[
            x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=days))
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
