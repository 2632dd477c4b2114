"""Kafka transactions: the transaction coordinator's state (issue 14).

``state``: a transactional id's transaction (``TxnMetadata``) and Kafka's allowed state
transitions, pure. ``records``: its ``__transaction_state`` records in Kafka's layout, the
topic's config and the partition of a transactional id. ``load``: the transactions of a
partition rebuilt from its log when this broker becomes its leader. ``partitions``: which
``__transaction_state`` partitions this broker leads, loaded. ``coordinator``: the
transaction coordinator the handlers talk to. ``markers``: how it writes a transaction's
commit or abort markers to the transaction's partitions, here or through their leaders
(and the WriteTxnMarkers handler, here). ``config``: its settings.
"""
