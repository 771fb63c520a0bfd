"""This checkout's server against another checkout's, in one run: did a change cost speed?

    git worktree add ../before <commit>
    python -m benchmarks.serving_versions --peer_checkout ../before --export_base saved_models/kerasbert

Both checkouts' `python -m serving` serve a copy of the newest version under
--export_base at once. They are loaded in turn, `--rounds` times: one client without
batching (p50 latency, beside the SavedModel called in process, the floor), then 32
clients with batching (serving/batching.config of each checkout), `--seconds` per
slice, so the machine's drift falls on both alike. Reported: medians of each, and the two
ratios bench-serving watches, per checkout: p50 at 1 client over the in-process call,
and requests/s at 32 clients with batching over without. Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks.serving import load


def start_server(checkout: str, base: str, batching: bool):
    """`python -m serving` of `checkout`; returns (process, REST port)."""
    from serving.process import free_port

    rest_port = free_port()
    flags = ["--enable_batching", "--batching_parameters_file=serving/batching.config"] if batching else []
    process = subprocess.Popen([sys.executable, "-m", "serving", f"--port={free_port()}", f"--rest_api_port={rest_port}",
                                "--model_name=kerasbert", f"--model_base_path={base}", *flags],
                               cwd=checkout, env={**os.environ, "PYTHONPATH": checkout, "TF_CPP_MIN_LOG_LEVEL": "3"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, rest_port


def wait_until_serving(port: int, process, timeout: float = 180) -> None:
    import http.client

    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError("a server exited before serving")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/v1/models/kerasbert")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("a server did not come up")


def render_markdown(results: dict) -> str:
    lines = ["# This checkout's server against another's, loaded in turn", "",
             f"Command: `{results['command']}`  ", f"Machine: {results['machine']}  ",
             f"Peer checkout: {results['peer_checkout']}", "",
             "| server | p50 ms at 1 client, no batching | / in-process call | requests/s at 32 clients, no batching "
             "| with batching | batching gain |", "|---|---:|---:|---:|---:|---:|"]
    floor = statistics.median(results["in_process_ms"])
    for name in ("this", "peer"):
        run = results[name]
        one, off, on = (statistics.median(run[k]) for k in ("one_client_p50_ms", "rps_off", "rps_on"))
        lines.append(f"| {name} | {one:.2f} | {one / floor:.3f} | {off:.1f} | {on:.1f} | {on / off:.2f} |")
    lines += ["", f"In-process call (floor), median of {len(results['in_process_ms'])} slices: {floor:.2f} ms. "
              "Each cell is the median of its slices: " + "; ".join(
                  f"{name} {key} " + ", ".join(f"{v:.1f}" for v in results[name][key])
                  for name in ("this", "peer") for key in ("one_client_p50_ms", "rps_on")) + ".", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    from benchmarks.results import save_results
    from benchmarks.serving import in_process_ms, private_copy_of_newest

    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving_versions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer_checkout", required=True, help="Another checkout of this repository.")
    parser.add_argument("--export_base", default="saved_models/kerasbert", help="Exported model base path.")
    parser.add_argument("--output_dir", default="runs/bench-serving-versions", help="Results folder.")
    parser.add_argument("--rounds", type=int, default=4, help="Turns each server is loaded.")
    parser.add_argument("--seconds", type=float, default=8.0, help="Length of each slice.")
    args = parser.parse_args(argv)
    copy = private_copy_of_newest(args.export_base, "kerasbert-bench-versions-")
    if copy is None:
        return 2
    base = copy[0]
    checkouts = {"this": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                 "peer": os.path.abspath(args.peer_checkout)}
    servers = {(name, batching): start_server(checkout, base, batching)
               for name, checkout in checkouts.items() for batching in (False, True)}
    results = {"peer_checkout": checkouts["peer"], "in_process_ms": [],
               **{name: {"one_client_p50_ms": [], "rps_off": [], "rps_on": []} for name in checkouts}}
    try:
        for process, port in servers.values():
            wait_until_serving(port, process)
            load(port, 4, 3)  # warm up
        for round_ in range(args.rounds):
            print(f"== round {round_ + 1} of {args.rounds}", flush=True)
            results["in_process_ms"].append(in_process_ms(os.path.join(base, "1"), calls=100))
            for name in checkouts:
                off_port, on_port = servers[(name, False)][1], servers[(name, True)][1]
                results[name]["one_client_p50_ms"].append(load(off_port, 1, args.seconds)["p50_ms"])
                results[name]["rps_off"].append(load(off_port, 32, args.seconds)["requests_per_second"])
                results[name]["rps_on"].append(load(on_port, 32, args.seconds)["requests_per_second"])
    finally:
        for process, _ in servers.values():
            process.terminate()
        for process, _ in servers.values():
            process.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    os.makedirs(args.output_dir, exist_ok=True)
    save_results(args.output_dir, results, "benchmarks.serving_versions", render_markdown)
    print(render_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
