"""TLS settings with Kafka's keys: the SSL listeners' contexts, client certificates'
principals, and the inter-broker client's context.

Key material is PEM, as Kafka 2.7+ reads it: ``ssl.keystore.type=PEM`` with
``ssl.keystore.location`` naming one file that holds the private key (encrypted with
``ssl.key.password``, or not) and the certificate chain; ``ssl.truststore.type=PEM`` with
``ssl.truststore.location`` naming the CA certificates. JKS and PKCS12 stores are refused
at start. Protocols: ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3), capped by
``ssl.protocol`` when that is TLSv1.2, as Kafka does. ``ssl.cipher.suites`` takes
OpenSSL's names and applies to TLS 1.2 (Python's ``ssl`` cannot restrict TLS 1.3's
suites, all of which are AEAD).

Every ``ssl.*`` key may be given per listener, as Kafka's
``listener.name.<listener>.ssl.keystore.location`` (the listener's name in lower case),
which wins over the plain key for that listener (:class:`ListenerSettings`).

``ssl.client.auth`` (none, requested, required): with a verified client certificate the
connection's principal is ``User:`` + the subject as RFC 2253 writes it (Java's
``X500Principal.getName()``: most specific attribute first, ``CN=client,OU=eng,O=org``),
mapped by ``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``:
``RULE:pattern/replacement/[LU]`` and ``DEFAULT``, the first rule whose pattern matches
the whole name wins; none matching fails the connection). Without one it is
``User:ANONYMOUS``.

Certificate reload: the keystore and truststore files are looked at (``stat``) when a
connection is accepted on the listener, and a new context is built when either changed,
so renewing certificates needs no restart; connections already open keep their session.
A file that does not load (being written) is reported once and the previous context
kept. (Kafka reloads through a dynamic AlterConfigs of
``listener.name.<l>.ssl.keystore.location``; the file check needs no admin call.)

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from typing import Any, NamedTuple

from pybroker.config import LISTENER_PREFIX, SCHEMA
from pybroker.security.acl import ANONYMOUS

log = logging.getLogger("pybroker.tls")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}
# OpenSSL's long names of the attributes RFC 2253 gives a keyword (Java writes these so)
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}


class TlsError(ValueError):
    """Settings that cannot make a TLS context (stopping the start)."""


# settings --------------------------------------------------------------------------------

class ListenerSettings:
    """A broker's settings as one listener sees them: Kafka's
    ``listener.name.<listener>.<key>`` (listener name in lower case) wins over ``<key>``."""

    def __init__(self, config: Any, listener: str) -> None:
        self._config = config
        self._prefix = f"{LISTENER_PREFIX}{listener.lower()}."

    def __getitem__(self, key: str) -> Any:
        value = self._config.extra.get(self._prefix + key)
        if value is None:
            return self._config[key]
        try:
            return SCHEMA[key][0](value)
        except ValueError as exc:
            raise TlsError(f"{self._prefix}{key}: {exc}") from None


def _versions(config: Any) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    enabled = [p.strip() for p in config["ssl.enabled.protocols"].split(",") if p.strip()]
    unknown = [p for p in enabled if p not in _VERSIONS]
    if unknown or not enabled:
        raise TlsError(f"ssl.enabled.protocols: only TLSv1.2 and TLSv1.3 are served, "
                       f"not {', '.join(unknown) or 'none'}")
    versions = sorted(_VERSIONS[p] for p in enabled)
    if config["ssl.protocol"] == "TLSv1.2":
        versions = [v for v in versions if v <= ssl.TLSVersion.TLSv1_2] or versions
    return versions[0], versions[-1]


def _check_store_types(config: Any) -> None:
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if config[key].upper() != "PEM":
            raise TlsError(f"{key}={config[key]}: only PEM stores are read")


def _load_keystore(ctx: ssl.SSLContext, config: Any) -> None:
    location = config["ssl.keystore.location"]
    if location:
        password = config["ssl.key.password"] or config["ssl.keystore.password"]
        ctx.load_cert_chain(location, password=password)


def _load_truststore(ctx: ssl.SSLContext, config: Any, purpose: ssl.Purpose) -> None:
    location = config["ssl.truststore.location"]
    if location:
        ctx.load_verify_locations(cafile=location)
    else:  # as Kafka falls back to the JVM's trust store
        ctx.load_default_certs(purpose)


def _new_context(config: Any, server: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version, ctx.maximum_version = _versions(config)
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    if config["ssl.cipher.suites"]:
        ctx.set_ciphers(":".join(s.strip() for s in config["ssl.cipher.suites"].split(",")))
    return ctx


def server_context(config: Any) -> ssl.SSLContext:
    """The context of an SSL listener (raises ``TlsError``, ``OSError``, ``ssl.SSLError``)."""
    _check_store_types(config)
    if not config["ssl.keystore.location"]:
        raise TlsError("an SSL listener needs ssl.keystore.location (PEM: key and chain)")
    auth = config["ssl.client.auth"].strip().lower()
    if auth not in _CLIENT_AUTH:
        raise TlsError(f"ssl.client.auth must be none, requested or required, not {auth!r}")
    ctx = _new_context(config, server=True)
    _load_keystore(ctx, config)
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        _load_truststore(ctx, config, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(config: Any) -> ssl.SSLContext:
    """A context for this broker's connections to another's SSL listener: the truststore
    verifies the peer (its host name too unless ``ssl.endpoint.identification.algorithm``
    is empty), the keystore is this broker's client certificate."""
    _check_store_types(config)
    ctx = _new_context(config, server=False)
    ctx.check_hostname = config["ssl.endpoint.identification.algorithm"].lower() == "https"
    _load_truststore(ctx, config, ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, config)
    return ctx


# reload ----------------------------------------------------------------------------------

def _signature(path: str | None) -> tuple[int, int, int] | None:
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class ServerTls:
    """One SSL listener's context and principal rules, rebuilt when a store file changes
    (checked by :meth:`context` on each new connection: two ``stat`` calls)."""

    def __init__(self, config: Any) -> None:
        self._config = config
        self._files = (config["ssl.keystore.location"], config["ssl.truststore.location"])
        self._signatures = tuple(_signature(path) for path in self._files)
        self._failed: tuple[Any, ...] | None = None
        self._context = server_context(config)
        self.mapper = PrincipalMapper(config["ssl.principal.mapping.rules"])
        self.handshake_timeout_s = config["ssl.handshake.timeout.ms"] / 1000
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        signatures = tuple(_signature(path) for path in self._files)
        if signatures != self._signatures and signatures != self._failed:
            try:
                self._context = server_context(self._config)
            except (OSError, ssl.SSLError, TlsError) as exc:
                self._failed = signatures
                log.warning("TLS stores changed but do not load (%s); keeping the previous "
                            "certificates", exc)
            else:
                self._signatures, self._failed = signatures, None
                self.reloads += 1
                log.info("TLS stores changed: certificates reloaded")
        return self._context


# principals ------------------------------------------------------------------------------

def _escape_rfc2253(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and len(out) > 1:
        out = out[:-1] + "\\ "
    return out


def rfc2253_name(subject: Any) -> str:
    """``getpeercert()['subject']`` (RDNs most general first) as RFC 2253 writes it."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RFC2253_KEYWORDS.get(attr, attr)}={_escape_rfc2253(value)}"
                             for attr, value in rdn))
    return ",".join(rdns)


class _Rule(NamedTuple):
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        result = self.pattern.sub(self.replacement, name)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" \
            else result


# Kafka's SslPrincipalMapper.RULE_SPLITTER: a rule's pattern may hold commas
_RULE_SPLITTER = re.compile(
    r"\s*((DEFAULT)|RULE:((\\/|[^/])*)/((\\/|[^/])*)/([LU]?).*?|(.*?))\s*([,\n]\s*|$)")


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: a certificate subject to a user name."""

    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        position = 0
        text = rules or "DEFAULT"
        while position < len(text):
            m = _RULE_SPLITTER.match(text, position)
            if m is None or m.end() == position:
                raise TlsError(f"ssl.principal.mapping.rules: cannot parse {text[position:]!r}")
            position = m.end()
            if m.group(2):
                self.rules.append(_Rule(None, "", ""))
            elif m.group(3) is not None:
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", m.group(5).replace("\\/", "/"))
                try:
                    pattern = re.compile(m.group(3))
                except re.error as exc:
                    raise TlsError(f"ssl.principal.mapping.rules: {m.group(3)!r}: {exc}") \
                        from None
                self.rules.append(_Rule(pattern, replacement, m.group(7)))
            elif m.group(8):
                raise TlsError(f"ssl.principal.mapping.rules: not a rule: {m.group(8)!r}")

    def map(self, name: str) -> str | None:
        """The user name for a subject; None when no rule applies."""
        for rule in self.rules:
            result = rule.apply(name)
            if result is not None:
                return result
        return None


def peer_principal(sock: ssl.SSLSocket, mapper: PrincipalMapper) -> str | None:
    """The principal of a connection whose handshake is done: ``User:<mapped subject>``
    with a verified client certificate, ANONYMOUS without one; None when the mapping
    rules refuse the subject."""
    cert = sock.getpeercert()
    if not cert:
        return ANONYMOUS
    name = mapper.map(rfc2253_name(cert.get("subject", ())))
    return None if name is None else f"User:{name}"
