"""Good clients beside hostile ones: what attacks cost the clients that behave.

    python -m benchmarks.hostile --export_base saved_models/kerasbert [--seconds 20] [--batching on,off]

The newest version under --export_base is copied to a scratch folder and served by
`python -m serving` with --max_body_bytes=4 MiB and --rest_api_timeout_in_ms=10000, with
batching (serving/batching.config) and without. `--clients` keep-alive REST clients send the
`sentiment` signature, each its own sentences, and check every answer against the one that
sentence got alone before the load began (label equal, probabilities within 1e-4): an answer
carrying another client's row fails the check; `--grpc_clients` good gRPC clients, on a
connection each, run beside them. They run `--calm_seconds` alone, then `--seconds` beside
each attack group in turn, run in a loop by a second process (benchmarks.attacks): malformed
framing (negative, non-numeric and conflicting Content-Length, smuggled chunked bodies, bad
chunks, huge headers, lone surrogates, 5000-digit numbers), memory bombs (dense, nested and
object bodies near the limit, one 10x over it), 400 slow connections that send headers and
one byte, gRPC requests that declare huge tensors, use unknown names, malformed dtypes,
duplicate output aliases, or run past a 2 ms deadline; and (issue 53) 1,500 idle REST and
1,500 idle gRPC sockets kept open, predicts for model names that do not exist (metrics are
on), HTTP/2 rapid reset (50,000 HEADERS + RST_STREAM on one connection, again and again),
big-request bombs (15,000 texts, [800, 512] token ids, 100,000 one-character texts; two at
once) and 8 gRPC calls of 2,000 sentences cancelled by their client after 0.5 s.

Cores: with two or more, the server is pinned to the first half and the good clients and
the attackers' process to the rest (each thread of the server's, after start-up), so the
attackers take none of the server's CPU; the split is in the results. On one core they
share it, and the p99 ratio then counts the attackers' CPU too.

Reported per attack group, batching on and off: good requests answered correctly, REST and
gRPC (goal: all), p99 beside the attack over p99 alone (goal: at most 2), the server's peak
RSS over its RSS before the attack (goal: at most 2 GiB); then the CPU-seconds the server
spends after a 504 and after a gRPC cancellation, with no other load, against one slice's
time alone (goal: under it); threads at the end against idle, metric series before and
after, request data held by budget. Writes results.json and results.md. A short smoke run:
--seconds 5 --calm_seconds 5 --attacks framing,big_requests --batching off.
"""

from __future__ import annotations

import collections
import http.client
import json
import multiprocessing
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request

TITLE = "Serving under attack (sentiment signature; batching on and off)"  # of results.md
MAX_BODY = 4 * 1024 * 1024
TIMEOUT_MS = 10_000  # --rest_api_timeout_in_ms: a big request's 504 comes within the run
ADJECTIVES = ["gripping", "dull", "moving", "clumsy", "tender", "bloated", "witty", "tedious"]


def sentences_of(client: int, count: int = 6) -> list[str]:
    """Sentences no other client sends."""
    return [f"a {ADJECTIVES[(client + i) % len(ADJECTIVES)]} film , number {client * 100 + i} of the festival ."
            for i in range(count)]


def predict(connection: http.client.HTTPConnection, sentence: str) -> tuple[int, dict]:
    connection.request("POST", "/v1/models/kerasbert:predict",
                       json.dumps({"signature_name": "sentiment", "instances": [sentence]}))
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def same_answer(got: dict, expected: dict) -> bool:
    (a,), (b,) = got["predictions"], expected["predictions"]
    return a["label"] == b["label"] and all(abs(x - y) <= 1e-4 for x, y in zip(a["probabilities"],
                                                                               b["probabilities"]))


def good_clients(port: int, clients: int, seconds: float, expected: dict) -> dict:
    """`clients` threads on keep-alive connections for `seconds`; every answer checked."""
    tally, latencies, lock = collections.Counter(), [], threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(index):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        own, i = sentences_of(index), 0
        while time.perf_counter() < stop_at:
            sentence = own[i % len(own)]
            i += 1
            started = time.perf_counter()
            try:
                status, answer = predict(connection, sentence)
                outcome = ("correct" if same_answer(answer, expected[sentence]) else "wrong") if status == 200 \
                    else f"status {status}"
            except (OSError, http.client.HTTPException, ValueError) as error:
                outcome = f"failed: {type(error).__name__}"
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            with lock:
                tally[outcome] += 1
                if outcome == "correct":
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    return {"sent": sum(tally.values()), "outcomes": dict(tally),
            "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else float("nan"),
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan")}


def good_grpc_clients(port: int, clients: int, seconds: float, expected: dict) -> dict:
    """`clients` threads, each on a gRPC connection of its own, for `seconds`; every answer's
    label checked against the one its sentence got alone."""
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    from benchmarks.attacks import predict_request

    tally, lock = collections.Counter(), threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(index):
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        own, i = sentences_of(index), 0
        while time.perf_counter() < stop_at:
            sentence = own[i % len(own)]
            i += 1
            request = predict_request("kerasbert", "sentiment", text=tf.make_tensor_proto(np.array([sentence], object)))
            try:
                label = stub.Predict(request, timeout=30).outputs["label"].int64_val[0]
                outcome = "correct" if label == expected[sentence]["predictions"][0]["label"] else "wrong"
            except grpc.RpcError as error:
                outcome = error.code().name
            with lock:
                tally[outcome] += 1
        channel.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"sent": sum(tally.values()), "outcomes": dict(tally)}


def split_cores() -> tuple[set[int], set[int]]:
    """(the server's cores, the clients' and attackers' cores); both all cores on one."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set(cores)
    half = len(cores) // 2
    return set(cores[:half]), set(cores[half:])


def pin_process(pid: int, cores: set[int]) -> None:
    """Every thread of `pid` on `cores` (sched_setaffinity binds one thread at a time)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except OSError:  # a thread that has ended meanwhile
            pass


# --- The attackers' process -----------------------------------------------------------------


def _grpc_attacks(grpc_port: int):
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    from benchmarks.attacks import declared, predict_request

    def request(**inputs):
        return predict_request("kerasbert", "sentiment", **inputs)

    text = tf.make_tensor_proto(["a film"])
    duplicate = request(text=text)
    duplicate.output_filter.extend(["label", "label"])
    attacks = [("grpc: DT_STRING [20000000]", request(text=declared(types_pb2.DT_STRING, [20_000_000],
                                                                     string_val=[b"a"])), 30),
               ("grpc: unknown key, [500000000] floats", request(nope=declared(types_pb2.DT_FLOAT, [500_000_000])), 30),
               ("grpc: dtype 999", request(text=declared(999, [1])), 30),
               ("grpc: duplicate output alias", duplicate, 30),
               ("grpc: 32 sentences, 2 ms deadline",
                request(text=tf.make_tensor_proto(np.array(["a long and winding film review"] * 32, object))), 0.002)]
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{grpc_port}"))

    def run(tally):
        for name, message, timeout in attacks:
            try:
                stub.Predict(message, timeout=timeout)
                tally[(name, "OK")] += 1
            except grpc.RpcError as error:
                tally[(name, error.code().name)] += 1
    return run


ATTACK_GROUPS = ("framing", "bombs", "slow", "grpc", "idle_rest", "idle_grpc", "model_names", "rapid_reset",
                 "big_requests", "grpc_cancel")
IDLE_SOCKETS = 1500  # per port: more than the server's 1,024 connections
CANCELLED_CALLS = 8  # gRPC calls at once, each cancelled by its client after CANCEL_AFTER seconds
CANCEL_AFTER = 0.5


def cancelled_grpc_calls(grpc_port: int):
    """Issue 53: 8 gRPC calls of 2,000 sentences each, cancelled by their client after 0.5 s.
    Returns a function that makes one round and counts how each call ended in a tally."""
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    from benchmarks.attacks import predict_request

    request = predict_request("kerasbert", "sentiment", text=tf.make_tensor_proto(
        np.array(["a long and winding film review of many words"] * 2000, object)))
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{grpc_port}"))

    def round_(tally, stop):
        calls = [stub.Predict.future(request, timeout=60) for _ in range(CANCELLED_CALLS)]
        stop.wait(CANCEL_AFTER)
        for call in calls:
            call.cancel()
        for call in calls:
            try:
                call.result()
                outcome = "OK"
            except grpc.FutureCancelledError:
                outcome = "cancelled by the client"
            except grpc.RpcError as error:
                outcome = error.code().name
            tally[("gRPC: 8 calls of 2,000 sentences cancelled after 0.5 s", outcome)] += 1
    return round_


def attack_forever(rest_port: int, grpc_port: int, stop, results, groups=ATTACK_GROUPS, cores=None,
                   ready=None) -> None:
    """Runs the attacks of `groups` in a loop until `stop` is set, on `cores` (default: any);
    sets `ready` once its imports are done and the attacks start; puts {attack: {answer:
    count}} in `results`."""
    from benchmarks.attacks import (Target, big_requests, closed_by_server, exchange, framing_attacks, idle_sockets,
                                    memory_bombs, rapid_reset, statuses)

    if cores:
        os.sched_setaffinity(0, cores)  # before any thread starts: they inherit it

    target = Target("kerasbert", "sentiment", "text", '"a fine film"')
    tally, lock = collections.Counter(), threading.Lock()

    def record(name, received):
        codes = statuses(received)
        with lock:
            tally[(name, ",".join(map(str, codes)) or "no answer")] += 1

    def raw_loop(attacks, quiet):
        while not stop.is_set():
            for name, data in attacks:
                record(name, exchange(rest_port, data, quiet))

    def slow_loop():
        held = []
        while not stop.is_set():
            while len(held) < 400:
                try:
                    sock = socket.create_connection(("127.0.0.1", rest_port))
                    sock.sendall(target.head() + b"Content-Length: 100\r\n\r\n{")
                    held.append(sock)
                except OSError:
                    break
            time.sleep(1)
            alive = []
            for sock in held:  # the server answers 408 and closes once the request's deadline passes
                sock.setblocking(False)
                try:
                    if sock.recv(4096) == b"":
                        raise ConnectionResetError
                    sock.close()
                    with lock:
                        tally[("slow client (headers and one byte)", "answered and closed")] += 1
                except BlockingIOError:
                    alive.append(sock)
                except OSError:
                    sock.close()
            held = alive
        for sock in held:
            sock.close()

    grpc_run = _grpc_attacks(grpc_port) if "grpc" in groups else None  # imports TensorFlow: before `ready`
    cancel_round = cancelled_grpc_calls(grpc_port) if "grpc_cancel" in groups else None

    def grpc_cancel_loop():
        local = collections.Counter()
        while not stop.is_set():
            cancel_round(local, stop)
        with lock:
            tally.update(local)

    def grpc_loop():
        local = collections.Counter()
        while not stop.is_set():
            grpc_run(local)
        with lock:
            tally.update(local)

    def idle_loop(name, port):
        """IDLE_SOCKETS connections that send nothing, reopened as the server closes them."""
        held = []
        while not stop.is_set():
            opened = idle_sockets(port, IDLE_SOCKETS - len(held), timeout=2)
            alive = []
            for sock in held:
                if closed_by_server(sock):
                    sock.close()
                else:
                    alive.append(sock)
            with lock:
                tally[(name, "opened")] += len(opened)
                tally[(name, "closed by the server")] += len(held) - len(alive)
            held = alive + opened
            stop.wait(1)
        for sock in held:
            sock.close()

    def model_names_loop():
        """Predicts for names no server has: each must cost no metric series."""
        import random
        while not stop.is_set():
            name = "".join(random.choices("abcdefghijklmnopqrstuvwxyz", k=random.choice([8, 64, 4000])))
            head = f"POST /v1/models/{name}:predict HTTP/1.1\r\nHost: x\r\n".encode()
            record("predict for a model that does not exist", exchange(
                rest_port, head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(good_body) + good_body,
                0.5))

    def rapid_reset_loop():
        while not stop.is_set():
            flood = rapid_reset(grpc_port, 50_000)
            with lock:
                tally[("HTTP/2 rapid reset, 50,000 streams a round", "connection closed by the server"
                       if flood["closed_by_server"] else "connection kept")] += 1
            stop.wait(1)

    good_body = target.body()
    bombs = [(name, target.head() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
             for name, body in memory_bombs(target, MAX_BODY)]
    loops = {"framing": (raw_loop, (framing_attacks(target), 0.5)), "bombs": (raw_loop, (bombs, 1.0)),
             "slow": (slow_loop, ()), "grpc": (grpc_loop, ()),
             "idle_rest": (idle_loop, ("idle REST sockets (1,500 kept open)", rest_port)),
             "idle_grpc": (idle_loop, ("idle gRPC sockets (1,500 kept open)", grpc_port)),
             "model_names": (model_names_loop, ()), "rapid_reset": (rapid_reset_loop, ()),
             "big_requests": (raw_loop, (big_requests(), 40.0)), "grpc_cancel": (grpc_cancel_loop, ())}
    # Two big-request loops at once: requests that overlap, as the four did.
    threads = [threading.Thread(target=loops[group][0], args=loops[group][1])
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
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "VmHWM", "Threads"):
                values[key] = int(value.split()[0])
    return values


def budget_peaks(page: str) -> dict[str, float]:
    """The most request data each budget held (MiB), from the server's metrics page."""
    peaks = {}
    for line in page.splitlines():
        if line.startswith(":kerasbert:serving:memory_budget_bytes{") and 'kind="peak"' in line:
            name = line.split('budget="')[1].split('"')[0]
            peaks[name] = float(line.rsplit(" ", 1)[1]) / 2**20
    return peaks


def series_count(page: str) -> int:
    """Samples on a Prometheus text page."""
    return sum(1 for line in page.splitlines() if line and not line.startswith("#"))


def model_labels(page: str) -> list[str]:
    """The model names that label a Prometheus text page's samples."""
    return sorted(set(re.findall(r'model(?:_name)?="([^"]*)"', page)))


def cpu_after(pid: int, start, settle: float = 3.0) -> dict:
    """`start()` sends one abandoned request and returns once the client has its answer (a
    504 or a 400) or has cancelled it; then the server's CPU-seconds over the next `settle`
    seconds, less what it spends idle over as long: the work it did for nobody."""
    from benchmarks.serving import cpu_seconds

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
    import numpy as np

    from serving.session import ModelWorkLimits

    return 32 if batching else ModelWorkLimits().slice_rows({"text": np.array([b"a"], object)}, 12 * MAX_BODY)


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
    from benchmarks.attacks import big_requests, exchange, statuses

    name, data = big_requests()[0]
    cancel_round = cancelled_grpc_calls(server.grpc_port)

    def after_504():
        return ",".join(map(str, statuses(exchange(server.rest_port, data, 60.0)))) or "no answer"

    def after_cancel():
        tally = collections.Counter()
        cancel_round(tally, threading.Event())
        return ", ".join(f"{outcome}: {n}" for (_, outcome), n in tally.items())
    pid = server.process.pid
    cancelled = cpu_after(pid, after_cancel)
    return {"slice_rows": rows, "one_slice_s": one_slice_seconds(server.rest_port, rows),
            "after_504": {"request": name, **cpu_after(pid, after_504)},
            "after_cancel": {**cancelled, "cpu_s_per_call": cancelled["cpu_s"] / CANCELLED_CALLS}}


def both_kinds(server, args, seconds: float, expected: dict) -> dict:
    """The good REST and gRPC clients at once for `seconds`."""
    grpc_run = {}
    grpc_thread = threading.Thread(target=lambda: grpc_run.update(
        good_grpc_clients(server.grpc_port, args.grpc_clients, seconds, expected)))
    grpc_thread.start()
    rest_run = {"seconds": seconds, **good_clients(server.rest_port, args.clients, seconds, expected)}
    grpc_thread.join()
    return {"rest": rest_run, "grpc": grpc_run}


def under_attack(server, args, group: str, expected: dict, cores: set[int]) -> dict:
    """The good clients for --seconds while a process pinned to `cores` runs one attack group."""
    pid = server.process.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # the peak RSS from here on
    idle_rss = proc_status(pid)["VmRSS"]
    context = multiprocessing.get_context("spawn")
    stop, ready, queue = context.Event(), context.Event(), context.Queue()
    attackers = context.Process(target=attack_forever, args=(server.rest_port, server.grpc_port, stop, queue,
                                                             (group,), cores, ready))
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


def serve_and_attack(base: str, args, groups, batching: bool, monitoring: str) -> dict:
    """One server (batching on or off): the good clients alone, then beside each attack group
    in turn, then the abandoned-request probes."""
    from serving.process import LocalServer

    flags = [f"--max_body_bytes={MAX_BODY}", f"--monitoring_config_file={monitoring}",
             f"--rest_api_timeout_in_ms={TIMEOUT_MS}"]
    if batching:
        flags += ["--enable_batching", "--batching_parameters_file=serving/batching.config"]
    with LocalServer("kerasbert", base, extra_flags=flags) as server:
        server.wait_for_version()
        pid = server.process.pid
        connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
        expected = {}
        for client in range(args.clients):
            for sentence in sentences_of(client):
                status, expected[sentence] = predict(connection, sentence)
                assert status == 200, expected[sentence]
        server_cores, other_cores = split_cores()
        pin_process(pid, server_cores)
        os.sched_setaffinity(0, other_cores)  # the good clients (threads started from here on inherit it)
        metrics_url = f"http://127.0.0.1:{server.rest_port}/monitoring/prometheus/metrics"
        print(f"== batching {'on' if batching else 'off'}: {args.calm_seconds:.0f} s without attackers", flush=True)
        run = {"calm": both_kinds(server, args, args.calm_seconds, expected)}
        time.sleep(2)
        idle = proc_status(pid)
        with urllib.request.urlopen(metrics_url) as page:
            run["series_before"] = series_count(page.read().decode())
        run["attacks"] = {group: under_attack(server, args, group, expected, other_cores) for group in groups}
        for attack in run["attacks"].values():  # README's "p99 at most 2x alone"
            attack["p99_over_alone"] = attack["rest"]["p99_ms"] / run["calm"]["rest"]["p99_ms"]
        time.sleep(5)  # connections closed, threads back
        end = proc_status(pid)
        run["abandoned"] = abandoned_requests(server, slice_rows(batching))
        with urllib.request.urlopen(metrics_url) as page:
            text = page.read().decode()
        run.update(budget_peaks_mib=budget_peaks(text), series_after=series_count(text),
                   model_labels=model_labels(text), idle_rss_mib=idle["VmRSS"] / 1024,
                   idle_threads=idle["Threads"], end_threads=end["Threads"])
        run["cores"] = {"server": sorted(server_cores), "others": sorted(other_cores)}
        os.sched_setaffinity(0, server_cores | other_cores)
    return run


def main(argv=None) -> int:
    from benchmarks.results import save_results
    from benchmarks.serving import command_line, copy_of_newest

    parser = command_line("hostile", __doc__, 20.0, "Length of the run beside each attack group.")
    parser.add_argument("--calm_seconds", type=float, default=20.0, help="Length of the run without attackers.")
    parser.add_argument("--grpc_clients", type=int, default=4, help="Concurrent good gRPC clients, a connection each.")
    parser.add_argument("--attacks", default=",".join(ATTACK_GROUPS),
                        help=f"Which attacks run, comma-separated, of {', '.join(ATTACK_GROUPS)} (default: all).")
    parser.add_argument("--batching", default="on,off", help="Servers to attack: on, off or on,off (default).")
    args = parser.parse_args(argv)
    groups = tuple(group for group in args.attacks.split(",") if group)
    if not set(groups) <= set(ATTACK_GROUPS):
        parser.error(f"--attacks takes {', '.join(ATTACK_GROUPS)}. Received: {args.attacks!r}")
    modes = [mode for mode in args.batching.split(",") if mode]
    if not modes or not set(modes) <= {"on", "off"}:
        parser.error(f"--batching takes on, off or on,off. Received: {args.batching!r}")
    base = tempfile.mkdtemp(prefix="kerasbert-bench-hostile-")
    export = copy_of_newest(args.export_base, base)
    os.makedirs(args.output_dir, exist_ok=True)
    results = {"export": export, "max_body_bytes": MAX_BODY, "attack_groups": list(groups), "modes": {}}
    monitoring = base + "-monitoring.config"
    with open(monitoring, "w") as f:
        f.write("prometheus_config { enable: true }")
    try:
        for mode in modes:
            results["modes"][mode] = serve_and_attack(base, args, groups, mode == "on", monitoring)
            results["cores"] = results["modes"][mode].pop("cores")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        os.remove(monitoring)
    print(save_results(args.output_dir, results, "benchmarks.hostile", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
