"""Test certificates made with ``cryptography``: a CA, certificates it signs, PEM files
laid out as Kafka's PEM stores want them (one keystore file: the key, then the chain)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_NAME_OIDS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
              "O": NameOID.ORGANIZATION_NAME, "C": NameOID.COUNTRY_NAME}


class Issued(NamedTuple):
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _name(subject: str) -> x509.Name:
    """``"CN=alice,OU=eng"`` (most specific first, as RFC 2253 writes it) -> a Name."""
    parts = [part.split("=", 1) for part in subject.split(",")]
    return x509.Name([x509.NameAttribute(_NAME_OIDS[k], v) for k, v in reversed(parts)])


def _build(subject: str, issuer: Issued | None, ca: bool, hosts: bool) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject))
               .issuer_name(issuer.cert.subject if issuer else _name(subject))
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    signer = issuer.key if issuer else key
    return Issued(key, builder.sign(signer, hashes.SHA256()))


def new_ca(subject: str = "CN=Test CA") -> Issued:
    return _build(subject, None, ca=True, hosts=False)


def issue(ca: Issued, subject: str, hosts: bool = False) -> Issued:
    return _build(subject, ca, ca=False, hosts=hosts)


def cert_pem(issued: Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.PEM)


def key_pem(issued: Issued, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    return issued.key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8, encryption)


def write(directory: str, name: str, *parts: bytes) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(b"".join(parts))
    return path


class Stores(NamedTuple):
    """Paths of the files tests hand to brokers and clients."""

    ca: str  # the CA's certificate (truststore)
    keystore: str  # broker key + its chain
    keystore_encrypted: str  # the same key encrypted with KEY_PASSWORD
    client_cert: str  # alice, signed by the CA
    client_key: str
    other_ca: str  # a CA nobody trusts
    stranger_cert: str  # signed by the other CA
    stranger_key: str
    directory: str
    authority: Issued  # the CA, to issue more


KEY_PASSWORD = "key-secret"
CLIENT_SUBJECT = "CN=alice,OU=eng,O=pybroker"


def make_stores(directory: str) -> Stores:
    ca, other = new_ca(), new_ca("CN=Other CA")
    broker = issue(ca, "CN=localhost,OU=brokers,O=pybroker", hosts=True)
    alice = issue(ca, CLIENT_SUBJECT)
    stranger = issue(other, "CN=mallory,O=elsewhere")
    return Stores(
        ca=write(directory, "ca.pem", cert_pem(ca)),
        keystore=write(directory, "broker-keystore.pem", key_pem(broker), cert_pem(broker),
                       cert_pem(ca)),
        keystore_encrypted=write(directory, "broker-keystore-encrypted.pem",
                                 key_pem(broker, KEY_PASSWORD), cert_pem(broker)),
        client_cert=write(directory, "alice.pem", cert_pem(alice)),
        client_key=write(directory, "alice.key", key_pem(alice)),
        other_ca=write(directory, "other-ca.pem", cert_pem(other)),
        stranger_cert=write(directory, "mallory.pem", cert_pem(stranger)),
        stranger_key=write(directory, "mallory.key", key_pem(stranger)),
        directory=directory, authority=ca)


def broker_keystore(stores: Stores, subject: str, name: str) -> str:
    """A new keystore file for a broker, signed by the stores' CA."""
    broker = issue(stores.authority, subject, hosts=True)
    return write(stores.directory, name, key_pem(broker), cert_pem(broker))
