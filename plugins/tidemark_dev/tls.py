"""A test certificate authority for local services (the Kafka broker's TLS listeners): a CA, a
server certificate for 127.0.0.1/localhost and a client certificate, as PEM files made once
with ``cryptography``. Not for production: the keys are unencrypted files (mode 0600)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class TestCertificates:
    """The PEM files under ``directory``: ``ca.pem``, ``broker.pem`` (key + chain),
    ``client.pem`` / ``client.key``."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca_file = directory / "ca.pem"
        self.ca_key_file = directory / "ca.key"
        self.broker_pem_file = directory / "broker.pem"
        self.client_cert_file = directory / "client.pem"
        self.client_key_file = directory / "client.key"

    def ensure(self, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> None:
        """Make the CA and the certificates once (kept across restarts)."""
        if all(p.is_file() for p in (self.ca_file, self.broker_pem_file, self.client_cert_file)):
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = authority("tidemark test CA")
        _write(self.ca_file, pem_cert(ca_cert))
        _write(self.ca_key_file, pem_key(ca_key), secret=True)
        key, cert = issued(ca_key, ca_cert, "tidemark broker", hosts=hosts)
        _write(self.broker_pem_file, pem_key(key) + pem_cert(cert) + pem_cert(ca_cert), secret=True)
        key, cert = issued(ca_key, ca_cert, "tidemark client")
        _write(self.client_key_file, pem_key(key), secret=True)
        _write(self.client_cert_file, pem_cert(cert))

    def client_signed(self, directory: Path, *, expired: bool = False) -> tuple[Path, Path]:
        """Another client certificate of this CA (``expired``: valid only in the past): (cert, key)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        ca_key = serialization.load_pem_private_key(self.ca_key_file.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        key, cert = issued(
            ca_key, ca_cert, "tidemark expired client" if expired else "tidemark client 2", expired=expired
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / "client.pem", directory / "client.key"
        _write(cert_file, pem_cert(cert))
        _write(key_file, pem_key(key), secret=True)
        return cert_file, key_file


def authority(name: str) -> tuple[Any, Any]:
    """A self-signed CA: (key, certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issued(
    ca_key: Any, ca_cert: Any, name: str, *, hosts: Sequence[str] = (), expired: bool = False
) -> tuple[Any, Any]:
    """A leaf certificate signed by the CA (server names in ``hosts``): (key, certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    start, end = (
        (now - dt.timedelta(days=30), now - dt.timedelta(days=1))
        if expired
        else (
            now - dt.timedelta(days=1),
            now + dt.timedelta(days=3650),
        )
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _write(path: Path, data: bytes, *, secret: bool = False) -> None:
    path.write_bytes(data)
    if secret:
        path.chmod(0o600)


def main(argv: list[str] | None = None) -> int:
    """``python -m tidemark_dev.tls DIR [HOST ...]``: make the CA and certificates under DIR
    (docker-compose's kafka-tls service)."""

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m tidemark_dev.tls DIR [HOST ...]", file=sys.stderr)
        return 2
    TestCertificates(Path(args[0])).ensure(hosts=args[1:] or ("127.0.0.1", "localhost"))
    print(f"certificates in {args[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
