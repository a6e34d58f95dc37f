"""The session CA and the upstream context (issue 45, "TLS"): real certificates, real handshakes, no mocks."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from cellgate.gate._errors import ConfigError, ProtocolError
from cellgate.gate.network import certs
from cellgate.gate.network.certs import SessionCA, upstream_context

X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY = 20
X509_V_ERR_HOSTNAME_MISMATCH = 62
X509_V_ERR_IP_ADDRESS_MISMATCH = 64


@pytest.fixture(scope="module")
def ca() -> SessionCA:
    return SessionCA.create("0123456789abcdef0123456789abcdef")


def strict_client(ca: SessionCA) -> ssl.SSLContext:
    """What a Python >= 3.13 client in the sandbox does: trust the session CA, verify strictly."""
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


@dataclass
class Handshake:
    leaf: x509.Certificate
    version: str | None
    alpn: str | None
    received: bytes


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str) -> Handshake:
    """A real TLS handshake over a socketpair: the server side in a thread, then a few bytes from server to client."""
    server_end, client_end = socket.socketpair()
    for end in (server_end, client_end):
        end.settimeout(10)  # a bound on a broken test, not synchronization

    def serve() -> None:
        try:
            with server.wrap_socket(server_end, server_side=True) as tls:
                tls.sendall(b"hello")
        except (ssl.SSLError, OSError):
            pass  # the client's side of the test says what went wrong

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(client_end, server_hostname=server_hostname) as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            received = b""
            while len(received) < 5:
                chunk = tls.recv(5 - len(received))
                assert chunk, "the server closed before sending"
                received += chunk
            return Handshake(x509.load_der_x509_certificate(der), tls.version(), tls.selected_alpn_protocol(),
                             received)
    finally:
        client_end.close()
        thread.join(timeout=10)
        server_end.close()


def extension(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> x509.Extension[x509.ExtensionType]:
    return cert.extensions.get_extension_for_oid(oid)


def test_ca_is_rfc5280_clean(ca: SessionCA) -> None:
    cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert cert.version is x509.Version.v3
    common_name = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert "cellgate" in common_name and ca.session_id in common_name
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)  # self-signed
    public = cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey) and isinstance(public.curve, ec.SECP256R1)

    basic = extension(cert, ExtensionOID.BASIC_CONSTRAINTS)
    assert basic.critical and basic.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = extension(cert, ExtensionOID.KEY_USAGE)
    assert usage.critical
    assert isinstance(usage.value, x509.KeyUsage)
    assert usage.value.key_cert_sign and usage.value.crl_sign and not usage.value.digital_signature
    ski = extension(cert, ExtensionOID.SUBJECT_KEY_IDENTIFIER)
    assert not ski.critical and ski.value == x509.SubjectKeyIdentifier.from_public_key(public)
    aki = extension(cert, ExtensionOID.AUTHORITY_KEY_IDENTIFIER)
    assert isinstance(aki.value, x509.AuthorityKeyIdentifier) and isinstance(ski.value, x509.SubjectKeyIdentifier)
    assert not aki.critical and aki.value.key_identifier == ski.value.digest

    now = datetime.datetime.now(datetime.timezone.utc)
    before, after = cert.not_valid_before_utc, cert.not_valid_after_utc
    assert now - datetime.timedelta(minutes=6) < before < now - datetime.timedelta(minutes=4)
    assert now + datetime.timedelta(days=2) - datetime.timedelta(minutes=1) < after <= now + datetime.timedelta(days=2)


@pytest.mark.parametrize(("host", "san"), [
    ("api.example.test", x509.DNSName("api.example.test")),
    ("127.0.0.1", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))),
    ("::1", x509.IPAddress(ipaddress.ip_address("::1"))),
])
def test_handshake_verifies_strictly_and_the_leaf_is_clean(ca: SessionCA, host: str, san: x509.GeneralName) -> None:
    shaken = handshake(ca.server_context(host), strict_client(ca), host)
    assert shaken.received == b"hello"
    assert shaken.alpn == "http/1.1"  # offered h2 too: the gate speaks HTTP/1.1 only
    assert shaken.version in ("TLSv1.2", "TLSv1.3")

    leaf = shaken.leaf
    leaf.verify_directly_issued_by(ca.cert)
    sans = extension(leaf, ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
    assert isinstance(sans.value, x509.SubjectAlternativeName) and list(sans.value) == [san]
    basic = extension(leaf, ExtensionOID.BASIC_CONSTRAINTS)
    assert basic.critical and basic.value == x509.BasicConstraints(ca=False, path_length=None)
    usage = extension(leaf, ExtensionOID.KEY_USAGE)
    assert usage.critical and isinstance(usage.value, x509.KeyUsage)
    assert usage.value.digital_signature and not usage.value.key_cert_sign
    eku = extension(leaf, ExtensionOID.EXTENDED_KEY_USAGE)
    assert isinstance(eku.value, x509.ExtendedKeyUsage) and list(eku.value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ski = extension(leaf, ExtensionOID.SUBJECT_KEY_IDENTIFIER)
    assert ski.value == x509.SubjectKeyIdentifier.from_public_key(leaf.public_key())
    aki = extension(leaf, ExtensionOID.AUTHORITY_KEY_IDENTIFIER)
    ca_ski = extension(ca.cert, ExtensionOID.SUBJECT_KEY_IDENTIFIER)
    assert isinstance(aki.value, x509.AuthorityKeyIdentifier) and isinstance(ca_ski.value, x509.SubjectKeyIdentifier)
    assert aki.value.key_identifier == ca_ski.value.digest
    assert leaf.public_key() != ca.cert.public_key()  # its own key, not the CA's

    now = datetime.datetime.now(datetime.timezone.utc)
    assert leaf.not_valid_before_utc < now - datetime.timedelta(minutes=4)
    assert leaf.not_valid_after_utc <= now + datetime.timedelta(days=1)
    assert leaf.not_valid_after_utc <= ca.cert.not_valid_after_utc
    assert leaf.serial_number != ca.cert.serial_number


@pytest.mark.parametrize(("leaf_for", "asked", "code"), [
    ("api.example.test", "other.example.test", X509_V_ERR_HOSTNAME_MISMATCH),
    ("api.example.test", "127.0.0.1", X509_V_ERR_IP_ADDRESS_MISMATCH),
    ("127.0.0.1", "127.0.0.2", X509_V_ERR_IP_ADDRESS_MISMATCH),
    ("::1", "::2", X509_V_ERR_IP_ADDRESS_MISMATCH),
])
def test_a_leaf_for_another_host_fails_verification(ca: SessionCA, leaf_for: str, asked: str, code: int) -> None:
    with pytest.raises(ssl.SSLCertVerificationError) as caught:
        handshake(ca.server_context(leaf_for), strict_client(ca), asked)
    assert caught.value.verify_code == code


def test_two_sessions_have_different_cas_and_do_not_trust_each_other(ca: SessionCA) -> None:
    other = SessionCA.create("fedcba9876543210fedcba9876543210")
    assert other.cert_pem != ca.cert_pem
    assert other.cert.serial_number != ca.cert.serial_number
    assert other.cert.public_key() != ca.cert.public_key()
    with pytest.raises(ssl.SSLCertVerificationError) as caught:
        handshake(other.server_context("api.example.test"), strict_client(ca), "api.example.test")
    assert caught.value.verify_code == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    leaf, _ = other.issue("api.example.test")
    with pytest.raises((ValueError, InvalidSignature)):
        leaf.verify_directly_issued_by(ca.cert)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl binary is not installed")
@pytest.mark.parametrize("host", ["api.example.test", "127.0.0.1", "::1"])
def test_openssl_verifies_the_leaf_strictly(ca: SessionCA, host: str, tmp_path: Path) -> None:
    other = SessionCA.create("another-session")
    ca_pem, other_pem, leaf_pem = tmp_path / "ca.pem", tmp_path / "other.pem", tmp_path / "leaf.pem"
    ca_pem.write_bytes(ca.cert_pem)  # certificates only: public data
    other_pem.write_bytes(other.cert_pem)
    leaf_pem.write_bytes(ca.issue(host)[0].public_bytes(serialization.Encoding.PEM))
    check = ["openssl", "verify", "-x509_strict", "-purpose", "sslserver"]
    passed = subprocess.run([*check, "-CAfile", str(ca_pem), str(leaf_pem)], capture_output=True, text=True)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    refused = subprocess.run([*check, "-CAfile", str(other_pem), str(leaf_pem)], capture_output=True, text=True)
    assert refused.returncode != 0
    anchor = subprocess.run(["openssl", "verify", "-x509_strict", "-check_ss_sig", "-CAfile", str(ca_pem),
                             str(ca_pem)], capture_output=True, text=True)
    assert anchor.returncode == 0, anchor.stdout + anchor.stderr  # the CA itself passes the strict checks too


@pytest.mark.parametrize("session_id", ["", "x" * 48])
def test_a_session_id_that_cannot_name_a_ca_is_refused(session_id: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(session_id))):
        SessionCA.create(session_id)


def test_names_are_normalized_and_contexts_cached(ca: SessionCA) -> None:
    context = ca.server_context("API.Example.Test.")
    assert ca.server_context("api.example.test") is context
    assert handshake(context, strict_client(ca), "api.example.test").received == b"hello"
    assert ca.server_context("[::1]") is ca.server_context("0:0:0:0:0:0:0:1")
    leaf, _ = ca.issue("Bücher.Example")
    sans = extension(leaf, ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert isinstance(sans, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.DNSName) == ["xn--bcher-kva.example"]
    assert handshake(ca.server_context("bücher.example"), strict_client(ca), "xn--bcher-kva.example").received


def test_the_cache_is_bounded_lru(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(certs, "CACHE_SIZE", 2)
    ca = SessionCA.create("lru")
    first, second = ca.server_context("one.test"), ca.server_context("two.test")
    assert ca.server_context("one.test") is first  # now the most recently used
    ca.server_context("three.test")  # evicts two.test, the least recently used
    assert ca.server_context("one.test") is first
    assert ca.server_context("two.test") is not second


@pytest.mark.parametrize("host", [
    "", "a" * 254, "x." * 126 + "ab", "bad host", "exa$mple.test", "-lead.test", "trail-.test", "a..b",
    "a" * 64 + ".test", "fe80::1%eth0", "under/slash", "[::1", "héllo\x00.test", "evil.test\n", "1.2.3.4\n",
])
def test_bad_hosts_are_refused_naming_the_value(ca: SessionCA, host: str) -> None:
    with pytest.raises(ValueError) as caught:
        ca.server_context(host)
    assert isinstance(caught.value, ProtocolError)
    assert repr(host) in str(caught.value)


def test_no_file_holds_a_key_after_use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started, system_temp = time.time(), Path(tempfile.gettempdir())
    ca = SessionCA.create("no-key-on-disk")
    ca_key = ca._key
    secrets = [ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()),
               ca_key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()),
               ca_key.private_numbers().private_value.to_bytes(32, "big")]
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    leaves = [handshake(ca.server_context("memfd.test"), strict_client(ca), "memfd.test").leaf]
    monkeypatch.delattr(os, "memfd_create", raising=False)  # the fallback: a 0700 temp dir, emptied after loading
    leaves.append(handshake(ca.server_context("tempdir.test"), strict_client(ca), "tempdir.test").leaf)
    assert list(private.iterdir()) == []
    # Each leaf's key is loaded from one file together with its certificate: no file may keep that certificate.
    secrets += [leaf.public_bytes(serialization.Encoding.PEM) for leaf in leaves]

    for root in (private, system_temp):  # and nothing new anywhere under the real temp dir holds it either
        for path in root.rglob("*"):
            try:
                if not path.is_file() or path.is_symlink() or path.stat().st_mtime < started - 1:
                    continue
                data = path.read_bytes()
            except OSError:
                continue  # another user's or a vanished file
            assert not any(secret in data for secret in secrets), f"{path} holds the CA key or a leaf's key file"


def test_upstream_context_is_strict() -> None:
    context = upstream_context(None)
    assert context.check_hostname and context.verify_mode is ssl.CERT_REQUIRED
    assert context.verify_flags & ssl.VERIFY_X509_STRICT
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_upstream_context_trusts_the_extra_ca(ca: SessionCA, tmp_path: Path) -> None:
    upstream_ca = tmp_path / "upstream.pem"
    upstream_ca.write_bytes(ca.cert_pem)
    served = ca.server_context("localhost")
    assert handshake(served, upstream_context(str(upstream_ca)), "localhost").received == b"hello"
    with pytest.raises(ssl.SSLCertVerificationError) as caught:
        handshake(served, upstream_context(None), "localhost")
    assert caught.value.verify_code == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY


@pytest.mark.parametrize(("make", "why"), [
    (lambda p: p / "missing.pem", "does not exist"),
    (lambda p: p, "is a directory"),
    (lambda p: (p / "empty.pem", (p / "empty.pem").write_bytes(b""))[0], "could not be loaded"),
    (lambda p: (p / "junk.pem", (p / "junk.pem").write_text("not a certificate\n"))[0], "could not be loaded"),
])
def test_upstream_context_names_a_bad_extra_ca(tmp_path: Path, make: Callable[[Path], Path], why: str) -> None:
    path = make(tmp_path)
    with pytest.raises(ValueError) as caught:
        upstream_context(str(path))
    assert isinstance(caught.value, ConfigError)
    assert repr(str(path)) in str(caught.value) and why in str(caught.value)
