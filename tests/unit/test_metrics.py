"""The coordinator's metrics: no series outlives the stream or cluster it
describes (:meth:`multikafka.coordinator.metrics.Metrics.forget_stream`)."""

from __future__ import annotations

from multikafka.coordinator.metrics import Metrics

INTERNALS = ("multikafka.coordinator.metrics",)


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_forgetting_a_stream_removes_its_series_of_every_family() -> None:
    m = Metrics()
    for stream in ("s", "u"):
        m.generation.labels(stream).set(7)
        m.reconciles.labels(stream).inc()
        m.partitions.labels(stream, "a").set(2)
        m.failovers.labels(stream, "a", "b", "admin").inc()
        m.failovers.labels(stream, "b", "gone", "automatic").inc()

    m.forget_stream("s", ["a", "b"])

    failovers = "multikafka_failovers_total"
    assert _value(m, "multikafka_metadata_generation", stream="s") is None
    assert _value(m, "multikafka_reconcile_events_total", stream="s") is None
    assert _value(m, "multikafka_cluster_partitions", stream="s", cluster="a") is None
    labels = {"from_cluster": "a", "to_cluster": "b", "mode": "admin"}
    assert _value(m, failovers, stream="s", **labels) is None
    other = {"from_cluster": "b", "to_cluster": "gone", "mode": "automatic"}
    assert _value(m, failovers, stream="s", **other) is None
    # The other stream keeps every series.
    assert _value(m, "multikafka_metadata_generation", stream="u") == 7
    assert _value(m, failovers, stream="u", **labels) == 1
    assert _value(m, failovers, stream="u", **other) == 1
