"""kerasbert exports of one model, side by side in one process: the `sentiment` signature on the
SST-5 dev sentences, the exports asked in turn for each call (the machine's drift hits all alike), for
comparing export options (`--precision`, `--xla`) without the whole of `make bench-inference`.

    python -m benchmarks.exports_side_by_side fp32=runs/bench-inference/export/fp32/1 \\
        xla=/tmp/xla/1 --output_dir runs/bench-inference   # the run whose dev sentences are read
    python -m benchmarks.exports_side_by_side fp32=... --serve fp32 --one_thread   # and served

`--serve NAME` also serves that export with `python -m serving` and times it over REST and gRPC
(NAME_rest, NAME_grpc: the client's whole round trip), and with `--one_thread` once more from a
server with one thread a pool (`--tensorflow_intra_op_parallelism=1
--tensorflow_inter_op_parallelism=1`: NAME_rest_1thread, NAME_grpc_1thread), all interleaved.

Prints a markdown table: batch 1 p50 and p90 (ms, --sentences sentences one a call, --rounds times)
and the process's CPU ms a batch-1 call (p50: less swayed by the machine's other load than the wall
clock), batch 32 sentences/s (the median of --batches batches, twice), the graph nodes a session
runs for one batch-1 call (as TF Serving runs the SavedModel: after Grappler, the ops executed),
and each export's largest difference from the first one's probabilities at batch 1.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from benchmarks.inference import SIGNATURE, dev_sentences
from benchmarks.results import bench_parser


def interleaved_seconds(calls: dict, inputs: list, rounds: int, clock=time.perf_counter) -> dict[str, list[float]]:
    """{name: the seconds of each call by `clock`}, every input given to each call in turn, `rounds` times."""
    seconds = {name: [] for name in calls}
    for _ in range(rounds):
        for item in inputs:
            for name, call in calls.items():
                started = clock()
                call(item)
                seconds[name].append(clock() - started)
    return seconds


def nodes_run(path: str, text: str) -> int:
    """The graph nodes a session on the SavedModel at `path` runs for one `sentiment` call on `text`."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    graph, metadata = tf.Graph(), config_pb2.RunMetadata()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def[SIGNATURE]
        feeds, fetch = {signature.inputs["text"].name: [text]}, signature.outputs["probabilities"].name
        session.run(fetch, feeds)  # Grappler's rewrites happen on the first run
        session.run(fetch, feeds, options=config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE),
                    run_metadata=metadata)
    return sum(len(device.node_stats) for device in metadata.step_stats.dev_stats)


def main(argv=None) -> int:
    parser = bench_parser("exports_side_by_side", __doc__)
    parser.set_defaults(output_dir="runs/bench-inference")  # bench-inference's run: its dev sentences
    parser.add_argument("exports", nargs="+", help="NAME=PATH of an export version folder; the first is the reference.")
    parser.add_argument("--sentences", type=int, default=40, help="Dev sentences timed at batch 1.")
    parser.add_argument("--rounds", type=int, default=3, help="Passes over them.")
    parser.add_argument("--batches", type=int, default=6, help="Batches of 32 timed.")
    parser.add_argument("--serve", action="append", default=[], help="NAME of an export also timed served.")
    parser.add_argument("--one_thread", action="store_true", help="Served ones also with one thread a pool.")
    args = parser.parse_args(argv)
    exports = dict(entry.split("=", 1) for entry in args.exports)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    texts = dev_sentences(os.path.join(args.output_dir, "finetune"), args.data_dir)[0]
    signatures = {name: tf.saved_model.load(path).signatures[SIGNATURE] for name, path in exports.items()}
    calls = {name: (lambda text, signature=signature: signature(text=text)["probabilities"].numpy())
             for name, signature in signatures.items()}
    servers, paths = [], dict(exports)
    try:
        served = served_calls(args, exports, servers, paths)
        table(args, {**calls, **served}, paths, texts, set(served))
    finally:
        for server in servers:
            server.stop()
    return 0


def served_calls(args, exports: dict, servers: list, paths: dict) -> dict:
    """{NAME_protocol[_1thread]: a call} for the exports in --serve, their servers started into
    `servers` (the caller stops them) and their paths into `paths`."""
    from serving.client import ServingClient
    from serving.process import LocalServer

    one_thread = ["--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=1"]
    calls = {}
    for name in args.serve:
        for suffix, flags in [("", [])] + ([("_1thread", one_thread)] if args.one_thread else []):
            base = os.path.dirname(os.path.abspath(exports[name]))
            server = LocalServer(f"{name}{suffix}", base, extra_flags=flags,
                                 log_path=os.path.join(args.output_dir, f"server-{name}{suffix}.log"))
            servers.append(server.start())
            server.wait_for_version(int(os.path.basename(exports[name])))
            for protocol in ("rest", "grpc"):
                client = ServingClient(f"{name}{suffix}", rest_port=server.rest_port, grpc_port=server.grpc_port,
                                       protocol=protocol, timeout=120)
                calls[f"{name}_{protocol}{suffix}"] = (
                    lambda text, client=client: np.array(client.predict(
                        SIGNATURE, {"text": [t.decode() for t in text.numpy()]})["probabilities"]))
                paths[f"{name}_{protocol}{suffix}"] = exports[name]
    return calls


def table(args, calls: dict, paths: dict, texts: list[str], served: set) -> None:
    """Times `calls` interleaved (those in `served` without a CPU time: it is their server's) and prints the table."""
    import tensorflow as tf

    one = [tf.constant([text]) for text in texts[:args.sentences]]
    batches = [tf.constant(texts[i:i + 32]) for i in range(0, 32 * args.batches, 32)]
    first = {name: [call(text) for text in one] for name, call in calls.items()}  # traced, warm
    for call in calls.values():
        call(batches[0])
    batch_1 = interleaved_seconds(calls, one, args.rounds)
    in_process = {name: call for name, call in calls.items() if name not in served}
    batch_1_cpu = interleaved_seconds(in_process, one, 1, time.process_time)  # a server's CPU is not ours
    batch_32 = interleaved_seconds(calls, batches, 2)
    nodes = {path: nodes_run(path, texts[0]) for path in set(paths.values())}
    reference = first[next(iter(calls))]
    print(f"load (1-minute average) at the end: {os.getloadavg()[0]:.1f}")
    print("| export | batch 1 p50 ms | batch 1 p90 ms | batch 1 CPU ms | batch 32 sentences/s | nodes run, batch 1 "
          "| max diff, batch 1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in calls:
        difference = max(float(np.abs(a - b).max()) for a, b in zip(first[name], reference))
        print(f"| {name} | {statistics.median(batch_1[name]) * 1e3:.2f} | {np.percentile(batch_1[name], 90) * 1e3:.2f} "
              f"| {f'{statistics.median(batch_1_cpu[name]) * 1e3:.2f}' if name in batch_1_cpu else '-'} "
              f"| {32 / statistics.median(batch_32[name]):.0f} "
              f"| {nodes[paths[name]]:,} | {difference:.1e} |")


if __name__ == "__main__":
    sys.exit(main())
