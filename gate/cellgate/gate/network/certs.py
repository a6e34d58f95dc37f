"""TLS for the network gate: the session's CA that terminates the sandbox's HTTPS, and the context for upstreams.

The CA's private key lives only in this process's memory: it is never serialized, so it cannot reach a file or the
sandbox (which gets ``cert_pem`` alone, for its trust store). Certificates are RFC 5280-clean: Python >= 3.13 clients
set ``VERIFY_X509_STRICT`` by default and reject a CA without X.509v3 extensions. Each leaf has its own key and a
short life; ``ssl`` loads a key only from a path, so it goes through an anonymous memory file (``memfd``) or, where
there is none, a 0700 temp dir whose file is deleted right after loading.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cellgate.gate._errors import ConfigError, ProtocolError

__all__ = ["SessionCA", "upstream_context"]

CA_LIFETIME = datetime.timedelta(days=2)
LEAF_LIFETIME = datetime.timedelta(days=1)
_BACKDATE = datetime.timedelta(minutes=5)  # tolerates a sandbox clock a little behind the host's
_RENEW_BEFORE = datetime.timedelta(hours=1)  # a cached leaf this close to its end is made again
CACHE_SIZE = 256
# One DNS label: letters, digits, hyphens (not at the ends); "_" too, as real service names use it.
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")  # used with fullmatch: "$" would pass a trailing newline


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_usage(**allowed: bool) -> x509.KeyUsage:
    names = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
             "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")
    return x509.KeyUsage(**{name: allowed.get(name, False) for name in names})


def _san_for(host: str) -> tuple[str, x509.GeneralName]:
    """The cache key and the subjectAltName for ``host``: an IP literal (v4, v6, bracketed v6) or a DNS name."""
    if not host or len(host) > 253:
        raise ProtocolError(f"TLS host {host!r} is not a host name: it must be 1 to 253 characters")
    try:  # a scoped IPv6 address ("%" zone) cannot be named in a certificate: it falls through and is refused below
        address = ipaddress.ip_address(host[1:-1] if host[0] == "[" and host[-1] == "]" else host)
        if not getattr(address, "scope_id", None):
            return str(address), x509.IPAddress(address)
    except ValueError:
        pass
    try:  # a U-label becomes its xn-- A-label; ASCII is unchanged (and checked label by label below)
        name = host.lower().removesuffix(".").encode("idna").decode("ascii")
    except UnicodeError:
        name = ""
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise ProtocolError(f"TLS host {host!r} is not a valid DNS name: labels of 1 to 63 letters, digits, '-' "
                            "or '_' separated by dots, at most 253 characters")
    return name, x509.DNSName(name)


class SessionCA:
    """One session's certificate authority: self-signed, EC P-256, valid two days, issuing leaves on demand."""

    def __init__(self, session_id: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.session_id, self._key, self.cert = session_id, key, cert
        self.cert_pem: bytes = cert.public_bytes(serialization.Encoding.PEM)
        self._contexts: OrderedDict[str, tuple[ssl.SSLContext, datetime.datetime]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def create(cls, session_id: str) -> SessionCA:
        common_name = f"cellgate session {session_id}"
        if not session_id or len(common_name) > 64:
            raise ValueError(f"session id {session_id!r} cannot name a CA: it must be 1 to 47 characters")
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "cellgate"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now, public = _now(), key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE).not_valid_after(now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(session_id, key, cert)

    def issue(self, host: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """A fresh leaf for ``host`` (a DNS name or an IP literal) with its own new key; ValueError for a bad host."""
        _, san = _san_for(host)
        key, now = ec.generate_private_key(ec.SECP256R1()), _now()
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "cellgate")]
        if len(str(san.value)) <= 64:  # CN is informational (clients match the SAN) and limited to 64 characters
            subject.append(x509.NameAttribute(NameOID.COMMON_NAME, str(san.value)))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject)).issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(min(now + LEAF_LIFETIME, self.cert.not_valid_after_utc))  # never outlives its CA
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        return cert, key

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS 1.2+ server context presenting a leaf for ``host``; an LRU cache per host, renewed near expiry."""
        cache_key, _ = _san_for(host)
        with self._lock:
            cached = self._contexts.get(cache_key)
            if cached is not None and _now() < cached[1] - _RENEW_BEFORE:
                self._contexts.move_to_end(cache_key)
                return cached[0]
        cert, key = self.issue(host)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        _load_chain(context, cert, key)
        with self._lock:
            self._contexts[cache_key] = (context, cert.not_valid_after_utc)
            self._contexts.move_to_end(cache_key)
            while len(self._contexts) > CACHE_SIZE:
                self._contexts.popitem(last=False)
        return context


def _load_chain(context: ssl.SSLContext, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """Load a leaf and its key into ``context`` leaving no file behind (the leaf key only; the CA key never)."""
    pem = cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        with open(memfd_create("cellgate-leaf", os.MFD_CLOEXEC), "wb") as memory:  # anonymous: no name on disk
            memory.write(pem)
            memory.flush()
            context.load_cert_chain(f"/proc/self/fd/{memory.fileno()}")
        return
    with tempfile.TemporaryDirectory(prefix="cellgate-tls-") as private:  # mkdtemp makes it 0700; removed on exit
        path = Path(private, "leaf.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            file.write(pem)
        context.load_cert_chain(path)


def upstream_context(extra_ca: str | None) -> ssl.SSLContext:
    """The client context for the gate's upstream connections: the host's store plus ``[network] upstream_ca``."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = True, ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if extra_ca is not None:
        path = Path(extra_ca)
        if not path.is_file():
            why = "is a directory" if path.is_dir() else "does not exist"
            raise ConfigError(f"[network] upstream_ca {extra_ca!r} {why}; point it at a PEM file of CA certificates")
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"[network] upstream_ca {extra_ca!r} could not be loaded as PEM CA certificates "
                              f"({e}); point it at a PEM file holding at least one certificate") from None
    return context
