"""SCRAM (RFC 5802, RFC 7677): SCRAM-SHA-256 and SCRAM-SHA-512 credentials and the server
side of the exchange, as Kafka's ``ScramSaslServer``.

A stored credential is never the password: a random salt, the iteration count, and two
keys derived from ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``::

    StoredKey = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey = HMAC(SaltedPassword, "Server Key")

Kafka's text form of a credential (ZooKeeper's ``/config/users/<user>``, and our files)::

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

The exchange (every message UTF-8, attributes ``x=value`` separated by commas)::

    client-first   n,,n=<user>,r=<client nonce>          (gs2 header "n,," or "y,,")
    server-first   r=<client nonce + server nonce>,s=<salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>

The server checks ``H(ClientProof XOR HMAC(StoredKey, AuthMessage)) == StoredKey`` in
constant time. Channel binding is not offered ("p=" is refused), as Kafka does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import NamedTuple

SCRAM_SHA_256, SCRAM_SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
# Kafka's ScramMechanism: hash, the code AlterUserScramCredentials and
# DescribeUserScramCredentials carry, the iteration bounds a credential must respect
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """A client message the exchange refuses (malformed, wrong nonce, wrong proof)."""


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(","))
        return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                   base64.b64decode(fields["server_key"]), int(fields["iterations"]))


def hash_name(mechanism: str) -> str:
    return _HASHES[mechanism]


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)`` (SASLprep is left to the client, as
    Kafka's formatter does: the password's UTF-8 bytes)."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, _HASHES[mechanism]).digest()


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """The stored form of a salted password (what AlterUserScramCredentials carries)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(_HASHES[mechanism], client_key).digest()
    return ScramCredential(salt, stored_key, _hmac(mechanism, salted, b"Server Key"),
                           iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` with a fresh random salt (unless one is given)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salt,
                                  salted_password(mechanism, password, salt, iterations),
                                  iterations)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {item!r}")
        out.append((item[0], item[2:]))
    return out


def _username(saslname: str) -> str:
    """RFC 5802's saslname: ``,`` and ``=`` are sent as ``=2C`` and ``=3D``."""
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise ScramError("invalid username encoding")
    return saslname.replace("=2C", ",").replace("=3D", "=")


# the stored credential of a user for this mechanism, or None (unknown user)
CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange on the server side: :meth:`first` takes the client-first
    message and returns the server-first; :meth:`final` takes the client-final, checks
    the proof and returns the server-final. Any refusal raises :class:`ScramError` and the
    exchange is over. ``username`` is the authenticated user once :meth:`final` returned.
    An unknown user is refused at the first message, as Kafka does; the client is told
    the same as for a wrong password."""

    def __init__(self, mechanism: str, lookup: CredentialLookup,
                 server_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce or secrets.token_urlsafe(18)  # given: tests
        self._lookup = lookup
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._done = False

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode()
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            if parts and parts[0].startswith("p="):
                raise ScramError("channel binding is not supported")
            raise ScramError("malformed client-first message")
        authzid = parts[1]
        if authzid and not authzid.startswith("a="):
            raise ScramError("malformed authorization id")
        bare = parts[2]
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r" \
                or not attributes[1][1]:
            raise ScramError("malformed client-first message")
        username = _username(attributes[0][1])
        if authzid and _username(authzid[2:]) != username:
            raise ScramError("Authentication failed: Client requested an authorization id "
                             "that is different from username")
        credential = self._credential = self._lookup(username)
        if credential is None:
            raise ScramError(f"unknown user {username!r}")
        self.username = username
        self._gs2_header = f"{parts[0]},{authzid},"
        self._client_first_bare = bare
        self._nonce = attributes[1][1] + self._server_nonce
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if not self._server_first or self._done:
            raise ScramError("unexpected client-final message")
        self._done = True
        try:
            text = client_final.decode()
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        attributes = _attributes(text)
        if len(attributes) < 3 or attributes[0][0] != "c" or attributes[1][0] != "r" \
                or attributes[-1][0] != "p":
            raise ScramError("malformed client-final message")
        if attributes[1][1] != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        try:
            binding = base64.b64decode(attributes[0][1], validate=True)
            proof = base64.b64decode(attributes[-1][1], validate=True)
        except ValueError:
            raise ScramError("malformed client-final message") from None
        if binding != self._gs2_header.encode():
            raise ScramError("invalid channel binding")
        without_proof = text[:text.rindex(",p=")]
        auth_message = (f"{self._client_first_bare},{self._server_first},"
                        f"{without_proof}").encode()
        credential = self._credential
        assert credential is not None  # first() succeeded
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(_HASHES[self.mechanism], client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise ScramError("Invalid client credentials")
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side of one exchange (a broker connecting to another as its
    inter-broker user): :meth:`first`, then :meth:`final` with the server-first message,
    then :meth:`verify` with the server-final (raises :class:`ScramError` unless the server
    proved it knows the credential)."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._client_first_bare = f"n={name},r={nonce or secrets.token_urlsafe(18)}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attributes = dict(_attributes(text))
        nonce, iterations = attributes.get("r", ""), int(attributes.get("i", "0"))
        if not nonce.startswith(self._client_first_bare.split(",r=", 1)[1]) \
                or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError("invalid server-first message")
        salted = salted_password(self.mechanism, self._password,
                                 base64.b64decode(attributes["s"]), iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = hashlib.new(_HASHES[self.mechanism], client_key).digest()
        signature = _hmac(self.mechanism, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(
            self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not self._server_signature or not hmac.compare_digest(server_final, expected):
            raise ScramError("the server's signature does not match")
