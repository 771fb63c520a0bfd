"""Serving under faults: keep-alive REST clients (one request in twenty bad) against `python -m
serving` with batching while versions are half-copied, deleted and corrupted, models.config
changes and breaks, and the server is SIGKILLed and started again; docs/benchmarks.md tells
what is counted. Writes results.json and results.md.

    python -m benchmarks.faults --export_base saved_models/kerasbert [--seconds 60] [--clients 32]
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.results import save_results
from benchmarks.serving import BATCHING, SENTENCES, command_line, copy_of_newest, model_config, run_clients
from serving.process import LocalServer

TITLE = "Serving under faults"  # of results.md
BAD_BODIES = [('{"signature_name": "sentiment", "inputs": {"text": ["unclosed', "malformed JSON"),
              ('{"signature_name": "sentiment", "inputs": {"text": [1.5]}}', "wrong dtype"),
              ('{"signature_name": "no_such_signature", "inputs": {"text": ["a film"]}}', "unknown signature")]


def seconds_until_served(server: LocalServer, version: int | None = None, model: str | None = None) -> float:
    started = time.monotonic()
    server.wait_for_version(version, timeout=300, model=model)
    return round(time.monotonic() - started, 2)


def send(connection: http.client.HTTPConnection, body: str, retries: int = 3, backoff: float = 0.5):
    """(status or None, body): retried on 503 and on connection errors, as `serving.client` does."""
    for attempt in range(retries + 1):
        time.sleep(backoff * 2 ** (attempt - 1) if attempt else 0)
        try:
            connection.request("POST", "/v1/models/kerasbert:predict", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            status, answer = response.status, response.read()
            if status != 503:
                break
        except OSError:  # refused, reset: the server is restarting (the next request reconnects)
            connection.close()
            status, answer = None, b""
    return status, answer


def requests_of(client: int) -> list[str]:
    """A client's request bodies, sent in turn: one in twenty bad (BAD_BODIES in turn), the rest good."""
    return [BAD_BODIES[(i // 20) % len(BAD_BODIES)][0] if i % 20 == 0 else
            json.dumps({"signature_name": "sentiment", "inputs": {"text": [SENTENCES[i % len(SENTENCES)]]}})
            for i in range(client + 1, client + 61)]


def asker(start: float, seen: dict):
    """`ask` of `run_clients`: a good request's outcome is "ok" (a 200), "otherwise" or "lost" (no
    answer); a bad one's "bad: " and "4xx_with_error_body", "no_answer" or "other". `seen` keeps
    when the 200s came, the failures, and the first other answers to bad requests."""
    kinds = dict(BAD_BODIES)

    def ask(connection, body: str) -> str:
        status, answer = send(connection, body)
        now = time.monotonic() - start
        if body in kinds:
            try:
                has_error = status is not None and 400 <= status < 500 and "error" in json.loads(answer)
            except ValueError:
                has_error = False
            outcome = "4xx_with_error_body" if has_error else "no_answer" if status is None else "other"
            if outcome == "other" and len(seen["bad_answers"]) < 5:
                seen["bad_answers"].append(f"{kinds[body]}: {status} {answer[:120]!r}")
            return "bad: " + outcome
        if status == 200:
            seen["ok_times"].append(now)
            return "ok"
        seen["failures"].append((now, f"{status} {answer[:120]!r}" if status else "no answer"))
        return "otherwise" if status is not None else "lost"
    return ask


def copy_slowly(source: str, target: str, seconds: float, pieces: int = 10) -> None:
    """Copies a version folder with its largest file written in `pieces` over `seconds`:
    saved_model.pb is there from the start, so a polling server sees a half-written version."""
    sizes = {os.path.join(folder, name): os.path.getsize(os.path.join(folder, name))
             for folder, _, names in os.walk(source) for name in names}
    largest = max(sizes, key=sizes.get)
    shutil.copytree(source, target, ignore=lambda folder, names: [n for n in names
                                                                  if os.path.join(folder, n) == largest])
    with open(largest, "rb") as f:
        data = f.read()
    with open(os.path.join(target, os.path.relpath(largest, source)), "wb") as f:
        for k in range(pieces):
            f.write(data[k * len(data) // pieces:(k + 1) * len(data) // pieces])
            f.flush()
            time.sleep(seconds / pieces)


def run(export_base: str, seconds: float, clients: int, work: str) -> dict:
    base, second = os.path.join(work, "kerasbert"), os.path.join(work, "second")
    source = copy_of_newest(export_base, base)
    shutil.copytree(os.path.join(base, "1"), os.path.join(second, "1"))
    config_file = os.path.join(work, "models.config")
    Path(config_file).write_text(model_config({"kerasbert": base}))
    with LocalServer("kerasbert", config_file=config_file, log_path=os.path.join(work, "server.log"),
                     extra_flags=["--model_config_file_poll_wait_seconds=1", "--load_retry_interval_micros=2000000",
                                  *BATCHING]) as server:
        load_seconds = seconds_until_served(server)
        print(f"== serving version 1 after {load_seconds:.1f} s; {clients} clients for {seconds:.0f} s", flush=True)
        seen, events, ran = {"ok_times": [], "failures": [], "bad_answers": []}, [], {}
        start, stop = time.monotonic(), threading.Event()
        clients_run = threading.Thread(target=lambda: ran.update(run_clients(
            clients, 0, lambda: http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=30),
            asker(start, seen), requests_of, stop=stop)), daemon=True)
        clients_run.start()

        def fault(name: str, detail: str, pause: float) -> None:
            """After `pause` of --seconds with nothing new happening."""
            time.sleep(pause * seconds)
            events.append({"fault": name, "at_s": round(time.monotonic() - start, 2),
                           "server_up": server.process.poll() is None, "detail": detail})
            print(f"   {events[-1]['at_s']:6.1f} s  {name}: {detail}", flush=True)

        fault("slow_copy", f"version 2 written over {seconds / 6:.0f} s, saved_model.pb first", 0.05)
        copy_slowly(source, os.path.join(base, "2"), seconds / 6)
        events[-1]["new_version_served_after_s"] = seconds_until_served(server, 2)
        fault("delete_served", "the folder of version 2, the one being served, removed", 0.05)
        shutil.rmtree(os.path.join(base, "2"))
        fault("corrupt", "version 3 with a garbage saved_model.pb", 0.1)
        os.makedirs(os.path.join(base, "3"))
        Path(base, "3", "saved_model.pb").write_text("garbage")
        fault("config_change", "models.config: model 'second' added, kerasbert's policy latest 2", 0.1)
        Path(config_file).write_text(model_config({"kerasbert": base, "second": second},
                                                  " model_version_policy { latest { num_versions: 2 } }"))
        events[-1]["second_model_served_after_s"] = seconds_until_served(server, model="second")
        fault("config_broken", "models.config rewritten with a syntax error", 0.05)
        Path(config_file).write_text("model_config_list { config {{ ")
        fault("remove_corrupt", "version 3 removed and models.config repaired, so the server can restart", 0.05)
        shutil.rmtree(os.path.join(base, "3"))
        Path(config_file).write_text(model_config({"kerasbert": base, "second": second}))
        fault("kill", "SIGKILL, then the same command started again", 0.05)
        server.process.kill()
        server.process.wait()
        restart_began = events[-1]["killed_at_s"] = round(time.monotonic() - start, 2)
        server.start()
        # The window ends at the new process's first answer: one the old process gave just
        # before its death (a client may count it a moment later) must not end it.
        started_again = time.monotonic() - start
        events[-1]["serving_again_after_s"] = seconds_until_served(server)
        time.sleep(max(seconds * 0.1, start + seconds - time.monotonic()))
        stop.set()
        clients_run.join()
        up_at_end = server.process.poll() is None

    first_ok_after = min((t for t in seen["ok_times"] if t > started_again), default=float("inf"))
    window = (restart_began, first_ok_after)
    outside = [f for f in seen["failures"] if not window[0] <= f[0] <= window[1] + 5]  # + retries in flight
    gaps = sorted(seen["ok_times"])
    longest_gap = max((b - a for a, b in zip(gaps, gaps[1:])), default=0.0)
    good = {kind: ran["outcomes"].get(kind, 0) for kind in ("ok", "otherwise", "lost")}
    bad = {kind: ran["outcomes"].get("bad: " + kind, 0) for kind in ("4xx_with_error_body", "no_answer", "other")}
    return {"seconds": round(time.monotonic() - start, 1), "clients": clients, "events": events,
            "good_requests": {"sent": sum(good.values()), **good}, "bad_requests": {"sent": sum(bad.values()), **bad},
            "first_bad_answers": seen["bad_answers"], "restart_window_s": round(window[1] - window[0], 2),
            "good_failed_or_lost_outside_restart": len(outside), "first_failures_outside": outside[:5],
            "good_failed_or_lost_in_restart": len(seen["failures"]) - len(outside),
            "longest_gap_without_200_s": round(longest_gap, 2), "server_up_at_end": up_at_end,
            "first_load_s": load_seconds}


def main(argv=None) -> int:
    args = command_line("faults", __doc__, 60.0, "Length of the client run.").parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kerasbert-faults-") as work:
        results = run(args.export_base, args.seconds, args.clients, work)
        shutil.copy(os.path.join(work, "server.log"), os.path.join(args.output_dir, "server.log"))
    print(save_results(args.output_dir, results, "benchmarks.faults", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
