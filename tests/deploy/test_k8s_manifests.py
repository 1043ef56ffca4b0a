"""deploy/k8s/: every manifest validates offline against the Kubernetes JSON schemas that the
kubernetes-validate package bundles (strict: unknown fields are errors), for the oldest and the
newest Kubernetes we claim; the ServiceMonitor, a custom resource with no bundled schema, and the
links between the objects (labels, port names, paths, sizes) are checked field by field. The
ConfigMap must be what make_configmap.py generates from deploy/kvtierd.yaml, and the config it
holds must start a real kvtierd."""
import copy
import importlib.util
import os
import pathlib
import posixpath
import re
import subprocess
import time

import kubernetes_validate
import pytest
import yaml

from helpers import RawClient
from kvtierd_process import BIN_DIR

REPO = pathlib.Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
# Service.spec.internalTrafficPolicy is GA from 1.26.
KUBERNETES_VERSIONS = ["1.27.0", "1.37.0"]
SIZE = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|KiB|MiB|GiB|TiB)")
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def load_make_configmap():
    spec = importlib.util.spec_from_file_location("make_configmap", K8S / "make_configmap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resources():
    files = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    return {doc["kind"]: doc for f in files for doc in yaml.safe_load_all((K8S / f).read_text())}


def size_bytes(text):
    m = SIZE.fullmatch(text)
    assert m, text
    return int(m.group(1)) * UNITS[m.group(2)[:2]]


@pytest.fixture(scope="module")
def objs():
    return resources()


@pytest.fixture(scope="module")
def pod_config(objs):
    return yaml.safe_load(objs["ConfigMap"]["data"]["kvtierd.yaml"])


def kvtierd_container(objs):
    (container,) = objs["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return container


def test_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(objs, version):
    kinds = set()
    for kind, doc in objs.items():
        if kind == "ServiceMonitor":
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        kinds.add(kind)
    assert kinds == {"Namespace", "ConfigMap", "DaemonSet", "Service"}


def test_the_validator_rejects_a_broken_daemonset(objs):
    broken = copy.deepcopy(objs["DaemonSet"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)
    broken = copy.deepcopy(objs["DaemonSet"])
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "6380"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_configmap_is_generated_from_kvtierd_yaml():
    make = load_make_configmap()
    source = (REPO / "deploy" / "kvtierd.yaml").read_text()
    assert (K8S / "configmap.yaml").read_text() == make.render(source), \
        "deploy/k8s/configmap.yaml is out of date: run python3 deploy/k8s/make_configmap.py"


def test_configmap_differs_from_kvtierd_yaml_only_in_the_listen_hosts(objs):
    source = (REPO / "deploy" / "kvtierd.yaml").read_text().splitlines()
    embedded = objs["ConfigMap"]["data"]["kvtierd.yaml"].splitlines()
    assert len(embedded) == len(source)
    changed = [(a, b) for a, b in zip(source, embedded) if a != b]
    assert changed == [("  tcp_host: 127.0.0.1", "  tcp_host: 0.0.0.0"),
                       ("  http_host: 127.0.0.1", "  http_host: 0.0.0.0")]


def test_daemonset_runs_one_daemon_per_gpu_node(objs):
    ds = objs["DaemonSet"]
    pod = ds["spec"]["template"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "nvidia.com/gpu.present" in pod["spec"]["nodeSelector"]
    # A DaemonSet pod that asked the device plugin for a GPU would take it from the engines.
    for container in pod["spec"]["containers"]:
        assert not any(k.startswith("nvidia.com/") for k in container["resources"]["limits"])


def test_daemonset_volumes_match_the_config(objs, pod_config):
    spec = objs["DaemonSet"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in kvtierd_container(objs)["volumeMounts"]}
    socket_dir = posixpath.dirname(pod_config["listen"]["unix"])
    assert volumes[mounts[socket_dir]]["hostPath"]["path"] == socket_dir, \
        "engine pods mount the same host directory at the same path"
    assert "hostPath" in volumes[mounts[pod_config["tiers"]["data_dir"]]]
    assert volumes[mounts["/etc/kvtier"]]["configMap"]["name"] == \
        objs["ConfigMap"]["metadata"]["name"]
    for container in spec["initContainers"] + spec["containers"]:
        for mount in container["volumeMounts"]:
            assert mount["name"] in volumes


def test_daemonset_ports_probes_and_password(objs, pod_config):
    container = kvtierd_container(objs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"resp": pod_config["listen"]["port"], "http": pod_config["listen"]["http_port"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    # A non-loopback TCP listener needs a password; kvtierd reads this one from its environment.
    assert pod_config["listen"]["tcp_host"] == "0.0.0.0"
    (env,) = [e for e in container["env"] if e["name"] == "KVTIER_PASSWORD"]
    assert "secretKeyRef" in env["valueFrom"]
    # Never as a flag: every user of the node reads a command line in /proc/PID/cmdline.
    assert "--password" not in container.get("args", []) + container.get("command", [])
    entrypoint = [line for line in (REPO / "deploy" / "Dockerfile").read_text().splitlines()
                  if line.startswith("ENTRYPOINT")]
    assert entrypoint and not any("--password" in line for line in entrypoint), entrypoint
    assert objs["DaemonSet"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60


def test_daemonset_resources_cover_the_host_tier(objs, pod_config):
    container = kvtierd_container(objs)
    args = container["args"]
    host_bytes = size_bytes(args[args.index("--host-bytes") + 1])
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    for key in ("cpu", "memory", "hugepages-2Mi"):
        assert key in requests
    assert requests["hugepages-2Mi"] == limits["hugepages-2Mi"], "Kubernetes requires it"
    assert pod_config["tiers"]["huge_pages"] is True
    assert size_bytes(limits["hugepages-2Mi"]) >= host_bytes
    assert requests["memory"] == limits["memory"]
    assert args[args.index("--io-threads") + 1] <= requests["cpu"]


def test_service_and_servicemonitor_reach_the_daemon_pods(objs):
    pod_labels = objs["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in kvtierd_container(objs)["ports"]}
    svc = objs["Service"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["internalTrafficPolicy"] == "Local"
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
    mon = objs["ServiceMonitor"]
    assert mon["apiVersion"] == "monitoring.coreos.com/v1"
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert mon["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    (endpoint,) = mon["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    namespace = objs["Namespace"]["metadata"]["name"]
    for kind, doc in objs.items():
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == namespace, kind


def test_the_configmap_config_starts_kvtierd(tmp_path, objs):
    """kvtierd accepts the embedded config (with the DaemonSet's flags). Here TCP and HTTP are
    off and paths point into the test's directory, so nothing listens beyond loopback."""
    config = tmp_path / "kvtierd.yaml"
    config.write_text(objs["ConfigMap"]["data"]["kvtierd.yaml"])
    unix = str(tmp_path / "kvtierd.sock")
    cmd = [str(BIN_DIR / "kvtierd"), "--config", str(config),
           "--host-bytes", "64MiB", "--nvme-bytes", "0", "--io-threads", "1",
           "--unix", unix, "--port", "0", "--http-port", "0", "--data-dir", str(tmp_path / "d")]
    log = open(tmp_path / "kvtierd.log", "wb")
    # The password as the DaemonSet gives it: in the environment.
    env = dict(os.environ, KVTIER_PASSWORD="pw")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env)
    try:
        deadline = time.monotonic() + 15
        answered = False
        while not answered and time.monotonic() < deadline and proc.poll() is None:
            try:
                with RawClient(unix, timeout_s=2) as c:
                    answered = c.call("AUTH", "pw") == b"OK" and c.call("PING") == b"PONG"
            except OSError:
                time.sleep(0.05)
    finally:
        proc.terminate()
        rc = proc.wait(timeout=15)
        log.close()
    text = (tmp_path / "kvtierd.log").read_text(errors="replace")
    assert answered, text
    assert rc == 0, text
