"""Serving under faults: keep-alive clients against `python -m serving` while faults land.

    python -m benchmarks.faults --export_base saved_models/kerasbert [--seconds 60] [--clients 32]

The newest version under --export_base is copied into a scratch model folder and served
with batching on and `--model_config_file_poll_wait_seconds=1`. `--clients` REST clients
(keep-alive connections; retries with backoff on 503 and on a refused connection, as
`serving.client` does) send the `sentiment` signature one sentence at a time, and one
request in twenty is bad (malformed JSON, a wrong dtype, an unknown signature, in turn).
Meanwhile, one after another, with pauses of a share of --seconds between them:
    slow_copy       version 2 appears half-written for a sixth of --seconds, then completes
    delete_served   the served version's folder is deleted while requests are in flight
    corrupt         a version 3 whose saved_model.pb is garbage (removed again later)
    config_change   models.config gains a second model and a new version policy
    config_broken   models.config is rewritten with a syntax error
    kill            the server gets SIGKILL and is started again at once
The clients run until the last fault has passed and at least --seconds in all.
Counted: good requests sent, answered 200, answered otherwise, lost (no answer after the
retries), those inside the restart window apart; bad requests answered 4xx with a JSON
`error` body; the longest time without a 200. Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from benchmarks.results import render_markdown, save_results
from benchmarks.serving import SENTENCES, newest_version
from serving.process import free_port

TITLE = "Serving under faults"  # of results.md
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAD_BODIES = [('{"signature_name": "sentiment", "inputs": {"text": ["unclosed', "malformed JSON"),
              ('{"signature_name": "sentiment", "inputs": {"text": [1.5]}}', "wrong dtype"),
              ('{"signature_name": "no_such_signature", "inputs": {"text": ["a film"]}}', "unknown signature")]
RETRY_STATUSES = (503,)


def model_config(models: dict[str, str], policy: str = "") -> str:
    entries = "".join(f' config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow"'
                      f'{policy if name == "kerasbert" else ""} }}' for name, path in models.items())
    return f"model_config_list {{{entries} }}\n"


class Server:
    """`python -m serving` on loopback, started again on the same ports after a kill."""

    def __init__(self, config_file: str, log_path: str):
        self.rest_port, self.grpc_port = free_port(), free_port()
        self.command = [sys.executable, "-m", "serving", f"--port={self.grpc_port}",
                        f"--rest_api_port={self.rest_port}", f"--model_config_file={config_file}",
                        "--model_config_file_poll_wait_seconds=1", "--file_system_poll_wait_seconds=0.5",
                        "--load_retry_interval_micros=2000000", "--enable_batching",
                        f"--batching_parameters_file={os.path.join(ROOT, 'serving', 'batching.config')}"]
        self.log_path, self.process, self.starts = log_path, None, 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "a") as log:
            log.write(f"\n==== start {self.starts}\n")
            log.flush()
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                            env={**os.environ, "PYTHONPATH": ROOT})

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def serves(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}/v1/models/{model}", timeout=2) as r:
                return any(s["state"] == "AVAILABLE" for s in json.loads(r.read())["model_version_status"])
        except (OSError, ValueError, KeyError):
            return False

    def wait_until_serving(self, model: str = "kerasbert", timeout: float = 300) -> float:
        started = time.monotonic()
        while not self.serves(model):
            if self.process.poll() is not None or time.monotonic() - started > timeout:
                raise RuntimeError(f"the server did not serve {model}; see {self.log_path}")
            time.sleep(0.1)
        return time.monotonic() - started


class Tally:
    """What the clients saw, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.good = {"sent": 0, "ok": 0, "otherwise": 0, "lost": 0}
        self.bad = {"sent": 0, "4xx_with_error_body": 0, "no_answer": 0, "other": 0}
        self.failures: list[tuple[float, str]] = []  # (time, what) of good requests not answered 200
        self.bad_answers: list[str] = []
        self.ok_times: list[float] = []


def send(connection, port: int, body: str, retries: int = 3, backoff: float = 0.5):
    """(status or None, body, connection): retried on 503 and on connection errors."""
    for attempt in range(retries + 1):
        try:
            connection.request("POST", "/v1/models/kerasbert:predict", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            if response.status not in RETRY_STATUSES or attempt == retries:
                return response.status, answer, connection
        except OSError:  # refused, reset: the server is restarting
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if attempt == retries:
                return None, b"", connection
        time.sleep(backoff * 2 ** attempt)
    return None, b"", connection


def client(index: int, port: int, stop: threading.Event, tally: Tally, start: float) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    i = index
    while not stop.is_set():
        i += 1
        if i % 20 == 0:
            body, kind = BAD_BODIES[(i // 20) % len(BAD_BODIES)]
            status, answer, connection = send(connection, port, body)
            with tally.lock:
                tally.bad["sent"] += 1
                try:
                    has_error = status is not None and 400 <= status < 500 and "error" in json.loads(answer)
                except ValueError:
                    has_error = False
                kind_of_answer = "4xx_with_error_body" if has_error else "no_answer" if status is None else "other"
                tally.bad[kind_of_answer] += 1
                if kind_of_answer == "other" and len(tally.bad_answers) < 5:
                    tally.bad_answers.append(f"{kind}: {status} {answer[:120]!r}")
            continue
        body = json.dumps({"signature_name": "sentiment", "inputs": {"text": [SENTENCES[i % len(SENTENCES)]]}})
        status, answer, connection = send(connection, port, body)
        now = time.monotonic() - start
        with tally.lock:
            tally.good["sent"] += 1
            if status == 200:
                tally.good["ok"] += 1
                tally.ok_times.append(now)
            else:
                tally.good["otherwise" if status is not None else "lost"] += 1
                tally.failures.append((now, f"{status} {answer[:120]!r}" if status else "no answer"))


def copy_slowly(source: str, target: str, seconds: float) -> None:
    """Copies a version folder with its largest file written in pieces over `seconds`:
    saved_model.pb is there from the start, so a polling server sees a half-written version."""
    files = sorted((os.path.getsize(os.path.join(folder, name)), os.path.relpath(os.path.join(folder, name), source))
                   for folder, _, names in os.walk(source) for name in names)
    largest = files[-1][1]
    for _, relative in files[:-1]:
        os.makedirs(os.path.dirname(os.path.join(target, relative)), exist_ok=True)
        shutil.copy(os.path.join(source, relative), os.path.join(target, relative))
    os.makedirs(os.path.dirname(os.path.join(target, largest)), exist_ok=True)
    with open(os.path.join(source, largest), "rb") as f:
        data = f.read()
    pieces = 10
    with open(os.path.join(target, largest), "wb") as f:
        for k in range(pieces):
            f.write(data[k * len(data) // pieces:(k + 1) * len(data) // pieces])
            f.flush()
            time.sleep(seconds / pieces)


def run(export_base: str, seconds: float, clients: int, work: str) -> dict:
    source = newest_version(export_base)
    if source is None:
        raise SystemExit(f"{export_base}: no version to serve; run make demo or pipelines.export first")
    base, second = os.path.join(work, "kerasbert"), os.path.join(work, "second")
    shutil.copytree(source, os.path.join(base, "1"))
    shutil.copytree(source, os.path.join(second, "1"))
    config_file = os.path.join(work, "models.config")
    write_file(config_file, model_config({"kerasbert": base}))
    server = Server(config_file, os.path.join(work, "server.log"))
    server.start()
    load_seconds = server.wait_until_serving()
    print(f"== serving version 1 after {load_seconds:.1f} s; {clients} clients for {seconds:.0f} s", flush=True)

    tally, events, start, stop = Tally(), [], time.monotonic(), threading.Event()
    threads = [threading.Thread(target=client, args=(i, server.rest_port, stop, tally, start), daemon=True)
               for i in range(clients)]
    for thread in threads:
        thread.start()

    def fault(name: str, detail: str) -> None:
        events.append({"fault": name, "at_s": round(time.monotonic() - start, 2),
                       "server_up": server.process.poll() is None, "detail": detail})
        print(f"   {events[-1]['at_s']:6.1f} s  {name}: {detail}", flush=True)

    def pause(share: float) -> None:  # a share of --seconds with nothing new happening
        time.sleep(share * seconds)

    pause(0.05)
    fault("slow_copy", f"version 2 written over {seconds / 6:.0f} s, saved_model.pb first")
    copy_slowly(source, os.path.join(base, "2"), seconds / 6)
    events[-1]["new_version_served_after_s"] = round(server.wait_until_serving("kerasbert/versions/2"), 2)
    pause(0.05)
    fault("delete_served", "the folder of version 2, the one being served, removed")
    shutil.rmtree(os.path.join(base, "2"))
    pause(0.1)
    fault("corrupt", "version 3 with a garbage saved_model.pb")
    os.makedirs(os.path.join(base, "3"))
    write_file(os.path.join(base, "3", "saved_model.pb"), "garbage")
    pause(0.1)
    fault("config_change", "models.config: model 'second' added, kerasbert's policy latest 2")
    write_file(config_file, model_config({"kerasbert": base, "second": second},
                                         " model_version_policy { latest { num_versions: 2 } }"))
    events[-1]["second_model_served_after_s"] = round(server.wait_until_serving("second"), 2)
    pause(0.05)
    fault("config_broken", "models.config rewritten with a syntax error")
    write_file(config_file, "model_config_list { config {{ ")
    pause(0.05)
    fault("remove_corrupt", "version 3 removed and models.config repaired, so the server can restart")
    shutil.rmtree(os.path.join(base, "3"))
    write_file(config_file, model_config({"kerasbert": base, "second": second}))
    pause(0.05)
    fault("kill", "SIGKILL, then the same command started again")
    server.kill()
    restart_began = events[-1]["killed_at_s"] = round(time.monotonic() - start, 2)
    server.start()
    # The window ends at the new process's first answer: one the old process gave just
    # before its death (a client may count it a moment later) must not end it.
    started_again = time.monotonic() - start
    events[-1]["serving_again_after_s"] = round(server.wait_until_serving(), 2)
    time.sleep(max(seconds * 0.1, start + seconds - time.monotonic()))
    stop.set()
    for thread in threads:
        thread.join()
    up_at_end = server.process.poll() is None
    server.process.terminate()
    server.process.wait(30)

    first_ok_after = min((t for t in tally.ok_times if t > started_again), default=float("inf"))
    window = (restart_began, first_ok_after)
    outside = [f for f in tally.failures if not window[0] <= f[0] <= window[1] + 5]  # + retries in flight
    gaps = sorted(tally.ok_times)
    longest_gap = max((b - a for a, b in zip(gaps, gaps[1:])), default=0.0)
    return {"seconds": round(time.monotonic() - start, 1), "clients": clients, "events": events,
            "good_requests": tally.good, "bad_requests": tally.bad, "first_bad_answers": tally.bad_answers,
            "restart_window_s": round(window[1] - window[0], 2),
            "good_failed_or_lost_outside_restart": len(outside), "first_failures_outside": outside[:5],
            "good_failed_or_lost_in_restart": len(tally.failures) - len(outside),
            "longest_gap_without_200_s": round(longest_gap, 2), "server_up_at_end": up_at_end,
            "first_load_s": round(load_seconds, 2)}


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export_base", default="saved_models/kerasbert", help="Versions to serve (newest).")
    parser.add_argument("--seconds", type=float, default=60.0, help="Length of the client run.")
    parser.add_argument("--clients", type=int, default=32, help="Concurrent keep-alive REST clients.")
    parser.add_argument("--output_dir", default="runs/bench-faults", help="Where results.json/.md go.")
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kerasbert-faults-") as work:
        results = run(args.export_base, args.seconds, args.clients, work)
        shutil.copy(os.path.join(work, "server.log"), os.path.join(args.output_dir, "server.log"))
    save_results(args.output_dir, results, "benchmarks.faults", TITLE)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
