"""sparkpoint/pki.py: the private CA ``make up`` makes and the certificates it
signs (a real TLS handshake on them: tests/integration/test_postgres_tls.py)."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from sparkpoint import pki


def test_a_certificate_is_signed_by_the_ca_for_its_names(tmp_path):
    ca = pki.ensure_ca(tmp_path)
    path = pki.ensure_certificate(tmp_path, "postgres", ["postgres", "127.0.0.1"], ca)
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    certificate.verify_directly_issued_by(ca.certificate)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["postgres"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_a_second_call_keeps_what_exists_and_each_ca_is_its_own(tmp_path):
    ca = pki.ensure_ca(tmp_path / "a")
    again = pki.ensure_ca(tmp_path / "a")
    assert again.certificate == ca.certificate
    assert pki.ensure_ca(tmp_path / "b").certificate.subject != ca.certificate.subject
    path = pki.ensure_certificate(tmp_path / "a", "x", ["x"], ca)
    first = path.read_bytes()
    assert pki.ensure_certificate(tmp_path / "a", "x", ["x"], ca).read_bytes() == first


def test_a_ca_key_of_another_kind_is_named(tmp_path):
    pki.ensure_ca(tmp_path)
    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "ca.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    with pytest.raises(ValueError, match="ca.key is not an EC private key"):
        pki.ensure_ca(tmp_path)
