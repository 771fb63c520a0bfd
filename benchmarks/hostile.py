"""Good clients beside hostile ones: what attacks cost the clients that behave.

    python -m benchmarks.hostile --export_base saved_models/kerasbert [--seconds 20] [--batching on off]
    python -m benchmarks.hostile --seconds 5 --calm_seconds 5 --attacks framing,big_requests --batching off

Good REST and gRPC clients check every answer, alone and then beside each attack group of
serving.attacks (run in a loop by a second process on the other half of the cores), batching
on and off; then the server's CPU after abandoned requests. With `make demo-tasks`' ner and squad
exports (--families_export_base), big_texts sends their signatures rows whose cost is their length,
and `entities` is called alone on one 1 MB text (benchmarks.call_memory). docs/benchmarks.md tells
what is measured and the goals.
"""

from __future__ import annotations

import collections
import http.client
import json
import multiprocessing
import os
import random
import re
import shutil
import string
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import classification_pb2, prediction_service_pb2_grpc

from benchmarks.call_memory import call_peak_bytes, hostile_text
from benchmarks.results import save_results
from benchmarks.serving import (BATCHING, answered, command_line, copy_of_newest, cpu_seconds, model_config,
                                newest_version, post_sentence, run_clients)
from serving.attacks import (PREDICT_PATH, Target, big_requests, big_text_rows, closed_by_server, declared, exchange,
                             framing_attacks, idle_sockets, length_delimited, memory_bombs, predict_request,
                             rapid_reset, statuses, with_values)
from serving.model_memory import estimate_ram_bytes
from serving.process import LocalServer
from serving.session import ModelWorkLimits

TITLE = "Serving under attack (sentiment signature; batching on and off)"  # of results.md
MAX_BODY = 4 * 1024 * 1024
MAX_MESSAGE = 12 * MAX_BODY // 66  # the server's --grpc_max_message_bytes (grpc_server.max_receive_bytes_of)
TIMEOUT_MS = 10_000  # --rest_api_timeout_in_ms: a big request's 504 comes within the run
ADJECTIVES = ["gripping", "dull", "moving", "clumsy", "tender", "bloated", "witty", "tedious"]
TARGET = Target("kerasbert", "sentiment", "text", '"a fine film"')


def sentences_of(client: int, count: int = 6) -> list[str]:
    """Sentences no other client sends."""
    return [f"a {ADJECTIVES[(client + i) % len(ADJECTIVES)]} film , number {client * 100 + i} of the festival ."
            for i in range(count)]


def channel(port: int, own_connection: bool = False) -> grpc.Channel:
    """A channel to 127.0.0.1:`port`; with `own_connection`, on a connection of its own."""
    return grpc.insecure_channel(f"127.0.0.1:{port}", [("grpc.use_local_subchannel_pool", 1)] * own_connection)


def grpc_stub(port: int, own_connection: bool = False):
    return prediction_service_pb2_grpc.PredictionServiceStub(channel(port, own_connection))


def sentiment_request(texts: list[str]):
    """A gRPC PredictRequest of `texts` for kerasbert's `sentiment` signature."""
    return predict_request("kerasbert", "sentiment", text=tf.make_tensor_proto(np.array(texts, object)))


def ended(call) -> str:
    """How a gRPC call (`call()` waits for it) ended: OK, or why not."""
    try:
        call()
        return "OK"
    except grpc.FutureCancelledError:
        return "cancelled by the client"
    except grpc.RpcError as error:
        return error.code().name


def status_line(received: bytes) -> str:
    """The status codes of the HTTP answers in `received`: "400", "408,400" or "no answer"."""
    return ",".join(map(str, statuses(received))) or "no answer"


# --- The good clients ----------------------------------------------------------------------


def rest_ask(expected: dict):
    """`ask` of `run_clients` for REST: "correct" if the label equals, and the probabilities are
    within 1e-4 of, the sentence's answer alone (one carrying another client's row fails)."""
    def ask(connection: http.client.HTTPConnection, sentence: str) -> str:
        def judge(body: bytes) -> str:
            (got,), (alone,) = json.loads(body)["predictions"], expected[sentence]["predictions"]
            return "correct" if got["label"] == alone["label"] and all(
                abs(x - y) <= 1e-4 for x, y in zip(got["probabilities"], alone["probabilities"])) else "wrong"
        return answered(connection, sentence, judge)
    return ask


def grpc_ask(expected: dict):
    """`ask` of `run_clients` for gRPC: "correct" if the label equals the sentence's answer alone."""
    def ask(stub, sentence: str) -> str:
        try:
            label = stub.Predict(sentiment_request([sentence]), timeout=30).outputs["label"].int64_val[0]
        except grpc.RpcError as error:
            return error.code().name
        return "correct" if label == expected[sentence]["predictions"][0]["label"] else "wrong"
    return ask


def pin_process(pid: int, cores: set[int]) -> None:
    """Every thread of `pid` on `cores` (sched_setaffinity binds one thread at a time)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except OSError:  # a thread that has ended meanwhile
            pass


# --- The attackers' process: each group a round of attacks -> [(attack, answer)] --------------


ATTACK_GROUPS = ("framing", "bombs", "slow", "grpc", "idle_rest", "idle_grpc", "model_names", "rapid_reset",
                 "big_requests", "grpc_cancel", "grpc_values", "undecodable", "context", "big_texts", "admin")
FAMILIES = ("ner", "squad")  # the models of --families_export_base, which big_texts needs
IDLE_SOCKETS = 1500  # per port: more than the server's 1,024 connections
CANCELLED_CALLS, CANCEL_AFTER = 8, 0.5  # gRPC calls at once, each cancelled by its client after 0.5 s


def raw_requests(port: int, requests: list[tuple[str, bytes]], quiet: float):
    """Each request on a connection of its own, answered within `quiet` seconds of silence."""
    return lambda: [(name, status_line(exchange(port, data, quiet))) for name, data in requests]


def held_open(name: str, port: int, count: int, greeting: bytes = b""):
    """`count` connections that send `greeting` and then nothing, reopened as the server
    closes them."""
    held = set()

    def round_():
        closed = {sock for sock in held if closed_by_server(sock)}
        for sock in closed:
            sock.close()
        held.difference_update(closed)
        opened = idle_sockets(port, count - len(held), timeout=2)
        for sock in opened:
            try:
                sock.sendall(greeting)
            except OSError:  # closed at once: counted next round
                pass
        held.update(opened)
        return [(name, "opened")] * len(opened) + [(name, "closed by the server")] * len(closed)
    return round_


def unknown_models(port: int):
    """A predict for a name no server has (8, 64 or 4,000 letters): it must cost no metric series."""
    def round_():
        name = "".join(random.choices(string.ascii_lowercase, k=random.choice([8, 64, 4000])))
        data = TARGET._replace(model=name).post(headers=b"Connection: close\r\n")
        return [("predict for a model that does not exist", status_line(exchange(port, data, 0.5)))]
    return round_


def rapid_resets(port: int):
    return lambda: [("HTTP/2 rapid reset, 50,000 streams a round", "connection closed by the server"
                     if rapid_reset(port, 50_000)["closed_by_server"] else "connection kept")]


def grpc_attacks(port: int):
    """Requests that declare huge tensors, use unknown names or dtypes, name an output twice,
    or run past a 2 ms deadline."""
    def request(**inputs):
        return predict_request("kerasbert", "sentiment", **inputs)

    duplicate = sentiment_request(["a film"])
    duplicate.output_filter.extend(["label", "label"])
    attacks = [("grpc: DT_STRING [20000000]", request(text=declared(types_pb2.DT_STRING, [20_000_000],
                                                                     string_val=[b"a"])), 30),
               ("grpc: unknown key, [500000000] floats", request(nope=declared(types_pb2.DT_FLOAT, [500_000_000])), 30),
               ("grpc: dtype 999", request(text=declared(999, [1])), 30),
               ("grpc: duplicate output alias", duplicate, 30),
               ("grpc: 32 sentences, 2 ms deadline", sentiment_request(["a long and winding film review"] * 32), 0.002)]
    stub = grpc_stub(port)
    return lambda: [(name, ended(lambda: stub.Predict(message, timeout=timeout))) for name, message, timeout in attacks]


def cancelled_calls(port: int, wait):
    """Issue 53: CANCELLED_CALLS gRPC calls of 2,000 sentences at once, each cancelled by its
    client after `wait(CANCEL_AFTER)`."""
    request = sentiment_request(["a long and winding film review of many words"] * 2000)
    stub = grpc_stub(port)

    def round_():
        calls = [stub.Predict.future(request, timeout=60) for _ in range(CANCELLED_CALLS)]
        wait(CANCEL_AFTER)
        for call in calls:
            call.cancel()
        return [("gRPC: 8 calls of 2,000 sentences cancelled after 0.5 s", ended(call.result)) for call in calls]
    return round_


def many_values(port: int):
    """Issue 70: 60 M packed int_val for [1, 1] (58 KB gzip-compressed), and as many empty
    string_val for [1] as a message may hold (--grpc_max_message_bytes' default)."""
    count = MAX_MESSAGE // 2 - 64
    ints = with_values("kerasbert", "embed_tokens", "token_ids", types_pb2.DT_INT32, [1, 1],
                       length_delimited(7, bytes(60_000_000)))
    strings = with_values("kerasbert", "sentiment", "text", types_pb2.DT_STRING, [1],
                          length_delimited(8, b"a fine film") + length_delimited(8, b"") * count)
    predict = channel(port).unary_unary(PREDICT_PATH.decode())  # bytes in and out
    return lambda: [("gRPC: 60 M int_val for [1, 1], gzip",
                     ended(lambda: predict(ints, timeout=30, compression=grpc.Compression.Gzip))),
                    (f"gRPC: {count:,} empty string_val for [1]", ended(lambda: predict(strings, timeout=30)))]


def undecodable(port: int, count: int = 200):
    """Issue 70: `count` messages that do not parse, then a good call, on one connection."""
    predict, good = channel(port, True).unary_unary(PREDICT_PATH.decode()), sentiment_request(["a"]).SerializeToString()
    return lambda: [("gRPC: a message that does not parse", ended(lambda: predict(b"\xff" * 4, timeout=10)))
                    for _ in range(count)] + [("gRPC: then a good call on its connection",
                                               ended(lambda: predict(good, timeout=30)))]


def context_merging(port: int, examples: int = 20):
    """Issue 70: Classify with a context of int64 features a quarter as large as a message may be
    (--grpc_max_message_bytes' default), and `examples` empty examples."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = "kerasbert", "sentiment_classify"
    lists = request.input.example_list_with_context
    lists.context.features.feature["text"].bytes_list.value.append(b"a fine film")
    for index in range(MAX_MESSAGE // 60):  # about 15 bytes a feature: a quarter of a message
        lists.context.features.feature[f"f{index}"].int64_list.value.append(index)
    lists.examples.extend([lists.context.__class__()] * examples)
    stub, name = grpc_stub(port), f"gRPC Classify: a {request.ByteSize() / 1e6:.1f} MB context, {examples} examples"
    return lambda: [(name, ended(lambda: stub.Classify(request, timeout=60)))]


# The admin group (issue 87): a ReloadConfig of ADMIN_MODELS models on one export, beside a model
# of ADMIN_VERSIONS empty version folders (policy all); ten more without a deadline; a long
# Profile under traffic and hostile ones (a root outside, 2^63 ms).
ADMIN_MODELS, ADMIN_VERSIONS, ADMIN_PROFILE_MS = 10_000, 10_000, 15_000
ADMIN_BUDGET_COPIES = 4  # --total_model_memory_limit_bytes: this many copies of the export


def admin_configs(base: str, work: str):
    """(the hostile ModelServerConfig, the one that restores kerasbert alone)."""
    from tensorflow_serving.config import model_server_config_pb2

    many = os.path.join(work, "many_versions")
    for version in range(1, ADMIN_VERSIONS + 1):
        os.makedirs(os.path.join(many, str(version)), exist_ok=True)
        open(os.path.join(many, str(version), "saved_model.pb"), "wb").close()
    hostile, alone = model_server_config_pb2.ModelServerConfig(), model_server_config_pb2.ModelServerConfig()
    for config in (hostile, alone):
        config.model_config_list.config.add(name="kerasbert", base_path=base, model_platform="tensorflow")
    hostile.model_config_list.config.add(name="many_versions", base_path=many, model_platform="tensorflow") \
        .model_version_policy.all.SetInParent()
    for copy in range(ADMIN_MODELS):
        hostile.model_config_list.config.add(name=f"copy{copy}", base_path=base, model_platform="tensorflow")
    return hostile, alone


def admin_calls(grpc_port: int, base: str, stop):
    """A round of the admin group: ten ReloadConfigs of the hostile config without a deadline
    (the one the server runs is cancelled when the round ends), one long Profile and two hostile
    ones; at `stop`, kerasbert alone restored."""
    from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc

    from serving.profiler import service_messages

    work = tempfile.mkdtemp(prefix="kerasbert-bench-admin-")
    hostile, alone = admin_configs(base, work)
    connection = channel(grpc_port, own_connection=True)
    models = model_service_pb2_grpc.ModelServiceStub(connection)
    messages = service_messages()
    profile = connection.unary_unary("/tensorflow.ProfilerService/Profile",
                                     request_serializer=messages["ProfileRequest"].SerializeToString,
                                     response_deserializer=messages["ProfileResponse"].FromString)

    def profile_request(duration_ms: int, root: str):
        request = messages["ProfileRequest"](duration_ms=duration_ms, repository_root=root, session_id="run",
                                             host_name="bench")
        request.opts.version, request.opts.duration_ms = 1, duration_ms
        return request

    def round_():
        tracing = profile.future(profile_request(ADMIN_PROFILE_MS, "bench"), timeout=60)
        answers = [("Profile: a root outside (/etc)", ended(lambda: profile(profile_request(100, "/etc"), timeout=30))),
                   ("Profile: 2^63 ms", ended(lambda: profile(profile_request(2**63, "bench"), timeout=30)))]
        reloads = [models.HandleReloadConfigRequest.future(
            model_management_pb2.ReloadConfigRequest(config=hostile)) for _ in range(10)]
        stop.wait(5)
        for call in reloads:
            if not call.done():
                call.cancel()
        answers += [(f"ReloadConfig: {ADMIN_MODELS:,} models on one export + {ADMIN_VERSIONS:,} versions, ten "
                     "without a deadline, cancelled after 5 s", ended(call.result)) for call in reloads]
        answers.append((f"Profile: {ADMIN_PROFILE_MS} ms under traffic", ended(tracing.result)))
        if stop.is_set():
            answers.append(("ReloadConfig: kerasbert alone restored", ended(lambda: models.HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(config=alone), timeout=120))))
            shutil.rmtree(work, ignore_errors=True)
        return answers
    return round_


def attack_forever(rest_port: int, grpc_port: int, stop, results, groups=ATTACK_GROUPS, cores=None,
                   ready=None, base: str = "") -> None:
    """Runs the attacks of `groups` in a loop until `stop` is set, on `cores` (default: any);
    sets `ready` once its imports are done and the attacks start; puts {attack: {answer:
    count}} in `results`. `base`: the served export's base path (the admin group's)."""
    if cores:
        os.sched_setaffinity(0, cores)  # before any thread starts: they inherit it
    rounds = {  # group: () -> (a round of its attacks, seconds between rounds)
        "framing": lambda: (raw_requests(rest_port, framing_attacks(TARGET), 0.5), 0),
        "bombs": lambda: (raw_requests(rest_port, [(name, TARGET.post(body)) for name, body
                                                   in memory_bombs(TARGET, MAX_BODY)], 1.0), 0),
        "slow": lambda: (held_open("slow client (headers and one byte)", rest_port, 400,
                                   TARGET.head() + b"Content-Length: 100\r\n\r\n{"), 1),
        "grpc": lambda: (grpc_attacks(grpc_port), 0),
        "idle_rest": lambda: (held_open("idle REST sockets (1,500 kept open)", rest_port, IDLE_SOCKETS), 1),
        "idle_grpc": lambda: (held_open("idle gRPC sockets (1,500 kept open)", grpc_port, IDLE_SOCKETS), 1),
        "model_names": lambda: (unknown_models(rest_port), 0),
        "rapid_reset": lambda: (rapid_resets(grpc_port), 1),
        "big_requests": lambda: (raw_requests(rest_port, big_requests(), 40.0), 0),
        "grpc_cancel": lambda: (cancelled_calls(grpc_port, stop.wait), 0),
        "grpc_values": lambda: (many_values(grpc_port), 0), "undecodable": lambda: (undecodable(grpc_port), 0),
        "context": lambda: (context_merging(grpc_port), 0),
        "big_texts": lambda: (raw_requests(rest_port, big_text_rows(*FAMILIES), 60.0), 0),
        "admin": lambda: (admin_calls(grpc_port, base, stop), 0)}
    tally, lock = collections.Counter(), threading.Lock()

    def repeat(round_, pause: float) -> None:
        while not stop.is_set():
            answers = round_()
            with lock:
                tally.update(answers)
            stop.wait(pause)

    # Built here, before `ready` (the gRPC groups import TensorFlow). Two big-request loops at
    # once: requests that overlap, as the four did.
    threads = [threading.Thread(target=repeat, args=rounds[group]())
               for group in groups for _ in range(2 if group == "big_requests" else 1)]
    for thread in threads:
        thread.start()
    if ready is not None:
        ready.set()
    for thread in threads:
        thread.join()
    summary: dict = collections.defaultdict(dict)
    for (name, answer), count in tally.items():
        summary[name][answer] = count
    results.put(dict(summary))


# --- The server's process ------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """A process's VmRSS and VmHWM (KiB) and Threads."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM", "Threads")}


def metrics_of(port: int) -> dict:
    """From the server's Prometheus page: its samples, the model names labelling them, and the
    most request data each memory budget held (MiB)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/monitoring/prometheus/metrics") as response:
        page = response.read().decode()
    samples = [line for line in page.splitlines() if line and not line.startswith("#")]
    return {"series": len(samples), "model_labels": sorted(set(re.findall(r'model(?:_name)?="([^"]*)"', page))),
            "budget_peaks_mib": {re.search(r'budget="([^"]*)"', line)[1]: float(line.rsplit(" ", 1)[1]) / 2**20
                                 for line in samples if line.startswith(":kerasbert:serving:memory_budget_bytes{")
                                 and 'kind="peak"' in line}}


def cpu_after(pid: int, start, settle: float = 3.0) -> dict:
    """`start()` sends one abandoned request and returns once the client has its answer (a
    504 or a 400) or has cancelled it; then the server's CPU-seconds over the next `settle`
    seconds, less what it spends idle over as long: the work it did for nobody."""
    before = cpu_seconds(pid)
    time.sleep(settle)
    idle = cpu_seconds(pid) - before
    answer = start()
    after = cpu_seconds(pid)
    time.sleep(settle)
    return {"answer": answer, "cpu_s": max(0.0, cpu_seconds(pid) - after - idle)}


def slice_rows(batching: bool) -> int:
    """Texts of one call of the model: a batch (serving/batching.config's max_batch_size, 32)
    with batching; without, a slice within --max_execution_tokens and half the budget of 12 x
    --max_body_bytes (12 texts at 4 MiB, 16 KiB a token)."""
    return 32 if batching else ModelWorkLimits().slices(
        {"text": np.array([b"a"] * 1000, object)}, budget_bytes=12 * MAX_BODY)[0][1]


def one_slice_seconds(port: int, rows: int) -> float:
    """Seconds the server takes for a request of one slice alone (`rows` texts on `embed`),
    the median of three."""
    body = json.dumps({"signature_name": "embed", "instances": ["a fine film " * 16] * rows})
    connection, times = http.client.HTTPConnection("127.0.0.1", port, timeout=60), []
    for _ in range(3):
        started = time.perf_counter()
        connection.request("POST", "/v1/models/kerasbert:predict", body)
        connection.getresponse().read()
        times.append(time.perf_counter() - started)
    return sorted(times)[1]


def abandoned_requests(server, rows: int) -> dict:
    """The server's CPU after a 504 (a big `embed` request past --rest_api_timeout_in_ms) and
    after a gRPC cancellation (CANCELLED_CALLS calls cancelled after CANCEL_AFTER s), against
    one slice's time."""
    name, data = big_requests()[0]
    cancel_round = cancelled_calls(server.grpc_port, time.sleep)

    def after_cancel():
        outcomes = collections.Counter(outcome for _, outcome in cancel_round())
        return ", ".join(f"{outcome}: {n}" for outcome, n in outcomes.items())
    pid = server.process.pid
    after_504, cancelled = cpu_after(pid, lambda: status_line(exchange(server.rest_port, data, 60.0))), \
        cpu_after(pid, after_cancel)
    return {"slice_rows": rows, "one_slice_s": one_slice_seconds(server.rest_port, rows),
            "after_504": {"request": name, **after_504},
            "after_cancel": {**cancelled, "cpu_s_per_call": cancelled["cpu_s"] / CANCELLED_CALLS}}


def both_kinds(server, args, seconds: float, expected: dict) -> dict:
    """The good REST and gRPC clients at once for `seconds`."""
    grpc_run = {}
    grpc_thread = threading.Thread(target=lambda: grpc_run.update(run_clients(
        args.grpc_clients, seconds, lambda: grpc_stub(server.grpc_port, own_connection=True), grpc_ask(expected),
        sentences_of, good="correct")))
    grpc_thread.start()
    rest_run = run_clients(args.clients, seconds, lambda: http.client.HTTPConnection(
        "127.0.0.1", server.rest_port, timeout=60), rest_ask(expected), sentences_of, good="correct")
    grpc_thread.join()
    return {"rest": rest_run, "grpc": grpc_run}


def under_attack(server, args, group: str, expected: dict, cores: set[int], base: str = "") -> dict:
    """The good clients for --seconds while a process pinned to `cores` runs one attack group."""
    pid = server.process.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # the peak RSS from here on
    idle_rss = proc_status(pid)["VmRSS"]
    context = multiprocessing.get_context("spawn")
    stop, ready, queue = context.Event(), context.Event(), context.Queue()
    attackers = context.Process(target=attack_forever, args=(server.rest_port, server.grpc_port, stop, queue,
                                                             (group,), cores, ready, base))
    attackers.start()
    if not ready.wait(300):
        raise RuntimeError("the attackers' process did not start within 300 s")
    time.sleep(1)  # the attack under way
    run = both_kinds(server, args, args.seconds, expected)
    stop.set()
    run["answers"] = queue.get(timeout=120)
    attackers.join(60)
    run["rss_growth_mib"] = (proc_status(pid)["VmHWM"] - idle_rss) / 1024
    print(f"   {group}: REST {run['rest']['outcomes']}, p99 {run['rest']['p99_ms']:.0f} ms, "
          f"RSS +{run['rss_growth_mib']:.0f} MiB", flush=True)
    return run


def serve_and_attack(base: str, args, groups, batching: bool, monitoring: str, config: str | None = None) -> dict:
    """One server (batching on or off; with `config`, the models of that --model_config_file):
    the good clients alone, then beside each attack group in turn, then the abandoned-request
    probes."""
    flags = [f"--max_body_bytes={MAX_BODY}", f"--monitoring_config_file={monitoring}",
             f"--rest_api_timeout_in_ms={TIMEOUT_MS}",
             f"--total_model_memory_limit_bytes={ADMIN_BUDGET_COPIES * estimate_ram_bytes(newest_version(base, True))}"]
    with LocalServer("kerasbert", None if config else base, extra_flags=flags + (BATCHING if batching else []),
                     config_file=config) as server:
        server.wait_for_version()
        pid = server.process.pid
        connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
        expected = {}
        for client in range(args.clients):
            for sentence in sentences_of(client):
                status, body = post_sentence(connection, sentence)
                assert status == 200, body
                expected[sentence] = json.loads(body)
        cores = sorted(os.sched_getaffinity(0))
        half = max(1, len(cores) // 2)  # the server's cores; the rest the good clients' and attackers' (one core: both)
        server_cores, other_cores = set(cores[:half]), set(cores[half:] or cores)
        pin_process(pid, server_cores)
        os.sched_setaffinity(0, other_cores)  # the good clients (threads started from here on inherit it)
        print(f"== batching {'on' if batching else 'off'}: {args.calm_seconds:.0f} s without attackers", flush=True)
        run = {"calm": both_kinds(server, args, args.calm_seconds, expected)}
        time.sleep(2)
        idle = proc_status(pid)
        run["metrics_before"] = metrics_of(server.rest_port)
        run["attacks"] = {group: under_attack(server, args, group, expected, other_cores, base) for group in groups}
        for attack in run["attacks"].values():  # README's "p99 at most 2x alone"
            attack["p99_over_alone"] = attack["rest"]["p99_ms"] / run["calm"]["rest"]["p99_ms"]
        time.sleep(5)  # connections closed, threads back
        end = proc_status(pid)
        run["abandoned"] = abandoned_requests(server, slice_rows(batching))
        run.update(metrics_after=metrics_of(server.rest_port), idle_rss_mib=idle["VmRSS"] / 1024,
                   idle_threads=idle["Threads"], end_threads=end["Threads"])
        run["cores"] = {"server": sorted(server_cores), "others": sorted(other_cores)}
        os.sched_setaffinity(0, server_cores | other_cores)
    return run


def serve_families(export_base: str, work: str, results: dict) -> str | None:
    """Copies the newest ner and squad exports beside the kerasbert one in `work`, measures the
    exported `entities` alone on one 1 MB text (results["entities_1mb"]), and writes a
    --model_config_file of the three; None if an export is missing."""
    if not all(newest_version(os.path.join(export_base, name)) for name in FAMILIES):
        return None
    for name in FAMILIES:
        copy_of_newest(os.path.join(export_base, name), os.path.join(work, name))
    measured = call_peak_bytes(os.path.join(work, "ner", "1"), "entities", {"text": [hostile_text(1.0)]})
    results["entities_1mb"] = {"peak_mib": measured["peak_bytes"] / 2**20, "seconds": measured["seconds"]}
    print(f"== entities alone on one 1 MB text (fresh process): peak +{results['entities_1mb']['peak_mib']:.0f} MiB, "
          f"{measured['seconds']:.1f} s", flush=True)
    config = os.path.join(work, "models.config")
    with open(config, "w") as f:
        f.write(model_config({name: os.path.join(work, name) for name in ("kerasbert", *FAMILIES)}))
    return config


def main(argv=None) -> int:
    parser = command_line("hostile", __doc__, 20.0, "Length of the run beside each attack group.")
    parser.add_argument("--calm_seconds", type=float, default=20.0, help="Length of the run without attackers.")
    parser.add_argument("--grpc_clients", type=int, default=4, help="Concurrent good gRPC clients, a connection each.")
    parser.add_argument("--attacks", default=",".join(ATTACK_GROUPS),
                        help=f"Which attacks run, comma-separated, of {', '.join(ATTACK_GROUPS)} (default: all).")
    parser.add_argument("--batching", nargs="+", default=["on", "off"], choices=["on", "off"],
                        help="Servers to attack, batching on and off (default: both, in turn).")
    parser.add_argument("--families_export_base", default="runs/demo-tasks/export",
                        help="Exports <base>/ner/<N> and <base>/squad/<N>, for big_texts (skipped without them).")
    args = parser.parse_args(argv)
    groups = tuple(group for group in args.attacks.split(",") if group)
    if not set(groups) <= set(ATTACK_GROUPS):
        parser.error(f"--attacks takes {', '.join(ATTACK_GROUPS)}. Received: {args.attacks!r}")
    os.makedirs(args.output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kerasbert-bench-hostile-") as work:
        base, monitoring = os.path.join(work, "kerasbert"), os.path.join(work, "monitoring.config")
        results = {"export": copy_of_newest(args.export_base, base), "max_body_bytes": MAX_BODY,
                   "attack_groups": list(groups), "modes": {}}
        with open(monitoring, "w") as f:
            f.write("prometheus_config { enable: true }")
        config = None
        if "big_texts" in groups:
            config = serve_families(args.families_export_base, work, results)
            if config is None:
                print(f"big_texts skipped: no ner and squad exports under {args.families_export_base} "
                      "(make demo-tasks)", flush=True)
                groups = tuple(group for group in groups if group != "big_texts")
                results["attack_groups"] = list(groups)
        for mode in args.batching:
            results["modes"][mode] = serve_and_attack(base, args, groups, mode == "on", monitoring, config)
            results["cores"] = results["modes"][mode].pop("cores")
    print(save_results(args.output_dir, results, "benchmarks.hostile", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
