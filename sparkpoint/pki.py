"""The compose stack's private certificate authority (``make up``): a CA and
the certificates it signs, generated on first start next to the other secrets.

    ca = ensure_ca(directory)                                  # ca.crt, ca.key
    ensure_certificate(directory, "postgres", ["postgres"], ca)  # postgres.crt, postgres.key

Existing files are kept, so a restart never changes what the services trust;
deleting the directory starts over. Keys are EC P-256; the CA's key never
leaves the directory (no service is given it).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sparkpoint.secrets import create_private_file

CA_NAME = "ca"
CA_VALIDITY = datetime.timedelta(days=3650)
VALIDITY = datetime.timedelta(days=825)


@dataclass(frozen=True)
class Authority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _write_pair(key_path: Path, key: ec.EllipticCurvePrivateKey, key_mode: int, cert_path: Path,
                certificate: x509.Certificate) -> None:
    """The key (``key_mode``) and its certificate (readable by all), replacing
    whichever of the two a partial earlier run left."""
    for path in (key_path, cert_path):
        path.unlink(missing_ok=True)
    create_private_file(key_path, _pem_key(key), key_mode)
    create_private_file(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o444)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _builder(subject: str, issuer: x509.Name | None, validity: datetime.timedelta,
             key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))   # other clocks may lag a little
            .not_valid_after(now + validity))


def ensure_ca(directory: Path) -> Authority:
    """The CA in ``directory`` (``ca.crt``, readable by all; ``ca.key``, 0600),
    created unless both exist."""
    cert_path, key_path = directory / f"{CA_NAME}.crt", directory / f"{CA_NAME}.key"
    if cert_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an EC private key: delete {directory} to start over")
        return Authority(x509.load_pem_x509_certificate(cert_path.read_bytes()), key)
    key = ec.generate_private_key(ec.SECP256R1())
    # A name of its own: a client holding another stack's CA is told "unable to
    # get local issuer", not a signature failure between namesakes.
    name = f"Sparkpoint private CA {secrets.token_hex(4)}"
    certificate = (_builder(name, None, CA_VALIDITY, key)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                                key_encipherment=False, data_encipherment=False,
                                                key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(key, hashes.SHA256()))
    _write_pair(key_path, key, 0o600, cert_path, certificate)
    return Authority(certificate, key)


def _subject_alternative_name(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def ensure_certificate(directory: Path, name: str, hosts: list[str], ca: Authority, *,
                       key_mode: int = 0o600) -> Path:
    """``name.crt`` (subject ``name``, valid for ``hosts``: DNS names or IP
    addresses, as server and client) and ``name.key`` in ``directory``,
    signed by ``ca``, unless both exist; returns the certificate's path."""
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    if cert_path.exists() and key_path.exists():
        return cert_path
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (_builder(name, ca.certificate.subject, VALIDITY, key)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(_subject_alternative_name(hosts), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .sign(ca.key, hashes.SHA256()))
    _write_pair(key_path, key, key_mode, cert_path, certificate)
    return cert_path
