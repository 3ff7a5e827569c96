"""Reading a ``/metrics`` scrape in tests: every sample by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "metric_samples"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metric_samples(text: str) -> Samples:
    """Every sample of a Prometheus scrape, by name and sorted labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples
