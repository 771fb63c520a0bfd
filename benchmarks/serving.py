"""Serving load benchmark: the exported model's `sentiment` signature behind `python -m serving`.

    python -m benchmarks.serving --export_base saved_models/kerasbert [--seconds 60] [--clients 32]
        [--cold_starts 3] [--cold_start_only]

Keep-alive REST clients, batching off and on (a new version dropped in halfway), the server
against the model's own batch-32 calls in process and at the batch it forms; first, the server's
start to AVAILABLE against a bare load + one call in a fresh process; docs/benchmarks.md tells more. Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.results import bench_parser, save_results
from serving.process import LocalServer
from serving.source import versions_on_disk

TITLE = "Serving benchmark (sentiment signature, REST)"  # of results.md
SENTENCES = ["a gripping , funny and moving film .", "the plot is thin and the acting is worse .",
             "an ordinary thriller with one great scene .", "I have rarely been this bored in a cinema ."]


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run_clients(clients: int, seconds: float, connect, ask, sentences_of, on_half_time=None, good: str = "ok",
                stop: threading.Event | None = None) -> dict:
    """`clients` threads for `seconds` (or, with `stop`, until it is set), each on a connection of
    its own (`connect()`) asking its own sentences (`sentences_of(index)`) in turn: `ask(connection,
    sentence)` says how each went, `good` or what went wrong; `on_half_time()` runs halfway.
    Returns the count of each outcome and the latency of the `good` ones."""
    tally, latencies, lock = collections.Counter(), [], threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(index):
        connection, own, i = connect(), sentences_of(index), 0
        while not stop.is_set() if stop else time.perf_counter() < stop_at:
            started = time.perf_counter()
            outcome = ask(connection, own[i % len(own)])
            i += 1
            with lock:
                tally[outcome] += 1
                if outcome == good:
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    if on_half_time is not None:
        time.sleep(seconds / 2)
        on_half_time()
    for thread in threads:
        thread.join()
    return {"seconds": time.perf_counter() - started, "sent": sum(tally.values()), "outcomes": dict(tally),
            "p50_ms": 1000 * percentile(latencies, 0.5), "p99_ms": 1000 * percentile(latencies, 0.99)}


def post_sentence(connection: http.client.HTTPConnection, sentence: str) -> tuple[int, bytes]:
    """(status, body) of one sentence sent to kerasbert's `sentiment` signature."""
    connection.request("POST", "/v1/models/kerasbert:predict",
                       json.dumps({"signature_name": "sentiment", "instances": [sentence]}),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read()


def answered(connection: http.client.HTTPConnection, sentence: str, judge=lambda body: "ok") -> str:
    """`ask` for `load`: `judge(body)` of a 200 ("ok"), else the status or the failure."""
    try:
        status, body = post_sentence(connection, sentence)
        return judge(body) if status == 200 else f"status {status}"
    except (OSError, http.client.HTTPException, ValueError) as error:
        connection.close()  # the next request connects again
        return f"failed: {type(error).__name__}"


def load(port: int, clients: int, seconds: float, on_half_time=None) -> dict:
    """`clients` keep-alive REST clients for `seconds`, each starting at its own one of SENTENCES."""
    run = run_clients(clients, seconds, lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=30), answered,
                      lambda index: SENTENCES[index % len(SENTENCES):] + SENTENCES[:index % len(SENTENCES)],
                      on_half_time)
    return {"clients": clients, **run, "requests_per_second": run["outcomes"].get("ok", 0) / run["seconds"]}


class InProcessModel:
    """The `sentiment` signature called in process on batches of `batch` of the load's
    sentences: what the server's batching could reach if HTTP, JSON and hand-offs took no
    time. `rate()` is measured next to each server run it is set against, so that what else
    the machine does weighs on both alike."""

    def __init__(self, path: str, batch: int = 32):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401

        self.signature = tf.saved_model.load(path).signatures["sentiment"]
        self.text, self.batch = tf.constant([SENTENCES[i % len(SENTENCES)] for i in range(batch)]), batch
        self.rate(5)

    def rate(self, calls: int = 30) -> float:
        """Sentences/s over `calls` calls."""
        start = time.perf_counter()
        for _ in range(calls):
            self.signature(text=self.text)["label"].numpy()
        return calls * self.batch / (time.perf_counter() - start)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def histogram_mean(page: str, name: str) -> float:
    """sum / count of a histogram in a Prometheus text page."""
    values = {sample.name: sample.value for family in text_string_to_metric_families(page) for sample in family.samples}
    return values[name + "_sum"] / values[name + "_count"] if values.get(name + "_count") else float("nan")


def drop_new_version(base: str, port: int, result: dict) -> None:
    """Copies version 1 under `base` in as the next version (built aside and renamed, as an
    export is), then records in `result` when a predict request addressed to it is first
    answered."""
    version = int(os.path.basename(newest_version(base))) + 1
    shutil.copytree(os.path.join(base, "1"), os.path.join(base, ".building"))
    dropped_at = time.perf_counter()
    os.rename(os.path.join(base, ".building"), os.path.join(base, str(version)))
    body = json.dumps({"signature_name": "sentiment", "instances": [SENTENCES[0]]}).encode()
    url = f"http://127.0.0.1:{port}/v1/models/kerasbert/versions/{version}:predict"
    while time.perf_counter() < dropped_at + 30:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, body), timeout=10) as r:
                if "predictions" in json.loads(r.read()):
                    result["new_version_served_after_s"] = time.perf_counter() - dropped_at
                    return
        except OSError:  # 404 until the version is loaded
            pass
        time.sleep(0.05)


BATCHING = ["--enable_batching", "--batching_parameters_file=serving/batching.config"]
MONITORING_PATH = "/monitoring/prometheus/metrics"  # the batching run's, for the batch size it forms
MODES = (  # results key, server flags
    ("no_batching", []),
    ("batching", BATCHING + ["--monitoring_config_file={base}/monitoring.config"]),
    ("batching_standby", BATCHING + ["--warm_standby"]),
)


def model_at_served_batch(base: str, in_process: InProcessModel, results: dict) -> dict:
    """The model in process on batches of the size the batching server formed (its mean, from
    its metrics page), beside its batch-32 rate: the server's ratio to the model set against
    what batches of that size can reach."""
    mean = results["batching"]["mean_batch_size"]
    if not mean >= 1:  # no batch was recorded
        return {}
    batch = round(mean)
    rate_32, rate_served = in_process.rate(), InProcessModel(os.path.join(base, "1"), batch).rate(max(30, 960 // batch))
    return {"batch": batch, "sentences_per_second": {"32": rate_32, str(batch): rate_served},
            "server_over_it_median": statistics.median(results["batching"]["ratio_runs"]) * rate_32 / rate_served}


def newest_version(export_base: str, required: bool = False) -> str | None:
    """The path of the highest version under `export_base` the server would load; without one,
    None, or with `required` an exit with a message."""
    versions = versions_on_disk(export_base)
    if required and not versions:
        raise SystemExit(f"error: no exported version under {export_base}; run make demo (or pipelines.export) first")
    return os.path.join(export_base, versions[max(versions)]) if versions else None


def copy_of_newest(export_base: str, base: str) -> str:
    """Copies the newest version under `export_base` to `base`/1 (the serving benchmarks add
    versions and must not touch the user's exports); returns the version copied."""
    newest = newest_version(export_base, required=True)
    shutil.copytree(newest, os.path.join(base, "1"))
    return newest


def model_config(models: dict[str, str], policy: str = "") -> str:
    """A --model_config_file serving {name: base path}; `policy` the kerasbert model's version policy."""
    entries = "".join(f' config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow"'
                      f'{policy if name == "kerasbert" else ""} }}' for name, path in models.items())
    return f"model_config_list {{{entries} }}\n"


def command_line(name: str, doc: str, seconds: float, seconds_help: str) -> argparse.ArgumentParser:
    """The serving benchmarks' shared flags: --export_base, --output_dir (runs/bench-`name`),
    --seconds, --clients."""
    parser = bench_parser(name, doc, data_dir=False)
    parser.add_argument("--export_base", default="saved_models/kerasbert", help="Exported versions (newest served).")
    parser.add_argument("--seconds", type=float, default=seconds, help=seconds_help)
    parser.add_argument("--clients", type=int, default=32, help="Concurrent keep-alive REST clients.")
    return parser


# A bare load of the export in a fresh process, what a server's start is set against.
BARE_LOAD = """import sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 (its ops)
signature = tf.saved_model.load(sys.argv[1]).signatures["sentiment"]
signature(text=tf.constant([sys.argv[2]]))["label"].numpy()
"""


def cold_starts(base: str, repeats: int) -> dict:
    """Seconds from a fresh `python -m serving`'s start to the model AVAILABLE (loaded and
    its warm-up requests replayed), and from a fresh Python's start to the end of a bare
    `tf.saved_model.load` + one `sentiment` call of the same version, `repeats` times each,
    a server start then a bare load, so that the machine's load weighs on both of a pair alike;
    the median of the pairs' ratios."""
    server_s, bare_s = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        with LocalServer("kerasbert", base) as server:
            server.wait_for_version()
            server_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", BARE_LOAD, os.path.join(base, "1"), SENTENCES[0]], check=True,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        bare_s.append(time.perf_counter() - started)
    ratio = statistics.median(server / bare for server, bare in zip(server_s, bare_s))
    print(f"   cold start: server to AVAILABLE {statistics.median(server_s):.1f} s, bare load + one call "
          f"{statistics.median(bare_s):.1f} s (medians of {repeats}); pairs' median ratio {ratio:.2f}", flush=True)
    return {"server_to_available_s": server_s, "bare_load_and_call_s": bare_s, "server_over_bare_median": ratio}


def main(argv=None) -> int:
    parser = command_line("serving", __doc__, 60.0, "Length of each 32-client run.")
    parser.add_argument("--cold_starts", type=int, default=3,
                        help="Server starts (to AVAILABLE) set against bare loads + one call, each this many times.")
    parser.add_argument("--cold_start_only", action="store_true", help="Measure the cold starts only (no load runs).")
    args = parser.parse_args(argv)
    base = tempfile.mkdtemp(prefix="kerasbert-bench-serving-")
    export = copy_of_newest(args.export_base, base)
    os.makedirs(args.output_dir, exist_ok=True)
    if args.cold_start_only:
        results = {"export": export, "cold_start": cold_starts(base, args.cold_starts)}
        shutil.rmtree(base, ignore_errors=True)
        print(save_results(args.output_dir, results, "benchmarks.serving", TITLE))
        return 0
    with open(os.path.join(base, "monitoring.config"), "w") as config:  # beside the versions, not one
        config.write(f'prometheus_config {{ enable: true path: "{MONITORING_PATH}" }}')
    in_process = InProcessModel(os.path.join(base, "1"))
    results = {"export": export, "cold_start": cold_starts(base, args.cold_starts),
               "in_process_batch_sentences_per_second": in_process.rate(60)}
    for key, flags in MODES:
        with LocalServer("kerasbert", base, extra_flags=[flag.format(base=base) for flag in flags]) as server:
            server.wait_for_version()
            if "--warm_standby" in flags:
                time.sleep(10)  # the standby copy loads in the background; keep it out of the latencies
            port = server.rest_port
            load(port, 4, 5)  # warm up (traces, connections)
            swap = {}
            dropper = threading.Thread(target=drop_new_version, args=(base, port, swap))
            server_cpu, client_cpu = cpu_seconds(server.process.pid), time.process_time()
            many = load(port, args.clients, args.seconds, dropper.start)
            answered_ok = max(many["outcomes"].get("ok", 0), 1)
            many["server_cpu_per_request_s"] = (cpu_seconds(server.process.pid) - server_cpu) / answered_ok
            many["client_cpu_per_request_s"] = (time.process_time() - client_cpu) / answered_ok
            dropper.join()
            results[key] = {"many_clients": many, **swap}
            if key == "batching":  # three runs of the server over the model in process, measured just before and after
                runs = results[key]["ratio_runs"] = []
                for _ in range(3):
                    before = in_process.rate()
                    runs.append(load(port, args.clients, args.seconds / 2)["requests_per_second"]
                                / statistics.mean([before, in_process.rate()]))
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{MONITORING_PATH}", timeout=10) as page:
                    results[key]["mean_batch_size"] = histogram_mean(
                        page.read().decode(), ":tensorflow:serving:batching_session:processed_batch_size")
            print(f"   {key}: {many['requests_per_second']:.0f} req/s, p99 {many['p99_ms']:.0f} ms, "
                  f"{many['outcomes']}, new version in {swap.get('new_version_served_after_s', -1):.2f} s", flush=True)
    results["model_at_served_batch"] = model_at_served_batch(base, in_process, results)
    shutil.rmtree(base, ignore_errors=True)
    off, on = results["no_batching"]["many_clients"], results["batching"]["many_clients"]
    results["ratios"] = {  # README's serving figures
        "batching_on_over_off": on["requests_per_second"] / off["requests_per_second"],
        "server_over_in_process_median": statistics.median(results["batching"]["ratio_runs"])}
    print(save_results(args.output_dir, results, "benchmarks.serving", TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
