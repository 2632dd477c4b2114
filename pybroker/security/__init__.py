"""Security: Kafka's ACLs (``acl``: the model; ``authorizer``: the rules; ``store`` and
``zk_acl_store``: where ACLs are kept, per mode).

A request's principal is its connection's (``Connection.principal``, ``User:ANONYMOUS``
until a SASL or TLS layer authenticates it), reached by handlers as
``RequestContext.principal``; handlers ask ``RequestContext.authorize``. The broker has
an authorizer (``Broker.authorizer``) only when ``authorizer.class.name`` names one.
"""
