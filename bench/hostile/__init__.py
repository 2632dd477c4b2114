"""Hostile and heavy clients next to a canary, against any Kafka-protocol broker (issue 19).

    python3 -m bench.hostile --bootstrap HOST:PORT --pid PID [--log FILE] [--patterns a,b]
    python3 -m bench.hostile.side_by_side --rounds 3 --out DIR      (Kafka 4.1 vs pybroker)

What one client can take from the others, measured from outside the broker: a canary
client (``canary``, its own process) makes a produce + fetch round trip every 50 ms for
the whole session; each pattern (``patterns``) runs in turn, and the session
(``session``) sets the canary's latencies during the pattern against its idle baseline
and reads the broker's resident set, CPU, descriptors, CLOSE_WAIT sockets and log
(``watch``, from /proc by pid). Requests are exact bytes from the project's codec
(``wire``), never a client library, so nothing queues on the client side and both
brokers get the same bytes. ``report`` makes the table; ``side_by_side`` starts Kafka and
pybroker in turn and reports medians over rounds.

The broker must run on this host (its pid is read) and alone at its address: one broker,
no leader routing.
"""
