"""Pretraining benchmark (docs/benchmarks.md tells the figures):

    python -m benchmarks.pretrain --output_dir runs/bench-pretrain [--parts throughput scratch continue]

throughput: the mini model's tokens/s fed by the tf.data pipeline against the same batches in
memory, XLA off and on, against a 2048x2048 matmul's GFLOP/s; scratch: pretrain_mini.json from
scratch; continue: continue_minilm_tasks.json from MiniLM; both scored on held-out text.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from benchmarks.results import bench_parser, load_results, render_markdown, save_results
from kerasbert import tokenization
from kerasbert.config import PretrainConfig, load_config
from kerasbert.data.corpus import load_corpora
from kerasbert.models.encoder import build_encoder, minilm_checkpoint
from kerasbert.models.pretrainer import BertPretrainer, pretraining_compile_args
from kerasbert.packing import make_packer
from kerasbert.pretraining.dataset import examples_dataset, pretraining_dataset
from kerasbert.pretraining.inputs import make_masker, tokenize_documents
from kerasbert.pretraining.pairs import build_pairs
from kerasbert.pretraining.run import resolve_tokenizer, run_pretraining
from kerasbert.training.optim import make_optimizer

TITLE = "Pretraining benchmark"  # of results.md
PARTS = ("throughput", "scratch", "continue")


def matmul_gflops(n: int = 2048, repeats: int = 5, iterations: int = 10) -> list[float]:
    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    matmul = tf.function(lambda: tf.matmul(a, b))
    matmul().numpy()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            out = matmul()
        out.numpy()
        rates.append(2 * n**3 * iterations / (time.perf_counter() - start) / 1e9)
    return rates


def training_flops_per_token(layers, hidden, intermediate, seq, vocab, predictions) -> float:
    """Analytic training FLOPs per input token (forward x 3 for forward + backward)."""
    per_layer = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)  # projections + FFN
    attention = 2 * 2 * seq * hidden  # scores and weighted sum
    mlm = predictions / seq * 2 * (hidden * hidden + hidden * vocab)  # head on masked slots
    return 3 * (layers * (per_layer + attention) + mlm)


def time_steps(model, dataset, steps: int, warmup: int = 3) -> float:
    """Seconds per step over `steps` steps, timed after `warmup` steps inside one fit call
    (so iterator start-up and tracing are excluded)."""
    marks = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == warmup or batch + 1 == warmup + steps:
                marks.append(time.perf_counter())

    model.fit(dataset, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[Timer()])
    return (marks[1] - marks[0]) / steps


def part_throughput(data_dir: str, output_dir: str, steps: int = 20, repeats: int = 3) -> dict:
    config = load_config(PretrainConfig, "pipelines/configs/pretrain_mini.json")
    documents = load_corpora(config.data.sources, data_dir)
    # The scratch part's vocabulary if it ran, else one trained here and not saved (that part trains its own).
    tokenizer = resolve_tokenizer(config, documents, None, os.path.join(output_dir, "scratch"), is_chief=False)
    ids = tokenization.special_token_ids(tokenizer)
    seq, batch = config.model.max_sequence_length, config.train.batch_size
    pairs = build_pairs(tokenize_documents(tokenizer, documents), seq, np.random.default_rng(0))
    pipeline = pretraining_dataset(examples_dataset(pairs), make_packer(seq, ids),
                                   make_masker(config, tokenizer), batch, ids["pad"])
    in_memory = pipeline.take(steps + 5).cache().repeat()
    for _ in in_memory.take(steps + 5):  # fill the cache: batches are now pre-made
        pass

    peak = matmul_gflops()
    flops = training_flops_per_token(config.model.num_layers, config.model.hidden_dim,
                                     config.model.intermediate_dim, seq, tokenizer.vocabulary_size(),
                                     config.data.mask_selection_length)
    result = {"matmul_2048_fp32_gflops_median": statistics.median(peak),
              "matmul_2048_fp32_gflops_all": peak, "training_flops_per_token": flops,
              "batch_size": batch, "sequence_length": seq, "timed_steps": steps, "repeats": repeats}
    for jit in (False, True):
        model = BertPretrainer(build_encoder(config.model, tokenizer.vocabulary_size()),
                               config.data.mask_selection_length)
        model.compile(**pretraining_compile_args(model, make_optimizer(config.train), jit))
        times = {"pipeline": [], "in_memory": []}
        for _ in range(repeats):  # alternate, so machine noise hits both alike
            times["pipeline"].append(time_steps(model, pipeline, steps))
            times["in_memory"].append(time_steps(model, in_memory, steps))
        key = "xla" if jit else "no_xla"
        pipeline_tps = batch * seq / statistics.median(times["pipeline"])
        memory_tps = batch * seq / statistics.median(times["in_memory"])
        result[key] = {
            "pipeline_tokens_per_second": pipeline_tps,
            "in_memory_tokens_per_second": memory_tps,
            "pipeline_over_in_memory": pipeline_tps / memory_tps,
            "fraction_of_matmul_peak": pipeline_tps * flops / 1e9 / statistics.median(peak),
            "step_seconds": times,
        }
        print(f"   {key}: pipeline {pipeline_tps:.0f} tok/s, in-memory {memory_tps:.0f} tok/s "
              f"(ratio {pipeline_tps / memory_tps:.3f})", flush=True)
    return result


def part_pretraining(data_dir: str, output_dir: str, part: str) -> dict:
    """`scratch` or `continue`: the part's config trained by `run_pretraining` into output_dir/part."""
    config_file = {"scratch": "pipelines/configs/pretrain_mini.json",
                   "continue": "pipelines/configs/continue_minilm_tasks.json"}[part]
    start = time.perf_counter()
    metrics = run_pretraining(load_config(PretrainConfig, config_file), data_dir, os.path.join(output_dir, part),
                              init_checkpoint=minilm_checkpoint() if part == "continue" else None)
    return {**metrics, "wall_seconds": time.perf_counter() - start, "config": config_file}


def main(argv=None) -> int:
    parser = bench_parser("pretrain", __doc__)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                        help="Which parts to run (default: all).")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir)
    for part in args.parts:
        print(f"== benchmark part: {part}", flush=True)
        results[part] = (part_throughput(args.data_dir, args.output_dir) if part == "throughput"
                         else part_pretraining(args.data_dir, args.output_dir, part))
        save_results(args.output_dir, results, "benchmarks.pretrain", TITLE)
    print(render_markdown(results, TITLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
