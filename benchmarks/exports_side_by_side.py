"""kerasbert exports of one model, side by side in one process: the `sentiment` signature on the
SST-5 dev sentences, the exports asked in turn for each call (the machine's drift hits all alike), for
comparing export options (`--precision`, `--xla`) without the whole of `make bench-inference`.

    python -m benchmarks.exports_side_by_side fp32=runs/bench-inference/export/fp32/1 \\
        xla=/tmp/xla/1 --output_dir runs/bench-inference   # the run whose dev sentences are read

Prints a markdown table: batch 1 p50 and p90 (ms, --sentences sentences one a call, --rounds times),
batch 32 sentences/s (the median of --batches batches, twice), and each export's largest difference
from the first one's probabilities at batch 1.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from benchmarks.inference import SIGNATURE, dev_sentences
from benchmarks.results import bench_parser


def interleaved_seconds(calls: dict, inputs: list, rounds: int) -> dict[str, list[float]]:
    """{name: the seconds of each call}, every input given to each call in turn, `rounds` times."""
    seconds = {name: [] for name in calls}
    for _ in range(rounds):
        for item in inputs:
            for name, call in calls.items():
                started = time.perf_counter()
                call(item)
                seconds[name].append(time.perf_counter() - started)
    return seconds


def main(argv=None) -> int:
    parser = bench_parser("exports_side_by_side", __doc__)
    parser.set_defaults(output_dir="runs/bench-inference")  # bench-inference's run: its dev sentences
    parser.add_argument("exports", nargs="+", help="NAME=PATH of an export version folder; the first is the reference.")
    parser.add_argument("--sentences", type=int, default=40, help="Dev sentences timed at batch 1.")
    parser.add_argument("--rounds", type=int, default=3, help="Passes over them.")
    parser.add_argument("--batches", type=int, default=6, help="Batches of 32 timed.")
    args = parser.parse_args(argv)
    exports = dict(entry.split("=", 1) for entry in args.exports)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    texts = dev_sentences(os.path.join(args.output_dir, "finetune"), args.data_dir)[0]
    signatures = {name: tf.saved_model.load(path).signatures[SIGNATURE] for name, path in exports.items()}
    calls = {name: (lambda text, signature=signature: signature(text=text)["probabilities"])
             for name, signature in signatures.items()}
    one = [tf.constant([text]) for text in texts[:args.sentences]]
    batches = [tf.constant(texts[i:i + 32]) for i in range(0, 32 * args.batches, 32)]
    first = {name: [call(text).numpy() for text in one] for name, call in calls.items()}  # traced, warm
    for call in calls.values():
        call(batches[0])
    batch_1 = interleaved_seconds(calls, one, args.rounds)
    batch_32 = interleaved_seconds(calls, batches, 2)
    reference = first[next(iter(calls))]
    print("| export | batch 1 p50 ms | batch 1 p90 ms | batch 32 sentences/s | max diff, batch 1 |")
    print("|---|---:|---:|---:|---:|")
    for name in calls:
        difference = max(float(np.abs(a - b).max()) for a, b in zip(first[name], reference))
        print(f"| {name} | {statistics.median(batch_1[name]) * 1e3:.2f} | {np.percentile(batch_1[name], 90) * 1e3:.2f} "
              f"| {32 / statistics.median(batch_32[name]):.0f} | {difference:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
