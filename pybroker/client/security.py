"""How pybroker's own clients reach a listener that is not PLAINTEXT: TLS, SASL, or both.

One description serves every client of a command or of the console: librdkafka's
settings (``security.protocol``, ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``,
``sasl.mechanisms``, ``sasl.username``, ``sasl.password``), which confluent-kafka's
clients take as they are and :func:`client_security` turns into what the blocking client
(:class:`pybroker.client.connection.BrokerConnection`) needs: an ``SSLContext`` and the
SASL user. They come from a Kafka client properties file
(:func:`pybroker.cli_connect.command_config`) or, for a broker's console, from the broker's
own settings of one of its listeners (:func:`listener_client_settings`: the broker's
truststore and keystore, and its inter-broker SASL user).

SASL mechanisms: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (OAUTHBEARER needs a token
provider, which pybroker's client has not).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, NamedTuple

from pybroker.net.listeners import PLAINTEXT, PROTOCOL_IDS, SASL_PLAINTEXT, SASL_SSL, SSL
from pybroker.security.sasl import SaslClientSettings

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ClientSecurity(NamedTuple):
    """What a connection does after connecting: TLS with ``tls`` (None: none), then SASL
    as ``sasl`` (None: none)."""

    tls: ssl.SSLContext | None
    sasl: SaslClientSettings | None


def client_security(settings: Mapping[str, Any]) -> ClientSecurity | None:
    """librdkafka's security settings as pybroker's client needs them (None: plaintext);
    raises ValueError naming a setting it cannot follow."""
    protocol = str(settings.get("security.protocol", PLAINTEXT)).upper()
    if protocol not in PROTOCOL_IDS:
        raise ValueError(f"security.protocol {protocol}: one of PLAINTEXT, SSL, "
                         "SASL_PLAINTEXT, SASL_SSL")
    if protocol == PLAINTEXT:
        return None
    tls = None
    if protocol in (SSL, SASL_SSL):
        tls = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
        tls.check_hostname = str(settings.get("ssl.endpoint.identification.algorithm",
                                              "https")).lower() == "https"
        certificate = settings.get("ssl.certificate.location")
        if certificate:
            tls.load_cert_chain(certificate, settings.get("ssl.key.location"),
                                settings.get("ssl.key.password"))
    sasl = None
    if protocol in (SASL_PLAINTEXT, SASL_SSL):
        mechanism = str(settings.get("sasl.mechanisms", "GSSAPI")).upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise ValueError(f"sasl.mechanism {mechanism}: pybroker's client speaks "
                             f"{', '.join(CLIENT_MECHANISMS)}")
        if "sasl.username" not in settings or "sasl.password" not in settings:
            raise ValueError(f"{mechanism} needs username and password in sasl.jaas.config")
        sasl = SaslClientSettings(mechanism, str(settings["sasl.username"]),
                                  str(settings["sasl.password"]))
    return ClientSecurity(tls, sasl)


def listener_client_settings(config: Any, listener: Any) -> dict[str, str]:
    """librdkafka's settings for the broker itself as a client of its own ``listener``
    (a :class:`pybroker.net.listeners.Listener`): the listener's truststore verifies it,
    the broker's keystore is the client certificate (for ``ssl.client.auth``), and SASL is
    the inter-broker user (``sasl.mechanism.inter.broker.protocol`` and the username and
    password of its JAAS configuration on that listener)."""
    from pybroker.net.tls import ListenerSettings
    from pybroker.security.sasl import inter_broker_sasl

    out = {"security.protocol": listener.security_protocol}
    if listener.tls:
        tls = ListenerSettings(config, listener.name)
        if tls["ssl.truststore.location"]:
            out["ssl.ca.location"] = tls["ssl.truststore.location"]
        if tls["ssl.keystore.location"]:
            out["ssl.certificate.location"] = out["ssl.key.location"] = \
                tls["ssl.keystore.location"]
            if tls["ssl.key.password"]:
                out["ssl.key.password"] = tls["ssl.key.password"]
        out["ssl.endpoint.identification.algorithm"] = \
            tls["ssl.endpoint.identification.algorithm"] or "none"
    if listener.sasl:
        sasl = inter_broker_sasl(config, listener.name)
        out.update({"sasl.mechanisms": sasl.mechanism, "sasl.username": sasl.username,
                    "sasl.password": sasl.password})
    return out
