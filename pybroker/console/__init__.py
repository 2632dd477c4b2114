"""The web console: a small server-rendered UI of the cluster, served by the broker on
its opt-in HTTP listener (``metrics.listener``) at every path but ``/metrics``.

It shows the cluster and its brokers, topics with their partitions (leader, replicas,
ISR, watermarks), the records of a partition from an offset or a time (keys, values and
headers as text, JSON or hex), and consumer groups with their lag per partition; and it
runs the main admin actions (create a topic, add partitions, alter a topic config, reset
a group's offsets), each after a confirmation page.

Like Kafka UI, it is a Kafka client of the cluster (confluent-kafka, through the broker's
PLAINTEXT listener, else its inter-broker listener with the broker's own TLS and SASL
settings: :func:`pybroker.client.security.listener_client_settings`), not a view of the
broker's memory: in a cluster any broker's console
shows every topic and group, it works the same against whichever broker, and it never
runs on, or waits for, the broker's event loop. HTML is built in Python (``pages``) into
one template, with one style sheet and no script (package data: ``templates/``,
``static/``).

- ``app``: routes, the confirmation step and the cross-site form guard (``Console``).
- ``cluster``: what is asked of the cluster (``ClusterClient``), shared with the CLI
  through :mod:`pybroker.kafka_admin`.
- ``pages``: the HTML, every untrusted string escaped.
"""

from pybroker.console.app import Console

__all__ = ["Console"]
