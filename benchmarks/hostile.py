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
headers and one byte, and gRPC requests that declare huge tensors, use unknown names,
malformed dtypes, duplicate output aliases, or run past a 2 ms deadline.

Reported: good requests answered correctly (goal: all), p99 under attack over p99 calm
(goal: at most 2), the server's peak RSS over its idle RSS against 15 x --max_body_bytes,
threads at the end against idle (goal: back to idle), and what each attack was answered.
Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import multiprocessing
import os
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


ATTACK_GROUPS = ("framing", "bombs", "slow", "grpc")


def attack_forever(rest_port: int, grpc_port: int, stop, results, groups=ATTACK_GROUPS) -> None:
    """Runs the attacks of `groups` in a loop until `stop` is set; puts {attack: {answer: count}}
    in `results`."""
    from benchmarks.attacks import Target, exchange, framing_attacks, memory_bombs, statuses

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

    def grpc_loop():
        grpc_run = _grpc_attacks(grpc_port)
        local = collections.Counter()
        while not stop.is_set():
            grpc_run(local)
        with lock:
            tally.update(local)

    bombs = [(name, target.head() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
             for name, body in memory_bombs(target, MAX_BODY)]
    loops = {"framing": (raw_loop, (framing_attacks(target), 0.5)), "bombs": (raw_loop, (bombs, 1.0)),
             "slow": (slow_loop, ()), "grpc": (grpc_loop, ())}
    threads = [threading.Thread(target=loops[group][0], args=loops[group][1]) for group in groups]
    for thread in threads:
        thread.start()
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


def render_markdown(results: dict) -> str:
    calm, attacked = results["calm"], results["attacked"]
    correct = attacked["outcomes"].get("correct", 0)
    lines = ["# Serving under attack (sentiment signature, batching on)", "", f"Command: `{results['command']}`  ",
             f"Attacks: {', '.join(results['attack_groups'])}  ",
             f"Machine: {results['machine']}  ", f"Model: {results['export']}", "",
             "| run | seconds | good requests | answered correctly | other outcomes | p50 ms | p99 ms |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for label, run in (("alone", calm), ("under attack", attacked)):
        others = ", ".join(f"{k}: {v}" for k, v in run["outcomes"].items() if k != "correct") or "none"
        lines.append(f"| {label} | {run['seconds']:.0f} | {run['sent']} | {run['outcomes'].get('correct', 0)} | "
                     f"{others} | {run['p50_ms']:.1f} | {run['p99_ms']:.1f} |")
    lines += ["", f"- Good requests answered correctly under attack: {correct} of {attacked['sent']} (goal: all).",
              f"- p99 under attack / alone: {attacked['p99_ms'] / calm['p99_ms']:.2f} (goal: at most 2).",
              f"- Peak RSS over idle: {results['rss_growth_mib']:.1f} MiB = "
              f"{results['rss_growth_mib'] * 2**20 / MAX_BODY:.1f} x --max_body_bytes (goal: at most 15); "
              f"idle RSS {results['idle_rss_mib']:.0f} MiB. Request data held at most, by budget "
              f"(the server's own accounting, since it started): "
              + ", ".join(f"{name} {mib:.1f} MiB" for name, mib in results["budget_peaks_mib"].items())
              + f"; all three together are capped at 14 x --max_body_bytes + 1 MiB = {14 * MAX_BODY / 2**20 + 1:.0f} MiB.",
              f"- Threads: {results['idle_threads']} idle, {results['end_threads']} after the attack "
              "(goal: back to idle).", "", "| attack | answers (count) |", "|---|---|"]
    for name, answers in sorted(results["attacks"].items()):
        lines.append(f"| {name} | {', '.join(f'{a}: {n}' for a, n in sorted(answers.items()))} |")
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--clients", type=int, default=32, help="Concurrent good clients.")
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
            print(f"== {len(expected)} reference answers; {args.calm_seconds:.0f} s without attackers", flush=True)
            results["calm"] = {"seconds": args.calm_seconds,
                               **good_clients(server.rest_port, args.clients, args.calm_seconds, expected)}
            time.sleep(2)
            idle = proc_status(pid)
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")  # the peak RSS from here on
            print(f"== {args.seconds:.0f} s under attack", flush=True)
            context = multiprocessing.get_context("spawn")
            stop, queue = context.Event(), context.Queue()
            attackers = context.Process(target=attack_forever,
                                        args=(server.rest_port, server.grpc_port, stop, queue, groups))
            attackers.start()
            time.sleep(3)  # the attackers' process imports TensorFlow first
            results["attacked"] = {"seconds": args.seconds,
                                   **good_clients(server.rest_port, args.clients, args.seconds, expected)}
            stop.set()
            results["attacks"] = queue.get(timeout=120)
            attackers.join(60)
            time.sleep(5)  # connections closed, threads back
            end = proc_status(pid)
            with urllib.request.urlopen(f"http://127.0.0.1:{server.rest_port}/monitoring/prometheus/metrics") as page:
                results["budget_peaks_mib"] = budget_peaks(page.read().decode())
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
