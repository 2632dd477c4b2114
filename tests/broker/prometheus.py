"""Scraping a broker's ``GET /metrics`` (``metrics.listener``) with Prometheus's own parser,
for the metrics tests."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

METRICS = re.compile(r"metrics: serving (http://\S+)/metrics")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metrics_url(broker: Any) -> str:
    """The base URL a broker process logged for its metrics listener."""
    match = METRICS.search(broker.log_text())
    assert match, "the broker did not log its metrics address"
    return match.group(1)


def scrape(base: str) -> Samples:
    """Every sample: (name, sorted labels) -> value."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}
