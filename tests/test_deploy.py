"""Deploying as TF Serving users do: serving/docker-compose.yml takes the image's MODEL_NAME and
MODEL_BASE_PATH (and a config file), and serving/deploy/kubernetes.yaml's probes ask endpoints
the server answers. No cluster and no Docker here: the manifests are parsed, and each probe's
request goes to a running `python -m serving` (conftest's example_server, model `toy`)."""

import json
import os
import socket
import urllib.error
import urllib.request

import yaml

from conftest import ROOT
from serving.flags import parse_flags

IMAGE_PORTS = {8500: "port", 8501: "rest_api_port"}  # tensorflow/serving's entrypoint flags


def kubernetes() -> dict:
    with open(os.path.join(ROOT, "serving", "deploy", "kubernetes.yaml"), encoding="utf-8") as f:
        return {document["kind"]: document for document in yaml.safe_load_all(f)}


def probe_answer(probe: dict, ports: dict, model: str, server) -> str:
    """What the server says to `probe` (a container probe; `ports`: name -> container port),
    its model name replaced by the running server's: an HTTP status, or "connected"."""
    served = {8500: server.grpc_port, 8501: server.rest_port}
    if "tcpSocket" in probe:
        with socket.create_connection(("127.0.0.1", served[ports[probe["tcpSocket"]["port"]]]), timeout=5):
            return "connected"
    get = probe["httpGet"]
    url = f"http://127.0.0.1:{served[ports[get['port']]]}{get['path'].replace(model, server.model_name)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            states = [v["state"] for v in json.load(response)["model_version_status"]]
            return f"{response.status} {','.join(states)}"
    except urllib.error.HTTPError as error:
        return str(error.code)


def test_kubernetes_probes_ask_what_the_server_answers(example_server):
    documents = kubernetes()
    pod = documents["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {variable["name"]: variable["value"] for variable in container["env"]}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert set(ports.values()) == set(IMAGE_PORTS)
    model = env["MODEL_NAME"]
    answers = {kind: probe_answer(container[kind], ports, model, example_server)
               for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert answers == {"startupProbe": "200 AVAILABLE", "readinessProbe": "200 AVAILABLE", "livenessProbe": "connected"}
    assert container["readinessProbe"]["httpGet"]["path"] == f"/v1/models/{model}"
    # The check can fail: a model the server does not have is a 404, not ready.
    assert probe_answer({"httpGet": {"path": "/v1/models/other", "port": "rest"}}, ports, model, example_server) == "404"

    # The versions come from a volume mounted at MODEL_BASE_PATH; batching reads the ConfigMap.
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts["models"] == env["MODEL_BASE_PATH"]
    flags = parse_flags(container["args"])
    assert flags.enable_batching and os.path.dirname(flags.batching_parameters_file) == mounts["config"]
    config_map = documents["ConfigMap"]["data"][os.path.basename(flags.batching_parameters_file)]
    with open(os.path.join(ROOT, "serving", "batching.config"), encoding="utf-8") as f:
        shipped = [line for line in f.read().splitlines() if line and not line.startswith("#")]
    assert config_map.splitlines() == shipped
    assert set(container["resources"]) == {"requests", "limits"}
    assert {volume["name"] for volume in pod["volumes"]} == set(mounts)
    # The Service reaches both ports by name.
    assert {port["targetPort"] for port in documents["Service"]["spec"]["ports"]} == set(ports)
    assert documents["Service"]["spec"]["selector"] == documents["Deployment"]["spec"]["selector"]["matchLabels"]


def test_compose_takes_the_images_model_name_base_path_and_config_file():
    with open(os.path.join(ROOT, "serving", "docker-compose.yml"), encoding="utf-8") as f:
        [service] = yaml.safe_load(f)["services"].values()
    assert service["image"] == "tensorflow/serving"
    assert service["environment"] == {"MODEL_NAME": "${MODEL_NAME:-kerasbert}", "MODEL_BASE_PATH": "/models"}
    assert any(volume.endswith(":/models:ro") for volume in service["volumes"])
    assert "--model_config_file=${MODEL_CONFIG_FILE:-}" in service["command"]
    # Unset, the config file flag is empty, which both servers read as no file: MODEL_NAME is served.
    assert parse_flags([arg.replace("${MODEL_CONFIG_FILE:-}", "") for arg in service["command"]]).model_config_file == ""
