"""The chart's Grafana dashboard (dashboards/multikafka.json, shipped as a
ConfigMap) and alerting rules (files/alerts.yaml.tpl, shipped as a
PrometheusRule): every metric and label they name is one the coordinator
really exposes, ``promtool check rules`` accepts the rules and what the
dashboard asks, ``promtool test rules`` shows the alerts fire when they
should (and not on a deposed leader's stale values), values reach them, and
every alert has its runbook in docs/operations.md.

promtool is installed by ``make install`` (deploy/get_promtool.py takes it
from Debian's prometheus package into the venv); the tests use that one, or
one on PATH, and fail when there is none."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from multikafka.coordinator.metrics import CONVERTERS, Metrics
from multikafka.core.model import ClusterState
from tests.deploy import test_helm_chart as chart
from tests.deploy.test_helm_chart import (
    CHART,
    FULLNAME,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    REPO,
    Render,
    Values,
    _merge,
)

INTERNALS = ("multikafka.coordinator.metrics",)


# The chart tests' fixtures (pytest finds fixtures among a module's names).
helm = chart.helm
values_file = chart.values_file
render = chart.render
refused = chart.refused

pytestmark = pytest.mark.integration

DASHBOARD = CHART / "dashboards" / "multikafka.json"
OPERATIONS_DOC = REPO / "docs" / "operations.md"
RULE_ON: dict[str, Any] = {"prometheusRule": {"enabled": True}}
DASHBOARD_ON: dict[str, Any] = {"grafana": {"dashboard": {"enabled": True}}}
#: Labels Prometheus adds to every scraped series (the Operator's
#: ServiceMonitor adds the Kubernetes ones).
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
)
#: The release's series, as the rules select them by default.
SELECTOR = f'job="{FULLNAME}", namespace="{NAMESPACE}"'

# --- promtool ----------------------------------------------------------------


def promtool_binary() -> str | None:
    """The promtool ``make install`` put beside this interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / "promtool"
    return str(beside) if beside.is_file() else shutil.which("promtool")


Promtool = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def promtool() -> Promtool:
    binary = promtool_binary()
    assert binary is not None, (
        "no promtool binary: `make install` puts one in .venv/bin (deploy/get_promtool.py, "
        "from Debian's prometheus package), or put promtool on PATH"
    )

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120
        )

    return run


def _check_rules(promtool: Promtool, folder: Path, groups: dict[str, Any]) -> str:
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


# --- what the coordinator exposes ------------------------------------------------


def exposed() -> dict[str, frozenset[str]]:
    """Every sample name the coordinator's registry exposes (a Counter ``x``
    as ``x_total``, a Histogram as ``_bucket``, ``_sum``, ``_count``), with
    its label names: one child of every labelled family is made, and the
    text Prometheus scrapes is parsed."""
    m = Metrics()
    for family in vars(m).values():
        if isinstance(family, MetricWrapperBase) and family._labelnames:
            family.labels(*["x"] * len(family._labelnames))
    names: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for sample in fam.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in names.items()}


EXPOSED = exposed()

# --- PromQL, read just enough to name its metrics and labels ----------------------

#: PromQL functions and aggregations the dashboard and rules may use.
FUNCTIONS = frozenset(
    {
        "sum",
        "max",
        "min",
        "count",
        "avg",
        "rate",
        "increase",
        "deriv",
        "delta",
        "absent",
        "vector",
        "histogram_quantile",
    }
)
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "inf",
        "nan",
    }
)
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?\s*')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_OFFSET = re.compile(r"\boffset\s+\$?[\w]+")
_NUMBER = re.compile(r"(?<![\w$.])\d+(\.\d+)?([eE][+-]?\d+)?(?![\w.])")
_IDENT = re.compile(r"(?<![\w$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def promql_errors(expr: str) -> list[str]:
    """What in ``expr`` is not exposed by the coordinator: unknown metric
    names, label names a metric does not have, unknown functions, values of
    ``state`` that are not cluster states. Empty: all is real."""
    errors: list[str] = []
    used: set[str] = set()
    selectors: list[tuple[str | None, list[tuple[str, str]]]] = []

    def selector(match: re.Match[str]) -> str:
        body = match.group(2)
        matchers = [(m.group(1), m.group(3)) for m in _MATCHER.finditer(body)]
        if _MATCHER.sub("", body).strip():
            errors.append(f"cannot read the matchers {{{body}}}")
        selectors.append((match.group(1), matchers))
        return f" {match.group(1) or ''} "

    rest = _SELECTOR.sub(selector, expr)
    grouping: set[str] = set()
    for _, labels in _GROUPING.findall(rest):
        grouping.update(label.strip() for label in labels.split(",") if label.strip())
    rest = _GROUPING.sub(" ", rest)
    rest = _OFFSET.sub(" ", _RANGE.sub(" ", rest))
    rest = _NUMBER.sub(" ", rest)
    for m in _IDENT.finditer(rest):
        word, call = m.group(1), m.group(2)
        if word in KEYWORDS:
            continue
        if call:
            if word not in FUNCTIONS:
                errors.append(f"unknown function {word}()")
        else:
            used.add(word)
    for name, matchers in selectors:
        if name is not None:
            used.add(name)
        allowed = EXPOSED.get(name or "", frozenset()) | TARGET_LABELS
        for label, value in matchers:
            if name is not None and label not in allowed:
                errors.append(f"{name} has no label {label!r}")
            if label == "state":
                states = {s.value for s in ClusterState}
                errors += [f"no cluster state {v!r}" for v in value.split("|") if v not in states]
    errors += [f"no metric {name!r}" for name in sorted(used) if name not in EXPOSED]
    labels_of_used = set(TARGET_LABELS).union(*(EXPOSED.get(n, frozenset()) for n in used))
    errors += [f"no label {label!r} on {sorted(used)}" for label in grouping - labels_of_used]
    return errors


def variable_errors(query: str) -> list[str]:
    """What in a Grafana variable's query (``label_values(selector, label)``)
    the coordinator does not expose."""
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    if m is None:
        return [f"not label_values(selector, label): {query}"]
    selector, label = m.groups()
    errors = promql_errors(selector)
    labels = set(TARGET_LABELS).union(*(EXPOSED[n] for n in metric_names(selector)))
    return errors if label in labels else [*errors, f"no label {label!r} in {selector}"]


def metric_names(expr: str) -> set[str]:
    return {n for n in EXPOSED if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", expr)}


@pytest.mark.parametrize(
    ("expr", "wrong"),
    [
        ("rate(multikafka_agent_records_total[5m])", "no metric 'multikafka_agent_records_total'"),
        ("sum(multikafka_failovers)", "no metric 'multikafka_failovers'"),  # without _total
        ('multikafka_lag_records{topic=~"$t"}', "multikafka_lag_records has no label 'topic'"),
        ("sum by (partition) (multikafka_lag_records)", "no label 'partition'"),
        ('multikafka_cluster_state{state="DRAINNG"}', "no cluster state 'DRAINNG'"),
        ("rates(multikafka_readers[5m])", "unknown function rates()"),
        ("kafka_consumergroup_lag > 0", "no metric 'kafka_consumergroup_lag'"),
    ],
)
def test_the_metric_check_catches_what_does_not_exist(expr: str, wrong: str) -> None:
    assert wrong in "\n".join(promql_errors(expr))


def test_the_metric_check_passes_what_exists() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, job) (rate(multikafka_reconcile_latency_seconds_bucket{job=~"$job"}[$__rate_interval])))'
        " > 2.5e+00 or (multikafka_failovers_total unless multikafka_failovers_total offset 1h)"
        ' and on (instance) (multikafka_leader{namespace="x"} == 1)'
    )
    assert promql_errors(expr) == []


# --- the dashboard -----------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))  # a collapsed row holds its panels


def _targets() -> list[tuple[str, str]]:
    """(panel title / refId, expression) of every query of the dashboard."""
    return [
        (f"{p['title']} / {t['refId']}", t["expr"])
        for p in _panels(_dashboard()["panels"])
        for t in p.get("targets", [])
    ]


def _variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in _dashboard()["templating"]["list"]}


def test_dashboard_is_a_grafana_dashboard_with_a_prometheus_datasource_variable() -> None:
    d = _dashboard()
    assert d["uid"] == "multikafka"
    assert d["title"] == "multikafka"
    assert d["schemaVersion"] >= 36  # Grafana 9.3 and later; exported by 10/11 as 39
    assert d["id"] is None  # an exported dashboard, importable anywhere
    variables = _variables()
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["stream"]["type"] == "query"
    assert variables["stream"]["query"]["query"].startswith("label_values(")
    assert variables["stream"]["multi"] is True
    for p in _panels(d["panels"]):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, v["name"]
            assert variable_errors(v["query"]["query"]) == [], v["name"]


def test_dashboard_panel_ids_are_unique_and_panels_do_not_overlap() -> None:
    panels = list(_panels(_dashboard()["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0, p["title"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[x, y]}"
                cells[x, y] = p["title"]
        if p["type"] != "row":
            assert p["targets"], p["title"]
            assert p["description"], p["title"]


@pytest.mark.parametrize(("where", "expr"), _targets())
def test_every_dashboard_query_names_only_real_metrics_and_labels(where: str, expr: str) -> None:
    assert promql_errors(expr) == [], where
    assert "$job" in expr, f"{where}: not scoped to the coordinator's job"


def test_dashboard_shows_what_an_operator_needs() -> None:
    shown = set().union(*(metric_names(expr) for _, expr in _targets()))
    for needed in (
        "multikafka_cluster_state",  # ACTIVE / STANDBY / DRAINING / FAILED
        "multikafka_cluster_reachable",
        "multikafka_agent_records_read_total",
        "multikafka_lag_records",
        "multikafka_failovers_total",
        "multikafka_drains_total",
        "multikafka_reconcile_latency_seconds_bucket",
        "multikafka_readers",
        "multikafka_leader",
        "multikafka_elections_total",
        "multikafka_lease_renewals_failed_total",
        "multikafka_lease_renewal_seconds_bucket",
        "multikafka_fenced_writes_total",
        "multikafka_metadata_rejected_total",
        "multikafka_abandoned_ranges_total",
        "multikafka_data_loss_events_total",
        "multikafka_agent_malformed_records_total",
        "multikafka_reader_converters",
    ):
        assert needed in shown, needed
    # Per-cluster gauges come from the replica that leads now.
    for _, expr in _targets():
        for gauge in ("multikafka_cluster_state", "multikafka_lag_records"):
            if gauge in metric_names(expr):
                assert re.search(
                    r"and on \(instance\) \(multikafka_leader\{[^}]*\} == 1\)", expr
                ), expr


def test_dashboard_shows_readers_by_converter_each_in_its_colour() -> None:
    """One value per converter an agent reports (and ``unknown``), from the
    leader's count (standbys report 0: ``max``), each with a colour of its
    own: green for direct, what costs CPU in warmer colours."""
    (panel,) = [p for p in _panels(_dashboard()["panels"]) if p["title"] == "Readers by converter"]
    (target,) = panel["targets"]
    assert target["expr"].startswith("max by (converter) (multikafka_reader_converters{")
    assert target["legendFormat"] == "{{converter}}"
    colours = {
        o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"]
        for o in panel["fieldConfig"]["overrides"]
    }
    assert set(colours) == {*CONVERTERS, "unknown"}
    assert colours["c-direct"] == "green"
    assert len(set(colours.values())) == len(colours)


def test_every_dashboard_query_parses(promtool: Promtool, tmp_path: Path) -> None:
    """promtool reads each query as a recording rule, Grafana's variables
    replaced by what Grafana would put there."""

    def as_prometheus_sees_it(expr: str) -> str:
        expr = re.sub(r"\$__(rate_interval|interval)", "5m", expr)
        expr = expr.replace("$__range", "6h")
        return re.sub(r"\$\w+", ".*", expr)

    rules = [
        {"record": f"dashboard:query_{i}", "expr": as_prometheus_sees_it(expr)}
        for i, (_, expr) in enumerate(_targets())
    ]
    out = _check_rules(promtool, tmp_path, {"groups": [{"name": "dashboard", "rules": rules}]})
    assert f"SUCCESS: {len(rules)} rules found" in out


# --- the dashboard's ConfigMap ---------------------------------------------------


def test_dashboard_configmap_only_when_enabled(render: Render) -> None:
    assert not render({}).of_kind("ConfigMap")
    cm = render(DASHBOARD_ON).one("ConfigMap")
    assert cm["metadata"]["name"] == f"{FULLNAME}-dashboard"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert "namespace" not in cm["metadata"]  # the release's
    assert "annotations" not in cm["metadata"]
    (key,) = cm["data"]
    assert key.endswith(".json")
    assert json.loads(cm["data"][key]) == _dashboard()
    assert len(cm["data"][key].encode()) < 512 * 1024  # far from a ConfigMap's 1 MiB


def test_dashboard_configmap_labels_namespace_and_annotations(render: Render) -> None:
    values = _merge(
        DASHBOARD_ON,
        {
            "grafana": {
                "dashboard": {
                    "namespace": "monitoring",
                    "labels": {"team": "data"},
                    "annotations": {"grafana_folder": "Kafka"},
                }
            }
        },
    )
    meta = render(values).one("ConfigMap")["metadata"]
    assert meta["namespace"] == "monitoring"
    assert meta["labels"]["team"] == "data"
    assert meta["labels"]["grafana_dashboard"] == "1"  # maps merge with the defaults
    assert meta["labels"]["app.kubernetes.io/instance"] == "mk"
    assert meta["annotations"] == {"grafana_folder": "Kafka"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_dashboard_configmap_validates_against_kubernetes_schemas(
    render: Render, version: str
) -> None:
    kubernetes_validate.validate(render(DASHBOARD_ON).one("ConfigMap"), version, strict=True)


# --- the PrometheusRule ------------------------------------------------------------


def _rules(r: Any) -> dict[str, dict[str, Any]]:
    """The rendered PrometheusRule's alerts by name."""
    (group,) = r.one("PrometheusRule")["spec"]["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


ALERTS = (
    "MultikafkaClusterUnreachable",
    "MultikafkaLagGrowing",
    "MultikafkaFailover",
    "MultikafkaFailoverReadTwice",
    "MultikafkaDrainNotCompleted",
    "MultikafkaNoLeader",
    "MultikafkaLeaderFlapping",
    "MultikafkaLeaseRenewalsFailing",
    "MultikafkaLeaseRenewalsSlow",
    "MultikafkaFencedWrites",
    "MultikafkaMetadataRejected",
    "MultikafkaDataLoss",
    "MultikafkaPartitionCountShrunk",
    "MultikafkaReconcileSlow",
    "MultikafkaMirrorSyncsStopped",
    "MultikafkaAccessDeniedBurst",
    "MultikafkaAccessPolicyRefused",
)


def test_prometheus_rule_only_when_enabled(render: Render) -> None:
    assert not render({}).of_kind("PrometheusRule")
    r = render(_merge(RULE_ON, {"prometheusRule": {"additionalLabels": {"release": "prom"}}}))
    rule = r.one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == FULLNAME
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == "mk"
    assert "namespace" not in rule["metadata"]
    assert list(_rules(r)) == list(ALERTS)
    other = render(_merge(RULE_ON, {"prometheusRule": {"namespace": "monitoring"}}))
    assert other.one("PrometheusRule")["metadata"]["namespace"] == "monitoring"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_prometheus_rule_metadata_validates_against_kubernetes_schemas(
    render: Render, version: str
) -> None:
    """kubernetes-validate has no schema for the CRD (see the chart's tests):
    its metadata is checked as any object's, on a ConfigMap that carries it."""
    meta = render(RULE_ON).one("PrometheusRule")["metadata"]
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}
    kubernetes_validate.validate(probe, version, strict=True)


def test_every_alert_has_severity_summary_description_and_a_runbook(render: Render) -> None:
    headings = _doc_anchors()
    for name, rule in _rules(render(RULE_ON)).items():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        assert notes["summary"], name
        assert notes["description"], name
        url, _, anchor = notes["runbook_url"].partition("#")
        assert url == "docs/operations.md", name
        assert anchor == name.lower(), name
        assert anchor in headings, f"docs/operations.md has no heading for {name}"
        assert "{{" not in notes["runbook_url"]


@pytest.mark.parametrize("name", ALERTS)
def test_every_alert_names_only_real_metrics_and_labels(render: Render, name: str) -> None:
    expr = _rules(render(RULE_ON))[name]["expr"]
    assert promql_errors(expr) == []
    # Every selector is the release's.
    for selector in re.findall(r"multikafka_\w+(\{[^}]*\})?", expr):
        assert selector.startswith("{" + SELECTOR), expr


def test_values_reach_the_rules(render: Render) -> None:
    values = _merge(
        RULE_ON,
        {
            "prometheusRule": {
                "selector": 'job="mk", cluster_env="prod"',
                "runbookURL": "https://git.example.com/multikafka/docs/operations.md",
                "alertLabels": {"team": "data"},
                "alerts": {
                    "lagGrowing": {"threshold": 12345, "window": "7m", "for": "9m"},
                    "clusterUnreachable": {"for": "3m", "severity": "warning"},
                    "leaderFlapping": {"threshold": 7, "window": "2h"},
                    "reconcileSlow": {"thresholdSeconds": 2.5},
                    "leaseRenewalsSlow": {"thresholdSeconds": 0.25, "window": "3m"},
                    "fencedWrites": {"enabled": False},
                },
            }
        },
    )
    rules = _rules(render(values))
    assert "MultikafkaFencedWrites" not in rules
    lag = rules["MultikafkaLagGrowing"]
    assert "> 12345\n" in lag["expr"]
    assert "[7m]" in lag["expr"]
    assert lag["for"] == "9m"
    unreachable = rules["MultikafkaClusterUnreachable"]
    assert (unreachable["for"], unreachable["labels"]["severity"]) == ("3m", "warning")
    assert "[2h]" in rules["MultikafkaLeaderFlapping"]["expr"]
    assert rules["MultikafkaLeaderFlapping"]["expr"].endswith("> 7")
    assert rules["MultikafkaReconcileSlow"]["expr"].endswith("> 2.5")
    assert rules["MultikafkaLeaseRenewalsSlow"]["expr"].endswith("> 0.25")
    assert "[3m]" in rules["MultikafkaLeaseRenewalsSlow"]["expr"]
    for name, rule in rules.items():
        assert rule["labels"]["team"] == "data", name
        assert rule["annotations"]["runbook_url"].startswith("https://git.example.com/"), name
        assert 'job="mk", cluster_env="prod"' in rule["expr"], name
        assert FULLNAME not in rule["expr"], name


def test_a_large_threshold_is_written_as_an_integer(render: Render) -> None:
    # Helm reads numbers as floats: 1000000 would print as 1e+06.
    values = _merge(RULE_ON, {"prometheusRule": {"alerts": {"lagGrowing": {"threshold": 1000000}}}})
    assert "> 1000000\n" in _rules(render(values))["MultikafkaLagGrowing"]["expr"]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"prometheusRule": {"selector": 'job=~"multikafka.*"', "alertLabels": {"team": "data"}}},
    ],
)
def test_promtool_checks_the_rules(
    render: Render, promtool: Promtool, tmp_path: Path, values: dict[str, Any]
) -> None:
    spec = render(_merge(RULE_ON, values)).one("PrometheusRule")["spec"]
    out = _check_rules(promtool, tmp_path, spec)
    assert f"SUCCESS: {len(ALERTS)} rules found" in out


def test_promtool_checks_the_coordinators_metrics(promtool: Promtool) -> None:
    m = Metrics()
    for family in vars(m).values():
        if isinstance(family, MetricWrapperBase) and family._labelnames:
            family.labels(*["x"] * len(family._labelnames))
    out = promtool("check", "metrics", stdin=generate_latest(m.registry).decode())
    assert out.returncode == 0, out.stdout + out.stderr


# --- what the alerts do: promtool test rules ---------------------------------------


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    text = ", ".join(f'{k}="{v}"' for k, v in {**labels}.items())
    return {"series": f"{name}{{{SELECTOR}{', ' if text else ''}{text}}}", "values": values}


def _alert(name: str, at: str, *expected: dict[str, str]) -> dict[str, Any]:
    release = {"job": FULLNAME, "namespace": NAMESPACE}
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": {**release, **labels}} for labels in expected],
    }


def _state(instance: str, stream: str, cluster: str, state: str) -> list[dict[str, str]]:
    """A cluster's state-set for two hours: 1 for ``state``, 0 for the others."""
    return [
        _series(
            "multikafka_cluster_state",
            "1x120" if s.value == state else "0x120",
            instance=instance,
            stream=stream,
            cluster=cluster,
            state=s.value,
        )
        for s in ClusterState
    ]


def _mm2(instance: str, partition: str, *, lag: str, age: str = "") -> list[dict[str, str]]:
    """The two MM2 gauges of mirror ``west``'s source partition ``t/<partition>``."""
    labels = {"instance": instance, "stream": "s", "cluster": "west", "topic": "t"}
    out = [_series("multikafka_mm2_upstream_lag_records", lag, **labels, partition=partition)]
    if age:
        out.append(_series("multikafka_mm2_sync_age_seconds", age, **labels, partition=partition))
    return out


LEADER_A = [
    _series("multikafka_leader", "1x120", instance="a"),
    _series("multikafka_leader", "0x120", instance="b"),  # stood down: its gauges are stale
]
CRITICAL = {"severity": "critical"}
WARNING = {"severity": "warning"}

SCENARIOS: dict[str, dict[str, Any]] = {
    "unreachable: an ACTIVE or DRAINING cluster, read from the leader only": {
        "input_series": [
            *LEADER_A,
            _series(
                "multikafka_cluster_reachable", "0x120", instance="a", stream="s", cluster="east"
            ),
            _series(
                "multikafka_cluster_reachable", "0x120", instance="a", stream="s", cluster="drn"
            ),
            _series(
                "multikafka_cluster_reachable", "1x120", instance="a", stream="s", cluster="west"
            ),
            _series(
                "multikafka_cluster_reachable", "0x120", instance="b", stream="s", cluster="west"
            ),
            # A FAILED cluster keeps its last reachable value: no alert.
            _series(
                "multikafka_cluster_reachable", "0x120", instance="a", stream="s", cluster="old"
            ),
            *_state("a", "s", "east", "ACTIVE"),
            *_state("a", "s", "drn", "DRAINING"),
            *_state("a", "s", "west", "ACTIVE"),
            *_state("a", "s", "old", "FAILED"),
        ],
        "alert_rule_test": [
            _alert("MultikafkaClusterUnreachable", "3m"),  # pending: for 5m
            _alert(
                "MultikafkaClusterUnreachable",
                "10m",
                {**CRITICAL, "stream": "s", "cluster": "drn"},
                {**CRITICAL, "stream": "s", "cluster": "east"},
            ),
        ],
    },
    "lag: above the threshold and growing, not a stale or flat one": {
        "input_series": [
            *LEADER_A,
            _series(
                "multikafka_lag_records",
                "200000+1000x120",
                instance="a",
                stream="s",
                cluster="east",
            ),
            _series(
                "multikafka_lag_records", "500000x120", instance="a", stream="s", cluster="west"
            ),
            _series(
                "multikafka_lag_records", "10+10x120", instance="a", stream="s", cluster="small"
            ),
            _series(
                "multikafka_lag_records",
                "300000+5000x120",
                instance="b",
                stream="s",
                cluster="west",
            ),
        ],
        "alert_rule_test": [
            _alert("MultikafkaLagGrowing", "10m"),
            _alert("MultikafkaLagGrowing", "40m", {**WARNING, "stream": "s", "cluster": "east"}),
        ],
    },
    "failover: the series appears with the first one, and the alert ends after the window": {
        "input_series": [
            _series(
                "multikafka_failovers_total",
                "_x9 1x40",
                instance="a",
                stream="s",
                from_cluster="east",
                to_cluster="west",
                mode="automatic",
            ),
            _series(
                "multikafka_failovers_total",
                "0x20 1x30",
                instance="a",
                stream="u",
                from_cluster="x",
                to_cluster="y",
                mode="admin",
            ),
        ],
        "alert_rule_test": [
            _alert("MultikafkaFailover", "5m"),
            _alert(
                "MultikafkaFailover",
                "12m",
                {
                    **WARNING,
                    "stream": "s",
                    "from_cluster": "east",
                    "to_cluster": "west",
                    "mode": "automatic",
                },
            ),
            _alert(
                "MultikafkaFailover",
                "25m",
                {
                    **WARNING,
                    "stream": "s",
                    "from_cluster": "east",
                    "to_cluster": "west",
                    "mode": "automatic",
                },
                {**WARNING, "stream": "u", "from_cluster": "x", "to_cluster": "y", "mode": "admin"},
            ),
            _alert(
                "MultikafkaFailover",
                "45m",
                {**WARNING, "stream": "u", "from_cluster": "x", "to_cluster": "y", "mode": "admin"},
            ),
        ],
    },
    "failover read twice: a split started at its estimate, not a matched one": {
        "input_series": [
            _series(
                "multikafka_failover_translations_total",
                "_x9 2x40",
                instance="a",
                stream="s",
                cluster="west",
                result="estimate",
            ),
            _series(
                "multikafka_failover_translations_total",
                "_x9 4x40",
                instance="a",
                stream="s",
                cluster="west",
                result="matched",
            ),
            _series(
                "multikafka_failover_translations_total",
                "_x9 3x40",
                instance="a",
                stream="u",
                cluster="y",
                result="exact",
            ),
        ],
        "alert_rule_test": [
            _alert("MultikafkaFailoverReadTwice", "5m"),
            _alert(
                "MultikafkaFailoverReadTwice",
                "12m",
                {**WARNING, "stream": "s", "cluster": "west", "result": "estimate"},
            ),
            _alert("MultikafkaFailoverReadTwice", "45m"),
        ],
    },
    "drain: DRAINING longer than an hour, on the leader": {
        "input_series": [
            *LEADER_A,
            *_state("a", "s", "east", "DRAINING"),
            *_state("a", "s", "west", "ACTIVE"),
            *_state("b", "s", "west", "DRAINING"),  # stale
        ],
        "alert_rule_test": [
            _alert("MultikafkaDrainNotCompleted", "30m"),
            _alert(
                "MultikafkaDrainNotCompleted", "65m", {**WARNING, "stream": "s", "cluster": "east"}
            ),
        ],
    },
    "no leader: every replica a standby": {
        "input_series": [
            _series("multikafka_leader", "1x3 0x20", instance="a"),
            _series("multikafka_leader", "0x23", instance="b"),
        ],
        "alert_rule_test": [
            _alert("MultikafkaNoLeader", "2m"),
            _alert("MultikafkaNoLeader", "10m", CRITICAL),
        ],
    },
    "no leader: no replica scraped": {
        "input_series": [_series("multikafka_readers", "0x10", instance="a")],
        "alert_rule_test": [_alert("MultikafkaNoLeader", "5m", CRITICAL)],
    },
    "data loss and a shrunk partition count: counted from the first event": {
        "input_series": [
            _series(
                "multikafka_data_loss_events_total",
                "_x5 1x30",
                instance="a",
                stream="s",
                cluster="east",
            ),
            _series(
                "multikafka_partition_count_shrunk_total",
                "0x10 1x20",
                instance="a",
                stream="s",
                cluster="west",
            ),
        ],
        "alert_rule_test": [
            _alert("MultikafkaDataLoss", "3m"),
            _alert("MultikafkaDataLoss", "8m", {**CRITICAL, "stream": "s", "cluster": "east"}),
            _alert(
                "MultikafkaPartitionCountShrunk",
                "15m",
                {**CRITICAL, "stream": "s", "cluster": "west"},
            ),
        ],
    },
    "mm2 syncs stopped: far behind with no recent sync, read from the leader only": {
        "input_series": [
            *LEADER_A,
            # Far behind, and the newest sync keeps ageing: MM2 stopped.
            *_mm2("a", "0", lag="20000x60", age="900+60x60"),
            # Far behind but syncs keep coming: MM2 is behind, not stopped.
            *_mm2("a", "1", lag="20000x60", age="5x60"),
            # A slow partition: its last sync is old, but few records wait.
            *_mm2("a", "2", lag="50x60", age="5000+60x60"),
            # Never a sync, and far behind.
            *_mm2("a", "3", lag="50000x60"),
            # A replica that stopped leading keeps stale values.
            *_mm2("b", "4", lag="99999x60", age="9999x60"),
        ],
        "alert_rule_test": [
            _alert("MultikafkaMirrorSyncsStopped", "5m"),  # pending: for 10m
            _alert(
                "MultikafkaMirrorSyncsStopped",
                "20m",
                {**WARNING, "stream": "s", "cluster": "west", "topic": "t", "partition": "0"},
                {**WARNING, "stream": "s", "cluster": "west", "topic": "t", "partition": "3"},
            ),
        ],
    },
    "denied: a burst of refusals to one service, not a trickle": {
        "input_series": [
            # 20 refusals a minute at the Planner: 100 in 5 minutes.
            _series(
                "multikafka_denied_total", "0+20x30", instance="a", role="reader", service="Planner"
            ),
            # One a minute at the Admin service: 5 in 5 minutes.
            _series(
                "multikafka_denied_total", "0+1x30", instance="a", role="operator", service="Admin"
            ),
        ],
        "alert_rule_test": [
            _alert("MultikafkaAccessDeniedBurst", "4m"),  # pending: for 5m
            _alert("MultikafkaAccessDeniedBurst", "12m", {**WARNING, "service": "Planner"}),
        ],
    },
    "policy refused: one replica's file, for long enough": {
        "input_series": [
            _series("multikafka_access_policy_valid", "1x3 0x20", instance="a"),
            _series("multikafka_access_policy_valid", "1x30", instance="b"),
        ],
        "alert_rule_test": [
            _alert("MultikafkaAccessPolicyRefused", "5m"),  # pending: for 5m
            _alert("MultikafkaAccessPolicyRefused", "12m", {**WARNING, "instance": "a"}),
        ],
    },
}


def test_promtool_unit_tests_of_the_alerts(
    render: Render, promtool: Promtool, tmp_path: Path
) -> None:
    spec = copy.deepcopy(render(RULE_ON).one("PrometheusRule")["spec"])  # rendered once, shared
    # Annotations are checked above and by `promtool check rules`; here
    # only when the alerts fire and with which labels.
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"name": name, "interval": "1m", **t} for name, t in SCENARIOS.items()],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_renders_the_annotations(
    render: Render, promtool: Promtool, tmp_path: Path
) -> None:
    spec = render(RULE_ON).one("PrometheusRule")["spec"]
    rule = _rules(render(RULE_ON))["MultikafkaDrainNotCompleted"]
    expected = {
        k: v.replace("{{ $labels.stream }}", "s").replace("{{ $labels.cluster }}", "east")
        for k, v in rule["annotations"].items()
    }
    assert "{{" not in json.dumps(expected)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    scenario = SCENARIOS["drain: DRAINING longer than an hour, on the leader"]
    check = _alert(
        "MultikafkaDrainNotCompleted", "65m", {**WARNING, "stream": "s", "cluster": "east"}
    )
    check["exp_alerts"][0]["exp_annotations"] = expected
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": scenario["input_series"], "alert_rule_test": [check]}
        ],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


# --- values schema, docs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"prometheusRule": {"enabled": "yes"}}, "/prometheusRule/enabled"),
        (
            {"prometheusRule": {"alerts": {"lagGrowing": {"for": "15 minutes"}}}},
            "/prometheusRule/alerts/lagGrowing/for",
        ),
        (
            {"prometheusRule": {"alerts": {"noLeader": {"severity": "page"}}}},
            "/prometheusRule/alerts/noLeader/severity",
        ),
        (
            {"prometheusRule": {"alerts": {"lagGrowing": {"threshold": -1}}}},
            "/prometheusRule/alerts/lagGrowing/threshold",
        ),
        ({"prometheusRule": {"alerts": {"failover": {"for": "5m"}}}}, "'for'"),
        (
            {"prometheusRule": {"alerts": {"reconcileSlow": {"thresholdSeconds": 30}}}},
            "/prometheusRule/alerts/reconcileSlow/thresholdSeconds",
        ),
        (
            {"prometheusRule": {"alerts": {"leaseRenewalsSlow": {"thresholdSeconds": 10}}}},
            "/prometheusRule/alerts/leaseRenewalsSlow/thresholdSeconds",
        ),
        ({"prometheusRule": {"alerts": {"lagGrowin": {}}}}, "'lagGrowin'"),
        ({"grafana": {"dashboard": {"enable": True}}}, "'enable'"),
        (
            {"grafana": {"dashboard": {"labels": {"grafana_dashboard": 1}}}},
            "/grafana/dashboard/labels/grafana_dashboard",
        ),
    ],
)
def test_schema_refuses_wrong_observability_values(
    refused: Callable[[Values], str], values: dict[str, Any], named: str
) -> None:
    message = refused(values)
    assert "schema" in message
    assert named in message


def _doc_anchors() -> set[str]:
    """GitHub's anchors of the headings of docs/operations.md."""
    anchors = set()
    for line in OPERATIONS_DOC.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_operations_doc_has_a_runbook_for_every_alert_and_says_how_to_enable_them() -> None:
    doc = OPERATIONS_DOC.read_text()
    alerts_section = doc.split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^### (\w+)$", alerts_section, flags=re.MULTILINE)
    assert documented == list(ALERTS)
    for runbook in re.split(r"^### ", alerts_section, flags=re.MULTILINE)[1:]:
        name = runbook.split("\n", 1)[0]
        for part in ("**What it means.**", "**What to check.**", "**What to do.**"):
            assert part in runbook, f"{name}: {part}"
        assert "multikafka admin" in runbook or "kubectl" in runbook, name
    assert "prometheusRule.enabled=true" in alerts_section
    assert "promtool check rules" in alerts_section
    dashboard_section = doc.split("\n## Dashboard\n", 1)[1].split("\n## ", 1)[0]
    assert "grafana.dashboard.enabled=true" in dashboard_section
    assert {"dashboard", "alerts"} <= _doc_anchors()
