"""Good clients beside hostile ones: what attacks cost the clients that behave.

    python -m benchmarks.hostile --export_base saved_models/kerasbert [--seconds 60] [--clients 32]

The newest version under --export_base is copied to a scratch folder and served by
`python -m serving` with batching on (serving/batching.config) and --max_body_bytes=4 MiB.
`--clients` keep-alive REST clients send the `sentiment` signature, each its own
sentences, and check every answer against the one that sentence got alone before the
load began (label equal, probabilities within 1e-4): an answer carrying another
client's row fails the check. They run `--calm_seconds` alone, then `--seconds` while
a second process runs every attack of benchmarks.attacks in a loop: malformed framing
(negative, non-numeric and conflicting Content-Length, smuggled chunked bodies, bad
chunks, huge headers, lone surrogates, 5000-digit numbers), memory bombs (dense, nested
and object bodies near the limit, one 10x over it), 400 slow connections that send
headers and one byte, gRPC requests that declare huge tensors, use unknown names,
malformed dtypes, duplicate output aliases, or run past a 2 ms deadline; and (issue 53)
1,500 idle REST sockets and 1,500 idle gRPC sockets kept open (reopened as the server
closes them), predicts for model names that do not exist (metrics are on), and HTTP/2
rapid reset (50,000 HEADERS + RST_STREAM on one connection, again and again).
`--grpc_clients` good gRPC clients, on a connection each, run beside the REST ones.

Cores: with two or more, the server is pinned to the first half and the good clients and
the attackers' process to the rest (each thread of the server's, after start-up), so the
attackers take none of the server's CPU; the split is in the results. On one core they
share it, and the p99 ratio then counts the attackers' CPU too.

Reported: good requests answered correctly, REST and gRPC (goal: all), p99 under attack over
p99 calm (goal: at most 2), the server's peak RSS over its idle RSS (goal: at most 2 GiB; and
against 15 x --max_body_bytes), threads at the end against idle (goal: back to idle), metric
series before and after (goal: no growth from client-chosen names), and what each attack was
answered. Writes results.json and results.md. A short smoke run: --seconds 10 --calm_seconds 5.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import multiprocessing
import os
import re
import shutil
import socket
import sys
import threading
import time
import urllib.request

MAX_BODY = 4 * 1024 * 1024
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


# Issue 53's big-request bombs without batching and cancelled gRPC calls are to join here
# (another change): a group name below and its loop in attack_forever's `loops`.
ATTACK_GROUPS = ("framing", "bombs", "slow", "grpc", "idle_rest", "idle_grpc", "model_names", "rapid_reset")
IDLE_SOCKETS = 1500  # per port: more than the server's 1,024 connections


def attack_forever(rest_port: int, grpc_port: int, stop, results, groups=ATTACK_GROUPS, cores=None,
                   ready=None) -> None:
    """Runs the attacks of `groups` in a loop until `stop` is set, on `cores` (default: any);
    sets `ready` once its imports are done and the attacks start; puts {attack: {answer:
    count}} in `results`."""
    from benchmarks.attacks import (Target, closed_by_server, exchange, framing_attacks, idle_sockets,
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
             "model_names": (model_names_loop, ()), "rapid_reset": (rapid_reset_loop, ())}
    threads = [threading.Thread(target=loops[group][0], args=loops[group][1]) for group in groups]
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


def render_markdown(results: dict) -> str:
    calm, attacked = results["calm"], results["attacked"]
    correct = attacked["outcomes"].get("correct", 0)
    lines = ["# Serving under attack (sentiment signature, batching on)", "", f"Command: `{results['command']}`  ",
             f"Attacks: {', '.join(results['attack_groups'])}  ",
             f"Cores: server {results['cores']['server']}, good clients and attackers {results['cores']['others']}"
             + ("" if results['cores']['server'] != results['cores']['others'] else " (shared: one core)") + "  ",
             f"Machine: {results['machine']}  ", f"Model: {results['export']}", "",
             "| run | seconds | good requests | answered correctly | other outcomes | p50 ms | p99 ms |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for label, run in (("alone", calm), ("under attack", attacked)):
        others = ", ".join(f"{k}: {v}" for k, v in run["outcomes"].items() if k != "correct") or "none"
        lines.append(f"| {label} | {run['seconds']:.0f} | {run['sent']} | {run['outcomes'].get('correct', 0)} | "
                     f"{others} | {run['p50_ms']:.1f} | {run['p99_ms']:.1f} |")
    grpc_run = results["grpc_attacked"]
    lines += ["", f"- Good requests answered correctly under attack: {correct} of {attacked['sent']} REST, "
              f"{grpc_run['outcomes'].get('correct', 0)} of {grpc_run['sent']} gRPC "
              f"({', '.join(f'{k}: {v}' for k, v in grpc_run['outcomes'].items() if k != 'correct') or 'no other outcome'};"
              f" alone: {results['grpc_calm']['outcomes']}) (goal: all).",
              f"- p99 under attack / alone: {attacked['p99_ms'] / calm['p99_ms']:.2f} (goal: at most 2).",
              f"- Peak RSS over idle: {results['rss_growth_mib']:.1f} MiB = "
              f"{results['rss_growth_mib'] * 2**20 / MAX_BODY:.1f} x --max_body_bytes (goals: at most 2 GiB, and "
              f"at most 15 x --max_body_bytes); "
              f"idle RSS {results['idle_rss_mib']:.0f} MiB. Request data held at most, by budget "
              f"(the server's own accounting, since it started): "
              + ", ".join(f"{name} {mib:.1f} MiB" for name, mib in results["budget_peaks_mib"].items())
              + f"; all three together are capped at 14 x --max_body_bytes + 1 MiB = {14 * MAX_BODY / 2**20 + 1:.0f} MiB.",
              f"- Threads: {results['idle_threads']} idle, {results['end_threads']} after the attack "
              "(goal: back to idle).",
              f"- Metric series: {results['series_before']} before the attack, {results['series_after']} after; "
              f"model labels after: {', '.join(results['model_labels'])} (goal: only loaded models and "
              "`(unknown)`, whatever names clients send).", "", "| attack | answers (count) |", "|---|---|"]
    for name, answers in sorted(results["attacks"].items()):
        lines.append(f"| {name} | {', '.join(f'{a}: {n}' for a, n in sorted(answers.items()))} |")
    return "\n".join(lines) + "\n"


def both_kinds(server, args, seconds: float, expected: dict) -> tuple[dict, dict]:
    """The good REST and gRPC clients at once for `seconds`: (REST run, gRPC run)."""
    grpc_run = {}
    grpc_thread = threading.Thread(target=lambda: grpc_run.update(
        good_grpc_clients(server.grpc_port, args.grpc_clients, seconds, expected)))
    grpc_thread.start()
    rest_run = {"seconds": seconds, **good_clients(server.rest_port, args.clients, seconds, expected)}
    grpc_thread.join()
    return rest_run, grpc_run


def main(argv=None) -> int:
    from benchmarks.results import save_results
    from benchmarks.serving import private_copy_of_newest
    from serving.process import LocalServer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export_base", default="saved_models/kerasbert", help="Exported model base path.")
    parser.add_argument("--output_dir", default="runs/bench-hostile", help="Results folder.")
    parser.add_argument("--seconds", type=float, default=60.0, help="Length of the run under attack.")
    parser.add_argument("--calm_seconds", type=float, default=20.0, help="Length of the run without attackers.")
    parser.add_argument("--clients", type=int, default=32, help="Concurrent good REST clients.")
    parser.add_argument("--grpc_clients", type=int, default=4, help="Concurrent good gRPC clients, a connection each.")
    parser.add_argument("--attacks", default=",".join(ATTACK_GROUPS),
                        help=f"Which attacks run, comma-separated, of {', '.join(ATTACK_GROUPS)} (default: all).")
    args = parser.parse_args(argv)
    groups = tuple(group for group in args.attacks.split(",") if group)
    if not set(groups) <= set(ATTACK_GROUPS):
        parser.error(f"--attacks takes {', '.join(ATTACK_GROUPS)}. Received: {args.attacks!r}")
    copy = private_copy_of_newest(args.export_base, "kerasbert-bench-hostile-")
    if copy is None:
        return 2
    base, export = copy
    os.makedirs(args.output_dir, exist_ok=True)
    results = {"export": export, "max_body_bytes": MAX_BODY,
               "attack_groups": list(groups)}
    monitoring = base + "-monitoring.config"
    with open(monitoring, "w") as f:
        f.write("prometheus_config { enable: true }")
    flags = ["--enable_batching", "--batching_parameters_file=serving/batching.config", f"--max_body_bytes={MAX_BODY}",
             f"--monitoring_config_file={monitoring}"]
    try:
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
            results["cores"] = {"server": sorted(server_cores), "others": sorted(other_cores)}
            metrics_url = f"http://127.0.0.1:{server.rest_port}/monitoring/prometheus/metrics"
            print(f"== {len(expected)} reference answers; {args.calm_seconds:.0f} s without attackers", flush=True)
            results["calm"], results["grpc_calm"] = both_kinds(server, args, args.calm_seconds, expected)
            time.sleep(2)
            idle = proc_status(pid)
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")  # the peak RSS from here on
            print(f"== {args.seconds:.0f} s under attack", flush=True)
            context = multiprocessing.get_context("spawn")
            stop, ready, queue = context.Event(), context.Event(), context.Queue()
            with urllib.request.urlopen(metrics_url) as page:
                results["series_before"] = series_count(page.read().decode())
            attackers = context.Process(target=attack_forever,
                                        args=(server.rest_port, server.grpc_port, stop, queue, groups, other_cores,
                                              ready))
            attackers.start()
            if not ready.wait(300):
                raise RuntimeError("the attackers' process did not start within 300 s")
            time.sleep(1)  # the attacks under way
            results["attacked"], results["grpc_attacked"] = both_kinds(server, args, args.seconds, expected)
            stop.set()
            results["attacks"] = queue.get(timeout=120)
            attackers.join(60)
            time.sleep(5)  # connections closed, threads back
            end = proc_status(pid)
            with urllib.request.urlopen(metrics_url) as page:
                text = page.read().decode()
            results["budget_peaks_mib"], results["series_after"] = budget_peaks(text), series_count(text)
            results["model_labels"] = model_labels(text)
            results.update(idle_rss_mib=idle["VmRSS"] / 1024, rss_growth_mib=(end["VmHWM"] - idle["VmRSS"]) / 1024,
                           idle_threads=idle["Threads"], end_threads=end["Threads"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
        os.remove(monitoring)
    save_results(args.output_dir, results, "benchmarks.hostile", render_markdown)
    print(render_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
