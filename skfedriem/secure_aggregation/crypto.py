"""The primitives of secure aggregation, all from ``cryptography`` and pycryptodome: nothing here is hand-rolled.

* **Signatures**: a site signs its round keys with its SuperNode's own key
  (the P-384 key Flower authenticates the node with, OpenSSH or PEM), ECDSA
  over SHA-384; Ed25519 keys are accepted too. Peers check them against the
  federation's roster of public keys (:func:`read_roster`), never against a
  key the server relays.
* **Key agreement**: X25519, then HKDF-SHA256 bound to the protocol instance
  and its purpose (:func:`agree`).
* **Encryption** of the Shamir shares a site sends a peer through the server:
  AES-256-GCM, the sender, recipient and instance as associated data.
* **Masks**: ChaCha20's key stream (a 256-bit key from the agreement, or a
  site's 256-bit self-mask seed) read as uint64 words reduced modulo 2^bits
  (``bits`` ≤ 64 divides 2^64, so every residue is uniform): a full-strength
  PRG, unlike a seed folded to 32 bits into numpy's Mersenne Twister.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["SEED_BYTES", "agree", "decrypt", "digest", "encrypt", "fresh_seed", "load_signing_key", "mask",
           "public_bytes", "read_roster", "sign", "verify"]

#: The size of every secret seed (self-mask seeds, derived keys): 256 bits.
SEED_BYTES = 32
_NONCE_BYTES = 12


def digest(*parts: bytes | str) -> bytes:
    """SHA-256 of the parts, each prefixed by its length (no two lists of parts give the same input).

    Parameters
    ----------
    *parts : bytes or str
        Strings are UTF-8 encoded.

    Returns
    -------
    bytes
        32 bytes.
    """
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.digest()


def fresh_seed() -> bytes:
    """256 bits from the OS's secure generator.

    Returns
    -------
    bytes
        32 bytes.
    """
    return os.urandom(SEED_BYTES)


def load_signing_key(path: str | Path):
    """A site's private signing key (its SuperNode's: OpenSSH or PEM, P-384 or Ed25519); ValueError otherwise.

    Parameters
    ----------
    path : str or Path
        The key file (unencrypted).

    Returns
    -------
    EllipticCurvePrivateKey or Ed25519PrivateKey
    """
    data = Path(path).read_bytes()
    loader = serialization.load_ssh_private_key if b"OPENSSH" in data else serialization.load_pem_private_key
    key = loader(data, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        raise ValueError(f"The signing key {path} is a {type(key).__name__}: use the SuperNode's EC (P-384) or "
                         "Ed25519 key.")
    return key


def _public_key(text: str):
    text = text.strip()
    if text.startswith("-----BEGIN"):
        return serialization.load_pem_public_key(text.encode())
    return serialization.load_ssh_public_key(text.encode())


def read_roster(path: str | Path) -> dict[str, object]:
    """The federation's sites and their public keys: one line ``<name> <public key>`` each (OpenSSH), ``#`` comments.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    dict of str to public key
        ValueError on a malformed line, a repeated name or a repeated key.
    """
    roster: dict[str, object] = {}
    seen: set[bytes] = set()
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, key_text = line.partition(" ")
        try:
            key = _public_key(key_text)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}, line {number}: not '<name> <OpenSSH public key>' ({error}).") from None
        raw = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        if name in roster or raw in seen:
            raise ValueError(f"{path}, line {number}: site {name!r} or its key is listed twice.")
        roster[name] = key
        seen.add(raw)
    return roster


def sign(key, payload: bytes) -> bytes:
    """The signature of ``payload`` by a site's key (ECDSA with SHA-384, or Ed25519).

    Parameters
    ----------
    key : EllipticCurvePrivateKey or Ed25519PrivateKey
    payload : bytes

    Returns
    -------
    bytes
    """
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(payload)
    return key.sign(payload, ec.ECDSA(hashes.SHA384()))


def verify(public_key, signature: bytes, payload: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s over ``payload``.

    Parameters
    ----------
    public_key : EllipticCurvePublicKey or Ed25519PublicKey
        From the roster.
    signature, payload : bytes

    Returns
    -------
    bool
    """
    try:
        if isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(signature, payload)
        else:
            public_key.verify(signature, payload, ec.ECDSA(hashes.SHA384()))
    except (InvalidSignature, TypeError, ValueError):
        return False
    return True


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The raw 32 bytes of an X25519 key's public half.

    Parameters
    ----------
    key : X25519PrivateKey

    Returns
    -------
    bytes
    """
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def agree(private: X25519PrivateKey, peer_public: bytes, context: bytes) -> bytes:
    """A 256-bit key shared with the peer: HKDF-SHA256 of the X25519 secret, bound to ``context``.

    Parameters
    ----------
    private : X25519PrivateKey
        This side's.
    peer_public : bytes
        The peer's raw public key (ValueError when it is not a valid X25519 key, or gives the all-zero secret).
    context : bytes
        What the key is for (HKDF's info).

    Returns
    -------
    bytes
        32 bytes.
    """
    secret = private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
    return HKDF(algorithm=hashes.SHA256(), length=SEED_BYTES, salt=None, info=context).derive(secret)


def encrypt(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """AES-256-GCM: a fresh 96-bit nonce, then the ciphertext and its tag.

    Parameters
    ----------
    key : bytes
        32 bytes.
    plaintext : bytes
    associated : bytes
        Authenticated, not encrypted (who sends it to whom, in which instance).

    Returns
    -------
    bytes
    """
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, associated)


def decrypt(key: bytes, ciphertext: bytes, associated: bytes) -> bytes | None:
    """The plaintext of :func:`encrypt`'s output, or None when it was not made with this key and ``associated``.

    Parameters
    ----------
    key : bytes
    ciphertext : bytes
    associated : bytes

    Returns
    -------
    bytes or None
    """
    try:
        return AESGCM(key).decrypt(ciphertext[:_NONCE_BYTES], ciphertext[_NONCE_BYTES:], associated)
    except (InvalidTag, ValueError):
        return None


def mask(seed: bytes, length: int, bits: int) -> np.ndarray:
    """``length`` integers uniform in [0, 2^bits) from ChaCha20's key stream under ``seed`` (32 bytes).

    Parameters
    ----------
    seed : bytes
        A 256-bit key (an agreed key, or a self-mask seed).
    length : int
    bits : int
        1 to 63 (the sum's modulus).

    Returns
    -------
    ndarray of int64, shape (length,)
    """
    if len(seed) != SEED_BYTES or not 1 <= bits <= 63:
        raise ValueError(f"mask needs a {SEED_BYTES}-byte seed and 1 <= bits <= 63. Got {len(seed)} bytes, "
                         f"bits={bits!r}.")
    stream = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor().update(bytes(8 * length))
    words = np.frombuffer(stream, dtype="<u8")
    return (words & np.uint64((1 << bits) - 1)).astype(np.int64)
