"""Where the time of one batch-1 request goes in kerasbert's export: the pieces of its `sentiment`
signature timed on their own, on the SST-5 dev sentences (~25 tokens), and TensorFlow's profiler's
op-type totals over the whole signature (docs/benchmarks.md).

    python -m benchmarks.inference_profile --precision int8   # after make bench-inference (its run, exports)

Pieces (each the median over the sentences, one at a time): `tokenize` (text -> WordPiece ids),
`pack` (ids -> token_ids, segment_ids, padding_mask, as long as the sentence), `encode` (the packed
tensors -> the [CLS] embedding, over the real tokens only: kerasbert/models/unpadded.py), and the
export's signature (all of it, with the head). `ops` counts the encoder's graph nodes, the while
loop's body (attention) once a layer; `threads` are TensorFlow's intra- and inter-op pools (0: one
a core). Writes runs/bench-inference/profile-<precision>.json and the trace under profile-<precision>/.
"""

from __future__ import annotations

import glob
import os
import statistics
import sys
import time

from benchmarks.inference import SIGNATURE, dev_sentences
from benchmarks.peer_protocol import write_json
from benchmarks.results import bench_parser, machine

COMPUTE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8"}  # bench-inference's exports


def median_ms(call, items) -> float:
    call(items[0])  # traced, warm
    seconds = []
    for item in items:
        started = time.perf_counter()
        call(item)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds) * 1e3


def op_totals(trace_dir: str, top: int = 12) -> list[dict]:
    """The profiler's TensorFlow op types by self time over the traced calls."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin
    import json

    path, = glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.xplane.pb"))
    data, _ = plugin.xspace_to_tools_data([path], "framework_op_stats", {})
    table = json.loads(data)[0]  # a Google Charts DataTable: the host's ops
    columns = [column["id"] for column in table["cols"]]
    rows = [dict(zip(columns, [cell.get("v") if cell else None for cell in row["c"]])) for row in table["rows"]]
    by_type: dict[str, list[float]] = {}
    for row in rows:
        total = by_type.setdefault(row["type"], [0.0, 0])
        total[0] += row["total_self_time"]
        total[1] += row["occurrences"]
    everything = sum(value[0] for value in by_type.values())
    ranked = sorted(by_type.items(), key=lambda item: -item[1][0])[:top]
    return [{"op": name, "self_share": value[0] / everything, "occurrences": value[1]} for name, value in ranked]


def main(argv=None) -> int:
    parser = bench_parser("inference", __doc__)
    parser.add_argument("--sentences", type=int, default=100, help="Dev sentences timed, one a call.")
    parser.add_argument("--precision", default="fp32", choices=tuple(COMPUTE_DTYPES), help="The export profiled.")
    args = parser.parse_args(argv)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    from kerasbert.export import ServingGraph
    from kerasbert.finetuning.load import load_finetuned
    from kerasbert.quantize import serving_precision

    run_dir = os.path.join(args.output_dir, "finetune")
    texts = [tf.constant([text]) for text in dev_sentences(run_dir, args.data_dir)[0][:args.sentences]]
    _, model, preprocessor = load_finetuned(run_dir)
    graph = ServingGraph(model, preprocessor, serving_precision(model.backbone, COMPUTE_DTYPES[args.precision]))
    tokenize = tf.function(graph.tokenize, autograph=False)
    packed = [graph.pack[1](tokenize(text)) for text in texts]
    signature = tf.saved_model.load(os.path.join(args.output_dir, "export", args.precision, "1")).signatures[SIGNATURE]
    nodes = graph.encode.get_concrete_function().graph.as_graph_def()
    found = {
        "precision": args.precision, "tokens_median": statistics.median(int(p[2].shape[1]) for p in packed),
        "ms": {"tokenize": median_ms(tokenize, texts),
               "tokenize_and_pack": median_ms(lambda t: graph.pack[1](tokenize(t)), texts),
               "encode": median_ms(lambda p: graph.encode(*p), packed),
               "signature": median_ms(lambda t: signature(text=t), texts)},
        "ops": {"encode": len(nodes.node) + sum(len(f.node_def) for f in nodes.library.function)},
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
        "machine": machine()}
    trace_dir = os.path.join(args.output_dir, f"profile-{args.precision}")
    tf.profiler.experimental.start(trace_dir)
    for text in texts[:20]:
        signature(text=text)
    tf.profiler.experimental.stop()
    found["op_self_time"] = op_totals(trace_dir)
    write_json(os.path.join(args.output_dir, f"profile-{args.precision}.json"), found)
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
