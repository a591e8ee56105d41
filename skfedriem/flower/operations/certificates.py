"""TLS certificates and SuperNode keys for a test federation (or a first deployment), with ``cryptography``.

:func:`make_tls_certificates` writes a private certificate authority and a
SuperLink certificate it signs, for the addresses the SuperNodes dial;
:func:`make_supernode_keys` writes the P-384 key pair a SuperNode signs its
requests with (OpenSSH encoding, as ``flower-supernode`` and
``flwr supernode register`` read them). A production deployment uses its own
PKI; the file names match Flower's documentation.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

__all__ = ["TLSFiles", "make_supernode_keys", "make_tls_certificates"]


class TLSFiles:
    """Paths of ``ca.crt``, ``server.pem`` and ``server.key`` in ``folder``.

    Parameters
    ----------
    folder : Path
        Where the files are.
    """

    def __init__(self, folder: Path) -> None:
        self.ca_certificate = folder / "ca.crt"
        self.server_certificate = folder / "server.pem"
        self.server_key = folder / "server.key"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_tls_certificates(folder: str | Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                          days: int = 30) -> TLSFiles:
    """A certificate authority and a SuperLink certificate for ``hosts``.

    For tests and trials; a deployment uses certificates from its
    institution's authority.

    Parameters
    ----------
    folder : str or Path
        Created if needed.
    hosts : tuple of str, default=("127.0.0.1", "localhost")
        IP addresses or DNS names the SuperLink answers on.
    days : int, default=30
        Validity.

    Returns
    -------
    TLSFiles
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(folder)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "skfedriem test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
    files.ca_certificate.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server_certificate.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, files.server_key)
    return files


def make_supernode_keys(folder: str | Path, name: str) -> tuple[Path, Path]:
    """A new P-384 key pair for SuperNode ``name``, in OpenSSH format.

    Parameters
    ----------
    folder : str or Path
        Created if needed.
    name : str
        Names the files ``<name>.key`` and ``<name>.pub``.

    Returns
    -------
    private_key, public_key : Path
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH))
    return private, public
